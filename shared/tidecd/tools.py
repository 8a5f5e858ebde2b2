"""Find the external binaries tidecd runs (helm, kustomize) and the dev tools (etcd, kube-apiserver, ...).

Looked up, in order: `$TIDECD_BIN_DIR`, a `bin/` folder beside the deployed function source (where
`make package` puts pinned Linux binaries), the build cache of `scripts/tools.sh`, then `$PATH`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tidecd.errors import PermanentError


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


def ensure(names: list[str]) -> None:
    """Build any of `names` that is missing with the checkout's scripts/tools.sh (progress on stderr).

    Tests and `tidecd dev cluster up` use this so a missing component is built, never skipped.
    """
    import subprocess
    import sys

    missing = []
    for name in names:
        try:
            binary(name)
        except MissingTool:
            missing.append(name)
    if not missing:
        return
    script = Path(__file__).resolve().parents[2] / "scripts" / "tools.sh"
    if not script.is_file():
        raise MissingTool(f"{', '.join(missing)} missing and no scripts/tools.sh to build them with")
    print(f"building {', '.join(missing)} with scripts/tools.sh", file=sys.stderr, flush=True)
    subprocess.run(["bash", str(script), *missing], check=True, stdout=sys.stderr)
