"""Sync against the control plane with controller-manager, scheduler and kwok: Argo CD's semantics."""

from __future__ import annotations

import datetime
import subprocess
import threading
import time
from typing import Any

import pytest

from tests.support.apps import GitOps, configmap, deployment, job, service
from tidecd.base.model import Action
from tidecd.clients.cluster import KubeCluster
from tidecd.state.app import AppState
from tidecd.usecases.commands import SyncRequest

WAVE = "argocd.argoproj.io/sync-wave"
HOOK = "argocd.argoproj.io/hook"
DELETE_POLICY = "argocd.argoproj.io/hook-delete-policy"


def ts(obj: dict[str, Any] | None, path: str = "metadata.creationTimestamp") -> datetime.datetime:
    value: Any = obj
    for part in path.split("."):
        value = value[part]
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


def available_since(dep: dict[str, Any] | None) -> datetime.datetime:
    assert dep is not None
    [cond] = [c for c in dep["status"]["conditions"] if c["type"] == "Available" and c["status"] == "True"]
    return ts(cond, "lastTransitionTime")


def assert_succeeded(state: AppState) -> None:
    assert state.operation is not None
    assert state.operation.phase == "Succeeded", state.operation.message


def test_waves_wait_for_the_previous_wave_to_be_available(gitops: GitOps) -> None:
    gitops.push({"app/db.yaml": deployment("db", annotations={WAVE: "0"}),
                 "app/web.yaml": deployment("web", annotations={WAVE: "1"})})
    gitops.application()
    gitops.sync()
    state = gitops.state()
    assert_succeeded(state)
    # The last wave is not waited for (as gitops-engine): the app may still be Progressing, then turns Healthy.
    assert state.sync_status == "Synced" and state.health in ("Progressing", "Healthy")
    deadline = time.monotonic() + 60
    while gitops.state().health != "Healthy":
        assert time.monotonic() < deadline, gitops.state().health_message
        time.sleep(0.5)
        gitops.reconcile(automate=False)
    db, web = gitops.live("Deployment", "db", "apps"), gitops.live("Deployment", "web", "apps")
    assert ts(web) >= available_since(db)


def test_hooks_run_in_their_phases_and_delete_policies_hold(gitops: GitOps) -> None:
    gitops.push({
        "app/pre.yaml": job("pre", annotations={HOOK: "PreSync"}),
        "app/pre-gone.yaml": job("pre-gone", annotations={HOOK: "PreSync", DELETE_POLICY: "HookSucceeded"}),
        "app/web.yaml": deployment("web"),
        "app/post.yaml": job("post", annotations={HOOK: "PostSync"}),
    })
    gitops.application()
    gitops.sync()
    state = gitops.state()
    assert_succeeded(state)
    pre, post = gitops.live("Job", "pre", "batch"), gitops.live("Job", "post", "batch")
    web = gitops.live("Deployment", "web", "apps")
    assert ts(pre, "status.completionTime") <= ts(web)
    assert ts(post) >= available_since(web)
    assert gitops.live("Job", "pre-gone", "batch") is None
    assert {r.kind for r in state.resources} == {"Deployment"}  # hooks are not resources
    # BeforeHookCreation: a second sync recreates the hook (a new uid).
    old_uid = pre["metadata"]["uid"]  # type: ignore[index]
    gitops.sync()
    assert gitops.live("Job", "pre", "batch")["metadata"]["uid"] != old_uid  # type: ignore[index]


def test_a_failing_presync_hook_stops_the_sync_and_runs_syncfail(gitops: GitOps) -> None:
    gitops.push({
        "app/pre.yaml": job("pre", fail=True, annotations={HOOK: "PreSync"}),
        "app/cleanup.yaml": job("cleanup", annotations={HOOK: "SyncFail"}),
        "app/web.yaml": deployment("web"),
    })
    gitops.application()
    gitops.sync()
    state = gitops.state()
    assert state.operation is not None and state.operation.phase == "Failed"
    assert "pre" in state.operation.message and "PreSync" in state.operation.message
    assert gitops.live("Deployment", "web", "apps") is None
    assert gitops.live("Job", "cleanup", "batch") is not None


def test_prune_with_and_without_and_prune_false(gitops: GitOps) -> None:
    gitops.push({"app/a.yaml": configmap("a"), "app/b.yaml": configmap("b"),
                 "app/keep.yaml": configmap("keep", annotations={"argocd.argoproj.io/sync-options": "Prune=false"})})
    gitops.application()
    assert not gitops.sync().changes.failed
    gitops.push({"app/b.yaml": None, "app/keep.yaml": None})
    outcome = gitops.sync()
    actions = {e.key.name: e.action for e in outcome.changes.entries}
    assert actions["b"] is Action.PRUNE_SKIPPED and actions["keep"] is Action.PRUNE_SKIPPED
    assert gitops.live("ConfigMap", "b") is not None
    state = gitops.state()
    assert state.sync_status == "OutOfSync"
    assert {r.name for r in state.resources if r.requires_pruning} == {"b", "keep"}
    outcome = gitops.sync(prune=True)
    actions = {e.key.name: e.action for e in outcome.changes.entries}
    assert actions["b"] is Action.PRUNED and actions["keep"] is Action.PRUNE_SKIPPED
    assert gitops.live("ConfigMap", "b") is None
    assert gitops.live("ConfigMap", "keep") is not None


def test_prune_never_touches_objects_of_another_app(gitops: GitOps) -> None:
    gitops.push({"app/a.yaml": configmap("shared-name"), "app/b.yaml": configmap("b"),
                 "other/a.yaml": configmap("other-only")})
    gitops.application("first")
    gitops.application("second", path="other")
    gitops.sync("first")
    gitops.sync("second")
    gitops.push({"app/a.yaml": None})
    gitops.sync("first", prune=True)
    assert gitops.live("ConfigMap", "shared-name") is None
    assert gitops.live("ConfigMap", "other-only") is not None


def test_self_heal_restores_scaled_and_deleted_objects(gitops: GitOps) -> None:
    gitops.push({"app/web.yaml": deployment("web", replicas=2), "app/cm.yaml": configmap("settings")})
    gitops.application(automated={"prune": True, "selfHeal": True})
    gitops.reconcile()
    assert_succeeded(gitops.state())
    kubectl = ["kubectl", "--kubeconfig", str(gitops.dev.kubeconfig), "-n", gitops.namespace]
    subprocess.run([*kubectl, "scale", "deployment/web", "--replicas=5"], check=True, capture_output=True)
    subprocess.run([*kubectl, "delete", "configmap/settings"], check=True, capture_output=True)
    gitops.reconcile()
    assert gitops.live("Deployment", "web", "apps")["spec"]["replicas"] == 2  # type: ignore[index]
    assert gitops.live("ConfigMap", "settings") is not None
    state = gitops.state()
    assert state.sync_status == "Synced", [(r.name, r.changed, r.diff) for r in state.resources if r.changed]


def test_automated_without_self_heal_syncs_a_revision_once(gitops: GitOps) -> None:
    gitops.push({"app/cm.yaml": configmap("settings", {"v": "1"})})
    gitops.application(automated={})
    gitops.reconcile()
    assert gitops.live("ConfigMap", "settings")["data"] == {"v": "1"}  # type: ignore[index]
    subprocess.run(["kubectl", "--kubeconfig", str(gitops.dev.kubeconfig), "-n", gitops.namespace, "patch",
                    "configmap/settings", "-p", '{"data":{"v":"hand"}}'], check=True, capture_output=True)
    gitops.reconcile()
    assert gitops.live("ConfigMap", "settings")["data"] == {"v": "hand"}  # type: ignore[index]
    assert gitops.state().sync_status == "OutOfSync"
    gitops.push({"app/cm.yaml": configmap("settings", {"v": "2"})})
    gitops.reconcile()
    assert gitops.live("ConfigMap", "settings")["data"] == {"v": "2"}  # type: ignore[index]


def test_a_no_op_resync_makes_zero_writes(gitops: GitOps) -> None:
    gitops.push({"app/web.yaml": deployment("web"), "app/cm.yaml": configmap("c")})
    gitops.application()
    gitops.sync()
    # The sync does not wait for its last wave: let the rollout settle (its status writes change the
    # Deployment's resourceVersion) so that nothing changes between the refresh and the resync.
    deadline = time.monotonic() + 60
    while gitops.state().health != "Healthy":
        assert time.monotonic() < deadline, gitops.state().health_message
        time.sleep(0.5)
        gitops.reconcile(automate=False)
    runtime = gitops.runtime()
    gitops.reconcile(runtime=runtime, request=None)
    before = gitops.live("Deployment", "web", "apps")["metadata"]["resourceVersion"]  # type: ignore[index]
    outcome = gitops.reconcile(runtime=runtime, request=SyncRequest())
    cluster = runtime.cluster(runtime.app(gitops.real("app")).destination)
    assert cluster.writes == 0
    assert {e.action for e in outcome.changes.entries} == {Action.UNCHANGED}
    assert gitops.live("Deployment", "web", "apps")["metadata"]["resourceVersion"] == before  # type: ignore[index]


def test_history_rollback_and_dry_run(gitops: GitOps) -> None:
    gitops.push({"app/cm.yaml": configmap("settings", {"v": "1"})})
    gitops.application(automated={})
    gitops.reconcile()
    gitops.push({"app/cm.yaml": configmap("settings", {"v": "2"})})
    gitops.reconcile()
    history = gitops.state().history
    assert [h.result for h in history] == ["Succeeded", "Succeeded"]
    gitops.reconcile(request=SyncRequest(revision=history[0].revision, rollback=True))
    assert gitops.live("ConfigMap", "settings")["data"] == {"v": "1"}  # type: ignore[index]
    state = gitops.state()
    assert state.automation.disabled
    gitops.reconcile()  # automated sync is off after a rollback
    assert gitops.live("ConfigMap", "settings")["data"] == {"v": "1"}  # type: ignore[index]
    outcome = gitops.sync(dry_run=True)
    assert [e.action for e in outcome.changes.entries] == [Action.CONFIGURED]
    assert gitops.live("ConfigMap", "settings")["data"] == {"v": "1"}  # type: ignore[index]


def test_project_rules_apply_nothing_and_name_every_object(gitops: GitOps) -> None:
    gitops.project({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "team"},
                    "spec": {"sourceRepos": ["*"], "destinations": [{"name": "in-cluster",
                                                                     "namespace": gitops.namespace}],
                             "clusterResourceBlacklist": [{"group": "rbac.authorization.k8s.io",
                                                           "kind": "ClusterRole"}]}})
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": f"{gitops.namespace}-reader"}, "rules": []}
    elsewhere = {**configmap("elsewhere"), "metadata": {"name": "elsewhere", "namespace": "kube-system"}}
    gitops.push({"app/ok.yaml": configmap("ok"), "app/role.yaml": role, "app/away.yaml": elsewhere})
    gitops.application(project="team")
    gitops.sync()
    state = gitops.state()
    assert state.operation is not None and state.operation.phase == "Failed"
    assert "ClusterRole" in state.operation.message and "kube-system/elsewhere" in state.operation.message
    assert gitops.live("ConfigMap", "ok") is None


def test_immutable_field_change_suggests_replace(gitops: GitOps) -> None:
    gitops.push({"app/job.yaml": job("once", "echo 1")})
    gitops.application()
    gitops.sync()
    assert_succeeded(gitops.state())
    gitops.push({"app/job.yaml": job("once", "echo 2")})
    gitops.sync()
    state = gitops.state()
    assert state.operation is not None and state.operation.phase == "Failed"
    assert "immutable" in state.operation.message and "Replace=true,Force=true" in state.operation.message
    assert "(value omitted)" in state.operation.message and len(state.operation.message) < 600
    # Argo CD (sync-options.md, TestSyncWithForceReplace): a plain replace fails on an immutable field too;
    # Force=true deletes the object and creates it again
    gitops.push({"app/job.yaml": job("once", "echo 2",
                                     annotations={"argocd.argoproj.io/sync-options": "Replace=true"})})
    gitops.sync()
    state = gitops.state()
    assert state.operation is not None and state.operation.phase == "Failed" and "immutable" in state.operation.message
    gitops.push({"app/job.yaml": job("once", "echo 2",
                                     annotations={"argocd.argoproj.io/sync-options": "Replace=true,Force=true"})})
    gitops.sync()
    assert_succeeded(gitops.state())


def test_api_server_stopped_mid_sync_is_waited_out_and_the_sync_goes_on(gitops: GitOps) -> None:
    """The operation waits through continuations (the retry policy's backoff), keeping what it applied, and
    goes on once the API server answers; nothing is pruned before every wave is done. The 30 s restart in
    the middle of a wave's health wait, each step timed, is tests/reliability/test_apiserver_outage.py."""
    gitops.push({"app/a.yaml": configmap("a"), "app/old.yaml": configmap("old")})
    gitops.application(automated={"prune": True}, retry={"limit": 6, "backoff": {"duration": "1s"}})
    gitops.reconcile()
    gitops.push({"app/web.yaml": deployment("web", replicas=1), "app/old.yaml": None,
                 "app/b.yaml": configmap("b", annotations={WAVE: "1"})})
    result: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: result.setdefault("outcome", gitops.reconcile()))
    worker.start()
    deadline = time.monotonic() + 60
    while gitops.live("Deployment", "web", "apps") is None:
        assert time.monotonic() < deadline, "sync never started"
        time.sleep(0.05)
    gitops.dev.stop_apiserver()
    try:
        deadline = time.monotonic() + 60
        while "waiting for the API server" not in ((op := gitops.state().operation) and op.step or ""):
            assert time.monotonic() < deadline and worker.is_alive(), gitops.state().operation
            time.sleep(0.1)
        op = gitops.state().operation
        assert op is not None and op.running and "unreachable" in op.message, op
    finally:
        gitops.dev.start_apiserver()
    worker.join(120)
    state = gitops.state()
    assert_succeeded(state)
    assert state.operation is not None and state.operation.retry.count >= 1
    assert gitops.live("ConfigMap", "old") is None
    assert gitops.live("ConfigMap", "b") is not None


def test_a_crd_and_its_custom_resources_sync_in_one_app(gitops: GitOps) -> None:
    group = f"{gitops.namespace}.example.com"
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": f"widgets.{group}"},
           "spec": {"group": group, "scope": "Namespaced",
                    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}
    widget = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 3}}
    gitops.push({"app/crd.yaml": crd, "app/widget.yaml": widget})
    gitops.application()
    dry = gitops.sync(dry_run=True)
    assert not dry.changes.failed, str(dry.changes)
    gitops.sync()
    state = gitops.state()
    assert_succeeded(state)
    assert state.sync_status == "Synced", [(r.name, r.changed) for r in state.resources]
    assert gitops.live("Widget", "w1", group)["spec"] == {"size": 3}  # type: ignore[index]
    runtime = gitops.runtime()
    outcome = gitops.reconcile(request=SyncRequest(), runtime=runtime)
    assert {e.action for e in outcome.changes.entries} == {Action.UNCHANGED}
    assert runtime.cluster(runtime.app(gitops.real("app")).destination).writes == 0


def test_a_sync_writes_each_changed_object_once(gitops: GitOps) -> None:
    """No dry-run after the apply: what the apply returned is recorded as the compared state."""
    gitops.push({"app/a.yaml": configmap("a"), "app/b.yaml": configmap("b")})
    gitops.application()
    runtime = gitops.runtime()
    gitops.reconcile(request=SyncRequest(), runtime=runtime)
    cluster = runtime.cluster(runtime.app(gitops.real("app")).destination)
    assert cluster.writes == 4  # new objects: a dry-run of each before the first write, then two applies
    assert gitops.state().sync_status == "Synced"
    gitops.push({"app/a.yaml": configmap("a", {"k": "changed"})})
    cluster.writes = 0
    gitops.reconcile(request=SyncRequest(), runtime=runtime)
    assert cluster.writes == 2  # one dry-run found the change (and checked it), one apply made it
    assert gitops.state().sync_status == "Synced"


def test_workloads_are_applied_after_what_they_need_and_before_data_nothing_names(
        gitops: GitOps, monkeypatch: pytest.MonkeyPatch) -> None:
    """Within a wave: the ConfigMap a Deployment mounts and its Service are applied (answered) before the
    Deployment is sent; ConfigMaps no workload names are sent after it (`plan.apply_batches`), so its
    rollout starts while they apply."""
    web = deployment("web")
    pod = web["spec"]["template"]["spec"]
    pod["volumes"] = [{"name": "settings", "configMap": {"name": "mounted"}}]
    pod["containers"][0]["volumeMounts"] = [{"name": "settings", "mountPath": "/etc/web"}]
    unnamed = {f"app/data-{i:02d}.yaml": configmap(f"data-{i:02d}") for i in range(16)}
    gitops.push({"app/web.yaml": web, "app/svc.yaml": service("web"), "app/mounted.yaml": configmap("mounted"),
                 **unnamed})
    gitops.application()
    sent: dict[str, float] = {}
    answered: dict[str, float] = {}
    real = KubeCluster.apply_as

    def timed(self: KubeCluster, obj: dict[str, Any], manager: str, *, dry_run: bool = False) -> dict[str, Any]:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        if not dry_run:
            sent[name] = time.monotonic()
        result = real(self, obj, manager, dry_run=dry_run)
        if not dry_run:
            answered[name] = time.monotonic()
        return result

    monkeypatch.setattr(KubeCluster, "apply_as", timed)
    gitops.sync()
    assert_succeeded(gitops.state())

    start = sent["Deployment/web"]
    assert answered["ConfigMap/mounted"] < start and answered["Service/web"] < start
    later = [n for n in (f"ConfigMap/data-{i:02d}" for i in range(16)) if sent[n] > start]
    assert len(later) >= 16 - 8, later  # queued behind the Deployment (8 applies run at once)
