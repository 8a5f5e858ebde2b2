"""argocd-cm settings at work in the reconcile step (fake cluster): ignoreDifferences customizations in the
diff, resource.exclusions in what is synced and pruned."""

from __future__ import annotations

import copy
from types import MappingProxyType
from typing import Any

import pytest

from tests.support.fakecluster import FakeCluster, FakeGit, application, fake_runtime
from tidecd.base.clock import FakeClock
from tidecd.base.model import ResourceKey
from tidecd.clients.store import MemoryStore
from tidecd.config.argocd_settings import ArgoSettings, IgnoreRule, ResourceFilter
from tidecd.runtime import Runtime
from tidecd.state.app import OperationPhase
from tidecd.state.app import load as load_state
from tidecd.step.reconcile import reconcile
from tidecd.usecases.commands import SyncRequest, start_operation

CM = ResourceKey("", "ConfigMap", "ns", "a")
JOB = ResourceKey("batch", "Job", "ns", "migrate")


def configmap(name: str = "a") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


def job(name: str = "migrate") -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {"containers": [{"name": "run", "image": "busybox"}]}}}}


@pytest.fixture()
def world(monkeypatch: pytest.MonkeyPatch) -> tuple[Runtime, FakeCluster, FakeGit, FakeClock]:
    cluster, store, git = FakeCluster(), MemoryStore(), FakeGit()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    return fake_runtime(cluster, store, application(), git), cluster, git, FakeClock()


def sync(runtime: Runtime, clock: FakeClock, prune: bool = False) -> None:
    start_operation(runtime, "app", SyncRequest(prune=prune))
    for _ in range(10):
        outcome = reconcile(runtime, "app", clock=clock)
        op = outcome.state.operation if outcome.state else None
        if op is not None and not op.running:
            assert op.phase is OperationPhase.SUCCEEDED, op.message
            return
    raise AssertionError("the sync did not finish")


@pytest.mark.parametrize("key", ["/ConfigMap", "all", "*/Config*"])
def test_ignore_differences_customizations_reach_the_diff(world: Any, key: str) -> None:
    runtime, cluster, git, clock = world
    git.push([configmap()])
    sync(runtime, clock)
    cluster.objects[CM]["data"]["k"] = "changed by someone"  # drift in a field argocd-cm ignores
    cluster.objects[CM]["metadata"]["resourceVersion"] = "999"
    assert reconcile(runtime, "app", clock=clock).state.sync_status == "OutOfSync"  # type: ignore[union-attr]
    runtime.config().argo_settings = ArgoSettings(
        ignore_differences=MappingProxyType({key: IgnoreRule(json_pointers=("/data/k",))}))
    assert reconcile(runtime, "app", clock=clock).state.sync_status == "Synced"  # type: ignore[union-attr]


def test_a_core_group_customization_does_not_reach_other_groups(world: Any) -> None:
    runtime, cluster, git, clock = world
    git.push([configmap()])
    sync(runtime, clock)
    cluster.objects[CM]["data"]["k"] = "changed"
    cluster.objects[CM]["metadata"]["resourceVersion"] = "999"
    runtime.config().argo_settings = ArgoSettings(
        ignore_differences=MappingProxyType({"apps/ConfigMap": IgnoreRule(json_pointers=("/data/k",))}))
    assert reconcile(runtime, "app", clock=clock).state.sync_status == "OutOfSync"  # type: ignore[union-attr]


def test_excluded_kinds_are_neither_synced_nor_pruned(world: Any) -> None:
    runtime, cluster, git, clock = world
    git.push([configmap(), job()])
    sync(runtime, clock)
    assert JOB in cluster.objects
    runtime.config().argo_settings = ArgoSettings(exclusions=(ResourceFilter(api_groups=("batch",)),))
    git.push([configmap("b"), job("other")])
    sync(runtime, clock, prune=True)
    assert JOB in cluster.objects  # in the inventory, but excluded now: never pruned
    assert ResourceKey("batch", "Job", "ns", "other") not in cluster.objects  # excluded: not created
    assert ResourceKey("", "ConfigMap", "ns", "b") in cluster.objects and CM not in cluster.objects
    state = load_state(runtime.store, "app")[0]
    warning = [c for c in state.conditions if c["type"] == "ExcludedResourceWarning"]
    assert warning and "batch/Job ns/other" in warning[0]["message"]
    assert state.sync_status == "Synced", [(r.kind, r.name, r.status, r.requires_pruning) for r in state.resources]
    assert {r.kind for r in state.resources} == {"ConfigMap"}
    kept = copy.deepcopy(runtime.config().argo_settings)
    assert kept.excluded("batch", "Job", "https://kubernetes.default.svc")


def test_orphaned_resources_warn_lists_what_no_app_manages_in_the_namespace(world: Any) -> None:
    import dataclasses

    from tidecd.config.model import DEFAULT_PROJECT, OrphanedResources, OrphanIgnore

    runtime, cluster, git, clock = world
    git.push([configmap()])
    cluster.add({**configmap("stray"), "metadata": {"name": "stray", "namespace": "ns"}})
    cluster.add({**configmap("kept"), "metadata": {"name": "generated-x", "namespace": "ns"}})
    cluster.add({**configmap("child"), "metadata": {"name": "child", "namespace": "ns",
                                                    "ownerReferences": [{"kind": "Deployment", "name": "d"}]}})
    cluster.add({**configmap("elsewhere"), "metadata": {"name": "elsewhere", "namespace": "other"}})
    sync(runtime, clock)
    state = load_state(runtime.store, "app")[0]
    assert "OrphanedResourceWarning" not in [c["type"] for c in state.conditions]  # not asked for
    runtime.config().projects["default"] = dataclasses.replace(DEFAULT_PROJECT, orphaned_resources=OrphanedResources(
        warn=True, ignore=(OrphanIgnore(kind="ConfigMap", name="generated-*"),)))
    outcome = reconcile(runtime, "app", clock=clock)
    assert outcome.state is not None
    found = [c for c in outcome.state.conditions if c["type"] == "OrphanedResourceWarning"]
    assert len(found) == 1, outcome.state.conditions
    assert found[0]["message"] == ("1 orphaned resource(s) in namespace 'ns' (no app manages them): "
                                   "ConfigMap ns/stray")
    assert outcome.state.sync_status == "Synced"  # a warning, not a difference
