"""CLI start (issue 14): wall time of a fresh `tidecd app list --cached` process, before and after the dev
tooling left the product.

`tidecd` runs `tidecd.cli.main`; the peer runs the same command after importing `tidecd_dev.cli` (the local
control plane, git server and their clients), which is what every CLI start paid while `tidecd dev` was
registered eagerly. Both read the example config source and an empty local store, so no network is touched;
the cases are interleaved so machine noise hits both alike.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench.harness import REPO_ROOT, Bench, Row, median, say, spread

GROUP = "cli"
REPS = 9
COMMAND = ["app", "list", "--cached"]
NOW = "import sys; from tidecd.cli import main; sys.argv = ['tidecd', *sys.argv[1:]]; main()"
BEFORE = "import tidecd_dev.cli; " + NOW  # the eager `dev` group of the old CLI


def run(bench: Bench) -> list[Row]:
    store = bench.dir("cli/store")
    env = {**os.environ, "TIDECD_CONFIG": str(REPO_ROOT / "examples" / "config"), "TIDECD_STORE": str(store)}
    times: dict[str, list[float]] = {"now": [], "before": []}
    say(f"cli: `tidecd {' '.join(COMMAND)}` start, {REPS} fresh processes per case")
    for _ in range(REPS):
        for case, code in (("now", NOW), ("before", BEFORE)):
            times[case].append(_wall(code, env))
    return [Row(GROUP, f"start: tidecd {' '.join(COMMAND)}", median(times["now"]), median(times["before"]),
                "with tidecd_dev imported", f"process wall, spread {spread(times['now'])}; "
                "the old CLI imported the dev tooling on every start")]


def _wall(code: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *COMMAND], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0 or "guestbook" not in proc.stdout:
        raise RuntimeError(f"tidecd app list failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    return wall
