"""Argo CD's own e2e cases (argoproj/argo-cd `test/e2e/*.go`), replayed against tidecd on the dev control plane.

Each test names the Go test it ports; the assertions are Argo CD's (what lands in the cluster, the app's
sync and health status, the operation's phase and per-resource results), checked against Argo CD's source
with the search tool. Issue 23 collects what still differs.
"""

from __future__ import annotations

from typing import Any

from tests.support.apps import GitOps, configmap

WAVE = "argocd.argoproj.io/sync-wave"
HOOK = "argocd.argoproj.io/hook"
SYNC_OPTIONS = "argocd.argoproj.io/sync-options"
COMPARE_OPTIONS = "argocd.argoproj.io/compare-options"


def unknown_kind(namespace: str, name: str = "w1", **annotations: str) -> dict[str, Any]:
    """A custom resource of a group no CRD on the destination serves."""
    meta: dict[str, Any] = {"name": name}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": f"{namespace}.unserved.example.com/v1", "kind": "Gadget", "metadata": meta,
            "spec": {"size": 1}}


def test_an_unserved_kind_is_out_of_sync_and_missing_and_fails_only_its_sync(gitops: GitOps) -> None:
    """Argo CD: a kind the destination does not serve compares OutOfSync with health Missing (the
    comparison goes on: the app is OutOfSync, not Unknown); its sync fails naming the kind, and
    `SkipDryRunOnMissingResource=true` lets it past the dry-run (gitops-engine sync_context)."""
    gitops.push({"app/cm.yaml": configmap("plain"), "app/gadget.yaml": unknown_kind(gitops.namespace)})
    gitops.application()
    state = gitops.reconcile(automate=False).state
    assert state is not None
    assert state.sync_status == "OutOfSync", state.conditions
    [gadget] = [r for r in state.resources if r.kind == "Gadget"]
    assert gadget.status == "OutOfSync" and gadget.health == "Missing", gadget
    assert not [c for c in state.conditions if c.get("type") == "ComparisonError"], state.conditions
    gitops.sync()
    state = gitops.state()
    assert state.operation is not None and state.operation.phase == "Failed"
    [result] = [r for r in state.operation.results if r.key.kind == "Gadget"]
    assert "could not find the requested resource" in result.message and "CRDs" in result.message, result
    assert gitops.live("ConfigMap", "plain") is None  # the dry-run failed: nothing written
    # SkipDryRunOnMissingResource=true: past the dry-run, the rest applies, the object's own apply fails
    skip = {SYNC_OPTIONS: "SkipDryRunOnMissingResource=true"}
    gitops.push({"app/gadget.yaml": unknown_kind(gitops.namespace, **skip)})
    gitops.sync()
    state = gitops.state()
    assert state.operation is not None and state.operation.phase == "Failed"
    assert gitops.live("ConfigMap", "plain") is not None
    [result] = [r for r in state.operation.results if r.key.kind == "Gadget"]
    assert "could not find the requested resource" in result.message, result
