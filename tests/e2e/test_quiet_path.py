"""The no-op fast path against the real control plane and git server: a settled app's no-op answers from its
quiet record (no comparison, no write), and drift made with kubectl is still caught through it."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from tests.support.apps import GitOps, configmap, deployment
from tidecd.step import observe


def counted_compares(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many full comparisons the steps after this call make (one element each)."""
    calls: list[int] = []
    real = observe.compare_all

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(observe, "compare_all", counted)
    return calls


def test_drift_is_caught_through_the_no_op_fast_path(gitops: GitOps, monkeypatch: pytest.MonkeyPatch) -> None:
    gitops.push({"app/web.yaml": deployment("web"), "app/cm.yaml": configmap("settings", {"v": "1"})})
    gitops.application(automated={})
    gitops.settle()
    compares = counted_compares(monkeypatch)
    generation = gitops.store.read(f"state/apps/{gitops.real('app')}.json").generation  # type: ignore[union-attr]
    for _ in range(2):
        outcome = gitops.reconcile()
        assert outcome.unchanged, "a settled app's no-op answers from its quiet record"
    assert compares == []
    assert gitops.store.read(f"state/apps/{gitops.real('app')}.json").generation == generation  # type: ignore[union-attr]

    subprocess.run(["kubectl", "--kubeconfig", str(gitops.dev.kubeconfig), "-n", gitops.namespace, "patch",
                    "configmap/settings", "-p", '{"data":{"v":"by hand"}}'], check=True, capture_output=True)
    outcome = gitops.reconcile()

    assert not outcome.unchanged and compares == [1]
    state = gitops.state()
    assert state.sync_status == "OutOfSync"
    assert [(r.kind, r.name) for r in state.resources if r.status == "OutOfSync"] == [("ConfigMap", "settings")]
    assert gitops.reconcile().unchanged  # the same drift again: still OutOfSync, now quietly
    assert gitops.state().sync_status == "OutOfSync"

    gitops.push({"app/cm.yaml": configmap("settings", {"v": "2"})})  # a new commit: rendered and synced
    outcome = gitops.reconcile()
    assert not outcome.unchanged
    assert gitops.live("ConfigMap", "settings")["data"] == {"v": "2"}  # type: ignore[index]


def test_self_heal_repairs_drift_seen_through_the_fast_path(gitops: GitOps) -> None:
    gitops.push({"app/cm.yaml": configmap("settings", {"v": "1"})})
    gitops.application(automated={"selfHeal": True})
    gitops.settle()

    subprocess.run(["kubectl", "--kubeconfig", str(gitops.dev.kubeconfig), "-n", gitops.namespace, "delete",
                    "configmap/settings"], check=True, capture_output=True)
    outcome = gitops.reconcile()

    assert not outcome.unchanged
    assert gitops.live("ConfigMap", "settings")["data"] == {"v": "1"}  # type: ignore[index]
    gitops.settle()
    assert gitops.reconcile().unchanged
