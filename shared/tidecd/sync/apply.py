"""Applying one object: server-side apply (or replace) with tidecd's ownership marks.

Every object tidecd writes carries its own marks (`tidecd.base.ownership`): the label `tidecd.io/app: <app>`
(cheap selection) and the annotation `tidecd.io/tracking-id: <installation>:<app>:<group>/<kind>:<ns>/<name>`
(proof of ownership). Argo CD's `argocd.argoproj.io/tracking-id` and `app.kubernetes.io/instance` are
written only for an app that opts in (`tidecd.io/write-argocd-tracking: "true"`).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from tidecd.base import constants, ownership
from tidecd.base.errors import TemporaryError
from tidecd.base.model import Action, ChangeEntry, Manifest, ResourceKey
from tidecd.clients.cluster import ApiError, ApiResource, Cluster, UnknownKind
from tidecd.sync.plan import Task

REPLACE = "Replace=true"
FORCE = "Force=true"
VALIDATE_OFF = "Validate=false"
UNDECLARED_FIELD = "field not declared in schema"
# How server-side apply refuses a field the kind's schema does not declare (whatever `fieldValidation` says):
# `.spec.bogus: field not declared in schema`, the path in structured-merge-diff's notation.
_UNDECLARED = re.compile(r'((?:\.[^\s.\[\]:]+|\[[^\]]*\])+): ' + re.escape(UNDECLARED_FIELD))
_ELEMENT = re.compile(r'\.[^\s.\[\]:]+|\[[^\]]*\]')
_KEY = re.compile(r'([^=,\s]+)=("(?:[^"\\]|\\.)*"|[^,]*)')
MAX_UNDECLARED_ROUNDS = 3


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


class NotingRefusals:
    """A `Cluster` that passes every call on and notes the HTTP status of each refused apply, by object (the
    dry-run's refusals, which `sync.decide.waiting_for_their_group` sorts). The step's pool calls it from
    several threads, each for another object."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.statuses: dict[ResourceKey, int] = {}

    def resource(self, group: str, kind: str) -> ApiResource:
        return self.cluster.resource(group, kind)

    def get(self, key: ResourceKey) -> Manifest | None:
        return self.cluster.get(key)

    def list(self, group: str, kind: str, *, namespace: str = "", label_selector: str = "") -> list[Manifest]:
        return self.cluster.list(group, kind, namespace=namespace, label_selector=label_selector)

    def apply(self, obj: Manifest, *, dry_run: bool = False) -> Manifest:
        try:
            return self.cluster.apply(obj, dry_run=dry_run)
        except ApiError as exc:
            self.statuses[ResourceKey.of(obj)] = exc.status
            raise

    def replace(self, obj: Manifest, *, force: bool = False) -> Manifest:
        return self.cluster.replace(obj, force=force)

    def delete(self, key: ResourceKey, *, propagation: str = "Background") -> None:
        self.cluster.delete(key, propagation=propagation)


def namespace_metadata_stale(live: Manifest | None, labels: Mapping[str, str], annotations: Mapping[str, str]) -> bool:
    """`managedNamespaceMetadata` of an existing namespace needs a write: a label or annotation it names is
    missing or has another value, or one that tidecd's apply set (its field manager owns it) is no longer
    named. Argo CD applies the namespace's metadata server-side on every sync; tidecd leaves out the
    applies that change nothing. A namespace that does not exist (None) is created anyway."""
    if live is None:
        return False
    meta = live.get("metadata") or {}
    for wanted, have in ((labels, meta.get("labels") or {}), (annotations, meta.get("annotations") or {})):
        if any(have.get(name) != value for name, value in wanted.items()):
            return True
    for entry in meta.get("managedFields") or []:
        if not isinstance(entry, dict) or entry.get("manager") != constants.FIELD_MANAGER:
            continue
        owned = ((entry.get("fieldsV1") or {}).get("f:metadata") or {})
        for field_name, wanted in (("f:labels", labels), ("f:annotations", annotations)):
            if any(name.removeprefix("f:") not in wanted for name in owned.get(field_name) or {}):
                return True
    return False


def resets(desired: Any, kept: Any) -> bool:
    """Would applying `desired` change what applying `kept` (git's object with the live values of ignored
    fields, `diff.respect_ignored`) leaves? Only where `desired` sets a field: a field git leaves out and
    the live object has (an autoscaler's replicas) is not reset by the apply."""
    if isinstance(desired, dict) and isinstance(kept, dict):
        return any(name not in kept or resets(value, kept[name]) for name, value in desired.items())
    return bool(desired != kept)


def writes_synced(task: Task, *, only_out_of_sync: bool, respect: bool, hidden: bool) -> bool:
    """Whether a sync writes a live object that compares Synced. Argo CD applies every object of the sync,
    Synced ones too, unless `ApplyOutOfSyncOnly=true`; tidecd leaves out only the writes that cannot change
    anything. So a Synced object is written when it is `Replace=true` (replaced whole on every sync), or when
    `ignoreDifferences` rules hide a difference (`hidden`: the apply resets those fields to git) and
    `RespectIgnoreDifferences=true` does not keep them."""
    if only_out_of_sync:
        return False
    return task.has_option(REPLACE) or (hidden and not respect)


def undeclared_fields(message: str) -> list[list[str]]:
    """The fields a server-side apply refused as not declared in the kind's schema, each as its path
    elements (`.name`, `[name="web"]`, `[0]`, `[="value"]`)."""
    return [_ELEMENT.findall(path) for path in _UNDECLARED.findall(message)]


def drop_field(obj: Any, path: list[str]) -> bool:
    """Remove the field at `path` (as `undeclared_fields` gives it) from `obj` in place; False when the path
    leads nowhere."""
    node = obj
    for position, element in enumerate(path):
        last = position == len(path) - 1
        if element.startswith("."):
            if not isinstance(node, dict) or element[1:] not in node:
                return False
            if last:
                del node[element[1:]]
                return True
            node = node[element[1:]]
        else:
            index = _list_index(node, element[1:-1])
            if index is None:
                return False
            if last:
                del node[index]
                return True
            node = node[index]
    return False


def _list_index(items: Any, selector: str) -> int | None:
    """The item of a list a path element selects: by index, by value (`=v`), or by key fields (`k="v",n=1`)."""
    if not isinstance(items, list):
        return None
    try:
        if selector.isdigit():
            return int(selector) if int(selector) < len(items) else None
        if selector.startswith("="):
            value = json.loads(selector[1:])
            return items.index(value) if value in items else None
        keys = {name: json.loads(raw) for name, raw in _KEY.findall(selector)}
    except ValueError:
        return None
    return next((i for i, item in enumerate(items)
                 if keys and isinstance(item, dict) and all(item.get(k) == v for k, v in keys.items())), None)


def apply_unvalidated(cluster: Cluster, obj: Manifest, *, dry_run: bool = False) -> Manifest:
    """`Validate=false`: Argo CD's `kubectl apply --validate=false` drops fields the kind does not declare.
    Server-side apply refuses such a field whatever `fieldValidation` says, so the fields it names are
    dropped from the object sent, and it is sent again (a few rounds at most); other refusals stand."""
    sent = copy.deepcopy(obj)
    for _ in range(MAX_UNDECLARED_ROUNDS):
        try:
            return cluster.apply(sent, dry_run=dry_run)
        except ApiError as exc:
            paths = undeclared_fields(str(exc))
            if not paths or not all([drop_field(sent, path) for path in paths]):
                raise
    return cluster.apply(sent, dry_run=dry_run)


def applied(cluster: Cluster, obj: Manifest, options: frozenset[str], *, dry_run: bool = False) -> Manifest:
    """Server-side apply of `obj` as its sync options ask (`Validate=false`: `apply_unvalidated`)."""
    if VALIDATE_OFF in options:
        return apply_unvalidated(cluster, obj, dry_run=dry_run)
    return cluster.apply(obj, dry_run=dry_run)


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
            applied(cluster, obj, task.options, dry_run=True)
        else:
            result = cluster.replace(obj, force=task.has_option(FORCE)) if task.has_option(REPLACE) else \
                applied(cluster, obj, task.options)
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
    user can act on it (Replace=true for an immutable field, ...) is added by the ApiError class itself,
    the one for a field the kind does not declare (server-side apply's 500) here."""
    text = str(exc).split(": ", 1)[-1] if exc.key else str(exc)
    if UNDECLARED_FIELD in text:
        text += " (the kind does not declare this field: remove it, or add the sync option Validate=false to drop it)"
    return text
