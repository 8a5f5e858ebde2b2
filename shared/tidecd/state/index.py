"""Which app manages an object, and who last wrote it: the two store records the audit webhook needs.

**The resource index** answers an audit event's "which app owns `apps/deployments guestbook/frontend`?"
without loading any app's state. It is one empty marker object per (object, app):

    index/resources/<sha256(namespace)[:16]>/<sha256(group, namespace, name)[:32]>/<app>

written by the reconcile step when the app's inventory changes (`update`), and listed by the audit use case
one namespace at a time (`namespace_owners`): a batch of any number of events costs one list call per
namespace it touches, not one per object. One object per pair, so apps never contend on a shared
document, and an object that two apps in two clusters both manage names both (a refresh of the other is
harmless). The kind is not part of the key: an audit event names the resource's plural (`deployments`),
not its kind, and group, namespace and name narrow it enough. The app's state records the digest of the
inventory the index holds (`indexed`), so a step that changed nothing writes nothing here.

**The audit record** `audit/<app>.json` keeps the latest writes of the app's objects the audit webhook
saw (at most `MAX_WRITES`, newest last): the step reads it only when it finds the app OutOfSync, to name
who drifted it (`step.record.attributed`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidecd.base.errors import PermanentError
from tidecd.base.model import ResourceKey
from tidecd.clients.store import ObjectStore, PreconditionFailed, read_json, update_json, write_json

INDEX = "index/resources/"
AUDIT = "audit/"
MAX_WRITES = 32  # writes remembered per app: a burst keeps the newest
MARK = b"{}"
LAYOUT = "2\n"  # in the digest: an index written in an older layout is written again


def digest(keys: Iterable[ResourceKey]) -> str:
    """What `AppState.indexed` records: the inventory the index holds."""
    text = LAYOUT + "\n".join(sorted(f"{k.group}\0{k.namespace}\0{k.name}" for k in keys))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def held(raw: bytes) -> frozenset[ResourceKey]:
    """The inventory the index holds for an app, by its state file's bytes (`indexed` is the digest of its
    `inventory`); nothing when the file says otherwise (a state of before the index, or none)."""
    try:
        doc = json.loads(raw) if raw else {}
        keys = frozenset(ResourceKey.from_dict(item) for item in doc.get("inventory") or ())
    except (ValueError, TypeError, KeyError, AttributeError):
        return frozenset()
    return keys if doc.get("indexed") == digest(keys) else frozenset()


def namespace_folder(namespace: str) -> str:
    """The index folder of one namespace ("" for cluster-scoped objects); hashes need no escaping in a key."""
    return INDEX + hashlib.sha256(namespace.encode()).hexdigest()[:16] + "/"


def object_id(group: str, namespace: str, name: str) -> str:
    return hashlib.sha256(f"{group}\0{namespace}\0{name}".encode()).hexdigest()[:32]


def folder(group: str, namespace: str, name: str) -> str:
    """The index folder of one object."""
    return namespace_folder(namespace) + object_id(group, namespace, name) + "/"


def update(store: ObjectStore, app: str, added: Iterable[ResourceKey], removed: Iterable[ResourceKey]) -> None:
    """Mark `added` as the app's and drop `removed` (absent or present already is fine)."""
    for key in sorted(set(added)):
        with contextlib.suppress(PreconditionFailed):  # marked already
            store.write(folder(key.group, key.namespace, key.name) + app, MARK, if_generation_match=0)
    for key in sorted(set(removed)):
        store.delete(folder(key.group, key.namespace, key.name) + app)


def namespace_owners(store: ObjectStore, namespace: str) -> dict[str, list[str]]:
    """{object_id: apps} of every indexed object of the namespace (one list call)."""
    prefix = namespace_folder(namespace)
    found: dict[str, list[str]] = {}
    for key in store.list(prefix):
        obj, _, app = key[len(prefix):].partition("/")
        if obj and app and "/" not in app:
            found.setdefault(obj, []).append(app)
    return found


def owners(store: ObjectStore, group: str, namespace: str, name: str) -> list[str]:
    """The apps whose inventory holds the object (one list call)."""
    prefix = folder(group, namespace, name)
    return [key[len(prefix):] for key in store.list(prefix) if "/" not in key[len(prefix):]]


# --- who wrote what ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Write:
    """One write of an object, as its audit event tells it."""

    group: str
    resource: str  # the plural the API path names (`deployments`)
    namespace: str
    name: str
    verb: str
    user: str
    user_agent: str
    at: str  # the event's stageTimestamp, ISO 8601 UTC
    audit_id: str = ""

    def to_json(self) -> dict[str, str]:
        return {"group": self.group, "resource": self.resource, "namespace": self.namespace, "name": self.name,
                "verb": self.verb, "user": self.user, "userAgent": self.user_agent, "at": self.at,
                "auditID": self.audit_id}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Write:
        return cls(*(str(data.get(f, "")) for f in ("group", "resource", "namespace", "name", "verb", "user",
                                                       "userAgent", "at", "auditID")))

    def names(self, key: ResourceKey) -> bool:
        """Is this a write of `key`? The kind is matched against the plural as the API server forms it."""
        return (key.group, key.namespace, key.name) == (self.group, self.namespace, self.name) and \
            self.resource in plurals(key.kind)


def plurals(kind: str) -> set[str]:
    """The plural names the API server may serve `kind` under (`Ingress` → `ingresses`, `Policy` → `policies`)."""
    lower = kind.lower()
    found = {lower, lower + "s", lower + "es"}
    if lower.endswith("y"):
        found.add(lower[:-1] + "ies")
    return found


def remember(store: ObjectStore, app: str, writes: Sequence[Write]) -> None:
    """Add writes to the app's audit record (a redelivered event, same audit id, is kept once)."""

    def merged(current: Any) -> Any:
        kept = [w for w in (current or {}).get("writes", []) if isinstance(w, dict)] if isinstance(current, dict) \
            else []
        seen = {w.get("auditID") for w in kept}
        kept += [w.to_json() for w in writes if not w.audit_id or w.audit_id not in seen]
        kept.sort(key=lambda w: str(w.get("at", "")))
        return {"writes": kept[-MAX_WRITES:]}

    key = AUDIT + app + ".json"
    try:
        update_json(store, key, merged)
    except PermanentError:  # unreadable (not JSON): only a record of hints, start it again
        write_json(store, key, merged(None))


def writes(store: ObjectStore, app: str) -> list[Write]:
    """The app's remembered writes, oldest first ([] when none, or the record is unreadable)."""
    try:
        found = read_json(store, AUDIT + app + ".json")
    except PermanentError:
        return []
    doc = found[0] if found is not None else None
    items = doc.get("writes") if isinstance(doc, dict) else None
    return [Write.from_json(w) for w in items if isinstance(w, dict)] if isinstance(items, list) else []
