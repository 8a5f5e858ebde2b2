"""What the step itself needs to start an operation: the Operation record, the app's policy as decide takes
it, the project's sync windows, and the cluster its writes go to.

The commands (`tidecd.usecases.commands`) build explicit operations with these; the step builds automated
ones. They sit below the use cases so the step never imports upward.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from tidecd.base.errors import OperationInProgress, SyncWindowClosed
from tidecd.base.model import ResourceKey
from tidecd.clients.cluster import KubeCluster
from tidecd.clients.store import ObjectStore, PreconditionFailed
from tidecd.config.argocd_settings import ArgoSettings
from tidecd.config.load import Application, AppProject, Config
from tidecd.project import impersonation
from tidecd.project import windows as syncwindows
from tidecd.runtime import Runtime
from tidecd.state import app as app_state
from tidecd.state.app import Operation, OperationRequest, RetryState
from tidecd.sync import decide as decision


def new_operation(app: Application, *, prune: bool = False, dry_run: bool = False,
                  resources: Iterable[ResourceKey] | None = None, revision: str = "",
                  revisions: tuple[str, ...] = (), rollback: bool = False, initiated_by: str = "",
                  automated: bool = False, retry_count: int = 0, resolved: str = "",
                  started_at: str = "", self_heal_attempts: int = 0,
                  sync_options: Iterable[str] = ()) -> Operation:
    """A Running operation, not yet stepped. `revision`/`revisions` pin it (a rollback); `resolved` is the
    revision an automated one found (recorded as its revision, not pinned in its source)."""
    source: dict[str, Any] = {"repoURL": app.source.repo_url, "path": app.source.path,
                              "targetRevision": app.source.target_revision}
    pinned = app_state.joined(revisions) if revisions else revision  # each source's
    if pinned:
        source["revision"] = pinned
    split = list(revisions) or app_state.split_revisions(pinned or resolved)
    return Operation(
        id=uuid.uuid4().hex[:16], revision=pinned or resolved, revisions=split if app.sources else [],
        started_at=started_at or app_state.now_iso(),
        request=OperationRequest(
            source=source, automated=automated, dry_run=dry_run, prune=prune,
            only=None if resources is None else [k.to_dict() for k in sorted(resources)], rollback=rollback,
            initiated_by=initiated_by or ("automated" if automated else "user"),
            self_heal_attempts=self_heal_attempts, sync_options=list(sync_options)),
        retry=RetryState(count=retry_count), step="waiting for its first step",
    )


def record_operation(store: ObjectStore, name: str, make: Callable[[], Operation]) -> app_state.AppState:
    """Record the operation `make` builds as the app's running one (generation precondition, read again on a
    race) and return the state saved; OperationInProgress when one runs already. The one place an explicit
    operation starts: the commands (`usecases.commands`) and RollingSync (`step.rolling`) come here."""
    while True:
        current, generation = app_state.load(store, name)
        if current.operation is not None and current.operation.running:
            raise OperationInProgress(name, current.operation.id)
        current.operation = make()
        try:
            app_state.save(store, current, if_generation_match=generation)
        except PreconditionFailed:
            continue
        return current


def automated_operation(app: Application, start: decision.StartOperation, sha: str, started_at: str) -> Operation:
    """The operation the automated policy starts (`sync.decide.StartOperation`): an automated sync of the
    revision, or a self-heal of the resources that drifted."""
    return new_operation(app, prune=start.prune, initiated_by="automated", automated=True,
                         retry_count=start.retry_count, resolved=sha, started_at=started_at,
                         self_heal_attempts=start.self_heal_attempts, resources=start.only)


def sync_window(config: Config, app: Application, *, manual: bool, now: float | None = None) -> str:
    """The project's syncWindows (`tidecd.project.windows`): raises SyncWindowClosed for a blocked manual sync;
    for an automated one returns why it is blocked ("" when it may start)."""
    project = config.projects.get(app.project)
    if project is None or not project.sync_windows:
        return ""
    when = datetime.datetime.fromtimestamp(now, datetime.UTC) if now is not None else None
    verdict = syncwindows.can_sync(project, app.name, app.destination, manual=manual, now=when)
    if verdict.allowed:
        return ""
    if manual:
        raise SyncWindowClosed(f"app {app.name!r}: {verdict.message}")
    return verdict.message


def policy_of(app: Application) -> decision.Policy:
    """The app's syncPolicy as `sync.decide` takes it."""
    policy = app.sync_policy
    retry = policy.retry
    return decision.Policy(
        automated=policy.automated, prune=policy.prune, self_heal=policy.self_heal,
        allow_empty=policy.allow_empty, retry_limit=retry.limit if retry else 0,
        backoff_seconds=retry.backoff.duration_seconds if retry else 5.0,
        backoff_factor=retry.backoff.factor if retry else 2.0,
        backoff_max_seconds=retry.backoff.max_duration_seconds if retry else 180.0,
        outage_retries=retry.limit if retry else decision.DEFAULT_OUTAGE_RETRIES, retry_configured=retry is not None,
        create_namespace=app.destination.namespace if policy.has_option("CreateNamespace=true") else "",
        apply_out_of_sync_only=policy.has_option("ApplyOutOfSyncOnly=true"),
    )


def sync_cluster(runtime: Runtime, settings: ArgoSettings, project: AppProject, app: Application) -> KubeCluster:
    """The app's cluster, whose writes act as the project's destination ServiceAccount when argocd-cm turns
    sync impersonation on (`tidecd.project.impersonation`); NoServiceAccount when none matches."""
    cluster = runtime.cluster(app.destination)
    if not settings.sync_impersonation:
        return cluster
    user = impersonation.sync_user(settings, project, runtime.destination_server(app.destination),
                                   app.destination.namespace)
    return cluster.impersonating(user) if user else cluster
