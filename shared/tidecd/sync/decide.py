"""The pure heart of an operation: given what was observed and what is recorded, the next step.

`decide(observation, operation, policy)` never calls a cluster or a store and never waits. The reconcile
step executes what it returns (cluster calls only), records the result, observes again and asks again,
until the answer is to wait longer than its budget or to do nothing. Because the decision starts from the
recorded task results every time, a step killed at any point is resumed by the next one.

How an operation advances (gitops-engine's `sync_context.go`, matched):
1. Before its first write, project rules and ownership are checked and every object it will apply is
   dry-run on the server (`DryRun`): existing objects by the comparison's own dry-run, new ones now, except
   kinds a CRD of the same sync introduces (or `SkipDryRunOnMissingResource=true`). Any failure fails the
   operation with nothing written.
2. Tasks run in groups: phase (PreSync, Sync, PostSync) → wave → Namespaces and CRDs before the rest of
   their wave. A group starts when every earlier group has finished: hooks completed, and, when the sync
   has more than one group, resources healthy (Healthy or Suspended, or no health check). Degraded fails.
3. The last group is not waited for: once applied, the operation goes on to prune and succeeds, even if
   those objects are still Progressing (gitops-engine: "successful EVEN if those objects subsequently
   degraded"). So a sync with a single group never waits at all, and the last group's health does not
   decide the result; the app's health shows it, and `app wait --health` waits for it.
4. A failed task runs the SyncFail hooks, then fails the operation. Prune runs after every group
   succeeded; the operation keeps its inventory whenever it fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Mapping
from dataclasses import dataclass, field

from tidecd import health
from tidecd.base import constants, ownership
from tidecd.base.clock import unix
from tidecd.base.model import Action, HealthStatus, Manifest, ResourceKey
from tidecd.health.crd import established_at
from tidecd.state.app import Operation, OperationPhase, TaskPhase, TaskResult
from tidecd.sync.plan import PHASE_ORDER, Phase, Task
from tidecd.sync.prune import PRUNE_RESULTS, next_wave, prune_candidates

# Applied (and healthy) before the rest of their wave: custom resources need their CRD served first.
FOUNDATION_KINDS = frozenset({"Namespace", "CustomResourceDefinition"})
SKIP_DRY_RUN = "SkipDryRunOnMissingResource=true"
ALLOW_TAKEOVER = "AllowTakeover=true"
REPLACE = "Replace=true"
BEFORE_HOOK_CREATION = "BeforeHookCreation"
# An Established CRD's kind is waited for in discovery this long before its custom resources are applied
# anyway (and fail as unserved): the API server lists it moments after the condition (gitops-engine's
# ensureCRDReady waits for the condition; its apply then rereads discovery).
SERVE_GRACE_SECONDS = 30.0
SELF_HEAL_SECONDS, SELF_HEAL_FACTOR, SELF_HEAL_CAP_SECONDS = 2.0, 3.0, 300.0  # Argo CD's self-heal backoff


# Without syncPolicy.retry, an outage of the API server is still waited out, with Argo CD's default backoff
# (5 s, doubling, at most 3 min): 5 retries span 155 s, a control-plane restart or upgrade.
DEFAULT_OUTAGE_RETRIES = 5


@dataclass(frozen=True)
class Policy:
    """The app's sync policy, as the decision needs it."""

    automated: bool = False
    prune: bool = False
    self_heal: bool = False
    allow_empty: bool = False
    retry_limit: int = 0  # negative: forever
    backoff_seconds: float = 5.0
    backoff_factor: float = 2.0
    backoff_max_seconds: float = 180.0
    create_namespace: str = ""  # the destination namespace, when CreateNamespace=true
    # How often a running operation waits out an API server that does not answer: syncPolicy.retry.limit,
    # or DEFAULT_OUTAGE_RETRIES when the app sets no retry (negative: for ever).
    outage_retries: int = DEFAULT_OUTAGE_RETRIES
    retry_configured: bool = False  # the app sets syncPolicy.retry (the messages say whose limit it was)
    # ApplyOutOfSyncOnly=true: objects that compare Synced are no task of the sync (no write, no result)
    apply_out_of_sync_only: bool = False

    def retry_delay(self, retry_count: int) -> float:
        return min(self.backoff_seconds * self.backoff_factor ** retry_count, self.backoff_max_seconds)

    def may_retry(self, retry_count: int) -> bool:
        return self.retry_limit < 0 or retry_count < self.retry_limit


def outage_delay(op: Operation, policy: Policy) -> float | None:
    """Seconds until the next step of a running operation whose API server did not answer (the policy's
    backoff at the operation's retry count), or None: its retries are spent, and it fails. Each wait is one
    retry of the operation, as Argo CD counts a failed attempt, so one `limit` bounds both."""
    if 0 <= policy.outage_retries <= op.retry.count:
        return None
    return policy.retry_delay(op.retry.count)


def retry_delay(op: Operation, policy: Policy) -> float | None:
    """Seconds until a finished automated operation that failed is tried again (its backoff), or None: it
    succeeded, it was not automated, a retry cannot change its result, or its retries are spent."""
    if not op.request.automated or op.phase is OperationPhase.SUCCEEDED or not op.retry.retryable:
        return None
    if not policy.may_retry(op.retry.count):
        return None
    return policy.retry_delay(op.retry.count)


@dataclass(frozen=True)
class Observation:
    """Everything one decision looks at, frozen: desired tasks, live objects, comparison, cluster facts."""

    app: str
    revision: str
    tasks: tuple[Task, ...]  # the plan of the desired manifests (hooks included)
    live: Mapping[ResourceKey, Manifest]  # live objects of desired resources, hooks and the inventory
    # OutOfSync resources; and CreateNamespace's Namespace when it exists and managedNamespaceMetadata does not hold
    out_of_sync: frozenset[ResourceKey] = frozenset()
    dry_run_errors: Mapping[ResourceKey, str] = field(default_factory=dict)  # from the comparison
    inventory: tuple[tuple[ResourceKey, int], ...] = ()
    unserved: frozenset[tuple[str, str]] = frozenset()  # (group, kind) the cluster does not serve now
    missing_namespaces: frozenset[str] = frozenset()  # namespaces desired objects name that do not exist
    violations: str = ""  # project rules the desired objects break
    synced: bool = False  # the comparison found everything Synced
    auto_synced: bool = False  # an automated sync recorded this revision and source spec already (its marker)
    automated_disabled: bool = False
    now: float = 0.0
    health_scripts: Mapping[str, str] = field(default_factory=dict)  # argocd-cm Lua checks, "group/Kind"

    @property
    def crds(self) -> dict[tuple[str, str], ResourceKey]:
        """The CRDs among the desired objects, by the (group, kind) each introduces."""
        out = {}
        for task in self.tasks:
            if task.key.kind == "CustomResourceDefinition" and not task.hook:
                spec = task.obj.get("spec") or {}
                out[(str(spec.get("group", "")), str((spec.get("names") or {}).get("kind", "")))] = task.key
        return out

    @property
    def crd_kinds(self) -> frozenset[tuple[str, str]]:
        """Kinds introduced by CRDs among the desired objects."""
        return frozenset(self.crds)


# --- steps ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Nothing:
    """No operation to advance and none to start."""

    reason: str = ""
    retry_at: float | None = None  # a failed automated operation will be retried from then on
    # Argo CD's `SyncError` condition: automated sync will not try this revision again after its failure
    # (alerting reads it); shown while this holds, gone once a sync succeeds or a new revision syncs
    sync_error: str = ""


@dataclass(frozen=True)
class Refuse:
    """The policy would start an operation, but it is unsafe; recorded as a condition, nothing runs."""

    message: str


@dataclass(frozen=True)
class StartOperation:
    """Record a new automated operation (the reconcile step then advances it)."""

    retry_count: int = 0
    prune: bool = False
    self_heal_attempts: int = 0  # a self-heal's: the repairs of this revision so far, this one included
    # a self-heal's: only the resources that drifted (Argo CD's autoSync puts the OutOfSync ones in
    # `operation.sync.resources`, a selective sync: no hooks run); None: the whole app
    only: tuple[ResourceKey, ...] | None = None


@dataclass(frozen=True)
class CreateNamespace:
    namespace: str


@dataclass(frozen=True)
class DryRun:
    """Server-side dry-run of `tasks`; the operation is marked checked only if every one passes.

    Before the first write every task is dry-run; `later` names those in a group after the first one that
    writes. Argo CD's dry-run is kubectl's client-side one (no admission), so an object refused only for
    what an earlier group of the same sync creates (a Pod's ServiceAccount, a quota, a Role) syncs there:
    such a refusal of a `later` object (not 400/422, which are about the object itself) waits for its
    group, and `at_group` is its dry-run there, before any write of that group."""

    tasks: tuple[Task, ...]
    known_failures: tuple[tuple[ResourceKey, str], ...] = ()  # failed already in the comparison's dry-run
    later: frozenset[ResourceKey] = frozenset()
    at_group: bool = False


@dataclass(frozen=True)
class DeleteHooks:
    """Old copies of hooks (BeforeHookCreation) or finished hooks (HookSucceeded / HookFailed)."""

    keys: tuple[ResourceKey, ...]
    reason: str = ""


@dataclass(frozen=True)
class RunTasks:
    """Apply the resources and create the hooks of one group (a hook is recorded Pending first)."""

    phase: Phase
    wave: int
    tasks: tuple[Task, ...]
    final: bool  # the last group: nothing waits for it


@dataclass(frozen=True)
class Prune:
    candidates: tuple[tuple[ResourceKey, int], ...]
    enabled: bool
    dry_run: bool = False
    last: bool = True  # no wave left to prune after these candidates (`sync.prune.next_wave`)


@dataclass(frozen=True)
class Wait:
    keys: tuple[ResourceKey, ...]
    message: str


@dataclass(frozen=True)
class Finish:
    phase: OperationPhase
    message: str


@dataclass(frozen=True)
class StartSyncFail:
    """A task failed: remember why and run the SyncFail hooks before failing the operation."""

    message: str


@dataclass(frozen=True)
class Terminate:
    """Stop the operation: delete its running hooks, then fail it (as gitops-engine's Terminate)."""

    hooks: tuple[ResourceKey, ...]


Step = (Nothing | Refuse | StartOperation | CreateNamespace | DryRun | DeleteHooks | RunTasks | Prune | Wait
        | Finish | StartSyncFail | Terminate)


@dataclass(frozen=True)
class Decision:
    step: Step
    results: tuple[TaskResult, ...] = ()  # the operation's task results, brought up to date with `live`
    text: str = ""  # the operation's step line: what it is on or waits for


# --- deciding -------------------------------------------------------------------------------------------


def decide(obs: Observation, op: Operation | None, policy: Policy) -> Decision:
    """The next step for the app's operation (or for starting one)."""
    if op is None or op.phase.completed:
        return Decision(_automated(obs, op, policy))
    results = _assess(obs, op)
    step = _advance(obs, op, policy, results)
    return Decision(step, tuple(results.values()), describe(step))


def _automated(obs: Observation, op: Operation | None, policy: Policy) -> Step:
    if not policy.automated or obs.automated_disabled:
        return Nothing("automated sync is off")
    if obs.synced:
        return Nothing("synced")
    if (op is not None and op.request.automated and op.phase is not OperationPhase.SUCCEEDED
            and op.revision == obs.revision):
        failed = f"Failed last sync attempt to [{obs.revision}]: {op.message}"
        if not op.retry.retryable:
            return Nothing(f"automated sync of {obs.revision[:12]} failed for a reason a retry cannot change; "
                           "not retried", sync_error=failed)
        if not policy.may_retry(op.retry.count):
            return Nothing(f"automated sync of {obs.revision[:12]} failed; retries exhausted", sync_error=failed)
        if obs.now < op.retry.next_attempt_at:
            return Nothing("waiting to retry", retry_at=op.retry.next_attempt_at)
        return _start(obs, policy, op.retry.count + 1)
    if obs.auto_synced and not policy.self_heal:
        return Nothing("this revision was synced automatically already")
    if obs.auto_synced:  # self-heal: a repair of the revision synced already, after Argo CD's backoff
        attempts = op.request.self_heal_attempts if op is not None and op.revision == obs.revision else 0
        due = (unix(op.finished_at) if op is not None else 0.0) + self_heal_delay(attempts)
        if attempts and obs.now < due:
            return Nothing(f"self-heal backoff: repair {attempts + 1} of {obs.revision[:12]}", retry_at=due)
        return _start(obs, policy, 0, attempts + 1, only=tuple(sorted(obs.out_of_sync)))
    return _start(obs, policy, 0)


def self_heal_delay(attempts: int) -> float:
    """Argo CD's self-heal backoff (`selfHealRemainingBackoff`, before the time since the last operation
    ended): the first repair of a revision at once, then 2 s, 6 s, 18 s ... at most 300 s after the
    previous one ended (argocd-cmd-params-cm `controller.self.heal.timeout.seconds`, `.backoff.factor`,
    `.backoff.cap.seconds`, at their defaults)."""
    if attempts <= 0:
        return 0.0
    return min(SELF_HEAL_SECONDS * SELF_HEAL_FACTOR ** (attempts - 1), SELF_HEAL_CAP_SECONDS)


def _start(obs: Observation, policy: Policy, retry_count: int, self_heal_attempts: int = 0,
           only: tuple[ResourceKey, ...] | None = None) -> Step:
    resources = [t for t in obs.tasks if not t.hook]
    desired = {t.key for t in resources}
    if policy.prune and not policy.allow_empty and not resources and prune_candidates(obs.inventory, desired):
        return Refuse("automated sync refused: it would prune every resource of the app (the source declares "
                      "none); set syncPolicy.automated.allowEmpty: true to allow it, or sync by hand")
    return StartOperation(retry_count=retry_count, prune=policy.prune, self_heal_attempts=self_heal_attempts,
                          only=only)


def selected(obs: Observation, op: Operation) -> list[Task]:
    """The operation's tasks: a selective sync takes only its resources and no hooks."""
    only = op.only_keys()
    if only is None:
        return list(obs.tasks)
    return [t for t in obs.tasks if not t.hook and t.key in only]


def out_of_sync_only(tasks: list[Task], obs: Observation,
                     recorded: Container[tuple[ResourceKey, str]]) -> list[Task]:
    """`ApplyOutOfSyncOnly=true` (gitops-engine's `filterOutOfSyncTasks`): a resource that exists and compares
    Synced is no task of the sync at all: not applied, not dry-run, no result, and its wave is not waited
    for. Hooks, new objects and OutOfSync ones stay; so does a task this operation already ran (it compares
    Synced because it was applied)."""
    return [t for t in tasks if t.hook or t.key not in obs.live or t.key in obs.out_of_sync
            or (t.key, t.phase.value) in recorded]


def group_of(task: Task) -> tuple[int, int, int]:
    foundation = 0 if (task.key.kind in FOUNDATION_KINDS and not task.hook) else 1
    return PHASE_ORDER.index(task.phase), task.wave, foundation


def _is_ours(live: Manifest | None, op: Operation) -> bool:
    notes = ((live or {}).get("metadata") or {}).get("annotations") or {}
    return bool(live) and notes.get(constants.ANNOTATION_OPERATION) == op.id


def _assess(obs: Observation, op: Operation) -> dict[tuple[ResourceKey, str], TaskResult]:
    """The recorded results, with running tasks judged again from the live objects."""
    out: dict[tuple[ResourceKey, str], TaskResult] = {}
    for recorded in op.results:
        result = dataclasses.replace(recorded)
        live = obs.live.get(result.key)
        if result.hook and result.phase is TaskPhase.PENDING and _is_ours(live, op):
            result.phase, result.uid = TaskPhase.RUNNING, str(live["metadata"].get("uid", ""))  # type: ignore[index]
        if result.phase is TaskPhase.RUNNING:
            if result.hook:
                _judge_hook(result, live, op, obs.health_scripts)
            elif result.action is not Action.PRUNED:
                _judge_resource(result, live, obs.health_scripts)
        out[result.id] = result
    return out


def _judge_hook(result: TaskResult, live: Manifest | None, op: Operation, scripts: Mapping[str, str]) -> None:
    if live is None or not _is_ours(live, op):
        # gone (deleted by a policy or by hand) after we created it: finished, as the blocking engine had it
        result.phase, result.message = TaskPhase.SUCCEEDED, result.message or "hook finished (gone)"
        return
    outcome = health.hook_outcome(live, scripts)
    if outcome.finished and outcome.succeeded:
        result.phase, result.message = TaskPhase.SUCCEEDED, outcome.message
    elif outcome.finished:
        detail = f": {outcome.message}" if outcome.message else ""
        result.phase, result.message = TaskPhase.FAILED, f"{result.sync_phase} hook failed{detail}"


def _judge_resource(result: TaskResult, live: Manifest | None, scripts: Mapping[str, str]) -> None:
    if live is None:
        return  # applied, not visible yet
    assessed = health.assess(live, scripts)
    if assessed is None or assessed.status in (HealthStatus.HEALTHY, HealthStatus.SUSPENDED):
        result.phase = TaskPhase.SUCCEEDED
    elif assessed.status is HealthStatus.DEGRADED:
        result.phase, result.message = TaskPhase.FAILED, f"Degraded: {assessed.message}"
    else:
        result.message = assessed.message


def _advance(obs: Observation, op: Operation, policy: Policy,
             results: dict[tuple[ResourceKey, str], TaskResult]) -> Step:
    if op.phase is OperationPhase.TERMINATING:
        return Terminate(tuple(r.key for r in results.values()
                               if r.hook and r.phase is TaskPhase.RUNNING and _is_ours(obs.live.get(r.key), op)))
    tasks = selected(obs, op)
    if policy.apply_out_of_sync_only:
        tasks = out_of_sync_only(tasks, obs, results)
    if not op.progress.checked:
        return _check(obs, op, policy, tasks)
    if op.request.dry_run:
        if not op.progress.pruned:
            return Prune(_candidates(obs, op), enabled=op.request.prune, dry_run=True)
        return Finish(OperationPhase.SUCCEEDED, "dry run: nothing written")
    cleanup = _finished_hooks_to_delete(obs, op, tasks, results)
    if cleanup:
        return DeleteHooks(cleanup, "hook delete policy")
    if op.failure:
        return _sync_fail(obs, op, tasks, results)
    main = [t for t in tasks if t.phase is not Phase.SYNC_FAIL]
    failed = [r for r in results.values() if r.phase is TaskPhase.FAILED and r.sync_phase != Phase.SYNC_FAIL]
    if failed:
        message = "; ".join(f"{r.key}: {r.message}" if r.message else f"{r.key} failed" for r in failed)
        if any(t.phase is Phase.SYNC_FAIL for t in tasks):
            return StartSyncFail(message)
        return Finish(OperationPhase.FAILED, message)
    groups = sorted({group_of(t) for t in main})
    final = groups[-1] if groups else None
    by_id = {(t.key, t.phase.value): t for t in main}
    running = [r for r in results.values() if r.phase is TaskPhase.RUNNING and r.id in by_id
               and (r.hook or group_of(by_id[r.id]) != final)]
    if running:
        return Wait(tuple(r.key for r in running), _waiting_text(running))
    pending = [t for t in main if (r := results.get((t.key, t.phase.value))) is None or r.phase is TaskPhase.PENDING]
    if pending:
        first = min(group_of(t) for t in pending)
        group = [t for t in pending if group_of(t) == first]
        old = [t.key for t in group if t.hook and BEFORE_HOOK_CREATION in t.delete_policies
               and (live := obs.live.get(t.key)) is not None and not _is_ours(live, op)]
        if old:
            if all((obs.live[k].get("metadata") or {}).get("deletionTimestamp") for k in old):
                return Wait(tuple(old), f"waiting for deletion of {_keys_text(old, 'hooks')}")
            return DeleteHooks(tuple(old), BEFORE_HOOK_CREATION)
        unlisted = _crds_not_listed_yet(obs, group)
        if unlisted:
            return Wait(unlisted, "waiting for the API server to serve the kinds of "
                                  + _keys_text(list(unlisted), "CRDs"))
        recheck = [t for t in group if t.key in op.progress.deferred_keys()]
        if recheck:
            return DryRun(tuple(recheck), at_group=True)
        is_final = first == final and not any(t.hook for t in pending)
        return RunTasks(group[0].phase, group[0].wave, tuple(group), final=is_final)
    pruning = _pruning(obs, op, results)
    if pruning is not None:
        return pruning
    pruned_failed = [r for r in results.values() if r.action is Action.FAILED]
    if pruned_failed:
        return Finish(OperationPhase.FAILED, "; ".join(f"{r.key}: {r.message}" for r in pruned_failed))
    return Finish(OperationPhase.SUCCEEDED, "successfully synced (all tasks run)")


def _check(obs: Observation, op: Operation, policy: Policy, tasks: list[Task]) -> Step:
    """Before the first write: project rules, ownership, then a server-side dry-run of everything."""
    if obs.violations:
        return Finish(OperationPhase.FAILED, obs.violations)
    conflicts = []
    for task in tasks:
        live = obs.live.get(task.key)
        other = ownership.claim(live, obs.app) if live is not None and not task.hook else None
        if other is None:
            continue
        if other.tool is ownership.Tool.ARGOCD:  # never overwritten: only `tidecd app adopt` moves it
            conflicts.append(f"{task.key}: {other.describe()}; not overwritten (move the app over with "
                             f"`tidecd app adopt {obs.app}`, see docs/moving-from-argocd.md)")
        elif other.installation != ownership.installation_id():
            conflicts.append(f"{task.key}: {other.describe()}; not overwritten")
        elif not task.has_option(ALLOW_TAKEOVER):
            conflicts.append(f"{task.key}: {other.describe()}; not taken over (add the sync option "
                             f"{ALLOW_TAKEOVER} to the object to move it to this app)")
    if conflicts:
        return Finish(OperationPhase.FAILED, "; ".join(conflicts))
    if not op.request.dry_run and policy.create_namespace and (
            policy.create_namespace in obs.missing_namespaces
            or ResourceKey("", "Namespace", "", policy.create_namespace) in obs.out_of_sync):
        return CreateNamespace(policy.create_namespace)  # created, or its managedNamespaceMetadata applied
    crd_kinds, declared_namespaces = obs.crd_kinds, {t.key.name for t in tasks if t.key.kind == "Namespace"}
    to_run, known = [], []
    for task in tasks:
        if task.phase is Phase.SYNC_FAIL:
            continue
        group_kind = (task.key.group, task.key.kind)
        live = obs.live.get(task.key)
        if group_kind in obs.unserved and (group_kind in crd_kinds or task.has_option(SKIP_DRY_RUN)):
            continue  # its CRD comes with this sync
        if task.key.namespace in obs.missing_namespaces and task.key.namespace in declared_namespaces:
            continue  # its Namespace comes with this sync
        if task.hook:
            if live is not None and BEFORE_HOOK_CREATION in task.delete_policies:
                continue  # recreated, not patched: the old copy's immutable fields do not matter
            to_run.append(task)
        elif live is None or op.request.dry_run:
            to_run.append(task)
        elif task.key in obs.dry_run_errors and not task.has_option(REPLACE):
            known.append((task.key, obs.dry_run_errors[task.key]))
        # otherwise the comparison's dry-run of this object passed already
    return DryRun(tuple(to_run), tuple(known), later_than_first_write(obs, tasks, to_run))


# Refusals about the object itself (malformed, a field invalid or unknown): no earlier write can lift them.
INTRINSIC_REFUSALS = frozenset({400, 422})


def waiting_for_their_group(step: DryRun, refused: Mapping[ResourceKey, int]) -> frozenset[ResourceKey]:
    """The refusals of a dry-run before the first write (HTTP status by object) that wait for their group:
    objects `later` than the first write, refused for something around them (403: admission found no
    ServiceAccount, a quota, a webhook; 404: something they name is missing; a temporary error)."""
    if step.at_group:
        return frozenset()
    return frozenset(key for key, status in refused.items()
                     if key in step.later and status not in INTRINSIC_REFUSALS)


def _crds_not_listed_yet(obs: Observation, group: list[Task]) -> tuple[ResourceKey, ...]:
    """The CRDs of this sync, Established moments ago, whose kinds `group` creates and discovery does not
    list yet: applied now, those objects would fail as unserved."""
    if not obs.unserved:  # every decision of every group passes here: nothing unserved, nothing to look up
        return ()
    crds, waiting = obs.crds, set()
    for task in group:
        crd = crds.get((task.key.group, task.key.kind))
        live = obs.live.get(crd) if crd is not None and (task.key.group, task.key.kind) in obs.unserved else None
        since = established_at(live) if live is not None else None
        if crd is not None and since is not None and obs.now - since < SERVE_GRACE_SECONDS:
            waiting.add(crd)
    return tuple(sorted(waiting))


def later_than_first_write(obs: Observation, tasks: list[Task], checked: list[Task]) -> frozenset[ResourceKey]:
    """The `checked` tasks in a group after the first group that writes something (a hook, a new object, an
    OutOfSync or Replace=true one): what that write creates or changes may be what admits them."""
    writes = [group_of(t) for t in tasks if t.phase is not Phase.SYNC_FAIL and (
        t.hook or t.key not in obs.live or t.key in obs.out_of_sync or t.has_option(REPLACE))]
    if not writes:
        return frozenset()
    first = min(writes)
    return frozenset(t.key for t in checked if group_of(t) > first)


def _candidates(obs: Observation, op: Operation) -> tuple[tuple[ResourceKey, int], ...]:
    only = op.only_keys()
    inventory = [(k, w) for k, w in obs.inventory if only is None or k in only]
    desired = {t.key for t in obs.tasks if not t.hook}
    return tuple(prune_candidates(inventory, desired))


def _pruning(obs: Observation, op: Operation, results: Mapping[tuple[ResourceKey, str], TaskResult]) -> Step | None:
    """Prune one wave at a time, highest first, each once the objects the previous one deleted are gone, and
    the operation ends only when they are (gitops-engine's `prunedTasksPendingDelete`); None: done."""
    pruned = [r.key for r in results.values() if not r.hook and r.action is Action.PRUNED]
    going = [k for k in pruned if obs.live.get(k) is not None]
    if going:
        return Wait(tuple(going), f"waiting for pruned {_keys_text(going, 'objects')} to be deleted")
    if op.progress.pruned:
        return None
    candidates = _candidates(obs, op)
    if not op.request.prune:  # nothing is deleted: every candidate is reported in one pass
        return Prune(candidates, enabled=False)
    done = {r.key for r in results.values() if not r.hook and r.action in PRUNE_RESULTS}
    wave, last = next_wave(candidates, done)
    return Prune(wave, enabled=True, last=last)


def _finished_hooks_to_delete(obs: Observation, op: Operation, tasks: list[Task],
                              results: dict[tuple[ResourceKey, str], TaskResult]) -> tuple[ResourceKey, ...]:
    out = []
    for task in tasks:
        result = results.get((task.key, task.phase.value))
        if not task.hook or result is None or not result.phase.completed:
            continue
        wanted = "HookSucceeded" if result.phase is TaskPhase.SUCCEEDED else "HookFailed"
        live = obs.live.get(task.key)
        if (wanted in task.delete_policies and _is_ours(live, op)
                and not (live or {}).get("metadata", {}).get("deletionTimestamp")):
            out.append(task.key)
    return tuple(dict.fromkeys(out))


def _sync_fail(obs: Observation, op: Operation, tasks: list[Task],
               results: dict[tuple[ResourceKey, str], TaskResult]) -> Step:
    hooks = [t for t in tasks if t.phase is Phase.SYNC_FAIL]
    hook_results = [results.get((t.key, t.phase.value)) for t in hooks]
    pending = [t for t, r in zip(hooks, hook_results, strict=True) if r is None or r.phase is TaskPhase.PENDING]
    if pending:
        return RunTasks(Phase.SYNC_FAIL, pending[0].wave, tuple(pending), final=False)
    running = [r for r in hook_results if r is not None and r.phase is TaskPhase.RUNNING]
    if running:
        return Wait(tuple(r.key for r in running), _waiting_text(running))
    failed = [r for r in hook_results if r is not None and r.phase is TaskPhase.FAILED]
    suffix = "; one or more SyncFail hooks failed: " + ", ".join(str(r.key) for r in failed) if failed else ""
    return Finish(OperationPhase.FAILED, op.failure + suffix)


def _keys_text(keys: list[ResourceKey], more: str) -> str:
    first = keys[0]
    text = f"{first.group}/{first.kind}/{first.namespace}/{first.name}" if first.namespace else \
        f"{first.group}/{first.kind}/{first.name}"
    return f"{text} and {len(keys) - 1} more {more}" if len(keys) > 1 else text


def _waiting_text(running: list[TaskResult]) -> str:
    hooks = [r.key for r in running if r.hook]
    if hooks:
        return f"waiting for completion of hook {_keys_text(hooks, 'hooks')}"
    return f"waiting for healthy state of {_keys_text([r.key for r in running], 'resources')}"


def describe(step: Step) -> str:
    """The operation's step line for `app get`."""
    match step:
        case Wait(message=message):
            return message
        case RunTasks(phase=phase, wave=wave, tasks=tasks):
            return f"{phase.value} wave {wave}: applying {len(tasks)} task(s)"
        case DryRun(tasks=tasks, at_group=True):
            return f"dry-run of {len(tasks)} object(s) before their wave"
        case DryRun(tasks=tasks):
            return f"dry-run of {len(tasks)} object(s) before the first write"
        case Prune(candidates=candidates):
            return f"pruning {len(candidates)} object(s)"
        case DeleteHooks(keys=keys, reason=reason):
            return f"deleting {_keys_text(list(keys), 'hooks')} ({reason})"
        case StartSyncFail():
            return "running SyncFail hooks"
        case Finish(message=message):
            return message
        case CreateNamespace(namespace=ns):
            return f"creating namespace {ns}"
        case Terminate():
            return "terminating"
    return ""
