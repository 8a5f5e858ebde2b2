"""Build the Go tools the tests, the bench and the demo need (etcd, kube-apiserver, kwok, ...) when missing.

Building is dev-only: it runs the checkout's `scripts/tools.sh`. Finding a built binary is the product's
job (`tidecd.clients.tools.binary`), so a deployed function never reaches for a source tree.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tidecd.clients.tools import MissingTool, binary

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "tools.sh"


def ensure(names: list[str]) -> None:
    """Build any of `names` that is missing with the checkout's scripts/tools.sh (progress on stderr).

    Tests and `tidecd dev cluster up` use this so a missing component is built, never skipped.
    """
    missing = []
    for name in names:
        try:
            binary(name)
        except MissingTool:
            missing.append(name)
    if not missing:
        return
    if not SCRIPT.is_file():
        raise MissingTool(f"{', '.join(missing)} missing and no scripts/tools.sh to build them with")
    print(f"building {', '.join(missing)} with scripts/tools.sh", file=sys.stderr, flush=True)
    subprocess.run(["bash", str(SCRIPT), *missing], check=True, stdout=sys.stderr)
