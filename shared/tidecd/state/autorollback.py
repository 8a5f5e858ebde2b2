"""Automatic rollback's memory per app (`state/autorollback/<app>.json`): since when the newest revision has
been Degraded (the wait is this recorded time plus a continuation, never a sleep), and which revision it
already rolled back, so one revision is never rolled back twice. Written by the reconcile step under the
app's lease (`step.autorollback`); the poll reads it to open the rollback's revert (`usecases.revert`).

Plain frozen data, apart from the app's state so older readers of that state never see it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tidecd.base.errors import PermanentError
from tidecd.clients.store import ObjectStore, read_json, write_json

PREFIX = "state/autorollback/"


def key(app: str) -> str:
    return f"{PREFIX}{app}.json"


@dataclass(frozen=True)
class AutoRollback:
    app: str
    watching: str = ""  # the revision whose health is watched
    degraded_since: float = 0.0  # unix seconds it was first seen Degraded (0: it is not)
    rolled_back: str = ""  # the revision rolled back: never again for it
    to_revision: str = ""  # the revision it went back to
    history_id: int = 0  # ... the history entry of it
    operation_id: str = ""  # the rollback operation
    at: str = ""  # when it rolled back
    reason: str = ""  # why ("Degraded for 5m0s", "PostSync hook failed")
    revert: str = ""  # the revert it asks for: "pr", "push" or "" (none)
    revert_outcome: str = ""  # "" until the poll tried: "opened" or why it could not

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AutoRollback:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def load(store: ObjectStore, app: str) -> tuple[AutoRollback, int]:
    """The app's record and its generation (an empty record, 0 when it has none; unreadable reads as empty)."""
    try:
        found = read_json(store, key(app))
    except PermanentError:
        blob = store.read(key(app))
        return AutoRollback(app), blob.generation if blob else 0
    if not found or not isinstance(found[0], dict):
        return AutoRollback(app), found[1] if found else 0
    try:
        return AutoRollback.from_json({**found[0], "app": app}), found[1]
    except (TypeError, ValueError):
        return AutoRollback(app), found[1]


def save(store: ObjectStore, record: AutoRollback, *, if_generation_match: int | None) -> int:
    return write_json(store, key(record.app), record.to_json(), if_generation_match=if_generation_match)


def apps(store: ObjectStore) -> list[str]:
    """Every app with a record."""
    return sorted(k.removeprefix(PREFIX).removesuffix(".json") for k in store.list(PREFIX) if k.endswith(".json"))
