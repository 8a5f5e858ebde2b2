"""Operations (issue 10): the hook-and-waves app, blocking engine against resumable steps, same run.

The app: a PreSync Job that completes after HOOK seconds, then two waves each gated on a Deployment that
becomes Available after WAVE seconds (kwok Stages of the dev control plane), then a ConfigMap.

- peer, the blocking engine: the engine before "Operations as resumable steps" (d1dbd0b^), checked out
  from git history into a temp worktree and run from there in a child process: one `reconcile` call that
  sleeps through every wait. Its billed instance-seconds are its whole duration.
- tidecd: the resumable engine (step budget 10 s, the default, and 2 s) through the local continuation
  path (`DirectDispatcher` and its own
  `LocalScheduler`): one bounded step per job, the next one scheduled when the step asks. Billed
  instance-seconds are the sum of the steps' durations; nothing runs (or bills) between them.

Wall time is from "start the sync" to "operation Succeeded"; it must stay within 1.2× of the blocking
engine's (a note says FAIL otherwise).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.fixtures import Installation, Repo, application, create_namespaces, write_app
from bench.harness import REPO_ROOT, Bench, Row, say

GROUP = "operations"
HOOK = float(os.environ.get("BENCH_HOOK_SECONDS", "30"))
WAVE = float(os.environ.get("BENCH_WAVE_SECONDS", "15"))
LIMIT = 1.2
NAMESPACES = ("bench-ops-blocking", "bench-ops-resumable", "bench-ops-short")
# Runs inside the blocking engine's tree from git history, so it names that tree's modules (the flat layout
# before the folder per layer), not today's.
BLOCKING_SCRIPT = """
import json, sys, time
from tidecd.reconcile import SyncRequest, reconcile
from tidecd.runtime import Runtime
start = time.perf_counter()
outcome = reconcile(Runtime.from_env(), sys.argv[1], request=SyncRequest(), wave_timeout=900)
op = outcome.state.operation if outcome.state else None
print(json.dumps({"seconds": time.perf_counter() - start, "phase": op.phase if op else "none"}))
"""


def _obj(kind: str, name: str, namespace: str, notes: dict[str, str], pod_notes: dict[str, str]) -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace, "annotations": notes}
    labels = {"app": name}
    pod: dict[str, Any] = {"metadata": {"labels": labels, "annotations": pod_notes},
                           "spec": {"containers": [{"name": name, "image": "busybox:1.36"}]}}
    if kind == "Job":
        pod["spec"]["restartPolicy"] = "Never"
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                "spec": {"backoffLimit": 0, "template": pod}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": pod}}


def hook_and_waves(namespace: str) -> list[dict[str, Any]]:
    hook = {"argocd.argoproj.io/hook": "PreSync"}
    return [
        _obj("Job", "migrate", namespace, hook, {"tidecd.test/complete-after": f"{HOOK:g}s"}),
        _obj("Deployment", "api", namespace, {"argocd.argoproj.io/sync-wave": "1"},
             {"tidecd.test/ready-after": f"{WAVE:g}s"}),
        _obj("Deployment", "web", namespace, {"argocd.argoproj.io/sync-wave": "2"},
             {"tidecd.test/ready-after": f"{WAVE:g}s"}),
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "done", "namespace": namespace, "annotations": {"argocd.argoproj.io/sync-wave": "3"}},
         "data": {"k": "v"}},
    ]


def run(bench: Bench) -> list[Row]:
    old_sha = subprocess.run(["git", "rev-parse", "d1dbd0b^"], cwd=REPO_ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
    old_tree = bench.root / "blocking-engine"
    subprocess.run(["git", "worktree", "add", "--detach", str(old_tree), old_sha], cwd=REPO_ROOT,
                   capture_output=True, check=True)
    try:
        repo = Repo(bench.git, "ops-hook-waves", bench.dir("operations/repo"))
        for namespace in NAMESPACES:
            repo.write(f"{namespace}/app.yaml", hook_and_waves(namespace))
        repo.commit_and_push("hook and waves")
        create_namespaces(bench.kubeconfig, list(NAMESPACES))
        say(f"operations: blocking engine ({old_sha[:10]}), hook {HOOK:g}s + 2 waves of {WAVE:g}s")
        blocking = _blocking(bench, repo, old_tree)
        say(f"operations: blocking engine took {blocking['seconds']:.1f}s ({blocking['phase']})")
        variants = {}
        for budget, namespace in ((10.0, "bench-ops-resumable"), (2.0, "bench-ops-short")):
            variants[budget] = result = _resumable(bench, repo, namespace, budget)
            say(f"operations: resumable steps (budget {budget:g}s) took {result['wall']:.1f}s wall, "
                f"{result['billed']:.1f}s billed in {result['steps']} steps ({result['phase']})")
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(old_tree)], cwd=REPO_ROOT, capture_output=True)
    peer = f"blocking engine {old_sha[:10]}"
    rows = []
    for budget, resumable in variants.items():
        ratio = resumable["wall"] / blocking["seconds"]
        verdict = "ok" if ratio <= LIMIT else "FAIL"
        what = f"hook {HOOK:g}s + 2 waves of {WAVE:g}s, step budget {budget:g}s"
        rows += [
            Row(GROUP, f"{what}: wall time", resumable["wall"], blocking["seconds"], peer,
                f"{verdict}: must stay within {LIMIT}× of the blocking engine; phases {resumable['phase']} / "
                f"{blocking['phase']}"),
            Row(GROUP, f"{what}: instance-seconds billed", resumable["billed"], blocking["seconds"], peer,
                f"{resumable['steps']} steps, longest {resumable['longest']:.1f}s; the peer is one call of its "
                "whole duration"),
        ]
    return rows


def _blocking(bench: Bench, repo: Repo, old_tree: Path) -> dict[str, Any]:
    inst = Installation(bench.dir("operations/blocking"), bench.kubeconfig)
    write_app(inst.config_dir, application("ops-blocking", repo.url, "bench-ops-blocking", "bench-ops-blocking"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDECD_")}
    env.update(TIDECD_CONFIG=str(inst.config_dir), TIDECD_STORE=str(inst.store_dir), KUBECONFIG=inst.kubeconfig,
               PYTHONPATH=str(old_tree / "shared"))
    done = subprocess.run([sys.executable, "-c", BLOCKING_SCRIPT, "ops-blocking"], env=env, capture_output=True,
                          text=True, timeout=1800, cwd=old_tree)
    if done.returncode != 0:
        raise RuntimeError(f"the blocking engine failed: {done.stderr[-1500:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _resumable(bench: Bench, repo: Repo, namespace: str, budget: float) -> dict[str, Any]:
    from tidecd.state import app as app_state
    from tidecd.triggers import dispatch
    from tidecd.triggers.scheduler import LocalScheduler
    from tidecd.usecases.commands import SyncRequest, start_operation

    inst = Installation(bench.dir(f"operations/{namespace}"), bench.kubeconfig)
    app = namespace.removeprefix("bench-")
    write_app(inst.config_dir, application(app, repo.url, namespace, namespace))

    def runtime() -> Any:
        made = inst.runtime()
        made.settings.step_budget = budget  # TIDECD_STEP_BUDGET
        return made

    steps: list[float] = []

    class Measuring(dispatch.DirectDispatcher):
        def _job(self, refresh: dispatch.Refresh) -> float | None:
            start = time.perf_counter()
            try:
                return super()._job(refresh)
            finally:
                steps.append(time.perf_counter() - start)

    scheduler = LocalScheduler(workers=1)
    dispatcher = Measuring(runtime, store=inst.store, scheduler=scheduler)
    start = time.perf_counter()
    start_operation(inst.runtime(), app, SyncRequest(initiated_by="bench"))
    dispatcher.schedule(app, 0.0, "bench sync")
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        op = app_state.load(inst.store, app)[0].operation
        if op is not None and not op.running:
            break
        time.sleep(0.05)
    wall = time.perf_counter() - start
    scheduler.wait_idle(60)
    op = copy.deepcopy(app_state.load(inst.store, app)[0].operation)
    return {"wall": wall, "billed": sum(steps), "steps": len(steps), "longest": max(steps, default=0.0),
            "phase": op.phase.value if op else "none"}
