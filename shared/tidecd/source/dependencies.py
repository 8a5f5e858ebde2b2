"""`helm dependency build` for a fetched chart, done when its snapshot is made, not when it is rendered.

A chart from a repository may list `dependencies` in its `Chart.yaml` without carrying them in
`charts/`. Before the chart's snapshot is stored, every such dependency with an `https://`, `http://` or
`oci://` repository is fetched the same way the chart itself was (index and constraint, or tags; the
archive verified against its digest; the repository's own credentials; the same size limits; only from
repositories the app's project permits) and added as `charts/<name>-<version>.tgz`, which is where `helm
dependency build` puts it. The stored snapshot is then complete, and `helm template` needs no network.
`file://` dependencies are expected inside the chart; `@alias` / named repositories need a helm
repositories file and are refused by name.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import yaml

from tidecd.base.errors import RenderError
from tidecd.config.load import redact_repo_url

if TYPE_CHECKING:
    from tidecd.source.git import RepoCredentials

MAX_DEPENDENCIES = 50
Credentials = Callable[[str], "RepoCredentials | None"]


def _members(archive: bytes) -> tuple[str, dict[str, tuple[tarfile.TarInfo, bytes | None]]]:
    """The chart's top directory and its members."""
    members: dict[str, tuple[tarfile.TarInfo, bytes | None]] = {}
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
            members[member.name] = (member, data)
    tops = {name.split("/", 1)[0] for name in members}
    if len(tops) != 1:
        raise RenderError("chart archive: expected one top-level chart directory")
    return tops.pop(), members


def missing_dependencies(archive: bytes) -> list[dict[str, Any]]:
    """The dependencies of the chart's `Chart.yaml` that `charts/` does not hold yet."""
    top, members = _members(archive)
    chart_yaml = members.get(f"{top}/Chart.yaml")
    if chart_yaml is None or chart_yaml[1] is None:
        return []
    meta = yaml.safe_load(chart_yaml[1]) or {}
    deps = meta.get("dependencies") or [] if isinstance(meta, dict) else []
    present = {name.rsplit("/", 1)[-1] for name in members if name.startswith(f"{top}/charts/")}
    present_dirs = {name.split("/")[2] for name in members if name.startswith(f"{top}/charts/")
                    and name.count("/") >= 2}
    out = []
    for dep in deps if isinstance(deps, list) else []:
        if not isinstance(dep, dict) or not isinstance(dep.get("name"), str):
            continue
        name = dep["name"]
        if name in present_dirs or any(p.startswith(f"{name}-") and p.endswith(".tgz") for p in present):
            continue
        out.append(dep)
    return out


def with_dependencies(archive: bytes, credentials: Credentials,
                      permitted: Callable[[str], bool] = lambda _url: True) -> bytes:
    """The chart archive with every missing remote dependency added under `charts/`. A dependency's
    repository must be `permitted` (the app's project sourceRepos): nothing is fetched from elsewhere."""
    missing = missing_dependencies(archive)
    if not missing:
        return archive
    if len(missing) > MAX_DEPENDENCIES:
        raise RenderError(f"chart has {len(missing)} dependencies to fetch; at most {MAX_DEPENDENCIES}")
    top, members = _members(archive)
    added: dict[str, bytes] = {}
    for dep in missing:
        name, version, repository = dep["name"], str(dep.get("version") or "*"), str(dep.get("repository") or "")
        if repository.startswith(("https://", "http://", "oci://")) and not permitted(repository):
            raise RenderError(f"dependency {name}: repository {redact_repo_url(repository)!r} is not permitted by "
                              "the project's sourceRepos; nothing was fetched from it")
        data, resolved = _fetch(name, version, repository, credentials)
        added[f"{top}/charts/{name}-{resolved}.tgz"] = data
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for _, (member, content) in members.items():
            tar.addfile(member, io.BytesIO(content) if content is not None else None)
        for name, data in sorted(added.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _fetch(name: str, version: str, repository: str, credentials: Credentials) -> tuple[bytes, str]:
    from tidecd.source import helmrepo, oci

    what = f"dependency {name} ({repository or 'no repository'})"
    if repository.startswith("oci://"):
        ref = oci.parse(repository.rstrip("/") + "/" + name)
        creds = credentials(repository)
        registry = oci.Registry(ref, creds, plain_http=bool(creds is not None and creds.force_http))
        tag = oci.resolve_tag(registry.tags(), version, ref.url)
        data, _, is_chart = oci.fetch(registry, tag)
        if not is_chart:
            raise RenderError(f"{what}: {ref.url}:{tag} is not a helm chart")
        return data, tag.replace("_", "+")
    if repository.startswith(("https://", "http://")):
        creds = credentials(repository)
        index = helmrepo.fetch_index(repository, creds)
        entry = helmrepo.choose(index, name, version, repository)
        return helmrepo.download(repository, entry, creds), entry.version
    if repository.startswith("file://") or not repository:
        raise RenderError(f"{what}: not in the chart's charts/ directory (file:// dependencies must be packaged "
                          "with the chart)")
    raise RenderError(f"{what}: named repositories (@alias) need a helm repositories file; use the URL")
