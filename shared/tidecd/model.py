"""Plain data shared by every stage: object keys, statuses and change sets.

Manifests themselves stay plain JSON-shaped dicts (`Manifest`), as the API server speaks them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

Manifest = dict[str, Any]


@dataclass(frozen=True, order=True)
class ResourceKey:
    """Identity of one Kubernetes object; its text form starts every log line and error about it."""

    group: str
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, obj: Manifest) -> ResourceKey:
        api_version = str(obj.get("apiVersion", ""))
        group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
        meta = obj.get("metadata") or {}
        return cls(group, str(obj.get("kind", "")), str(meta.get("namespace") or ""), str(meta.get("name", "")))

    @property
    def group_kind(self) -> str:
        return f"{self.group}/{self.kind}" if self.group else self.kind

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.group_kind} {where}"

    def tracking_id(self, app: str) -> str:
        """Argo CD's annotation-tracking id: `<app>:<group>/<kind>:<namespace>/<name>`."""
        return f"{app}:{self.group}/{self.kind}:{self.namespace}/{self.name}"

    def to_dict(self) -> dict[str, str]:
        return {"group": self.group, "kind": self.kind, "namespace": self.namespace, "name": self.name}

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> ResourceKey:
        return cls(data["group"], data["kind"], data.get("namespace", ""), data["name"])


class SyncStatus(enum.StrEnum):
    SYNCED = "Synced"
    OUT_OF_SYNC = "OutOfSync"
    UNKNOWN = "Unknown"


class HealthStatus(enum.StrEnum):
    """Health of an object or app. Ordered as Argo CD rolls them up: later is worse."""

    HEALTHY = "Healthy"
    SUSPENDED = "Suspended"
    PROGRESSING = "Progressing"
    MISSING = "Missing"
    DEGRADED = "Degraded"
    UNKNOWN = "Unknown"

    def is_worse(self, other: HealthStatus) -> bool:
        order = list(HealthStatus)
        return order.index(self) > order.index(other)


@dataclass(frozen=True)
class HealthResult:
    status: HealthStatus
    message: str = ""


class Action(enum.StrEnum):
    """What a sync did, or would do, to one object."""

    CREATED = "created"
    CONFIGURED = "configured"
    UNCHANGED = "unchanged"
    PRUNED = "pruned"
    PRUNE_SKIPPED = "prune-skipped"
    SKIPPED = "skipped"
    FAILED = "failed"


@dataclass(frozen=True)
class ChangeEntry:
    """One line of a change set: `apps/Deployment ns/name configured`."""

    key: ResourceKey
    action: Action
    message: str = ""
    diff: str = ""

    def __str__(self) -> str:
        text = f"{self.key} {self.action.value}"
        return f"{text}: {self.message}" if self.message else text

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key.to_dict(), "resource": str(self.key), "action": self.action.value,
                "message": self.message}


@dataclass
class ChangeSet:
    """Result of an apply, prune or dry-run; partial when `failed` is true."""

    entries: list[ChangeEntry] = field(default_factory=list)

    def add(self, entry: ChangeEntry) -> None:
        self.entries.append(entry)

    @property
    def failed(self) -> bool:
        return any(e.action is Action.FAILED for e in self.entries)

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.entries)
