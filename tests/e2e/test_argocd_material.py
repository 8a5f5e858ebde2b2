"""Argo CD material as people have it, against the real control plane (issue 12): an Argo CD install directory
(argocd-cm, argocd-rbac-cm, argocd-secret, an Application as `kubectl get -o yaml` prints it) is a config source
that syncs, argocd-cm's ignoreDifferences and exclusions act on the real diff, and AppProject syncWindows
block and let through automated and manual syncs."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.support.apps import GitOps, configmap, job
from tidecd.base.errors import SyncWindowClosed

pytestmark = pytest.mark.e2e


def write(gitops: GitOps, name: str, doc: dict[str, Any]) -> None:
    (gitops.config_dir / name).write_text(yaml.safe_dump(doc))


def settings_objects(gitops: GitOps) -> None:
    write(gitops, "argocd-cm.yaml", {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "argocd-cm", "namespace": "argocd", "labels": {"app.kubernetes.io/part-of": "argocd"}},
        "data": {
            "url": "https://argocd.example.com",
            "resource.customizations.ignoreDifferences.ConfigMap": "jsonPointers:\n- /data/drift\n",
            "resource.exclusions": "- apiGroups: [batch]\n  kinds: [Job]\n",
            "timeout.reconciliation": "180s",
        }})
    write(gitops, "argocd-rbac-cm.yaml", {"apiVersion": "v1", "kind": "ConfigMap",
                                          "metadata": {"name": "argocd-rbac-cm"},
                                          "data": {"policy.default": "role:readonly"}})
    write(gitops, "argocd-secret.yaml", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "argocd-secret"},
                                         "stringData": {"server.secretkey": "never-read"}})


def as_kubectl_get(gitops: GitOps, name: str) -> None:
    """Rewrite the app's file the way `kubectl get application -o yaml` prints it."""
    path = gitops.config_dir / f"{name}.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["metadata"].update({"uid": "5f1c7f2e-4a59-4d8e-9d0e-0d6c2f8f1a11", "resourceVersion": "918273",
                            "generation": 3, "creationTimestamp": "2026-11-30T09:12:44Z",
                            "managedFields": [{"manager": "argocd-server", "operation": "Update"}]})
    doc["status"] = {"sync": {"status": "Synced"}, "health": {"status": "Healthy"}}
    doc["operation"] = {"sync": {"revision": "HEAD"}}
    path.write_text(yaml.safe_dump(doc))


def test_an_argo_cd_install_directory_is_a_config_source_and_argocd_cm_acts_on_the_diff(gitops: GitOps) -> None:
    settings_objects(gitops)
    gitops.push({"app/cm.yaml": {**configmap("settings"), "data": {"drift": "from-git", "kept": "1"}},
                 "app/job.yaml": job("migrate", "echo 1")})
    name = gitops.application()
    as_kubectl_get(gitops, name)
    runtime = gitops.runtime()
    assert runtime.config().invalid == {} and runtime.config().problems == []
    gitops.sync()
    state = gitops.state()
    assert state.operation is not None
    assert state.operation.phase == "Succeeded", state.operation.message
    assert gitops.live("ConfigMap", "settings") is not None
    assert gitops.live("Job", "migrate", "batch") is None  # excluded by argocd-cm: never created
    assert "ExcludedResourceWarning" in [c["type"] for c in state.conditions]
    drifted = {"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "settings", "namespace": gitops.namespace},
               "data": {"drift": "changed in the cluster"}}
    gitops.kube.apply_as(drifted, "someone-else")  # another field manager changes one key
    assert gitops.live("ConfigMap", "settings")["data"]["drift"] == "changed in the cluster"  # type: ignore[index]
    gitops.reconcile(automate=False)
    assert gitops.state().sync_status == "Synced"  # argocd-cm ignores /data/drift
    write(gitops, "argocd-cm.yaml", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argocd-cm"},
                                     "data": {}})
    gitops.reconcile(automate=False)
    assert gitops.state().sync_status == "OutOfSync"  # the same drift, no customization


def project(gitops: GitOps, *windows: dict[str, Any]) -> None:
    gitops.project({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "team"},
                    "spec": {"sourceRepos": ["*"], "destinations": [{"name": "*", "server": "*", "namespace": "*"}],
                             "syncWindows": list(windows)}})


ALWAYS = {"schedule": "* * * * *", "duration": "1h", "applications": ["*"]}
NEVER_NOW = {"schedule": "0 0 29 2 1", "duration": "1m", "applications": ["*"]}  # a leap-year Monday, 00:00


def test_sync_windows_block_automated_and_manual_syncs_and_manual_sync_lets_one_through(gitops: GitOps) -> None:
    gitops.push({"app/cm.yaml": configmap("windowed")})
    project(gitops, {"kind": "deny", **ALWAYS})
    gitops.application(project="team", automated={"prune": True})
    gitops.reconcile()
    state = gitops.state()
    assert state.operation is None and gitops.live("ConfigMap", "windowed") is None
    [blocked] = [c for c in state.conditions if c["type"] == "SyncWindowBlocked"]
    assert "automated sync blocked by the active deny window deny:* * * * *:1h of project 'team'" in blocked["message"]
    with pytest.raises(SyncWindowClosed, match="manual sync blocked"):
        gitops.sync()
    project(gitops, {"kind": "deny", "manualSync": True, **ALWAYS})
    gitops.sync()
    assert gitops.live("ConfigMap", "windowed") is not None  # manualSync lets the manual sync through
    gitops.push({"app/cm.yaml": {**configmap("windowed"), "data": {"k": "v2"}}})
    project(gitops, {"kind": "allow", **NEVER_NOW})  # outside every allow window: automated stays blocked
    gitops.reconcile()
    assert gitops.live("ConfigMap", "windowed")["data"] != {"k": "v2"}  # type: ignore[index]
    project(gitops, {"kind": "allow", **ALWAYS})  # the window opens: the next refresh syncs
    gitops.reconcile()
    assert gitops.live("ConfigMap", "windowed")["data"] == {"k": "v2"}  # type: ignore[index]
    assert "SyncWindowBlocked" not in [c["type"] for c in gitops.state().conditions]
