"""Execute: one function per step `sync.decide` returns, cluster calls only, each returning what it did.

Nothing here touches the app's state: `step.record` turns what these return into the operation's results,
the change set and the inventory. A function never waits; the health poll between steps is the loop's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import structlog

from tidecd.base.model import Action, ChangeEntry, Manifest, ResourceKey
from tidecd.clients.cluster import ApiError, KubeCluster, UnknownKind
from tidecd.config.load import Application
from tidecd.diff import respect_ignored
from tidecd.generated import records as generated
from tidecd.step.observe import Target, each, read
from tidecd.sync import decide as decision
from tidecd.sync import options as syncoptions
from tidecd.sync import plan
from tidecd.sync.apply import NotingRefusals, apply_task, explain, resets, writes_synced
from tidecd.sync.hooks import create_hook, delete_earlier_copies, dry_run_hook
from tidecd.sync.prune import prune

log = structlog.get_logger("tidecd.step.execute")


@dataclass(frozen=True)
class Applied:
    """One task applied (or a hook created): its change-set entry and, for a hook, the uid it got."""

    task: plan.Task
    entry: ChangeEntry
    uid: str = ""


@dataclass(frozen=True)
class Executed:
    """What one step did on the cluster: its change-set entries, the tasks applied, the objects as the
    writes returned them, and the objects read again afterwards (None: gone)."""

    entries: tuple[ChangeEntry, ...] = ()
    applied: tuple[Applied, ...] = ()
    written: Mapping[ResourceKey, Manifest] = field(default_factory=dict)
    read: tuple[tuple[ResourceKey, Manifest | None], ...] = ()
    refused: Mapping[ResourceKey, int] = field(default_factory=dict)  # a dry-run's refusals: HTTP status


def managed_namespace(app: Application, namespace: str) -> Manifest:
    """The namespace CreateNamespace=true creates, with the app's `managedNamespaceMetadata`."""
    meta: dict[str, object] = {"name": namespace}
    if app.sync_policy.namespace_labels:
        meta["labels"] = dict(app.sync_policy.namespace_labels)
    if app.sync_policy.namespace_annotations:
        meta["annotations"] = dict(app.sync_policy.namespace_annotations)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def create_namespace(target: Target, step: decision.CreateNamespace) -> Executed:
    target.cluster.apply(managed_namespace(target.app, step.namespace))
    return Executed()


def dry_run(target: Target, step: decision.DryRun, live: Mapping[ResourceKey, Manifest],
            out_of_sync: set[ResourceKey], *, operation_dry_run: bool) -> Executed:
    """The server's dry-run of every task the operation will apply (hooks as they will be created), and
    the HTTP status of each refusal."""
    cluster, name = NotingRefusals(target.cluster), target.name

    def one(task: plan.Task) -> ChangeEntry:
        if task.hook:
            return dry_run_hook(cluster, task, name)
        if operation_dry_run and task.key in live and task.key not in out_of_sync:
            return ChangeEntry(task.key, Action.UNCHANGED)
        try:
            return apply_task(cluster, task, name, dry_run=True, exists=live.__contains__,
                              argocd_marks=target.argocd_marks)
        except UnknownKind as exc:
            return ChangeEntry(task.key, Action.FAILED, str(exc))

    return Executed(tuple(each(one, step.tasks)), refused=dict(cluster.statuses))


def delete_hooks(target: Target, step: decision.DeleteHooks) -> Executed:
    propagation = "Foreground" if step.reason == decision.BEFORE_HOOK_CREATION else "Background"
    for key in step.keys:
        target.cluster.delete(key, propagation=propagation)
    return Executed(read=tuple(read(target.cluster, step.keys)))


def run_tasks(target: Target, step: decision.RunTasks, live: Mapping[ResourceKey, Manifest],
              out_of_sync: set[ResourceKey], operation_id: str,
              written: Callable[[ResourceKey, Manifest], None]) -> Executed:
    """A group's tasks: what workloads need first, then the workloads before data nothing names
    (`plan.apply_batches`); results in the plan's order. `written` hears each object as its write
    returned it (from the pool's threads)."""
    cluster, name = target.cluster, target.name
    respect = target.app.sync_policy.has_option("RespectIgnoreDifferences=true")
    only_out_of_sync = target.app.sync_policy.has_option("ApplyOutOfSyncOnly=true")
    rules = target.config.ignore_differences_of(target.app)
    applied: dict[ResourceKey, Manifest] = {}

    def note(key: ResourceKey, result: Manifest) -> None:
        applied[key] = result  # distinct keys from the pool's threads
        written(key, result)

    def one(task: plan.Task) -> Applied:
        if task.hook:
            if task.generate_name and decision.BEFORE_HOOK_CREATION in task.delete_policies:
                delete_earlier_copies(cluster, task, name, operation_id)
            entry, uid = create_hook(cluster, task, name, operation_id)
            return Applied(task, entry, uid)
        current = live.get(task.key)
        kept = respect_ignored(task.obj, current, rules)  # git's object with the live values of ignored fields
        if current is not None and task.key not in out_of_sync and not writes_synced(
                task, only_out_of_sync=only_out_of_sync, respect=respect, hidden=resets(task.obj, kept)):
            return Applied(task, ChangeEntry(task.key, Action.UNCHANGED))
        if respect:
            task = dataclasses.replace(task, obj=kept)
        return Applied(task, apply_task(cluster, task, name, dry_run=False, exists=live.__contains__,
                                        written=note, argocd_marks=target.argocd_marks))

    done: list[Applied] = []
    for batch in plan.apply_batches(step.tasks):
        done += each(one, batch)
    position = {t.key: i for i, t in enumerate(step.tasks)}
    done.sort(key=lambda item: position.get(item.task.key, 0))
    return Executed(tuple(d.entry for d in done), tuple(done), applied)


def prune_step(target: Target, step: decision.Prune) -> Executed:
    entries = prune(target.cluster, target.name, list(step.candidates), enabled=step.enabled,
                    dry_run=step.dry_run,
                    propagation=syncoptions.prune_propagation(target.app.sync_policy.sync_options),
                    deleting=generated.is_deleting(target.app))
    return Executed(tuple(entries))


def terminate(target: Target, hooks: Iterable[ResourceKey]) -> Executed:
    """Delete the running hooks of a terminated operation (a refusal is logged, never raised)."""
    for key in hooks:
        try:
            target.cluster.delete(key, propagation="Background")
        except ApiError as exc:
            log.warning("terminate: hook not deleted", app=target.name, hook=str(key), error=explain(exc))
    return Executed()


@dataclass(frozen=True)
class Adopted:
    """What `tidecd.io/adopt-from-argocd` did: the objects re-marked (their entries), or why not."""

    entries: tuple[ChangeEntry, ...] = ()
    refused: str = ""


def adopt_from_argocd(argo_cluster: KubeCluster, target: Target, source: str) -> Adopted:
    """`tidecd.io/adopt-from-argocd: [<namespace>/]<name>` (or "true": the app's own name, in `argocd`):
    what `tidecd app adopt` does, when the desired objects are that Argo CD Application's. A refusal
    becomes the condition ArgoCDAdoptionRefused, naming each object; nothing is written then.
    `argo_cluster` is the real destination, not the app-of-apps view, where Applications are tidecd's."""
    # lazy: cold start (sync.adopt, 20-40 ms of its own: only an app that adopts from Argo CD loads it)
    from tidecd.sync import adopt as moves

    namespace, _, name = source.rpartition("/")
    name = target.name if name.lower() in ("true", "") else name
    control = namespace or "argocd"
    desired = {ResourceKey.of(m): m for m in plan.resources(target.manifests)}
    try:
        argo = moves.read_argo_app(argo_cluster, f"{control}/{name}", control)
        checked = moves.plan_adopt(target.cluster, target.name, argo, desired, target.app.ignore_differences,
                                   argocd_marks=target.argocd_marks)
    except moves.AdoptRefused as exc:
        return Adopted(refused=str(exc))
    entries = tuple(moves.adopt(target.cluster, checked, argocd_marks=target.argocd_marks))
    log.info("adopted from Argo CD", app=target.name, argocd=f"{argo.namespace}/{argo.name}",
             objects=len(checked.moves), next="; ".join(moves.argocd_steps_after_adopt(argo)))
    return Adopted(entries)
