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
    """One object in a change set: what diff, sync, prune and dry-run did (or would do) to it.

    Its text form, `apps/Deployment ns/name configured: message`, is the one format the CLI prints and the
    logs write (a line per object, starting with the `ResourceKey` text); `to_dict` is the api's form.
    `diff` is the masked YAML diff (secret values never appear), `wave` and `phase` where a sync put it.
    """

    key: ResourceKey
    action: Action
    message: str = ""
    diff: str = ""
    wave: int = 0
    phase: str = ""  # the sync phase (PreSync, Sync, PostSync, SyncFail); "" outside a sync
    temporary: bool = False  # a failure a later try may not meet (409, 429, 5xx); not part of the api's form

    def __str__(self) -> str:
        text = f"{self.key} {self.action.value}"
        return f"{text}: {self.message}" if self.message else text

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key.to_dict(), "resource": str(self.key), "action": self.action.value,
                "message": self.message, "diff": self.diff, "wave": self.wave, "phase": self.phase}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChangeEntry:
        """The inverse of `to_dict` (what the CLI reads back from the api); unknown fields are ignored."""
        return cls(ResourceKey.from_dict(data["key"]), Action(data["action"]), str(data.get("message") or ""),
                   str(data.get("diff") or ""), int(data.get("wave") or 0), str(data.get("phase") or ""))


@dataclass
class ChangeSet:
    """Result of a diff, apply, prune or dry-run; partial when `failed` is true."""

    entries: list[ChangeEntry] = field(default_factory=list)

    def add(self, entry: ChangeEntry) -> None:
        self.entries.append(entry)

    @property
    def failed(self) -> bool:
        return any(e.action is Action.FAILED for e in self.entries)

    def changed(self) -> list[ChangeEntry]:
        """The entries that are not `unchanged`: what a log or a summary shows."""
        return [e for e in self.entries if e.action is not Action.UNCHANGED]

    def lines(self, *, diffs: bool = False) -> list[str]:
        """The text form, a line per object (each followed by its diff when `diffs`)."""
        out: list[str] = []
        for entry in self.entries:
            out.append(str(entry))
            if diffs and entry.diff:
                out.append(entry.diff.rstrip("\n"))
        return out

    def to_dicts(self) -> list[dict[str, Any]]:
        return [e.to_dict() for e in self.entries]

    @classmethod
    def from_dicts(cls, items: list[dict[str, Any]]) -> ChangeSet:
        return cls([ChangeEntry.from_dict(item) for item in items])

    def __str__(self) -> str:
        return "\n".join(self.lines())


@dataclass(frozen=True)
class Response:
    """The HTTP-shaped answer of a use case (api, webhook): a status and a JSON body; the function entry
    points (functions/main.py) and the CLI turn it into what they send or print."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)
