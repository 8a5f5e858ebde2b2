"""Instruments around tidecd calls: what a reconcile cost in API calls and in waiting for health.

These wrap tidecd objects for the duration of one measurement only (a counted `apply` on one cluster
client, a timer around the sync engine's health wait); nothing here changes what tidecd does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tidecd import state as app_state
from tidecd.cluster import KubeCluster
from tidecd.reconcile import Outcome, SyncRequest, reconcile
from tidecd.runtime import Runtime


@dataclass
class ApplyCounter:
    """Server-side applies of one cluster client, split into real writes and dry-runs."""

    applies: int = 0
    dry_runs: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, cluster: KubeCluster) -> None:
        original = cluster.apply

        def counted(obj: Any, *, dry_run: bool = False) -> Any:
            with self._lock:
                if dry_run:
                    self.dry_runs += 1
                else:
                    self.applies += 1
            return original(obj, dry_run=dry_run)

        cluster.apply = counted  # type: ignore[method-assign]


@contextmanager
def health_wait() -> Iterator[list[float]]:
    """Seconds the sync engine spent waiting for waves to become healthy (`spent[0]`)."""
    from tidecd.sync import operation

    original = operation._Runner._wait
    spent = [0.0]

    def timed_wait(self: Any, tasks: Any) -> None:
        start = time.perf_counter()
        try:
            original(self, tasks)
        finally:
            spent[0] += time.perf_counter() - start

    operation._Runner._wait = timed_wait  # type: ignore[method-assign]
    try:
        yield spent
    finally:
        operation._Runner._wait = original  # type: ignore[method-assign]


class NotSynced(RuntimeError):
    def __init__(self, text: str, why: str) -> None:
        super().__init__(text)
        self.why = why


@dataclass(frozen=True)
class Measured:
    """One reconcile call: wall time, health-wait time and the cluster calls it made."""

    seconds: float
    waited: float
    writes: int  # every non-GET request (KubeCluster.writes): applies, dry-runs, deletes
    applies: int
    dry_runs: int
    state: app_state.AppState

    @property
    def without_wait(self) -> float:
        return self.seconds - self.waited


def measured_reconcile(runtime: Runtime, name: str, *, request: SyncRequest | None = None,
                       automate: bool = True) -> Measured:
    """Run reconcile on a fresh runtime and fail loudly unless the app ended Synced (a bench times success)."""
    app = runtime.app(name)
    cluster = runtime.cluster(app.destination)
    counter = ApplyCounter()
    counter.attach(cluster)
    with health_wait() as waited:
        start = time.perf_counter()
        outcome: Outcome = reconcile(runtime, name, request=request, automate=automate, wave_timeout=300.0)
        seconds = time.perf_counter() - start
    state = app_state.load(runtime.store, name)[0]
    op = state.operation
    if outcome.skipped or state.sync_status != "Synced" or (request and (op is None or op.phase != "Succeeded")):
        why = "; ".join(c.get("message", "") for c in state.conditions) or (op.message if op else outcome.skipped)
        raise NotSynced(f"app {name}: {state.sync_status}: {why}"[:600], why)
    return Measured(seconds, waited[0], cluster.writes, counter.applies, counter.dry_runs, state)
