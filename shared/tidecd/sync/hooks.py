"""Sync hooks (PreSync, Sync, PostSync, SyncFail): created once per operation, judged from their health;
and the deletion hooks (PreDelete, PostDelete), which a sync never applies.

Every hook an operation creates carries the operation's id (`tidecd.io/operation-id`), so a resumed step
recognises its own hook by name and mark and never creates it a second time. Old copies
(BeforeHookCreation) and finished hooks (HookSucceeded / HookFailed) are deleted by separate steps; nothing
here waits.

PreDelete and PostDelete hooks (`argocd.argoproj.io/hook: PreDelete|PostDelete`, or Helm's
`helm.sh/hook: pre-delete|post-delete`, as Argo CD's `controller/hook.go` maps them) are neither compared,
applied nor pruned by a sync: they run only around the app's deletion (`tidecd.sync.deletion`). There a
hook is created when it is not live, judged by its health (Progressing waits, Degraded fails), and once
the deletion is done deleted by its delete policy (`cleanup`): HookSucceeded when every deletion hook ended
Healthy, HookFailed when one ended Degraded, and always when it names no policy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tidecd.base import constants
from tidecd.base.model import Action, ChangeEntry, HealthStatus, Manifest, ResourceKey
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


PRE_DELETE, POST_DELETE = "PreDelete", "PostDelete"
_HELM_DELETE_HOOKS = {"pre-delete": PRE_DELETE, "post-delete": POST_DELETE}
DELETE_OPERATION = "app-deletion"  # the operation mark of deletion hooks (`tidecd.io/operation-id`)


def delete_hook_type(obj: Manifest) -> str:
    """PreDelete, PostDelete, or "" when the object is no deletion hook."""
    notes = (obj.get("metadata") or {}).get("annotations") or {}
    names = [n.strip() for n in str(notes.get(constants.ANNOTATION_HOOK, "")).split(",")]
    helm = [_HELM_DELETE_HOOKS.get(n.strip(), "") for n in str(notes.get(constants.HELM_HOOK, "")).split(",")]
    for kind in (PRE_DELETE, POST_DELETE):
        if kind in names or (constants.ANNOTATION_HOOK not in notes and kind in helm):
            return kind
    return ""


def delete_hooks(manifests: Iterable[Manifest], kind: str) -> dict[ResourceKey, Manifest]:
    """The deletion hooks of one kind among an app's rendered manifests, by key."""
    return {ResourceKey.of(m): m for m in manifests if delete_hook_type(m) == kind}


def delete_hook_object(obj: Manifest, app: str) -> Manifest:
    """A deletion hook as it is created: owned by the app and marked as the deletion's."""
    out = with_ownership(obj, app)
    out["metadata"].setdefault("annotations", {})[constants.ANNOTATION_OPERATION] = DELETE_OPERATION
    return out


def explicit_delete_policies(obj: Manifest) -> frozenset[str]:
    """The delete policies the object names itself (Argo CD deletes a deletion hook naming none)."""
    notes = (obj.get("metadata") or {}).get("annotations") or {}
    raw = notes.get(constants.ANNOTATION_HOOK_DELETE_POLICY)
    helm = raw is None
    raw = notes.get(constants.HELM_HOOK_DELETE_POLICY, "") if helm else raw
    names = {p.strip() for p in str(raw).split(",") if p.strip()}
    if helm:
        names = {{"hook-succeeded": "HookSucceeded", "hook-failed": "HookFailed",
                  "before-hook-creation": "BeforeHookCreation"}.get(n, n) for n in names}
    return frozenset(names)


def cleanup(live: Mapping[ResourceKey, Manifest], outcomes: Mapping[ResourceKey, HealthStatus]) -> list[ResourceKey]:
    """The deletion hooks to delete once the deletion is done (Argo CD's `cleanupHooks`): judged by the
    worst outcome of them all."""
    worst = HealthStatus.HEALTHY
    if any(o is HealthStatus.DEGRADED for o in outcomes.values()):
        worst = HealthStatus.DEGRADED
    out = []
    for key, obj in sorted(live.items()):
        policies = explicit_delete_policies(obj)
        if (not policies or ("HookSucceeded" in policies and worst is HealthStatus.HEALTHY)
                or ("HookFailed" in policies and worst is HealthStatus.DEGRADED)):
            out.append(key)
    return out
