"""The reconcile use case: ONE step of work on one app, then return.

Each call observes (`step.observe`: source → render → live → diff → health), decides the next step of the
app's operation with the pure `sync.decide`, executes it (`step.execute`: cluster calls only) and records
the result in the app's state (`step.record`), every write with a generation precondition. It repeats that
while the steps need no waiting; a wait is a short health poll (at most `budget` seconds in all), after
which the call records what it waits on and returns `continue_after`: the caller schedules the next call.
No call ever blocks for a whole sync. A no-op answers from the quiet record (`step.quiet`).

Two calls for the same app at once must not both act: the first takes the app's lease (60 s, renewed while
the step works, taken over once expired), the second returns "already running" without touching the
cluster. A lost race on the state (someone wrote since we read) re-reads and re-decides. A call that only
answers from the quiet record writes nothing, so it looks before it takes the lease (`look`).

Called by the dispatcher (`triggers.dispatch.run_step`, which also delivers the notifications), the api
and the CLI. The step imports no notifier: its caller hands the new state on.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import structlog

from tidecd.base.clock import SYSTEM, Clock
from tidecd.base.errors import TidecdError
from tidecd.base.model import ChangeSet
from tidecd.clients.deadlines import api_deadline
from tidecd.clients.store import LEASE_TTL, LeaseKeeper, PreconditionFailed, acquire_lease
from tidecd.runtime import Runtime
from tidecd.state import app as app_state
from tidecd.step import autorollback, rolling
from tidecd.step.quiet import live_digest
from tidecd.step.stepping import Step, StepContext, touched

__all__ = ["ALREADY_RUNNING", "LEASE_TTL", "Outcome", "live_digest", "look", "reconcile", "step"]

log = structlog.get_logger("tidecd.step.reconcile")
ALREADY_RUNNING = "already running"
RECHECK_AFTER = 3.0  # the next step of an app whose lease another step holds
RACE_ATTEMPTS = 3


@dataclass(frozen=True)
class Outcome:
    """What one reconcile call did."""

    app: str
    state: app_state.AppState | None
    skipped: str = ""  # non-empty: did nothing (e.g. "already running")
    continue_after: float | None = None  # seconds until this app wants its next step; None: nothing pending
    changes: ChangeSet = field(default_factory=ChangeSet)
    refresh: tuple[str, ...] = ()  # other apps this step changed (an app of apps' children): refresh them
    unchanged: bool = False  # answered by the no-op fast path: nothing it compares changed since the last step
    deployed: str = ""  # the operation this step ended (not a dry run): the image updater records what it deployed


def reconcile(runtime: Runtime, name: str, *, reason: str = "", budget: float = 10.0, automate: bool = True,
              clock: Clock = SYSTEM, head: str = "") -> Outcome:
    """ONE step: observe, decide, execute, record; returns within about `budget` seconds.

    Starts an automated operation when the policy says so (unless `automate` is False: a refresh only).
    `head` is the commit the app's targetRevision resolved to moments ago (the poll's ls-remote): a
    single-source git app then renders it without an ls-remote of its own. The cluster and the source
    come from `runtime` (`Runtime.of` takes fakes), the time from `clock`."""
    looked = look(runtime, name, reason=reason, automate=automate, clock=clock, head=head, budget=budget)
    if looked is not None:
        return looked
    holder, acquired = uuid.uuid4().hex, clock.now()
    if not acquire_lease(runtime.store, name, holder, LEASE_TTL, acquired):
        log.info("reconcile skipped", app=name, reason=ALREADY_RUNNING)
        current, _ = app_state.load(runtime.store, name)
        return Outcome(name, current, skipped=ALREADY_RUNNING, continue_after=RECHECK_AFTER)
    keeper = LeaseKeeper(runtime.store, name, holder, LEASE_TTL, clock=clock.now, acquired_at=acquired).start()
    # Every Kubernetes API call of the step is given what is left of its budget (`clients.deadlines`): an
    # API server that hangs ends the step near its budget, and the step records the outage it met.
    try:
        with api_deadline(budget):
            ctx = StepContext(runtime, name, reason, automate, clock, keeper, head, clock.monotonic() + budget)
            for _ in range(RACE_ATTEMPTS):
                try:
                    return step(ctx)
                except PreconditionFailed:
                    if keeper.lost:
                        return Outcome(name, app_state.load(runtime.store, name)[0], skipped="lease lost")
                    log.info("state changed under the step; re-reading", app=name)
            return Outcome(name, app_state.load(runtime.store, name)[0], skipped="state kept changing",
                           continue_after=1.0)
    finally:
        keeper.close()


def look(runtime: Runtime, name: str, *, reason: str, automate: bool, clock: Clock, head: str,
         budget: float) -> Outcome | None:
    """The no-op fast path (`step.quiet`) before the lease: an app whose quiet record still holds is answered
    as the leased step answers it, writing nothing. Anything else returns None and the step takes the lease:
    no quiet record, a running operation, drift, a new commit, a drift condition whose hour ended, an error,
    automatic rollback. The lease's write and delete were two of the three store requests of a drift
    sweep's no-op step that GCS bills, for an answer that reads."""
    ctx = StepContext(runtime, name, reason, automate, clock, None, head, clock.monotonic() + budget, look=True)
    try:
        with api_deadline(budget):
            work = Step(ctx)
            op = work.state.operation
            if not work.state.memo.quiet or (op is not None and op.running):
                return None
            work.observe_and_advance()
    except TidecdError:
        return None
    rollback = work.app is not None and bool(work.app.annotation(autorollback.ANNOTATION))
    if not work.end.quiet_hit or work.end.quiet_expired or rollback:
        return None
    state = work.state
    log.info("reconciled", app=name, reason=reason, sync=state.sync_status, health=state.health,
             revision=state.revision[:12], unchanged=True)
    return Outcome(name, state, unchanged=True, continue_after=work.end.continue_after)


def step(ctx: StepContext) -> Outcome:
    """Observe once, then decide → execute → record until a wait outlasts the budget; one outcome."""
    work = Step(ctx)
    work.run()
    state, end = work.state, work.end
    state, continue_after = _auto_rollback(ctx, state, end.continue_after)
    if end.quiet_hit and state is work.state:
        log.info("reconciled", app=ctx.name, reason=ctx.reason, sync=state.sync_status, health=state.health,
                 revision=state.revision[:12], unchanged=True)
        return Outcome(ctx.name, state, unchanged=True, continue_after=continue_after)
    for entry in work.changes.changed():  # a line per object, starting with its ResourceKey text
        log.info(str(entry), app=ctx.name, action=entry.action.value, wave=entry.wave, phase=entry.phase)
    log.info("reconciled", app=ctx.name, reason=ctx.reason, sync=state.sync_status, health=state.health,
             revision=state.revision[:12], operation=state.operation.phase if state.operation else "",
             continue_after=continue_after)
    handed = rolling.after_step(ctx.runtime, ctx.name, state)  # RollingSync: the next apps start now
    return Outcome(ctx.name, state, changes=work.changes, continue_after=continue_after,
                   refresh=(*touched(work), *handed), deployed=end.deployed)


def _auto_rollback(ctx: StepContext, state: app_state.AppState,
                   continue_after: float | None) -> tuple[app_state.AppState, float | None]:
    """An app that opted in to automatic rollback (`step.autorollback`): its wait recorded, or its rollback
    started, under the lease this step holds."""
    if ctx.keeper is not None and ctx.keeper.lost:
        return state, continue_after
    try:
        app = ctx.runtime.app(ctx.name)
    except TidecdError:
        return state, continue_after
    if not app.annotation(autorollback.ANNOTATION):
        return state, continue_after
    return autorollback.after_step(ctx.runtime, app, state, continue_after, ctx.clock.now())


