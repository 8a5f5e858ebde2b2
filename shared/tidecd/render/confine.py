"""Kustomizations checked against the checkout before kustomize runs: nothing remote, nothing outside.

Kustomize's load restrictor keeps single files under the build root, but it accepts a directory outside
it that holds a kustomization, and it fetches `http(s)://` resources and git URLs on its own. So every
path a kustomization can name (`resources`, `bases`, `components`, patches of each style, generator
`files`/`envs`, `crds`, `openapi`, `configurations`, `replacements`, `transformers`, `generators`,
`validators`) is resolved here, against the checkout, following every kustomization it reaches. An entry
that is not a file or directory inside the checkout is refused with the kustomization and the entry
named: that covers URLs, `git@` and `host/org/repo` forms (kustomize would fetch them), absolute paths,
`../..` and symlinks that leave the checkout. Helm inflation (`helmCharts`) is refused too (kustomize
would download charts), unless argocd-cm enables it (`kustomize.buildOptions: --enable-helm`): then the
charts kustomize would pull are named (`KustomizeChart`) for tidecd to fetch and put where kustomize
looks first. Each kustomization file goes through the YAML bounds of `tidecd.base.limits` before it is read.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from tidecd.base import limits
from tidecd.base.errors import RenderError, UnsafePathError

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


def confine(checkout: Path, app_dir: Path, *, helm: bool = False) -> list[KustomizeChart]:
    """Raise UnsafePathError or RenderError (naming kustomization and entry) for anything kustomize would
    read from outside `checkout` or from the network, starting at the kustomization in `app_dir`. With
    `helm` (argocd-cm's `kustomize.buildOptions: --enable-helm`), `helmCharts` are allowed: the charts
    kustomize would pull are returned, for the caller to fetch."""
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
        todo.extend(_check_kustomization(root, file, charts if helm else None))
    return charts


def _check_kustomization(root: Path, file: Path, charts: list[KustomizeChart] | None) -> list[Path]:
    """The directories (other kustomizations) this one names; every entry checked. `helmCharts` go to
    `charts` (refused when it is None: helm is not enabled)."""
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
        raise RenderError(f"{what} is remote: remote resources, bases and git URLs are not fetched; "
                          "vendor them into the repository")
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
