"""What the dashboard's buttons do: the same library calls the api makes, nothing of their own.

Each returns a `Done` (a notice for the page, or an HTTP error status with a reason); library errors are
translated here, so the routes stay one line each.
"""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass

import structlog

from tidecd.base.errors import NotFound, OperationInProgress, PermanentError, PermissionDenied, TidecdError
from tidecd.base.model import ResourceKey
from tidecd.base.principal import Principal
from tidecd.runtime import Runtime
from tidecd.state import app as app_state
from tidecd.triggers import dispatch
from tidecd.triggers.dispatch import reconcile_step
from tidecd.usecases import authz
from tidecd.usecases.commands import (
    SyncRequest,
    open_revert,
    rollback_request,
    start_operation,
    terminate_operation,
)

log = structlog.get_logger("tidecd.ui")
STEP_BUDGET = 2.0  # seconds a step run inside a dashboard request may take: pages answer quickly
STEP_EVERY = 1.5  # a watched running operation is stepped at most this often
REFRESH_EVERY = 5.0  # a watched Progressing app is refreshed at most this often


@dataclass(frozen=True)
class Done:
    status: int  # 303 (see the app page) or an error status
    notice: str = ""  # a key of NOTICES
    message: str = ""  # for errors: what went wrong


NOTICES = {
    "refreshed": "Refreshed: status compared with git and the cluster.",
    "synced-started": "Sync started: the operation below follows it.",
    "dry-run-started": "Dry run started: nothing will be written.",
    "terminated": "Termination requested: the operation stops at its next step.",
    "rollback-started": "Rollback started: the operation below follows it.",
    "rollback-revert-started": "Rollback started, and its revert opened: automated sync and the image updater "
                               "hold until the revert merges.",
    "rollback-revert-failed": "Rollback started, but its revert could not be opened (the function's log says "
                              "why): git still has the newer version.",
    "app-committed": "Committed to the config source in git, authored by you: the app deploys from it.",
    "app-pull-request": "The config branch is protected: the change is on a branch with a pull request; the app "
                        "changes when it merges.",
}


def error(exc: TidecdError) -> Done:
    """NotFound → 404, PermanentError → 400, any other TidecdError (temporary) → 503."""
    if isinstance(exc, NotFound):
        return Done(404, message=str(exc))
    if isinstance(exc, PermissionDenied):
        return Done(403, message=str(exc))
    if isinstance(exc, PermanentError):
        return Done(400, message=str(exc))
    return Done(503, message=str(exc))


def refresh(runtime: Runtime, name: str, by: Principal) -> Done:
    try:
        authz.app_for(runtime, by, name)  # Argo CD: a refresh is a `get`
        outcome = reconcile_step(runtime, name, automate=False, reason="ui refresh")
    except TidecdError as exc:
        return error(exc)
    if outcome.skipped:
        return Done(409, message=f"app {name!r}: {outcome.skipped}")
    return Done(303, "refreshed")


def sync(runtime: Runtime, name: str, by: Principal, *, prune: bool, dry_run: bool,
         resources: frozenset[ResourceKey] | None = None, revision: str = "",
         sync_options: tuple[str, ...] = ()) -> Done:
    request = SyncRequest(prune=prune, dry_run=dry_run, resources=resources, revision=revision,
                          sync_options=sync_options)
    return _sync(runtime, name, by, request, "dry-run" if dry_run else "synced")


def rollback(runtime: Runtime, name: str, by: Principal, history_id: int, *, revert: str = "") -> Done:
    """`revert` ("pr" or "push"): open the rollback's revert in git too, once the rollback started."""
    try:
        authz.app_for(runtime, by, name)  # visible first: its history is read (start_operation: `sync`)
        request = rollback_request(runtime, name, history_id, initiated_by="", revert=revert)
    except TidecdError as exc:
        return error(exc)
    done = _sync(runtime, name, by, request, "rollback")
    if done.status != 303 or not revert:
        return done
    _, trouble = open_revert(runtime, name, dataclasses.replace(request, initiated_by=by.username))
    return Done(303, "rollback-revert-failed" if trouble else "rollback-revert-started")


def terminate(runtime: Runtime, name: str, by: Principal) -> Done:
    try:
        authz.app_for(runtime, by, name)
        current = app_state.load(runtime.store, name)[0]
    except TidecdError as exc:
        return error(exc)
    if current.operation is None or not current.operation.running:
        return Done(409, message=f"app {name!r} has no running operation to terminate")
    try:
        terminate_operation(runtime, name, by=by)
    except TidecdError as exc:
        return error(exc)
    return Done(303, "terminated")


def _sync(runtime: Runtime, name: str, by: Principal, request: SyncRequest, notice: str) -> Done:
    """Record the operation and hand its first step to the dispatcher (a background step locally, a
    Pub/Sub message in the cloud), as every continuation is; the page follows it live (see `watch`)."""
    try:
        start_operation(runtime, name, request, by=by)
    except OperationInProgress as exc:
        return Done(409, message=str(exc))
    except TidecdError as exc:
        return error(exc)
    try:
        dispatch.dispatcher_for(runtime).schedule(name, 0.0, f"ui {notice}")
    except TidecdError as exc:  # not handed over: take the first step here; the page's watch goes on
        log.warning("dashboard could not schedule the operation", app=name, error=str(exc))
        try:
            reconcile_step(runtime, name, automate=False, reason=f"ui {notice}", budget=STEP_BUDGET)
        except TidecdError as step_error:
            return error(step_error)
    return Done(303, notice + "-started")


def watch(runtime: Runtime, current: app_state.AppState) -> app_state.AppState:
    """A page watching an app whose operation runs, or whose health is Progressing, is one more trigger
    (as Argo CD's `GET ...?refresh=normal` is): one short step, at most every few seconds per app however
    many pages watch (the app's lease serializes them). Returns the state to show."""
    op = current.operation
    running = op is not None and op.running
    if not running and str(current.health) != "Progressing":
        return current
    if _age(current.memo.reconciled_at) < (STEP_EVERY if running else REFRESH_EVERY):
        return current
    try:
        outcome = reconcile_step(runtime, current.app, automate=False, reason="ui watch", budget=STEP_BUDGET)
    except TidecdError as exc:
        log.warning("dashboard step failed", app=current.app, error=str(exc))
        return current
    return outcome.state or current


def _age(stamp: str) -> float:
    try:
        then = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return float("inf")
    return (datetime.datetime.now(datetime.UTC) - then).total_seconds()
