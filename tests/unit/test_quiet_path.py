"""The no-op fast path (`tidecd.step.reconcile`, `state.quiet`): a step whose inputs and live resourceVersions are
those of the last full comparison answers "nothing changed" without re-comparing or writing; anything else
(drift, a new commit, a changed app, an object added or gone, another writer) compares in full."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.fakecluster import CountingStore, FakeCluster, FakeGit, application, fake_runtime
from tidecd.base.clock import FakeClock
from tidecd.base.model import ResourceKey
from tidecd.clients.store import LEASE_TTL, acquire_lease
from tidecd.runtime import Runtime
from tidecd.state import app as app_state
from tidecd.step import observe
from tidecd.step import reconcile as engine
from tidecd.step.reconcile import ALREADY_RUNNING, Outcome, reconcile
from tidecd.sync.apply import with_ownership
from tidecd.usecases import commands


class Counting:
    """Counts the full comparisons (`step.observe.compare_all`) a step makes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.compares = 0
        real = observe.compare_all

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.compares += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(observe, "compare_all", counted)


def configmap(name: str, value: str = "v") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": value}}


CM = ResourceKey("", "ConfigMap", "ns", "settings")


@pytest.fixture()
def setup(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeCluster, CountingStore, FakeGit, Runtime, Counting]]:
    cluster, store, git = FakeCluster(), CountingStore(), FakeGit()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    git.push([configmap("settings"), configmap("other")])
    runtime = fake_runtime(cluster, store, application(automated=True), git)
    yield cluster, store, git, runtime, Counting(monkeypatch)


def synced(runtime: Runtime, clock: FakeClock) -> Outcome:
    outcome = reconcile(runtime, "app", clock=clock)  # the automated sync: its record is a quiet one
    state = outcome.state
    assert state is not None and state.sync_status == "Synced" and state.health == "Healthy"
    assert not outcome.unchanged and state.memo.quiet, "a settled sync records what the next no-op compares"
    return outcome


def test_a_noop_step_answers_from_the_quiet_record_without_comparing_or_writing(setup: Any) -> None:
    cluster, store, git, runtime, counting = setup
    clock = FakeClock()
    synced(runtime, clock)
    store.writes.clear()
    counting.compares = 0
    calls = len(cluster.calls)

    for _ in range(3):
        clock.advance(30)
        outcome = reconcile(runtime, "app", clock=clock)
        assert outcome.unchanged and outcome.state is not None and outcome.state.sync_status == "Synced"

    assert counting.compares == 0
    assert store.state_writes() == []
    assert cluster.calls[calls:] == []  # no dry-run, no apply
    assert git.renders == 4  # the revision is still resolved and rendered (cached) each time


def test_a_noop_step_takes_no_lease_and_answers_beside_a_held_one(setup: Any) -> None:
    """The fast path looks before the lease (`reconcile.look`): a no-op writes nothing, its lease neither (a
    write and a delete on GCS for an answer that reads). Anything it would act on still takes the lease."""
    cluster, store, git, runtime, counting = setup
    clock = FakeClock()
    synced(runtime, clock)
    store.writes.clear()
    clock.advance(30)
    assert reconcile(runtime, "app", clock=clock).unchanged
    assert store.writes == [] and store.read("leases/app") is None

    assert acquire_lease(store, "app", "another-step", LEASE_TTL, clock.now())
    assert reconcile(runtime, "app", clock=clock).unchanged  # a read-only answer beside the step that holds it
    git.push([configmap("settings", "new"), configmap("other")])  # a new commit: this step would act
    assert reconcile(runtime, "app", clock=clock).skipped == ALREADY_RUNNING
    assert cluster.objects[CM]["data"] == {"k": "v"}  # untouched


def test_drift_changes_a_resource_version_and_is_compared_in_full(setup: Any) -> None:
    cluster, store, git, runtime, counting = setup
    clock = FakeClock()
    synced(runtime, clock)
    assert reconcile(runtime, "app", clock=clock).unchanged
    counting.compares = 0

    with cluster._lock:  # someone edits the live object (kubectl edit): a new resourceVersion
        cluster.objects[CM]["data"] = {"k": "by hand"}
        cluster._bump(cluster.objects[CM])
    outcome = reconcile(runtime, "app", clock=clock)

    assert not outcome.unchanged and counting.compares == 1
    state = outcome.state
    assert state is not None and state.sync_status == "OutOfSync"
    assert [r.name for r in state.resources if r.status == "OutOfSync"] == ["settings"]
    assert app_state.load(store, "app")[0].sync_status == "OutOfSync"
    again = reconcile(runtime, "app", clock=clock)  # the same drift, nothing new: it stays OutOfSync, quietly
    assert again.unchanged and again.state is not None and again.state.sync_status == "OutOfSync"


def test_a_sync_step_lists_each_kind_once_and_reads_no_applied_object_back(setup: Any,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison after the operation's end uses the step's live view (its list, kept current by the
    writes' results): no second list, no GET of an object whose write already reads Healthy. The quiet
    record made from that view is the one a fresh list gives: the next no-op answers from it."""
    cluster, store, git, runtime, counting = setup
    reads: list[str] = []
    real_list, real_get = cluster.list, cluster.get

    def listed(*args: Any, **kwargs: Any) -> Any:
        reads.append("list")
        return real_list(*args, **kwargs)

    def got(key: ResourceKey) -> Any:
        reads.append(f"get {key}")
        return real_get(key)

    monkeypatch.setattr(cluster, "list", listed)
    monkeypatch.setattr(cluster, "get", got)
    clock = FakeClock()

    synced(runtime, clock)

    # ConfigMaps by the app's label, then the two desired objects (not created yet) and their namespace
    # before the sync; nothing read back after it
    assert reads == ["list", "get ConfigMap ns/settings", "get ConfigMap ns/other", "get Namespace ns"]
    assert reconcile(runtime, "app", clock=clock).unchanged


def test_a_status_write_is_compared_in_full_from_the_cache_without_a_dry_run(setup: Any) -> None:
    """A controller's status write changes the resourceVersion (the quiet record misses), but not the live
    identity the comparison cache is keyed by: the verdict stands, health is read again, no dry-run."""
    cluster, store, git, runtime, counting = setup
    clock = FakeClock()
    synced(runtime, clock)
    counting.compares = 0
    calls = len(cluster.calls)

    with cluster._lock:  # what a controller's PUT of /status does
        cluster.objects[CM]["status"] = {"observed": "by a controller"}
        cluster._bump(cluster.objects[CM])
    outcome = reconcile(runtime, "app", clock=clock)

    assert not outcome.unchanged and counting.compares == 1
    assert cluster.calls[calls:] == []  # compared from the cache: no dry-run
    assert outcome.state is not None and outcome.state.sync_status == "Synced"
    with cluster._lock:  # an edit of what the app owns is not a status write: it is dry-run again
        cluster.objects[CM]["data"] = {"k": "by hand"}
        cluster._bump(cluster.objects[CM])
    outcome = reconcile(runtime, "app", clock=clock)
    assert ("dry-run", CM) in cluster.calls[calls:]
    assert outcome.state is not None and outcome.state.sync_status == "OutOfSync"


def test_drift_of_a_self_healing_app_is_repaired_through_the_full_path(setup: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, store, git, runtime, counting = setup
    runtime = fake_runtime(cluster, store, application(automated=True, self_heal=True), git)
    clock = FakeClock()
    synced(runtime, clock)
    assert reconcile(runtime, "app", clock=clock).unchanged

    with cluster._lock:
        del cluster.objects[CM]  # deleted by hand
    outcome = reconcile(runtime, "app", clock=clock)

    assert not outcome.unchanged
    assert cluster.objects[CM]["data"] == {"k": "v"}
    assert reconcile(runtime, "app", clock=clock).unchanged  # repaired, settled, quiet again


def test_a_new_commit_is_rendered_compared_and_synced(setup: Any) -> None:
    cluster, store, git, runtime, counting = setup
    clock = FakeClock()
    synced(runtime, clock)
    git.push([configmap("settings", "two"), configmap("other")])

    outcome = reconcile(runtime, "app", clock=clock)

    assert not outcome.unchanged and outcome.state is not None
    assert outcome.state.revision == git.head and cluster.objects[CM]["data"] == {"k": "two"}
    assert reconcile(runtime, "app", clock=clock).unchanged


def test_an_extra_labelled_object_or_a_changed_app_spec_compares_in_full(setup: Any) -> None:
    cluster, store, git, runtime, counting = setup
    clock = FakeClock()
    synced(runtime, clock)

    copied = copy.deepcopy(cluster.objects[CM])  # the app's label, but another object's tracking mark
    copied["metadata"]["name"] = "copied"
    cluster.add(copied)
    store.writes.clear()
    assert not reconcile(runtime, "app", clock=clock).unchanged  # compared in full: not the app's, no change
    assert store.state_writes() == []
    with cluster._lock:
        del cluster.objects[ResourceKey("", "ConfigMap", "ns", "copied")]
    assert reconcile(runtime, "app", clock=clock).unchanged  # back to what the record saw

    cluster.add(with_ownership(configmap("stray") | {"metadata": {"name": "stray", "namespace": "ns"}}, "app"))
    outcome = reconcile(runtime, "app", clock=clock)
    assert not outcome.unchanged and outcome.state is not None
    assert [r.name for r in outcome.state.resources if r.requires_pruning] == ["stray"]
    assert reconcile(runtime, "app", clock=clock).unchanged
    with cluster._lock:
        del cluster.objects[ResourceKey("", "ConfigMap", "ns", "stray")]
    outcome = reconcile(runtime, "app", clock=clock)
    assert not outcome.unchanged and outcome.state is not None
    assert not [r.name for r in outcome.state.resources if r.requires_pruning]

    runtime = fake_runtime(cluster, store, application(automated=True, prune=True), git)  # a config change
    assert not reconcile(runtime, "app", clock=clock).unchanged  # the app's spec changed


def test_another_writer_drops_the_quiet_record(setup: Any) -> None:
    cluster, store, git, runtime, counting = setup
    clock = FakeClock()
    synced(runtime, clock)
    state, generation = app_state.load(store, "app")
    assert state.memo.quiet
    state.inventory = []  # e.g. adoption rewriting the inventory
    app_state.save(store, state, if_generation_match=generation)

    assert not app_state.load(store, "app")[0].memo.quiet
    assert not reconcile(runtime, "app", clock=clock).unchanged


def test_a_running_operation_or_a_progressing_app_never_takes_the_fast_path(setup: Any) -> None:
    cluster, store, git, runtime, counting = setup
    git.push([configmap("settings"), {"apiVersion": "apps/v1", "kind": "Deployment",
                                      "metadata": {"name": "web"}, "spec": {"replicas": 1}}])
    clock = FakeClock()
    outcome = reconcile(runtime, "app", clock=clock)
    assert outcome.state is not None and outcome.state.health == "Progressing"
    assert not outcome.state.memo.quiet
    assert not reconcile(runtime, "app", clock=clock).unchanged  # still Progressing: compared in full

    cluster.ready(ResourceKey("apps", "Deployment", "ns", "web"))
    outcome = reconcile(runtime, "app", clock=clock)
    assert outcome.state is not None and outcome.state.health == "Healthy" and outcome.state.memo.quiet
    assert reconcile(runtime, "app", clock=clock).unchanged

    commands.start_operation(runtime, "app", commands.SyncRequest(initiated_by="test"))
    assert not app_state.load(store, "app")[0].memo.quiet
    outcome = reconcile(runtime, "app", clock=clock)  # an explicit sync runs in full ...
    assert not outcome.unchanged and outcome.state is not None and outcome.state.operation is not None
    assert outcome.state.operation.request.initiated_by == "test" and outcome.state.operation.phase == "Succeeded"
    assert outcome.state.memo.quiet  # ... and, running when its step began, still leaves a quiet record
    assert reconcile(runtime, "app", clock=clock).unchanged


def test_the_live_digest_covers_uid_resource_version_and_unserved_kinds() -> None:
    obj = {"metadata": {"uid": "u1", "resourceVersion": "5"}}
    live = {CM: obj}
    kinds = [("", "ConfigMap")]
    base = engine.live_digest(live, kinds, [])
    assert base == engine.live_digest({CM: copy.deepcopy(obj)}, kinds, [])
    assert base != engine.live_digest({CM: {"metadata": {"uid": "u1", "resourceVersion": "6"}}}, kinds, [])
    assert base != engine.live_digest({CM: {"metadata": {"uid": "u2", "resourceVersion": "5"}}}, kinds, [])
    assert base != engine.live_digest({}, kinds, [])
    assert base != engine.live_digest(live, kinds, [("x.io", "Widget")])


def test_a_refresh_only_record_never_stands_in_for_an_automated_step(setup: Any) -> None:
    cluster, store, git, runtime, counting = setup
    clock = FakeClock()
    synced(runtime, clock)
    git.push([configmap("settings", "two"), configmap("other")])

    refreshed = reconcile(runtime, "app", clock=clock, automate=False)  # e.g. `app refresh`: OutOfSync, no sync
    assert refreshed.state is not None and refreshed.state.sync_status == "OutOfSync" and refreshed.state.memo.quiet
    assert reconcile(runtime, "app", clock=clock, automate=False).unchanged

    outcome = reconcile(runtime, "app", clock=clock)  # the next automated step syncs the new commit
    assert not outcome.unchanged and cluster.objects[CM]["data"] == {"k": "two"}
