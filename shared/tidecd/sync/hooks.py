"""Sync hooks (PreSync, Sync, PostSync, SyncFail): create, wait for completion, delete by policy."""

from __future__ import annotations

import time
from collections.abc import Callable

from tidecd.cluster import ApiError, Cluster
from tidecd.model import Action, ChangeEntry, Manifest
from tidecd.sync.apply import explain, with_ownership
from tidecd.sync.plan import Task


def start_hook(cluster: Cluster, task: Task, app: str, *, dry_run: bool) -> ChangeEntry:
    """Create the hook; an old copy is deleted first under BeforeHookCreation (the default)."""
    obj = with_ownership(task.obj, app)
    try:
        if dry_run:
            cluster.apply(obj, dry_run=True)
            return ChangeEntry(task.key, Action.CREATED, f"{task.phase.value} hook (dry run)")
        if "BeforeHookCreation" in task.delete_policies and cluster.get(task.key) is not None:
            cluster.delete(task.key, propagation="Foreground")
            _wait_gone(cluster, task)
        cluster.apply(obj)
    except ApiError as exc:
        return ChangeEntry(task.key, Action.FAILED, f"{task.phase.value} hook: {explain(exc)}")
    return ChangeEntry(task.key, Action.CREATED, f"{task.phase.value} hook")


def hook_outcome(live: Manifest | None, done: Callable[[Manifest], tuple[bool, bool]]) -> tuple[bool, bool]:
    """(finished, succeeded) of a hook; a hook that is gone counts as finished and succeeded."""
    if live is None:
        return True, True
    return done(live)


def finish_hook(cluster: Cluster, task: Task, succeeded: bool) -> None:
    """Apply the hook's delete policy once it has finished."""
    policy = "HookSucceeded" if succeeded else "HookFailed"
    if policy in task.delete_policies:
        cluster.delete(task.key, propagation="Background")


def _wait_gone(cluster: Cluster, task: Task, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while cluster.get(task.key) is not None:
        if time.monotonic() > deadline:
            raise ApiError(task.key, 409, "Conflict", "previous hook object still being deleted")
        time.sleep(0.2)
