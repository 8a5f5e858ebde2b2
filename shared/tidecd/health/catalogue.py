"""Argo CD's own Lua catalogue, applied by default: `resource_customizations/` of Argo CD v3.6.1, a
`health.lua` for each of about 290 kinds and `actions/` for a few dozen.

Nothing of it is in the repository. `scripts/tools.sh argocd-catalogue` (in `make tools`) fetches it from
the argo-cd Go module and `make package` ships its scripts beside the binaries, so it is found the way they
are (`tidecd.base.tools.data_dir`): `$TIDECD_BIN_DIR`, `bin/` beside the function source, the tools cache.

Which script a kind gets, as Argo CD's `GetHealthScript` picks a built-in one: the kind's own directory
(`group/Kind`, a core kind `Kind`), else the first wildcard directory, sorted, whose name matches with `_`
read as `*` (`_.crossplane.io/_`), a `*` not crossing `/`. argocd-cm's customizations come before it and the
built-in checks after it (`tidecd.health`).

Nothing is read until a kind is asked for: the list of kinds once per process, each script on its first use,
both kept for the process. A process without the catalogue logs that once and goes on with the built-in checks.
"""

from __future__ import annotations

import fnmatch
import threading
from pathlib import Path

import structlog

from tidecd.base.tools import data_dir, search_dirs

NAME = "argocd-catalogue"
MAX_SCRIPT = 256 * 1024  # bytes of one script read
log = structlog.get_logger("tidecd.health")

_lock = threading.Lock()
_root: list[Path | None] = []  # [the catalogue's directory or None], once looked up
_kinds: dict[Path, tuple[str, ...]] = {}  # catalogue → its "group/Kind" directories with a health.lua, sorted
_picked: dict[tuple[Path, str, str], str | None] = {}  # (catalogue, group, kind) → its directory or None
_scripts: dict[Path, str] = {}  # health.lua → its text


def root() -> Path | None:
    """The catalogue's directory, None when this process has none (logged once)."""
    with _lock:
        if not _root:
            found = data_dir(NAME)
            if found is None:
                log.warning("Argo CD's Lua catalogue not found: only the built-in health checks apply",
                            looked_in=[str(d / NAME) for d in search_dirs()],
                            fix="`make tools` (scripts/tools.sh argocd-catalogue), or `make package` to ship it")
            _root.append(found)
        return _root[0]


def forget() -> None:
    """Look the catalogue up again on next use (tests that change where it is)."""
    with _lock:
        _root.clear()
        _kinds.clear()
        _picked.clear()
        _scripts.clear()


def health_script(group: str, kind: str) -> tuple[str, str] | None:
    """(its directory, e.g. "argoproj.io/Rollout", the script) of the catalogue's health check for this kind,
    None when the catalogue has none."""
    catalogue = root()
    if catalogue is None:
        return None
    with _lock:
        known = (catalogue, group, kind) in _picked
        found = _picked.get((catalogue, group, kind))
    if not known:
        found = pick(_index(catalogue), group, kind)
        with _lock:
            if len(_picked) > 4096:
                _picked.clear()
            _picked[(catalogue, group, kind)] = found
    if found is None:
        return None
    path = catalogue / found / "health.lua"
    with _lock:
        script = _scripts.get(path)
    if script is None:
        with path.open("rb") as handle:
            script = handle.read(MAX_SCRIPT).decode("utf-8", "replace")
        with _lock:
            _scripts[path] = script
    return found, script


def pick(kinds: tuple[str, ...], group: str, kind: str) -> str | None:
    """The directory of `kinds` (sorted) Argo CD takes for this kind: its own, else the first wildcard one."""
    wanted = f"{group}/{kind}" if group else kind
    if wanted in kinds:
        return wanted
    if not group:
        return None
    names = wanted.split("/")
    for directory in kinds:
        if "_" not in directory:
            continue
        parts = directory.replace("_", "*").split("/")
        if len(parts) == len(names) and all(fnmatch.fnmatchcase(n, p) for p, n in zip(parts, names, strict=True)):
            return directory
    return None


def _index(catalogue: Path) -> tuple[str, ...]:
    """The catalogue's directories with a health.lua ("group/Kind", a core kind's "Kind"), sorted; read once."""
    with _lock:
        kinds = _kinds.get(catalogue)
    if kinds is None:
        found = [p.parent.relative_to(catalogue).as_posix()
                 for pattern in ("*/health.lua", "*/*/health.lua") for p in catalogue.glob(pattern)]
        kinds = tuple(sorted(found))
        with _lock:
            _kinds[catalogue] = kinds
    return kinds
