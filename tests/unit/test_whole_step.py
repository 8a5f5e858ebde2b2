"""A whole sync step (observe → decide → execute → record → save) against `FakeCluster`, with a fake source
and a fake clock passed in through `Runtime.of` and `reconcile(clock=...)`: no monkeypatching anywhere."""

from __future__ import annotations

from typing import Any

from tests.support.fakecluster import CountingStore, FakeCluster, FakeGit, application, fake_runtime
from tidecd.base.clock import FakeClock
from tidecd.base.model import Action, HealthStatus, ResourceKey, SyncStatus
from tidecd.health.awaited import HEALTH_AWAIT
from tidecd.state import app as app_state
from tidecd.state.app import OperationPhase
from tidecd.step.reconcile import reconcile

NS = ResourceKey("", "Namespace", "", "ns")
CM = ResourceKey("", "ConfigMap", "ns", "settings")
DEPLOY = ResourceKey("apps", "Deployment", "ns", "web")


def configmap(name: str, value: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": value}}


def deployment(name: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx:1"}]}}}}


def test_an_automated_sync_step_applies_records_and_settles() -> None:
    cluster, store, git, clock = FakeCluster(), CountingStore(), FakeGit(), FakeClock()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    sha = git.push([configmap("settings", "1"), deployment("web")])
    runtime = fake_runtime(cluster, store, application(automated=True, prune=True), git)

    outcome = reconcile(runtime, "app", clock=clock)

    # the objects applied, with tidecd's ownership marks
    applied = cluster.objects[CM]
    assert applied["data"] == {"k": "1"} and applied["metadata"]["labels"]["tidecd.io/app"] == "app"
    assert DEPLOY in cluster.objects
    assert {e.key: e.action for e in outcome.changes.changed()} == {CM: Action.CREATED, DEPLOY: Action.CREATED}
    # the recorded operation, sync and health (the Deployment has no ready replicas yet)
    state, _ = app_state.load(store, "app")
    op = state.operation
    assert op is not None and op.request.automated and op.phase is OperationPhase.SUCCEEDED, op
    assert op.revision == sha and state.revision == sha
    assert op.started_at == op.finished_at == "2023-11-14T22:13:20Z"  # one clock: the fake
    assert state.memo.reconciled_at == "2023-11-14T22:13:21Z"  # the step's end, after its short health read (1.75 s)
    assert state.sync_status is SyncStatus.SYNCED and state.health is HealthStatus.PROGRESSING
    assert sorted(k for k, _ in state.inventory_keys()) == [CM, DEPLOY]
    assert [h.revision for h in state.history] == [sha]
    assert outcome.continue_after is not None  # it follows the app's health
    assert 0 < sum(clock.pauses) <= HEALTH_AWAIT  # a single-group sync never waits; the step reads health briefly

    # the next step sees the Deployment turn Healthy, and settles without writing to the cluster again
    cluster.ready(DEPLOY)
    writes = cluster.writes
    clock.advance(5.0)
    outcome = reconcile(runtime, "app", clock=clock)
    state, _ = app_state.load(store, "app")
    assert state.health is HealthStatus.HEALTHY and state.sync_status is SyncStatus.SYNCED
    assert outcome.continue_after is None and cluster.writes == writes
    assert state.operation is not None and state.operation.id == op.id  # no second automated sync

    # a new commit: the next step syncs it and prunes what it no longer declares
    sha2 = git.push([configmap("settings", "2")])
    reconcile(runtime, "app", clock=clock)
    state, _ = app_state.load(store, "app")
    assert cluster.objects[CM]["data"] == {"k": "2"} and DEPLOY not in cluster.objects
    assert state.revision == sha2 and state.sync_status is SyncStatus.SYNCED
    assert state.operation is not None and state.operation.phase is OperationPhase.SUCCEEDED
    assert [k for k, _ in state.inventory_keys()] == [CM]
