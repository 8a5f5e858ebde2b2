"""The reconcile step end to end on a fake cluster: observe → decide → execute → record, step by step.

Each test drives `reconcile()` one call at a time with a fake clock (a call's health poll costs no real
time) and moves the fake cluster's objects along by hand, the way controllers would.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.fakecluster import FakeCluster, FakeGit, application, fake_runtime
from tidecd.base.clock import FakeClock, unix
from tidecd.base.errors import NotFound, OperationInProgress, PermanentError
from tidecd.base.model import Action, ResourceKey
from tidecd.clients.store import LEASE_TTL, MemoryStore, acquire_lease
from tidecd.health import awaited
from tidecd.runtime import Runtime
from tidecd.state import app as app_state
from tidecd.state.app import OperationPhase, TaskPhase
from tidecd.step.reconcile import Outcome, reconcile
from tidecd.usecases.commands import SyncRequest, start_operation, terminate_operation

WAVE = "argocd.argoproj.io/sync-wave"
HOOK = "argocd.argoproj.io/hook"
POLICY = "argocd.argoproj.io/hook-delete-policy"
OPTIONS = "argocd.argoproj.io/sync-options"


def deployment(name: str, **notes: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "annotations": notes},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": name, "image": "nginx"}]}}}}


def configmap(name: str, value: str = "v", **notes: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "annotations": notes},
            "data": {"k": value}}


def job(name: str, **notes: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "annotations": notes},
            "spec": {"template": {"spec": {"containers": [{"name": "run", "image": "busybox"}]}}}}


def service(name: str, port: int = 80) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"ports": [{"port": port}]}}


def key(kind: str, name: str) -> ResourceKey:
    group = {"Deployment": "apps", "Job": "batch", "Ingress": "networking.k8s.io"}.get(kind, "")
    return ResourceKey(group, kind, "ns", name)


@dataclass
class Harness:
    cluster: FakeCluster
    store: MemoryStore
    git: FakeGit
    clock: FakeClock
    runtime: Runtime
    name: str = "app"

    def step(self, **kwargs: Any) -> Outcome:
        return reconcile(self.runtime, self.name, clock=self.clock, **kwargs)

    def sync(self, **request: Any) -> str:
        return start_operation(self.runtime, self.name, SyncRequest(**request))

    def state(self) -> app_state.AppState:
        return app_state.load(self.store, self.name)[0]

    def op(self) -> app_state.Operation:
        op = self.state().operation
        assert op is not None
        return op

    def until_done(self, limit: int = 20) -> Outcome:
        for _ in range(limit):
            outcome = self.step()
            op = outcome.state.operation if outcome.state else None
            if outcome.continue_after is None or (op is not None and not op.running):
                return outcome
        raise AssertionError(f"still running after {limit} steps: {self.op().step}")

    def state_with_inventory(self, keys: list[ResourceKey]) -> None:
        state, generation = app_state.load(self.store, self.name)
        state.set_inventory([*state.inventory_keys(), *((k, 0) for k in keys)])
        app_state.save(self.store, state, if_generation_match=generation)

    def configure(self, **policy: Any) -> None:
        app = application(**policy)
        self.runtime = fake_runtime(self.cluster, self.store, app, self.git)


@pytest.fixture()
def h(monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    cluster, store, git, clock = FakeCluster(), MemoryStore(), FakeGit(), FakeClock()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    yield Harness(cluster, store, git, clock, fake_runtime(cluster, store, application(), git))


def test_a_sync_without_waves_never_waits_and_succeeds_while_still_progressing(h: Harness) -> None:
    ingress = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "web"},
               "spec": {"rules": []}}
    h.git.push([deployment("web"), ingress])
    h.sync()
    outcome = h.step()
    op = h.op()
    assert op.phase is OperationPhase.SUCCEEDED, op.message
    assert op.finished_at == "2023-11-14T22:13:20Z"  # ended at its apply: the operation waits for nothing
    # the step reads the app's health again for a moment (a short read within its budget, not the
    # operation's wait), then follows it with a continuation, soon: its objects are brand new
    assert 0 < sum(h.clock.pauses) <= awaited.HEALTH_AWAIT
    assert outcome.continue_after == awaited.MIN_DELAY
    state = h.state()
    assert state.health == "Progressing" and state.sync_status == "Synced"


class RolledOutAfter(FakeClock):
    """A deployment controller that rolls `key` out once the step has paused `seconds` in all."""

    def __init__(self, cluster: FakeCluster, key: ResourceKey, seconds: float) -> None:
        super().__init__()
        self.cluster, self.key, self.seconds = cluster, key, seconds

    def pause(self, seconds: float) -> None:
        super().pause(seconds)
        if sum(self.pauses) >= self.seconds and self.key in self.cluster.objects:
            self.cluster.ready(self.key)


def test_an_app_healthy_moments_after_its_sync_ends_in_that_step(h: Harness) -> None:
    h.git.push([deployment("web")])
    h.clock = RolledOutAfter(h.cluster, key("Deployment", "web"), 0.5)
    h.sync()
    outcome = h.step()
    assert h.op().phase is OperationPhase.SUCCEEDED
    assert h.state().health == "Healthy" and outcome.continue_after is None  # no follow-up step
    assert sum(h.clock.pauses) < 1.0  # it stopped reading once Healthy
    assert h.op().finished_at == "2023-11-14T22:13:20Z"  # the operation's end is its apply, not the health's
    assert h.step().unchanged  # the record it left is a quiet one: the next no-op compares nothing


def test_what_the_last_group_wrote_is_read_by_the_health_await_not_right_after_its_write(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    h.git.push([deployment("web")])
    h.sync()
    web = ResourceKey("apps", "Deployment", "ns", "web")
    gets: list[ResourceKey] = []
    original = h.cluster.get

    def counted(key: ResourceKey) -> Any:
        gets.append(key)
        return original(key)

    monkeypatch.setattr(h.cluster, "get", counted)
    h.step()
    assert h.op().phase is OperationPhase.SUCCEEDED and h.clock.pauses
    # one GET before the sync (it had no label yet), then one per look of the await: none the moment
    # after its apply, when no controller can have acted on it
    assert gets.count(web) == 1 + len(h.clock.pauses)
    assert h.clock.pauses[0] == awaited.HEALTH_LOOK


def test_an_app_of_many_objects_not_healthy_is_read_less_often(h: Harness) -> None:
    h.git.push([deployment(f"web-{i}") for i in range(16)])
    h.sync()
    outcome = h.step()
    assert h.op().phase is OperationPhase.SUCCEEDED and outcome.continue_after is not None
    # 16 Deployments not Healthy: two looks (32 GETs), the second 1.6 times later, not eight of 16 GETs each
    assert h.clock.pauses == pytest.approx([0.7596, 1.2154], abs=1e-3)
    assert sum(h.clock.pauses) < awaited.HEALTH_AWAIT
    h.git.push([deployment(f"web-{i}") for i in range(40)])
    h.sync()
    h.clock.pauses.clear()
    h.step()
    assert h.op().phase is OperationPhase.SUCCEEDED and h.clock.pauses == []  # 40: left to the follow-up


def test_the_health_read_after_a_sync_stays_within_the_steps_budget(h: Harness) -> None:
    h.git.push([deployment("web")])
    h.sync()
    outcome = h.step(budget=0.3)
    assert sum(h.clock.pauses) <= 0.3 and outcome.continue_after is not None


def test_no_reader_ever_sees_a_finished_operation_beside_the_status_from_before_it(h: Harness) -> None:
    """The dashboard stops following an app when its operation ends: the record that ends the operation
    must carry the comparison made after it (CI once caught the page left at Succeeded + OutOfSync)."""
    h.git.push([configmap("a")])
    h.step()  # compared: OutOfSync, nothing applied yet
    assert h.state().sync_status == "OutOfSync"
    h.sync()
    saved: list[app_state.AppState] = []
    original = app_state.save

    def recording(store: Any, state: app_state.AppState, **kwargs: Any) -> int:
        saved.append(app_state.AppState.from_json(state.to_json()))
        return original(store, state, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(app_state, "save", recording)
        h.until_done()
    ended = [s for s in saved if s.operation is not None and not s.operation.running]
    assert ended and h.op().phase is OperationPhase.SUCCEEDED
    assert [(s.sync_status, s.health) for s in ended] == [("Synced", "Healthy")] * len(ended)


def test_waves_wait_for_health_across_steps_and_hooks_run_once(h: Harness) -> None:
    h.git.push([job("pre", **{HOOK: "PreSync"}), deployment("db", **{WAVE: "0"}), deployment("web", **{WAVE: "1"}),
                job("post", **{HOOK: "PostSync", POLICY: "HookSucceeded"})])
    h.sync()
    first = h.step()
    assert first.continue_after is not None and h.op().step.startswith("waiting for completion of hook")
    assert h.cluster.created("Job") == ["pre"]
    h.step()  # still running: no second create
    assert h.cluster.created("Job") == ["pre"]
    h.cluster.complete(key("Job", "pre"))
    h.step()
    assert h.op().step.startswith("waiting for healthy state of apps/Deployment/ns/db")
    assert h.cluster.created("Deployment") == ["db"]
    h.cluster.ready(key("Deployment", "db"))
    h.step()
    assert h.cluster.created("Deployment") == ["db", "web"]
    h.cluster.ready(key("Deployment", "web"))
    h.step()
    assert h.cluster.created("Job") == ["pre", "post"]
    h.cluster.complete(key("Job", "post"))
    outcome = h.until_done()
    op = h.op()
    assert op.phase is OperationPhase.SUCCEEDED and outcome.continue_after is None
    assert key("Job", "post") not in h.cluster.objects  # HookSucceeded
    assert h.cluster.created("Job") == ["pre", "post"]
    assert [e.result for e in h.state().history] == ["Succeeded"]
    assert {r.key.name: r.phase for r in op.results} == {n: TaskPhase.SUCCEEDED for n in ("pre", "db", "web", "post")}



class _Killed(BaseException):
    """The step's process dying (SIGKILL): no handler of the step's own catches it."""


def _step_dies_right_after_creating_a_job(h: Harness) -> None:
    """One step whose process dies just after the API server created a Job (a hook), before it records that."""
    original = h.cluster.apply

    def apply_then_die(obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        result = original(obj, dry_run=dry_run)
        if not dry_run and obj["kind"] == "Job":
            raise _Killed
        return result

    h.cluster.apply = apply_then_die  # type: ignore[method-assign]
    try:
        with pytest.raises(_Killed):
            h.step()
    finally:
        h.cluster.apply = original  # type: ignore[method-assign]


def test_a_step_killed_after_creating_a_hook_finds_it_instead_of_creating_another(h: Harness) -> None:
    h.git.push([job("pre", **{HOOK: "PreSync"}), deployment("web")])
    h.sync()
    _step_dies_right_after_creating_a_job(h)
    assert h.op().results[0].phase is TaskPhase.PENDING  # the intent was recorded before creating
    # a SIGKILLed step leaves its lease behind (no finally runs): the app waits until it expires
    assert acquire_lease(h.store, "app", "killed-step", LEASE_TTL, h.clock.now())
    assert h.step().skipped == "already running"
    h.clock.advance(LEASE_TTL + 1)
    assert not h.step().skipped
    assert h.cluster.created("Job") == ["pre"]
    h.cluster.complete(key("Job", "pre"))
    h.until_done()
    assert h.op().phase is OperationPhase.SUCCEEDED
    assert h.cluster.created("Job") == ["pre"]


def test_an_invalid_new_object_fails_the_operation_before_any_write(h: Harness) -> None:
    h.git.push([configmap("ok"), service("bad", port=99999), deployment("later", **{WAVE: "1"})])
    h.sync()
    h.step()
    op = h.op()
    assert op.phase is OperationPhase.FAILED
    assert "Service ns/bad" in op.message and "99999" in op.message and "nothing was written" in op.message
    assert [v for v, _ in h.cluster.calls if v != "dry-run"] == []
    assert key("ConfigMap", "ok") not in h.cluster.objects


def test_a_failed_operation_keeps_its_inventory_and_later_prunes(h: Harness) -> None:
    h.git.push([configmap("a"), configmap("old")])
    h.sync()
    h.until_done()
    inventory = h.state().inventory
    assert {i["name"] for i in inventory} == {"a", "old"}
    h.git.push([configmap("a"), {"apiVersion": "example.com/v1", "kind": "Nope", "metadata": {"name": "x"}}])
    h.sync(prune=True)
    h.until_done()
    assert h.op().phase is OperationPhase.FAILED
    assert h.state().inventory == inventory
    assert key("ConfigMap", "old") in h.cluster.objects
    h.git.push([configmap("a")])
    h.sync(prune=True)
    h.until_done()
    assert h.op().phase is OperationPhase.SUCCEEDED
    assert key("ConfigMap", "old") not in h.cluster.objects
    assert {i["name"] for i in h.state().inventory} == {"a"}


def test_automated_prune_of_everything_needs_allow_empty(h: Harness) -> None:
    h.configure(automated=True, prune=True)
    h.git.push([configmap("a"), configmap("b")])
    h.until_done()
    assert h.op().phase is OperationPhase.SUCCEEDED
    h.git.push([])
    outcome = h.until_done()
    assert key("ConfigMap", "a") in h.cluster.objects and key("ConfigMap", "b") in h.cluster.objects
    conditions = outcome.state.conditions if outcome.state else []
    assert [c["type"] for c in conditions] == ["SyncError"] and "allowEmpty" in conditions[0]["message"]
    assert [e.result for e in h.state().history] == ["Succeeded"]
    h.configure(automated=True, prune=True, allow_empty=True)
    h.until_done()
    assert key("ConfigMap", "a") not in h.cluster.objects
    assert [e.result for e in h.state().history] == ["Succeeded", "Succeeded"]


def test_an_object_of_another_app_is_not_taken_over(h: Harness) -> None:
    h.cluster.add({**configmap("shared"), "metadata": {
        "name": "shared", "namespace": "ns", "labels": {"tidecd.io/app": "other"},
        "annotations": {"tidecd.io/tracking-id": "default:other:/ConfigMap:ns/shared"}}})
    h.git.push([configmap("shared"), configmap("mine")])
    h.sync()
    h.until_done()
    op = h.op()
    assert op.phase is OperationPhase.FAILED and "owned by tidecd app 'other'" in op.message
    assert h.cluster.objects[key("ConfigMap", "shared")]["metadata"]["labels"]["tidecd.io/app"] == "other"
    assert key("ConfigMap", "mine") not in h.cluster.objects
    h.git.push([configmap("shared", **{OPTIONS: "AllowTakeover=true"}), configmap("mine")])
    h.sync()
    h.until_done()
    assert h.op().phase is OperationPhase.SUCCEEDED
    marks = h.cluster.objects[key("ConfigMap", "shared")]["metadata"]
    assert marks["labels"]["tidecd.io/app"] == "app"
    assert marks["annotations"]["tidecd.io/tracking-id"] == "default:app:/ConfigMap:ns/shared"


def argocd_tracked(name: str, app: str = "app") -> dict[str, Any]:
    """A ConfigMap as Argo CD leaves it: its tracking id, written by its field manager."""
    return {**configmap(name), "metadata": {
        "name": name, "namespace": "ns",
        "annotations": {"argocd.argoproj.io/tracking-id": f"{app}:/ConfigMap:ns/{name}"},
        "managedFields": [{"manager": "argocd-controller", "operation": "Apply", "fieldsV1": {"f:metadata": {
            "f:annotations": {"f:argocd.argoproj.io/tracking-id": {}}}}}]}}


def test_argo_cd_objects_are_never_compared_overwritten_or_pruned(h: Harness) -> None:
    h.cluster.add(argocd_tracked("theirs", app="app"))
    before = copy.deepcopy(h.cluster.objects[key("ConfigMap", "theirs")])
    h.git.push([configmap("theirs", **{OPTIONS: "AllowTakeover=true"}), configmap("mine")])
    h.step()
    state = h.state()
    warning = [c for c in state.conditions if c["type"] == "SharedResourceWarning"]
    assert warning and "ConfigMap ns/theirs: tracked by Argo CD Application 'app'" in warning[0]["message"]
    assert [r.status for r in state.resources if r.name == "theirs"] == ["OutOfSync"]
    h.sync(prune=True)
    h.until_done()
    assert h.op().phase is OperationPhase.FAILED and "tidecd app adopt app" in h.op().message
    assert h.cluster.objects[key("ConfigMap", "theirs")] == before  # untouched
    assert key("ConfigMap", "mine") not in h.cluster.objects  # nothing written at all
    # git no longer declares it and the inventory (wrongly) lists it: still never pruned
    h.state_with_inventory([key("ConfigMap", "theirs")])
    h.git.push([configmap("mine")])
    h.sync(prune=True)
    h.until_done()
    assert h.op().phase is OperationPhase.SUCCEEDED, h.op().message
    assert h.cluster.objects[key("ConfigMap", "theirs")] == before


def test_another_installations_objects_are_refused(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    h.cluster.add({**configmap("c"), "metadata": {
        "name": "c", "namespace": "ns", "labels": {"tidecd.io/app": "app"},
        "annotations": {"tidecd.io/tracking-id": "blue:app:/ConfigMap:ns/c"}}})
    monkeypatch.setenv("TIDECD_INSTALLATION_ID", "green")
    h.git.push([configmap("c", **{OPTIONS: "AllowTakeover=true"})])
    h.sync()
    h.until_done()
    assert h.op().phase is OperationPhase.FAILED
    assert "owned by tidecd app 'app' of installation 'blue'" in h.op().message
    monkeypatch.setenv("TIDECD_INSTALLATION_ID", "blue")
    h.sync()
    h.until_done()
    assert h.op().phase is OperationPhase.SUCCEEDED


def test_an_older_tidecds_marks_keep_their_app_and_are_rewritten_by_the_next_sync(h: Harness) -> None:
    legacy = {**configmap("old"), "metadata": {
        "name": "old", "namespace": "ns", "labels": {"app.kubernetes.io/instance": "app"},
        "annotations": {"argocd.argoproj.io/tracking-id": "app:/ConfigMap:ns/old"},
        "managedFields": [{"manager": "tidecd", "operation": "Apply", "fieldsV1": {"f:metadata": {
            "f:labels": {"f:app.kubernetes.io/instance": {}},
            "f:annotations": {"f:argocd.argoproj.io/tracking-id": {}}}}}]}}
    h.cluster.add(legacy)
    uid = h.cluster.objects[key("ConfigMap", "old")]["metadata"]["uid"]
    h.git.push([configmap("old")])
    h.step()
    [status] = [r for r in h.state().resources if r.name == "old"]
    assert status.status == "OutOfSync" and "older tidecd" in status.diff
    assert not [c for c in h.state().conditions if c["type"] == "SharedResourceWarning"]
    h.sync()
    h.until_done()
    assert h.op().phase is OperationPhase.SUCCEEDED, h.op().message
    meta = h.cluster.objects[key("ConfigMap", "old")]["metadata"]
    assert meta["uid"] == uid
    assert meta["annotations"] == {"tidecd.io/tracking-id": "default:app:/ConfigMap:ns/old"}
    assert meta["labels"] == {"tidecd.io/app": "app"}
    h.step()
    assert h.state().sync_status == "Synced"


def test_an_app_may_opt_in_to_argo_cds_marks(h: Harness) -> None:
    h.runtime = fake_runtime(h.cluster, h.store, dataclasses.replace(
        application(), annotations=(("tidecd.io/write-argocd-tracking", "true"),)), h.git)
    h.git.push([configmap("c")])
    h.sync()
    h.until_done()
    meta = h.cluster.objects[key("ConfigMap", "c")]["metadata"]
    assert meta["annotations"]["argocd.argoproj.io/tracking-id"] == "app:/ConfigMap:ns/c"
    assert meta["annotations"]["tidecd.io/tracking-id"] == "default:app:/ConfigMap:ns/c"
    assert meta["labels"] == {"tidecd.io/app": "app", "app.kubernetes.io/instance": "app"}


def test_a_degraded_wave_runs_syncfail_and_fails(h: Harness) -> None:
    h.git.push([job("migrate", **{WAVE: "0"}), deployment("web", **{WAVE: "1"}),
                job("cleanup", **{HOOK: "SyncFail"})])
    h.sync()
    h.step()
    h.cluster.fail(key("Job", "migrate"))
    h.step()
    assert h.cluster.created("Job") == ["migrate", "cleanup"]
    assert h.op().running and h.op().failure
    h.cluster.complete(key("Job", "cleanup"))
    h.until_done()
    op = h.op()
    assert op.phase is OperationPhase.FAILED and "migrate" in op.message
    assert h.cluster.created("Deployment") == []


def test_terminate_deletes_running_hooks_and_fails(h: Harness) -> None:
    h.git.push([job("pre", **{HOOK: "PreSync"}), deployment("web")])
    op_id = h.sync()
    h.step()
    assert terminate_operation(h.runtime, "app") == op_id
    h.step()
    op = h.op()
    assert op.phase is OperationPhase.FAILED and op.message == "Operation terminated"
    assert key("Job", "pre") not in h.cluster.objects and h.cluster.created("Deployment") == []
    with pytest.raises(NotFound):
        terminate_operation(h.runtime, "app")


def test_a_second_operation_while_one_runs_is_refused(h: Harness) -> None:
    h.git.push([job("pre", **{HOOK: "PreSync"})])
    first = h.sync()
    with pytest.raises(OperationInProgress) as refused:
        h.sync()
    assert refused.value.operation_id == first


def test_before_hook_creation_deletes_the_old_copy_and_waits_for_it_to_go(h: Harness) -> None:
    h.git.push([job("pre", **{HOOK: "PreSync"}), configmap("c")])
    h.sync()
    h.step()
    h.cluster.complete(key("Job", "pre"))
    h.until_done()
    old_uid = h.cluster.objects[key("Job", "pre")]["metadata"]["uid"]
    h.cluster.slow_delete = True
    h.sync()
    h.step()
    assert h.op().step.startswith("waiting for deletion of batch/Job/ns/pre")
    h.cluster.finish_deletes()
    h.step()
    assert h.cluster.objects[key("Job", "pre")]["metadata"]["uid"] != old_uid
    h.cluster.complete(key("Job", "pre"))
    h.until_done()
    assert h.op().phase is OperationPhase.SUCCEEDED


def _throttled(verb: str, key: ResourceKey) -> None:
    if key.name == "bad":
        from tidecd.clients.cluster import ApiError

        raise ApiError(key, 429, "TooManyRequests", "the server is throttling", delay=1)


def test_retries_are_scheduled_continuations(h: Harness) -> None:
    h.configure(automated=True, retry=__import__("tidecd.config.load", fromlist=["Retry"]).Retry(limit=2))
    h.cluster.before_call = _throttled  # a temporary failure (429): worth retrying
    h.git.push([service("bad")])
    outcome = h.step()
    assert h.op().phase is OperationPhase.FAILED and outcome.continue_after == 5.0
    assert h.step().continue_after == pytest.approx(5.0)  # not yet: the backoff holds
    h.clock.advance(5)
    outcome = h.step()
    assert h.op().retry.count == 1 and outcome.continue_after == 10.0
    h.clock.advance(10)
    h.step()
    assert h.op().retry.count == 2
    h.clock.advance(100)
    assert h.step().continue_after is None  # limit reached
    assert [e.result for e in h.state().history] == ["Failed"] * 3


def test_a_permanent_failure_is_not_retried(h: Harness) -> None:
    """A port the API server refuses (422) would be refused again: no retry, whatever the retry policy."""
    h.configure(automated=True, retry=__import__("tidecd.config.load", fromlist=["Retry"]).Retry(limit=2))
    h.git.push([service("bad", port=99999)])
    outcome = h.step()
    op = h.op()
    assert op.phase is OperationPhase.FAILED and not op.retry.retryable and outcome.continue_after is None
    h.clock.advance(100)
    assert h.step().continue_after is None and h.op().id == op.id and h.op().retry.count == 0
    assert [e.result for e in h.state().history] == ["Failed"]


def test_a_dry_run_operation_writes_nothing_and_reports(h: Harness) -> None:
    h.git.push([configmap("a")])
    h.sync()
    h.until_done()
    h.git.push([configmap("a", "changed"), configmap("b")])
    h.sync(dry_run=True)
    outcome = h.until_done()
    assert {e.key.name: e.action for e in outcome.changes.entries} == {"a": Action.CONFIGURED, "b": Action.CREATED}
    assert key("ConfigMap", "b") not in h.cluster.objects
    assert len(h.state().history) == 1
    # kept on the operation, per object: what it would do (the api, the page and the CLI show these)
    op = h.op()
    assert {(r.key.name, r.action, r.phase) for r in op.results} == {
        ("a", Action.CONFIGURED, TaskPhase.SUCCEEDED), ("b", Action.CREATED, TaskPhase.SUCCEEDED)}
    assert all(r.message == "dry run" for r in op.results)


def generated_job(prefix: str, **notes: str) -> dict[str, Any]:
    obj = job("unused", **notes)
    del obj["metadata"]["name"]
    obj["metadata"]["generateName"] = prefix
    return obj


def test_a_generate_name_hook_is_created_once_per_operation_even_when_a_step_dies(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    h.git.push([generated_job("migrate-", **{HOOK: "PreSync"}), deployment("web")])
    h.sync()
    _step_dies_right_after_creating_a_job(h)
    [name] = h.cluster.created("Job")
    assert name.startswith(f"migrate-{h.git.head[:7]}-presync-")
    h.clock.advance(LEASE_TTL + 1)  # the killed step's lease expires
    h.step()
    assert h.cluster.created("Job") == [name]  # the resumed step found its hook: not created twice
    h.cluster.complete(key("Job", name))
    h.until_done()
    assert h.op().phase is OperationPhase.SUCCEEDED
    # The next operation names a new hook and, under BeforeHookCreation, deletes the earlier copy first.
    monkeypatch.setattr(app_state, "now_iso", lambda: "2031-01-01T00:00:00Z")  # a later operation start
    h.sync()
    h.step()
    second = [n for n in h.cluster.created("Job") if n != name]
    assert len(second) == 1 and second[0].startswith("migrate-")
    h.cluster.finish_deletes()
    assert key("Job", name) not in h.cluster.objects
    assert key("Job", second[0]) in h.cluster.objects


def test_a_source_error_fails_an_operation_before_its_first_write_and_postpones_it_after(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    from tidecd.base.errors import SourceUnavailable

    h.git.push([job("pre", **{HOOK: "PreSync"}), configmap("c")])
    render = h.git.render

    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise SourceUnavailable("repository unreachable", delay=7.0)

    h.runtime.render = unreachable  # the source is down
    h.sync()
    outcome = h.step()
    assert h.op().phase is OperationPhase.FAILED and "unreachable" in h.op().message
    assert outcome.continue_after is None
    h.runtime.render = render
    h.sync()
    h.step()  # the hook runs: the operation has written
    h.runtime.render = unreachable
    assert h.step().continue_after == 7.0 and h.op().running
    h.runtime.render = render
    h.cluster.complete(key("Job", "pre"))
    h.until_done()
    assert h.op().phase is OperationPhase.SUCCEEDED


def test_a_progressing_app_is_followed_after_its_sync_until_healthy(h: Harness) -> None:
    h.clock = FakeClock(unix("2026-01-01T00:00:10Z"))  # the fake cluster creates objects at 00:00:00
    h.git.push([deployment("web")])
    h.sync()
    outcome = h.step()
    assert h.op().phase is OperationPhase.SUCCEEDED and outcome.continue_after == awaited.MIN_DELAY
    h.clock.advance(60)  # a minute later, still Progressing: looked at less often (a backoff from its creation)
    assert h.step().continue_after == awaited.MAX_BACKOFF
    h.cluster.ready(key("Deployment", "web"))
    outcome = h.step()
    assert h.state().health == "Healthy" and outcome.continue_after is None


def test_an_operations_own_sync_options_replace_its_objects(h: Harness) -> None:
    """The sync panel's (and the api's) Replace=true: this operation replaces, the app's next sync applies."""
    h.git.push([configmap("a")])
    h.sync()
    h.until_done()
    h.git.push([configmap("a", "changed")])
    h.cluster.calls.clear()
    h.sync(sync_options=("Replace=true",))
    h.until_done()
    assert ("replace", key("ConfigMap", "a")) in h.cluster.calls and h.op().request.sync_options == ["Replace=true"]
    with pytest.raises(PermanentError, match="field syncOptions: 'Prune=false' is not one of"):
        h.sync(sync_options=("Prune=false",))
