"""What outlives one function call about an app: status, inventory, the operation, history.

Stored as JSON at `state/apps/<app>.json`. Everything here is plain data (no secret values ever: the diff
texts are masked before they get here). Statuses are `str` enums (`SyncStatus`, `HealthStatus`,
`OperationPhase`, `TaskPhase`), so they compare equal to their text and serialize as it.

Every write carries a generation precondition (`save(..., if_generation_match=g)` with the generation
`load` returned): of two writers that read the same state, the second one's write fails with
`PreconditionFailed`, and it must re-read and re-decide, never overwrite.

Forward compatibility of state files (the rule; readers of every tidecd version follow it):
- A field a reader does not know is never an error. At the top level of the state and of its operation it
  is kept and written back unchanged (`extra`), so an older reader does not erase what a newer writer
  recorded; in nested records (resources, task results, history) it is ignored.
- A field that is missing takes its default. A status a reader does not know reads as `Unknown` (sync and
  health) or `Error` (an operation phase); a malformed record in a list is dropped, not fatal.
- A file that cannot be read at all (truncated, not JSON, not an object) is reported as the condition
  `StateUnreadable` on that app and the state is rebuilt from the cluster and git by the next reconcile,
  which overwrites the broken file (with a precondition on its generation). Other apps are not affected.
- `quiet` is the no-op fast path's record (`tidecd.step.reconcile`): digests of what the last full comparison
  saw (the rendered revision and its inputs; the live objects' resourceVersions). Only the reconcile step
  that computed it writes it; every other writer drops it, so a stale one can never answer "nothing changed".
- The comparison cache is a typed record (`CachedComparison`); an entry in an older shape is dropped
  (it is only a cache: the next reconcile recomputes it).
- A multi-source app records each source's revision as a list, in `spec.sources` order: `revisions` of the
  state, of the operation and of each history entry (Argo CD's `status.sync.revisions`,
  `operationState.syncResult.revisions`, `history[].revisions`); single-source apps leave it empty, as
  Argo CD does. `revision` stays the list joined by "," (the one text older readers know, and what
  once-per-revision markers key on). A file written before `revisions` existed is read by splitting
  `revision` (no sha, chart version or tag contains a comma).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tidecd.base.model import Action, HealthStatus, ResourceKey, SyncStatus
from tidecd.clients.retention import history_limit
from tidecd.clients.store import ObjectStore

STATE_UNREADABLE = "StateUnreadable"


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def state_key(app: str) -> str:
    return f"state/apps/{app}.json"


class OperationPhase(enum.StrEnum):
    """Argo CD's `operationState.phase`."""

    RUNNING = "Running"
    TERMINATING = "Terminating"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    ERROR = "Error"

    @property
    def completed(self) -> bool:
        return self in (OperationPhase.SUCCEEDED, OperationPhase.FAILED, OperationPhase.ERROR)


class TaskPhase(enum.StrEnum):
    """Where one task of an operation stands (Argo CD's per-resource `hookPhase`, for resources too).

    PENDING is recorded before a hook is created, so a step killed between "create" and "record" finds the
    hook on resume (by its name and operation mark) instead of creating it twice."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    @property
    def completed(self) -> bool:
        return self in (TaskPhase.SUCCEEDED, TaskPhase.FAILED)


E = TypeVar("E", bound=enum.Enum)


REVISION_SEPARATOR = ","  # `revision` of a multi-source app: `revisions` joined, in spec.sources order


def joined(revisions: list[str] | tuple[str, ...]) -> str:
    return REVISION_SEPARATOR.join(revisions)


def split_revisions(revision: str) -> list[str]:
    """Each source's revision from a joined `revision` ([] for a single source's)."""
    return revision.split(REVISION_SEPARATOR) if REVISION_SEPARATOR in revision else []


def _revisions(data: dict[str, Any]) -> list[str]:
    """`revisions` as stored, or (files of older versions) split from `revision`; malformed reads as []."""
    value = data.get("revisions")
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    return split_revisions(str(data.get("revision") or ""))


def _enum(kind: type[E], value: Any, default: E) -> E:
    try:
        return kind(value)
    except ValueError:
        return default


@dataclass
class ResourceStatus:
    group: str
    kind: str
    namespace: str
    name: str
    status: SyncStatus
    health: HealthStatus | None = None  # None: the kind has no health (written as "")
    health_message: str = ""
    changed: list[str] = field(default_factory=list)
    requires_pruning: bool = False
    diff: str = ""

    def __post_init__(self) -> None:  # callers may pass the statuses' text
        self.status = _enum(SyncStatus, self.status, SyncStatus.UNKNOWN)
        self.health = _enum(HealthStatus, self.health, HealthStatus.UNKNOWN) if self.health else None

    @property
    def key(self) -> ResourceKey:
        return ResourceKey(self.group, self.kind, self.namespace, self.name)

    def to_json(self) -> dict[str, Any]:  # by hand: dataclasses.asdict was most of a 200-object state's save
        return {"group": self.group, "kind": self.kind, "namespace": self.namespace, "name": self.name,
                "status": self.status.value, "health": self.health.value if self.health else "",
                "health_message": self.health_message, "changed": list(self.changed),
                "requires_pruning": self.requires_pruning, "diff": self.diff}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ResourceStatus:
        known = _known(cls, data)[0]
        known["status"] = _enum(SyncStatus, known.get("status"), SyncStatus.UNKNOWN)
        health = known.get("health")
        known["health"] = _enum(HealthStatus, health, HealthStatus.UNKNOWN) if health else None
        return cls(**known)


@dataclass
class TaskResult:
    """One task of an operation: a resource applied (or pruned) or a hook run, in one sync phase."""

    key: ResourceKey
    sync_phase: str = "Sync"  # PreSync / Sync / PostSync / SyncFail (a hook runs once per phase it names)
    wave: int = 0
    hook: bool = False
    action: Action = Action.UNCHANGED
    phase: TaskPhase = TaskPhase.RUNNING
    message: str = ""
    uid: str = ""  # a created hook's uid

    @property
    def id(self) -> tuple[ResourceKey, str]:
        return self.key, self.sync_phase

    @property
    def hook_phase(self) -> str:
        """The sync phase a hook runs in (PreSync, ...; Argo CD's `hookType`); empty for resources. How far
        the task got (Argo CD's `hookPhase`) is `phase`."""
        return self.sync_phase if self.hook else ""

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key.to_dict(), "resource": str(self.key), "sync_phase": self.sync_phase,
                "wave": self.wave, "hook": self.hook, "action": self.action.value, "phase": self.phase.value,
                "hook_phase": self.hook_phase, "message": self.message, "uid": self.uid}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskResult:
        return cls(ResourceKey.from_dict(data["key"]), str(data.get("sync_phase", "Sync")),
                   int(data.get("wave", 0)), bool(data.get("hook", False)),
                   _enum(Action, data.get("action"), Action.UNCHANGED),
                   _enum(TaskPhase, data.get("phase"), TaskPhase.RUNNING), str(data.get("message", "")),
                   str(data.get("uid", "")))


@dataclass(frozen=True)
class OperationRequest:
    """What an operation was asked to do, and by whom: Argo CD's `operation.sync` and `initiatedBy`. Set when
    the operation starts and never changed after."""

    source: dict[str, Any] = field(default_factory=dict)  # path and targetRevision the revision came from
    automated: bool = False
    dry_run: bool = False
    prune: bool = False
    only: list[dict[str, str]] | None = None  # selective sync: these resources, no hooks
    rollback: bool = False
    initiated_by: str = ""
    cause: str = ""  # the drift this (self-heal) operation repairs, as `DriftCause.describe` says it
    self_heal_attempts: int = 0  # Argo CD's `autoHealAttemptsCount`: repairs of this revision, this one included
    sync_options: list[str] = field(default_factory=list)  # Argo CD's `operation.sync.syncOptions` (Replace, Force)


@dataclass
class RetryState:
    """How often an operation was retried and may be: automated retries with the app's backoff, and the
    temporary errors (a source or API blip) a running operation survives."""

    count: int = 0  # stored as `retry_count`, Argo CD's `retryCount`
    next_attempt_at: float = 0.0  # unix seconds: a failed automated operation is retried from then on (a
    #                               running one waiting out an outage tries the API server again then)
    step_errors: int = 0  # temporary errors in a row: retried, up to a bound
    outage_since: float = 0.0  # unix seconds: the API server has not answered since (0: it answers); the
    #                            operation waits it out, one continuation per retry of `count`
    retryable: bool = True  # False: it failed for a reason a retry cannot change (a permanent API error,
    #                         a refused object): automated sync does not retry it (the next revision or a
    #                         manual sync tries again)


@dataclass
class Progress:
    """Where a running operation is between its steps: the wave it is on, and the one-time stages passed."""

    wave: int | None = None
    checked: bool = False  # the dry-run of everything it will apply passed (no write happens before)
    pruned: bool = False
    # objects whose dry-run waits for their own group: refused before the first write, for a reason an
    # earlier group of the sync may lift (`sync.decide.DryRun.later`); each `ResourceKey.to_dict()`
    deferred: list[dict[str, str]] = field(default_factory=list)

    def deferred_keys(self) -> frozenset[ResourceKey]:
        """The deferred objects (an entry that does not read as a key is dropped)."""
        entries = self.deferred if isinstance(self.deferred, list) else []
        return frozenset(ResourceKey.from_dict(e) for e in entries
                         if isinstance(e, dict) and {"group", "kind", "name"} <= e.keys())


_GROUPS: dict[str, tuple[type[Any], dict[str, str]]] = {  # group field -> its type, {stored name: field name}
    "request": (OperationRequest, {f: f for f in ("source", "automated", "dry_run", "prune", "only", "rollback",
                                                  "initiated_by", "cause", "self_heal_attempts",
                                                  "sync_options")}),
    "retry": (RetryState, {"retry_count": "count", "next_attempt_at": "next_attempt_at",
                           "step_errors": "step_errors", "retryable": "retryable",
                           "outage_since": "outage_since"}),
    "progress": (Progress, {"wave": "wave", "checked": "checked", "pruned": "pruned", "deferred_checks": "deferred"}),
}


@dataclass
class Operation:
    """Argo CD's `operationState`: the running or last sync of the app, advanced one step at a time.

    Stored flat, as earlier versions stored it: the request, retry and progress groups are fields of the
    one JSON object (`retry_count`, `dry_run`, `wave`, ...)."""

    id: str
    revision: str
    phase: OperationPhase = OperationPhase.RUNNING
    message: str = ""
    started_at: str = ""
    finished_at: str = ""
    request: OperationRequest = field(default_factory=OperationRequest)
    retry: RetryState = field(default_factory=RetryState)
    progress: Progress = field(default_factory=Progress)
    step: str = ""  # what it is on or waits for, e.g. "wave 1: waiting for healthy state of ..."
    failure: str = ""  # why it failed, kept while its SyncFail hooks run
    results: list[TaskResult] = field(default_factory=list)
    revisions: list[str] = field(default_factory=list)  # multi-source: each source's (pinned by a rollback)
    extra: dict[str, Any] = field(default_factory=dict)  # fields of newer versions, written back as read

    def __post_init__(self) -> None:
        self.phase = _enum(OperationPhase, self.phase, OperationPhase.ERROR)

    @property
    def running(self) -> bool:
        return not self.phase.completed

    def only_keys(self) -> frozenset[ResourceKey] | None:
        only = self.request.only
        return None if only is None else frozenset(ResourceKey.from_dict(k) for k in only)

    def result(self, key: ResourceKey, sync_phase: str) -> TaskResult | None:
        return next((r for r in self.results if r.id == (key, sync_phase)), None)

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("results", "extra", *_GROUPS)}
        for group, (_, names) in _GROUPS.items():
            value = getattr(self, group)
            data.update({stored: getattr(value, name) for stored, name in names.items()})
        data["phase"] = self.phase.value
        data["results"] = [r.to_json() for r in self.results]
        return {**self.extra, **data}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Operation:
        grouped = {stored for _, names in _GROUPS.values() for stored in names}
        known, extra = _known(cls, {k: v for k, v in data.items() if k not in grouped})
        for name in (*_GROUPS, "extra"):
            known.pop(name, None)
            extra.pop(name, None)
        known.setdefault("id", "")
        known.setdefault("revision", "")
        known["revisions"] = _revisions(data)
        known["phase"] = _enum(OperationPhase, known.get("phase"), OperationPhase.ERROR)
        known["results"] = _records(TaskResult.from_json, data.get("results"))
        for group, (kind, names) in _GROUPS.items():
            known[group] = kind(**{name: data[stored] for stored, name in names.items() if stored in data})
        return cls(**known, extra=extra)


@dataclass
class HistoryEntry:
    id: int
    revision: str
    deployed_at: str
    result: str
    source_path: str = ""
    target_revision: str = ""
    operation_id: str = ""
    revisions: list[str] = field(default_factory=list)  # multi-source: each source's, as deployed
    cause: str = ""  # a self-heal's: who drifted what, and whether it was restored
    initiated_by: str = ""  # who started the operation (Argo CD's initiatedBy.username)
    rollback: bool = False  # the operation was a rollback (to an earlier entry's revision)
    trigger: str = ""  # what started it: "manual sync", "automated sync", "self-heal", "rollback"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "revision": self.revision, "deployed_at": self.deployed_at, "result": self.result,
                "source_path": self.source_path, "target_revision": self.target_revision,
                "operation_id": self.operation_id, "revisions": list(self.revisions), "cause": self.cause,
                "initiated_by": self.initiated_by, "rollback": self.rollback, "trigger": self.trigger}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HistoryEntry:
        known = _known(cls, data)[0]
        known["revisions"] = _revisions(data)
        return cls(**known)


@dataclass(frozen=True)
class DriftCause:
    """Who changed an object of the app outside git, from the cluster's audit log (`tidecd.usecases.audit`):
    the comparison says *what* drifted, only the audit event says *who*. Kept in the state, so the drift
    condition, the dashboard, the history entry of the repair and the notification all name the same
    person; `restored` is when a self-heal put it back ("" while it is not)."""

    key: ResourceKey
    user: str
    user_agent: str = ""
    at: str = ""  # the audit event's stageTimestamp, ISO 8601 UTC
    verb: str = ""  # create, update, patch, delete
    paths: tuple[str, ...] = ()  # the fields the comparison found changed
    restored: str = ""

    def describe(self) -> str:
        """E.g. "Deployment guestbook/frontend: spec.replicas changed by alice@example.com via kubectl at
        10:42:03"; the agent's first word only (kubectl, not its version and platform)."""
        where = f"{self.key.namespace}/{self.key.name}" if self.key.namespace else self.key.name
        what = ("deleted" if self.verb == "delete" else "created" if self.verb == "create" else
                (", ".join(self.paths[:3]) + (f" and {len(self.paths) - 3} more" if len(self.paths) > 3 else "")
                 + " changed") if self.paths else "changed")
        agent = self.user_agent.split("/", 1)[0].split(" ", 1)[0].strip()
        clock = self.at[11:19] if len(self.at) >= 19 else self.at
        text = f"{self.key.kind} {where}: {what} by {self.user or 'an unknown user'}"
        return text + (f" via {agent}" if agent else "") + (f" at {clock}" if clock else "")

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key.to_dict(), "user": self.user, "user_agent": self.user_agent, "at": self.at,
                "verb": self.verb, "paths": list(self.paths), "restored": self.restored}

    @classmethod
    def from_json(cls, data: Any) -> DriftCause:
        if not isinstance(data, dict):
            raise TypeError("not an object")
        return cls(ResourceKey.from_dict(data["key"]), str(data.get("user", "")), str(data.get("user_agent", "")),
                   str(data.get("at", "")), str(data.get("verb", "")),
                   tuple(str(p) for p in data.get("paths") or ()), str(data.get("restored", "")))


@dataclass(frozen=True)
class CachedComparison:
    """What the last comparison of one object found, valid while its desired fingerprint and the live
    object's identity (`diff.live_identity`: not its status or resourceVersion) hold."""

    fingerprint: str
    live: str
    status: SyncStatus
    changed: tuple[str, ...] = ()
    text: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "live": self.live,
                "status": self.status.value, "changed": list(self.changed), "text": self.text}

    @classmethod
    def from_json(cls, data: Any) -> CachedComparison:
        if not isinstance(data, dict):
            raise TypeError("not an object")  # e.g. the positional list of older versions: dropped
        # a record of before the live identity keyed it by resourceVersion: it never matches, so one dry-run
        return cls(str(data["fingerprint"]), str(data.get("live", "")), SyncStatus(data["status"]),
                   tuple(str(p) for p in data.get("changed", ())), str(data.get("text", "")))


@dataclass
class Automation:
    """Argo CD's rules for automated sync that outlive a step: what it already applied, and a rollback's hold."""

    synced: str = ""  # stored as `auto_synced`: "<sha>:<source hash>" automated sync already applied
    disabled: bool = False  # stored as `automated_disabled`: set by a rollback
    # the last drift the audit log attributed (`tidecd.usecases.audit`): what a self-heal repairs, and what
    # the drift condition names without one
    drift: DriftCause | None = None


@dataclass
class StepMemo:
    """What the step remembers between triggers so it need not do again what it did: when it last compared,
    its comparison cache, and the no-op fast path's record (`tidecd.step.quiet`)."""

    reconciled_at: str = ""
    comparisons: dict[str, CachedComparison] = field(default_factory=dict)  # stored as `comparison_cache`
    quiet: dict[str, str] = field(default_factory=dict)
    indexed: str = ""  # digest of the inventory the resource index holds (`tidecd.state.index`)


@dataclass(frozen=True)
class Loaded:
    """Not stored: how `load` found the file (the bytes it read, and whether it was unreadable and rebuilt)."""

    raw: bytes = b""
    rebuilt: bool = False


@dataclass
class AppState:
    app: str
    sync_status: SyncStatus = SyncStatus.UNKNOWN
    revision: str = ""
    revisions: list[str] = field(default_factory=list)  # multi-source: each source's revision, in order
    health: HealthStatus = HealthStatus.UNKNOWN
    health_message: str = ""
    resources: list[ResourceStatus] = field(default_factory=list)
    conditions: list[dict[str, str]] = field(default_factory=list)
    inventory: list[dict[str, Any]] = field(default_factory=list)
    operation: Operation | None = None
    history: list[HistoryEntry] = field(default_factory=list)
    automation: Automation = field(default_factory=lambda: Automation())
    memo: StepMemo = field(default_factory=lambda: StepMemo())
    extra: dict[str, Any] = field(default_factory=dict)  # fields of newer versions, written back as read
    origin: Loaded = field(default_factory=lambda: Loaded(), compare=False, repr=False)  # not stored

    def __post_init__(self) -> None:  # callers may pass the statuses' text
        self.sync_status = _enum(SyncStatus, self.sync_status, SyncStatus.UNKNOWN)
        self.health = _enum(HealthStatus, self.health, HealthStatus.UNKNOWN)

    def inventory_keys(self) -> list[tuple[ResourceKey, int]]:
        return [(ResourceKey.from_dict(item), int(item.get("wave", 0))) for item in self.inventory]

    def set_inventory(self, items: list[tuple[ResourceKey, int]]) -> None:
        self.inventory = [{**key.to_dict(), "wave": wave} for key, wave in sorted(items)]

    def add_history(self, revision: str, result: str, source_path: str, target_revision: str,
                    operation_id: str = "", revisions: list[str] | None = None, cause: str = "",
                    initiated_by: str = "", *, rollback: bool = False, trigger: str = "") -> HistoryEntry:
        next_id = (self.history[-1].id + 1) if self.history else 1
        entry = HistoryEntry(next_id, revision, now_iso(), result, source_path, target_revision, operation_id,
                             list(revisions) if revisions is not None else split_revisions(revision), cause,
                             initiated_by, rollback, trigger)

        self.history = [*self.history, entry][-history_limit():]  # TIDECD_HISTORY_LIMIT (default 10)
        return entry

    @property
    def deployed(self) -> HistoryEntry | None:
        """The entry of what is deployed: the last operation that succeeded (git's target may differ)."""
        return next((h for h in reversed(self.history) if h.result == "Succeeded"), None)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "app": self.app, "sync_status": self.sync_status.value, "revision": self.revision,
            "revisions": self.revisions, "health": self.health.value, "health_message": self.health_message,
            "resources": [r.to_json() for r in self.resources], "conditions": self.conditions,
            "inventory": self.inventory, "operation": self.operation.to_json() if self.operation else None,
            "history": [h.to_json() for h in self.history], "auto_synced": self.automation.synced,
            "automated_disabled": self.automation.disabled, "reconciled_at": self.memo.reconciled_at,
            "comparison_cache": {k: v.to_json() for k, v in self.memo.comparisons.items()},
            "quiet": self.memo.quiet, "indexed": self.memo.indexed,
            "drift": self.automation.drift.to_json() if self.automation.drift else None,
        }
        return {**self.extra, **data}

    def summary(self) -> dict[str, Any]:
        """The status without cache internals or per-object diffs (api list answers, CLI tables)."""
        data = self.to_json()
        data.pop("comparison_cache", None)
        data.pop("quiet", None)
        data.pop("indexed", None)
        for res in data["resources"]:
            res.pop("diff", None)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AppState:
        grouped = ("auto_synced", "automated_disabled", "reconciled_at", "comparison_cache", "quiet", "indexed",
                   "drift")
        known, extra = _known(cls, {k: v for k, v in data.items() if k not in grouped})
        for name in ("extra", "automation", "memo", "origin"):
            known.pop(name, None)
        quiet = data.get("quiet")
        known["app"] = str(known.get("app", ""))
        known["sync_status"] = _enum(SyncStatus, known.get("sync_status"), SyncStatus.UNKNOWN)
        known["health"] = _enum(HealthStatus, known.get("health"), HealthStatus.UNKNOWN)
        known["revision"] = str(known.get("revision") or "")
        known["revisions"] = _revisions(data)
        known["resources"] = _records(ResourceStatus.from_json, data.get("resources"))
        known["history"] = _records(HistoryEntry.from_json, data.get("history"))
        op = data.get("operation")
        known["operation"] = _one(Operation.from_json, op) if isinstance(op, dict) else None
        cache = data.get("comparison_cache")
        known["memo"] = StepMemo(
            reconciled_at=str(data.get("reconciled_at") or ""),
            comparisons={str(k): entry for k, v in (cache.items() if isinstance(cache, dict) else ())
                         if (entry := _one(CachedComparison.from_json, v)) is not None},
            quiet={str(k): str(v) for k, v in quiet.items()} if isinstance(quiet, dict) else {},
            indexed=str(data.get("indexed") or ""))
        known["automation"] = Automation(synced=str(data.get("auto_synced") or ""),
                                         disabled=bool(data.get("automated_disabled", False)),
                                         drift=_one(DriftCause.from_json, data["drift"]) if data.get("drift") else None)
        return cls(**known, extra=extra)


T = TypeVar("T")


def _known(cls: type[Any], data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a record into the fields `cls` knows and the rest."""
    names = {f.name for f in dataclasses.fields(cls)}
    return ({k: v for k, v in data.items() if k in names}, {k: v for k, v in data.items() if k not in names})


def _one(build: Callable[[Any], T], value: Any) -> T | None:
    try:
        return build(value)
    except (TypeError, ValueError, KeyError, AttributeError):
        return None


def _records(build: Any, values: Any) -> list[Any]:
    """Records of a list; a malformed one is dropped (forward-compat rule), not fatal."""
    if not isinstance(values, list):
        return []
    return [r for v in values if isinstance(v, dict) and (r := _one(build, v)) is not None]


def load(store: ObjectStore, app: str) -> tuple[AppState, int]:
    """The app's state and its store generation (0 when it has none yet).

    An unreadable file gives a fresh state carrying the condition `StateUnreadable` and the broken file's
    generation, so the next save (with that precondition) replaces it."""
    blob = store.read(state_key(app))
    if blob is None:
        return AppState(app=app), 0
    try:
        data = json.loads(blob.data)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        state = AppState.from_json(data)
    except (ValueError, TypeError, UnicodeDecodeError) as exc:
        reason = str(exc).split("\n")[0][:120]
        condition = {"type": STATE_UNREADABLE, "at": now_iso(),
                     "message": f"{state_key(app)} could not be read ({reason}); rebuilt from the cluster and git"}
        return AppState(app=app, conditions=[condition], origin=Loaded(rebuilt=True)), blob.generation
    state.app = app
    state.origin = Loaded(raw=blob.data)
    return state, blob.generation


def encode(state: AppState) -> bytes:
    """The state file's bytes."""
    return encode_json(state.to_json())


def encode_json(doc: dict[str, Any]) -> bytes:
    """Compact: `indent` makes `json` fall back from its C encoder to the pure-Python one, which was most of
    a 200-object app's state save (cProfile: 0.25 s of a 1.3 s step at load 11)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def save(store: ObjectStore, state: AppState, *, if_generation_match: int | None = None,
         keep_quiet: bool = False) -> int:
    """Write the state. Its `quiet` record (what the no-op fast path compares) is dropped unless the
    caller recomputed it (`keep_quiet`, the reconcile step): any other writer's change invalidates it."""
    if not keep_quiet:
        state.memo.quiet = {}
    data = encode(state)
    generation = store.write(state_key(state.app), data, if_generation_match=if_generation_match)
    state.origin = Loaded(raw=data)
    return generation
