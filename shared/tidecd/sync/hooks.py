"""Sync hooks (PreSync, Sync, PostSync, SyncFail): created once per operation, judged from their health.

Every hook an operation creates carries the operation's id (`tidecd.io/operation-id`), so a resumed step
recognises its own hook by name and mark and never creates it a second time. Old copies
(BeforeHookCreation) and finished hooks (HookSucceeded / HookFailed) are deleted by separate steps; nothing
here waits.
"""

from __future__ import annotations

from tidecd.base import constants
from tidecd.base.model import Action, ChangeEntry, Manifest, ResourceKey
from tidecd.clients.cluster import ApiError, Cluster, managed_selector
from tidecd.sync.apply import explain, owned_by, placed, with_ownership
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
        failed = ChangeEntry(task.key, Action.FAILED, f"{task.phase.value} hook: {explain(exc)}", **placed(task))
        return failed, ""
    uid = str((created.get("metadata") or {}).get("uid", ""))
    return ChangeEntry(task.key, Action.CREATED, f"{task.phase.value} hook", **placed(task)), uid


def delete_earlier_copies(cluster: Cluster, task: Task, app: str, operation_id: str) -> list[ResourceKey]:
    """A `generateName` hook gets a new name in every operation, so BeforeHookCreation cannot find its old
    copy by name: delete this app's copies of the same kind, namespace and generateName that another
    operation created (this operation's own copy stays, so a step that runs again never creates it twice)."""
    deleted = []
    for live in cluster.list(task.key.group, task.key.kind, namespace=task.key.namespace,
                             label_selector=managed_selector(app)):
        meta = live.get("metadata") or {}
        notes = meta.get("annotations") or {}
        if (meta.get("generateName") == task.generate_name and owned_by(live, app)
                and notes.get(constants.ANNOTATION_OPERATION) != operation_id and not meta.get("deletionTimestamp")):
            key = ResourceKey.of(live)
            cluster.delete(key, propagation="Background")
            deleted.append(key)
    return deleted


def dry_run_hook(cluster: Cluster, task: Task, app: str) -> ChangeEntry:
    try:
        cluster.apply(with_ownership(task.obj, app), dry_run=True)
    except ApiError as exc:
        return ChangeEntry(task.key, Action.FAILED, f"{task.phase.value} hook: {explain(exc)}", **placed(task))
    return ChangeEntry(task.key, Action.CREATED, f"{task.phase.value} hook (dry run)", **placed(task))
