"""The pure decision of an operation step, over many observations (no cluster, no store)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from tidecd.base import constants
from tidecd.base.model import Action, Manifest, ResourceKey
from tidecd.state.app import Operation, OperationPhase, OperationRequest, Progress, RetryState, TaskPhase, TaskResult
from tidecd.sync import decide as d
from tidecd.sync.plan import plan

WAVE = "argocd.argoproj.io/sync-wave"
HOOK = "argocd.argoproj.io/hook"
READY = {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1}


def obj(kind: str, name: str, api: str = "v1", *, status: dict[str, Any] | None = None,
        notes: Mapping[str, str] | None = None) -> Manifest:
    out: Manifest = {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": "ns",
                                                                   "annotations": dict(notes or {}), "generation": 1}}
    if status is not None:
        out["status"] = status
    return out


def dep(name: str, **notes: str) -> Manifest:
    return obj("Deployment", name, "apps/v1", notes=notes)


def k(manifest: Manifest) -> ResourceKey:
    return ResourceKey.of(manifest)


def observe(desired: list[Manifest], live: list[Manifest] = (), **fields: Any) -> d.Observation:  # type: ignore[assignment]
    values: dict[str, Any] = {"app": "app", "revision": "sha1", "tasks": tuple(plan(desired)),
                              "live": {k(m): m for m in live}, "now": 100.0}
    values.update(fields)
    return d.Observation(**values)


def running(*, checked: bool = False, only: list[dict[str, str]] | None = None, **fields: Any) -> Operation:
    return Operation(id="op1", revision="sha1", progress=Progress(checked=checked),
                     request=OperationRequest(only=only), **fields)


def result(manifest: Manifest, phase: TaskPhase = TaskPhase.RUNNING, sync_phase: str = "Sync", **f: Any) -> TaskResult:
    hook = sync_phase != "Sync" or bool(f.pop("hook", False))
    return TaskResult(k(manifest), sync_phase, int(manifest["metadata"]["annotations"].get(WAVE, 0)), hook,
                      Action.CREATED, phase, **f)


def ours(manifest: Manifest, op_id: str = "op1") -> Manifest:
    copy = {**manifest, "metadata": {**manifest["metadata"], "uid": "u1",
                                     "annotations": {**manifest["metadata"]["annotations"],
                                                     constants.ANNOTATION_OPERATION: op_id}}}
    return copy


AUTO = d.Policy(automated=True, prune=True)


def test_no_policy_no_operation_means_nothing() -> None:
    assert isinstance(d.decide(observe([dep("a")]), None, d.Policy()).step, d.Nothing)


def test_automated_starts_once_per_revision_unless_self_heal() -> None:
    assert isinstance(d.decide(observe([dep("a")]), None, AUTO).step, d.StartOperation)
    assert isinstance(d.decide(observe([dep("a")], synced=True), None, AUTO).step, d.Nothing)
    done = observe([dep("a")], auto_synced=True)
    assert isinstance(d.decide(done, None, AUTO).step, d.Nothing)
    assert isinstance(d.decide(done, None, dataclasses.replace(AUTO, self_heal=True)).step, d.StartOperation)
    assert isinstance(d.decide(observe([dep("a")], automated_disabled=True), None, AUTO).step, d.Nothing)


def test_automated_prune_of_everything_is_refused_without_allow_empty() -> None:
    empty = observe([], inventory=((k(dep("a")), 0),))
    refused = d.decide(empty, None, AUTO).step
    assert isinstance(refused, d.Refuse) and "allowEmpty" in refused.message
    assert isinstance(d.decide(empty, None, dataclasses.replace(AUTO, allow_empty=True)).step, d.StartOperation)
    assert isinstance(d.decide(empty, None, dataclasses.replace(AUTO, prune=False)).step, d.StartOperation)


def test_a_failed_automated_operation_is_retried_after_its_backoff() -> None:
    failed = Operation(id="x", revision="sha1", phase=OperationPhase.FAILED, request=OperationRequest(automated=True),
                       retry=RetryState(next_attempt_at=150.0))
    policy = dataclasses.replace(AUTO, retry_limit=2)
    wait = d.decide(observe([dep("a")]), failed, policy).step
    assert isinstance(wait, d.Nothing) and wait.retry_at == 150.0
    retry = d.decide(observe([dep("a")], now=151.0), failed, policy).step
    assert retry == d.StartOperation(retry_count=1, prune=True)
    exhausted = dataclasses.replace(failed, retry=RetryState(count=2, next_attempt_at=150.0))
    assert isinstance(d.decide(observe([dep("a")], now=151.0), exhausted, policy).step, d.Nothing)


def test_nothing_is_written_before_the_checks() -> None:
    violation = d.decide(observe([dep("a")], violations="project 'p' forbids: x"), running(), d.Policy()).step
    assert violation == d.Finish(OperationPhase.FAILED, "project 'p' forbids: x")
    other = {**obj("ConfigMap", "c"), "metadata": {"name": "c", "namespace": "ns", "annotations": {
        "tidecd.io/tracking-id": "default:theirs:/ConfigMap:ns/c"}}}
    taken = d.decide(observe([obj("ConfigMap", "c")], [other]), running(), d.Policy()).step
    assert isinstance(taken, d.Finish) and "owned by tidecd app 'theirs'" in taken.message
    argo = {**obj("ConfigMap", "c"), "metadata": {"name": "c", "namespace": "ns", "annotations": {
        "argocd.argoproj.io/tracking-id": "app:/ConfigMap:ns/c"}}}
    refused = d.decide(observe([obj("ConfigMap", "c", notes={"argocd.argoproj.io/sync-options": "AllowTakeover=true"})],
                               [argo]), running(),
                       d.Policy()).step
    assert isinstance(refused, d.Finish) and "tracked by Argo CD Application 'app'" in refused.message
    assert "tidecd app adopt app" in refused.message
    create = d.decide(observe([dep("a")], missing_namespaces=frozenset({"ns"})), running(),
                      d.Policy(create_namespace="ns")).step
    assert create == d.CreateNamespace("ns")


def test_the_dry_run_covers_new_objects_but_not_kinds_of_a_crd_in_the_same_sync() -> None:
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.x.io", "annotations": {}},
           "spec": {"group": "x.io", "names": {"kind": "Widget"}}}
    widget = obj("Widget", "w", "x.io/v1")
    gadget = obj("Gadget", "g", "y.io/v1")
    existing, broken = dep("existing"), dep("broken")
    step = d.decide(observe([crd, widget, gadget, dep("new"), existing, broken], [existing, broken],
                            unserved=frozenset({("x.io", "Widget"), ("y.io", "Gadget")}),
                            dry_run_errors={k(broken): "dry-run failed: immutable"}), running(), d.Policy()).step
    assert isinstance(step, d.DryRun)
    assert {t.key.name for t in step.tasks} == {"widgets.x.io", "g", "new"}  # existing: checked by the diff
    assert step.known_failures == ((k(broken), "dry-run failed: immutable"),)


def test_custom_resources_wait_a_moment_for_discovery_to_list_their_crds_kind() -> None:
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.x.io", "annotations": {}},
           "spec": {"group": "x.io", "names": {"kind": "Widget"}}}
    widget = obj("Widget", "w", "x.io/v1")
    established = {**crd, "status": {"conditions": [
        {"type": "Established", "status": "True", "lastTransitionTime": "1970-01-01T00:01:30Z"}]}}  # 90.0
    op = running(checked=True, results=[dataclasses.replace(result(crd), phase=TaskPhase.SUCCEEDED)])
    unserved = frozenset({("x.io", "Widget")})
    waiting = d.decide(observe([crd, widget], [established], unserved=unserved), op, d.Policy()).step
    assert waiting == d.Wait((k(crd),), "waiting for the API server to serve the kinds of "
                                        "apiextensions.k8s.io/CustomResourceDefinition/widgets.x.io")
    listed = d.decide(observe([crd, widget], [established]), op, d.Policy()).step
    assert isinstance(listed, d.RunTasks) and [t.key.name for t in listed.tasks] == ["w"]
    # past the grace, it is applied anyway and fails as unserved (as in Argo CD): no wait without end
    late = d.decide(observe([crd, widget], [established], unserved=unserved,
                            now=90.0 + d.SERVE_GRACE_SECONDS), op, d.Policy()).step
    assert isinstance(late, d.RunTasks)


def test_groups_run_in_order_and_only_non_final_ones_are_waited_for() -> None:
    db, web = dep("db", **{WAVE: "0"}), dep("web", **{WAVE: "1"})
    op = running(checked=True)
    first = d.decide(observe([db, web]), op, d.Policy()).step
    assert isinstance(first, d.RunTasks) and [t.key.name for t in first.tasks] == ["db"] and not first.final
    op.results = [result(db)]
    progressing = {**db, "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1}}
    wait = d.decide(observe([db, web], [progressing]), op, d.Policy())
    assert isinstance(wait.step, d.Wait) and wait.text == "waiting for healthy state of apps/Deployment/ns/db"
    healthy = {**db, "status": READY}
    second = d.decide(observe([db, web], [healthy]), op, d.Policy())
    assert isinstance(second.step, d.RunTasks) and second.step.final
    assert second.results[0].phase is TaskPhase.SUCCEEDED
    op.results = [dataclasses.replace(result(db), phase=TaskPhase.SUCCEEDED), result(web)]
    last = d.decide(observe([db, web], [healthy, web]), op, d.Policy()).step  # web still Progressing
    assert isinstance(last, d.Prune)
    op.progress.pruned = True
    assert d.decide(observe([db, web], [healthy, web]), op, d.Policy()).step == d.Finish(
        OperationPhase.SUCCEEDED, "successfully synced (all tasks run)")


def test_a_single_group_goes_straight_to_prune() -> None:
    web = dep("web")
    op = running(checked=True, results=[result(web)])
    assert isinstance(d.decide(observe([web], [web]), op, d.Policy()).step, d.Prune)


def test_degraded_fails_and_syncfail_hooks_run_first() -> None:
    db, web = dep("db", **{WAVE: "0"}), dep("web", **{WAVE: "1"})
    degraded = {**db, "status": {"observedGeneration": 1,
                                 "conditions": [{"type": "Progressing", "reason": "ProgressDeadlineExceeded"}]}}
    op = running(checked=True, results=[result(db)])
    failed = d.decide(observe([db, web], [degraded]), op, d.Policy()).step
    assert isinstance(failed, d.Finish) and failed.phase is OperationPhase.FAILED
    cleanup = obj("Job", "cleanup", "batch/v1", notes={HOOK: "SyncFail"})
    step = d.decide(observe([db, web, cleanup], [degraded]), op, d.Policy()).step
    assert isinstance(step, d.StartSyncFail) and "Degraded" in step.message
    op.failure = step.message
    run = d.decide(observe([db, web, cleanup], [degraded]), op, d.Policy()).step
    assert isinstance(run, d.RunTasks) and [t.key.name for t in run.tasks] == ["cleanup"]


def test_a_pending_hook_found_live_with_our_mark_is_adopted_not_recreated() -> None:
    pre = obj("Job", "pre", "batch/v1", notes={HOOK: "PreSync"})
    op = running(checked=True, results=[result(pre, TaskPhase.PENDING, "PreSync")])
    found = d.decide(observe([pre, dep("web")], [ours(pre)]), op, d.Policy())
    assert isinstance(found.step, d.Wait) and found.results[0].phase is TaskPhase.RUNNING
    assert found.results[0].uid == "u1"
    again = d.decide(observe([pre, dep("web")], []), op, d.Policy()).step  # never created: create it
    assert isinstance(again, d.RunTasks) and [t.key.name for t in again.tasks] == ["pre"]
    old = d.decide(observe([pre, dep("web")], [ours(pre, "older-op")]), op, d.Policy()).step
    assert old == d.DeleteHooks((k(pre),), "BeforeHookCreation")


def test_a_succeeded_hook_is_never_created_again() -> None:
    pre = obj("Job", "pre", "batch/v1", notes={HOOK: "PreSync"})
    web = dep("web")
    op = running(checked=True, results=[result(pre, TaskPhase.SUCCEEDED, "PreSync")])
    for live in ([], [ours(pre)]):
        step = d.decide(observe([pre, web], live), op, d.Policy()).step
        assert isinstance(step, d.RunTasks) and [t.key.name for t in step.tasks] == ["web"]


def test_terminating_deletes_running_hooks() -> None:
    pre = obj("Job", "pre", "batch/v1", notes={HOOK: "PreSync"})
    op = running(checked=True, phase=OperationPhase.TERMINATING, results=[result(pre, sync_phase="PreSync")])
    assert d.decide(observe([pre], [ours(pre)]), op, d.Policy()).step == d.Terminate((k(pre),))


def test_a_selective_sync_has_no_hooks_and_prunes_only_its_resources() -> None:
    pre = obj("Job", "pre", "batch/v1", notes={HOOK: "PreSync"})
    a, b = dep("a"), dep("b")
    op = running(checked=True, only=[k(a).to_dict()])
    step = d.decide(observe([pre, a, b], inventory=((k(b), 0), (ResourceKey("", "ConfigMap", "ns", "gone"), 0))),
                    op, d.Policy()).step
    assert isinstance(step, d.RunTasks) and [t.key.name for t in step.tasks] == ["a"]
    op.results = [result(a)]
    assert d.decide(observe([pre, a, b]), op, d.Policy()).step == d.Prune((), enabled=False)


def test_waves_wait_for_custom_resources_by_their_health_checks() -> None:
    """A Rollout in wave 0 holds wave 1 until it is Healthy (built-in check); argocd-cm's Lua check for it
    comes first when the Observation carries one (here: it fails the wave)."""
    ro = obj("Rollout", "canary", "argoproj.io/v1alpha1", notes={WAVE: "0"})
    web = dep("web", **{WAVE: "1"})
    op = running(checked=True, results=[result(ro)])
    wait = d.decide(observe([ro, web], [ro]), op, d.Policy())
    assert isinstance(wait.step, d.Wait)
    assert wait.results[0].message == "Waiting for rollout spec update to be observed"
    lua = {"argoproj.io/Rollout": 'return {status = "Degraded", message = "by the Lua check"}'}
    failed = d.decide(observe([ro, web], [ro], health_scripts=lua), op, d.Policy())
    assert isinstance(failed.step, d.Finish) and failed.step.phase is OperationPhase.FAILED
    assert failed.results[0].message == "Degraded: by the Lua check"
