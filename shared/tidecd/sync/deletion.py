"""Deleting an app as Argo CD's `finalizeApplicationDeletion` does, decided one bounded step at a time.

An app being deleted (`tidecd.generated.records`: removed from the config source or its ApplicationSet, or
`tidecd app delete`) goes through stages, recorded in its record entry so that each step resumes where
the last one stopped; nothing waits in a function, a wait is a continuation:

1. `PRE_DELETE`: its PreDelete hooks are created (those not live yet) and waited for. One that fails
   (Degraded) is deleted, so a fixed hook can run again, and the deletion stops there with a
   `DeletionError` condition, tried again later, as Argo CD returns the error and requeues.
2. `RESOURCES`: its objects are pruned by the ordinary engine (`sync.decide`: wave by wave, highest first,
   each once the previous wave is gone), with the finalizer's propagation. A CustomResourceDefinition,
   an object with `argocd.argoproj.io/sync-options: Delete=false` or Helm's `helm.sh/resource-policy:
   keep` is left alone (Argo CD's `shouldBeDeleted`).
3. `POST_DELETE`: once nothing of it is left, its PostDelete hooks run the same way.
4. `CLEANUP`: the deletion hooks are deleted by their delete policies (`sync.hooks.cleanup`), and once they
   are gone the app is forgotten.

This module only decides; `tidecd.step.deletion` reads the cluster and carries the decisions out.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from tidecd.base.model import HealthStatus, Manifest, ResourceKey
from tidecd.sync import hooks
from tidecd.sync.plan import annotations_of, sync_options

KEEP_POLICY = ("helm.sh/resource-policy", "keep")
DELETE_DISABLED = "Delete=false"


class Stage(enum.StrEnum):
    PRE_DELETE = ""  # the first stage: nothing recorded yet
    RESOURCES = "resources"
    POST_DELETE = "post-delete"
    CLEANUP = "cleanup"


@dataclass(frozen=True)
class CreateHooks:
    objects: tuple[Manifest, ...]


@dataclass(frozen=True)
class WaitHooks:
    keys: tuple[ResourceKey, ...]
    message: str


@dataclass(frozen=True)
class HooksFailed:
    """Delete the failed hooks (a later step creates them again) and report why the deletion waits."""

    keys: tuple[ResourceKey, ...]
    message: str


@dataclass(frozen=True)
class DeleteHooks:
    keys: tuple[ResourceKey, ...]


HookStep = CreateHooks | WaitHooks | HooksFailed | None  # None: every hook of the stage succeeded


def kept(live: Manifest) -> str:
    """Why app deletion leaves this object alone ("" when it is deleted)."""
    if ResourceKey.of(live).kind == "CustomResourceDefinition":
        return "a CustomResourceDefinition is never deleted with its app"
    if DELETE_DISABLED in sync_options(live):
        return DELETE_DISABLED
    if annotations_of(live).get(KEEP_POLICY[0]) == KEEP_POLICY[1]:
        return "helm.sh/resource-policy: keep"
    return ""


def run_hooks(kind: str, declared: Mapping[ResourceKey, Manifest], live: Mapping[ResourceKey, Manifest | None],
              outcomes: Mapping[ResourceKey, HealthStatus]) -> HookStep:
    """The next step of one stage's hooks (Argo CD's `executeHooks`): create the missing ones, then wait
    while one is Progressing; a Degraded one fails the stage."""
    missing = tuple(obj for key, obj in sorted(declared.items()) if live.get(key) is None)
    if missing:
        return CreateHooks(missing)
    failed = sorted(k for k in declared if outcomes.get(k) is HealthStatus.DEGRADED)
    if failed:
        names = ", ".join(f"{k.namespace}/{k.name}" if k.namespace else k.name for k in failed)
        return HooksFailed(tuple(failed), f"{kind} hook(s) failed: {names}")
    running = sorted(k for k in declared if outcomes.get(k) is HealthStatus.PROGRESSING)
    if running:
        return WaitHooks(tuple(running), f"waiting for {len(running)} {kind} hook(s) to complete")
    return None


def cleanup(live: Mapping[ResourceKey, Manifest | None],
            outcomes: Mapping[ResourceKey, HealthStatus]) -> DeleteHooks | WaitHooks | None:
    """The last stage (Argo CD's `cleanupHooks`): delete the hooks their policies name, wait until they are
    gone; None once nothing is left to delete."""
    present = {k: obj for k, obj in live.items() if obj is not None}
    doomed = hooks.cleanup(present, {k: outcomes.get(k, HealthStatus.HEALTHY) for k in present})
    going = tuple(k for k in doomed if (present[k].get("metadata") or {}).get("deletionTimestamp"))
    fresh = tuple(k for k in doomed if k not in going)
    if fresh:
        return DeleteHooks(fresh)
    if going:
        return WaitHooks(going, f"waiting for {len(going)} deletion hook(s) to be deleted")
    return None
