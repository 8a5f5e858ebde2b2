"""Notification events, pure: given what was already notified for an app (`Seen`, the "previous state") and
its new state, the events due now. Each trigger fires once per operation or transition, never once per
reconcile:
    on-sync-running         an operation (not a dry run) exists: once per operation id
    on-sync-succeeded       its phase is Succeeded: once per operation id
    on-sync-failed          its phase is Failed or Error: once per operation id
    on-deployed             it Succeeded and the app is Healthy: once per revision (Argo CD's oncePer)
    on-health-degraded      health became Degraded (fires again only after it was something else)
    on-sync-status-unknown  sync status became Unknown (likewise)
    on-auto-rollback        tidecd rolled the app back by itself (`step.autorollback`): once per rollback

`tidecd.notify.deliver` delivers them; it is called by whoever ran the step, with the app's new state.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidecd.base.constants import AUTO_ROLLBACK
from tidecd.base.model import HealthStatus, SyncStatus
from tidecd.state.app import AppState, OperationPhase

TRIGGERS = ("on-sync-running", "on-sync-succeeded", "on-sync-failed", "on-deployed", "on-health-degraded",
            "on-sync-status-unknown", "on-auto-rollback")


@dataclass(frozen=True)
class Event:
    trigger: str
    app: str
    key: str  # what it fires once per: an operation id, a revision, a transition
    revision: str = ""
    operation_id: str = ""
    phase: str = ""
    message: str = ""
    sync_status: str = ""
    health: str = ""
    at: str = ""
    cause: str = ""  # a self-heal's: who drifted what (from the audit log), and whether it was restored
    initiated_by: str = ""  # who started the operation (Argo CD's initiatedBy.username): a person, a token

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Event:
        return cls(**{f.name: str(data.get(f.name, "")) for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class Seen:
    """What was already notified for an app: per trigger the last key it fired for, and the last observed
    health and sync status (for the transition triggers)."""

    fired: Mapping[str, str] = field(default_factory=dict)
    health: str = ""
    sync_status: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"fired": dict(self.fired), "health": self.health, "sync_status": self.sync_status}

    @classmethod
    def from_json(cls, data: Any) -> Seen:
        if not isinstance(data, Mapping):
            return cls()
        fired = data.get("fired") if isinstance(data.get("fired"), Mapping) else {}
        return cls({str(k): str(v) for k, v in (fired or {}).items()}, str(data.get("health", "")),
                   str(data.get("sync_status", "")))


def events(seen: Seen, state: AppState, now: str = "") -> tuple[list[Event], Seen]:
    """The events due for `state` given what was notified (`seen`), and the new `seen`. Pure."""
    fired = dict(seen.fired)
    out: list[Event] = []
    op = state.operation

    cause = ""
    if op is not None and op.request.cause:
        cause = next((h.cause for h in reversed(state.history) if h.operation_id == op.id), op.request.cause)

    def fire(trigger: str, key: str) -> None:
        if key and fired.get(trigger) != key:
            fired[trigger] = key
            out.append(Event(trigger, state.app, key, op.revision if op else state.revision, op.id if op else "",
                             op.phase.value if op else "", (op.message if op else "") or state.health_message,
                             state.sync_status.value, state.health.value, now, cause if op else "",
                             op.request.initiated_by if op else ""))

    if op is not None and op.id and not op.request.dry_run:
        fire("on-sync-running", op.id)  # also when it finished within one step: it did run
        if op.request.rollback and op.request.initiated_by == AUTO_ROLLBACK:
            fire("on-auto-rollback", op.id)
        if op.phase is OperationPhase.SUCCEEDED:
            fire("on-sync-succeeded", op.id)
            if state.health is HealthStatus.HEALTHY:
                fire("on-deployed", op.revision or op.id)
        elif op.phase in (OperationPhase.FAILED, OperationPhase.ERROR):
            fire("on-sync-failed", op.id)
    health, sync = state.health.value, state.sync_status.value
    if health == HealthStatus.DEGRADED.value and seen.health != health:
        fire("on-health-degraded", f"{state.revision[:12]}@{now or time.time()}")
    if sync == SyncStatus.UNKNOWN.value and seen.sync_status != sync:
        fire("on-sync-status-unknown", f"{state.revision[:12]}@{now or time.time()}")
    return out, Seen(fired, health, sync)
