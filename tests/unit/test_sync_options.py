"""Sync options as Argo CD honours them: the pure decisions (which objects a sync writes, which it dry-runs
when), each checked against gitops-engine's `sync_context.go` and Argo CD's sync-options page."""

from __future__ import annotations

from typing import Any

from tests.unit.test_decide import WAVE, dep, k, obj, observe, result, running
from tests.unit.test_record_transitions import WEB, WEB_TASK, state
from tidecd.base.model import Action, ChangeEntry, Manifest, ResourceKey
from tidecd.clients.cluster import ApiError
from tidecd.config.model import IgnoreDifference
from tidecd.diff import respect_ignored
from tidecd.state.app import TaskPhase
from tidecd.step import record
from tidecd.step.execute import Executed
from tidecd.sync import decide as d
from tidecd.sync.apply import drop_field, explain, namespace_metadata_stale, resets, undeclared_fields, writes_synced
from tidecd.sync.plan import plan

ONLY_OUT_OF_SYNC = d.Policy(apply_out_of_sync_only=True)


def task_of(manifest: Manifest) -> Any:
    [task] = plan([manifest])
    return task


def test_apply_out_of_sync_only_leaves_synced_objects_out_of_the_sync() -> None:
    """gitops-engine `filterOutOfSyncTasks`: a live, unmodified resource is no task at all (no result, its
    wave not run); new, OutOfSync objects and hooks stay."""
    same, changed, new = dep("same", **{WAVE: "0"}), dep("changed", **{WAVE: "1"}), dep("new", **{WAVE: "1"})
    hook = obj("Job", "pre", "batch/v1", notes={"argocd.argoproj.io/hook": "PreSync"})
    seen = observe([same, changed, new, hook], [same, changed], out_of_sync=frozenset({k(changed)}))
    first = d.decide(seen, running(checked=True), ONLY_OUT_OF_SYNC).step
    assert isinstance(first, d.RunTasks) and [t.key.name for t in first.tasks] == ["pre"]
    op = running(checked=True, results=[result(hook, TaskPhase.SUCCEEDED, "PreSync")])
    step = d.decide(seen, op, ONLY_OUT_OF_SYNC).step  # wave 0 holds only a Synced object: not run
    assert isinstance(step, d.RunTasks) and step.wave == 1 and {t.key.name for t in step.tasks} == {"changed", "new"}
    everything = d.decide(seen, op, d.Policy()).step  # without the option every object is a task
    assert isinstance(everything, d.RunTasks) and [t.key.name for t in everything.tasks] == ["same"]
    # a task the operation ran already stays (it compares Synced because it was applied)
    done = running(checked=True, results=[result(hook, TaskPhase.SUCCEEDED, "PreSync"),
                                          result(same, TaskPhase.SUCCEEDED)])
    assert [t.key.name for t in d.out_of_sync_only(list(seen.tasks), seen, {r.id for r in done.results})] == [
        "pre", "same", "changed", "new"]


def test_the_dry_run_of_apply_out_of_sync_only_skips_synced_objects() -> None:
    same, new = dep("same"), dep("new")
    step = d.decide(observe([same, new], [same]), running(), ONLY_OUT_OF_SYNC).step
    assert isinstance(step, d.DryRun) and [t.key.name for t in step.tasks] == ["new"]


def test_a_synced_object_is_written_only_when_the_write_can_change_it() -> None:
    """Argo CD applies every object (ApplyOutOfSyncOnly=true: only OutOfSync ones); tidecd skips the applies
    that change nothing: a Synced object is written for Replace=true, or for fields ignoreDifferences hides
    (reset to git) unless RespectIgnoreDifferences=true."""
    plain, replace = task_of(dep("a")), task_of(dep("b", **{"argocd.argoproj.io/sync-options": "Replace=true"}))
    assert not writes_synced(plain, only_out_of_sync=False, respect=False, hidden=False)
    assert writes_synced(plain, only_out_of_sync=False, respect=False, hidden=True)
    assert not writes_synced(plain, only_out_of_sync=False, respect=True, hidden=True)
    assert not writes_synced(plain, only_out_of_sync=True, respect=False, hidden=True)
    assert writes_synced(replace, only_out_of_sync=False, respect=True, hidden=False)
    assert not writes_synced(replace, only_out_of_sync=True, respect=False, hidden=False)


def test_hidden_differences_are_what_respect_ignored_would_keep() -> None:
    """`hidden` is `resets(desired, respect_ignored(desired, live))`: the live value of an ignored field git
    sets differs; a field git leaves out (an autoscaler's replicas) is not reset by the apply."""
    rules = (IgnoreDifference(kind="ConfigMap", json_pointers=("/data/x",)),)
    desired: Manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"},
                         "data": {"x": "1", "y": "1"}}
    same = {**desired, "data": {"x": "1", "y": "1"}}
    drifted = {**desired, "data": {"x": "2", "y": "1"}}
    assert respect_ignored(desired, same, rules) == desired
    assert respect_ignored(desired, drifted, rules) != desired
    assert respect_ignored(desired, drifted, ()) == desired  # no rule: nothing hidden
    assert not resets(desired, respect_ignored(desired, same, rules))
    assert resets(desired, respect_ignored(desired, drifted, rules))
    unset = {**desired, "data": {"y": "1"}}  # git does not set x; the live object has it
    assert respect_ignored(unset, drifted, rules) != unset and not resets(unset, respect_ignored(unset, drifted, rules))


def test_a_refusal_an_earlier_wave_may_lift_waits_for_its_wave() -> None:
    """Argo CD's dry-run before the first write is kubectl's client-side one (gitops-engine `applyObject`:
    "always run in client dry run mode"), so a wave-2 Pod naming a ServiceAccount of wave 0 syncs. tidecd
    dry-runs on the server: the Pod's refusal (403 from admission) waits for wave 2; a refusal about the
    object itself (422, 400), or one with no earlier write that could lift it, fails before any write."""
    sa, pod = obj("ServiceAccount", "runner", notes={WAVE: "0"}), obj("Pod", "job", notes={WAVE: "2"})
    same = obj("ConfigMap", "same", notes={WAVE: "-1"})
    seen = observe([same, sa, pod], [same])
    check = d.decide(seen, running(), d.Policy()).step
    assert isinstance(check, d.DryRun) and check.later == frozenset({k(pod)})  # wave 0 writes first
    assert d.waiting_for_their_group(check, {k(pod): 403}) == {k(pod)}
    assert d.waiting_for_their_group(check, {k(pod): 404, k(sa): 403}) == {k(pod)}  # sa: nothing before it
    assert d.waiting_for_their_group(check, {k(pod): 422}) == frozenset()
    assert d.waiting_for_their_group(check, {k(pod): 400}) == frozenset()
    nothing_new = observe([same, sa, pod], [same, sa])  # wave 0 exists and is Synced: it writes nothing
    late = d.decide(nothing_new, running(), d.Policy()).step
    assert isinstance(late, d.DryRun) and late.later == frozenset()
    # checked, the Pod deferred: wave 0 runs, then the Pod's dry-run comes before any write of wave 2
    op = running(checked=True)
    op.progress.deferred = [k(pod).to_dict()]
    first = d.decide(seen, op, d.Policy()).step
    assert isinstance(first, d.RunTasks) and [t.key.name for t in first.tasks] == ["same"]
    op.results = [result(same, TaskPhase.SUCCEEDED), result(sa, TaskPhase.SUCCEEDED)]
    again = d.decide(observe([same, sa, pod], [same, sa]), op, d.Policy())
    assert isinstance(again.step, d.DryRun) and again.step.at_group and [t.key.name for t in again.step.tasks] == [
        "job"]
    assert again.text == "dry-run of 1 object(s) before their wave"
    assert d.waiting_for_their_group(again.step, {k(pod): 403}) == frozenset()  # at its wave it fails
    op.progress.deferred = []
    run = d.decide(observe([same, sa, pod], [same, sa]), op, d.Policy()).step
    assert isinstance(run, d.RunTasks) and [t.key.name for t in run.tasks] == ["job"]


def test_managed_namespace_metadata_is_applied_whenever_it_does_not_hold() -> None:
    """Argo CD (controller/sync_namespace.go): with managedNamespaceMetadata the namespace's metadata is
    applied server-side on every sync, so a changed value lands and a label it set and dropped goes;
    tidecd applies it when that would change something."""
    def ns(labels: dict[str, str], annotations: dict[str, str], owned: list[str]) -> Manifest:
        fields: dict[str, Any] = {"f:metadata": {"f:labels": {f"f:{name}": {} for name in owned}}}
        return {"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "ns", "labels": labels, "annotations": annotations,
                             "managedFields": [{"manager": "tidecd", "operation": "Apply", "fieldsV1": fields},
                                               {"manager": "kubectl", "operation": "Update", "fieldsV1": {
                                                   "f:metadata": {"f:labels": {"f:theirs": {}}}}}]}}
    live = ns({"team": "a", "theirs": "x"}, {"note": "n"}, ["team"])
    assert not namespace_metadata_stale(None, {"team": "a"}, {})  # created, not patched
    assert not namespace_metadata_stale(live, {"team": "a"}, {"note": "n"})
    assert namespace_metadata_stale(live, {"team": "b"}, {})  # a changed value
    assert namespace_metadata_stale(live, {"team": "a", "tier": "1"}, {})  # a new label
    assert namespace_metadata_stale(live, {"team": "a"}, {"other": "o"})  # a new annotation
    assert namespace_metadata_stale(live, {"tier": "1"}, {}) and namespace_metadata_stale(live, {}, {"x": "y"})
    assert not namespace_metadata_stale(ns({"team": "a", "theirs": "x"}, {}, ["team"]), {"team": "a"}, {})
    dropped = ns({"team": "a", "tier": "1"}, {}, ["team", "tier"])
    assert namespace_metadata_stale(dropped, {"team": "a"}, {})  # ours, no longer named: removed by the apply
    ns_key = ResourceKey("", "Namespace", "", "ns")
    step = d.decide(observe([dep("a")], [dep("a")], out_of_sync=frozenset({ns_key})), running(),
                    d.Policy(create_namespace="ns")).step
    assert step == d.CreateNamespace("ns")  # before the dry-run, as Argo CD's namespace task
    kept = d.decide(observe([dep("a")], [dep("a")]), running(), d.Policy(create_namespace="ns")).step
    assert isinstance(kept, d.DryRun)


def test_validate_false_drops_the_fields_server_side_apply_says_are_undeclared() -> None:
    """`kubectl apply --validate=false` drops unknown fields; server-side apply refuses them whatever
    fieldValidation says (`.invalidKey: field not declared in schema`, a 500), so tidecd drops what it names."""
    one = ("ConfigMap ns/invalid-cm: failed to create typed patch object (ns/invalid-cm; /v1, Kind=ConfigMap): "
           ".invalidKey: field not declared in schema")
    assert undeclared_fields(one) == [[".invalidKey"]]
    many = ('failed to create typed patch object (ns/web; apps/v1, Kind=Deployment): errors:\n'
            '  .spec.template.spec.containers[name="web"].bogus: field not declared in schema\n'
            '  .spec.extra: field not declared in schema')
    paths = undeclared_fields(many)
    assert paths == [[".spec", ".template", ".spec", ".containers", '[name="web"]', ".bogus"], [".spec", ".extra"]]
    web: dict[str, Any] = {"spec": {"extra": 1, "template": {"spec": {"containers": [
        {"name": "side", "bogus": 1}, {"name": "web", "image": "x", "bogus": 2}]}}}}
    assert all(drop_field(web, path) for path in paths)
    assert web == {"spec": {"template": {"spec": {"containers": [{"name": "side", "bogus": 1},
                                                                 {"name": "web", "image": "x"}]}}}}
    assert not drop_field(web, [".spec", ".extra"])  # gone already: the refusal stands
    assert drop_field({"l": [{"a": 1}, {"b": 2}]}, [".l", "[1]", ".b"])
    assert drop_field({"s": ["x", "y"]}, [".s", '[="y"]'])
    assert not drop_field({"l": [{"name": "a"}]}, [".l", '[name="b"]', ".x"])
    assert undeclared_fields("spec.ports[0].port: Invalid value: 99999") == []


def test_an_undeclared_field_names_validate_false() -> None:
    message = ".invalidKey: field not declared in schema"
    exc = ApiError(ResourceKey("", "ConfigMap", "ns", "c"), 500, "InternalError", message)
    assert "Validate=false" in explain(exc) and undeclared_fields(explain(exc)) == [[".invalidKey"]]
    assert "Validate=false" not in explain(ApiError(None, 500, "InternalError", "etcd timed out"))


def test_a_deferred_refusal_is_kept_then_fails_its_own_task_at_its_wave() -> None:
    """The bookkeeping of `step.record.dry_run`: a refusal that waits is no failure (the operation is checked,
    the object kept in `progress.deferred`); at its wave a refusal is that task's failed result."""
    refused = Executed(entries=(ChangeEntry(WEB, Action.FAILED, "forbidden: no ServiceAccount"),), refused={WEB: 403})
    upfront = d.DryRun((WEB_TASK,), later=frozenset({WEB}))
    checked, shown, failure = record.dry_run(state(), refused, [], upfront)
    assert failure == "" and shown == [] and checked.operation is not None
    assert checked.operation.progress.checked and checked.operation.progress.deferred_keys() == {WEB}
    invalid = Executed(entries=refused.entries, refused={WEB: 422})  # about the object itself: fails now
    assert "nothing was written" in record.dry_run(state(), invalid, [], upfront)[2]
    at_wave = d.DryRun((WEB_TASK,), at_group=True)
    after, shown, failure = record.dry_run(checked, refused, [], at_wave)
    assert failure == "" and [e.key for e in shown] == [WEB] and after.operation is not None
    assert after.operation.progress.deferred_keys() == frozenset()
    [failed] = [r for r in after.operation.results if r.phase is TaskPhase.FAILED]
    assert failed.key == WEB and "before its wave" in failed.message
