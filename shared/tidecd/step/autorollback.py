"""Automatic rollback, opt-in: an app annotated

    tidecd.io/auto-rollback: "on-degraded=10m[, on-postsync-failed][, revert=pr|push|none]"

goes back to its last good revision when the revision its last operation deployed stays Degraded for the
window (or, with `on-postsync-failed`, when that operation's PostSync hook failed). It rolls back as a
person's rollback does (`usecases.commands`): an operation pinned to the history entry's revision, the
images pinned, automated sync off when it ends; and the poll opens its revert in git (`revert`, default
`pr`; `usecases.revert`), so the hold lifts when the revert merges.

Nothing waits inside a step: the first Degraded step records the time (`state.autorollback`) and asks for
its next step when the window ends (`continue_after`); that step (or any earlier trigger) decides again.
A revision is rolled back at most once, whatever happens after (a person may sync it again by hand).
The notification is `on-auto-rollback` (`notify.events`), once per rollback operation.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import structlog

from tidecd.base.constants import AUTO_ROLLBACK
from tidecd.base.model import HealthStatus
from tidecd.clients.store import PreconditionFailed
from tidecd.config.load import Application
from tidecd.config.schema import parse_duration
from tidecd.images import state as images_state
from tidecd.runtime import Runtime
from tidecd.state import app as app_state
from tidecd.state import autorollback as memory
from tidecd.state.app import AppState, HistoryEntry, OperationPhase, TaskPhase
from tidecd.step.operation import new_operation

log = structlog.get_logger("tidecd.step.autorollback")

ANNOTATION = "tidecd.io/auto-rollback"
INITIATED_BY = AUTO_ROLLBACK
MAX_WINDOW = 7 * 24 * 3600.0


@dataclass(frozen=True)
class Rule:
    """The annotation, read."""

    on_degraded: float | None = None  # seconds Degraded before rolling back; None: not on health
    on_postsync_failed: bool = False
    revert: str = "pr"  # "pr" | "push" | "" (none)


def parse(text: str) -> Rule:
    """The annotation's rule; ValueError naming the annotation and the part it cannot read."""
    rule = Rule()
    for part in (p.strip() for p in text.split(",")):
        name, _, value = part.partition("=")
        name = name.strip()
        if name == "on-degraded":
            seconds = parse_duration(value)
            if seconds is None or not 0 < seconds <= MAX_WINDOW:
                raise ValueError(f"annotation {ANNOTATION}: on-degraded={value!r}: expected a duration such as "
                                 '"10m" (at most 168h)')
            rule = dataclasses.replace(rule, on_degraded=seconds)
        elif part == "on-postsync-failed":
            rule = dataclasses.replace(rule, on_postsync_failed=True)
        elif name == "revert" and value.strip() in ("pr", "push", "none"):
            rule = dataclasses.replace(rule, revert="" if value.strip() == "none" else value.strip())
        else:
            raise ValueError(f"annotation {ANNOTATION}: {part!r}: expected on-degraded=DURATION, "
                             "on-postsync-failed or revert=pr|push|none")
    if rule.on_degraded is None and not rule.on_postsync_failed:
        raise ValueError(f"annotation {ANNOTATION}: names no trigger (on-degraded=DURATION or on-postsync-failed)")
    return rule


def after_step(runtime: Runtime, app: Application, state: AppState, continue_after: float | None,
               now: float) -> tuple[AppState, float | None]:
    """After a step (under the app's lease): record or act on the rule. Returns the state to report (with
    the rollback operation when one started) and when the next step is due."""
    text = app.annotation(ANNOTATION)
    if not text:
        return state, continue_after
    try:
        rule = parse(text)
    except ValueError as exc:
        log.warning("auto-rollback annotation ignored", app=app.name, error=str(exc))
        return state, continue_after
    op = state.operation
    if op is None or op.running or op.request.dry_run or op.request.rollback or not op.revision:
        return state, continue_after
    record, generation = memory.load(runtime.store, app.name)
    if record.rolled_back == op.revision:
        return state, continue_after  # never twice for one revision
    reason = _due(rule, state, record, now)
    if reason is None:  # not due: remember since when it is Degraded, and come back when the window ends
        watched = _watched(rule, state, record, now)
        if watched != record:
            _write(runtime, watched, generation)
        if watched.degraded_since and rule.on_degraded is not None:
            wake = max(0.5, watched.degraded_since + rule.on_degraded - now)
            continue_after = wake if continue_after is None else min(continue_after, wake)
        return state, continue_after
    return _roll_back(runtime, app, state, record, generation, rule, reason, continue_after)


def _failed_postsync(state: AppState) -> bool:
    op = state.operation
    return op is not None and op.phase in (OperationPhase.FAILED, OperationPhase.ERROR) and any(
        r.hook and r.sync_phase == "PostSync" and r.phase is TaskPhase.FAILED for r in op.results)


def _due(rule: Rule, state: AppState, record: memory.AutoRollback, now: float) -> str | None:
    op = state.operation
    assert op is not None
    if rule.on_postsync_failed and _failed_postsync(state):
        return "its PostSync hook failed"
    if (rule.on_degraded is not None and op.phase is OperationPhase.SUCCEEDED and state.revision == op.revision
            and state.health is HealthStatus.DEGRADED and record.watching == op.revision
            and record.degraded_since and now - record.degraded_since >= rule.on_degraded):
        return f"Degraded for {int(now - record.degraded_since)}s (window {int(rule.on_degraded)}s)"
    return None


def _watched(rule: Rule, state: AppState, record: memory.AutoRollback, now: float) -> memory.AutoRollback:
    """The record with the watched revision's Degraded time: set when it turns Degraded, cleared when not."""
    op = state.operation
    assert op is not None
    degraded = (rule.on_degraded is not None and op.phase is OperationPhase.SUCCEEDED
                and state.revision == op.revision and state.health is HealthStatus.DEGRADED)
    if not degraded:
        return dataclasses.replace(record, watching=op.revision, degraded_since=0.0)
    if record.watching == op.revision and record.degraded_since:
        return record
    return dataclasses.replace(record, watching=op.revision, degraded_since=now)


def _good_entry(state: AppState, bad: str) -> HistoryEntry | None:
    """The newest history entry that succeeded with another revision: what to go back to."""
    return next((h for h in reversed(state.history)
                 if h.result == OperationPhase.SUCCEEDED.value and h.revision and h.revision != bad), None)


def _roll_back(runtime: Runtime, app: Application, state: AppState, record: memory.AutoRollback, generation: int,
               rule: Rule, reason: str, continue_after: float | None) -> tuple[AppState, float | None]:
    op = state.operation
    assert op is not None
    bad = op.revision
    entry = _good_entry(state, bad)
    done = dataclasses.replace(record, watching=bad, degraded_since=0.0, rolled_back=bad, at=app_state.now_iso(),
                               reason=reason, revert=rule.revert, revert_outcome="")
    if entry is None:
        log.warning("auto-rollback: no earlier good revision", app=app.name, revision=bad[:12])
        _write(runtime, dataclasses.replace(done, revert_outcome="no earlier good revision to roll back to"),
                generation)
        return state, continue_after
    current, state_generation = app_state.load(runtime.store, app.name)
    if current.operation is None or current.operation.id != op.id:
        return state, continue_after  # something else started meanwhile: decide again on the next step
    rollback = new_operation(app, revision=entry.revision, revisions=tuple(entry.revisions), rollback=True,
                             initiated_by=INITIATED_BY)
    current.operation = rollback
    if not _write(runtime, dataclasses.replace(done, to_revision=entry.revision, history_id=entry.id,
                                               operation_id=rollback.id), generation):
        return state, continue_after
    try:
        app_state.save(runtime.store, current, if_generation_match=state_generation)
    except PreconditionFailed:
        _write(runtime, record, memory.load(runtime.store, app.name)[1])  # not rolled back after all
        return state, continue_after
    images_state.on_operation_started(runtime.store, app, rollback=True, revision=entry.revision, dry_run=False,
                                      deployed_at=entry.deployed_at, deployed_by=entry.operation_id)
    log.warning("auto-rollback started", app=app.name, revision=bad[:12], to=entry.revision[:12], reason=reason,
                operation=rollback.id)
    return current, 0.0


def _write(runtime: Runtime, record: memory.AutoRollback, generation: int) -> bool:
    try:
        memory.save(runtime.store, record, if_generation_match=generation)
    except PreconditionFailed:
        return False
    return True

