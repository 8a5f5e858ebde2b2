"""What outlives one function call about an app: status, inventory, last operation, history.

Stored as JSON at `state/apps/<app>.json`. Everything here is plain data (no secret values ever: the diff
texts are masked before they get here).
"""

from __future__ import annotations

import datetime
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from tidecd.constants import HISTORY_LIMIT
from tidecd.model import ResourceKey
from tidecd.store import ObjectStore


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def state_key(app: str) -> str:
    return f"state/apps/{app}.json"


@dataclass
class ResourceStatus:
    group: str
    kind: str
    namespace: str
    name: str
    status: str  # Synced / OutOfSync / Unknown
    health: str = ""
    health_message: str = ""
    changed: list[str] = field(default_factory=list)
    requires_pruning: bool = False
    diff: str = ""

    @property
    def key(self) -> ResourceKey:
        return ResourceKey(self.group, self.kind, self.namespace, self.name)


@dataclass
class Operation:
    phase: str  # Running / Succeeded / Failed
    message: str
    revision: str
    started_at: str
    finished_at: str = ""
    automated: bool = False
    dry_run: bool = False
    prune: bool = False
    resources: list[dict[str, Any]] = field(default_factory=list)
    retry_count: int = 0
    next_attempt_at: float = 0.0


@dataclass
class HistoryEntry:
    id: int
    revision: str
    deployed_at: str
    result: str
    source_path: str = ""
    target_revision: str = ""


@dataclass
class AppState:
    app: str
    sync_status: str = "Unknown"
    revision: str = ""
    health: str = "Unknown"
    health_message: str = ""
    resources: list[ResourceStatus] = field(default_factory=list)
    conditions: list[dict[str, str]] = field(default_factory=list)
    inventory: list[dict[str, Any]] = field(default_factory=list)
    operation: Operation | None = None
    history: list[HistoryEntry] = field(default_factory=list)
    auto_synced: str = ""  # "<sha>:<source hash>" automated sync already applied (Argo CD's rule)
    automated_disabled: bool = False  # set by rollback
    reconciled_at: str = ""
    comparison_cache: dict[str, list[Any]] = field(default_factory=dict)

    def inventory_keys(self) -> list[tuple[ResourceKey, int]]:
        return [(ResourceKey.from_dict(item), int(item.get("wave", 0))) for item in self.inventory]

    def set_inventory(self, items: list[tuple[ResourceKey, int]]) -> None:
        self.inventory = [{**key.to_dict(), "wave": wave} for key, wave in items]

    def add_history(self, revision: str, result: str, source_path: str, target_revision: str) -> HistoryEntry:
        next_id = (self.history[-1].id + 1) if self.history else 1
        entry = HistoryEntry(next_id, revision, now_iso(), result, source_path, target_revision)
        self.history = [*self.history, entry][-HISTORY_LIMIT:]
        return entry

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> dict[str, Any]:
        """The status without cache internals or per-object diffs (api list answers, CLI tables)."""
        data = self.to_json()
        data.pop("comparison_cache", None)
        for res in data["resources"]:
            res.pop("diff", None)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AppState:
        data = dict(data)
        data["resources"] = [ResourceStatus(**r) for r in data.get("resources", [])]
        data["history"] = [HistoryEntry(**h) for h in data.get("history", [])]
        if data.get("operation"):
            data["operation"] = Operation(**data["operation"])
        return cls(**data)


def load(store: ObjectStore, app: str) -> tuple[AppState, int]:
    """The app's state and its store generation (0 when it has none yet)."""
    blob = store.read(state_key(app))
    if blob is None:
        return AppState(app=app), 0
    return AppState.from_json(json.loads(blob.data)), blob.generation


def save(store: ObjectStore, state: AppState, *, if_generation_match: int | None = None) -> int:
    data = json.dumps(state.to_json(), indent=1, sort_keys=True).encode()
    return store.write(state_key(state.app), data, if_generation_match=if_generation_match)
