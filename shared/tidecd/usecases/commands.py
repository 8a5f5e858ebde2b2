"""The operation commands, one implementation: start a sync (or a rollback, with its revert in git), terminate
the running one.

The api (`usecases.api`), the dashboard (`ui.actions`) and the CLI call these and only shape the answer
(an HTTP status, a page notice). A command records the operation in the app's state (generation
precondition) and returns; the steps that run it are scheduled by the caller.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import structlog

from tidecd.base.errors import NotFound, PermanentError, TidecdError
from tidecd.base.model import ResourceKey
from tidecd.base.principal import Principal
from tidecd.clients.store import PreconditionFailed
from tidecd.images import state as images_state
from tidecd.runtime import Runtime
from tidecd.state import app as app_state
from tidecd.state.app import HistoryEntry, OperationPhase
from tidecd.step.operation import new_operation, record_operation, sync_window
from tidecd.usecases import authz
from tidecd.usecases import revert as revert_usecase

log = structlog.get_logger("tidecd.usecases.commands")


@dataclass(frozen=True)
class SyncRequest:
    """An explicit sync (CLI, api, rollback); automated syncs are decided by the app's policy."""

    prune: bool = False
    dry_run: bool = False
    resources: frozenset[ResourceKey] | None = None
    revision: str = ""  # a sha from history (rollback); empty means the app's targetRevision
    revisions: tuple[str, ...] = ()  # multi-source: each source's revision from history (rollback), in order
    rollback: bool = False
    initiated_by: str = ""  # "api", "cli", "automated", "rollback", a user name...
    history_id: int = 0  # the history entry a rollback goes back to
    revert: str = ""  # a rollback's revert in git: "pr" or "push" (`usecases.revert`); "" for none
    reverted: str = ""  # the revision the rollback leaves (read before it starts, the revert's "from")
    sync_options: tuple[str, ...] = ()  # this operation's own options (`OPERATION_OPTIONS`), beside the app's


# what a sync panel, the api and the CLI may ask for one sync (Argo CD's `argocd app sync --replace --force
# --apply-out-of-sync-only`); the step merges them into the app's syncOptions while the operation runs
OPERATION_OPTIONS = ("Replace=true", "Force=true", "ApplyOutOfSyncOnly=true")


def checked_options(options: Iterable[str]) -> tuple[str, ...]:
    """An operation's sync options, each one of `OPERATION_OPTIONS`; an error names the first that is not."""
    chosen = tuple(dict.fromkeys(options))
    for option in chosen:
        if option not in OPERATION_OPTIONS:
            raise PermanentError(f"field syncOptions: {option!r} is not one of {', '.join(OPERATION_OPTIONS)}")
    return chosen


def start_operation(runtime: Runtime, name: str, request: SyncRequest, by: Principal | None = None) -> str:
    """Record a new Running operation (generation precondition) and return its id; does not run it.

    With `by` (every request of a person or a token: api, dashboard, CLI) RBAC decides first
    (`applications, sync, PROJECT/APP`; a refusal is audited), the operation names `by` as its
    `initiatedBy`, and the audit log records it. Raises OperationInProgress when one is running, NotFound
    for an unknown app (creating nothing), PermissionDenied when `by` may not."""
    if by is not None:
        authz.app_for(runtime, by, name, "sync")
        request = replace(request, initiated_by=by.username)
    app = runtime.app(name)
    sync_window(runtime.config(), app, manual=True)
    options = checked_options(request.sync_options)
    current = record_operation(runtime.store, name, lambda: new_operation(
        app, prune=request.prune, dry_run=request.dry_run, resources=request.resources, revision=request.revision,
        revisions=request.revisions, rollback=request.rollback, initiated_by=request.initiated_by,
        sync_options=options))
    op = current.operation
    assert op is not None
    log.info("operation started", app=name, operation=op.id, initiated_by=op.request.initiated_by)
    if by is not None:
        what = "rollback" if request.rollback else "dry run" if request.dry_run else "sync"
        authz.done(runtime, by, "applications", "sync", authz.app_object(app), f"{what}: operation {op.id}")
    entry = next((h for h in current.history if h.id == request.history_id), None)
    images_state.on_operation_started(runtime.store, app, rollback=request.rollback, revision=request.revision,
                                      dry_run=request.dry_run, deployed_at=entry.deployed_at if entry else "",
                                      deployed_by=entry.operation_id if entry else "")
    return op.id


def terminate_operation(runtime: Runtime, name: str, by: Principal | None = None) -> str:
    """Mark the running operation Terminating (the next step stops it); its id. NotFound when none runs.
    With `by`, RBAC decides first (Argo CD's terminate-op needs `sync`) and the audit log records it."""
    app = runtime.app(name) if by is None else authz.app_for(runtime, by, name, "sync")
    while True:
        current, generation = app_state.load(runtime.store, name)
        op = current.operation
        if op is None or not op.running:
            raise NotFound(f"app {name!r} has no running operation")
        op.phase, op.step = OperationPhase.TERMINATING, "terminating"
        try:
            app_state.save(runtime.store, current, if_generation_match=generation)
        except PreconditionFailed:
            continue
        if by is not None:
            authz.done(runtime, by, "applications", "sync", authz.app_object(app), f"terminate operation {op.id}")
        return op.id


def history_entry(runtime: Runtime, name: str, history_id: int) -> HistoryEntry:
    """The app's history entry `history_id`; NotFound (naming it) for an unknown app or entry."""
    runtime.app(name)
    entry = next((h for h in app_state.load(runtime.store, name)[0].history if h.id == history_id), None)
    if entry is None:
        raise NotFound(f"app {name!r} has no history entry {history_id}")
    return entry


def rollback_request(runtime: Runtime, name: str, history_id: int, *, prune: bool = False,
                     initiated_by: str = "rollback", revert: str = "") -> SyncRequest:
    """The sync that goes back to history entry `history_id`: each source pinned to its revision then; with
    `revert` ("pr" or "push") git is reverted too once it started (`open_revert`)."""
    entry = history_entry(runtime, name, history_id)
    if revert and revert not in revert_usecase.MODES:
        raise PermanentError(f"field revert: {revert!r} is not one of {', '.join(revert_usecase.MODES)}")
    reverted = app_state.load(runtime.store, name)[0].revision if revert else ""
    return SyncRequest(prune=prune, revision=entry.revision, revisions=tuple(entry.revisions), rollback=True,
                       initiated_by=initiated_by, history_id=entry.id, revert=revert, reverted=reverted)


def open_revert(runtime: Runtime, name: str, request: SyncRequest) -> tuple[dict[str, Any], str]:
    """After a rollback with `revert` started: open its revert in git. (the revert's summary, "") or ({},
    why it could not be opened): the rollback goes on either way, and the caller says so."""
    if not request.rollback or not request.revert:
        return {}, ""
    try:
        record = revert_usecase.open_revert(runtime, name, request.history_id, request.revert,
                                            reverted=request.reverted, by=request.initiated_by)
    except TidecdError as exc:
        log.warning("revert not opened", app=name, error=str(exc))
        return {}, f"the rollback started, but its revert could not be opened: {exc}"
    return record.summary(), ""
