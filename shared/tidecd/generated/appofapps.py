"""App of apps: the `Application` and `AppProject` objects among a parent app's manifests become tidecd apps.

The parent's sync treats them like any object (waves, kind order, dry-run, prune), but through
`ChildCluster`, a `Cluster` that keeps them in the parent's record of generated apps
(`state/generated/application-<parent>.json`, see `tidecd.generated.records`) instead of applying CRs:

- apply: the child's document is recorded (and the step asks for the child to be refreshed);
- get/list: the recorded document, with the child app's own status from its state (`status.sync.status`,
  `status.health.status`), so the Application health check (`health.application`, Argo CD's Lua check
  plus "Synced") makes a later wave wait until the earlier children are Synced and Healthy: the parent's
  step records the wait and continues later, as for any wave;
- delete (prune): the child is marked deleting when it has the resources finalizer (it then prunes what
  it owns and leaves), else dropped at once.

Everything else goes to the real cluster. A parent annotated `tidecd.io/app-of-apps: apply` keeps the old
behaviour: its Application objects are applied as CRs (the destination needs Argo CD's CRDs).
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from tidecd.base.constants import ARGO_GROUP
from tidecd.base.model import Manifest, ResourceKey
from tidecd.clients.cluster import ApiResource, KubeCluster
from tidecd.clients.store import ObjectStore, read_json
from tidecd.generated import records as generated
from tidecd.state import app as app_state

ANNOTATION_MODE = "tidecd.io/app-of-apps"  # "apply": Application objects are applied to the cluster as CRs
PLURALS = {"Application": "applications", "AppProject": "appprojects"}
READ_ONLY_META = ("resourceVersion", "uid", "generation", "creationTimestamp", "managedFields")


def is_child_kind(group: str, kind: str) -> bool:
    return group == ARGO_GROUP and kind in PLURALS


def is_child_object(obj: Manifest) -> bool:
    key = ResourceKey.of(obj)
    return is_child_kind(key.group, key.kind)


def owner_of(parent: str) -> str:
    return f"Application/{parent}"


class ChildCluster:
    """A `Cluster` whose argoproj.io Application/AppProject objects are the parent's generated apps."""

    def __init__(self, inner: KubeCluster, store: ObjectStore, parent: str) -> None:
        self.inner, self.store, self.parent = inner, store, parent
        self.owner = owner_of(parent)
        self.touched: list[str] = []  # child apps created, changed or deleted by this step

    def __getattr__(self, name: str) -> Any:  # everything else: the real cluster
        return getattr(self.inner, name)

    # -- discovery ----------------------------------------------------------------------------------

    def resource(self, group: str, kind: str) -> ApiResource:
        if is_child_kind(group, kind):
            return ApiResource(ARGO_GROUP, "v1alpha1", kind, PLURALS[kind], True)
        return self.inner.resource(group, kind)

    def is_namespaced(self, group: str, kind: str) -> bool:
        if is_child_kind(group, kind):
            return True
        return self.inner.is_namespaced(group, kind)

    # -- reads --------------------------------------------------------------------------------------

    def _record(self) -> dict[str, Any]:
        found = read_json(self.store, generated.record_key(self.owner))
        return found[0] if found is not None and isinstance(found[0], dict) else {}

    def _live(self, kind: str, name: str, record: dict[str, Any]) -> Manifest | None:
        if kind == "AppProject":
            doc = (record.get("projects") or {}).get(name)
            return _with_meta(doc) if isinstance(doc, dict) else None
        entry = (record.get("apps") or {}).get(name)
        if not isinstance(entry, dict) or entry.get("deleting") or not isinstance(entry.get("doc"), dict):
            return None
        obj = _with_meta(entry["doc"])
        child = app_state.load(self.store, name)[0]
        obj["status"] = {"sync": {"status": str(child.sync_status), "revision": child.revision},
                         "health": {"status": str(child.health), "message": child.health_message},
                         "reconciledAt": child.memo.reconciled_at}
        if child.operation is not None:
            obj["status"]["operationState"] = {"phase": str(child.operation.phase)}
        return obj

    def get(self, key: ResourceKey) -> Manifest | None:
        if not is_child_kind(key.group, key.kind):
            return self.inner.get(key)
        return self._live(key.kind, key.name, self._record())

    def list(self, group: str, kind: str, *, namespace: str = "", label_selector: str = "") -> list[Manifest]:
        if not is_child_kind(group, kind):
            return self.inner.list(group, kind, namespace=namespace, label_selector=label_selector)
        record = self._record()
        names = sorted((record.get("projects") if kind == "AppProject" else record.get("apps")) or {})
        return [obj for name in names if (obj := self._live(kind, name, record)) is not None]

    # -- writes -------------------------------------------------------------------------------------

    def apply(self, obj: Manifest, *, dry_run: bool = False) -> Manifest:
        key = ResourceKey.of(obj)
        if not is_child_kind(key.group, key.kind):
            return self.inner.apply(obj, dry_run=dry_run)
        doc = _clean(obj)
        if not dry_run:
            self._write(key, doc)
        result = self._live(key.kind, key.name, self._record()) if not dry_run else None
        if result is None:
            result = _with_meta(doc)
            current = self.get(key)
            if current is not None and "status" in current:
                result["status"] = current["status"]
        return result

    def replace(self, obj: Manifest, *, force: bool = False) -> Manifest:
        key = ResourceKey.of(obj)
        if not is_child_kind(key.group, key.kind):
            return self.inner.replace(obj, force=force)
        return self.apply(obj)

    def delete(self, key: ResourceKey, *, propagation: str = "Background") -> None:
        if not is_child_kind(key.group, key.kind):
            self.inner.delete(key, propagation=propagation)
            return

        def change(record: dict[str, Any]) -> dict[str, Any] | None:
            if key.kind == "AppProject":
                projects = dict(record.get("projects") or {})
                return {**record, "projects": projects} if projects.pop(key.name, None) is not None else None
            apps = dict(record.get("apps") or {})
            entry = apps.get(key.name)
            if not isinstance(entry, dict):
                return None
            if generated.cascades(entry.get("doc") or {}):
                apps[key.name] = {**entry, "deleting": True}
            else:
                del apps[key.name]
            return {**record, "apps": apps}

        if generated.update(self.store, self.owner, change) and key.kind == "Application":
            self.touched.append(key.name)

    def _write(self, key: ResourceKey, doc: Manifest) -> None:
        def change(record: dict[str, Any]) -> dict[str, Any] | None:
            if key.kind == "AppProject":
                return {**record, "projects": {**(record.get("projects") or {}), key.name: doc}}
            apps = dict(record.get("apps") or {})
            entry = {"doc": doc, "generator": f"manifests of Application/{self.parent}"}
            if apps.get(key.name) == entry:
                return None
            apps[key.name] = entry
            return {**record, "apps": apps}

        if generated.update(self.store, self.owner, change) and key.kind == "Application":
            self.touched.append(key.name)


def _clean(obj: Manifest) -> Manifest:
    """The document as recorded: without status and server-set metadata."""
    doc = copy.deepcopy(dict(obj))
    doc.pop("status", None)
    doc.pop("operation", None)
    meta = doc.setdefault("metadata", {})
    for name in READ_ONLY_META:
        meta.pop(name, None)
    return doc


def _with_meta(doc: Manifest) -> Manifest:
    """A recorded document as a live object: a resourceVersion and uid derived from its content."""
    obj = copy.deepcopy(dict(doc))
    digest = hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()
    meta = obj.setdefault("metadata", {})
    meta["resourceVersion"] = str(int(digest[:12], 16))
    meta["uid"] = f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
    return obj
