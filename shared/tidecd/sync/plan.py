"""The plan of one sync: a sorted list of small task records, as Argo CD orders them.

Order: phase (PreSync → Sync → PostSync) → wave → kind → name. Hooks come from
`argocd.argoproj.io/hook` or Helm's `helm.sh/hook` (mapped the way Argo CD maps them). Pure functions only:
the plan is tested without a cluster.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from tidecd import constants
from tidecd.errors import ConfigError
from tidecd.model import Manifest, ResourceKey


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
    raw = notes.get(constants.ANNOTATION_SYNC_WAVE)
    if raw is None and constants.HELM_HOOK in notes:
        raw = notes.get(constants.HELM_HOOK_WEIGHT)
    if raw is None or raw.strip() == "":
        return 0
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{ResourceKey.of(obj)}: annotation {constants.ANNOTATION_SYNC_WAVE}={raw!r} "
                          "is not an integer") from None


def hook_phases(obj: Manifest) -> list[Phase] | None:
    """The hook phases of an object; None when it is not a hook, [] for `Skip` (never applied)."""
    notes = annotations_of(obj)
    if constants.ANNOTATION_HOOK in notes:
        names = [n.strip() for n in notes[constants.ANNOTATION_HOOK].split(",") if n.strip()]
        if "Skip" in names:
            return []
        try:
            return [Phase(name) for name in names]
        except ValueError:
            raise ConfigError(f"{ResourceKey.of(obj)}: unknown hook {notes[constants.ANNOTATION_HOOK]!r} "
                              f"(expected PreSync, Sync, PostSync, SyncFail or Skip)") from None
    if constants.HELM_HOOK in notes:
        names = [n.strip() for n in notes[constants.HELM_HOOK].split(",")]
        phases = sorted({HELM_HOOKS[n] for n in names if n in HELM_HOOKS}, key=PHASE_ORDER.index)
        return phases  # helm hooks Argo CD does not map (tests, deletes) are skipped
    return None


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


def plan(manifests: Iterable[Manifest]) -> list[Task]:
    """Every task of a sync, sorted. Hooks get one task per phase they name."""
    tasks: list[Task] = []
    for obj in manifests:
        key, wave, options = ResourceKey.of(obj), wave_of(obj), sync_options(obj)
        phases = hook_phases(obj)
        if phases is None:
            tasks.append(Task(key, obj, Phase.SYNC, wave, options=options))
            continue
        for phase in phases:
            tasks.append(Task(key, obj, phase, wave, hook=True, delete_policies=delete_policies(obj),
                              options=options))
    return sorted(tasks, key=lambda t: t.sort_key)


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
