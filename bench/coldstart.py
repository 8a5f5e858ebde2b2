"""Cold starts (issue 30, Build 2): what a fresh instance pays before any work.

(a) the config load: a git config source of 1,000 Applications (the scale scenario's shape, plus a few
    AppProjects and argocd-cm), loaded by `Runtime.config()` in a fresh interpreter, as a cold instance
    does: without the config cache (its objects removed first, the repository snapshot already in the
    store, as after any earlier instance) and with it (`tidecd.config.cache`). CPU seconds of the load
    in that process, median of a few processes each.
(b) the import time of functions/main.py and of each target's first call (webhook, poll, images,
    reconcile, api), from `bench.functions.cold_start`, against importing everything eagerly.
(c) a cold webhook instance end to end: a `functions-framework` process started and sent a signed push of
    the commit its app is already Synced at (`bench peers`' no-op, without the cluster: the answer is
    `current` from the app's state), from the process's start to that answer; against the same server
    answering an empty function, the floor any Python function on functions-framework pays.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench import functions
from bench.fixtures import Installation, Repo, application, write_app
from bench.harness import REPO_ROOT, Bench, Row, median, say
from tidecd.base.model import SyncStatus
from tidecd.state import app as app_state
from tidecd_dev.devcluster import free_port

GROUP = "coldstart"
APPS = 1000
RUNS = 3
PROJECT = ("apiVersion: argoproj.io/v1alpha1\nkind: AppProject\nmetadata: {{name: team-{n}}}\nspec:\n"
           "  sourceRepos: ['*']\n  destinations: [{{server: '*', namespace: 'team-{n}-*'}}]\n")
SETTINGS = ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: argocd-cm}\ndata:\n"
            "  timeout.reconciliation: 180s\n  resource.exclusions: |\n    - apiGroups: [cilium.io]\n"
            "      kinds: ['*']\n")
# the child: one cold instance's config load, its CPU and wall time printed as JSON on the last line
_CHILD = """
import json, sys, time
from tidecd.clients.store import LocalStore
from tidecd.runtime import Runtime, Settings
url, store, mode = sys.argv[1:4]
if mode == "before":  # the load as it was before the cache: nothing encoded, nothing written
    import tidecd.config.cache
    tidecd.config.cache.encode = lambda config: None
runtime = Runtime(settings=Settings(config=url, store=store), store=LocalStore(__import__('pathlib').Path(store)))
cpu, wall = time.process_time(), time.perf_counter()
config = runtime.config()
print(json.dumps({"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall,
                  "apps": len(config.applications)}))
"""


def run(bench: Bench) -> list[Row]:
    rows = config_load(bench)
    rows += [dataclasses.replace(row, group=GROUP) for row in functions.cold_start(bench)]
    rows += cold_noop(bench)
    return rows


NOOP_RUNS = 5
_EMPTY = "def empty(request):\n    return 'ok'\n"
_SHA = "c01d" * 10
_REPO_URL = "https://git.example.com/coldstart/noop.git"


def _serve_until_answer(bench: Bench, args: list[str], env: dict[str, str], body: bytes,
                        headers: dict[str, str]) -> tuple[float, int, bytes]:
    """Start a functions-framework process and send `body` until it answers: (seconds from the start to
    that answer, status, answer). The process is stopped before returning."""
    port = free_port()
    start = time.perf_counter()
    proc = bench.spawn([str(Path(sys.executable).parent / "functions-framework"), *args, "--host", "127.0.0.1",
                        "--port", str(port)], env=env, log=bench.root / "coldstart-noop.log")
    try:
        while True:
            try:
                status, answer = functions._http("POST", f"http://127.0.0.1:{port}/", body, headers)
                return time.perf_counter() - start, status, answer
            except OSError:  # not listening yet
                if proc.poll() is not None or time.perf_counter() - start > 120:
                    raise RuntimeError(f"functions-framework {args} did not answer; log "
                                       f"{bench.root / 'coldstart-noop.log'}") from None
                time.sleep(0.01)
    finally:
        bench.stop(proc)


def cold_noop(bench: Bench) -> list[Row]:
    inst = Installation(bench.dir("coldstart-noop"))
    write_app(inst.config_dir, application("noop", _REPO_URL, ".", "noop", automated=True))
    app_state.save(inst.store, app_state.AppState(app="noop", sync_status=SyncStatus.SYNCED, revision=_SHA))
    secret = secrets.token_hex(16)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TIDECD_")},
           "TIDECD_CONFIG": str(inst.config_dir), "TIDECD_STORE": str(inst.store_dir),
           "TIDECD_WEBHOOK_SECRET": secret, "PYTHONPATH": str(REPO_ROOT / "shared")}
    body = json.dumps({"ref": "refs/heads/main", "before": _SHA, "after": _SHA, "forced": False,
                       "repository": {"name": "noop", "full_name": "coldstart/noop", "clone_url": _REPO_URL,
                                      "html_url": _REPO_URL, "default_branch": "main"},
                       "commits": [{"id": _SHA, "message": "m", "added": [], "removed": [], "modified": ["."]}],
                       "pusher": {"name": "bench"}}).encode()
    empty = bench.dir("coldstart-empty") / "main.py"
    empty.write_text(_EMPTY)
    cases = {"webhook": ["--target", "webhook", "--source", str(REPO_ROOT / "functions" / "main.py")],
             "empty": ["--target", "empty", "--source", str(empty)]}
    times: dict[str, list[float]] = {case: [] for case in cases}
    say(f"coldstart: a cold webhook process's no-op answer, {NOOP_RUNS} processes, beside an empty function's")
    for _ in range(NOOP_RUNS):  # interleaved, so noise hits both alike
        for case, args in cases.items():
            headers = {"Content-Type": "application/json", "X-GitHub-Event": "push",
                       "X-GitHub-Delivery": secrets.token_hex(8),
                       "X-Hub-Signature-256": "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()}
            seconds, status, answer = _serve_until_answer(bench, args, env, body, headers)
            if case == "webhook" and (status != 200 or json.loads(answer).get("current") != ["noop"]):
                raise RuntimeError(f"the cold webhook answered HTTP {status}: {answer[:300]!r}")
            times[case].append(seconds)
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    return [Row(GROUP, "cold webhook process: start to the answer of a no-op push, vs an empty function's",
                median(times["webhook"]), median(times["empty"]), "empty function",
                f"medians of {NOOP_RUNS} processes each, interleaved; load average {load} after; the difference "
                "is tidecd's imports and work")]


def config_repo(bench: Bench, apps: int = APPS) -> str:
    """The config source in git: `apps` Applications, one file each, as `bench scale` writes them."""
    repo = Repo(bench.git, "coldstart-config", bench.dir("coldstart-config"))
    for number in range(apps):
        name = f"app-{number:04}"
        repo.write(f"apps/{name}.yaml", [application(name, f"https://git.example.com/r{number % 50}.git",
                                                     f"apps/{name}", name, automated=True)])
    for number in range(5):
        repo.write(f"projects/team-{number}.yaml", PROJECT.format(n=number))
    repo.write("argocd-cm.yaml", SETTINGS)
    repo.commit_and_push("1,000 apps")
    return f"{repo.url}#main:"


def cold_load(source: str, store: Path, mode: str = "", apps: int = APPS) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "shared"), str(REPO_ROOT)])}
    proc = subprocess.run([sys.executable, "-c", _CHILD, source, str(store), mode], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, check=False, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"config load failed: {proc.stderr.strip()[-800:]}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    if result["apps"] != apps:
        raise RuntimeError(f"loaded {result['apps']} apps, expected {apps}")
    return result


def config_load(bench: Bench) -> list[Row]:
    source = config_repo(bench)
    store = bench.dir("coldstart-store")
    cold_load(source, store)  # the snapshot (and the cache) in the store, as after any earlier instance
    cached = store / "config-cache"
    if not any(cached.rglob("*.json.gz")):
        raise RuntimeError("the first load wrote no config cache object")
    runs: dict[str, list[dict[str, float]]] = {"before": [], "first": [], "cached": []}
    say(f"coldstart: config load of {APPS} apps in fresh interpreters, {RUNS} of each case")
    for _ in range(RUNS):  # interleaved, so noise hits every case alike
        shutil.rmtree(cached)
        runs["before"].append(cold_load(source, store, "before"))  # no cache read, none written
        runs["first"].append(cold_load(source, store))  # the first instance at a commit: loads, writes
        runs["cached"].append(cold_load(source, store))
    cpu = {case: median([r["cpu"] for r in found]) for case, found in runs.items()}
    wall = {case: median([r["wall"] for r in found]) for case, found in runs.items()}
    size = sum(p.stat().st_size for p in cached.rglob("*.json.gz"))
    name = f"config load, {APPS} apps, cold process, CPU s"
    return [
        Row(GROUP, f"{name}: cached vs without the cache", cpu["cached"], cpu["before"], "without the cache",
            f"wall {wall['cached']:.2f}s vs {wall['before']:.2f}s; both include the ls-remote; without: a "
            f"checkout from the store's snapshot and every file validated; cached: one {size:,}-byte object"),
        Row(GROUP, f"{name}: first instance at a commit (loads, writes the cache) vs without", cpu["first"],
            cpu["before"], "without the cache", f"wall {wall['first']:.2f}s: the encoding, its round-trip "
            "check and the write, once per commit"),
    ]
