"""Deleting an app as Argo CD does: its deletion hooks (never run by a sync), then its resources wave by
wave, then its PostDelete hooks and their cleanup (`tidecd.sync.hooks`, `tidecd.sync.deletion`)."""

from __future__ import annotations

from typing import Any

import pytest

from tidecd.base.model import HealthStatus, ResourceKey
from tidecd.sync import hooks
from tidecd.sync.plan import hook_phases, plan, resources


def obj(kind: str, name: str, **annotations: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": kind, "metadata": {"name": name, "namespace": "ns",
                                                                 "annotations": dict(annotations)}}


ARGO, HELM = "argocd.argoproj.io/hook", "helm.sh/hook"


@pytest.mark.parametrize(("notes", "kind"), [
    ({ARGO: "PreDelete"}, "PreDelete"), ({ARGO: "PostDelete"}, "PostDelete"),
    ({HELM: "pre-delete"}, "PreDelete"), ({HELM: "post-delete"}, "PostDelete"),
    ({ARGO: "PreSync"}, ""), ({HELM: "pre-install"}, ""), ({}, "")])
def test_deletion_hooks_are_known_by_argo_and_helm_annotations(notes: dict[str, str], kind: str) -> None:
    assert hooks.delete_hook_type(obj("Job", "x", **notes)) == kind


@pytest.mark.parametrize("notes", [{ARGO: "PreDelete"}, {ARGO: "PostDelete"}, {HELM: "pre-delete"},
                                   {HELM: "post-delete"}])
def test_a_sync_neither_applies_compares_nor_refuses_deletion_hooks(notes: dict[str, str]) -> None:
    """Argo CD's test_e2e TestPreDeleteHook / TestPostDeleteHook: the app syncs, the hook is not created."""
    manifests = [obj("Job", "cleanup", **notes), obj("ConfigMap", "c")]
    assert hook_phases(manifests[0]) == []
    assert [t.key.name for t in plan(manifests)] == ["c"]
    assert [r["metadata"]["name"] for r in resources(manifests)] == ["c"]


def test_a_deletion_hook_beside_a_sync_phase_runs_in_that_phase_only() -> None:
    assert [t.phase.value for t in plan([obj("Job", "x", **{ARGO: "PreSync,PostDelete"})])] == ["PreSync"]


def test_a_deletion_hook_is_created_owned_and_marked() -> None:
    created = hooks.delete_hook_object(obj("Job", "x", **{ARGO: "PostDelete"}), "web")
    notes = created["metadata"]["annotations"]
    assert notes["tidecd.io/operation-id"] == hooks.DELETE_OPERATION
    assert created["metadata"]["labels"]


KEY_A, KEY_B = ResourceKey("batch", "Job", "ns", "a"), ResourceKey("batch", "Job", "ns", "b")


@pytest.mark.parametrize(("policy", "outcomes", "deleted"), [
    ("", {KEY_A: HealthStatus.HEALTHY}, [KEY_A]),  # no policy: always deleted
    ("HookSucceeded", {KEY_A: HealthStatus.HEALTHY}, [KEY_A]),
    ("HookSucceeded", {KEY_A: HealthStatus.HEALTHY, KEY_B: HealthStatus.DEGRADED}, []),  # the worst decides
    ("HookFailed", {KEY_A: HealthStatus.HEALTHY, KEY_B: HealthStatus.DEGRADED}, [KEY_A, KEY_B]),
    ("BeforeHookCreation", {KEY_A: HealthStatus.HEALTHY}, []),
])
def test_cleanup_follows_the_delete_policy_and_the_worst_outcome(
        policy: str, outcomes: dict[ResourceKey, HealthStatus], deleted: list[ResourceKey]) -> None:
    notes = {ARGO: "PostDelete", **({"argocd.argoproj.io/hook-delete-policy": policy} if policy else {})}
    live = {key: obj("Job", key.name, **notes) for key in outcomes}
    assert hooks.cleanup(live, outcomes) == deleted


def test_helm_delete_policies_are_mapped() -> None:
    job = obj("Job", "x", **{HELM: "post-delete", "helm.sh/hook-delete-policy": "hook-succeeded"})
    assert hooks.explicit_delete_policies(job) == {"HookSucceeded"}
