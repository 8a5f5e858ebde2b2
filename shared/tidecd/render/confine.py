"""Kustomizations checked against the checkout before kustomize runs: nothing remote, nothing outside.

Kustomize's load restrictor keeps single files under the build root, but it accepts a directory outside
it that holds a kustomization, and it fetches `http(s)://` resources and git URLs on its own. So every
path a kustomization can name (`resources`, `bases`, `components`, patches of each style, generator
`files`/`envs`, `crds`, `openapi`, `configurations`, `replacements`, `transformers`, `generators`,
`validators`) is resolved here, against the checkout, following every kustomization it reaches. An entry
that is not a file or directory inside the checkout is refused with the kustomization and the entry
named: that covers URLs, `git@` and `host/org/repo` forms (kustomize would fetch them), absolute paths,
`../..` and symlinks that leave the checkout. A remote git base in `resources`, `bases` or `components`, in
kustomize's forms (`parse_remote`), is named instead (`RemoteBase`) when the caller asks for them: tidecd
fetches it within the project's sourceRepos, places it in a private copy of the checkout and rewrites the
entry to that directory (`rewrite_entries`), so kustomize never fetches. Helm inflation (`helmCharts`) is
refused too (kustomize would download charts), unless argocd-cm enables it (`kustomize.buildOptions:
--enable-helm`): then the charts kustomize would pull are named (`KustomizeChart`) for tidecd to fetch and
put where kustomize looks first. Each kustomization file goes through the YAML bounds of `tidecd.base.limits`
before it is read.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from tidecd.base import limits
from tidecd.base.errors import RenderError, UnsafePathError
from tidecd.config.load import redact_repo_url

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
# field → how its entries name paths: "entry" (a string), "path" (a mapping's `path`), "generator"
_LIST_FIELDS = {
    "resources": "entry", "bases": "entry", "components": "entry", "crds": "entry",
    "configurations": "entry", "patchesStrategicMerge": "patch", "transformers": "plugin",
    "generators": "plugin", "validators": "plugin", "patches": "path", "patchesJson6902": "path",
    "replacements": "path", "configMapGenerator": "generator", "secretGenerator": "generator",
}
_REFUSED_FIELDS = ("helmCharts", "helmGlobals", "helmChartInflationGenerator")
MAX_KUSTOMIZATIONS = 1000
_REMOTE_FIELDS = ("resources", "bases", "components")  # where kustomize accepts a git repository
_SCHEMES = ("https://", "http://", "ssh://", "file://")
_FILE_SUFFIXES = (".yaml", ".yml", ".json")


def find_kustomization(directory: Path) -> Path | None:
    for name in KUSTOMIZATION_FILES:
        if (directory / name).is_file():
            return directory / name
    return None


@dataclass(frozen=True)
class KustomizeChart:
    """A `helmCharts` entry (with `--enable-helm`) whose chart kustomize would pull: tidecd fetches it and
    puts it where kustomize looks first, `target` (`<chartHome>/<name>-<version>/<name>` of the
    kustomization's directory, `<chartHome>/<name>` without a version), so kustomize pulls nothing."""

    where: str  # `kustomization <file>: helmCharts[<i>]`, for errors
    name: str
    repo: str
    version: str
    target: str  # inside the checkout, posix


@dataclass(frozen=True)
class RemoteRef:
    """A git repository kustomize would clone for a remote base: the URL it clones, the directory inside the
    repository (posix, "" for its root), and the ref (`?ref=` or `?version=`; "" for the default branch)."""

    repo: str
    path: str
    ref: str
    submodules: bool = True


@dataclass(frozen=True)
class RemoteBase:
    """A remote git base named by a kustomization (`file`, posix, relative to the tree checked), in
    `field[index]`, for the caller to fetch and put in place of the entry (`rewrite_entries`)."""

    where: str  # `kustomization <file>: <field>[<i>] '<entry>'`, for errors
    file: str
    field: str
    index: int
    remote: RemoteRef


def parse_remote(entry: str) -> RemoteRef | None:
    """The repository a kustomization entry names in kustomize's remote forms (its `NewRepoSpecFromURL`), or
    None when the entry is no remote git reference (a local path). Forms: `https://host/org/repo//sub?ref=v1`,
    `https://host/org/repo.git/sub?ref=v1`, `git::https://...`, `github.com/org/repo/sub` (https),
    `git@host:org/repo.git//sub`, `ssh://git@host/org/repo//sub`; without `//` or `.git` the repository is
    the first two path segments. RenderError for a remote form tidecd will not fetch: a plain file over
    http(s), a `file://` repository, a path leaving the repository."""
    text = entry.strip()
    raw, _, query = text.partition("?")
    forced = raw.startswith("git::")
    raw = raw.removeprefix("git::")
    scheme = next((s for s in _SCHEMES if raw.lower().startswith(s)), "")
    rest = raw[len(scheme):]
    user = "git@" if rest.startswith("git@") else ""
    rest = rest[len(user):]
    github = rest.startswith(("github.com/", "github.com:"))
    scp = not scheme and bool(user or github)
    if not scheme and not scp:
        return None  # kustomize needs a scheme, `git@` or github.com: anything else is a local path
    if scheme == "file://":
        raise RenderError("a file:// repository is not fetched; name a repository the project's sourceRepos permit")
    params = _query(query)
    ref = params.get("ref") or params.get("version") or ""
    if scheme.startswith("http") and not forced and "ref" not in params and "version" not in params \
            and "//" not in rest and rest.lower().endswith(_FILE_SUFFIXES):
        raise RenderError("a remote file is not fetched (only git repositories are, within the project's "
                          "sourceRepos); vendor it into the repository")
    sep = rest.find("/")
    colon = rest.find(":")
    if scp and colon > 0 and (sep < 0 or colon < sep):
        sep = colon
    if sep <= 0:
        raise RenderError("a remote base needs a host and a repository path")
    host, path = rest[:sep + 1], rest[sep + 1:]
    if github:
        scheme, user, host = ("", "git@", "github.com:") if scheme.startswith("ssh") or user else \
            ("https://", "", "github.com/")
    repo_path, sub = _split_repo_path(path)
    if not repo_path:
        raise RenderError("a remote base needs a repository path")
    sub = posixpath.normpath(sub.strip("/")) if sub.strip("/") else ""
    if sub == ".":
        sub = ""
    if sub == ".." or sub.startswith("../") or posixpath.isabs(sub):
        raise RenderError(f"the path {sub!r} leaves the remote repository")
    submodules = params.get("submodules", "true").lower() not in ("false", "0")
    return RemoteRef(scheme + user + host + repo_path, sub, ref, submodules)


def _query(query: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if key and key not in out:
            out[key] = value
    return out


def _split_repo_path(path: str) -> tuple[str, str]:
    """(repository path, directory inside it), as kustomize's `parsePathParts` splits them."""
    index = path.rfind("//")
    if index > 0:
        return path[:index], path[index + 2:]
    found = re.search(r"\.git(/|$)", path)
    if found and found.start() > 0:
        return path[:found.start() + 4], path[found.start() + 4:]
    azure = path.find("_git/")
    if azure >= 0:
        head, _, tail = path[azure + 5:].partition("/")
        return path[:azure + 5] + head, tail
    segments = path.split("/", 2)
    if len(segments) < 2 or not all(segments[:2]):
        return "", ""
    return "/".join(segments[:2]), segments[2] if len(segments) > 2 else ""


def rewrite_entries(file: Path, changes: list[tuple[str, int, str]]) -> None:
    """Replace `field[index]` entries of the kustomization `file` (a private copy's, not a link into a shared
    checkout): what tidecd does for each remote base it fetched and placed."""
    if file.is_symlink():
        text = file.resolve().read_text(encoding="utf-8-sig")
        file.unlink()
    else:
        text = file.read_text(encoding="utf-8-sig")
    doc = yaml.safe_load(text) or {}
    for field, index, value in changes:
        doc[field][index] = value
    file.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")


def confine(checkout: Path, app_dir: Path, *, helm: bool = False,
            remotes: list[RemoteBase] | None = None) -> list[KustomizeChart]:
    """Raise UnsafePathError or RenderError (naming kustomization and entry) for anything kustomize would
    read from outside `checkout` or from the network, starting at the kustomization in `app_dir`. With
    `helm` (argocd-cm's `kustomize.buildOptions: --enable-helm`), `helmCharts` are allowed: the charts
    kustomize would pull are returned, for the caller to fetch. With `remotes`, the remote git bases found
    are appended to it (and not followed) instead of refused."""
    charts: list[KustomizeChart] = []
    root = checkout.resolve()
    todo = [app_dir.resolve()]
    seen: set[Path] = set()
    while todo:
        directory = todo.pop()
        if directory in seen:
            continue
        seen.add(directory)
        if len(seen) > MAX_KUSTOMIZATIONS:
            raise RenderError(f"more than {MAX_KUSTOMIZATIONS} kustomizations reached from {_rel(root, app_dir)}")
        file = find_kustomization(directory)
        if file is None:
            continue
        todo.extend(_check_kustomization(root, file, charts if helm else None, remotes))
    return charts


def _check_kustomization(root: Path, file: Path, charts: list[KustomizeChart] | None,
                         remotes: list[RemoteBase] | None = None) -> list[Path]:
    """The directories (other kustomizations) this one names; every entry checked. `helmCharts` go to
    `charts` (refused when it is None: helm is not enabled); remote git bases to `remotes` (refused when it
    is None)."""
    label = _rel(root, file)
    doc = _load(file, label)
    for name in _REFUSED_FIELDS:
        if doc.get(name) and (charts is None or name == "helmChartInflationGenerator"):
            raise RenderError(f"kustomization {label}: {name}: helm chart inflation needs argocd-cm's "
                              "kustomize.buildOptions: --enable-helm (and helmCharts, not a generator plugin)")
    if charts is not None and doc.get("helmCharts"):
        charts.extend(_helm_charts(root, file, label, doc))
    directories: list[Path] = []
    for name, style in _LIST_FIELDS.items():
        entries = doc.get(name)
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise RenderError(f"kustomization {label}: {name} must be a list")
        for index, entry in enumerate(entries):
            if remotes is not None and name in _REMOTE_FIELDS and isinstance(entry, str):
                what = f"kustomization {label}: {name}[{index}] {redact_repo_url(entry)!r}"
                try:
                    remote = parse_remote(entry)
                except RenderError as exc:
                    raise RenderError(f"{what} is remote: {exc}") from None
                if remote is not None:
                    remotes.append(RemoteBase(what, file.relative_to(root).as_posix(), name, index, remote))
                    continue
            for where, path in _paths(name, style, index, entry):
                target = _resolve(root, file.parent, path, f"kustomization {label}: {where} {path!r}")
                if target.is_dir():
                    directories.append(target)
    openapi = doc.get("openapi")
    if isinstance(openapi, dict) and isinstance(openapi.get("path"), str):
        _resolve(root, file.parent, openapi["path"], f"kustomization {label}: openapi.path {openapi['path']!r}")
    return directories


def _helm_charts(root: Path, file: Path, label: str, doc: dict[str, Any]) -> list[KustomizeChart]:
    """The charts of one kustomization's `helmCharts` that kustomize would pull (those not in the checkout
    already), each with the place it looks for them first. `helmGlobals.chartHome` must stay inside."""
    globals_ = doc.get("helmGlobals") or {}
    if not isinstance(globals_, dict) or globals_.get("configHome"):
        raise RenderError(f"kustomization {label}: helmGlobals: only chartHome is supported")
    home = str(globals_.get("chartHome") or "charts")
    if "://" in home or PurePosixPath(home).is_absolute():
        raise UnsafePathError(f"kustomization {label}: helmGlobals.chartHome {home!r} must be inside the repository")
    entries = doc["helmCharts"]
    if not isinstance(entries, list):
        raise RenderError(f"kustomization {label}: helmCharts must be a list")
    out = []
    base = file.parent.resolve().relative_to(root).as_posix()
    for index, entry in enumerate(entries):
        where = f"kustomization {label}: helmCharts[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise RenderError(f"{where}: expected a mapping with a name")
        name, repo, version = entry["name"], str(entry.get("repo") or ""), str(entry.get("version") or "")
        if "/" in name or name.startswith("."):
            raise RenderError(f"{where}: name {name!r} is not a chart name")
        for key in ("valuesFile", "additionalValuesFiles"):
            for path in [entry[key]] if isinstance(entry.get(key), str) else entry.get(key) or []:
                _resolve(root, file.parent, str(path), f"{where}: {key} {path!r}")
        target = posixpath.normpath(posixpath.join(base, home, f"{name}-{version}" if version and repo else "",
                                                   name))
        if (root / target).is_dir():
            continue  # in the repository already: kustomize pulls nothing
        if not repo:
            raise RenderError(f"{where}: no repo, and no chart at {target!r} in the repository")
        _resolve_inside(root, target, f"{where}: helmGlobals.chartHome {home!r}")
        out.append(KustomizeChart(where, name, repo, version, target))
    return out


def _resolve_inside(root: Path, relative: str, what: str) -> None:
    target = (root / relative).resolve()
    if target != root and root not in target.parents:
        raise UnsafePathError(f"{what} leaves the repository checkout")


def _paths(name: str, style: str, index: int, entry: Any) -> list[tuple[str, str]]:
    """(field label, path) pairs of one list entry; inline patches and plugin configs name no path."""
    where = f"{name}[{index}]"
    if style == "entry":
        return [(where, entry)] if isinstance(entry, str) else []
    if style in ("patch", "plugin"):
        if isinstance(entry, str) and not _is_inline(entry):
            return [(where, entry)]
        return []
    if not isinstance(entry, dict):
        return []
    if style == "path":
        path = entry.get("path")
        return [(f"{where}.path", path)] if isinstance(path, str) and path else []
    out: list[tuple[str, str]] = []
    for key in ("files", "envs"):
        for i, item in enumerate(entry.get(key) or []):
            if isinstance(item, str):
                out.append((f"{where}.{key}[{i}]", item.partition("=")[2] if "=" in item else item))
    if isinstance(entry.get("env"), str):
        out.append((f"{where}.env", entry["env"]))
    return out


def _is_inline(entry: str) -> bool:
    text = entry.strip()
    return "\n" in text or text.startswith(("{", "[")) or ": " in text


def _resolve(root: Path, base: Path, entry: str, what: str) -> Path:
    if "://" in entry or entry.startswith("git@") or "?ref=" in entry or "//" in entry.strip("/"):
        raise RenderError(f"{what} is remote: only git repositories in resources, bases and components are "
                          "fetched (by tidecd, within the project's sourceRepos); vendor anything else into the "
                          "repository")
    if PurePosixPath(entry).is_absolute():
        raise UnsafePathError(f"{what} is an absolute path; paths must stay inside the repository")
    target = (base / posixpath.normpath(entry)).resolve()
    if target != root and root not in target.parents:
        raise UnsafePathError(f"{what} leaves the repository checkout")
    if not target.exists():
        raise RenderError(f"{what} is not a file or directory in the repository (kustomize would try it "
                          "as a remote URL; remote resources are not fetched)")
    return target


def _load(file: Path, label: str) -> dict[str, Any]:
    bound = limits.current()
    size = file.stat().st_size
    if size > bound.file_bytes:
        raise limits.exceeded(f"kustomization {label} is {size:,} bytes", "file_bytes", bound.file_bytes,
                              " bytes")
    try:
        text = file.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise RenderError(f"kustomization {label}: not UTF-8 text") from exc
    try:
        doc = limits.load_yaml(text, f"kustomization {label}")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise RenderError(f"kustomization {label}{where}: invalid YAML") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise RenderError(f"kustomization {label}: expected a mapping")
    return doc




def _rel(root: Path, path: Path) -> str:
    try:
        return path.resolve().relative_to(root).as_posix() or "."
    except ValueError:
        return path.name
