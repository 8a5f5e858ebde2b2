"""Record: how what a step observed and did becomes the app's state, then one `save`.

The transitions are pure: each takes an AppState and what observe and execute returned, reads nothing
else (no cluster, no store, no clock but the `now` it is given), and returns a new AppState, leaving its
input as it was. The copies are shallow (`dataclasses.replace` of the parts that change, and new lists
where a list changes): an AppState holds the comparison cache and every task result, which a deep copy
per transition would copy several times per step; what is not changed is shared, and never changed in
place. The step holds the current value and replaces it with each result, until `save`, the one write:
a generation precondition (a lost race raises PreconditionFailed and the step re-reads), and `fence`
checks the app's lease before the cluster is touched.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from tidecd import health
from tidecd.base.clock import unix
from tidecd.base.model import Action, ChangeEntry, HealthResult, HealthStatus, Manifest, ResourceKey, SyncStatus
from tidecd.clients.store import LeaseKeeper, ObjectStore, PreconditionFailed
from tidecd.config.load import Application
from tidecd.diff import Comparison, fingerprint
from tidecd.state import app as app_state
from tidecd.state.app import AppState, CachedComparison, DriftCause, Operation, OperationPhase, TaskPhase, TaskResult
from tidecd.state.index import Write
from tidecd.step.desired import revisions_of
from tidecd.step.execute import Executed
from tidecd.step.observe import Target
from tidecd.sync import decide as decision
from tidecd.sync import options as syncoptions
from tidecd.sync import plan
from tidecd.sync.apply import with_ownership

HEALTH_FOLLOW_SECONDS = 600.0  # after a sync, refresh a Progressing app this long (how often: `health.awaited`)
DRIFT_CONDITION = "DriftDetected"
DRIFT_WINDOW = 3600.0  # seconds: an audited write older than this (before the comparison) names no drift


# -- what was observed ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Notes:
    """What the observe stage found beside the comparison, as conditions: render warnings, excluded kinds,
    objects another owner claims, a refused Argo CD adoption, orphans in the namespace."""

    warnings: tuple[str, ...] = ()
    excluded: tuple[ResourceKey, ...] = ()
    claimed: tuple[str, ...] = ()
    adoption_refused: str = ""
    orphans: dict[str, str] | None = None


def observed(state: AppState, target: Target, comparison: Comparison, live: Mapping[ResourceKey, Manifest],
             notes: Notes, now: str) -> AppState:
    """The comparison, each resource's health and the app's, and the conditions the observation found."""
    scripts = target.health_scripts
    statuses, assessed = [], []
    for res in comparison.resources:
        result: HealthResult | None = None
        if not res.requires_pruning:
            result = health.assess(live.get(res.key), scripts)
            assessed.append((res.key, live.get(res.key), result))
        statuses.append(app_state.ResourceStatus(
            res.key.group, res.key.kind, res.key.namespace, res.key.name, res.status,
            result.status if result else None, result.message if result else "",
            list(res.changed_paths), res.requires_pruning, res.text or res.error,
        ))
    roll, message = _rolled_up(assessed)
    conditions = kept_conditions(state) + syncoptions.conditions(target.app.sync_policy.sync_options, now)
    conditions += [{"type": "RepeatedResourceWarning", "message": text, "at": now} for text in notes.warnings]
    if notes.orphans:
        conditions.append(notes.orphans)
    if notes.excluded:
        conditions.append({"type": "ExcludedResourceWarning", "at": now, "message": (
            "excluded by argocd-cm resource.exclusions/inclusions, neither synced nor pruned: "
            + ", ".join(str(k) for k in notes.excluded[:20]) + (" ..." if len(notes.excluded) > 20 else ""))})
    if notes.claimed:  # as Argo CD names two apps wanting one object; the owner is named, never overwritten
        conditions.append({"type": "SharedResourceWarning", "at": now, "message": "; ".join(notes.claimed)})
    if notes.adoption_refused:
        conditions.append({"type": "ArgoCDAdoptionRefused", "at": now, "message": notes.adoption_refused})
    return replace(state, sync_status=comparison.status, revision=target.desired.revision,
                   revisions=revisions_of(target.app, target.desired.revision), health=roll,
                   health_message=message, resources=statuses, conditions=conditions)


def reassessed(state: AppState, live: Mapping[ResourceKey, Manifest], scripts: Mapping[str, str]) -> AppState:
    """Each resource's health and the app's, read again from `live` (the step's short wait for health
    after a sync); the comparison and the conditions stay as observed."""
    statuses, assessed = [], []
    for res in state.resources:
        if res.requires_pruning:
            statuses.append(res)
            continue
        result = health.assess(live.get(res.key), scripts)
        assessed.append((res.key, live.get(res.key), result))
        statuses.append(replace(res, health=result.status if result else None,
                                health_message=result.message if result else ""))
    roll, message = _rolled_up(assessed)
    return replace(state, health=roll, health_message=message, resources=statuses)


def _rolled_up(assessed: list[tuple[ResourceKey, Manifest | None, HealthResult | None]]) -> tuple[HealthStatus, str]:
    """The app's health and the message of the first live resource that gave it."""
    roll = health.app_health(assessed)
    return roll, next((f"{k}: {r.message}" for k, obj, r in assessed
                       if obj is not None and r and r.status is roll and r.message), "")


def kept_conditions(state: AppState) -> list[dict[str, str]]:
    return [c for c in state.conditions if c["type"] == app_state.STATE_UNREADABLE and state.origin.rebuilt]


def condition(state: AppState, kind: str, message: str, now: str, *, unknown: bool = True) -> AppState:
    """A problem of this step, replacing the observation's conditions (a failed observation has none)."""
    conditions = [*kept_conditions(state), {"type": kind, "message": message, "at": now}]
    return replace(state, conditions=conditions, sync_status=SyncStatus.UNKNOWN if unknown else state.sync_status)


def noted(state: AppState, found: dict[str, str]) -> AppState:
    """One more condition beside the observation's (a sync window that holds an automated sync back)."""
    return replace(state, conditions=[*state.conditions, found])


def attributed(state: AppState, writes: Iterable[Write], now: float, at: str) -> AppState:
    """Who drifted the app: the newest audited write (`tidecd.state.index`) of an object the comparison
    found OutOfSync (or missing) becomes the app's `drift` and a condition naming the user, the agent and
    the time. A write older than `DRIFT_WINDOW`, or than the last repair, names nothing: an unaudited
    change (lost events, a poll's find) is not pinned on whoever wrote the object before."""
    drifted = {r.key: r for r in state.resources if r.status is not SyncStatus.SYNCED and not r.requires_pruning}
    old = state.automation.drift
    since = max(unix(old.restored) if old is not None else 0.0, now - DRIFT_WINDOW)
    found = [(w, key) for w in writes for key in drifted if w.names(key) and unix(w.at) >= since]
    if not found:
        return state
    write, key = max(found, key=lambda pair: pair[0].at)
    cause = DriftCause(key, write.user, write.user_agent, write.at, write.verb, tuple(drifted[key].changed))
    if old is not None and (old.key, old.at, old.user, old.paths) == (cause.key, cause.at, cause.user, cause.paths):
        cause = old
    condition = {"type": DRIFT_CONDITION, "at": cause.at or at, "message": cause.describe()}
    return replace(state, automation=replace(state.automation, drift=cause), conditions=[*state.conditions, condition])


def drift_kept(state: AppState, now: float) -> AppState:
    """A drift repaired less than `DRIFT_WINDOW` ago stays named, as the condition `DriftDetected` with
    "; restored at ..." (its time is the repair's, so a step that changed nothing writes nothing)."""
    drift = state.automation.drift
    if drift is None or not drift.restored or now - unix(drift.restored) > DRIFT_WINDOW:
        return state
    message = f"{drift.describe()}; restored at {drift.restored[11:19]}"
    return replace(state, conditions=[*state.conditions, {"type": DRIFT_CONDITION, "at": drift.restored,
                                                          "message": message}])


def drift_expired(state: AppState, now: float) -> AppState:
    """The no-op fast path keeps the last comparison's conditions as they were, so it drops the drift's
    condition itself once a full comparison would no longer name it: `DRIFT_WINDOW` after the repair (or,
    unrepaired, after the audited write), as `drift_kept` and `attributed` do."""
    drift = state.automation.drift
    if drift is None:
        return state
    since = unix(drift.restored) if drift.restored else unix(drift.at)
    if now - since <= DRIFT_WINDOW:
        return state
    kept = [c for c in state.conditions if c["type"] != DRIFT_CONDITION]
    return state if len(kept) == len(state.conditions) else replace(state, conditions=kept)


def healing(state: AppState) -> AppState:
    """An automated operation that starts while a drift is attributed and not restored repairs it: it
    carries the drift's description into its history entry and notifications."""
    op, drift = state.operation, state.automation.drift
    if op is None or drift is None or drift.restored or not op.request.automated:
        return state
    return _with_operation(state, replace(op, request=replace(op.request, cause=drift.describe())))


def indexed(state: AppState, value: str) -> AppState:
    """The resource index now holds this inventory (`tidecd.state.index.digest`)."""
    return replace(state, memo=replace(state.memo, indexed=value))


def compared(state: AppState, cache: Mapping[str, CachedComparison]) -> AppState:
    """The comparison cache the comparison left (what it may reuse next time)."""
    return replace(state, memo=replace(state.memo, comparisons=dict(cache)))


def inventory(state: AppState, items: Iterable[tuple[ResourceKey, int]]) -> AppState:
    """The objects the app owns (adopted ones, or, for a rebuilt state, the ones live with its mark)."""
    new = replace(state)
    new.set_inventory(list(items))  # a new list on the copy: the input's is not touched
    return new


def reconciled(state: AppState, at: str, quiet: Mapping[str, str]) -> AppState:
    """When the step compared, and the no-op fast path's record ({}: the next step compares in full)."""
    return replace(state, memo=replace(state.memo, reconciled_at=at, quiet=dict(quiet)))


def _with_operation(state: AppState, op: Operation) -> AppState:
    return replace(state, operation=op)


def _operation(state: AppState) -> Operation:
    """The operation a transition of it changes (the step calls those only while there is one)."""
    op = state.operation
    assert op is not None, "a transition of the operation without one"
    return op


def started(state: AppState, op: Operation) -> AppState:
    """An automated operation starts (`step.operation.new_operation`)."""
    return _with_operation(state, op)


def resolved(state: AppState, app: Application, sha: str) -> AppState:
    """A running operation that had no revision yet is pinned to the commit this step rendered (and a
    multi-source one to each source's)."""
    op = state.operation
    if op is None or not op.running or (op.revision and op.revisions):
        return state
    revision = op.revision or sha
    return _with_operation(state, replace(op, revision=revision, revisions=op.revisions or revisions_of(app, revision)))


def step_failed(state: AppState) -> AppState:
    """A temporary error mid-way: one more in a row (the operation fails past `MAX_STEP_ERRORS`)."""
    op = _operation(state)
    return _with_operation(state, replace(op, retry=replace(op.retry, step_errors=op.retry.step_errors + 1)))


def forgiven(state: AppState) -> AppState:
    """Observed fine: the temporary errors of earlier steps are forgiven, and an outage it waited out is
    over (its message goes; the retries it spent stay spent)."""
    op = _operation(state)
    if not op.retry.step_errors and not op.retry.outage_since:
        return state
    message = "" if op.retry.outage_since else op.message
    return _with_operation(state, replace(op, message=message, retry=replace(
        op.retry, step_errors=0, outage_since=0.0, next_attempt_at=0.0 if op.retry.outage_since else
        op.retry.next_attempt_at)))


def unreachable(state: AppState, error: str, now: float, delay: float, policy: decision.Policy) -> AppState:
    """The API server did not answer: the operation keeps its results and waits `delay` seconds (one retry
    of its policy spent, as Argo CD's "Retrying attempt #N", due at `next_attempt_at`); its message and step
    line say so."""
    op = _operation(state)
    since = op.retry.outage_since or now
    count = op.retry.count + 1
    limit = "unlimited" if policy.outage_retries < 0 else str(policy.outage_retries)
    message = (f"{error}; waiting for the API server: retrying attempt #{count} of {limit} at "
               f"{_clock(now + delay)} (unreachable for {now - since:.0f} s)")
    step = f"waiting for the API server to answer (unreachable since {_clock(since)}), attempt #{count} at " \
           f"{_clock(now + delay)}"
    return _with_operation(state, replace(op, message=message, step=step,
                                         retry=replace(op.retry, count=count, outage_since=since,
                                                       next_attempt_at=now + delay)))


def gave_up(op: Operation, error: str, now: float, policy: decision.Policy) -> str:
    """Why an operation that waited out an unreachable API server fails now: how long, how many retries,
    whose limit, and what of it is applied (kept) and what not (nothing pruned)."""
    since = op.retry.outage_since or now
    whose = "syncPolicy.retry.limit" if policy.retry_configured else \
        "tidecd's default: the app sets no syncPolicy.retry"
    applied = sorted({(r.sync_phase, r.wave) for r in op.results
                      if not r.hook and r.action in (Action.CREATED, Action.CONFIGURED)
                      and r.phase is not TaskPhase.FAILED})
    kept = ", ".join(f"{phase} wave {wave}" for phase, wave in applied) or "nothing"
    return (f"{error}: the API server did not answer for {now - since:.0f} s; gave up after {op.retry.count} "
            f"retries ({whose} is {policy.outage_retries}). Applied before the outage and kept: {kept}; "
            "nothing was pruned. Sync again once the API server answers")


def _clock(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%H:%M:%SZ")


def not_retryable(state: AppState) -> AppState:
    """It failed for a reason a retry cannot change: automated sync does not retry it."""
    op = _operation(state)
    return _with_operation(state, replace(op, retry=replace(op.retry, retryable=False)))


def sync_failing(state: AppState, message: str) -> AppState:
    """Why the operation fails, kept while its SyncFail hooks run."""
    return _with_operation(state, replace(_operation(state), failure=message))


def decided(state: AppState, found: decision.Decision) -> AppState:
    """The decision's view of the running operation: its results and the step it is at."""
    op = state.operation
    if op is None or not op.running:
        return state
    wave = found.step.wave if isinstance(found.step, decision.RunTasks) else op.progress.wave
    return _with_operation(state, replace(op, results=list(found.results), step=found.text,
                                         progress=replace(op.progress, wave=wave)))


# -- what was executed ---------------------------------------------------------------------------------


def dry_run(state: AppState, done: Executed, known: Iterable[ChangeEntry],
            step: decision.DryRun) -> tuple[AppState, list[ChangeEntry], str]:
    """The dry-run's entries for the change set, and the failure message ("" when every object passed;
    the operation is then `checked`). Known failures come from the comparison's own dry-runs. Refusals that
    wait for their group (`decide.waiting_for_their_group`) are no failure yet: the operation keeps them
    in `deferred` and dry-runs them again there."""
    if step.at_group:
        return _dry_run_at_group(state, done, step)
    op = _operation(state)
    entries = list(done.entries)
    waiting = decision.waiting_for_their_group(step, done.refused)
    failures = [e for e in entries if e.action is Action.FAILED and e.key not in waiting] + list(known)
    shown = list(entries) if op.request.dry_run else []
    results = list(op.results)
    if op.request.dry_run:  # what it would do to each object (and each hook it would run) is its result
        results += [_would(entry) for entry in entries if entry.action is not Action.FAILED]
        results += [_would(replace(entry, action=Action.CREATED, message=f"checked at its wave: {entry.message}"))
                    for entry in entries if entry.key in waiting]
    if not failures:
        deferred = [key.to_dict() for key in sorted(waiting)]
        return _with_operation(state, replace(op, results=results, progress=replace(
            op.progress, checked=True, deferred=deferred))), shown, ""
    for entry in failures:
        if not op.request.dry_run or entry not in entries:
            shown.append(entry)
        results.append(TaskResult(entry.key, "Sync", 0, False, Action.FAILED, TaskPhase.FAILED, entry.message))
    retryable = all(e.temporary for e in failures)  # one permanent refusal: a retry meets it again
    new = _with_operation(state, replace(op, results=results, retry=replace(op.retry, retryable=retryable)))
    return new, shown, ("one or more objects failed to apply (dry run), nothing was written: "
                        + "; ".join(f"{e.key}: {e.message}" for e in failures))


def _dry_run_at_group(state: AppState, done: Executed,
                      step: decision.DryRun) -> tuple[AppState, list[ChangeEntry], str]:
    """A deferred dry-run, before its group's first write: each refusal is that task's failed result (the
    decision then runs the SyncFail hooks and fails the operation, nothing of the group written)."""
    op = _operation(state)
    tasks = {t.key: t for t in step.tasks}
    failed = [e for e in done.entries if e.action is Action.FAILED]
    results = list(op.results)
    for entry in failed:
        task = tasks[entry.key]
        results.append(TaskResult(entry.key, task.phase.value, task.wave, task.hook, Action.FAILED,
                                  TaskPhase.FAILED, f"{entry.message} (dry run, before its wave)"))
    deferred = [key.to_dict() for key in sorted(op.progress.deferred_keys() - tasks.keys())]
    retryable = op.retry.retryable and all(e.temporary for e in failed)
    return _with_operation(state, replace(op, results=results, progress=replace(op.progress, deferred=deferred),
                                          retry=replace(op.retry, retryable=retryable))), failed, ""


def _would(entry: ChangeEntry) -> TaskResult:
    """A dry run's entry as the operation's result: done (nothing runs after it), saying what it would do."""
    hook = entry.phase not in ("", "Sync") or entry.message.endswith("hook (dry run)")
    return TaskResult(entry.key, entry.phase or "Sync", entry.wave, hook, entry.action, TaskPhase.SUCCEEDED,
                      entry.message)


def hooks_intended(state: AppState, step: decision.RunTasks) -> tuple[AppState, bool]:
    """The intent first: a step killed after creating a hook finds it by name and mark. True: recorded."""
    op = _operation(state)
    hooks = [t for t in step.tasks if t.hook]
    results = list(op.results)
    for task in hooks:
        if op.result(task.key, task.phase.value) is None:
            results.append(TaskResult(task.key, task.phase.value, task.wave, True, Action.CREATED,
                                      TaskPhase.PENDING))
    return _with_operation(state, replace(op, results=results)), bool(hooks)


def namespace_applied(state: AppState, namespace: str, *, created: bool) -> AppState:
    """CreateNamespace=true's namespace created (or its `managedNamespaceMetadata` applied) as a result of the
    PreSync phase, as gitops-engine's `autoCreateNamespace` task reports it. Not a task: never in the
    inventory (pruning it would delete the app's namespace)."""
    op = _operation(state)
    key = ResourceKey("", "Namespace", "", namespace)
    action = Action.CREATED if created else Action.CONFIGURED
    message = "created (CreateNamespace=true)" if created else "managedNamespaceMetadata applied"
    result = TaskResult(key, "PreSync", 0, False, action, TaskPhase.SUCCEEDED, message)
    results = [r for r in op.results if r.id != result.id] + [result]
    return _with_operation(state, replace(op, results=results))


def ran(state: AppState, done: Executed) -> AppState:
    """Each applied task's result, replacing an earlier one of the same task (a hook's intent)."""
    op = _operation(state)
    results = list(op.results)
    for item in done.applied:
        task, entry = item.task, item.entry
        phase = TaskPhase.FAILED if entry.action is Action.FAILED else TaskPhase.RUNNING
        result = TaskResult(task.key, task.phase.value, task.wave, task.hook, entry.action, phase,
                            entry.message, item.uid)
        results = [r for r in results if r.id != result.id] + [result]
    return _with_operation(state, replace(op, results=results))


def pruned(state: AppState, step: decision.Prune, done: Executed) -> AppState:
    op = _operation(state)
    waves = dict(step.candidates)
    results = list(op.results)
    for entry in done.entries:
        results.append(TaskResult(entry.key, "Sync", waves.get(entry.key, 0), False, entry.action,
                                  TaskPhase.FAILED if entry.action is Action.FAILED
                                  else TaskPhase.SUCCEEDED, entry.message))
    reported = {e.key for e in done.entries}
    for gone, wave in step.candidates:  # deleted already (by a step killed mid-prune, or by hand)
        if gone not in reported and not step.dry_run:
            results.append(TaskResult(gone, "Sync", wave, False, Action.PRUNED, TaskPhase.SUCCEEDED,
                                      "already gone"))
    return _with_operation(state, replace(op, results=results, progress=replace(op.progress, pruned=step.last)))


@dataclass(frozen=True)
class Finished:
    """What ending an operation needs beyond the operation: the app's tasks, the sync marker of its
    revision, the policy (for a retry), the objects it wrote, and the time."""

    target: Target | None  # None: the step failed before it knew the app's objects
    app: Application | None  # None: the app itself could not be read
    marker: str
    policy: decision.Policy
    written: Mapping[ResourceKey, str]
    now: float
    at: str


def finish(state: AppState, phase: OperationPhase, message: str, end: Finished) -> tuple[AppState, float | None]:
    """The operation ends: its phase, the inventory it leaves, a history entry, the automated-sync marks;
    also returns the seconds until a failed automated operation is retried (`decide.retry_delay`), or None."""
    before = _operation(state)
    succeeded = phase is OperationPhase.SUCCEEDED
    results = [replace(r, phase=TaskPhase.SUCCEEDED)  # the last group: applied, not waited for (see sync.decide)
               if r.phase is TaskPhase.RUNNING and not r.hook and succeeded else r for r in before.results]
    op = replace(before, phase=phase, message=message, finished_at=end.at, step=message, results=results)
    if op.request.dry_run:
        return _with_operation(state, op), None
    tasks, app = (end.target.tasks if end.target is not None else ()), end.app
    inventory = dict(state.inventory_keys())
    gone = {r.key for r in op.results if r.action is Action.PRUNED}
    if phase is OperationPhase.SUCCEEDED:
        only = op.only_keys()
        inventory.update({t.key: t.wave for t in tasks if not t.hook and (only is None or t.key in only)})
    else:  # keep what it had, plus what it created before failing
        waves = {t.key: t.wave for t in tasks if not t.hook}
        inventory.update({r.key: waves[r.key] for r in op.results if not r.hook and r.key in waves
                          and r.action in (Action.CREATED, Action.CONFIGURED) and r.phase is not TaskPhase.FAILED})
    automation = state.automation
    if op.request.automated and succeeded:
        automation = replace(automation, synced=end.marker)
    delay = decision.retry_delay(op, end.policy)
    if delay is not None:
        op = replace(op, retry=replace(op.retry, next_attempt_at=end.now + delay))
    if op.request.rollback:
        automation = replace(automation, disabled=True)
    elif not op.request.automated and not op.request.source.get("revision"):
        automation = replace(automation, disabled=False)
    cause = op.request.cause
    if cause:
        cause += "; restored" if succeeded else f"; not restored (the repair {phase.value.lower()})"
        drift = automation.drift
        if succeeded and drift is not None and not drift.restored:
            automation = replace(automation, drift=replace(drift, restored=end.at))
    new = replace(state, operation=op, automation=automation)
    # both assign a new list on the copy (the input's lists are not touched)
    new.set_inventory([(k, w) for k, w in inventory.items() if k not in gone])
    new.add_history(op.revision, phase.value, str(op.request.source.get("path", "")),
                    str(op.request.source.get("targetRevision", "")), op.id,
                    op.revisions or (revisions_of(app, op.revision) if app is not None else None), cause,
                    op.request.initiated_by, rollback=op.request.rollback, trigger=trigger_of(op))
    if end.target is not None:
        new = remember_writes(new, end.target, end.written)
    return new, delay


def trigger_of(op: Operation) -> str:
    """What started an operation, for its history entry."""
    if op.request.rollback:
        return "automatic rollback" if op.request.initiated_by == "auto-rollback" else "rollback"
    if op.request.cause:
        return "self-heal"
    return "automated sync" if op.request.automated else "manual sync"


def remember_writes(state: AppState, target: Target, written: Mapping[ResourceKey, str]) -> AppState:
    """An object just applied is, until something else changes it, exactly what a dry-run of the same
    apply would predict: record it as Synced so the comparison after the sync needs no dry-run for it."""
    cache = dict(state.memo.comparisons)
    for obj in plan.resources(target.manifests):
        key = ResourceKey.of(obj)
        if key in written:
            owned = with_ownership(obj, target.name, argocd=target.argocd_marks)
            cache[str(key)] = CachedComparison(fingerprint(owned), written[key], SyncStatus.SYNCED)
    return compared(state, cache)


def health_follow_since(state: AppState, continue_after: float | None, now: float) -> float | None:
    """After an operation succeeded with the app still Progressing (the last group is not waited for),
    refresh steps for a while, so status and `app wait --health` see it turn Healthy: the unix time the
    wait began (the operation's end) when the step should ask for a follow-up, else None (it asks for
    nothing, or for something else already). The caller picks the delay (`health.awaited`)."""
    op = state.operation
    if (continue_after is not None or op is None or op.phase is not OperationPhase.SUCCEEDED
            or state.health is not HealthStatus.PROGRESSING or not op.finished_at):
        return None
    finished = unix(op.finished_at)
    return finished if now - finished < HEALTH_FOLLOW_SECONDS else None


# -- the one write ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Saved:
    """Where the state stands in the store: its generation, the `reconciled_at` and quiet record as last
    written, and whether this step wrote it already."""

    generation: int
    reconciled_at: str
    quiet: Mapping[str, str]
    wrote: bool = False

    @classmethod
    def loaded(cls, state: AppState, generation: int) -> Saved:
        return cls(generation, state.memo.reconciled_at, dict(state.memo.quiet))


def save(store: ObjectStore, state: AppState, saved: Saved, *, settled: bool) -> Saved:
    """Record: a lost race raises PreconditionFailed, and the step re-reads and re-decides. A settled
    app whose record did not change but for `reconciled_at` (and the quiet record) is not written: a
    no-op resync makes no write, in the store either (`reconciled_at` is then the last step that changed
    something)."""
    if settled and saved.generation and unchanged(state, saved):
        return saved
    generation = app_state.save(store, state, if_generation_match=saved.generation, keep_quiet=True)
    return Saved(generation, state.memo.reconciled_at, dict(state.memo.quiet), wrote=True)


def unchanged(state: AppState, saved: Saved) -> bool:
    """The record is the file as loaded, but for `reconciled_at` and, in a step that wrote nothing yet,
    `quiet` (a no-op writes nothing): one encoding, compared with the bytes read."""
    if not state.origin.raw:
        return False
    doc = state.to_json()
    doc["reconciled_at"] = saved.reconciled_at
    if not saved.wrote:
        doc["quiet"] = dict(saved.quiet)
    return app_state.encode_json(doc) == state.origin.raw


def fence(store: ObjectStore, name: str, saved: Saved, keeper: LeaseKeeper | None) -> None:
    """Before acting on the cluster: still ours? A step that stalled past its lease (a frozen process)
    must not apply what it decided from a stale state; it re-reads instead."""
    if keeper is not None and (keeper.lost or not keeper.fence()):
        raise PreconditionFailed(f"{name}: the lease was taken over")
    blob = store.read(app_state.state_key(name))
    if (blob.generation if blob else 0) != saved.generation:
        raise PreconditionFailed(f"{name}: the state changed since this step read it")


def leaves_cluster_alone(step: decision.Step) -> bool:
    """A step that changes nothing in the cluster (the start, the dry-run, a prune with nothing to delete) is
    neither fenced nor saved on its own: the next step that acts is, and `Step.run` (`step.stepping`) saves
    at its end. Redone after a crash it does the same. A first sync read its state six times and wrote it
    five, now three and two: on GCS each is a request, and one object takes about one write a second."""
    return isinstance(step, decision.StartOperation | decision.DryRun) or (
        isinstance(step, decision.Prune) and not step.candidates)


def with_diff(entry: ChangeEntry, comparison: Comparison) -> ChangeEntry:
    """The entry with the masked diff its object's comparison found (the change set carries its diff)."""
    if entry.diff or entry.action not in (Action.CREATED, Action.CONFIGURED, Action.PRUNED):
        return entry
    found = next((r.text for r in comparison.resources if r.key == entry.key and r.text), "")
    return dataclasses.replace(entry, diff=found) if found else entry
