"""Record: how what a step observed and did becomes the app's state, then one `save`.

The transitions take the state the step owns (loaded at its start, never shared) and what observe and
execute returned, and read nothing else: no cluster, no store, no clock but the `now` they are given.
They change that state in place rather than returning a copy: an AppState holds the comparison cache and
every task result, and a copy per transition would cost a deep copy several times per step. `save` is the
one write: a generation precondition (a lost race raises PreconditionFailed and the step re-reads), and
`fence` checks the app's lease before the cluster is touched.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tidecd import health
from tidecd.base.model import Action, ChangeEntry, HealthResult, HealthStatus, Manifest, ResourceKey, SyncStatus
from tidecd.clients.store import LeaseKeeper, ObjectStore, PreconditionFailed
from tidecd.config.load import Application
from tidecd.diff import Comparison, fingerprint
from tidecd.state import app as app_state
from tidecd.state.app import AppState, CachedComparison, Operation, OperationPhase, TaskPhase, TaskResult
from tidecd.step.desired import revisions_of
from tidecd.step.execute import Executed
from tidecd.step.observe import Target
from tidecd.sync import decide as decision
from tidecd.sync import options as syncoptions
from tidecd.sync import plan
from tidecd.sync.apply import with_ownership

HEALTH_FOLLOW_SECONDS = 600.0  # after a sync, refresh a Progressing app this long ...
HEALTH_RECHECK_AFTER = 5.0  # ... this often


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
             notes: Notes, now: str) -> None:
    """The comparison, each resource's health and the app's, and the conditions the observation found."""
    scripts = target.health_scripts
    statuses, assessed = [], []
    for res in comparison.resources:
        result: HealthResult | None = None
        if not res.requires_pruning:
            result = health.assess(live.get(res.key), scripts)
            assessed.append((res.key, result))
        statuses.append(app_state.ResourceStatus(
            res.key.group, res.key.kind, res.key.namespace, res.key.name, res.status,
            result.status if result else None, result.message if result else "",
            list(res.changed_paths), res.requires_pruning, res.text or res.error,
        ))
    roll = health.app_health(assessed, scripts)
    state.sync_status, state.revision = comparison.status, target.desired.revision
    state.revisions = revisions_of(target.app, target.desired.revision)
    state.health = roll
    state.health_message = next((f"{k}: {r.message}" for k, r in assessed if r and r.status is roll
                                 and r.message), "")
    state.resources = statuses
    state.conditions = kept_conditions(state) + syncoptions.conditions(target.app.sync_policy.sync_options, now)
    state.conditions += [{"type": "RepeatedResourceWarning", "message": text, "at": now} for text in notes.warnings]
    if notes.orphans:
        state.conditions.append(notes.orphans)
    if notes.excluded:
        state.conditions.append({"type": "ExcludedResourceWarning", "at": now, "message": (
            "excluded by argocd-cm resource.exclusions/inclusions, neither synced nor pruned: "
            + ", ".join(str(k) for k in notes.excluded[:20]) + (" ..." if len(notes.excluded) > 20 else ""))})
    if notes.claimed:  # as Argo CD names two apps wanting one object; the owner is named, never overwritten
        state.conditions.append({"type": "SharedResourceWarning", "at": now, "message": "; ".join(notes.claimed)})
    if notes.adoption_refused:
        state.conditions.append({"type": "ArgoCDAdoptionRefused", "at": now, "message": notes.adoption_refused})


def kept_conditions(state: AppState) -> list[dict[str, str]]:
    return [c for c in state.conditions if c["type"] == app_state.STATE_UNREADABLE and state.origin.rebuilt]


def condition(state: AppState, kind: str, message: str, now: str, *, unknown: bool = True) -> None:
    """A problem of this step, replacing the observation's conditions (a failed observation has none)."""
    state.conditions = [*kept_conditions(state), {"type": kind, "message": message, "at": now}]
    if unknown:
        state.sync_status = SyncStatus.UNKNOWN


def decided(op: Operation | None, found: decision.Decision) -> None:
    """The decision's view of the running operation: its results and the step it is at."""
    if op is not None and op.running:
        op.results, op.step = list(found.results), found.text
        op.progress.wave = found.step.wave if isinstance(found.step, decision.RunTasks) else op.progress.wave


# -- what was executed ---------------------------------------------------------------------------------


def dry_run(op: Operation, done: Executed, known: Iterable[ChangeEntry]) -> tuple[list[ChangeEntry], str]:
    """The dry-run's entries for the change set, and the failure message ("" when every object passed;
    the operation is then `checked`). Known failures come from the comparison's own dry-runs."""
    entries = list(done.entries)
    failures = [e for e in entries if e.action is Action.FAILED] + list(known)
    shown = list(entries) if op.request.dry_run else []
    if not failures:
        op.progress.checked = True
        return shown, ""
    for entry in failures:
        if not op.request.dry_run or entry not in entries:
            shown.append(entry)
        op.results.append(TaskResult(entry.key, "Sync", 0, False, Action.FAILED, TaskPhase.FAILED, entry.message))
    op.retry.retryable = all(e.temporary for e in failures)  # one permanent refusal: a retry meets it again
    return shown, ("one or more objects failed to apply (dry run), nothing was written: "
                   + "; ".join(f"{e.key}: {e.message}" for e in failures))


def hooks_intended(op: Operation, step: decision.RunTasks) -> bool:
    """The intent first: a step killed after creating a hook finds it by name and mark. True: recorded."""
    hooks = [t for t in step.tasks if t.hook]
    for task in hooks:
        if op.result(task.key, task.phase.value) is None:
            op.results.append(TaskResult(task.key, task.phase.value, task.wave, True, Action.CREATED,
                                         TaskPhase.PENDING))
    return bool(hooks)


def ran(op: Operation, done: Executed) -> None:
    """Each applied task's result, replacing an earlier one of the same task (a hook's intent)."""
    for item in done.applied:
        task, entry = item.task, item.entry
        phase = TaskPhase.FAILED if entry.action is Action.FAILED else TaskPhase.RUNNING
        result = TaskResult(task.key, task.phase.value, task.wave, task.hook, entry.action, phase,
                            entry.message, item.uid)
        op.results = [r for r in op.results if r.id != result.id] + [result]


def pruned(op: Operation, step: decision.Prune, done: Executed) -> None:
    waves = dict(step.candidates)
    for entry in done.entries:
        op.results.append(TaskResult(entry.key, "Sync", waves.get(entry.key, 0), False, entry.action,
                                     TaskPhase.FAILED if entry.action is Action.FAILED
                                     else TaskPhase.SUCCEEDED, entry.message))
    reported = {e.key for e in done.entries}
    for gone, wave in step.candidates:  # deleted already (by a step killed mid-prune, or by hand)
        if gone not in reported and not step.dry_run:
            op.results.append(TaskResult(gone, "Sync", wave, False, Action.PRUNED, TaskPhase.SUCCEEDED,
                                         "already gone"))
    op.progress.pruned = True


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


def finish(state: AppState, op: Operation, phase: OperationPhase, message: str, end: Finished) -> float | None:
    """The operation ends: its phase, the inventory it leaves, a history entry, the automated-sync marks;
    returns the seconds until a failed automated operation is retried (`decide.retry_delay`), or None."""
    op.phase, op.message, op.finished_at = phase, message, end.at
    op.step = message
    for result in op.results:
        if result.phase is TaskPhase.RUNNING and not result.hook and phase is OperationPhase.SUCCEEDED:
            result.phase = TaskPhase.SUCCEEDED  # the last group: applied, not waited for (see sync.decide)
    if op.request.dry_run:
        return None
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
    state.set_inventory([(k, w) for k, w in inventory.items() if k not in gone])
    state.add_history(op.revision, phase.value, str(op.request.source.get("path", "")),
                      str(op.request.source.get("targetRevision", "")), op.id,
                      op.revisions or (revisions_of(app, op.revision) if app is not None else None))
    if op.request.automated and phase is OperationPhase.SUCCEEDED:
        state.automation.synced = end.marker
    delay = decision.retry_delay(op, end.policy)
    if delay is not None:
        op.retry.next_attempt_at = end.now + delay
    if op.request.rollback:
        state.automation.disabled = True
    elif not op.request.automated and not op.request.source.get("revision"):
        state.automation.disabled = False
    if end.target is not None:
        remember_writes(state, end.target, end.written)
    return delay


def remember_writes(state: AppState, target: Target, written: Mapping[ResourceKey, str]) -> None:
    """An object just applied is, until something else changes it, exactly what a dry-run of the same
    apply would predict: record it as Synced so the comparison after the sync needs no dry-run for it."""
    for obj in plan.resources(target.manifests):
        key = ResourceKey.of(obj)
        if key in written:
            owned = with_ownership(obj, target.name, argocd=target.argocd_marks)
            state.memo.comparisons[str(key)] = CachedComparison(fingerprint(owned), written[key], SyncStatus.SYNCED)


def follow_health(state: AppState, continue_after: float | None, now: float) -> float | None:
    """After an operation succeeded with the app still Progressing (the last group is not waited for),
    refresh steps for a while, so status and `app wait --health` see it turn Healthy."""
    op = state.operation
    if (continue_after is not None or op is None or op.phase is not OperationPhase.SUCCEEDED
            or state.health is not HealthStatus.PROGRESSING or not op.finished_at):
        return continue_after
    finished = datetime.datetime.fromisoformat(op.finished_at.replace("Z", "+00:00")).timestamp()
    return HEALTH_RECHECK_AFTER if now - finished < HEALTH_FOLLOW_SECONDS else continue_after


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


def with_diff(entry: ChangeEntry, comparison: Comparison) -> ChangeEntry:
    """The entry with the masked diff its object's comparison found (the change set carries its diff)."""
    if entry.diff or entry.action not in (Action.CREATED, Action.CONFIGURED, Action.PRUNED):
        return entry
    found = next((r.text for r in comparison.resources if r.key == entry.key and r.text), "")
    return dataclasses.replace(entry, diff=found) if found else entry
