"""Running one sync operation: phases and waves in order, hooks, then prune.

A wave starts only when the previous one is applied and healthy (hooks: finished). A failure stops the
operation, runs the SyncFail hooks and skips pruning; the change set returned is partial in that case.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tidecd import health
from tidecd.cluster import Cluster
from tidecd.errors import ClusterUnavailable
from tidecd.model import Action, ChangeEntry, ChangeSet, HealthStatus, Manifest, ResourceKey
from tidecd.sync.apply import apply_task
from tidecd.sync.hooks import finish_hook, hook_outcome, start_hook
from tidecd.sync.plan import Phase, Task, plan, waves
from tidecd.sync.prune import prune, prune_candidates

CONCURRENCY = 8
# Applied (and healthy) before the rest of their wave: custom resources need their CRD served first.
FOUNDATION_KINDS = frozenset({"Namespace", "CustomResourceDefinition"})


@dataclass(frozen=True)
class SyncSettings:
    """What shapes one operation: the request merged with the app's sync options."""

    prune: bool = False
    dry_run: bool = False
    only: frozenset[ResourceKey] | None = None  # selective sync: these resources, no hooks
    wave_timeout: float = 300.0
    poll_interval: float = 0.5


@dataclass
class OperationResult:
    succeeded: bool
    message: str
    changes: ChangeSet = field(default_factory=ChangeSet)
    inventory: list[tuple[ResourceKey, int]] = field(default_factory=list)
    written: dict[ResourceKey, str] = field(default_factory=dict)  # resourceVersion each apply left behind


class _Stop(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def run(cluster: Cluster, app: str, manifests: list[Manifest], *, inventory: list[tuple[ResourceKey, int]],
        out_of_sync: set[ResourceKey], live: set[ResourceKey], healthy: set[ResourceKey],
        settings: SyncSettings) -> OperationResult:
    """Sync `manifests` (resources and hooks, namespaces filled in) to the cluster.

    `out_of_sync` objects are applied, the others skipped (their dry-run showed no change); `healthy`
    objects that were not applied need no health wait."""
    tasks = plan(manifests)
    if settings.only is not None:
        tasks = [t for t in tasks if not t.hook and t.key in settings.only]
    desired = {t.key: t for t in tasks if not t.hook}
    result = OperationResult(succeeded=True, message="")
    runner = _Runner(cluster, app, settings, result.changes, out_of_sync, live, healthy)
    runner.written = result.written
    try:
        for phase in (Phase.PRE_SYNC, Phase.SYNC, Phase.POST_SYNC):
            runner.run_phase(tasks, phase)
    except _Stop as stop:
        result.succeeded, result.message = False, stop.message
        runner.run_sync_fail(tasks)
    except ClusterUnavailable as exc:
        result.succeeded, result.message = False, f"{exc} (nothing pruned; will retry)"
    result.inventory = _next_inventory(inventory, desired, settings, result.succeeded)
    if not result.succeeded:
        return result
    selected_inventory = [(k, w) for k, w in inventory if settings.only is None or k in settings.only]
    candidates = prune_candidates(selected_inventory, {k for k, _ in _all_resources(manifests)})
    try:
        entries = prune(cluster, app, candidates, enabled=settings.prune, dry_run=settings.dry_run)
    except ClusterUnavailable as exc:
        result.succeeded, result.message = False, str(exc)
        return result
    for entry in entries:
        result.changes.add(entry)
    pruned = {e.key for e in entries if e.action is Action.PRUNED and not settings.dry_run}
    result.inventory = [(k, w) for k, w in result.inventory if k not in pruned]
    if result.changes.failed:
        result.succeeded = False
        result.message = "; ".join(str(e) for e in result.changes.entries if e.action is Action.FAILED)
    else:
        result.message = "dry run: nothing written" if settings.dry_run else "successfully synced"
    return result


def _all_resources(manifests: list[Manifest]) -> list[tuple[ResourceKey, int]]:
    return [(t.key, t.wave) for t in plan(manifests) if not t.hook]


def _next_inventory(old: list[tuple[ResourceKey, int]], desired: dict[ResourceKey, Task], settings: SyncSettings,
                    succeeded: bool) -> list[tuple[ResourceKey, int]]:
    """What the app owns after this operation: old entries stay until pruned, new ones are added."""
    if settings.dry_run:
        return list(old)
    merged = dict(old)
    merged.update({key: task.wave for key, task in desired.items()})
    return sorted(merged.items())


class _Runner:
    def __init__(self, cluster: Cluster, app: str, settings: SyncSettings, changes: ChangeSet,
                 out_of_sync: set[ResourceKey], live: set[ResourceKey], healthy: set[ResourceKey]) -> None:
        self.cluster, self.app, self.settings, self.changes = cluster, app, settings, changes
        self.out_of_sync, self.live, self.healthy = out_of_sync, live, healthy
        self.written: dict[ResourceKey, str] = {}

    def run_phase(self, tasks: list[Task], phase: Phase) -> None:
        for _, wave_tasks in waves(tasks, phase):
            first = [t for t in wave_tasks if t.key.kind in FOUNDATION_KINDS and not t.hook]
            rest = [t for t in wave_tasks if t.key.kind not in FOUNDATION_KINDS or t.hook]
            for group in (first, rest):
                if group:
                    applied = self._run_wave(group)
                    if not self.settings.dry_run:
                        self._wait([t for t in group if t.hook or t.key in applied or t.key not in self.healthy])

    def run_sync_fail(self, tasks: list[Task]) -> None:
        fail_tasks = [t for t in tasks if t.phase is Phase.SYNC_FAIL]
        if not fail_tasks or self.settings.dry_run:
            return
        try:
            self._run_wave(fail_tasks)
            self._wait(fail_tasks)
        except (_Stop, ClusterUnavailable):
            pass  # the operation has failed already; its first reason is the one reported

    def _run_wave(self, tasks: list[Task]) -> set[ResourceKey]:
        """Apply the tasks concurrently; the keys of the objects written."""
        def one(task: Task) -> ChangeEntry:
            if task.hook:
                return start_hook(self.cluster, task, self.app, dry_run=self.settings.dry_run)
            if task.key not in self.out_of_sync:
                # The comparison's dry-run already showed the apply would change nothing: skip the write.
                return ChangeEntry(task.key, Action.UNCHANGED)
            return apply_task(self.cluster, task, self.app, dry_run=self.settings.dry_run,
                              exists=self.live.__contains__, written=self._record_write)

        with ThreadPoolExecutor(max_workers=min(CONCURRENCY, max(1, len(tasks)))) as pool:
            entries = list(pool.map(one, tasks))
        for entry in entries:
            self.changes.add(entry)
        failed = [e for e in entries if e.action is Action.FAILED]
        if failed:
            raise _Stop("; ".join(str(e) for e in failed))
        return {e.key for e in entries if e.action in (Action.CREATED, Action.CONFIGURED)}

    def _record_write(self, key: ResourceKey, result: Manifest) -> None:
        self.written[key] = str((result.get("metadata") or {}).get("resourceVersion", ""))

    def _wait(self, tasks: list[Task]) -> None:
        """Block until every object of the wave is healthy and every hook has finished."""
        pending = {t.key: t for t in tasks}
        deadline = time.monotonic() + self.settings.wave_timeout
        while pending:
            for key, task in list(pending.items()):
                live = self.cluster.get(key)
                if task.hook:
                    finished, ok = hook_outcome(live, health.is_hook_done)
                    if finished:
                        del pending[key]
                        finish_hook(self.cluster, task, ok)
                        if not ok:
                            self.changes.add(ChangeEntry(key, Action.FAILED, f"{task.phase.value} hook failed"))
                            raise _Stop(f"{key}: {task.phase.value} hook failed")
                    continue
                assessed = health.assess(live)
                if assessed is None or assessed.status in (HealthStatus.HEALTHY, HealthStatus.SUSPENDED):
                    del pending[key]
                elif assessed.status is HealthStatus.DEGRADED:
                    raise _Stop(f"{key}: Degraded: {assessed.message}")
            if not pending:
                return
            if time.monotonic() > deadline:
                waiting = ", ".join(str(k) for k in pending)
                raise _Stop(f"timed out after {self.settings.wave_timeout:.0f}s waiting for {waiting} "
                            "to become healthy")
            time.sleep(self.settings.poll_interval)

