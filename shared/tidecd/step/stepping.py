"""The step's loop: observe once, then decide → execute → record until a wait outlasts the budget.

`Step` holds what one reconcile call works on: its context (`StepContext`: the runtime with its cluster
and source, the clock, the lease), the app's state as it stands (a value, replaced by the result of each
`step.record` transition and never changed in place, until the one `save`), the observed `Target`, the
live `View` its writes keep current, and how it ends (`End`). Each stage is a function of another
module that takes and returns values: `step.observe` (reads), `sync.decide` (pure), `step.execute`
(cluster calls), `step.record` (pure state transitions, then one `save`).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import cast

import structlog

from tidecd.base import constants
from tidecd.base.clock import Clock
from tidecd.base.errors import PermanentError, ProjectViolation, TemporaryError
from tidecd.base.model import Action, ChangeEntry, ChangeSet, HealthStatus, Manifest, ResourceKey, SyncStatus
from tidecd.clients.cluster import ApiTooManyRequests, KubeCluster, unreachable
from tidecd.clients.store import LeaseKeeper
from tidecd.config.load import Application
from tidecd.diff import Comparison
from tidecd.generated import appofapps
from tidecd.generated import records as generated
from tidecd.generated.appofapps import ChildCluster
from tidecd.health import awaited
from tidecd.images import state as images_state
from tidecd.project import rules
from tidecd.project import windows as syncwindows
from tidecd.render.overrides import SourceOverride
from tidecd.runtime import Runtime
from tidecd.source import charts
from tidecd.state import app as app_state
from tidecd.state import index
from tidecd.state.app import OperationPhase
from tidecd.step import deletion, execute, observe, plangate, quiet, record
from tidecd.step.desired import place, runtime_render, spec_hash
from tidecd.step.observe import Target
from tidecd.step.operation import automated_operation, policy_of, sync_cluster, sync_window
from tidecd.sync import decide as decision
from tidecd.sync import plan
from tidecd.sync.apply import owned_by

log = structlog.get_logger("tidecd.step.reconcile")
POLL_INTERVAL = 0.5  # between health checks inside one step's budget
MAX_STEP_ERRORS = 3  # temporary errors in a row a running operation survives after its first write


@dataclass(frozen=True)
class StepContext:
    """What a step works with: the runtime (store, config, clusters, source), the app, why, whether it may
    start an automated sync, the clock, the lease, the poll's resolved head, and its deadline. `look`: only
    the no-op fast path may answer, without the lease (`step.reconcile.look`)."""

    runtime: Runtime
    name: str
    reason: str
    automate: bool
    clock: Clock
    keeper: LeaseKeeper | None
    head: str
    deadline: float
    look: bool = False

    def iso(self) -> str:
        """Now on the step's one clock, as the state writes times (`2026-01-02T03:04:05Z`)."""
        return datetime.datetime.fromtimestamp(self.clock.now(), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class View:
    """The live objects as this step knows them: listed once, then kept current by its writes and reads."""

    live: dict[ResourceKey, Manifest] = field(default_factory=dict)
    prefetched: observe.Listing | None = None  # listed by the fast path, for the comparison to reuse
    listed: observe.Listing | None = None  # the last listing (its kinds), for a digest after the writes
    digest: str = ""
    current: bool = False  # `live` is this step's list, kept current by its writes and reads
    written: dict[ResourceKey, str] = field(default_factory=dict)  # identities of the objects it wrote


@dataclass
class End:
    """How the step ends: when it wants its next step, whether it settled, observed, or was quiet."""

    continue_after: float | None = None
    settled: bool = False  # the last decision was "nothing to do", with nothing scheduled
    observed: bool = False  # the observe stage ran to its end (no error)
    quiet_hit: bool = False  # answered by the fast path: nothing is recompared, nothing is written ...
    quiet_expired: bool = False  # ... but the drift's condition, whose hour ended (`record.drift_expired`)
    deployed: str = ""  # the operation this step ended (not a dry run)


@dataclass(frozen=True)
class Facts:
    """Cluster facts the decision needs beside the comparison."""

    unserved: frozenset[tuple[str, str]] = frozenset()
    missing_namespaces: frozenset[str] = frozenset()
    violations: str = ""
    # CreateNamespace's Namespace, when `sync.apply.namespace_metadata_stale` (read before an operation's first write)
    stale: frozenset[ResourceKey] = frozenset()


class Observer:
    """What the step knows of the app and the cluster: the `Target`, the live `View` its writes keep
    current, the comparison and what it noted, and the facts the decision needs. Its methods call
    `step.observe` and record what it returns through `step.record`'s transitions. It holds the step's
    current state (`Step.state` reads and replaces this one value)."""

    def __init__(self, ctx: StepContext, state: app_state.AppState, changes: ChangeSet) -> None:
        self.ctx, self.state, self.changes = ctx, state, changes
        self.target: Target | None = None
        self.view = View()
        self.comparison = Comparison()
        self.notes = record.Notes()
        self.facts = Facts()
        self.inputs = ""  # the quiet record's inputs digest, once computed


    @property
    def current(self) -> Target:
        assert self.target is not None, "observed before the app was loaded"
        return self.target

    def naming(self) -> plan.HookNaming:
        """generateName hooks named for the running operation (outside one, names no object has)."""
        op, sha = self.state.operation, self.current.desired.revision
        started = _unix(op.started_at) if op is not None and op.running else 0
        return plan.HookNaming(op.revision if op is not None and op.running and op.revision else sha, int(started))

    def quiet_path(self) -> bool:
        """The no-op fast path (`step.quiet`). Drift or a new commit falls through to the full comparison,
        which reuses the objects listed here."""
        if not self.may_be_quiet():
            return False
        self.inputs = self.inputs_digest()
        if not quiet.unchanged(self.state.memo.quiet, self.inputs):
            return False
        found = self.list_live()
        if found.digest != self.state.memo.quiet.get("live"):
            self.view.prefetched = found
            return False
        self.view.live = dict(found.live)
        log.debug("nothing changed since the last comparison", app=self.ctx.name)
        return True

    def may_be_quiet(self) -> bool:
        target, op = self.current, self.state.operation
        return quiet.may_be_quiet(target.app, target.project, target.manifests, running=op is not None and op.running,
                                  rebuilt=self.state.origin.rebuilt, children=target.children is not None)

    def inputs_digest(self) -> str:
        target = self.current
        marker = self.marker(target.app, target.desired.revision)
        return quiet.inputs_digest(quiet.Inputs(self.ctx.automate, target.desired.revision, marker,
                                                target.app, target.project, target.config, target.manifests))

    @functools.cached_property
    def override(self) -> SourceOverride | None:
        """The image updater's override, read once a step: each decision asks for the sync marker, and a
        first sync read the same object ten times."""
        return images_state.render_override(self.ctx.runtime.store, self.ctx.name)

    def marker(self, app: Application, revision: str) -> str:
        """What an automated sync of the revision records (`images.state.sync_marker`)."""
        return images_state.sync_marker(self.override, revision, spec_hash(app))

    def list_live(self) -> observe.Listing:
        target = self.current
        desired = [ResourceKey.of(m) for m in plan.resources(target.manifests)]
        found = observe.list_live(target.cluster, target.name, desired,
                                  [k for k, _ in self.state.inventory_keys()], target.excluded_kind)
        self.view.listed, self.view.digest = found, found.digest
        return found

    def compare(self) -> None:
        """Compare (reusing a listing this step made), adopt from Argo CD when asked, record what was seen."""
        target, view = self.current, self.view
        self.state = record.remember_writes(self.state, target, view.written)
        found = view.prefetched if view.prefetched is not None else self.list_live()
        view.prefetched = None
        compared = self.compare_with(found)
        source = target.app.annotation(constants.ANNOTATION_ADOPT_FROM_ARGOCD).strip()
        if compared.claimed and source:
            adopted = execute.adopt_from_argocd(self.ctx.runtime.cluster(target.app.destination), target, source)
            self.notes = dataclasses.replace(self.notes, adoption_refused=adopted.refused)
            if not adopted.refused:
                for entry in adopted.entries:
                    self.changes.add(entry)
                waves = {t.key: t.wave for t in target.tasks if not t.hook}
                keys = [ResourceKey.of(m) for m in plan.resources(target.manifests)]
                self.state = record.inventory(self.state, [*self.state.inventory_keys(),
                                                            *((k, waves.get(k, 0)) for k in keys)])
                compared = self.compare_with(self.list_live())
        view.current = True
        for key in target.hook_keys:
            view.live.pop(key, None)
        self.reread(target.hook_keys)
        self.comparison = compared.comparison
        now = self.ctx.iso()
        self.notes = dataclasses.replace(self.notes, claimed=compared.claimed, orphans=observe.orphans(target, now))
        self.state = record.observed(self.state, target, self.comparison, view.live, self.notes, now)
        if self.state.sync_status is SyncStatus.OUT_OF_SYNC:  # who drifted it, when the audit log told us
            self.state = record.attributed(self.state, index.writes(self.ctx.runtime.store, self.ctx.name),
                                           self.ctx.clock.now(), now)
        else:
            self.state = record.drift_kept(self.state, self.ctx.clock.now())

    def compare_with(self, found: observe.Listing) -> observe.Compared:
        target = self.current
        compared = observe.compare_all(target.cluster, target.app, target.config, target.manifests, found.live,
                                       hooks=frozenset(target.hook_keys), cache=self.state.memo.comparisons)
        self.state = record.compared(self.state, compared.cache)
        self.view.live = dict(found.live)
        return compared

    def reread(self, keys: Iterable[ResourceKey]) -> None:
        for key, found in observe.read(self.current.cluster, keys):
            if found is None:
                self.view.live.pop(key, None)
            else:
                self.view.live[key] = found

    def relist_unserved(self) -> None:
        """A kind not served when the step began may be now: a CRD of this sync Established meanwhile."""
        if self.facts.unserved:
            self.facts = dataclasses.replace(self.facts, unserved=observe.unserved(self.current.cluster,
                                                                                   self.current.tasks))

    def observation(self) -> decision.Observation:
        target, resources, facts = self.current, self.comparison.resources, self.facts
        return decision.Observation(
            app=target.name, revision=target.desired.revision, tasks=target.tasks, live=dict(self.view.live),
            out_of_sync=frozenset(r.key for r in resources if r.status is not SyncStatus.SYNCED) | facts.stale,
            dry_run_errors={r.key: r.error for r in resources if r.error.startswith("dry-run failed")},
            inventory=tuple(i for i in self.state.inventory_keys() if not target.excluded_kind(i[0])),
            unserved=facts.unserved, missing_namespaces=facts.missing_namespaces, violations=facts.violations,
            synced=self.comparison.status is SyncStatus.SYNCED,
            auto_synced=self.state.automation.synced == self.marker(target.app, target.desired.revision),
            automated_disabled=self.state.automation.disabled, now=self.ctx.clock.now(),
            health_scripts=target.health_scripts,
        )

    def windowed(self, policy: decision.Policy) -> decision.Policy:
        """An automated sync the project's syncWindows block now does not start: a condition says why, and the
        poll's next refresh after the window opens starts it. A running operation goes on."""
        op = self.state.operation
        if not policy.automated or (op is not None and op.running):
            return policy
        blocked = sync_window(self.current.config, self.current.app, manual=False, now=self.ctx.clock.now())
        if not blocked:
            return policy
        if self.comparison.status is not SyncStatus.SYNCED:
            self.state = record.noted(self.state, {"type": syncwindows.CONDITION, "message": blocked,
                                                   "at": self.ctx.iso()})
        return dataclasses.replace(policy, automated=False)

    def gate(self, op: app_state.Operation) -> str:
        """Why this operation may not write (an app that requires a plan: `step.plangate`), or ""."""
        target = self.current
        if op.request.dry_run or op.request.rollback or op.progress.checked:
            return ""
        out_of_sync = [r.key for r in self.comparison.resources
                       if r.status is not SyncStatus.SYNCED and not r.requires_pruning]
        refused = plangate.check(self.ctx.runtime.store, target.app, target.project, op.id, target.manifests,
                                 self.view.live, out_of_sync)
        if refused:
            self.state = record.noted(self.state, {"type": plangate.CONDITION, "message": refused,
                                                   "at": self.ctx.iso()})
        return refused

    def out_of_sync(self) -> set[ResourceKey]:
        """The objects this step's comparison did not find Synced (ApplyOutOfSyncOnly and the dry-run read it)."""
        return {r.key for r in self.comparison.resources if r.status is not SyncStatus.SYNCED}

    def unhealthy(self) -> list[ResourceKey]:
        """The app's resources whose live object is not Healthy (or is missing), hooks and prunes aside."""
        scripts = self.current.health_scripts
        return [r.key for r in self.state.resources if not r.requires_pruning
                and not observe.settled(self.view.live.get(r.key), scripts)]

    def next_check(self, keys: Iterable[ResourceKey], since: float = 0.0) -> float:
        """Seconds until the next step looks at `keys` again: when what they wait for can be done."""
        objects = [obj for key in keys if (obj := self.view.live.get(key)) is not None]
        return awaited.next_check(objects, self.ctx.clock.now(), since=since)

    def await_health(self) -> None:
        """An operation ended with its app Progressing (its last group applied, not waited for, as Argo CD
        does): what is not Healthy is read again for a moment (`HEALTH_AWAIT`, within the budget), so an
        app Healthy moments after its apply ends in this step instead of a follow-up step. The listing's
        digest is kept to what was read, for the quiet record."""
        ctx, view = self.ctx, self.view
        until = min(ctx.deadline, ctx.clock.monotonic() + awaited.HEALTH_AWAIT)
        keys = self.unhealthy()
        every = awaited.first_look(len(keys))
        while self.state.health is HealthStatus.PROGRESSING and ctx.clock.monotonic() + every <= until:
            ctx.clock.pause(every)
            self.reread(keys)
            keys = self.unhealthy()
            self.state = record.reassessed(self.state, view.live, self.current.health_scripts)
            every *= awaited.HEALTH_BACKOFF
        if view.current and view.listed is not None:
            hooks = self.current.hook_keys
            view.digest = observe.listing({k: v for k, v in view.live.items() if k not in hooks},
                                          view.listed.kinds, view.listed.unserved).digest

    def add(self, entries: Iterable[ChangeEntry]) -> None:
        for entry in entries:
            self.changes.add(record.with_diff(entry, self.comparison))

    def saw(self, done: execute.Executed) -> None:
        for key, found in done.read:
            if found is None:
                self.view.live.pop(key, None)
            else:
                self.view.live[key] = found


class Step:
    """One reconcile call's work (see the module docstring)."""

    def __init__(self, ctx: StepContext) -> None:
        self.ctx = ctx
        state, generation = app_state.load(ctx.runtime.store, ctx.name)
        self.saved = record.Saved.loaded(state, generation)
        self.seen_status = (state.sync_status, state.health)
        self.app: Application | None = None
        self.changes = ChangeSet()
        self.eye = Observer(ctx, state, self.changes)
        self.end = End()

    @property
    def state(self) -> app_state.AppState:
        """The app's state as it stands: one value, shared with the observer, replaced by each transition."""
        return self.eye.state

    @state.setter
    def state(self, new: app_state.AppState) -> None:
        self.eye.state = new

    # -- the step -------------------------------------------------------------------------------------

    def run(self) -> None:
        """Observe and advance; a problem becomes a condition (and fails or postpones a running operation)."""
        try:
            self.observe_and_advance()
        except TemporaryError as exc:
            self.problem("ComparisonError", str(exc))
            op = self.state.operation
            if op is not None and op.running:
                # An API server that does not answer is waited out, up to the retry policy. Otherwise,
                # before its first write or after repeated failures, the operation fails (an automated one
                # is retried with its backoff); mid-way, a passing blip only postpones the next step.
                if unreachable(exc):
                    wait_out(self, exc)
                elif not op.progress.checked or op.retry.step_errors >= MAX_STEP_ERRORS:
                    self.finish(OperationPhase.FAILED, str(exc))
                else:
                    self.state = record.step_failed(self.state)
                    self.end.continue_after = exc.delay
        except PermanentError as exc:
            self.problem("InvalidSpecError" if isinstance(exc, ProjectViolation) else "ComparisonError", str(exc))
            op = self.state.operation
            if op is not None and op.running:
                self.state = record.not_retryable(self.state)
                self.finish(OperationPhase.FAILED, str(exc))
        if self.end.quiet_hit:
            if self.end.quiet_expired:
                self.save()  # the state as loaded less that condition (`reconciled_at` and the quiet record kept)
            return
        at = self.ctx.iso()
        since = record.health_follow_since(self.state, self.end.continue_after, self.ctx.clock.now())
        if since is not None:  # the next look when what is still Progressing can be Healthy (`health.awaited`)
            self.end.continue_after = self.eye.next_check(self.eye.unhealthy(), since)
        self.state = record.reconciled(self.state, at, quiet_record(self))
        self.save()

    def observe_and_advance(self) -> None:
        ctx, runtime = self.ctx, self.ctx.runtime
        app: Application = runtime.app(ctx.name)
        op = self.state.operation
        if op is not None and op.running and op.request.sync_options:  # the operation's own, beside the app's
            extra = tuple(o for o in op.request.sync_options if o not in app.sync_policy.sync_options)
            app = dataclasses.replace(app, sync_policy=dataclasses.replace(
                app.sync_policy, sync_options=app.sync_policy.sync_options + extra))
        self.app = app
        config = runtime.config()
        project = config.projects[app.project]
        problems = rules.check_source(project, app) + rules.check_destination(project, app.destination)
        if problems:
            raise ProjectViolation(project.name, problems)
        op = self.state.operation
        running = op is not None and op.running
        pinned = op.revision if op is not None and running else ""  # a multi-source one: each source's, joined
        if not running and len(ctx.head) == 40 and not app.sources and charts.kind_of(app.source) == charts.GIT:
            pinned = ctx.head  # resolved by this tick's ls-remote of the repository
        warnings: list[str] = []
        sha, manifests = runtime_render(runtime)(runtime, app, pinned, warnings)
        sha, manifests = deletion.desired(app, sha, manifests)
        self.state = record.resolved(self.state, app, sha)
        cluster = sync_cluster(runtime, config.argo_settings, project, app)
        children = None
        if app.annotation(appofapps.ANNOTATION_MODE) != "apply":  # Application objects become child apps
            children = ChildCluster(cluster, runtime.store, app.name)
            cluster = cast(KubeCluster, children)  # the same calls; it hands every other kind on
        desired = place(cluster, config.argo_settings, app, sha, manifests, tuple(warnings))
        self.eye.target = Target(app, project, config, cluster, children, desired)
        self.eye.notes = record.Notes(desired.warnings, tuple(desired.excluded))
        if self.eye.quiet_path():
            self.end.quiet_hit = True
            kept = self.state
            self.state = record.drift_expired(kept, self.ctx.clock.now())  # its hour may end in a no-op
            self.end.quiet_expired = self.state is not kept
            return
        if ctx.look:  # no quiet answer: the step that may act takes the lease first (`step.reconcile.look`)
            return
        self.eye.target = self.eye.target.planned(self.eye.naming())
        policy = self.observed_facts()
        if deletion.before_prune(self):  # an app being deleted runs its PreDelete hooks first
            self.advance(policy)
            op = self.state.operation
            if self.end.deployed and op is not None and op.phase is OperationPhase.SUCCEEDED \
                    and self.end.continue_after is None:
                self.eye.await_health()
            deletion.after_prune(self)  # an app being deleted: its PostDelete hooks, then it is forgotten
        self.end.observed = True

    def observed_facts(self) -> decision.Policy:
        """The comparison and the cluster facts; the policy the decision then follows."""
        target = self.eye.current
        app = target.app
        violations = ""
        try:
            # an app of apps' children are not objects in a cluster: `generated.merge` scopes them instead
            # (a child may use only what the parent's project allows)
            checked = target.manifests if target.children is None else [
                m for m in target.manifests if not appofapps.is_child_object(m)]
            rules.enforce(target.project, app, checked, target.desired.namespaced)
        except ProjectViolation as exc:
            violations = str(exc)
        self.eye.compare()
        if self.state.origin.rebuilt:
            self.state = record.inventory(self.state, [(k, 0) for k, obj in self.eye.view.live.items()
                                                       if owned_by(obj, app.name) and k not in target.hook_keys])
        op = self.state.operation
        namespace = policy_of(app).create_namespace
        self.eye.facts = Facts(observe.unserved(target.cluster, target.tasks),
                               observe.missing_namespaces(target.cluster, target.tasks, self.eye.view.live, namespace),
                               violations, observe.namespace_stale(target, namespace)
                               if op is not None and op.running and not op.progress.checked else frozenset())
        if op is not None and op.running:
            self.state = record.forgiven(self.state)  # observed fine: earlier blips are forgiven
        # a generated app being deleted is pruned whatever the windows say (Argo CD never blocks deletion)
        deleting = generated.is_deleting(app)
        policy = policy_of(app) if deleting else self.eye.windowed(policy_of(app))
        return policy if self.ctx.automate or deleting else dataclasses.replace(policy, automated=False)

    def advance(self, policy: decision.Policy) -> None:
        """Decide → execute → record → save while the steps need no waiting, within the budget."""
        ctx, first = self.ctx, True
        while True:
            found = decision.decide(self.eye.observation(), self.state.operation, policy)
            self.state = record.decided(self.state, found)
            step = found.step
            if isinstance(step, decision.Nothing):
                if step.sync_error:
                    self.problem("SyncError", step.sync_error, unknown=False)
                if step.retry_at is not None:
                    self.end.continue_after = max(0.0, step.retry_at - ctx.clock.now())
                self.end.settled = step.retry_at is None
                break
            if isinstance(step, decision.Refuse):
                self.problem("SyncError", step.message, unknown=False)
                break
            if isinstance(step, decision.Wait):
                if ctx.clock.monotonic() + POLL_INTERVAL > ctx.deadline:
                    self.end.continue_after = self.eye.next_check(step.keys)
                    break
                ctx.clock.pause(POLL_INTERVAL)  # the bounded in-budget health poll
                self.eye.reread(step.keys)
                self.eye.relist_unserved()
                continue
            if not first and ctx.clock.monotonic() > ctx.deadline:
                self.end.continue_after = 0.0  # more work, no waiting: go on in the next call
                break
            first = False
            if not record.leaves_cluster_alone(step):
                record.fence(ctx.runtime.store, ctx.name, self.saved, ctx.keeper)
            self.act(step)
            if isinstance(step, decision.Finish | decision.Terminate):
                self.after_finish(policy)
                break

    def after_finish(self, policy: decision.Policy) -> None:
        """The comparison after the operation ended, and whether nothing more is to do (a quiet record)."""
        op = self.state.operation
        if op is not None and op.request.dry_run:
            return
        view = self.eye.view
        if view.current and view.listed is not None:
            # this step listed the app's kinds and has seen every write since: no second list
            live = {k: v for k, v in view.live.items() if k not in self.eye.current.hook_keys}
            view.prefetched = observe.listing(live, view.listed.kinds, view.listed.unserved)
            view.digest = view.prefetched.digest
        self.eye.compare()
        after = decision.decide(self.eye.observation(), self.state.operation, policy).step
        # nothing more to do from here (pure; nothing runs): this step's record is a quiet one
        self.end.settled = isinstance(after, decision.Nothing) and after.retry_at is None

    # -- execute and record ------------------------------------------------------------------------------

    def act(self, step: decision.Step) -> None:
        """Run one decided step (`step.execute`), record what it did, save (`leaves_cluster_alone`: with the next;
        a finish saves after the comparison that follows, so no reader sees the end beside the old status)."""
        op, target = self.state.operation, self.eye.current
        if isinstance(step, decision.StartOperation):
            sha = target.desired.revision
            self.state = record.healing(record.started(self.state, automated_operation(target.app, step, sha,
                                                                                       self.ctx.iso())))
            log.info("automated sync", app=target.name, revision=sha[:12], retry=step.retry_count)
            self.eye.target = target.planned(self.eye.naming())  # generateName hooks are named for this operation
            return
        assert op is not None
        if isinstance(step, decision.CreateNamespace | decision.DryRun) and (refused := self.eye.gate(op)):
            self.finish(OperationPhase.FAILED, refused)
        elif isinstance(step, decision.CreateNamespace):
            execute.create_namespace(target, step)
            created = step.namespace in self.eye.facts.missing_namespaces
            self.state = record.namespace_applied(self.state, step.namespace, created=created)
            self.eye.facts = dataclasses.replace(self.eye.facts,
                                             missing_namespaces=self.eye.facts.missing_namespaces - {step.namespace},
                                             stale=frozenset())
        elif isinstance(step, decision.DryRun):
            self.dry_run(step)
        elif isinstance(step, decision.DeleteHooks):
            self.eye.saw(execute.delete_hooks(target, step))
        elif isinstance(step, decision.RunTasks):
            self.run_tasks(step)
        elif isinstance(step, decision.Prune):
            if step.candidates and step.enabled and not step.dry_run:
                self.eye.view.current = False  # deletions are not in the view: the comparison after lists again
            done = execute.prune_step(target, step)
            self.eye.add(done.entries)
            self.state = record.pruned(self.state, step, done)
        elif isinstance(step, decision.StartSyncFail):
            self.state = record.sync_failing(self.state, step.message)
        elif isinstance(step, decision.Terminate):
            self.eye.view.current = False
            execute.terminate(target, step.hooks)
            self.finish(OperationPhase.FAILED, "Operation terminated")
        elif isinstance(step, decision.Finish):
            self.finish(step.phase, step.message)
        if not record.leaves_cluster_alone(step) and not (isinstance(step, decision.Finish | decision.Terminate)
                                          and not op.request.dry_run):
            self.save()

    def dry_run(self, step: decision.DryRun) -> None:
        op = self.state.operation
        done = execute.dry_run(self.eye.current, step, self.eye.view.live, self.eye.out_of_sync(),
                               operation_dry_run=bool(op and op.request.dry_run))
        temporary = {r.key for r in self.eye.comparison.resources if r.temporary}
        known = [ChangeEntry(k, Action.FAILED, m, temporary=k in temporary) for k, m in step.known_failures]
        self.state, shown, failure = record.dry_run(self.state, done, known, step)
        self.eye.add(shown)
        if failure:
            self.finish(OperationPhase.FAILED, failure)

    def run_tasks(self, step: decision.RunTasks) -> None:
        op, target, view = self.state.operation, self.eye.current, self.eye.view
        assert op is not None
        self.state, intended = record.hooks_intended(self.state, step)
        if intended:
            self.save()

        def written(key: ResourceKey, result: Manifest) -> None:
            view.written[key] = target.identity(result)

        done = execute.run_tasks(target, step, view.live, self.eye.out_of_sync(), op.id, written)
        self.eye.add(done.entries)
        self.state = record.ran(self.state, done)
        # Live as written (or, unchanged, as listed): what is not yet Healthy is read again, as a controller
        # may have moved its status since (no GET for a ConfigMap...), but not what the last group wrote: the
        # health await reads that once a controller can have acted, not milliseconds after the write.
        view.live.update(done.written)
        fresh = set(done.written) if step.final else set()
        self.eye.reread([t.key for t in step.tasks if t.key not in fresh
                         and not observe.settled(view.live.get(t.key), target.health_scripts)])

    def finish(self, phase: OperationPhase, message: str) -> None:
        op, app = self.state.operation, self.app
        assert op is not None
        automated_success = op.request.automated and phase is OperationPhase.SUCCEEDED and not op.request.dry_run
        marker = self.eye.marker(app, op.revision) if automated_success and app is not None else ""
        policy = policy_of(app) if app is not None else decision.Policy(retry_limit=0)
        end = record.Finished(self.eye.target, app, marker, policy, dict(self.eye.view.written), self.ctx.clock.now(),
                              self.ctx.iso())
        self.state, delay = record.finish(self.state, phase, message, end)
        op = self.state.operation
        assert op is not None
        if op.request.dry_run:
            return
        self.end.deployed = op.id  # the caller tells the image updater (which override it deployed)
        if delay is not None:
            self.end.continue_after = delay
        log.info("sync finished", app=self.ctx.name, operation=op.id, phase=op.phase, message=op.message,
                 automated=op.request.automated)

    def problem(self, kind: str, message: str, *, unknown: bool = True) -> None:
        self.state = record.condition(self.state, kind, message, self.ctx.iso(), unknown=unknown)
        log.warning("reconcile problem", app=self.ctx.name, condition=kind, message=message)

    def save(self) -> None:
        keep_index(self)
        op, state = self.state.operation, self.state
        settled = not (op is not None and op.running) and state.health is not HealthStatus.PROGRESSING
        self.saved = record.save(self.ctx.runtime.store, state, self.saved,
                                 settled=settled and self.end.continue_after is None)


def wait_out(step: Step, exc: TemporaryError) -> None:
    """The API server did not answer: the operation keeps what it did and its next step comes as a
    continuation after the retry policy's backoff (no step sleeps through an outage); with its retries
    spent it fails, saying what happened."""
    op = step.state.operation
    assert op is not None
    policy = policy_of(step.app) if step.app is not None else decision.Policy()
    now = step.ctx.clock.now()
    if op.retry.outage_since and now < op.retry.next_attempt_at:
        # triggered before the attempt is due (a refresh, a webhook, the poll): it spends no retry
        step.end.continue_after = op.retry.next_attempt_at - now
        return
    delay = decision.outage_delay(op, policy)
    if delay is None:
        step.finish(OperationPhase.FAILED, record.gave_up(op, str(exc), now, policy))
        return
    if isinstance(exc, ApiTooManyRequests):
        delay = max(delay, exc.delay)  # the server's Retry-After
    step.state = record.unreachable(step.state, str(exc), now, delay, policy)
    step.end.continue_after = delay
    log.warning("API server unreachable: the operation waits", app=step.ctx.name, operation=op.id,
                retry=op.retry.count + 1, limit=policy.outage_retries, next_in=delay)


def keep_index(step: Step) -> None:
    """Keep the resource index (`tidecd.state.index`) to the inventory, before the state says it is: an
    audit event about an object the app just took over finds the app. Only what changed is written; a
    state of before the index marks its whole inventory (markers already there cost nothing)."""
    keys = frozenset(k for k, _ in step.state.inventory_keys())
    value = index.digest(keys)
    if value == step.state.memo.indexed:
        return
    before = index.held(step.state.origin.raw)  # what the state as last read or written says it holds
    index.update(step.ctx.runtime.store, step.ctx.name, keys - before, before - keys)
    step.state = record.indexed(step.state, value)


def quiet_record(step: Step) -> dict[str, str]:
    """What the next no-op compares, when the step ended settled and its result followed only from
    inputs and live objects (else nothing: the next step compares in full)."""
    end, eye = step.end, step.eye
    if not (end.observed and end.settled and eye.view.digest and end.continue_after is None
            and step.state.health is not HealthStatus.PROGRESSING and not eye.notes.claimed
            and not eye.notes.adoption_refused and eye.may_be_quiet()):
        return {}
    return quiet.record(eye.inputs or eye.inputs_digest(), eye.view.digest)


def touched(step: Step) -> tuple[str, ...]:
    """Other apps to refresh: child apps the step changed, and a parent whose child's status moved (its
    waves wait on it, and its resource list shows it)."""
    children = step.eye.target.children if step.eye.target is not None else None
    parent: list[str] = []
    state, ctx = step.state, step.ctx
    if (state.sync_status, state.health) != step.seen_status:
        owner = ctx.runtime.config().owners.get(ctx.name, "")
        if generated.owner_kind(owner) == "Application":
            parent = [generated.owner_name(owner)]
    return tuple(dict.fromkeys([*(children.touched if children else ()), *parent]))


def _unix(iso: str) -> int:
    try:
        return int(datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return 0
