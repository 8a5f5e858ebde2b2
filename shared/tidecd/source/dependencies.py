"""`helm dependency build` for a fetched chart, done when its snapshot is made, not when it is rendered.

A chart from a repository may list `dependencies` in its `Chart.yaml` without carrying them in
`charts/`. Before the chart's snapshot is stored, every such dependency with an `https://`, `http://` or
`oci://` repository is fetched the same way the chart itself was (index and constraint, or tags; the
archive verified against its digest; the repository's own credentials; the same size limits; only from
repositories the app's project permits) and added as `charts/<name>-<version>.tgz`, which is where `helm
dependency build` puts it. The stored snapshot is then complete, and `helm template` needs no network.
`file://` dependencies are expected inside the chart; `@alias` / named repositories need a helm
repositories file and are refused by name.

A chart committed to git without its dependencies is completed the same way when it is rendered
(`missing_in_directory`, `fetch_missing`: Argo CD runs `helm dependency build` there): the dependencies
come through the same chart snapshots, never through helm itself.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tidecd.base import limits
from tidecd.base.errors import RenderError
from tidecd.clients.store import ObjectStore
from tidecd.config.load import ApplicationSource, redact_repo_url
from tidecd.source import archives, helmrepo, oci
from tidecd.source.archives import Budget

if TYPE_CHECKING:
    from tidecd.source.git import RepoCredentials

MAX_DEPENDENCIES = 50
Credentials = Callable[[str], "RepoCredentials | None"]


def _chart_of(archive: bytes, budget: Budget) -> tuple[str, set[str], bytes | None]:
    """The chart's top directory, its member names and its `Chart.yaml`: one streamed pass over the
    archive, its expanded size charged to `budget` (nothing but `Chart.yaml` is kept)."""
    names: set[str] = set()
    chart_yamls: dict[str, bytes] = {}
    try:
        with archives.open_tar(archive, budget) as tar:
            for member in tar:
                names.add(member.name)
                top, _, rest = member.name.partition("/")
                if rest == "Chart.yaml" and member.isfile():
                    chart_yamls[top] = archives.read_member(tar, member, f"chart archive {member.name}")
    except archives.UNREADABLE as exc:
        raise RenderError(f"chart archive is unreadable: {type(exc).__name__}") from None
    tops = {name.split("/", 1)[0] for name in names}
    if len(tops) != 1:
        raise RenderError("chart archive: expected one top-level chart directory")
    top = tops.pop()
    return top, names, chart_yamls.get(top)


def missing_dependencies(archive: bytes, budget: Budget | None = None) -> list[dict[str, Any]]:
    """The dependencies of the chart's `Chart.yaml` that `charts/` does not hold yet."""
    top, names, chart_yaml = _chart_of(archive, budget or Budget("chart archive"))
    return _missing(top, names, chart_yaml)


def _missing(top: str, names: set[str], chart_yaml: bytes | None) -> list[dict[str, Any]]:
    if chart_yaml is None:
        return []
    meta = yaml.safe_load(chart_yaml) or {}
    deps = meta.get("dependencies") or [] if isinstance(meta, dict) else []
    present = {name.rsplit("/", 1)[-1] for name in names if name.startswith(f"{top}/charts/")}
    present_dirs = {name.split("/")[2] for name in names if name.startswith(f"{top}/charts/")
                    and name.count("/") >= 2}
    return _absent(deps, present, present_dirs)


def _absent(deps: object, present: set[str], present_dirs: set[str]) -> list[dict[str, Any]]:
    """The dependencies (Chart.yaml's list) that `charts/` holds neither as `<name>-*.tgz` nor as `<name>/`."""
    out = []
    for dep in deps if isinstance(deps, list) else []:
        if not isinstance(dep, dict) or not isinstance(dep.get("name"), str):
            continue
        name = dep["name"]
        if name in present_dirs or any(p.startswith(f"{name}-") and p.endswith(".tgz") for p in present):
            continue
        out.append(dep)
    return out


def missing_in_directory(chart_dir: Path, what: str) -> list[dict[str, Any]]:
    """The dependencies a chart directory of a repository lists that its `charts/` lacks, as `helm
    dependency build` reads them: `Chart.yaml`'s (`requirements.yaml`'s for an apiVersion v1 chart), each
    with the version its lock file (`Chart.lock`, `requirements.lock`) pins. `what` names the chart."""
    meta = _yaml_file(chart_dir / "Chart.yaml", f"{what}/Chart.yaml")
    v1 = str(meta.get("apiVersion", "v1")) == "v1"
    deps = meta.get("dependencies")
    lock = _yaml_file(chart_dir / "Chart.lock", f"{what}/Chart.lock")
    if v1 and not deps:
        deps = _yaml_file(chart_dir / "requirements.yaml", f"{what}/requirements.yaml").get("dependencies")
        lock = _yaml_file(chart_dir / "requirements.lock", f"{what}/requirements.lock")
    charts = chart_dir / "charts"
    entries = list(charts.iterdir()) if charts.is_dir() else []
    missing = _absent(deps, {e.name for e in entries if e.is_file()}, {e.name for e in entries if e.is_dir()})
    locked = {(d.get("name"), d.get("repository")): d.get("version") for d in lock.get("dependencies") or []
              if isinstance(d, dict)}
    return [dep | {"version": str(locked[key])} if (key := (dep["name"], dep.get("repository"))) in locked
            and locked[key] else dep for dep in missing]


def _yaml_file(path: Path, what: str) -> dict[str, Any]:
    """A chart's YAML file as a mapping ({} when absent), within the file and YAML bounds."""
    if not path.is_file():
        return {}
    text = limits.read_text(path, what)
    limits.check_yaml(text, what)
    try:
        found = yaml.safe_load(text)
    except yaml.YAMLError:
        raise RenderError(f"{what}: invalid YAML") from None
    if found is not None and not isinstance(found, dict):
        raise RenderError(f"{what}: expected a mapping")
    return found or {}


def fetch_missing(missing: list[dict[str, Any]], store: ObjectStore, credentials: Credentials,
                  permitted: Callable[[str], bool], *, what: str) -> list[tuple[str, bytes]]:
    """`helm dependency build`'s downloads, done by tidecd: each missing dependency with an `https://`,
    `http://` or `oci://` repository resolved (version constraint over the index or tags) and kept as a
    chart snapshot in the store (`source.charts.ChartSnapshots`: verified, bounded, fetched once), as
    `(file name under charts/, archive)`. A repository the project's sourceRepos do not permit is refused
    before anything is fetched; `file://` dependencies are left to the caller (they are in the checkout)."""
    remote = [d for d in missing if str(d.get("repository") or "").startswith(("https://", "http://", "oci://"))]
    if len(remote) > MAX_DEPENDENCIES:
        raise RenderError(f"{what}: {len(remote)} dependencies to fetch; at most {MAX_DEPENDENCIES}")
    for dep in missing:
        repository = str(dep.get("repository") or "")
        if dep in remote and not permitted(repository):
            raise RenderError(f"{what}: dependency {dep['name']}: repository {redact_repo_url(repository)!r} is not "
                              "permitted by the project's sourceRepos; nothing was fetched from it")
        if dep not in remote and not repository.startswith("file://"):
            raise RenderError(f"{what}: dependency {dep['name']} is not in charts/ and "
                              + (f"its repository {repository!r} is a named one (@alias): helm needs a repositories "
                                 "file for it; give the repository's URL" if repository else "names no repository"))
    out = []
    for dep in remote:
        name = dep["name"]
        version, data = fetch_chart(str(dep["repository"]), name, str(dep.get("version") or "*"), store, credentials,
                                    permitted, what=f"{what}: dependency {name}")
        out.append((f"{name}-{version}.tgz", data))
    return out


def fetch_chart(repository: str, name: str, version: str, store: ObjectStore, credentials: Credentials,
                permitted: Callable[[str], bool], *, what: str) -> tuple[str, bytes]:
    """(version, archive) of chart `name` in a helm repository (`https://`, `http://`) or OCI registry
    (`oci://`, the chart at `<repository>/<name>`), `version` an exact version or a constraint, kept as a
    chart snapshot in the store (`source.charts.ChartSnapshots`). Only from a `permitted` repository."""
    # lazy: charts imports this module lazily; here it is needed only when a chart is fetched for a render
    from tidecd.source import charts

    if not repository.startswith(("https://", "http://", "oci://")):
        raise RenderError(f"{what}: repository {repository!r} is not a helm repository or OCI registry URL")
    if not permitted(repository):
        raise RenderError(f"{what}: repository {redact_repo_url(repository)!r} is not permitted by the project's "
                          "sourceRepos; nothing was fetched from it")
    oci_source = repository.startswith("oci://")
    source = ApplicationSource(repo_url=f"{repository.rstrip('/')}/{name}" if oci_source else repository,
                               chart=name, target_revision=version or "*")
    try:
        ref = charts.resolve(source, credentials(repository), store=store)
        data = charts.ChartSnapshots(store).get_or_fetch(ref, credentials(repository), credentials_for=credentials,
                                                         permitted=permitted)
    except RenderError as exc:
        raise RenderError(f"{what} ({redact_repo_url(repository)}): {exc}") from exc
    return ref.version.replace("_", "+"), data


def with_dependencies(archive: bytes, credentials: Credentials,
                      permitted: Callable[[str], bool] = lambda _url: True, *, what: str = "chart archive") -> bytes:
    """The chart archive with every missing remote dependency added under `charts/`. A dependency's
    repository must be `permitted` (the app's project sourceRepos): nothing is fetched from elsewhere.
    The chart's expanded size, and each added dependency's, count against one `TIDECD_MAX_ARCHIVE_BYTES`
    budget (LimitExceeded names `what`), read as streams: a chart that expands past it is refused early."""
    budget = Budget(what)
    top, names, chart_yaml = _chart_of(archive, budget)
    missing = _missing(top, names, chart_yaml)
    if not missing:
        return archive
    if len(missing) > MAX_DEPENDENCIES:
        raise RenderError(f"chart has {len(missing)} dependencies to fetch; at most {MAX_DEPENDENCIES}")
    added: dict[str, bytes] = {}
    for dep in missing:
        name, version, repository = dep["name"], str(dep.get("version") or "*"), str(dep.get("repository") or "")
        if repository.startswith(("https://", "http://", "oci://")) and not permitted(repository):
            raise RenderError(f"dependency {name}: repository {redact_repo_url(repository)!r} is not permitted by "
                              "the project's sourceRepos; nothing was fetched from it")
        data, resolved = _fetch(name, version, repository, credentials)
        try:
            archives.scan(data, budget)  # helm expands it at render time: it counts against the same bound
        except archives.UNREADABLE as exc:
            raise RenderError(f"dependency {name}: chart archive is unreadable: {type(exc).__name__}") from None
        added[f"{top}/charts/{name}-{resolved}.tgz"] = data
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as packed, archives.open_tar(archive, Budget(what)) as tar:
        for member in tar:  # copied through, one member at a time
            packed.addfile(member, tar.extractfile(member) if member.isfile() else None)
        for name, data in sorted(added.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            packed.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _fetch(name: str, version: str, repository: str, credentials: Credentials) -> tuple[bytes, str]:
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
