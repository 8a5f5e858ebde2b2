"""When the step looks again at what is not Healthy yet (`tidecd.health.awaited`): by what is awaited."""

from __future__ import annotations

from typing import Any

import pytest

from tidecd.base.clock import unix
from tidecd.health.awaited import (
    DEADLINE_SLACK,
    HEALTH_AWAIT,
    HEALTH_BACKOFF,
    HEALTH_LOOK,
    HEALTH_READS,
    MAX_BACKOFF,
    MIN_DELAY,
    first_look,
    next_check,
)

T0 = unix("2026-01-01T00:00:00Z")


def at(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    return f"2026-01-01T00:{minutes:02d}:{rest:02d}Z"


def deployment(*, created: float = 0, progressed: float | None = None, min_ready: int = 0, deadline: int | None = None,
               updated: int = 1, available: int = 0) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": 1, "minReadySeconds": min_ready}
    if deadline is not None:
        spec["progressDeadlineSeconds"] = deadline
    status: dict[str, Any] = {"updatedReplicas": updated, "availableReplicas": available}
    if progressed is not None:
        status["conditions"] = [{"type": "Progressing", "status": "True", "lastUpdateTime": at(progressed)}]
    return {"kind": "Deployment", "metadata": {"name": "web", "creationTimestamp": at(created)}, "spec": spec,
            "status": status}


def job(*, started: float, active_deadline: int) -> dict[str, Any]:
    return {"kind": "Job", "metadata": {"name": "migrate", "creationTimestamp": at(started)},
            "spec": {"activeDeadlineSeconds": active_deadline}, "status": {"startTime": at(started)}}


def test_a_fresh_object_is_looked_at_again_soon_and_a_slow_one_less_often() -> None:
    assert next_check([deployment()], T0 + 0.5) == MIN_DELAY
    assert next_check([deployment()], T0 + 10) == 5.0  # half as long as it has been waited for
    assert next_check([deployment()], T0 + 600) == MAX_BACKOFF


def test_the_wait_counts_from_the_newest_progress_or_the_waits_own_start() -> None:
    assert next_check([deployment(progressed=50)], T0 + 54) == 2.0
    assert next_check([deployment()], T0 + 304, since=T0 + 300) == 2.0  # an old object, updated just now


def test_min_ready_seconds_puts_the_next_look_when_the_rollout_can_be_complete() -> None:
    assert next_check([deployment(progressed=0, min_ready=30)], T0 + 2) == 28.0
    assert next_check([deployment(progressed=0, min_ready=30, available=1)], T0 + 2) == MIN_DELAY  # available


def test_a_deadline_that_ends_the_wait_comes_first() -> None:
    assert next_check([deployment(progressed=0, deadline=40)], T0 + 38) == 2.0 + DEADLINE_SLACK
    assert next_check([job(started=0, active_deadline=20)], T0 + 60) == MIN_DELAY  # past it: look now
    assert next_check([deployment(), job(started=0, active_deadline=10)], T0 + 8) == 2.0 + DEADLINE_SLACK


def test_objects_without_times_wait_the_least() -> None:
    assert next_check([{"kind": "Ingress", "metadata": {"name": "web"}}], T0) == MIN_DELAY
    assert next_check([], T0) == MIN_DELAY


def looks(unhealthy: int) -> list[float]:
    """When the step's health await looks at `unhealthy` objects, seconds after the sync (none taken)."""
    at, every, seen = 0.0, first_look(unhealthy), []
    while at + every <= HEALTH_AWAIT:
        at += every
        seen.append(at)
        every *= HEALTH_BACKOFF
    return seen


def test_the_step_looks_soon_after_its_sync_then_less_and_less_often() -> None:
    assert looks(2)[:3] == pytest.approx([HEALTH_LOOK, HEALTH_LOOK * 2.6, HEALTH_LOOK * 5.16])  # 25, 65, 129 ms
    assert len([t for t in looks(2) if t <= 0.25]) == 4  # the scale run's p99 (207 ms) seen by the 4th look
    assert len(looks(2)) == 8


def test_the_step_reads_at_most_its_budget_of_gets_and_always_within_the_await() -> None:
    for unhealthy in range(1, 60):
        seen = looks(unhealthy)
        assert unhealthy * len(seen) <= HEALTH_READS, unhealthy
        assert all(t < HEALTH_AWAIT for t in seen)
    assert len(looks(16)) == 2 and len(looks(32)) == 1 and looks(33) == []  # many objects: left to a continuation
