"""Applying one object: server-side apply (or replace) with tidecd's ownership marks.

Every object tidecd writes carries the label `app.kubernetes.io/instance: <app>` (cheap selection) and the
annotation `argocd.argoproj.io/tracking-id` (proof of ownership), as Argo CD writes them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tidecd import constants
from tidecd.cluster import ApiError, Cluster
from tidecd.model import Action, ChangeEntry, Manifest, ResourceKey
from tidecd.sync.plan import Task

REPLACE = "Replace=true"


def with_ownership(obj: Manifest, app: str) -> Manifest:
    """A copy of `obj` marked as owned by `app`."""
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    meta.setdefault("labels", {})[constants.LABEL_INSTANCE] = app
    meta.setdefault("annotations", {})[constants.ANNOTATION_TRACKING_ID] = ResourceKey.of(obj).tracking_id(app)
    return out


def owner_of(live: Manifest) -> str | None:
    """The app named by a live object's tracking id, or None when it carries none."""
    tracking = ((live.get("metadata") or {}).get("annotations") or {}).get(constants.ANNOTATION_TRACKING_ID)
    return tracking.split(":", 1)[0] if tracking else None


def owned_by(live: Manifest, app: str) -> bool:
    """True only when the object's tracking id names exactly this object and this app."""
    tracking = ((live.get("metadata") or {}).get("annotations") or {}).get(constants.ANNOTATION_TRACKING_ID)
    return tracking == ResourceKey.of(live).tracking_id(app)


def apply_task(cluster: Cluster, task: Task, app: str, *, dry_run: bool,
               exists: Callable[[ResourceKey], bool],
               written: Callable[[ResourceKey, Manifest], None] | None = None) -> ChangeEntry:
    """Apply one task's object and say what happened; API errors become a failed entry, never an exception."""
    obj = with_ownership(task.obj, app)
    existed = exists(task.key)
    try:
        if dry_run:
            if not _kind_known(cluster, task.key):  # its CRD is created by this very sync
                return ChangeEntry(task.key, Action.CREATED, "dry run skipped: kind not served yet", **placed(task))
            cluster.apply(obj, dry_run=True)
        else:
            result = cluster.replace(obj) if task.has_option(REPLACE) else cluster.apply(obj)
            if written is not None:
                written(task.key, result)
    except ApiError as exc:
        return ChangeEntry(task.key, Action.FAILED, explain(exc), **placed(task))
    action = Action.CONFIGURED if existed else Action.CREATED
    return ChangeEntry(task.key, action, "dry run" if dry_run else "", **placed(task))


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
