"""The plan of one sync: a sorted list of small task records, as Argo CD orders them.

Order: phase (PreSync → Sync → PostSync) → wave → kind → name. Hooks come from
`argocd.argoproj.io/hook` or Helm's `helm.sh/hook` (mapped the way Argo CD maps them). The wave is
`argocd.argoproj.io/sync-wave`, else `helm.sh/hook-weight` (hooks and plain objects alike, as gitops-engine's
`syncwaves.Wave`). A hook with only `metadata.generateName` is named per operation as gitops-engine names it
(`<generateName><revision[:7]>-<phase>-<started unix time>`), so re-running a step of the same operation
finds the hook it created instead of creating another. App-level sync options that act per object
(`Replace=true`, ...) are merged into every task's options; an object's own annotation wins for the same
option name. Pure functions only: the plan is tested without a cluster.
"""

from __future__ import annotations

import copy
import enum
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from tidecd.base import constants
from tidecd.base.errors import ConfigError
from tidecd.base.model import Manifest, ResourceKey


class Phase(enum.StrEnum):
    PRE_SYNC = "PreSync"
    SYNC = "Sync"
    POST_SYNC = "PostSync"
    SYNC_FAIL = "SyncFail"


PHASE_ORDER = [Phase.PRE_SYNC, Phase.SYNC, Phase.POST_SYNC, Phase.SYNC_FAIL]

KIND_ORDER = [
    "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy", "PodDisruptionBudget",
    "ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass", "PersistentVolume",
    "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
    "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList", "Service", "DaemonSet",
    "Pod", "ReplicationController", "ReplicaSet", "Deployment", "HorizontalPodAutoscaler", "StatefulSet", "Job",
    "CronJob", "Ingress", "APIService",
]
_KIND_RANK = {kind: rank for rank, kind in enumerate(KIND_ORDER)}

HELM_HOOKS = {
    "pre-install": Phase.PRE_SYNC, "pre-upgrade": Phase.PRE_SYNC,
    "post-install": Phase.POST_SYNC, "post-upgrade": Phase.POST_SYNC,
}
HELM_DELETE_POLICIES = {
    "before-hook-creation": "BeforeHookCreation", "hook-succeeded": "HookSucceeded", "hook-failed": "HookFailed",
}
DELETE_POLICIES = {"BeforeHookCreation", "HookSucceeded", "HookFailed"}
DELETE_HOOKS = frozenset({"PreDelete", "PostDelete"})  # run around the app's deletion, never in a sync
# App-level sync options that apply to each object as if it carried them in its own annotation.
PER_OBJECT_OPTIONS = frozenset({"Replace", "Force", "ServerSideApply", "Validate", "SkipDryRunOnMissingResource",
                                "PruneLast"})


def kind_rank(kind: str) -> int:
    return _KIND_RANK.get(kind, len(KIND_ORDER))


@dataclass(frozen=True)
class Task:
    """One object to apply in one phase and wave."""

    key: ResourceKey
    obj: Manifest = field(compare=False, hash=False, repr=False)
    phase: Phase = Phase.SYNC
    wave: int = 0
    hook: bool = False
    delete_policies: frozenset[str] = frozenset()
    options: frozenset[str] = frozenset()
    generate_name: str | None = None  # a hook named by the operation (see `HookNaming`): its generateName

    @property
    def sort_key(self) -> tuple[int, int, int, str, str]:
        return (PHASE_ORDER.index(self.phase), self.wave, kind_rank(self.key.kind), self.key.namespace,
                self.key.name)

    def has_option(self, option: str) -> bool:
        return option in self.options


def annotations_of(obj: Manifest) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def sync_options(obj: Manifest) -> frozenset[str]:
    """`argocd.argoproj.io/sync-options: Prune=false,Replace=true` as a set of `Name=value` strings."""
    raw = annotations_of(obj).get(constants.ANNOTATION_SYNC_OPTIONS, "")
    return frozenset(part.strip() for part in raw.split(",") if part.strip())


def wave_of(obj: Manifest) -> int:
    notes = annotations_of(obj)
    name = constants.ANNOTATION_SYNC_WAVE
    raw = notes.get(name)
    if raw is None:
        name, raw = constants.HELM_HOOK_WEIGHT, notes.get(constants.HELM_HOOK_WEIGHT)
    if raw is None or raw.strip() == "":
        return 0
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{ResourceKey.of(obj)}: annotation {name}={raw!r} is not an integer") from None


@dataclass(frozen=True)
class HookNaming:
    """What names a `generateName` hook within one operation: its revision and start time."""

    revision: str
    started_at: int  # unix seconds

    def name(self, generate_name: str, phase: Phase) -> str:
        return f"{generate_name}{self.revision[:7]}-{phase.value}-{self.started_at}".lower()


def generate_name_of(obj: Manifest) -> str | None:
    """`metadata.generateName` of an object the sync names (it has no `metadata.name`; "" when it has no
    generateName either), None for a named object."""
    meta = obj.get("metadata") or {}
    return None if meta.get("name") else str(meta.get("generateName") or "")


def merged_options(app_options: Iterable[str], obj: Manifest) -> frozenset[str]:
    """The object's sync options with the app's per-object ones added; the object's own value wins."""
    merged: dict[str, str] = {}
    for option in app_options:
        name = option.split("=", 1)[0]
        if name in PER_OBJECT_OPTIONS:
            merged[name] = option
    for option in sync_options(obj):
        merged[option.split("=", 1)[0]] = option
    return frozenset(merged.values())


def hook_phases(obj: Manifest) -> list[Phase] | None:
    """The hook phases of an object; None when it is not a hook, [] for `Skip` (never applied)."""
    notes = annotations_of(obj)
    if constants.ANNOTATION_HOOK in notes:
        names = [n.strip() for n in notes[constants.ANNOTATION_HOOK].split(",") if n.strip()]
        if "Skip" in names:
            return []
        try:  # PreDelete / PostDelete run only around the app's deletion (`tidecd.sync.hooks`), never in a sync
            return [Phase(name) for name in names if name not in DELETE_HOOKS]
        except ValueError:
            raise ConfigError(f"{ResourceKey.of(obj)}: unknown hook {notes[constants.ANNOTATION_HOOK]!r} "
                              f"(expected PreSync, Sync, PostSync, SyncFail, PreDelete, PostDelete or Skip)") from None
    if constants.HELM_HOOK in notes:
        names = [n.strip() for n in notes[constants.HELM_HOOK].split(",")]
        phases = sorted({HELM_HOOKS[n] for n in names if n in HELM_HOOKS}, key=PHASE_ORDER.index)
        return phases  # helm hooks a sync does not run (tests; deletes run around the app's deletion) are skipped
    return None


def is_hook(obj: Manifest) -> bool:
    """Whether a live object is a hook, as gitops-engine's `hook.IsHook` reads it (Argo CD's deletion hooks
    included): `argocd.argoproj.io/hook` naming anything but `Skip`, else any `helm.sh/hook` but
    `crd-install`. Argo CD leaves such objects out of the comparison, the app's health and prune, whatever
    their name: a hook named by an earlier operation (`generateName`, or none) is no resource of the app."""
    notes = annotations_of(obj)
    if constants.ANNOTATION_HOOK in notes:
        return "Skip" not in {n.strip() for n in str(notes[constants.ANNOTATION_HOOK]).split(",")}
    return constants.HELM_HOOK in notes and str(notes[constants.HELM_HOOK]).strip() != "crd-install"


def delete_policies(obj: Manifest) -> frozenset[str]:
    notes = annotations_of(obj)
    if constants.ANNOTATION_HOOK_DELETE_POLICY in notes:
        policies = {p.strip() for p in notes[constants.ANNOTATION_HOOK_DELETE_POLICY].split(",") if p.strip()}
    elif constants.HELM_HOOK_DELETE_POLICY in notes:
        policies = {HELM_DELETE_POLICIES.get(p.strip(), p.strip())
                    for p in notes[constants.HELM_HOOK_DELETE_POLICY].split(",")}
    else:
        policies = set()
    unknown = policies - DELETE_POLICIES
    if unknown:
        raise ConfigError(f"{ResourceKey.of(obj)}: unknown hook-delete-policy {sorted(unknown)}")
    return frozenset(policies or {"BeforeHookCreation"})


def plan(manifests: Iterable[Manifest], *, app_options: Iterable[str] = (),
         naming: HookNaming | None = None) -> list[Task]:
    """Every task of a sync, sorted. Hooks get one task per phase they name.

    `generateName` hooks are named with `naming`; without it (a plan that is only inspected, never run)
    their key keeps an empty name."""
    app_options = tuple(app_options)
    tasks: list[Task] = []
    for obj in manifests:
        key, wave, options = ResourceKey.of(obj), wave_of(obj), merged_options(app_options, obj)
        phases = hook_phases(obj)
        if phases is None:
            tasks.append(Task(key, obj, Phase.SYNC, wave, options=options))
            continue
        generate = generate_name_of(obj)
        for phase in phases:
            named, hook_key = obj, key
            if generate is not None and naming is not None:
                named = copy.deepcopy(obj)
                named["metadata"]["name"] = naming.name(generate, phase)
                hook_key = ResourceKey.of(named)
            tasks.append(Task(hook_key, named, phase, wave, hook=True, delete_policies=delete_policies(obj),
                              options=options, generate_name=generate))
    return sorted(tasks, key=lambda t: t.sort_key)


# What pods run from: applying these early lets their controllers start while the rest of the group applies.
WORKLOAD_KINDS = frozenset({"DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment", "StatefulSet",
                            "Job", "CronJob"})
DATA_KINDS = frozenset({"ConfigMap", "Secret"})
_CONFIGMAP_KEYS = frozenset({"configMap", "configMapRef", "configMapKeyRef"})
_SECRET_KEYS = frozenset({"secret", "secretRef", "secretKeyRef", "nodePublishSecretRef", "controllerPublishSecretRef",
                          "nodeStageSecretRef", "controllerExpandSecretRef", "nodeExpandSecretRef"})
_AFTER_WORKLOADS = kind_rank("CronJob") + 0.5  # before Ingress, APIService and custom resources


def apply_order(tasks: Iterable[Task]) -> list[Task]:
    """The order one group's applies are issued in (they run concurrently, `reconcile.APPLY_CONCURRENCY` at
    a time): the plan's kind order, except that ConfigMaps and Secrets which no workload or ServiceAccount
    of the group names go right after the workloads, still before Ingresses and custom resources.

    Argo CD applies a wave kind by kind, so an app's 30 Deployments wait for its 120 ConfigMaps; what a
    Deployment needs first (the ConfigMaps and Secrets its pods mount or read, its ServiceAccount and pull
    secrets, its Services for their environment variables, quotas, limits and policies that admit its pods)
    keeps its place before it. Namespaces and CRDs are a group of their own before (`sync.decide`)."""
    tasks = list(tasks)
    if not any(t.key.kind in WORKLOAD_KINDS and not t.hook for t in tasks):
        return tasks
    named: set[ResourceKey] = set()
    for task in tasks:
        named |= data_references(task)

    def rank(task: Task) -> tuple[int, int, float, int, str, str]:
        phase, wave, kind, namespace, name = task.sort_key
        deferred = not task.hook and task.key.kind in DATA_KINDS and task.key not in named
        return phase, wave, _AFTER_WORKLOADS if deferred else kind, kind, namespace, name

    return sorted(tasks, key=rank)


def apply_batches(tasks: Iterable[Task]) -> list[list[Task]]:
    """`apply_order` cut in two at the first workload: what the workloads need is applied (and answered)
    before any workload is sent, the workloads and what follows them after, each batch concurrently."""
    ordered = apply_order(tasks)
    cut = next((i for i, t in enumerate(ordered) if t.key.kind in WORKLOAD_KINDS and not t.hook), 0)
    return [batch for batch in (ordered[:cut], ordered[cut:]) if batch]


def data_references(task: Task) -> set[ResourceKey]:
    """The ConfigMaps and Secrets (in the task's namespace) a workload's pods or a ServiceAccount name."""
    kind, spec = task.key.kind, task.obj.get("spec") or {}
    if kind == "ServiceAccount":
        items = [*(task.obj.get("imagePullSecrets") or []), *(task.obj.get("secrets") or [])]
        return {ResourceKey("", "Secret", task.key.namespace, str(i.get("name", "")))
                for i in items if isinstance(i, dict) and i.get("name")}
    if kind not in WORKLOAD_KINDS or not isinstance(spec, dict):
        return set()
    if kind == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec") or {})
    pod = spec if kind == "Pod" else ((spec.get("template") or {}).get("spec") or {})
    found: set[ResourceKey] = set()
    _collect(pod, task.key.namespace, found, 0)
    return found


def _collect(node: object, namespace: str, found: set[ResourceKey], depth: int) -> None:
    if depth > 12:  # pod specs are shallow; bounded on hostile input
        return
    if isinstance(node, list):
        for item in node:
            _collect(item, namespace, found, depth + 1)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key == "imagePullSecrets" and isinstance(value, list):
            found.update(ResourceKey("", "Secret", namespace, str(i["name"])) for i in value
                         if isinstance(i, dict) and i.get("name"))
        elif isinstance(value, dict) and key in _CONFIGMAP_KEYS and value.get("name"):
            found.add(ResourceKey("", "ConfigMap", namespace, str(value["name"])))
        elif isinstance(value, dict) and key in _SECRET_KEYS and (value.get("secretName") or value.get("name")):
            found.add(ResourceKey("", "Secret", namespace, str(value.get("secretName") or value.get("name"))))
        _collect(value, namespace, found, depth + 1)


def resources(manifests: Iterable[Manifest]) -> list[Manifest]:
    """The app's resources proper: what is compared, tracked in the inventory and pruned (no hooks)."""
    return [obj for obj in manifests if hook_phases(obj) is None]


def waves(tasks: Iterable[Task], phase: Phase) -> Iterator[tuple[int, list[Task]]]:
    """The tasks of one phase grouped by wave, in order."""
    chosen = sorted((t for t in tasks if t.phase is phase), key=lambda t: t.sort_key)
    for wave, group in itertools.groupby(chosen, key=lambda t: t.wave):
        yield wave, list(group)


def prune_order(keys: Iterable[tuple[ResourceKey, int]]) -> list[ResourceKey]:
    """Objects to prune, in reverse wave order then reverse kind order (Deployments before Namespaces)."""
    ordered = sorted(keys, key=lambda kw: (kw[1], kind_rank(kw[0].kind), kw[0].namespace, kw[0].name),
                     reverse=True)
    return [key for key, _ in ordered]
