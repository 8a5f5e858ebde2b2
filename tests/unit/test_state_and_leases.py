"""State files across versions, generation-precondition races and leases (with a fake clock)."""

from __future__ import annotations

import json
import threading

import pytest

from tests.unit.test_operation_steps import Harness, configmap, h  # noqa: F401 - h is the fixture
from tidecd.base.clock import FakeClock
from tidecd.base.model import HealthStatus, ResourceKey, SyncStatus
from tidecd.clients.store import (
    LEASE_TTL,
    LeaseKeeper,
    MemoryStore,
    PreconditionFailed,
    acquire_lease,
    read_lease,
    renew_lease,
)
from tidecd.state import app as app_state
from tidecd.state.app import AppState, CachedComparison, OperationPhase


def write(store: MemoryStore, app: str, data: bytes) -> int:
    return store.write(app_state.state_key(app), data)


def test_unknown_fields_are_kept_at_the_top_and_ignored_in_records() -> None:
    store = MemoryStore()
    doc = {"app": "a", "sync_status": "Synced", "health": "Healthy", "future_field": {"x": 1},
           "resources": [{"group": "", "kind": "ConfigMap", "namespace": "n", "name": "c", "status": "Synced",
                          "new_in_v9": True}],
           "operation": {"id": "o", "revision": "r", "phase": "Succeeded", "planned_by": "v9",
                         "results": [{"key": {"group": "", "kind": "ConfigMap", "namespace": "n", "name": "c"},
                                      "phase": "Succeeded", "later": 1}]}}
    write(store, "a", json.dumps(doc).encode())
    state, generation = app_state.load(store, "a")
    assert state.sync_status is SyncStatus.SYNCED and state.health is HealthStatus.HEALTHY
    assert state.resources[0].key == ResourceKey("", "ConfigMap", "n", "c")
    assert state.operation is not None and state.operation.phase is OperationPhase.SUCCEEDED
    app_state.save(store, state, if_generation_match=generation)
    again = json.loads(store.read(app_state.state_key("a")).data)  # type: ignore[union-attr]
    assert again["future_field"] == {"x": 1} and again["operation"]["planned_by"] == "v9"
    assert "new_in_v9" not in again["resources"][0]


def test_unknown_statuses_and_older_shapes_read_without_failing() -> None:
    store = MemoryStore()
    doc = {"app": "a", "sync_status": "Sideways", "health": "Glowing",
           "operation": {"phase": "Paused", "message": "m", "revision": "r", "started_at": "t",
                         "resources": [{"key": "old change entry"}], "automated": True},
           "history": [{"id": 1, "revision": "r", "deployed_at": "t", "result": "Succeeded"}, {"broken": True}],
           "comparison_cache": {"/ConfigMap n/c": ["fp", "12", "Synced", [], ""],
                                "/ConfigMap n/d": {"fingerprint": "fp", "live": "3", "status": "OutOfSync"},
                                "/ConfigMap n/e": {"fingerprint": "fp", "resource_version": "4",
                                                   "status": "Synced"}}}
    write(store, "a", json.dumps(doc).encode())
    state, _ = app_state.load(store, "a")
    assert (state.sync_status, state.health) == (SyncStatus.UNKNOWN, HealthStatus.UNKNOWN)
    assert state.operation is not None and state.operation.phase is OperationPhase.ERROR
    assert state.operation.request.automated and state.operation.extra["resources"] == [{"key": "old change entry"}]
    assert [entry.id for entry in state.history] == [1]
    # a record keyed by resourceVersion (before the live identity) reads with an identity nothing matches
    assert state.memo.comparisons == {"/ConfigMap n/d": CachedComparison("fp", "3", SyncStatus.OUT_OF_SYNC),
                                      "/ConfigMap n/e": CachedComparison("fp", "", SyncStatus.SYNCED)}


def test_multi_source_revisions_are_lists_and_older_joined_revisions_read_as_lists() -> None:
    """Each source's revision is a list in state, operation and history; a file of an older version that
    has only the comma-joined `revision` reads as that list; a malformed `revisions` falls back likewise."""
    store = MemoryStore()
    old = {"app": "a", "revision": "aaa,bbb,bbb",
           "operation": {"id": "o", "revision": "aaa,bbb,bbb", "phase": "Succeeded"},
           "history": [{"id": 1, "revision": "aaa,ccc", "deployed_at": "t", "result": "Succeeded"},
                       {"id": 2, "revision": "d" * 40, "deployed_at": "t", "result": "Succeeded"},
                       {"id": 3, "revision": "x,y", "revisions": "not a list", "deployed_at": "t",
                        "result": "Succeeded"}]}
    write(store, "a", json.dumps(old).encode())
    state, generation = app_state.load(store, "a")
    assert state.revisions == ["aaa", "bbb", "bbb"]
    assert state.operation is not None and state.operation.revisions == ["aaa", "bbb", "bbb"]
    assert [e.revisions for e in state.history] == [["aaa", "ccc"], [], ["x", "y"]]
    state.add_history("e1,e2", "Succeeded", "", "main", "op2", ["e1", "e2"])
    app_state.save(store, state, if_generation_match=generation)
    again = json.loads(store.read(app_state.state_key("a")).data)  # type: ignore[union-attr]
    assert again["revisions"] == ["aaa", "bbb", "bbb"] and again["revision"] == "aaa,bbb,bbb"
    assert again["operation"]["revisions"] == ["aaa", "bbb", "bbb"]
    assert [e["revisions"] for e in again["history"]] == [["aaa", "ccc"], [], ["x", "y"], ["e1", "e2"]]
    newer = {**again, "revisions": ["p", "q"], "revision": "p,q"}  # the list wins when both are there
    write(store, "a", json.dumps(newer).encode())
    assert app_state.load(store, "a")[0].revisions == ["p", "q"]


@pytest.mark.parametrize("data", [b'{"app": "a", "sync_st', b"", b"\xff\xfe", b"[1, 2]", b"null"])
def test_an_unreadable_state_file_is_a_condition_not_an_error(data: bytes) -> None:
    store = MemoryStore()
    generation = write(store, "a", data)
    state, found = app_state.load(store, "a")
    assert found == generation and state.origin.rebuilt
    assert [c["type"] for c in state.conditions] == [app_state.STATE_UNREADABLE]
    assert "state/apps/a.json" in state.conditions[0]["message"]
    app_state.save(store, state, if_generation_match=found)  # replaces the broken file
    assert not app_state.load(store, "a")[0].origin.rebuilt


def test_a_broken_state_file_is_rebuilt_by_the_next_reconcile(h: Harness) -> None:  # noqa: F811
    h.git.push([configmap("a"), configmap("b")])
    h.sync()
    h.until_done()
    write(h.store, "app", b'{"app": "app", "inventory": [{"gro')
    outcome = h.step()
    state = h.state()
    assert [c["type"] for c in state.conditions] == [app_state.STATE_UNREADABLE]
    assert {i["name"] for i in state.inventory} == {"a", "b"}  # from the live objects it owns
    assert state.sync_status is SyncStatus.SYNCED and outcome.continue_after is None
    h.step()
    assert h.state().conditions == []


def test_two_writers_cannot_both_write_from_the_same_generation() -> None:
    store = MemoryStore()
    generation = app_state.save(store, AppState(app="a"))
    first, g1 = app_state.load(store, "a")
    second, g2 = app_state.load(store, "a")
    first.add_history("r1", "Succeeded", "p", "main")
    app_state.save(store, first, if_generation_match=g1)
    second.add_history("r2", "Succeeded", "p", "main")
    with pytest.raises(PreconditionFailed):
        app_state.save(store, second, if_generation_match=g2)
    assert g1 == g2 == generation


def test_a_step_that_loses_a_race_re_reads_and_keeps_the_other_writers_history(h: Harness) -> None:  # noqa: F811
    h.git.push([configmap("a")])
    h.sync()
    raced: list[ResourceKey] = []

    def other_writer(verb: str, k: ResourceKey) -> None:
        if verb == "apply" and not raced:  # another writer records while this step works
            raced.append(k)
            current, generation = app_state.load(h.store, "app")
            current.add_history("elsewhere", "Succeeded", "p", "main")
            app_state.save(h.store, current, if_generation_match=generation)

    h.cluster.before_call = other_writer
    h.until_done()
    assert raced
    assert [e.revision for e in h.state().history][:1] == ["elsewhere"]
    assert [e.result for e in h.state().history] == ["Succeeded", "Succeeded"]
    assert h.op().phase is OperationPhase.SUCCEEDED


def test_a_lease_blocks_others_until_it_expires_then_is_taken_over() -> None:
    store, clock = MemoryStore(), FakeClock()
    assert LEASE_TTL == 60.0
    assert acquire_lease(store, "app", "first", LEASE_TTL, clock.now())
    clock.advance(59)
    assert not acquire_lease(store, "app", "second", LEASE_TTL, clock.now())
    assert renew_lease(store, "app", "first", LEASE_TTL, clock.now())  # renewed: good for 60 s more
    clock.advance(59)
    assert not acquire_lease(store, "app", "second", LEASE_TTL, clock.now())
    clock.advance(2)
    assert acquire_lease(store, "app", "second", LEASE_TTL, clock.now())  # expired: taken over
    assert not renew_lease(store, "app", "first", LEASE_TTL, clock.now())
    lease = read_lease(store, "app")
    assert lease is not None and lease.holder == "second"


def test_the_lease_keeper_renews_while_a_step_works_and_notices_a_takeover() -> None:
    store, clock = MemoryStore(), FakeClock()
    assert acquire_lease(store, "app", "me", LEASE_TTL, clock.now())
    keeper = LeaseKeeper(store, "app", "me", LEASE_TTL, clock=clock.now, interval=0.01).start()
    renewed = threading.Event()
    for _ in range(200):
        if keeper.renewals >= 2:
            renewed.set()
            break
        clock.advance(10)
        threading.Event().wait(0.01)
    assert renewed.is_set()
    assert read_lease(store, "app").expires_at > clock.now()  # type: ignore[union-attr]
    keeper.close(release=False)
    idle = LeaseKeeper(store, "app", "me", LEASE_TTL, clock=clock.now, interval=3600).start()
    clock.advance(LEASE_TTL + 1)  # the step stalled past its TTL
    assert acquire_lease(store, "app", "other", LEASE_TTL, clock.now())
    assert not idle.renew() and idle.lost
    idle.close()
    assert read_lease(store, "app").holder == "other"  # type: ignore[union-attr]  # not released by the loser


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.lease_writes = 0

    def write(self, key: str, data: bytes, *, if_generation_match: int | None = None) -> int:
        self.lease_writes += key.startswith("leases/")
        return super().write(key, data, if_generation_match=if_generation_match)


def test_a_fence_soon_after_acquiring_writes_nothing_and_a_late_one_notices_a_takeover() -> None:
    store, clock = CountingStore(), FakeClock()
    acquired = clock.now()
    assert acquire_lease(store, "app", "me", LEASE_TTL, acquired)
    keeper = LeaseKeeper(store, "app", "me", LEASE_TTL, clock=clock.now, interval=3600, acquired_at=acquired)
    assert store.lease_writes == 1
    for _ in range(5):  # a step's fences before each action, all within ttl / 3 of the acquire
        clock.advance(1)
        assert keeper.fence()
    assert store.lease_writes == 1, "no lease write while the lease surely is ours"
    clock.advance(LEASE_TTL / 3)  # later: the fence renews
    assert keeper.fence() and store.lease_writes == 2 and keeper.renewals == 1
    clock.advance(LEASE_TTL + 1)  # the step stalled past its lease and another caller took it over
    assert acquire_lease(store, "app", "other", LEASE_TTL, clock.now())
    assert not keeper.fence() and keeper.lost
    assert not keeper.fence(), "once lost, always lost"
    unknown = LeaseKeeper(store, "other-app", "me", LEASE_TTL, clock=clock.now, interval=3600)
    assert not unknown.fence(), "without a known acquire time the fence asks the store (no lease: not ours)"


class RacingStore(MemoryStore):
    """Before the first lease write lands, another renewal by the same holder lands first (the step's
    fence and the keeper's thread renewing at the same moment), so the first write's precondition fails."""

    def __init__(self) -> None:
        super().__init__()
        self.raced = False

    def write(self, key: str, data: bytes, *, if_generation_match: int | None = None) -> int:
        if key.startswith("leases/") and if_generation_match and not self.raced:
            self.raced = True
            super().write(key, data)
        return super().write(key, data, if_generation_match=if_generation_match)


def test_two_renewals_by_the_same_holder_at_once_are_not_a_takeover() -> None:
    store, clock = RacingStore(), FakeClock()
    assert acquire_lease(store, "app", "me", LEASE_TTL, clock.now())
    keeper = LeaseKeeper(store, "app", "me", LEASE_TTL, clock=clock.now, interval=3600)
    assert keeper.renew() and not keeper.lost
    assert store.raced  # the precondition really did fail once
    assert read_lease(store, "app").holder == "me"  # type: ignore[union-attr]


def test_a_broken_state_file_leaves_the_other_apps_alone() -> None:
    store = MemoryStore()
    app_state.save(store, AppState(app="good", sync_status=SyncStatus.SYNCED))
    write(store, "bad", b'{"app": "bad", "resou')
    assert app_state.load(store, "good")[0].sync_status is SyncStatus.SYNCED
    assert app_state.load(store, "bad")[0].origin.rebuilt
    assert not app_state.load(store, "good")[0].conditions
