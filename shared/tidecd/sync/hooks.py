"""Sync hooks (PreSync, Sync, PostSync, SyncFail): created once per operation, judged from their health.

Every hook an operation creates carries the operation's id (`tidecd.io/operation-id`), so a resumed step
recognises its own hook by name and mark and never creates it a second time. Old copies
(BeforeHookCreation) and finished hooks (HookSucceeded / HookFailed) are deleted by separate steps; nothing
here waits.
"""

from __future__ import annotations

from tidecd import constants
from tidecd.cluster import ApiError, Cluster
from tidecd.model import Action, ChangeEntry, Manifest
from tidecd.sync.apply import explain, with_ownership
from tidecd.sync.plan import Task


def hook_object(task: Task, app: str, operation_id: str) -> Manifest:
    obj = with_ownership(task.obj, app)
    obj["metadata"].setdefault("annotations", {})[constants.ANNOTATION_OPERATION] = operation_id
    return obj


def create_hook(cluster: Cluster, task: Task, app: str, operation_id: str) -> tuple[ChangeEntry, str]:
    """Create the hook; the entry and the new object's uid ("" when it failed)."""
    try:
        created = cluster.apply(hook_object(task, app, operation_id))
    except ApiError as exc:
        return ChangeEntry(task.key, Action.FAILED, f"{task.phase.value} hook: {explain(exc)}"), ""
    uid = str((created.get("metadata") or {}).get("uid", ""))
    return ChangeEntry(task.key, Action.CREATED, f"{task.phase.value} hook"), uid


def dry_run_hook(cluster: Cluster, task: Task, app: str) -> ChangeEntry:
    try:
        cluster.apply(with_ownership(task.obj, app), dry_run=True)
    except ApiError as exc:
        return ChangeEntry(task.key, Action.FAILED, f"{task.phase.value} hook: {explain(exc)}")
    return ChangeEntry(task.key, Action.CREATED, f"{task.phase.value} hook (dry run)")
