"""Comparing desired and live objects.

The desired object is first server-side applied as a dry run, so the API server fills in its defaults
and merges it with fields other managers own: what comes back is what the live object would become.
Comparing that prediction with the live object (both normalized) finds exactly the changes a sync would
make, and never reports a default the user left out. Secret values are masked before any text is made.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

from tidecd.base import constants
from tidecd.base.globs import glob_match
from tidecd.base.jqpaths import delete_paths
from tidecd.base.model import Action, ChangeEntry, ChangeSet, Manifest, ResourceKey, SyncStatus
from tidecd.base.ownership import MARK_ANNOTATIONS, MARK_LABELS
from tidecd.clients.secrets import redact
from tidecd.config.load import IgnoreDifference

VOLATILE_METADATA = ("managedFields", "resourceVersion", "uid", "generation", "creationTimestamp", "selfLink",
                     "deletionTimestamp", "deletionGracePeriodSeconds")


@dataclass(frozen=True)
class ResourceDiff:
    """The comparison of one object: its sync status, the changed field paths and a masked YAML diff."""

    key: ResourceKey
    status: SyncStatus
    changed_paths: tuple[str, ...] = ()
    text: str = ""
    requires_pruning: bool = False
    error: str = ""
    missing: bool = False  # no live object: a sync would create it
    temporary: bool = False  # `error` is a TemporaryError's (409, 429, 5xx): a later try may pass
    # extraneous with `compare-options: IgnoreExtraneous`: listed OutOfSync (requires pruning) but left out of
    # the app's sync status, as Argo CD does; a sync with prune still deletes it (use Prune=false to keep it)
    ignore_extraneous: bool = False

    def change(self) -> ChangeEntry:
        """This comparison in the change-set vocabulary: what a sync would do to the object, with its diff."""
        return change_of(self.key, self.status, self.changed_paths, self.text, requires_pruning=self.requires_pruning,
                         missing=self.missing, error=self.error)


def change_of(key: ResourceKey, status: SyncStatus, changed: Iterable[str], text: str, *,
              requires_pruning: bool = False, missing: bool = False, error: str = "") -> ChangeEntry:
    """The change entry of one compared object (fresh, or as stored in the app's state)."""
    if error:
        action, message = Action.FAILED, error
    elif requires_pruning:
        action, message = Action.PRUNED, "requires pruning"
    elif missing:
        action, message = Action.CREATED, ""
    elif status is SyncStatus.SYNCED:
        action, message = Action.UNCHANGED, ""
    else:
        action, message = Action.CONFIGURED, ", ".join(changed)
    return ChangeEntry(key, action, message, text)


@dataclass
class Comparison:
    """All objects of one app, compared."""

    resources: list[ResourceDiff] = field(default_factory=list)

    @property
    def status(self) -> SyncStatus:
        counted = [r for r in self.resources if not r.ignore_extraneous]
        if any(r.status is SyncStatus.UNKNOWN for r in counted):
            return SyncStatus.UNKNOWN
        if any(r.status is SyncStatus.OUT_OF_SYNC for r in counted):
            return SyncStatus.OUT_OF_SYNC
        return SyncStatus.SYNCED

    def changes(self) -> ChangeSet:
        """The comparison as a change set (what `diff` returns): an entry per object, with masked diffs."""
        return ChangeSet([r.change() for r in self.resources])


def normalize(obj: Manifest, ignore: Iterable[IgnoreDifference] = ()) -> Manifest:
    """Drop what the server owns or churns (status, managedFields, ...), and the user's ignored fields."""
    out = copy.deepcopy(obj)
    out.pop("status", None)
    meta = out.setdefault("metadata", {})
    for name in VOLATILE_METADATA:
        meta.pop(name, None)
    annotations = meta.get("annotations") or {}
    for name in (constants.LAST_APPLIED, *MARK_ANNOTATIONS, "deployment.kubernetes.io/revision"):
        annotations.pop(name, None)
    labels = meta.get("labels") or {}
    for name in MARK_LABELS:  # the marks are checked on their own (tidecd.base.ownership.needs_remark)
        labels.pop(name, None)
    for holder, name in ((meta, "annotations"), (meta, "labels")):
        if not holder.get(name):
            holder.pop(name, None)
    managed = obj.get("metadata", {}).get("managedFields") or []
    return drop_ignored(out, ResourceKey.of(obj), ignore, managed)


def drop_ignored(obj: Manifest, key: ResourceKey, ignore: Iterable[IgnoreDifference],
                 managed: list[Any] | None = None) -> Manifest:
    """`obj` (changed in place, and returned) without the fields the app's ignoreDifferences rules name."""
    for rule in ignore:
        if not _rule_matches(rule, key):
            continue
        for pointer in rule.json_pointers:
            _remove_pointer(obj, pointer)
        for entry in managed or []:
            if entry.get("manager") in rule.managed_fields_managers:
                _remove_fields(obj, entry.get("fieldsV1") or {})
        if rule.jq_path_expressions:

            obj = delete_paths(obj, rule.jq_path_expressions)
    return obj


def respect_ignored(desired: Manifest, live: Manifest | None, ignore: Iterable[IgnoreDifference]) -> Manifest:
    """`RespectIgnoreDifferences=true`: the object to apply keeps the live values of ignored fields.

    As Argo CD does it: the ignored fields are dropped from the desired object, then what dropping them
    from the live object removed is copied back from the live object (lists as a whole, as a JSON merge
    patch would). Without a live object the desired object is applied unchanged.
    """
    rules = [r for r in ignore if _rule_matches(r, ResourceKey.of(desired))]
    if live is None or not rules:
        return desired
    managed = (live.get("metadata") or {}).get("managedFields") or []
    target = drop_ignored(copy.deepcopy(desired), ResourceKey.of(desired), rules, managed)
    live_kept = drop_ignored(copy.deepcopy(live), ResourceKey.of(live), rules, managed)
    restored: Manifest = _restore(target, live, live_kept)
    return restored


def _restore(target: Any, live: Any, kept: Any) -> Any:
    """Put back into `target` what `live` has and `kept` (live without the ignored fields) lost."""
    if isinstance(live, dict) and isinstance(kept, dict) and isinstance(target, dict):
        for name, value in live.items():
            if name not in kept:
                target[name] = copy.deepcopy(value)
            elif value != kept[name]:
                target[name] = _restore(target.get(name), value, kept[name])
        return target
    return copy.deepcopy(live) if live != kept else target


def _rule_matches(rule: IgnoreDifference, key: ResourceKey) -> bool:
    if rule.from_settings:  # argocd-cm: group and kind globs, "" the core group only
        return glob_match(rule.group, key.group) and glob_match(rule.kind, key.kind)
    return ((not rule.group or glob_match(rule.group, key.group)) and (not rule.kind or glob_match(rule.kind, key.kind))
            and (not rule.name or rule.name == key.name) and (not rule.namespace or rule.namespace == key.namespace))


def _remove_pointer(obj: Any, pointer: str) -> None:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.lstrip("/").split("/")] if pointer else []
    target = obj
    for part in parts[:-1]:
        if isinstance(target, dict) and part in target:
            target = target[part]
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
            target = target[int(part)]
        else:
            return
    if not parts:
        return
    last = parts[-1]
    if isinstance(target, dict):
        target.pop(last, None)
    elif isinstance(target, list) and last.isdigit() and int(last) < len(target):
        target.pop(int(last))


def _remove_fields(obj: Any, fields: dict[str, Any]) -> None:
    """Remove from `obj` the fields a managedFields `fieldsV1` set names (f: keys and k: list items)."""
    for name, sub in fields.items():
        if name.startswith("f:") and isinstance(obj, dict):
            field_name = name[2:]
            if field_name not in obj:
                continue
            if not sub or "." in sub and len(sub) == 1:
                obj.pop(field_name)
            else:
                _remove_fields(obj[field_name], sub)
        elif name.startswith("k:") and isinstance(obj, list):
            match = json.loads(name[2:])
            for item in list(obj):
                if isinstance(item, dict) and all(item.get(k) == v for k, v in match.items()):
                    if not sub or "." in sub and len(sub) == 1:
                        obj.remove(item)
                    else:
                        _remove_fields(item, sub)


def mask_secret(obj: Manifest, changed: frozenset[str] = frozenset()) -> Manifest:
    """A v1 Secret with every value masked (`secrets.redact`); values named in `changed` get a longer mask,
    so a diff still shows that they differ. Any other object is returned as it is."""
    if obj.get("kind") != "Secret" or obj.get("apiVersion") != "v1":
        return obj
    return redact(obj, changed)


def changed_paths(before: Any, after: Any, prefix: str = "") -> list[str]:
    """Dotted paths (`spec.replicas`, `spec.template.spec.containers[0].image`) where two objects differ."""
    if isinstance(before, dict) and isinstance(after, dict):
        paths: list[str] = []
        for name in sorted(set(before) | set(after)):
            sub = f"{prefix}.{name}" if prefix else str(name)
            if name not in before or name not in after:
                paths.append(sub)
            else:
                paths.extend(changed_paths(before[name], after[name], sub))
        return paths
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        paths = []
        for index, (left, right) in enumerate(zip(before, after, strict=True)):
            paths.extend(changed_paths(left, right, f"{prefix}[{index}]"))
        return paths
    return [] if before == after else [prefix or "."]


# Objects larger than this (as JSON) get no text diff: the API server refuses them anyway (about 3 MiB), and
# dumping and diffing 30 MB of YAML would cost a minute per comparison and bloat the stored state.
MAX_DIFF_OBJECT_BYTES = 2 * 1024 * 1024


def text_diff(key: ResourceKey, live: Manifest | None, predicted: Manifest | None,
              sides: tuple[str, str] = ("live", "desired")) -> str:
    """Unified YAML diff, Secret values masked (a changed value shows as a changed mask); `sides` name the
    two files (a fork's preview compares two renders: `base` and `head`)."""
    size = max(len(json.dumps(obj, separators=(",", ":"))) if obj else 0 for obj in (live, predicted))
    if size > MAX_DIFF_OBJECT_BYTES:
        return f"# diff omitted: {key} is {size:,} bytes as JSON (over {MAX_DIFF_OBJECT_BYTES:,})\n"
    changed = frozenset(changed_paths(live, predicted)) if live and predicted else frozenset()

    def dump(obj: Manifest | None, marks: frozenset[str]) -> list[str]:
        return yaml.safe_dump(mask_secret(obj, marks), sort_keys=True).splitlines(keepends=True) if obj else []

    return "".join(difflib.unified_diff(dump(live, frozenset()), dump(predicted, changed),
                                        f"{sides[0]}/{key}", f"{sides[1]}/{key}"))


def compare(key: ResourceKey, live: Manifest | None, predicted: Manifest | None,
            ignore: Iterable[IgnoreDifference] = (), sides: tuple[str, str] = ("live", "desired")) -> ResourceDiff:
    """Compare one object. `predicted` is the dry-run result (or the desired object when dry-run is skipped)."""
    ignore = list(ignore)
    if live is None:
        return ResourceDiff(key, SyncStatus.OUT_OF_SYNC, (".",),
                            text_diff(key, None, normalize(predicted or {}), sides), missing=True)
    if predicted is None:
        return ResourceDiff(key, SyncStatus.OUT_OF_SYNC, (".",), text_diff(key, normalize(live), None, sides),
                            requires_pruning=True)
    # managedFields rules are evaluated against the live object's owners, on both sides.
    with_owners = {**predicted, "metadata": {**predicted.get("metadata", {}),
                                             "managedFields": live.get("metadata", {}).get("managedFields")}}
    left, right = normalize(live, ignore), normalize(with_owners, ignore)
    paths = changed_paths(left, right)
    if not paths:
        return ResourceDiff(key, SyncStatus.SYNCED)
    return ResourceDiff(key, SyncStatus.OUT_OF_SYNC, tuple(paths), text_diff(key, left, right, sides))


def fingerprint(obj: Manifest) -> str:
    """A stable hash of a desired object: with the live object's `live_identity` it keys the comparison cache."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:20]


def live_identity(live: Manifest, *, all_managers: bool = False) -> str:
    """A digest of what the comparison of a live object depends on, for the comparison cache: the object
    as `normalize` sees it, its uid and deletion, and the field ownership the dry-run's merge follows
    (tidecd's own entries; every manager's when an ignore rule names managers). A controller's status
    write, or the deployment controller's revision annotation, changes the resourceVersion but not
    this: the last verdict still stands, and a health follow-up step makes no dry-run for it."""
    meta = live.get("metadata") or {}
    owners = [{k: v for k, v in entry.items() if k != "time"}
              for entry in meta.get("managedFields") or []
              if isinstance(entry, dict) and entry.get("subresource") != "status"
              and (all_managers or entry.get("manager") == constants.FIELD_MANAGER)]
    parts = [meta.get("uid", ""), meta.get("deletionTimestamp", ""), normalize(live), owners]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]
