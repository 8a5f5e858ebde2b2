"""Find the external binaries tidecd runs (helm, kustomize; the dev tooling finds etcd, kwok, ... the same way).

Looked up, in order: `$TIDECD_BIN_DIR`, a `bin/` folder beside the deployed function source (where
`make package` puts pinned Linux binaries), the build cache of `scripts/tools.sh`, then `$PATH`. Building a
missing tool is dev-only (`tidecd_dev.tools.ensure`). `data_dir` finds the data directories `scripts/tools.sh`
fetches and `make package` ships beside the binaries (Argo CD's Lua catalogue) the same way, without `$PATH`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tidecd.base.errors import PermanentError


class MissingTool(PermanentError):
    """A binary tidecd needs is not installed."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tidecd"


def search_dirs() -> list[Path]:
    dirs = []
    if env := os.environ.get("TIDECD_BIN_DIR"):
        dirs.append(Path(env))
    dirs.append(Path.cwd() / "bin")
    dirs.append(cache_dir() / "bin")
    return dirs


def data_dir(name: str) -> Path | None:
    """The directory `name` in the first of `search_dirs` that has it, None when none has."""
    for directory in search_dirs():
        if (directory / name).is_dir():
            return directory / name
    return None


def binary(name: str) -> str:
    """Absolute path of `name`, or MissingTool saying how to get it."""
    for directory in search_dirs():
        candidate = directory / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    raise MissingTool(
        f"{name} not found (looked in {', '.join(str(d) for d in search_dirs())} and $PATH); "
        f"run `make tools` locally, or `make package` to bundle it with the function source"
    )
