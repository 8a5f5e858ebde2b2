"""What the dashboard's buttons do: the same library calls the api makes, nothing of their own.

Each returns a `Done` (a notice for the page, or an HTTP error status with a reason); library errors are
translated here, so the routes stay one line each.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidecd import state as app_state
from tidecd.errors import NotFound, OperationInProgress, PermanentError, TidecdError
from tidecd.reconcile import SyncRequest, reconcile, start_operation, terminate_operation
from tidecd.runtime import Runtime


@dataclass(frozen=True)
class Done:
    status: int  # 303 (see the app page) or an error status
    notice: str = ""  # a key of NOTICES
    message: str = ""  # for errors: what went wrong


NOTICES = {
    "refreshed": "Refreshed: status compared with git and the cluster.",
    "synced": "Sync finished.",
    "sync-started": "Sync started.",
    "dry-run": "Dry run finished: nothing was written.",
    "terminated": "Termination requested: the operation stops at its next step.",
    "rollback": "Rollback finished.",
    "rollback-started": "Rollback started.",
}


def _error(exc: TidecdError) -> Done:
    """NotFound → 404, PermanentError → 400, any other TidecdError (temporary) → 503."""
    if isinstance(exc, NotFound):
        return Done(404, message=str(exc))
    if isinstance(exc, PermanentError):
        return Done(400, message=str(exc))
    return Done(503, message=str(exc))


def refresh(runtime: Runtime, name: str) -> Done:
    try:
        runtime.app(name)
        outcome = reconcile(runtime, name, automate=False, reason="ui refresh")
    except TidecdError as exc:
        return _error(exc)
    if outcome.skipped:
        return Done(409, message=f"app {name!r}: {outcome.skipped}")
    return Done(303, "refreshed")


def sync(runtime: Runtime, name: str, *, prune: bool, dry_run: bool) -> Done:
    return _sync(runtime, name, SyncRequest(prune=prune, dry_run=dry_run), "dry-run" if dry_run else "synced")


def rollback(runtime: Runtime, name: str, history_id: int) -> Done:
    try:
        runtime.app(name)
        current = app_state.load(runtime.store, name)[0]
    except TidecdError as exc:
        return _error(exc)
    entry = next((h for h in current.history if h.id == history_id), None)
    if entry is None:
        return Done(404, message=f"app {name!r} has no history entry {history_id}")
    return _sync(runtime, name, SyncRequest(revision=entry.revision, rollback=True, history_id=entry.id), "rollback")


def terminate(runtime: Runtime, name: str) -> Done:
    try:
        runtime.app(name)
        current = app_state.load(runtime.store, name)[0]
    except TidecdError as exc:
        return _error(exc)
    if current.operation is None or not current.operation.running:
        return Done(409, message=f"app {name!r} has no running operation to terminate")
    try:
        terminate_operation(runtime, name)
    except TidecdError as exc:
        return _error(exc)
    return Done(303, "terminated")


def _sync(runtime: Runtime, name: str, request: SyncRequest, notice: str) -> Done:
    try:
        from tidecd.api import drive

        runtime.app(name)
        operation_id = start_operation(runtime, name, request)
        drive(runtime, name, f"ui {notice}", operation_id)
    except OperationInProgress as exc:
        return Done(409, message=str(exc))
    except TidecdError as exc:
        return _error(exc)
    return Done(303, notice)
