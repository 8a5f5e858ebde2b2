"""AppProject `orphanedResources`: objects in an app's destination namespace that no app manages.

With `warn: true` the app carries an `OrphanedResourceWarning` condition listing them (Argo CD's warning), so a
forgotten `kubectl apply` is seen. An object is orphaned when no app (tidecd's or Argo CD's) marks it as its
own, it has no `ownerReferences` (a ReplicaSet of a Deployment, a Pod of a Job are not), it is not one Kubernetes
creates in every namespace (ServiceAccount `default`, ConfigMap `kube-root-ca.crt`) and no `ignore` entry
(group, kind, name globs) matches it. tidecd lists the common namespaced kinds below plus the kinds the app
itself manages (Argo CD watches every kind; listing them all on each refresh would cost a call per kind).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tidecd.base import ownership
from tidecd.base.globs import compile_glob
from tidecd.base.model import Manifest, ResourceKey
from tidecd.config.model import OrphanedResources

CONDITION = "OrphanedResourceWarning"
KINDS: tuple[tuple[str, str], ...] = (
    ("", "ConfigMap"), ("", "Secret"), ("", "Service"), ("", "ServiceAccount"), ("", "PersistentVolumeClaim"),
    ("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "DaemonSet"), ("batch", "Job"), ("batch", "CronJob"),
    ("networking.k8s.io", "Ingress"), ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
)
_BUILT_IN = {("", "ServiceAccount", "default"), ("", "ConfigMap", "kube-root-ca.crt")}
MAX_LISTED = 20


def _glob(pattern: str, value: str) -> bool:
    if not pattern or pattern == value:
        return True
    try:
        return compile_glob(pattern).fullmatch(value) is not None
    except ValueError:
        return False


def is_orphan(obj: Manifest, settings: OrphanedResources) -> bool:
    key = ResourceKey.of(obj)
    if (key.group, key.kind, key.name) in _BUILT_IN or (obj.get("metadata") or {}).get("ownerReferences"):
        return False
    if ownership.owner(obj) is not None:
        return False
    return not any(_glob(i.group, key.group) and _glob(i.kind, key.kind) and _glob(i.name, key.name)
                   for i in settings.ignore)


def find(list_kind: Callable[[str, str], list[Manifest]], kinds: Iterable[tuple[str, str]],
         settings: OrphanedResources) -> list[ResourceKey]:
    """The orphans among the objects `list_kind(group, kind)` returns (the destination namespace's)."""
    found: set[ResourceKey] = set()
    for group, kind in sorted(set(kinds)):
        found.update(ResourceKey.of(obj) for obj in list_kind(group, kind) if is_orphan(obj, settings))
    return sorted(found)


def message(namespace: str, orphans: list[ResourceKey]) -> str:
    shown = ", ".join(str(k) for k in orphans[:MAX_LISTED]) + (" ..." if len(orphans) > MAX_LISTED else "")
    return f"{len(orphans)} orphaned resource(s) in namespace {namespace!r} (no app manages them): {shown}"
