"""`step.record`'s transitions are pure: each returns a new AppState and leaves its input as it was.

The step keeps the state it started from beside the one it builds (the notifier compares old and new), so
a transition that changed its input in place (an appended result, a task's phase, the comparison cache)
would change both. Each public transition runs here on a state with every part filled in, and the input's
stored bytes are compared before and after.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable

import pytest

from tests.support.fakecluster import FakeCluster, FakeGit, application, fake_runtime
from tidecd.base.model import Action, ChangeEntry, HealthStatus, ResourceKey, SyncStatus
from tidecd.clients.store import MemoryStore
from tidecd.diff import Comparison, ResourceDiff
from tidecd.state import app as app_state
from tidecd.state.app import AppState, CachedComparison, DriftCause, OperationPhase, TaskPhase, TaskResult
from tidecd.state.index import Write
from tidecd.step import record
from tidecd.step.desired import Desired
from tidecd.step.execute import Applied, Executed
from tidecd.step.observe import Target
from tidecd.step.operation import new_operation
from tidecd.sync import decide as decision
from tidecd.sync.plan import Phase, Task

WEB = ResourceKey("", "ConfigMap", "ns", "web")
HOOK = ResourceKey("batch", "Job", "ns", "migrate")
OLD = ResourceKey("", "ConfigMap", "ns", "old")
NOW = "2026-01-02T03:04:05Z"
WEB_OBJ = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web", "namespace": "ns"}, "data": {}}
HOOK_OBJ = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate", "namespace": "ns"}}
WEB_TASK = Task(WEB, WEB_OBJ)
HOOK_TASK = Task(HOOK, HOOK_OBJ, Phase.PRE_SYNC, hook=True)


def target() -> Target:
    app = application()
    config = fake_runtime(FakeCluster(), MemoryStore(), app, FakeGit()).config()
    desired = Desired("a" * 40, [WEB_OBJ], lambda group, kind: True)
    return Target(app, config.projects[app.project], config, FakeCluster(), None,  # type: ignore[arg-type]
                  desired, (HOOK_TASK, WEB_TASK))


def state(*, revision: str = "a" * 40) -> AppState:
    """A state with every part filled in: resources, conditions, inventory, history, the automation
    marks, the comparison cache, and a running operation with a result, retry errors and progress."""
    op = new_operation(application(), prune=True, revision=revision, started_at=NOW)
    op.results = [TaskResult(WEB, "Sync", 0, False, Action.CONFIGURED, TaskPhase.RUNNING, "applied")]
    op.retry.step_errors = 2
    op.progress.wave = 0
    current = AppState("app", SyncStatus.OUT_OF_SYNC, "b" * 40, health=HealthStatus.PROGRESSING,
                       resources=[app_state.ResourceStatus("", "ConfigMap", "ns", "web", SyncStatus.OUT_OF_SYNC)],
                       conditions=[{"type": "ComparisonError", "message": "earlier", "at": NOW}],
                       operation=op)
    current.set_inventory([(OLD, 0)])
    current.add_history("b" * 40, "Succeeded", "app", "main")
    current.memo.comparisons["x"] = CachedComparison("f", "l", SyncStatus.SYNCED)
    current.memo.quiet = {"inputs": "i", "live": "d"}
    return current


def finished() -> record.Finished:
    return record.Finished(target(), application(), "marker", decision.Policy(retry_limit=0),
                           {WEB: "identity"}, 1000.0, NOW)


WRITTEN = Executed(entries=(ChangeEntry(WEB, Action.CONFIGURED, "ok"),),
                   applied=(Applied(WEB_TASK, ChangeEntry(WEB, Action.CONFIGURED, "ok")),))
FAILED = Executed(entries=(ChangeEntry(WEB, Action.FAILED, "refused"),))
COMPARISON = Comparison([ResourceDiff(WEB, SyncStatus.SYNCED), ResourceDiff(OLD, SyncStatus.OUT_OF_SYNC,
                                                                         requires_pruning=True)])

TRANSITIONS: dict[str, Callable[[AppState], object]] = {
    "observed": lambda s: record.observed(s, target(), COMPARISON, {WEB: WEB_OBJ},
                                          record.Notes(warnings=("twice",), orphans={"type": "Orphan"}), NOW),
    "condition": lambda s: record.condition(s, "SyncError", "refused", NOW),
    "reassessed": lambda s: record.reassessed(s, {WEB: WEB_OBJ}, {}),
    "noted": lambda s: record.noted(s, {"type": "SyncWindow", "message": "closed", "at": NOW}),
    "compared": lambda s: record.compared(s, {"y": CachedComparison("g", "m", SyncStatus.OUT_OF_SYNC)}),
    "inventory": lambda s: record.inventory(s, [(WEB, 1), (OLD, 0)]),
    "reconciled": lambda s: record.reconciled(s, NOW, {}),
    "started": lambda s: record.started(s, new_operation(application(), automated=True)),
    "resolved": lambda s: record.resolved(s, application(), "c" * 40),  # on an operation not yet pinned
    "step_failed": record.step_failed,
    "forgiven": record.forgiven,
    "unreachable": lambda s: record.unreachable(s, "API server x unreachable", 1000.0, 5.0, decision.Policy()),
    "not_retryable": record.not_retryable,
    "sync_failing": lambda s: record.sync_failing(s, "a hook failed"),
    "decided": lambda s: record.decided(s, decision.Decision(
        decision.RunTasks(Phase.SYNC, 3, (WEB_TASK,), final=True),
        (TaskResult(WEB, "Sync", 3, False, Action.UNCHANGED, TaskPhase.SUCCEEDED),), "wave 3")),
    "dry_run": lambda s: record.dry_run(s, FAILED, [ChangeEntry(OLD, Action.FAILED, "known")], decision.DryRun(())),
    "hooks_intended": lambda s: record.hooks_intended(s, decision.RunTasks(Phase.PRE_SYNC, 0, (HOOK_TASK,), False)),
    "ran": lambda s: record.ran(s, WRITTEN),
    "namespace_applied": lambda s: record.namespace_applied(s, "ns", created=True),
    "pruned": lambda s: record.pruned(s, decision.Prune(((OLD, 0), (WEB, 1)), True), Executed(
        entries=(ChangeEntry(OLD, Action.PRUNED, "pruned"),))),
    "finish": lambda s: record.finish(s, OperationPhase.SUCCEEDED, "done", finished()),
    "remember_writes": lambda s: record.remember_writes(s, target(), {WEB: "identity"}),
    "attributed": lambda s: record.attributed(s, [Write("", "configmaps", "ns", "web", "patch", "alice", "kubectl/1",
                                                        NOW)], 1767323045.0, NOW),
    "healing": lambda s: record.healing(record.started(
        dataclasses.replace(s, automation=dataclasses.replace(s.automation, drift=DriftCause(WEB, "alice"))),
        new_operation(application(), automated=True))),
    "indexed": lambda s: record.indexed(s, "digest"),
    "drift_kept": lambda s: record.drift_kept(dataclasses.replace(s, automation=dataclasses.replace(
        s.automation, drift=DriftCause(WEB, "alice", restored=NOW))), 1767323045.0),
    "drift_expired": lambda s: record.drift_expired(dataclasses.replace(
        s, automation=dataclasses.replace(s.automation, drift=DriftCause(WEB, "alice", restored=NOW)),
        conditions=[*s.conditions, {"type": record.DRIFT_CONDITION, "message": "restored", "at": NOW}]),
        1767323045.0 + record.DRIFT_WINDOW + 1),
}


def test_every_public_transition_is_covered() -> None:
    """A transition is a public function of record that takes the state first and returns a new one."""
    found = {name for name, fn in inspect.getmembers(record, inspect.isfunction)
             if fn.__module__ == record.__name__ and not name.startswith("_")
             and next(iter(inspect.signature(fn).parameters), "") == "state"
             and str(inspect.signature(fn).return_annotation).startswith(("AppState", "tuple[AppState"))}
    assert found == set(TRANSITIONS)


@pytest.mark.parametrize("name", sorted(TRANSITIONS))
def test_a_transition_leaves_its_input_unchanged(name: str) -> None:
    given = state(revision="") if name == "resolved" else state()
    before = app_state.encode(given)
    result = TRANSITIONS[name](given)
    new = result[0] if isinstance(result, tuple) else result
    assert isinstance(new, AppState)
    assert app_state.encode(given) == before  # the input, as it was
    assert app_state.encode(new) != before  # and the transition did change something
    assert new is not given


def test_a_created_namespace_is_a_presync_result_and_never_inventory() -> None:
    """gitops-engine reports CreateNamespace=true's namespace as a PreSync result; it is no task, so the
    operation's end does not add it to the inventory (a later prune would delete the app's namespace)."""
    new = record.namespace_applied(state(), "ns", created=True)
    assert new.operation is not None
    [result] = [r for r in new.operation.results if r.key.kind == "Namespace"]
    assert (result.key.name, result.sync_phase, result.hook, result.action, result.phase) == (
        "ns", "PreSync", False, Action.CREATED, TaskPhase.SUCCEEDED)
    again = record.namespace_applied(new, "ns", created=False)
    assert again.operation is not None
    assert [r.action for r in again.operation.results if r.key.kind == "Namespace"] == [Action.CONFIGURED]
    done, _ = record.finish(new, OperationPhase.SUCCEEDED, "done", finished())
    assert ResourceKey("", "Namespace", "", "ns") not in dict(done.inventory_keys())
