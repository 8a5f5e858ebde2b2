"""Operations that never wait and never lose (issue 10), against the real control plane.

Each failure case from the issue is a test here; the SIGKILL acceptance runs one reconcile step in a child
process (tests/support/stepper.py), kills it at each step of an operation, triggers again, and compares
the end with an uninterrupted run. Slow objects come from the kwok Stages of the dev control plane: pod
annotations `tidecd.test/ready-after` and `tidecd.test/complete-after`.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.apps import GitOps, configmap, deployment, job, service
from tidecd.base.clock import FakeClock
from tidecd.base.model import ResourceKey
from tidecd.clients.store import LEASE_TTL, read_lease
from tidecd.state import app as app_state
from tidecd.state.app import OperationPhase, TaskPhase
from tidecd.step.reconcile import reconcile
from tidecd.usecases.commands import SyncRequest, start_operation
from tidecd_dev.devcluster import COMPLETE_AFTER, READY_AFTER

WAVE = "argocd.argoproj.io/sync-wave"
HOOK = "argocd.argoproj.io/hook"
OPERATION = "tidecd.io/operation-id"
REPO = Path(__file__).resolve().parents[2]


def slow(obj: dict[str, Any], **pod_notes: str) -> dict[str, Any]:
    """The object with annotations on its pod template (the kwok stages read them from the pods)."""
    out = copy.deepcopy(obj)
    template = out["spec"]["template"]
    template.setdefault("metadata", {}).setdefault("annotations", {}).update(pod_notes)
    return out


def op_of(gitops: GitOps, name: str = "app") -> app_state.Operation:
    op = gitops.state(name).operation
    assert op is not None
    return op


# --- the failure cases at the top of the issue ---------------------------------------------------------


def test_an_app_without_waves_succeeds_while_its_ingress_stays_progressing(gitops: GitOps) -> None:
    ingress = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "web"},
               "spec": {"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}}
    gitops.push({"app/ingress.yaml": ingress, "app/web.yaml": deployment("web")})
    gitops.application()
    start = time.monotonic()
    gitops.sync()
    op = op_of(gitops)
    assert op.phase is OperationPhase.SUCCEEDED, op.message
    assert time.monotonic() - start < 30  # nothing waited for the load balancer that never comes
    state = gitops.state()
    assert state.health == "Progressing" and state.sync_status == "Synced"


def test_a_service_port_99999_writes_nothing(gitops: GitOps) -> None:
    bad = service("bad")
    bad["spec"]["ports"][0]["port"] = 99999
    gitops.push({"app/ok.yaml": configmap("ok"), "app/bad.yaml": bad,
                 "app/later.yaml": configmap("later", annotations={WAVE: "1"})})
    gitops.application()
    runtime = gitops.runtime()
    gitops.reconcile(request=SyncRequest(), runtime=runtime)
    op = op_of(gitops)
    assert op.phase is OperationPhase.FAILED
    assert "Service" in op.message and "bad" in op.message and "nothing was written" in op.message
    assert gitops.live("ConfigMap", "ok") is None and gitops.live("ConfigMap", "later") is None
    cluster = runtime.cluster(runtime.app(gitops.real("app")).destination)
    assert cluster.writes == 3  # the three dry-runs, no write


def test_a_sync_failed_by_an_exception_keeps_its_inventory_and_a_later_prune_works(gitops: GitOps) -> None:
    gitops.push({"app/a.yaml": configmap("a"), "app/old.yaml": configmap("old")})
    gitops.application()
    gitops.sync()
    inventory = gitops.state().inventory
    assert {i["name"] for i in inventory} == {"a", "old"}
    unknown = {"apiVersion": "nowhere.example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    gitops.push({"app/old.yaml": None, "app/widget.yaml": unknown})
    gitops.sync(prune=True)
    op = op_of(gitops)
    assert op.phase is OperationPhase.FAILED and "Widget" in op.message
    assert gitops.state().inventory == inventory
    assert gitops.live("ConfigMap", "old") is not None
    gitops.push({"app/widget.yaml": None})
    outcome = gitops.sync(prune=True)
    assert op_of(gitops).phase is OperationPhase.SUCCEEDED
    assert [e.key.name for e in outcome.changes.entries if e.action.value == "pruned"] == ["old"]
    assert gitops.live("ConfigMap", "old") is None
    assert {i["name"] for i in gitops.state().inventory} == {"a"}


def test_automated_prune_of_every_resource_needs_allow_empty(gitops: GitOps) -> None:
    gitops.push({"app/a.yaml": configmap("a"), "app/b.yaml": configmap("b"), "other/keep.txt": "x"})
    gitops.application(automated={"prune": True})
    gitops.reconcile()
    assert op_of(gitops).phase is OperationPhase.SUCCEEDED
    gitops.push({"app/a.yaml": None, "app/b.yaml": None, "app/README.md": "nothing here"})
    gitops.reconcile()
    state = gitops.state()
    assert gitops.live("ConfigMap", "a") is not None and gitops.live("ConfigMap", "b") is not None
    assert [c["type"] for c in state.conditions] == ["SyncError"]
    assert "allowEmpty" in state.conditions[0]["message"]
    assert [h.result for h in state.history] == ["Succeeded"]
    gitops.application(automated={"prune": True, "allowEmpty": True})
    gitops.reconcile()
    assert gitops.live("ConfigMap", "a") is None and gitops.live("ConfigMap", "b") is None
    assert [h.result for h in gitops.state().history] == ["Succeeded", "Succeeded"]


def test_two_apps_declaring_the_same_object_do_not_take_it_from_each_other(gitops: GitOps) -> None:
    gitops.push({"app/shared.yaml": configmap("shared", {"owner": "first"}),
                 "other/shared.yaml": configmap("shared", {"owner": "second"}), "other/own.yaml": configmap("own")})
    first = gitops.application("first")
    gitops.application("second", path="other")
    gitops.sync("first")
    gitops.sync("second")
    op = op_of(gitops, "second")
    assert op.phase is OperationPhase.FAILED and repr(first) in op.message
    live = gitops.live("ConfigMap", "shared")
    assert live is not None and live["data"] == {"owner": "first"}
    assert live["metadata"]["labels"]["tidecd.io/app"] == first
    assert "app.kubernetes.io/instance" not in live["metadata"]["labels"]  # Argo CD's marks: never written
    assert gitops.live("ConfigMap", "own") is None  # the failed operation wrote nothing
    runtime = gitops.runtime()
    gitops.reconcile("first", request=SyncRequest(), runtime=runtime)
    assert runtime.cluster(runtime.app(first).destination).writes == 0  # first's object is still its own
    assert gitops.state("second").sync_status == "OutOfSync"


def test_a_lease_held_past_its_ttl_and_a_second_sync_lose_no_history(gitops: GitOps, tmp_path: Path) -> None:
    """A step frozen (SIGSTOP) past its lease: the next trigger takes over and finishes the operation, and a
    second sync runs. When the frozen step thaws, it neither applies what it decided from its stale state
    nor overwrites the state: both history entries survive."""
    gitops.push({"app/pre.yaml": slow(job("pre", annotations={HOOK: "PreSync"}), **{COMPLETE_AFTER: "3s"}),
                 "app/a.yaml": configmap("a")})
    name = gitops.application()
    first = start_operation(gitops.runtime(), name, SyncRequest(initiated_by="first"))
    child, marker = _child(gitops, tmp_path, "waiting", lease_ttl=2)
    try:
        _wait_marker(child, marker)
        child.send_signal(signal.SIGSTOP)
        time.sleep(2.5)  # the frozen step's lease expires: nothing renews it
        gitops.reconcile()
        assert op_of(gitops).id == first and op_of(gitops).phase is OperationPhase.SUCCEEDED
        gitops.push({"app/a.yaml": configmap("a", {"k": "2"})})
        gitops.sync()
        marker.unlink()
        child.send_signal(signal.SIGCONT)
        out, _ = child.communicate(timeout=60)
    finally:
        _reap(child)
    assert child.returncode == 0
    assert json.loads(out)["skipped"] == "lease lost"
    history = gitops.state().history
    assert [h.result for h in history] == ["Succeeded", "Succeeded"]
    assert history[0].operation_id == first and history[1].operation_id != first
    assert gitops.live("ConfigMap", "a")["data"] == {"k": "2"}  # type: ignore[index]  # nothing stale applied


# --- SIGKILL at each step --------------------------------------------------------------------------------


def _child(gitops: GitOps, tmp: Path, point: str, *, lease_ttl: float, budget: float = 60.0,
           name: str = "app") -> tuple[subprocess.Popen[bytes], Path]:
    marker = tmp / f"at-{point}-{time.monotonic_ns()}"
    settings = {"config": str(gitops.config_dir), "store": str(gitops.store.root),
                "kubeconfig": str(gitops.dev.kubeconfig)}
    args = {"point": point, "marker": str(marker), "app": gitops.real(name), "settings": settings,
            "lease_ttl": lease_ttl, "budget": budget}
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    child = subprocess.Popen([sys.executable, "-m", "tests.support.stepper", json.dumps(args)], cwd=REPO,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    return child, marker


def _wait_marker(child: subprocess.Popen[bytes], marker: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if child.poll() is not None:
            out = child.stdout.read().decode() if child.stdout else ""
            raise AssertionError(f"the step ended before reaching {marker.name}: {out}")
        assert time.monotonic() < deadline, f"the step never reached {marker.name}"
        time.sleep(0.05)


def _reap(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGCONT)
        child.kill()
    child.wait(10)
    if child.stdout:
        child.stdout.close()


def _snapshot(gitops: GitOps) -> dict[str, Any]:
    """What must be the same after any interrupted run as after an uninterrupted one."""
    state = gitops.state()
    op = state.operation
    assert op is not None
    live = {}
    for kind, group, names in (("ConfigMap", "", ("cfg", "old-a", "old-b")), ("Deployment", "apps", ("db", "web")),
                               ("Job", "batch", ("pre",))):
        for n in names:
            obj = gitops.live(kind, n, group)
            live[f"{kind}/{n}"] = None if obj is None else obj["data"] if "data" in obj else \
                obj["spec"].get("replicas", True)
    return {"history": [h.result for h in state.history], "phase": op.phase.value, "live": live,
            "inventory": sorted(i["name"] for i in state.inventory),
            # the action may differ (an object applied before the kill is "unchanged" when resumed)
            "results": sorted((r.key.name, r.sync_phase, r.phase.value) for r in op.results),
            "sync": state.sync_status.value}


EXPECTED = {
    "history": ["Succeeded", "Succeeded"], "phase": "Succeeded", "sync": "Synced",
    "live": {"ConfigMap/cfg": {"k": "v"}, "ConfigMap/old-a": None, "ConfigMap/old-b": None, "Deployment/db": 1,
             "Deployment/web": 1, "Job/pre": True},
    "inventory": ["cfg", "db", "web"],
    "results": sorted([("pre", "PreSync", "Succeeded"), ("cfg", "Sync", "Succeeded"), ("db", "Sync", "Succeeded"),
                       ("web", "Sync", "Succeeded"), ("old-a", "Sync", "Succeeded"), ("old-b", "Sync", "Succeeded")]),
}


@pytest.mark.parametrize("point", ["none", "dry-run", "mid-wave", "waiting", "hooks", "prune"])
def test_a_step_killed_at_any_point_ends_like_an_uninterrupted_run(gitops: GitOps, tmp_path: Path,
                                                                   point: str) -> None:
    gitops.push({"app/old-a.yaml": configmap("old-a"), "app/old-b.yaml": configmap("old-b")})
    name = gitops.application()
    gitops.sync()
    gitops.push({"app/old-a.yaml": None, "app/old-b.yaml": None,
                 "app/pre.yaml": slow(job("pre", annotations={HOOK: "PreSync"}), **{COMPLETE_AFTER: "2s"}),
                 "app/cfg.yaml": configmap("cfg", annotations={WAVE: "0"}),
                 "app/db.yaml": slow(deployment("db", annotations={WAVE: "0"}), **{READY_AFTER: "2s"}),
                 "app/web.yaml": deployment("web", annotations={WAVE: "1"})})
    op_id = start_operation(gitops.runtime(), name, SyncRequest(prune=True))
    child, marker = _child(gitops, tmp_path, point, lease_ttl=2)
    hook_uid = ""
    try:
        if point == "none":
            assert child.wait(90) == 0
        else:
            _wait_marker(child, marker)
            if point != "prune":  # nothing is pruned before every task succeeded
                assert gitops.live("ConfigMap", "old-a") is not None and gitops.live("ConfigMap", "old-b") is not None
            pre = gitops.live("Job", "pre", "batch")
            hook_uid = pre["metadata"]["uid"] if pre else ""
            child.kill()
            child.wait(10)
            killed_at = time.time()
            lease = read_lease(gitops.store, name)
            assert lease is not None and lease.expires_at <= killed_at + LEASE_TTL  # it blocks a minute at most
            # the dead step's lease still blocks the next trigger at the moment of the kill (a clock stopped
            # there: on a busy machine its 2 s may be over before this reconcile looks)
            assert reconcile(gitops.runtime(), name, clock=FakeClock(killed_at)).skipped == "already running"
            time.sleep(max(0.0, lease.expires_at - time.time()) + 0.2)
    finally:
        _reap(child)
    gitops.reconcile()  # the next trigger resumes the operation
    op = op_of(gitops)
    assert op.id == op_id, "the operation was resumed, not restarted"
    assert _snapshot(gitops) == EXPECTED
    pre = gitops.live("Job", "pre", "batch")
    assert pre is not None and pre["metadata"]["annotations"][OPERATION] == op_id
    if hook_uid:
        assert pre["metadata"]["uid"] == hook_uid, "the hook was created a second time"
    db, web = gitops.live("Deployment", "db", "apps"), gitops.live("Deployment", "web", "apps")
    assert db is not None and web is not None
    assert _created(web) >= _available(db)  # the same order as the blocking engine
    assert _created(db) >= _completed(pre)


def _ts(value: str) -> float:
    import datetime

    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _created(obj: dict[str, Any]) -> float:
    return _ts(obj["metadata"]["creationTimestamp"])


def _available(dep: dict[str, Any]) -> float:
    [cond] = [c for c in dep["status"]["conditions"] if c["type"] == "Available" and c["status"] == "True"]
    return _ts(cond["lastTransitionTime"])


def _completed(job_obj: dict[str, Any]) -> float:
    return _ts(job_obj["status"]["completionTime"])


def test_a_killed_step_marks_nothing_twice(gitops: GitOps, tmp_path: Path) -> None:
    """The recorded task results after a kill during hooks: the hook Pending (intent) or Running, never two."""
    gitops.push({"app/pre.yaml": slow(job("pre", annotations={HOOK: "PreSync"}), **{COMPLETE_AFTER: "1s"}),
                 "app/cfg.yaml": configmap("cfg")})
    name = gitops.application()
    start_operation(gitops.runtime(), name, SyncRequest())
    child, marker = _child(gitops, tmp_path, "hooks", lease_ttl=1)
    try:
        _wait_marker(child, marker)
        child.kill()
        child.wait(10)
    finally:
        _reap(child)
    results = op_of(gitops).results
    assert [(r.key, r.phase) for r in results] == [(ResourceKey("batch", "Job", gitops.namespace, "pre"),
                                                    TaskPhase.PENDING)]
    time.sleep(1.2)
    gitops.reconcile()
    assert op_of(gitops).phase is OperationPhase.SUCCEEDED
