"""Coalescing records, the local scheduler and the step runner, with a fake reconcile (no cluster)."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from tidecd.clients.store import MemoryStore
from tidecd.runtime import Runtime, Settings
from tidecd.triggers import dispatch, pending
from tidecd.triggers.dispatch import DirectDispatcher, NotYet, Refresh, check_due, decode_refresh, run_step
from tidecd.triggers.scheduler import LocalScheduler

SHA_A, SHA_B = "a" * 40, "b" * 40


# --- pending/<app>: coalescing -----------------------------------------------------------------------------


def test_first_claim_wins_and_later_ones_only_mark_again() -> None:
    store = MemoryStore()
    assert pending.claim(store, "web", SHA_A) is True
    assert pending.claim(store, "web", SHA_A) is False
    generation = store.read("pending/web").generation  # type: ignore[union-attr]
    assert pending.claim(store, "web", SHA_A) is False
    assert store.read("pending/web").generation == generation  # type: ignore[union-attr]  # a repeat mark writes nothing
    assert pending.claim(store, "other", SHA_A) is True  # apps are independent


def test_finish_runs_again_only_for_a_revision_the_run_did_not_see() -> None:
    store = MemoryStore()
    assert pending.claim(store, "web", SHA_A)
    pending.claim(store, "web", SHA_A)
    assert pending.finish(store, "web", reconciled=SHA_A) is False
    assert store.read("pending/web") is None  # done: the next delivery claims anew

    assert pending.claim(store, "web", SHA_A)
    pending.claim(store, "web", SHA_B)
    assert pending.finish(store, "web", reconciled=SHA_A) is True
    assert pending.claim(store, "web", SHA_B) is False  # kept for the re-run: still coalescing
    assert pending.finish(store, "web", reconciled=SHA_B) is False
    assert store.read("pending/web") is None


def test_a_mark_without_revision_always_runs_again() -> None:
    store = MemoryStore()
    assert pending.claim(store, "web", SHA_A)
    pending.claim(store, "web", "")  # e.g. the poll's drift sweep
    assert pending.finish(store, "web", reconciled=SHA_A) is True


def test_a_claim_of_a_dead_process_is_taken_over() -> None:
    store, clock = MemoryStore(), [1000.0]
    assert pending.claim(store, "web", SHA_A, now=lambda: clock[0])
    clock[0] += pending.STALE_AFTER - 1
    assert pending.claim(store, "web", SHA_A, now=lambda: clock[0]) is False
    clock[0] += 2
    assert pending.claim(store, "web", SHA_A, now=lambda: clock[0]) is True


def test_concurrent_claims_hand_over_exactly_once() -> None:
    store = MemoryStore()
    results: list[bool] = []
    barrier = threading.Barrier(20)

    def claim(i: int) -> None:
        barrier.wait()
        results.append(pending.claim(store, "web", f"{i:040d}"))

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1
    doc = pending._record(store, "pending/web")[0]
    assert doc is not None and len(doc["again"]) == 19  # every other revision marked, none lost


def test_continuation_records_and_overdue() -> None:
    store = MemoryStore()
    pending.record_continuation(store, "web", 5.0, "wave 1", "tok", now=lambda: 1000.0)
    [cont] = pending.continuations(store)
    assert (cont.app, cont.token, cont.due) == ("web", "tok", 1005.0)
    assert not cont.overdue(1000.0 + pending.OVERDUE_GRACE)
    assert cont.overdue(1006.0 + pending.OVERDUE_GRACE)
    pending.clear_continuation(store, "web")
    pending.clear_continuation(store, "web")  # absent is fine
    assert pending.continuations(store) == []


# --- the local scheduler -----------------------------------------------------------------------------------


def test_scheduler_runs_jobs_when_due_one_per_key() -> None:
    scheduler = LocalScheduler(workers=2)
    ran: list[tuple[str, float]] = []
    start = time.monotonic()

    def job(name: str) -> Any:
        return lambda: ran.append((name, time.monotonic() - start))

    scheduler.submit("late", 0.3, job("late"))
    scheduler.submit("soon", 0.0, job("soon"))
    scheduler.submit("soon", 0.2, job("soon-again"))  # the earlier one is kept
    assert scheduler.wait_idle(5)
    assert [name for name, _ in ran] == ["soon", "late"]
    assert ran[1][1] >= 0.3


def test_scheduler_defers_a_key_while_it_runs_and_retries_on_request() -> None:
    scheduler = LocalScheduler(workers=4)
    inside, overlaps, runs = [0], [0], []
    gate = threading.Event()

    def job() -> float | None:
        inside[0] += 1
        overlaps[0] = max(overlaps[0], inside[0])
        runs.append(time.monotonic())
        if len(runs) == 1:
            gate.wait(2)
        inside[0] -= 1
        return 0.05 if len(runs) == 2 else None  # the second run asks to run again (a held lease)

    scheduler.submit("web", 0, job)
    time.sleep(0.1)
    scheduler.submit("web", 0, job)  # while the first runs: deferred, not side by side
    gate.set()
    assert scheduler.wait_idle(5)
    assert overlaps[0] == 1 and len(runs) == 3


def test_a_failing_job_does_not_stop_the_scheduler() -> None:
    scheduler = LocalScheduler(workers=1)
    ran: list[str] = []

    def boom() -> None:
        raise RuntimeError("bug")

    scheduler.submit("a", 0, boom)
    scheduler.submit("b", 0.05, lambda: ran.append("b"))
    assert scheduler.wait_idle(5) and ran == ["b"]


# --- messages ----------------------------------------------------------------------------------------------


def event(refresh: Refresh) -> dict[str, Any]:
    return {"message": {"data": base64.b64encode(refresh.to_json()).decode(), "attributes": refresh.attributes(),
                        "messageId": "1"}}


def test_continuation_messages_round_trip_and_are_refused_while_early() -> None:
    cont = dispatch.continuation("web", 30, "wave 1", now=lambda: 1000.0)
    decoded = decode_refresh(event(cont))
    assert decoded == cont and decoded.continuation and decoded.attributes()["notBefore"] == "1030.000"
    with pytest.raises(NotYet, match="due in 20.0s"):
        check_due(decoded, now=lambda: 1010.0)
    check_due(decoded, now=lambda: 1029.8)  # within the slack
    check_due(Refresh("web", "poll"), now=lambda: 0.0)  # a refresh is always due
    with pytest.raises(dispatch.BadRefreshMessage, match="notBefore"):
        decode_refresh({"message": {"data": base64.b64encode(b'{"app": "w", "notBefore": "soon"}').decode()}})


# --- run_step with a fake reconcile ------------------------------------------------------------------------


@dataclass
class FakeState:
    revision: str = SHA_A


@dataclass
class FakeOutcome:
    app: str
    state: FakeState | None = field(default_factory=FakeState)
    skipped: str = ""
    continue_after: float | None = None
    refresh: tuple[str, ...] = ()
    deployed: str = ""


class FakeEngine:
    """Stands in for tidecd.step.reconcile.reconcile: records calls, answers from a script."""

    def __init__(self, answers: Sequence[FakeOutcome] = (), delay: float = 0.0) -> None:
        self.answers, self.delay = list(answers), delay
        self.calls: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, runtime: Runtime, name: str, *, reason: str = "", **_: Any) -> FakeOutcome:
        with self.lock:
            self.calls.append((name, reason))
            answer = self.answers.pop(0) if self.answers else FakeOutcome(name)
        time.sleep(self.delay)
        return answer


class Recorder:
    def __init__(self) -> None:
        self.scheduled: list[tuple[str, float, str]] = []
        self.dispatched: list[Refresh] = []

    def dispatch(self, refreshes: Sequence[Refresh]) -> dict[str, str]:
        self.dispatched.extend(refreshes)
        return {}

    def schedule(self, app: str, delay: float, reason: str) -> None:
        self.scheduled.append((app, delay, reason))


@pytest.fixture()
def runtime() -> Runtime:
    return Runtime(settings=Settings(), store=MemoryStore())


def test_a_step_that_asks_for_more_schedules_its_continuation(runtime: Runtime,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FakeEngine([FakeOutcome("web", continue_after=4.0), FakeOutcome("web")])
    monkeypatch.setattr("tidecd.step.reconcile.reconcile", engine)
    recorder = Recorder()
    run_step(runtime, Refresh("web", "api sync"), recorder)
    assert recorder.scheduled == [("web", 4.0, "continue: api sync")]
    pending.record_continuation(runtime.store, "web", 4.0, "continue", "t1")
    run_step(runtime, Refresh("web", "continue", not_before=1, token="t1"), recorder)
    assert len(recorder.scheduled) == 1  # done: nothing more, and the record is gone
    assert pending.continuation(runtime.store, "web") is None


def test_apps_a_step_changed_are_refreshed(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tidecd.step.reconcile.reconcile", FakeEngine([FakeOutcome("root", refresh=("a", "b"))]))
    recorder = Recorder()
    run_step(runtime, Refresh("root", "webhook"), recorder)
    assert [(r.app, r.reason) for r in recorder.dispatched if r.app != "root"] == [
        ("a", "changed by root"), ("b", "changed by root")]


def test_one_chain_of_continuations_per_app(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tidecd.step.reconcile.reconcile", FakeEngine([FakeOutcome("web", continue_after=5.0)] * 3))
    recorder = Recorder()
    pending.record_continuation(runtime.store, "web", 5.0, "wave 1", "newest")
    run_step(runtime, Refresh("web", "old", not_before=1, token="older"), recorder)  # a superseded chain
    run_step(runtime, Refresh("web", "webhook"), recorder)  # the live chain comes soon enough
    assert recorder.scheduled == []
    run_step(runtime, Refresh("web", "wave 1", not_before=1, token="newest"), recorder)
    assert recorder.scheduled == [("web", 5.0, "wave 1")]


def test_a_skipped_step_changes_nothing(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tidecd.step.reconcile.reconcile", FakeEngine([FakeOutcome("web", skipped="lease held")]))
    assert pending.claim(runtime.store, "web", SHA_A)
    recorder = Recorder()
    assert run_step(runtime, Refresh("web", "webhook", SHA_A), recorder).skipped
    assert recorder.scheduled == [] and runtime.store.read("pending/web") is not None


def test_burst_of_refreshes_through_the_local_scheduler_coalesces(runtime: Runtime,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FakeEngine(delay=0.2)
    monkeypatch.setattr("tidecd.step.reconcile.reconcile", engine)
    scheduler = LocalScheduler()
    dispatcher = DirectDispatcher(lambda: runtime, store=runtime.store, scheduler=scheduler)
    for _ in range(50):
        assert dispatcher.dispatch([Refresh("web", "webhook", SHA_A)]) == {}
    assert scheduler.wait_idle(10)
    assert len(engine.calls) == 1  # every later delivery only marked it, for the revision it saw
    assert runtime.store.read("pending/web") is None

    # the first run reconciles SHA_A while deliveries name SHA_B; the run after it sees SHA_B
    engine.answers = [FakeOutcome("web", FakeState(SHA_A)), FakeOutcome("web", FakeState(SHA_B))]
    assert dispatcher.dispatch([Refresh("web", "webhook", SHA_A)]) == {}
    time.sleep(0.05)
    for _ in range(10):
        dispatcher.dispatch([Refresh("web", "webhook", SHA_B)])
    assert scheduler.wait_idle(10)
    assert len(engine.calls) == 3  # the second burst: one run, and once again at the end for SHA_B
    assert engine.calls[-1][1].startswith("again after: webhook")


def test_local_continuations_run_when_due_without_a_caller_waiting(runtime: Runtime,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FakeEngine([FakeOutcome("web", continue_after=0.3), FakeOutcome("web", continue_after=0.3),
                         FakeOutcome("web")])
    monkeypatch.setattr("tidecd.step.reconcile.reconcile", engine)
    scheduler = LocalScheduler()
    dispatcher = DirectDispatcher(lambda: runtime, store=runtime.store, scheduler=scheduler)
    start = time.monotonic()
    dispatcher.dispatch([Refresh("web", "api sync")])
    assert time.monotonic() - start < 0.1  # handed over, not run
    assert scheduler.wait_idle(10)
    assert len(engine.calls) == 3 and time.monotonic() - start >= 0.6
    assert pending.continuation(runtime.store, "web") is None


def test_local_step_retries_while_the_lease_is_held(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatch, "LEASE_RETRY", 0.05)
    engine = FakeEngine([FakeOutcome("web", skipped="lease held"), FakeOutcome("web")])
    monkeypatch.setattr("tidecd.step.reconcile.reconcile", engine)
    scheduler = LocalScheduler()
    DirectDispatcher(lambda: runtime, store=runtime.store, scheduler=scheduler).dispatch([Refresh("web", "poll")])
    assert scheduler.wait_idle(5) and len(engine.calls) == 2


def test_the_step_budget_comes_from_the_environment() -> None:
    from tidecd.base.errors import ConfigError

    assert Settings.from_env({}).step_budget == 10.0
    assert Settings.from_env({"TIDECD_STEP_BUDGET": "4.5"}).step_budget == 4.5
    for bad in ("soon", "0", "-3", "9999"):
        with pytest.raises(ConfigError, match="TIDECD_STEP_BUDGET"):
            Settings.from_env({"TIDECD_STEP_BUDGET": bad})


def test_the_poll_jitter_comes_from_the_environment_and_may_be_zero() -> None:
    from tidecd.base.errors import ConfigError

    assert Settings.from_env({}).poll_jitter == 10.0
    assert Settings.from_env({"TIDECD_POLL_JITTER": "0"}).poll_jitter == 0.0
    assert Settings.from_env({"TIDECD_POLL_JITTER": "2.5"}).poll_jitter == 2.5
    for bad in ("soon", "-1", "601"):
        with pytest.raises(ConfigError, match="TIDECD_POLL_JITTER"):
            Settings.from_env({"TIDECD_POLL_JITTER": bad})
