"""Applying one object: server-side apply (or replace) with tidecd's ownership marks.

Every object tidecd writes carries its own marks (`tidecd.base.ownership`): the label `tidecd.io/app: <app>`
(cheap selection) and the annotation `tidecd.io/tracking-id: <installation>:<app>:<group>/<kind>:<ns>/<name>`
(proof of ownership). Argo CD's `argocd.argoproj.io/tracking-id` and `app.kubernetes.io/instance` are
written only for an app that opts in (`tidecd.io/write-argocd-tracking: "true"`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidecd.base import ownership
from tidecd.base.errors import TemporaryError
from tidecd.base.model import Action, ChangeEntry, Manifest, ResourceKey
from tidecd.clients.cluster import ApiError, Cluster, UnknownKind
from tidecd.sync.plan import Task

REPLACE = "Replace=true"


def with_ownership(obj: Manifest, app: str, *, argocd: bool = False) -> Manifest:
    """A copy of `obj` marked as owned by `app` (`argocd`: with Argo CD's marks too, for an app that opted in)."""
    return ownership.marked(obj, app, argocd=argocd)


def owned_by(live: Manifest, app: str) -> bool:
    """True only when the object carries this installation's mark for exactly this object and this app."""
    return ownership.owned_by(live, app)


def conflict(live: Manifest, app: str) -> str:
    """Why `app` may not take `live` ("" when it may: unmarked, or already its own), naming the owner:
    another tidecd app or installation, or the Argo CD Application that tracks it."""
    found = ownership.claim(live, app)
    return found.describe() if found else ""


def apply_task(cluster: Cluster, task: Task, app: str, *, dry_run: bool,
               exists: Callable[[ResourceKey], bool],
               written: Callable[[ResourceKey, Manifest], None] | None = None,
               argocd_marks: bool = False) -> ChangeEntry:
    """Apply one task's object and say what happened; API errors become a failed entry, never an exception."""
    obj = with_ownership(task.obj, app, argocd=argocd_marks)
    existed = exists(task.key)
    try:
        if dry_run:
            if not _kind_known(cluster, task.key):
                # `decide` already left out kinds a CRD of this sync brings (or SkipDryRunOnMissingResource):
                # what reaches here has no CRD anywhere, and fails as in Argo CD (only this object's result)
                return ChangeEntry(task.key, Action.FAILED, unserved_message(task.key), **placed(task))
            cluster.apply(obj, dry_run=True)
        else:
            result = cluster.replace(obj) if task.has_option(REPLACE) else cluster.apply(obj)
            if written is not None:
                written(task.key, result)
    except ApiError as exc:
        return ChangeEntry(task.key, Action.FAILED, explain(exc), temporary=isinstance(exc, TemporaryError),
                           **placed(task))
    except UnknownKind:  # SkipDryRunOnMissingResource, and the CRD never came
        return ChangeEntry(task.key, Action.FAILED, unserved_message(task.key), **placed(task))
    action = Action.CONFIGURED if existed else Action.CREATED
    message = "dry run" if dry_run else "replaced" if existed and task.has_option(REPLACE) else ""
    return ChangeEntry(task.key, action, message, **placed(task))


def unserved_message(key: ResourceKey) -> str:
    """Argo CD's words for a kind the destination does not serve, and what the user can do about it."""
    kind = f"{key.group}/{key.kind}" if key.group else key.kind
    return (f"the server could not find the requested resource: {kind} is not served by the destination "
            "(ensure CRDs are installed first, or add the sync option SkipDryRunOnMissingResource=true "
            "when a CRD arrives later)")


def _kind_known(cluster: Cluster, key: ResourceKey) -> bool:
    try:
        cluster.resource(key.group, key.kind)
    except Exception:  # noqa: BLE001 - any discovery failure means "not known yet"
        return False
    return True


def placed(task: Task) -> dict[str, Any]:
    """Where a task sits in the sync, for its change entry: `wave` and `phase`."""
    return {"wave": task.wave, "phase": task.phase.value}


def explain(exc: ApiError) -> str:
    """The API server's message without the object's key (the change entry names it); the advice where a
    user can act on it (Replace=true for an immutable field, ...) is added by the ApiError class itself."""
    return str(exc).split(": ", 1)[-1] if exc.key else str(exc)
