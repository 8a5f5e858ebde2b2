"""App of apps: the ChildCluster view (Application objects recorded as generated apps, with the child's
status), the Application health check, and how the children join the config within the parent's project."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import yaml

from tidecd.base.model import HealthStatus, ResourceKey, SyncStatus
from tidecd.clients.cluster import KubeCluster
from tidecd.clients.store import LocalStore
from tidecd.generated import records as generated
from tidecd.generated.appofapps import ChildCluster
from tidecd.health import application, assess
from tidecd.runtime import Runtime, Settings
from tidecd.state import app as app_state

CHILD_KEY = ResourceKey("argoproj.io", "Application", "argocd", "child")


def child_doc(name: str = "child", *, finalizer: bool = True, namespace: str = "web",
              repo: str = "https://git.example/apps") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "argocd"}
    if finalizer:
        meta["finalizers"] = [generated.FINALIZERS[0]]
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": meta,
            "spec": {"project": "default", "source": {"repoURL": repo, "path": name},
                     "destination": {"name": "in-cluster", "namespace": namespace}}}


class Inner:
    """Everything that is not an Argo CD kind goes here."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def get(self, key: ResourceKey) -> None:
        self.calls.append(f"get {key}")

    def is_namespaced(self, group: str, kind: str) -> bool:
        return kind != "Namespace"


def children(tmp_path: Path) -> tuple[ChildCluster, Inner, LocalStore]:
    store, inner = LocalStore(tmp_path / "store"), Inner()
    return ChildCluster(cast(KubeCluster, inner), store, "root"), inner, store


def test_applied_children_are_recorded_not_sent_to_the_cluster(tmp_path: Path) -> None:
    view, inner, store = children(tmp_path)
    assert view.get(CHILD_KEY) is None
    dry = view.apply(child_doc(), dry_run=True)
    assert dry["metadata"]["name"] == "child" and view.get(CHILD_KEY) is None and view.touched == []
    live = view.apply(child_doc())
    assert view.touched == ["child"] and inner.calls == []
    assert live["status"]["sync"]["status"] == "Unknown" and live["metadata"]["resourceVersion"]
    record = generated.load_records(store)["Application/root"]
    assert record["apps"]["child"]["doc"]["spec"]["source"]["path"] == "child"
    assert [o["metadata"]["name"] for o in view.list("argoproj.io", "Application")] == ["child"]
    view.get(ResourceKey("", "ConfigMap", "web", "x"))
    assert inner.calls == ["get ConfigMap web/x"]
    assert view.is_namespaced("argoproj.io", "Application") and not view.is_namespaced("", "Namespace")


def test_a_child_reads_as_healthy_only_when_synced_and_healthy(tmp_path: Path) -> None:
    view, _, store = children(tmp_path)
    view.apply(child_doc())
    assert assess(view.get(CHILD_KEY)) == application.check(view.get(CHILD_KEY) or {})
    assert assess(view.get(CHILD_KEY)).status is HealthStatus.UNKNOWN  # type: ignore[union-attr]
    state = app_state.load(store, "child")[0]
    state.health, state.sync_status = HealthStatus.HEALTHY, SyncStatus.OUT_OF_SYNC
    app_state.save(store, state)
    assert assess(view.get(CHILD_KEY)).status is HealthStatus.PROGRESSING  # type: ignore[union-attr]
    state, generation = app_state.load(store, "child")
    state.sync_status = SyncStatus.SYNCED
    app_state.save(store, state, if_generation_match=generation)
    assert assess(view.get(CHILD_KEY)).status is HealthStatus.HEALTHY  # type: ignore[union-attr]
    state, generation = app_state.load(store, "child")
    state.health = HealthStatus.DEGRADED
    app_state.save(store, state, if_generation_match=generation)
    assert assess(view.get(CHILD_KEY)).status is HealthStatus.DEGRADED  # type: ignore[union-attr]


def test_pruning_a_child_marks_it_deleting_with_the_finalizer_and_drops_it_without(tmp_path: Path) -> None:
    view, _, store = children(tmp_path)
    view.apply(child_doc())
    view.apply(child_doc("plain", finalizer=False))
    view.delete(CHILD_KEY)
    view.delete(ResourceKey("argoproj.io", "Application", "argocd", "plain"))
    record = generated.load_records(store)["Application/root"]
    assert record["apps"]["child"]["deleting"] is True and "plain" not in record["apps"]
    assert view.get(CHILD_KEY) is None  # a deleting child is gone for its parent


def write_parent(tmp_path: Path, project: dict[str, Any] | None = None) -> Runtime:
    config = tmp_path / "config"
    config.mkdir()
    parent = child_doc("root")
    parent["spec"]["project"] = "narrow" if project else "default"
    docs = [parent] + ([project] if project else [])
    (config / "root.yaml").write_text(yaml.safe_dump_all(docs))
    return Runtime(settings=Settings(config=str(config), store=str(tmp_path / "store")),
                   store=LocalStore(tmp_path / "store"))


def test_children_join_the_config_owned_by_their_parent(tmp_path: Path) -> None:
    runtime = write_parent(tmp_path)
    ChildCluster(cast(KubeCluster, Inner()), runtime.store, "root").apply(child_doc())
    config = runtime.config()
    assert config.owners == {"child": "Application/root"}
    assert config.applications["child"].destination.namespace == "web"


def test_a_child_may_not_widen_the_parents_project(tmp_path: Path) -> None:
    narrow = {"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "narrow"},
              "spec": {"sourceRepos": ["https://git.example/*"],
                       "destinations": [{"name": "in-cluster", "namespace": "web"}]}}
    runtime = write_parent(tmp_path, narrow)
    view = ChildCluster(cast(KubeCluster, Inner()), runtime.store, "root")
    view.apply(child_doc("ok"))
    view.apply(child_doc("elsewhere", namespace="kube-system"))
    view.apply(child_doc("foreign", repo="https://other.example/x"))
    config = runtime.config()
    assert "ok" in config.applications
    assert "namespace 'kube-system' is not permitted" in config.invalid["elsewhere"]
    assert "the parent root's project 'narrow' does not allow it" in config.invalid["elsewhere"]
    assert "other.example" in config.invalid["foreign"]


def test_a_deleted_parent_takes_its_children_with_it(tmp_path: Path) -> None:
    runtime = write_parent(tmp_path)
    view = ChildCluster(cast(KubeCluster, Inner()), runtime.store, "root")
    view.apply(child_doc())
    view.apply(child_doc("plain", finalizer=False))
    (tmp_path / "config" / "root.yaml").unlink()
    config = Runtime(settings=runtime.settings, store=runtime.store).config()
    assert config.deleting == {"child"} and "plain" not in config.applications
