"""Build the Go tools the tests, the bench and the demo need (etcd, kube-apiserver, kwok, ...) when missing.

Building is dev-only: it runs the checkout's `scripts/tools.sh`. Finding a built binary is the product's
job (`tidecd.clients.tools.binary`), so a deployed function never reaches for a source tree.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tidecd.clients.tools import MissingTool, binary, data_dir

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "tools.sh"
DATA = frozenset({"argocd-catalogue"})  # scripts/tools.sh targets that are directories, not binaries


def have(name: str) -> bool:
    """Whether `name` (a binary, or one of DATA) is where tidecd looks for it."""
    if name in DATA:
        return data_dir(name) is not None
    try:
        binary(name)
    except MissingTool:
        return False
    return True


def ensure(names: list[str]) -> None:
    """Build any of `names` that is missing with the checkout's scripts/tools.sh (progress on stderr).

    Tests and `tidecd dev cluster up` use this so a missing component is built, never skipped.
    """
    missing = [name for name in names if not have(name)]
    if not missing:
        return
    if not SCRIPT.is_file():
        raise MissingTool(f"{', '.join(missing)} missing and no scripts/tools.sh to build them with")
    print(f"building {', '.join(missing)} with scripts/tools.sh", file=sys.stderr, flush=True)
    subprocess.run(["bash", str(SCRIPT), *missing], check=True, stdout=sys.stderr)
