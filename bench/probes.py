"""Instruments around tidecd calls: what a reconcile cost in API calls and in waiting for health.

These wrap tidecd objects for the duration of one measurement only (a counted `apply` on one cluster
client, a timer around the sync engine's health wait); nothing here changes what tidecd does.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tidecd.base.clock import SystemClock
from tidecd.clients.cluster import KubeCluster
from tidecd.runtime import Runtime
from tidecd.state import app as app_state
from tidecd.step.reconcile import Outcome, reconcile
from tidecd.usecases.commands import SyncRequest, start_operation


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


class WaitingClock(SystemClock):
    """The system clock, counting the seconds the sync engine paused to poll health."""

    def __init__(self) -> None:
        self.waited = 0.0

    def pause(self, seconds: float) -> None:
        start = time.perf_counter()
        super().pause(seconds)
        self.waited += time.perf_counter() - start


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
    clock = WaitingClock()
    start = time.perf_counter()
    operation_id = start_operation(runtime, name, request) if request is not None else ""
    outcome: Outcome = reconcile(runtime, name, automate=automate, clock=clock)
    while (outcome.continue_after is not None and not outcome.skipped and outcome.state is not None
           and outcome.state.operation is not None and outcome.state.operation.running):  # its next steps
        clock.pause(outcome.continue_after)
        outcome = reconcile(runtime, name, automate=automate, clock=clock)
    seconds = time.perf_counter() - start
    waited = [clock.waited]
    state = app_state.load(runtime.store, name)[0]
    op = state.operation
    other = bool(operation_id) and (op is None or op.id != operation_id)
    failed = request is not None and (op is None or op.phase != "Succeeded")
    if other or failed or outcome.skipped or state.sync_status != "Synced":
        why = "; ".join(c.get("message", "") for c in state.conditions) or (op.message if op else outcome.skipped)
        raise NotSynced(f"app {name}: {state.sync_status}: {why}"[:600], why)
    return Measured(seconds, waited[0], cluster.writes, counter.applies, counter.dry_runs, state)
