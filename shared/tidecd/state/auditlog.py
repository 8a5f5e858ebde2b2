"""The audit log: who did what, and who was refused, one object per entry, never rewritten.

Every action the api, the dashboard or the CLI's `--server` calls ask for (a sync, a rollback, a
termination, a refresh, a project token issued or revoked) and every refusal by RBAC is one entry
`auditlog/<UTC time>-<random>.json`, written create-only (`if_generation_match=0`): an entry is never
changed or replaced, and keys sort by time, so a page is a listing from a key on. (`audit/<app>.json` is
another thing: the kube-apiserver's audit record of an app's objects, `tidecd.state.index`.)

An entry holds names only (subject, groups, a token's id, the resource, action and object), never a
token, a password or a request body.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from tidecd.base.principal import Principal
from tidecd.clients.store import ObjectStore

PREFIX = "auditlog/"
MAX_PAGE = 500


@dataclass(frozen=True)
class Entry:
    at: str  # ISO 8601 UTC
    subject: str
    action: str  # Argo CD's vocabulary: "sync", "get", "create-token", ...
    resource: str  # "applications", "projects", ...
    object: str  # "project/app", "project"
    allowed: bool
    via: str = ""
    token_id: str = ""
    groups: tuple[str, ...] = ()
    detail: str = ""  # what happened or why it was refused (an operation id, "permission denied")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["groups"] = list(self.groups)
        return data


def record(store: ObjectStore, principal: Principal, resource: str, action: str, obj: str, *, allowed: bool,
           detail: str = "", now: datetime | None = None) -> Entry:
    """Append one entry (create-only); returns it."""
    moment = now or datetime.now(UTC)
    entry = Entry(at=moment.isoformat().replace("+00:00", "Z"), subject=principal.subject, action=action,
                  resource=resource, object=obj, allowed=allowed, via=principal.via, token_id=principal.token_id,
                  groups=principal.groups[:50], detail=detail[:500])
    key = f"{PREFIX}{moment.strftime('%Y%m%dT%H%M%S.%fZ')}-{secrets.token_hex(4)}.json"
    store.write(key, json.dumps(entry.to_json(), sort_keys=True).encode(), if_generation_match=0)
    return entry


def page(store: ObjectStore, *, after: str = "", limit: int = 100) -> tuple[list[dict[str, Any]], str]:
    """Entries oldest first from after the key `after` (a page token), at most `limit`; and the next token
    ("" at the end)."""
    limit = max(1, min(limit, MAX_PAGE))
    keys = sorted(k for k in store.list(PREFIX) if k > (PREFIX + after if after else ""))
    chosen = keys[:limit]
    entries = []
    for key in chosen:
        blob = store.read(key)
        if blob is not None:
            entries.append({"key": key.removeprefix(PREFIX), **json.loads(blob.data)})
    following = chosen[-1].removeprefix(PREFIX) if len(keys) > limit else ""
    return entries, following
