"""The reconcile use case: ONE step of work on one app, then return.

Each call observes (source → render → live → diff → health), decides the next step of the app's operation
with the pure `sync.decide`, executes it (cluster calls only) and records the result in the app's state,
every write with a generation precondition. It repeats that while the steps need no waiting; a wait is a
short health poll (at most `budget` seconds in all), after which the call records what it waits on and
returns `continue_after`: the caller schedules the next call. No call ever blocks for a whole sync.

Two calls for the same app at once must not both act: the first takes the app's lease (60 s, renewed while
the step works, taken over once expired), the second returns "already running" without touching the
cluster. A lost race on the state (someone wrote since we read) re-reads and re-decides.

Called by the reconcile function (Pub/Sub in the cloud, a direct call locally), the api and the CLI.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import threading
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import structlog

from tidecd import health
from tidecd.base import constants, ownership
from tidecd.base.clock import SYSTEM, Clock
from tidecd.base.errors import (
    ClusterUnavailable,
    PermanentError,
    ProjectViolation,
    TemporaryError,
)
from tidecd.base.model import (
    Action,
    ChangeEntry,
    ChangeSet,
    HealthResult,
    HealthStatus,
    Manifest,
    ResourceKey,
    SyncStatus,
)
from tidecd.clients.cluster import ApiError, KubeCluster, UnknownKind, managed_selector
from tidecd.clients.store import LEASE_TTL, LeaseKeeper, PreconditionFailed, acquire_lease
from tidecd.config.load import Application, AppProject
from tidecd.diff import Comparison, ResourceDiff, compare, fingerprint, live_identity, respect_ignored
from tidecd.generated import appofapps
from tidecd.generated import records as generated
from tidecd.generated.appofapps import ChildCluster
from tidecd.images import state as images_state
from tidecd.notify import deliver as notify
from tidecd.project import windows as syncwindows
from tidecd.runtime import Runtime
from tidecd.source import charts
from tidecd.state import app as app_state
from tidecd.state.app import CachedComparison, Operation, OperationPhase, TaskPhase, TaskResult
from tidecd.step.desired import (
    place,
    revisions_of,
    runtime_render,
    spec_hash,
)
from tidecd.step.operation import new_operation, policy_of, sync_window
from tidecd.sync import decide as decision
from tidecd.sync import options as syncoptions
from tidecd.sync import plan
from tidecd.sync.apply import apply_task, conflict, explain, owned_by, with_ownership
from tidecd.sync.hooks import create_hook, delete_earlier_copies, dry_run_hook
from tidecd.sync.prune import prune

log = structlog.get_logger("tidecd.step.reconcile")
ALREADY_RUNNING = "already running"
DRY_RUN_CONCURRENCY = 8
APPLY_CONCURRENCY = 8
POLL_INTERVAL = 0.5  # between health checks inside one step's budget
RECHECK_AFTER = 3.0  # the next step of an operation that waits, once this step's budget is spent
RACE_ATTEMPTS = 3
MAX_STEP_ERRORS = 3  # temporary errors in a row a running operation survives after its first write
HEALTH_FOLLOW_SECONDS = 600.0  # after a sync, refresh a Progressing app this long ...
HEALTH_RECHECK_AFTER = 5.0  # ... this often


@dataclass(frozen=True)
class Outcome:
    """What one reconcile call did."""

    app: str
    state: app_state.AppState | None
    skipped: str = ""  # non-empty: did nothing (e.g. "already running")
    continue_after: float | None = None  # seconds until this app wants its next step; None: nothing pending
    changes: ChangeSet = field(default_factory=ChangeSet)
    refresh: tuple[str, ...] = ()  # other apps this step changed (an app of apps' children): refresh them
    unchanged: bool = False  # answered by the no-op fast path: nothing it compares changed since the last step


def reconcile(runtime: Runtime, name: str, *, reason: str = "", budget: float = 10.0, automate: bool = True,
              clock: Clock = SYSTEM, head: str = "") -> Outcome:
    """ONE step: observe, decide, execute, record; returns within about `budget` seconds.

    Starts an automated operation when the policy says so (unless `automate` is False: a refresh only).
    `head` is the commit the app's targetRevision resolved to moments ago (the poll's ls-remote): a
    single-source git app then renders it without an ls-remote of its own."""
    holder, acquired = uuid.uuid4().hex, clock.now()
    if not acquire_lease(runtime.store, name, holder, LEASE_TTL, acquired):
        log.info("reconcile skipped", app=name, reason=ALREADY_RUNNING)
        current, _ = app_state.load(runtime.store, name)
        return Outcome(name, current, skipped=ALREADY_RUNNING, continue_after=RECHECK_AFTER)
    keeper = LeaseKeeper(runtime.store, name, holder, LEASE_TTL, clock=clock.now, acquired_at=acquired).start()
    try:
        for _ in range(RACE_ATTEMPTS):
            try:
                return notify.after_step(runtime, _Step(runtime, name, reason, budget, automate, clock, keeper,
                                                               head).run())
            except PreconditionFailed:
                if keeper.lost:
                    return Outcome(name, app_state.load(runtime.store, name)[0], skipped="lease lost")
                log.info("state changed under the step; re-reading", app=name)
        return Outcome(name, app_state.load(runtime.store, name)[0], skipped="state kept changing",
                       continue_after=1.0)
    finally:
        keeper.close()


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """The process's pool for a step's concurrent cluster calls (dry-runs, applies, gets), DRY_RUN_CONCURRENCY
    threads, started once: a pool per call started ~16 threads per step, 0.1 s of a 1 s step on a busy
    machine (cProfile of the 1,000-app scenario). Its tasks never submit to it, so it cannot deadlock."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=max(DRY_RUN_CONCURRENCY, APPLY_CONCURRENCY),
                                       thread_name_prefix="tidecd-step")
        return _POOL


class _Step:
    """One reconcile call: observe once, then decide → execute → record until a wait outlasts the budget."""

    def __init__(self, runtime: Runtime, name: str, reason: str, budget: float, automate: bool,
                 clock: Clock, keeper: LeaseKeeper | None = None, head: str = "") -> None:
        self.runtime, self.name, self.reason, self.automate, self.clock = runtime, name, reason, automate, clock
        self.keeper = keeper
        self.head = head  # the poll's fresh resolution of the targetRevision ("" resolves it here)
        self.deadline = clock.monotonic() + budget
        self.state, self.generation = app_state.load(runtime.store, name)
        self.loaded = (self.state.reconciled_at, dict(self.state.quiet))  # what a no-op step may change
        self.inputs_digest = ""  # the quiet record's halves (see `_quiet_path`) ...
        self.live_digest = ""
        self.prefetched: dict[ResourceKey, Manifest] | None = None  # ... and the live objects it listed
        self.listed: tuple[list[tuple[str, str]], list[tuple[str, str]]] | None = None  # kinds listed, unserved
        self.view_current = False  # `live` is this step's list, kept current by its writes and reads
        self.quiet_hit = False  # answered by the fast path: nothing is recompared, nothing is written
        self.settled = False  # the last decision was "nothing to do", with nothing scheduled
        self.observed = False  # the observe stage ran to its end (no error)
        self.wrote = False  # this step wrote the state already
        self.changes = ChangeSet()
        self.continue_after: float | None = None
        self.live: dict[ResourceKey, Manifest] = {}
        self.written: dict[ResourceKey, str] = {}
        self.applied: dict[ResourceKey, Manifest] = {}  # what this wave's writes returned (`_run_tasks`)
        self.app: Application | None = None
        self.sha = ""
        self.render_warnings: list[str] = []
        self.excluded: list[ResourceKey] = []
        self.claimed: list[str] = []  # desired objects someone else owns (an Argo CD Application, ...)
        self.adoption_refused = ""  # why tidecd.io/adopt-from-argocd could not take the objects over
        self.manifests: list[Manifest] = []
        self.tasks: tuple[plan.Task, ...] = ()
        self.comparison = Comparison()
        self.seen_status = (self.state.sync_status, self.state.health)
        self.children: ChildCluster | None = None  # the app-of-apps view of the cluster (`tidecd.generated.appofapps`)

    # -- the step -------------------------------------------------------------------------------------

    def run(self) -> Outcome:
        try:
            self._observe_and_advance()
        except PreconditionFailed:
            raise  # a lost race on the state itself: `reconcile` re-reads and re-decides
        except TemporaryError as exc:
            self._condition("ComparisonError", str(exc))
            op = self.state.operation
            if op is not None and op.running:
                # Before its first write, or after repeated failures, the operation fails (an automated one
                # is retried with its backoff); mid-way, a passing blip only postpones the next step.
                if isinstance(exc, ClusterUnavailable) or not op.checked or op.step_errors >= MAX_STEP_ERRORS:
                    suffix = " (nothing pruned; will retry)" if isinstance(exc, ClusterUnavailable) else ""
                    self._fail_operation(f"{exc}{suffix}")
                else:
                    op.step_errors += 1
                    self.continue_after = exc.delay
        except PermanentError as exc:
            kind = "InvalidSpecError" if isinstance(exc, ProjectViolation) else "ComparisonError"
            self._condition(kind, str(exc))
            if self._running():
                assert self.state.operation is not None
                self.state.operation.retryable = False
                self._fail_operation(str(exc))
        if self.quiet_hit:
            log.info("reconciled", app=self.name, reason=self.reason, sync=self.state.sync_status,
                     health=self.state.health, revision=self.state.revision[:12], unchanged=True)
            return Outcome(self.name, self.state, unchanged=True)
        self.state.reconciled_at = app_state.now_iso()
        self._follow_health()
        self.state.quiet = self._quiet_record()
        self._save()
        for entry in self.changes.changed():  # a line per object, starting with its ResourceKey text
            log.info(str(entry), app=self.name, action=entry.action.value, wave=entry.wave, phase=entry.phase)
        log.info("reconciled", app=self.name, reason=self.reason, sync=self.state.sync_status,
                 health=self.state.health, revision=self.state.revision[:12],
                 operation=self.state.operation.phase if self.state.operation else "",
                 continue_after=self.continue_after)
        touched = tuple(dict.fromkeys([*(self.children.touched if self.children else ()), *self._parent_to_tell()]))
        return Outcome(self.name, self.state, changes=self.changes, continue_after=self.continue_after,
                       refresh=touched)

    def _parent_to_tell(self) -> list[str]:
        """An app of apps' child whose sync or health changed asks its parent to look again (its waves wait
        on it, and its resource list shows it)."""
        if (self.state.sync_status, self.state.health) == self.seen_status:
            return []
        owner = self.runtime.config().owners.get(self.name, "")
        return [generated.owner_name(owner)] if generated.owner_kind(owner) == "Application" else []

    def _with_diff(self, entry: ChangeEntry) -> ChangeEntry:
        """The entry with the masked diff its object's comparison found (the change set carries its diff)."""
        if entry.diff or entry.action not in (Action.CREATED, Action.CONFIGURED, Action.PRUNED):
            return entry
        found = next((r.text for r in self.comparison.resources if r.key == entry.key and r.text), "")
        return dataclasses.replace(entry, diff=found) if found else entry

    @property
    def _argocd_marks(self) -> bool:
        """The app opted in to Argo CD's marks beside tidecd's (`tidecd.io/write-argocd-tracking`)."""
        return ownership.writes_argocd_marks(dict(self._app.annotations))

    @property
    def _app(self) -> Application:
        assert self.app is not None, "observed before the app was loaded"
        return self.app

    def _follow_health(self) -> None:
        """After an operation succeeded with the app still Progressing (the last group is not waited for),
        ask for refresh steps for a while, so status and `app wait --health` see it turn Healthy."""
        op = self.state.operation
        if (self.continue_after is not None or op is None or op.phase is not OperationPhase.SUCCEEDED
                or self.state.health is not HealthStatus.PROGRESSING or not op.finished_at):
            return
        finished = datetime.datetime.fromisoformat(op.finished_at.replace("Z", "+00:00")).timestamp()
        if self.clock.now() - finished < HEALTH_FOLLOW_SECONDS:
            self.continue_after = HEALTH_RECHECK_AFTER

    def _running(self) -> bool:
        return self.state.operation is not None and self.state.operation.running

    def _save(self) -> None:
        """Record: a lost race raises PreconditionFailed, and `reconcile` re-reads and re-decides. A settled
        app whose record did not change but for `reconciled_at` (and the quiet record) is not written: a
        no-op resync makes no write, in the store either (`reconciled_at` is then the last step that changed
        something)."""
        settled = not self._running() and self.state.health is not HealthStatus.PROGRESSING
        if settled and self.generation and self.continue_after is None and self._unchanged():
            return
        self.generation = app_state.save(self.runtime.store, self.state, if_generation_match=self.generation,
                                         keep_quiet=True)
        self.loaded = (self.state.reconciled_at, dict(self.state.quiet))
        self.wrote = True

    def _unchanged(self) -> bool:
        """The record is the file as loaded, but for `reconciled_at` and, in a step that wrote nothing yet,
        `quiet` (a no-op writes nothing): one encoding, compared with the bytes read (no second encoding
        of the loaded state)."""
        if not self.state.loaded:
            return False
        doc = self.state.to_json()
        doc["reconciled_at"] = self.loaded[0]
        if not self.wrote:
            doc["quiet"] = self.loaded[1]
        return app_state.encode_json(doc) == self.state.loaded

    # -- the no-op fast path ---------------------------------------------------------------------------

    def _may_be_quiet(self) -> bool:
        """Whether a no-op of this app may be answered from its quiet record: its status follows only from
        its rendered revision, its config and its own live objects (nothing time-dependent, no other app's
        state, no running operation)."""
        app = self._app
        orphans = self.project.orphaned_resources
        return (not self._running() and not self.state.rebuilt and not generated.is_deleting(app)
                and not self.project.sync_windows and not (orphans is not None and orphans.warn)
                and not app.annotation(constants.ANNOTATION_ADOPT_FROM_ARGOCD).strip()
                and not (self.children is not None and any(appofapps.is_child_object(m) for m in self.manifests)))

    def _inputs(self) -> str:
        """A digest of what the comparison and the decision start from: whether automated sync may act (a
        refresh-only step's "nothing to do" is not an automated step's), the revision, the rendered objects,
        the app, its project, the argocd-cm settings and the image updater's override (the sync marker)."""
        import hashlib

        app, config = self._app, self.runtime.config()
        marker = images_state.sync_marker(self.runtime.store, app, self.sha, spec_hash(app))
        parts = [QUIET_VERSION, str(self.automate), self.sha, marker, repr(app), repr(self.project),
                 repr(config.argo_settings), repr(config.ignore_differences_of(app)),
                 json.dumps(self.manifests, sort_keys=True, default=str)]
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()

    def _quiet_path(self, app: Application) -> bool:
        """The no-op fast path. When the inputs and the live objects' resourceVersions are those the last
        full comparison recorded (`state.quiet`), that comparison's result stands: nothing is re-compared,
        re-decided or written. Drift (a changed resourceVersion, an object added or gone, a kind no longer
        served) or a new commit falls through to the full comparison, which reuses the objects listed here."""
        if not self._may_be_quiet():
            return False
        self.inputs_digest = self._inputs()
        if not self.state.quiet or self.state.quiet.get("inputs") != self.inputs_digest:
            return False
        desired = {ResourceKey.of(m): m for m in plan.resources(self.manifests)}
        live = self._live(self.cluster, app, desired)
        if self.live_digest != self.state.quiet.get("live"):
            self.prefetched = live
            return False
        self.live, self.quiet_hit = live, True
        log.debug("nothing changed since the last comparison", app=self.name)
        return True

    def _quiet_record(self) -> dict[str, str]:
        """What the next no-op compares, when this step ended settled and its result followed only from
        inputs and live objects (else nothing: the next step compares in full)."""
        if not (self.observed and self.settled and self.live_digest and self.continue_after is None
                and self.state.health is not HealthStatus.PROGRESSING and not self.claimed
                and not self.adoption_refused and self._may_be_quiet()):
            return {}
        return {"inputs": self.inputs_digest or self._inputs(), "live": self.live_digest}

    def _observe_and_advance(self) -> None:
        app: Application = self.runtime.app(self.name)
        self.app = app
        self.project = self.runtime.config().projects[app.project]
        self._check_project_scope(self.project, app)
        op = self.state.operation
        self.render_warnings = []
        running = op is not None and op.running
        pinned = op.revision if op is not None and running else ""  # a multi-source one: each source's, joined
        if not running and len(self.head) == 40 and not app.sources and charts.kind_of(app.source) == charts.GIT:
            pinned = self.head  # resolved by this tick's ls-remote of the repository
        sha, manifests = runtime_render(self.runtime)(self.runtime, app, pinned, self.render_warnings)
        if op is not None and op.running and not op.revision:
            op.revision = sha
        if op is not None and op.running and not op.revisions:
            op.revisions = revisions_of(app, op.revision)
        self.sha = sha
        self.cluster = self.runtime.cluster(app.destination)
        if app.annotation(appofapps.ANNOTATION_MODE) != "apply":  # Application objects become child apps
            self.children = ChildCluster(self.cluster, self.runtime.store, app.name)
            self.cluster = cast(KubeCluster, self.children)  # the same calls; it hands every other kind on
        desired = place(self.cluster, self.runtime.config().argo_settings, app, sha, manifests)
        self.manifests, self.excluded, namespaced = desired.manifests, desired.excluded, desired.namespaced
        if self._quiet_path(app):
            return
        self.tasks = self._plan()
        self.violations = ""
        try:
            from tidecd.project import rules

            # an app of apps' children are not objects in a cluster: `generated.merge` scopes them instead
            # (a child may use only what the parent's project allows)
            checked = self.manifests if self.children is None else [
                m for m in self.manifests if not appofapps.is_child_object(m)]
            rules.enforce(self.project, app, checked, namespaced)
        except ProjectViolation as exc:
            self.violations = str(exc)
        self._refresh_comparison()
        if self.state.rebuilt:
            self.state.set_inventory([(k, 0) for k, obj in self.live.items()
                                      if owned_by(obj, app.name) and k not in self._hook_keys()])
        self.unserved = frozenset(gk for gk in {(t.key.group, t.key.kind) for t in self.tasks}
                                  if not _served(self.cluster, *gk))
        self.missing_namespaces = self._missing_namespaces()
        if op is not None and op.running:
            op.step_errors = 0  # observed fine: earlier blips are forgiven
        # a generated app being deleted is pruned whatever the windows say (Argo CD never blocks deletion)
        policy = policy_of(app) if generated.is_deleting(app) else self._windowed(policy_of(app))
        self._advance(policy if self.automate or generated.is_deleting(app)
                      else dataclasses.replace(policy, automated=False))
        if generated.is_deleting(app):
            self._forget_when_gone(app)
        self.observed = True

    def _forget_when_gone(self, app: Application) -> None:
        """A generated app being deleted leaves its owner's record once it owns nothing any more."""
        owner = self.runtime.config().owners.get(app.name)
        if owner is None or self._running() or self.state.inventory_keys() or self.comparison.resources:
            return
        generated.forget(self.runtime.store, owner, app.name)
        log.info("generated app deleted", app=app.name, owner=owner)

    def _windowed(self, policy: decision.Policy) -> decision.Policy:
        """An automated sync the project's syncWindows block now does not start: a condition says why, and the
        poll's next refresh after the window opens starts it. A running operation goes on."""
        op = self.state.operation
        if not policy.automated or (op is not None and op.running):
            return policy
        blocked = sync_window(self.runtime.config(), self._app, manual=False, now=self.clock.now())
        if not blocked:
            return policy
        if self.comparison.status is not SyncStatus.SYNCED:
            self.state.conditions.append({"type": syncwindows.CONDITION, "message": blocked,
                                          "at": app_state.now_iso()})
        return dataclasses.replace(policy, automated=False)

    def _plan(self) -> tuple[plan.Task, ...]:
        """The tasks, with the app's per-object sync options and generateName hooks named for the running
        operation (outside an operation they get names no object has)."""
        op = self.state.operation
        started = _unix(op.started_at) if op is not None and op.running else 0
        naming = plan.HookNaming(op.revision if op is not None and op.running and op.revision else self.sha,
                                 int(started))
        return tuple(plan.plan(self.manifests, app_options=self._app.sync_policy.sync_options, naming=naming))

    def _advance(self, policy: decision.Policy) -> None:
        first = True
        while True:
            found = decision.decide(self._observation(), self.state.operation, policy)
            op = self.state.operation
            if op is not None and op.running:
                op.results, op.step = list(found.results), found.text
                op.wave = found.step.wave if isinstance(found.step, decision.RunTasks) else op.wave
            step = found.step
            if isinstance(step, decision.Nothing):
                if step.retry_at is not None:
                    self.continue_after = max(0.0, step.retry_at - self.clock.now())
                self.settled = step.retry_at is None
                return
            if isinstance(step, decision.Refuse):
                self._condition("SyncError", step.message, unknown=False)
                return
            if isinstance(step, decision.Wait):
                if self.clock.monotonic() + POLL_INTERVAL > self.deadline:
                    self.continue_after = RECHECK_AFTER
                    return
                self.clock.pause(POLL_INTERVAL)
                self._refresh(step.keys)
                continue
            if not first and self.clock.monotonic() > self.deadline:
                self.continue_after = 0.0  # more work, no waiting: go on in the next call
                return
            first = False
            self._fence()
            self._execute(step)
            if isinstance(step, decision.Finish | decision.Terminate):
                if not self._operation_dry_run():
                    if self.view_current and self.listed is not None:
                        # this step listed the app's kinds and has seen every write since: no second list
                        self.prefetched = {k: v for k, v in self.live.items() if k not in self._hook_keys()}
                        self.live_digest = live_digest(self.prefetched, *self.listed)
                    self._refresh_comparison()
                    after = decision.decide(self._observation(), self.state.operation, policy).step
                    # nothing more to do from here (pure; nothing runs): this step's record is a quiet one
                    self.settled = isinstance(after, decision.Nothing) and after.retry_at is None
                return

    def _fence(self) -> None:
        """Before acting on the cluster: still ours? A step that stalled past its lease (a frozen process)
        must not apply what it decided from a stale state; it re-reads instead."""
        if self.keeper is not None and (self.keeper.lost or not self.keeper.fence()):
            raise PreconditionFailed(f"{self.name}: the lease was taken over")
        blob = self.runtime.store.read(app_state.state_key(self.name))
        if (blob.generation if blob else 0) != self.generation:
            raise PreconditionFailed(f"{self.name}: the state changed since this step read it")

    def _operation_dry_run(self) -> bool:
        return self.state.operation is not None and self.state.operation.dry_run

    def _observation(self) -> decision.Observation:
        resources = self.comparison.resources
        return decision.Observation(
            app=self.name, revision=self.sha,
            marker=images_state.sync_marker(self.runtime.store, self._app, self.sha, spec_hash(self._app)),
            tasks=self.tasks, live=dict(self.live),
            out_of_sync=frozenset(r.key for r in resources if r.status is not SyncStatus.SYNCED),
            dry_run_errors={r.key: r.error for r in resources if r.error.startswith("dry-run failed")},
            inventory=tuple(i for i in self.state.inventory_keys() if not self._excluded_kind(i[0])),
            unserved=self.unserved,
            missing_namespaces=self.missing_namespaces, violations=self.violations,
            synced=self.comparison.status is SyncStatus.SYNCED, auto_synced=self.state.auto_synced,
            automated_disabled=self.state.automated_disabled, now=self.clock.now(),
            health_scripts=self._health_scripts(),
        )

    # -- execute (cluster calls) and record -----------------------------------------------------------

    def _execute(self, step: decision.Step) -> None:
        op = self.state.operation
        if isinstance(step, decision.StartOperation):
            self.state.operation = new_operation(self._app, prune=step.prune, initiated_by="automated",
                                                 automated=True, retry_count=step.retry_count, resolved=self.sha)
            log.info("automated sync", app=self.name, revision=self.sha[:12], retry=step.retry_count)
            self.tasks = self._plan()  # generateName hooks are named for this operation
            self._save()
            return
        assert op is not None
        if isinstance(step, decision.CreateNamespace):
            self.cluster.apply(managed_namespace(self._app, step.namespace))
            self.missing_namespaces = self.missing_namespaces - {step.namespace}
        elif isinstance(step, decision.DryRun):
            self._dry_run(op, step)
        elif isinstance(step, decision.DeleteHooks):
            propagation = "Foreground" if step.reason == decision.BEFORE_HOOK_CREATION else "Background"
            for key in step.keys:
                self.cluster.delete(key, propagation=propagation)
            self._refresh(step.keys)
        elif isinstance(step, decision.RunTasks):
            self._run_tasks(op, step)
        elif isinstance(step, decision.Prune):
            if step.candidates and step.enabled and not step.dry_run:
                self.view_current = False  # deletions are not in the view: the comparison after lists again
            entries = prune(self.cluster, self.name, list(step.candidates), enabled=step.enabled,
                            dry_run=step.dry_run,
                            propagation=syncoptions.prune_propagation(self._app.sync_policy.sync_options))
            waves = dict(step.candidates)
            for entry in entries:
                self.changes.add(self._with_diff(entry))
                op.results.append(TaskResult(entry.key, "Sync", waves.get(entry.key, 0), False, entry.action,
                                             TaskPhase.FAILED if entry.action is Action.FAILED
                                             else TaskPhase.SUCCEEDED, entry.message))
            reported = {e.key for e in entries}
            for gone, wave in step.candidates:  # deleted already (by a step killed mid-prune, or by hand)
                if gone not in reported and not step.dry_run:
                    op.results.append(TaskResult(gone, "Sync", wave, False, Action.PRUNED, TaskPhase.SUCCEEDED,
                                                 "already gone"))
            op.pruned = True
        elif isinstance(step, decision.StartSyncFail):
            op.failure = step.message
        elif isinstance(step, decision.Terminate):
            self.view_current = False
            for key in step.hooks:
                try:
                    self.cluster.delete(key, propagation="Background")
                except ApiError as exc:
                    log.warning("terminate: hook not deleted", app=self.name, hook=str(key), error=explain(exc))
            self._finish(op, OperationPhase.FAILED, "Operation terminated")
        elif isinstance(step, decision.Finish):
            self._finish(op, step.phase, step.message)
        if isinstance(step, decision.Finish | decision.Terminate) and not op.dry_run:
            return  # saved with the comparison that follows: no reader sees the end beside the old status
        self._save()

    def _dry_run(self, op: Operation, step: decision.DryRun) -> None:
        def one(task: plan.Task) -> ChangeEntry:
            if task.hook:
                return dry_run_hook(self.cluster, task, self.name)
            if op.dry_run and task.key in self.live and task.key not in self._out_of_sync():
                return ChangeEntry(task.key, Action.UNCHANGED)
            try:
                return apply_task(self.cluster, task, self.name, dry_run=True, exists=self.live.__contains__,
                                  argocd_marks=self._argocd_marks)
            except UnknownKind as exc:
                return ChangeEntry(task.key, Action.FAILED, str(exc))

        entries = list(_pool().map(one, step.tasks))
        failures = [e for e in entries if e.action is Action.FAILED]
        temporary = {r.key for r in self.comparison.resources if r.temporary}
        failures += [ChangeEntry(key, Action.FAILED, message, temporary=key in temporary)
                     for key, message in step.known_failures]
        if op.dry_run:
            for entry in entries:
                self.changes.add(self._with_diff(entry))
        if failures:
            for entry in failures:
                if not op.dry_run or entry not in entries:
                    self.changes.add(self._with_diff(entry))
                op.results.append(TaskResult(entry.key, "Sync", 0, False, Action.FAILED, TaskPhase.FAILED,
                                             entry.message))
            op.retryable = all(e.temporary for e in failures)  # one permanent refusal: a retry meets it again
            self._finish(op, OperationPhase.FAILED, "one or more objects failed to apply (dry run), nothing "
                         "was written: " + "; ".join(f"{e.key}: {e.message}" for e in failures))
            return
        op.checked = True

    def _run_tasks(self, op: Operation, step: decision.RunTasks) -> None:
        hooks = [t for t in step.tasks if t.hook]
        if hooks:  # the intent first: a step killed after creating finds its hook by name and mark
            for task in hooks:
                if op.result(task.key, task.phase.value) is None:
                    op.results.append(TaskResult(task.key, task.phase.value, task.wave, True, Action.CREATED,
                                                 TaskPhase.PENDING))
            self._save()
        out_of_sync = self._out_of_sync()
        respect = self._app.sync_policy.has_option("RespectIgnoreDifferences=true")

        def one(task: plan.Task) -> tuple[plan.Task, ChangeEntry, str]:
            if task.hook:
                if task.generate_name and decision.BEFORE_HOOK_CREATION in task.delete_policies:
                    delete_earlier_copies(self.cluster, task, self.name, op.id)
                entry, uid = create_hook(self.cluster, task, self.name, op.id)
                return task, entry, uid
            if task.key in self.live and task.key not in out_of_sync:
                return task, ChangeEntry(task.key, Action.UNCHANGED), ""
            if respect:
                obj = respect_ignored(task.obj, self.live.get(task.key),
                                      self.runtime.config().ignore_differences_of(self._app))
                task = dataclasses.replace(task, obj=obj)
            return task, apply_task(self.cluster, task, self.name, dry_run=False, exists=self.live.__contains__,
                                    written=self._record_write, argocd_marks=self._argocd_marks), ""

        done = []  # what workloads need first, then the workloads before data nothing names (`plan.apply_order`)
        for batch in plan.apply_batches(step.tasks):
            done += list(_pool().map(one, batch))
        position = {t.key: i for i, t in enumerate(step.tasks)}
        done.sort(key=lambda item: position.get(item[0].key, 0))  # results in the plan's order
        for task, entry, uid in done:
            self.changes.add(self._with_diff(entry))
            phase = TaskPhase.FAILED if entry.action is Action.FAILED else TaskPhase.RUNNING
            result = TaskResult(task.key, task.phase.value, task.wave, task.hook, entry.action, phase,
                                entry.message, uid)
            op.results = [r for r in op.results if r.id != result.id] + [result]
        # An object is live as written (or, unchanged, as this step listed it): only those whose health
        # is not yet Healthy are read again, since a controller may have moved their status since. No GET
        # for a ConfigMap, a Service, a ServiceAccount...
        applied, self.applied = self.applied, {}
        self.live.update(applied)
        self._refresh([t.key for t in step.tasks if not self._settled_in_view(t.key)])

    def _settled_in_view(self, key: ResourceKey) -> bool:
        """The live view's object reads Healthy or has no health: reading it again would tell nothing."""
        obj = self.live.get(key)
        if obj is None:
            return False
        assessed = health.assess(obj, self._health_scripts())
        return assessed is None or assessed.status is HealthStatus.HEALTHY

    def _record_write(self, key: ResourceKey, result: Manifest) -> None:
        self.written[key] = self._identity(result)
        self.applied[key] = result  # distinct keys from the pool's threads

    def _identity(self, live: Manifest) -> str:
        """The comparison cache's key for a live object (`diff.live_identity`)."""
        rules = self.runtime.config().ignore_differences_of(self._app)
        return live_identity(live, all_managers=any(rule.managed_fields_managers for rule in rules))

    def _finish(self, op: Operation, phase: OperationPhase, message: str) -> None:
        op.phase, op.message, op.finished_at = phase, message, app_state.now_iso()
        op.step = message
        for result in op.results:
            if result.phase is TaskPhase.RUNNING and not result.hook and phase is OperationPhase.SUCCEEDED:
                result.phase = TaskPhase.SUCCEEDED  # the last group: applied, not waited for (see sync.decide)
        if op.dry_run:
            return
        inventory = dict(self.state.inventory_keys())
        pruned = {r.key for r in op.results if r.action is Action.PRUNED}
        if phase is OperationPhase.SUCCEEDED:
            only = op.only_keys()
            inventory.update({t.key: t.wave for t in self.tasks if not t.hook and (only is None or t.key in only)})
        else:  # keep what it had, plus what it created before failing
            waves = {t.key: t.wave for t in self.tasks if not t.hook}
            inventory.update({r.key: waves[r.key] for r in op.results if not r.hook and r.key in waves
                              and r.action in (Action.CREATED, Action.CONFIGURED) and r.phase is not TaskPhase.FAILED})
        self.state.set_inventory([(k, w) for k, w in inventory.items() if k not in pruned])
        self.state.add_history(op.revision, phase.value, str(op.source.get("path", "")),
                               str(op.source.get("targetRevision", "")), op.id,
                               op.revisions or (revisions_of(self.app, op.revision) if self.app else None))
        images_state.on_deployed(self.runtime.store, self.name, op.id)  # which image override it deployed
        if op.automated and phase is OperationPhase.SUCCEEDED and self.app is not None:
            self.state.auto_synced = images_state.sync_marker(self.runtime.store, self.app, op.revision,
                                                              spec_hash(self.app))
        if op.automated and phase is not OperationPhase.SUCCEEDED and self.app is not None and op.retryable:
            policy = policy_of(self.app)
            if policy.may_retry(op.retry_count):
                delay = policy.retry_delay(op.retry_count)
                op.next_attempt_at = self.clock.now() + delay
                self.continue_after = delay
        if op.rollback:
            self.state.automated_disabled = True
        elif not op.automated and not op.source.get("revision"):
            self.state.automated_disabled = False
        self._remember_writes()
        log.info("sync finished", app=self.name, operation=op.id, phase=op.phase, message=op.message,
                 automated=op.automated)

    def _fail_operation(self, message: str) -> None:
        op = self.state.operation
        assert op is not None
        self._finish(op, OperationPhase.FAILED, message)

    def _remember_writes(self) -> None:
        """An object just applied is, until something else changes it, exactly what a dry-run of the same
        apply would predict: record it as Synced so the comparison after the sync needs no dry-run for it."""
        for obj in plan.resources(self.manifests):
            key = ResourceKey.of(obj)
            if key in self.written:
                owned = with_ownership(obj, self.name, argocd=self._argocd_marks)
                self.state.comparison_cache[str(key)] = CachedComparison(fingerprint(owned), self.written[key],
                                                                         SyncStatus.SYNCED)

    # -- observe ---------------------------------------------------------------------------------------

    def _check_project_scope(self, project: AppProject, app: Application) -> None:
        from tidecd.project import rules

        problems = rules.check_source(project, app) + rules.check_destination(project, app.destination)
        if problems:
            raise ProjectViolation(project.name, problems)

    def _hook_keys(self) -> set[ResourceKey]:
        return {t.key for t in self.tasks if t.hook}

    def _out_of_sync(self) -> set[ResourceKey]:
        return {r.key for r in self.comparison.resources if r.status is not SyncStatus.SYNCED}

    def _refresh_comparison(self) -> None:
        self._remember_writes()
        self.comparison, live = self._compare(self.cluster, self._app, self.manifests)
        source = self._app.annotation(constants.ANNOTATION_ADOPT_FROM_ARGOCD).strip()
        if self.claimed and source and self._adopt_from_argocd(source):
            self.comparison, live = self._compare(self.cluster, self._app, self.manifests)
        self.live, self.view_current = live, True
        for key in self._hook_keys():
            self.live.pop(key, None)
        self._refresh(self._hook_keys())
        self._record(self._app, self.sha, self.comparison, self.live)

    def _adopt_from_argocd(self, source: str) -> bool:
        """`tidecd.io/adopt-from-argocd: [<namespace>/]<name>` (or "true": the app's own name, in `argocd`):
        what `tidecd app adopt` does, when the desired objects are that Argo CD Application's. A refusal
        becomes the condition ArgoCDAdoptionRefused, naming each object; nothing is written then."""
        from tidecd.sync import adopt as moves

        namespace, _, name = source.rpartition("/")
        name = self.name if name.lower() in ("true", "") else name
        control = namespace or "argocd"
        desired = {ResourceKey.of(m): m for m in plan.resources(self.manifests)}
        try:  # the real Argo CD Application: not the app-of-apps view, where Applications are tidecd's
            argo = moves.read_argo_app(self.runtime.cluster(self._app.destination), f"{control}/{name}", control)
            checked = moves.plan_adopt(self.cluster, self.name, argo, desired, self._app.ignore_differences,
                                       argocd_marks=self._argocd_marks)
        except moves.AdoptRefused as exc:
            self.adoption_refused = str(exc)
            return False
        for entry in moves.adopt(self.cluster, checked, argocd_marks=self._argocd_marks):
            self.changes.add(entry)
        waves = {t.key: t.wave for t in self.tasks if not t.hook}
        self.state.set_inventory([*self.state.inventory_keys(), *((k, waves.get(k, 0)) for k in desired)])
        log.info("adopted from Argo CD", app=self.name, argocd=f"{argo.namespace}/{argo.name}",
                 objects=len(checked.moves), next="; ".join(moves.argocd_steps_after_adopt(argo)))
        return True

    def _refresh(self, keys: Any) -> None:
        keys = list(dict.fromkeys(keys))
        if not keys:
            return

        def get(key: ResourceKey) -> tuple[ResourceKey, Manifest | None]:
            try:
                return key, self.cluster.get(key)
            except UnknownKind:
                return key, None

        for key, found in _pool().map(get, keys):
            if found is None:
                self.live.pop(key, None)
            else:
                self.live[key] = found

    def _missing_namespaces(self) -> frozenset[str]:
        wanted = {t.key.namespace for t in self.tasks if t.key.namespace}
        policy_ns = policy_of(self._app).create_namespace
        if policy_ns:
            wanted.add(policy_ns)
        missing = set()
        for ns in sorted(wanted):
            key = ResourceKey("", "Namespace", "", ns)
            if key in self.live:
                continue
            if self.cluster.get(key) is None:
                missing.add(ns)
        return frozenset(missing)

    def _compare(self, cluster: KubeCluster, app: Application,
                 manifests: list[Manifest]) -> tuple[Comparison, dict[ResourceKey, Manifest]]:
        desired = {ResourceKey.of(m): m for m in plan.resources(manifests)}
        hooks = self._hook_keys()
        live = self.prefetched if self.prefetched is not None else self._live(cluster, app, desired)
        self.prefetched = None
        cache = self.state.comparison_cache
        new_cache: dict[str, CachedComparison] = {}
        ignores = _rules_hash(self.runtime.config().ignore_differences_of(app))

        argocd_marks = ownership.writes_argocd_marks(dict(app.annotations))
        claimed: list[str] = []

        def one(item: tuple[ResourceKey, Manifest]) -> ResourceDiff:
            key, obj = item
            owned = with_ownership(obj, app.name, argocd=argocd_marks)
            current = live.get(key)
            if current is not None and (other := conflict(current, app.name)):
                claimed.append(f"{key}: {other}")  # never compared as this app's: a condition names the owner
                return ResourceDiff(key, SyncStatus.OUT_OF_SYNC, error=other)
            if current is not None and (remark := ownership.needs_remark(current, app.name, argocd=argocd_marks)):
                return ResourceDiff(key, SyncStatus.OUT_OF_SYNC, ("metadata.annotations",), remark)
            seen = self._identity(current) if current is not None else ""
            cache_key, print_ = str(key), fingerprint(owned) + ignores  # a changed ignore rule re-compares
            hit = cache.get(cache_key)
            if current is not None and hit and (hit.fingerprint, hit.live) == (print_, seen):
                new_cache[cache_key] = hit
                return ResourceDiff(key, hit.status, hit.changed, hit.text)
            result = self._compare_one(cluster, app, key, owned, current)
            if current is not None and not result.error:
                new_cache[cache_key] = CachedComparison(print_, seen, result.status, tuple(result.changed_paths),
                                                        result.text)
            return result

        results = list(_pool().map(one, sorted(desired.items())))
        self.claimed = sorted(claimed)
        for key, obj in sorted(live.items()):
            if key not in desired and key not in hooks and owned_by(obj, app.name) and not _ignores_extraneous(obj) \
                    and not self._excluded_kind(key):
                results.append(compare(key, obj, None))
        self.state.comparison_cache = new_cache
        return Comparison(results), live

    def _compare_one(self, cluster: KubeCluster, app: Application, key: ResourceKey, owned: Manifest,
                     current: Manifest | None) -> ResourceDiff:
        if current is None:
            return compare(key, None, owned)
        try:
            predicted = cluster.apply(owned, dry_run=True)
        except ApiError as exc:
            return ResourceDiff(key, SyncStatus.OUT_OF_SYNC, (".",), error=f"dry-run failed: {explain(exc)}",
                                temporary=isinstance(exc, TemporaryError))
        except UnknownKind as exc:
            return ResourceDiff(key, SyncStatus.OUT_OF_SYNC, (".",), error=f"dry-run failed: {exc}")
        return compare(key, current, predicted, self.runtime.config().ignore_differences_of(app))

    def _live(self, cluster: KubeCluster, app: Application,
              desired: dict[ResourceKey, Manifest]) -> dict[ResourceKey, Manifest]:
        """The app's objects: listed by ownership label per kind, then fetched one by one if unlabelled."""
        live: dict[ResourceKey, Manifest] = {}
        kinds = {(k.group, k.kind) for k in desired} | {(k.group, k.kind) for k, _ in self.state.inventory_keys()
                                                      if not self._excluded_kind(k)}
        unserved = []
        for group, kind in sorted(kinds):
            try:
                for obj in cluster.list(group, kind, label_selector=managed_selector(app.name)):
                    live[ResourceKey.of(obj)] = obj
            except UnknownKind:
                unserved.append((group, kind))
                continue
        # unlabelled: desired objects not created yet (or someone else's), and inventory objects an older
        # tidecd marked with Argo CD's names (tidecd.base.ownership), which keep their app until the next sync
        for key in [*desired, *(k for k, _ in self.state.inventory_keys())]:
            if key not in live:
                try:
                    found = cluster.get(key)
                except UnknownKind:
                    found = None
                if found is not None:
                    live[key] = found
        self.listed = (sorted(kinds), unserved)
        self.live_digest = live_digest(live, *self.listed)
        return live

    def _record(self, app: Application, sha: str, comparison: Comparison,
                live: dict[ResourceKey, Manifest]) -> None:
        statuses, assessed = [], []
        for res in comparison.resources:
            result: HealthResult | None = None
            if not res.requires_pruning:
                result = health.assess(live.get(res.key), self._health_scripts())
                assessed.append((res.key, result))
            statuses.append(app_state.ResourceStatus(
                res.key.group, res.key.kind, res.key.namespace, res.key.name, res.status,
                result.status if result else None, result.message if result else "",
                list(res.changed_paths), res.requires_pruning, res.text or res.error,
            ))
        roll = health.app_health(assessed, self._health_scripts())
        self.state.sync_status, self.state.revision = comparison.status, sha
        self.state.revisions = revisions_of(app, sha)
        self.state.health = roll
        self.state.health_message = next((f"{k}: {r.message}" for k, r in assessed if r and r.status is roll
                                          and r.message), "")
        self.state.resources = statuses
        now = app_state.now_iso()
        self.state.conditions = self._kept_conditions() + syncoptions.conditions(app.sync_policy.sync_options, now)
        self.state.conditions += [{"type": "RepeatedResourceWarning", "message": text, "at": now}
                                  for text in self.render_warnings]
        self._orphans()
        if self.excluded:
            self.state.conditions.append({"type": "ExcludedResourceWarning", "at": now, "message": (
                "excluded by argocd-cm resource.exclusions/inclusions, neither synced nor pruned: "
                + ", ".join(str(k) for k in self.excluded[:20]) + (" ..." if len(self.excluded) > 20 else ""))})
        if self.claimed:  # as Argo CD names two apps wanting one object; the owner is named, never overwritten
            self.state.conditions.append({"type": "SharedResourceWarning", "at": now,
                                          "message": "; ".join(self.claimed)})
        if self.adoption_refused:
            self.state.conditions.append({"type": "ArgoCDAdoptionRefused", "at": now,
                                          "message": self.adoption_refused})

    def _orphans(self) -> None:
        """AppProject `orphanedResources.warn`: a condition listing what no app manages in the namespace."""
        wanted = self.project.orphaned_resources
        namespace = self._app.destination.namespace
        if wanted is None or not wanted.warn or not namespace:
            return
        from tidecd.project import orphans

        def list_kind(group: str, kind: str) -> list[Manifest]:
            if self._excluded_kind(ResourceKey(group, kind, "", "")):
                return []
            try:
                return self.cluster.list(group, kind, namespace=namespace)
            except (UnknownKind, ApiError):
                return []

        kinds = set(orphans.KINDS) | {(t.key.group, t.key.kind) for t in self.tasks if t.key.namespace}
        found = orphans.find(list_kind, kinds, wanted)
        if found:
            self.state.conditions.append({"type": orphans.CONDITION, "message": orphans.message(namespace, found),
                                          "at": app_state.now_iso()})

    def _excluded_kind(self, key: ResourceKey) -> bool:
        """argocd-cm `resource.exclusions`/`inclusions`: tidecd leaves objects of this kind alone (no prune)."""
        settings = self.runtime.config().argo_settings
        destination = self._app.destination
        return settings.excluded(key.group, key.kind, destination.server or destination.name)

    def _health_scripts(self) -> Mapping[str, str]:
        """argocd-cm's Lua health checks (`resource.customizations.health.*`), which come before built-ins."""
        return self.runtime.config().argo_settings.health_lua

    def _kept_conditions(self) -> list[dict[str, str]]:
        return [c for c in self.state.conditions if c["type"] == app_state.STATE_UNREADABLE and self.state.rebuilt]

    def _condition(self, kind: str, message: str, *, unknown: bool = True) -> None:
        self.state.conditions = [*self._kept_conditions(), {"type": kind, "message": message,
                                                            "at": app_state.now_iso()}]
        if unknown:
            self.state.sync_status = SyncStatus.UNKNOWN
        log.warning("reconcile problem", app=self.name, condition=kind, message=message)


QUIET_VERSION = "1"  # bump when what the quiet record's digests cover changes


def live_digest(live: Mapping[ResourceKey, Manifest], kinds: list[tuple[str, str]],
                unserved: list[tuple[str, str]]) -> str:
    """A digest of the observed live objects: each one's key, uid and resourceVersion (any write to an object
    changes its resourceVersion), the kinds listed and those the cluster does not serve."""
    import hashlib

    digest = hashlib.sha256(repr((kinds, unserved)).encode())
    for key in sorted(live):
        meta = live[key].get("metadata") or {}
        digest.update(f"\n{key}\0{meta.get('uid', '')}\0{meta.get('resourceVersion', '')}".encode())
    return digest.hexdigest()


def _unix(iso: str) -> int:
    try:
        return int(datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return 0


def _rules_hash(rules: tuple[Any, ...]) -> str:
    import hashlib

    return hashlib.sha256(repr(rules).encode()).hexdigest()[:8] if rules else ""


def managed_namespace(app: Application, namespace: str) -> Manifest:
    """The namespace CreateNamespace=true creates, with the app's `managedNamespaceMetadata`."""
    meta: dict[str, Any] = {"name": namespace}
    if app.sync_policy.namespace_labels:
        meta["labels"] = dict(app.sync_policy.namespace_labels)
    if app.sync_policy.namespace_annotations:
        meta["annotations"] = dict(app.sync_policy.namespace_annotations)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def _served(cluster: KubeCluster, group: str, kind: str) -> bool:
    try:
        cluster.resource(group, kind)
    except UnknownKind:
        return False
    return True


def _ignores_extraneous(obj: Manifest) -> bool:
    options = plan.annotations_of(obj).get(constants.ANNOTATION_COMPARE_OPTIONS, "")
    return constants.COMPARE_IGNORE_EXTRANEOUS in options
