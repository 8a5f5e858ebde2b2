"""CLI start (issue 14): wall time of a fresh `tidecd app list --cached` process, before and after the dev
tooling left the product; and (issue 25) `tidecd --server URL app list`, the thin client, against the bare
interpreter (`python -c pass`) and Argo CD's `argocd version --client` (when ~/.cache/tidecd/bin has it).

`tidecd` runs `tidecd.cli.main`; the peer runs the same command after importing `tidecd_dev.cli` (the local
control plane, git server and their clients), which is what every CLI start paid while `tidecd dev` was
registered eagerly. Both read the example config source and an empty local store, so no network is touched;
the cases are interleaved so machine noise hits both alike.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

from tests.support.localhttp import serve_api, stop

from bench.harness import REPO_ROOT, Bench, Row, median, say, spread
from tidecd.runtime import Settings

GROUP = "cli"
REPS = 9
COMMAND = ["app", "list", "--cached"]
NOW = "import sys; from tidecd.cli import main; sys.argv = ['tidecd', *sys.argv[1:]]; main()"
BEFORE = "import tidecd_dev.cli; " + NOW  # the eager `dev` group of the old CLI
TOKEN = secrets.token_hex(16)
THIN_LIMIT = 0.300


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
                "the old CLI imported the dev tooling on every start"), *_server_start(store, env)]


# The --server commands timed from a fresh process: what each prints when it worked, and the untimed command
# that lets the next repetition start alike (a dry run's operation ends before the next sync may start).
SERVER_COMMANDS = {
    "app list": (["app", "list"], "guestbook", []),
    "app get": (["app", "get", "guestbook", "--cached"], "Name:", []),
    "app sync --dry-run --async": (["app", "sync", "guestbook", "--dry-run", "--async"], "started",
                                   ["app", "wait", "guestbook", "--operation", "--timeout", "60"]),
}


def _server_start(store: Path, env: dict[str, str]) -> list[Row]:
    """`tidecd --server URL app list|get|sync` (the thin client) against the api use case served over HTTP
    here; the full CLI with the same arguments (`tidecd.cli.root`), the bare interpreter and `argocd version
    --client`. `app get --cached` reads the recorded status (a refresh would time the api's git fetch, not the
    start); the sync is a dry run started with `--async` (a followed one polls every 2 s, as argocd does, so
    its wall time is the operation's, not the start's)."""
    settings = Settings(config=str(REPO_ROOT / "examples" / "config"), store=str(store), api_token=TOKEN)

    httpd = serve_api(settings)
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    quiet = {k: v for k, v in env.items() if not k.startswith("TIDECD_")}
    argocd = Path.home() / ".cache" / "tidecd" / "bin" / "argocd"
    full = NOW.replace("tidecd.cli import", "tidecd.cli.root import")
    peers = {"bare": [sys.executable, "-c", "pass"]}
    if argocd.exists():
        peers["argocd"] = [str(argocd), "version", "--client"]
    times: dict[str, list[float]] = {case: [] for case in peers}
    say(f"cli: `tidecd --server URL {', '.join(SERVER_COMMANDS)}` start vs the full CLI, {', '.join(peers)}")
    try:
        for _ in range(REPS):
            for what, (args, expect, settle) in SERVER_COMMANDS.items():
                for case, code in (("thin", NOW), ("full", full)):
                    command = [sys.executable, "-c", code, *args, "--server", url, "--token", TOKEN]
                    times.setdefault(f"{case} {what}", []).append(_run(command, quiet, expect))
                    if settle:
                        _run([sys.executable, "-c", NOW, *settle, "--server", url, "--token", TOKEN], quiet, "")
            for case, command in peers.items():
                times[case].append(_run(command, quiet, ""))
    finally:
        stop(httpd)
    rows = []
    for what in SERVER_COMMANDS:
        thin = median(times[f"thin {what}"])
        verdict = "PASS" if thin < THIN_LIMIT else "FAIL"
        rows.append(Row(GROUP, f"start: tidecd --server URL {what} (thin client) vs the full CLI", thin,
                        median(times[f"full {what}"]), "the same through typer",
                        f"{verdict} (< 300 ms); spread {spread(times[f'thin {what}'])}"))
    thin = median(times["thin app list"])
    rows.append(Row(GROUP, "start: tidecd --server URL app list vs the bare interpreter", thin,
                    median(times["bare"]), "python -c pass", f"spread {spread(times['bare'])}"))
    if "argocd" in times:
        rows.append(Row(GROUP, "start: tidecd --server URL app list vs argocd version --client", thin,
                        median(times["argocd"]), "argocd v3 (Go)", f"spread {spread(times['argocd'])}"))
    return rows


def _run(command: list[str], env: dict[str, str], expect: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    wall = time.perf_counter() - start
    if expect and expect not in proc.stdout:
        raise RuntimeError(f"{command[-6:]} failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    return wall


def _wall(code: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *COMMAND], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0 or "guestbook" not in proc.stdout:
        raise RuntimeError(f"tidecd app list failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    return wall
