"""Refresh against the real control plane and real git: sync status, diffs, health, bad inputs."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import yaml

from tests.support.apps import GitOps, configmap, deployment, job, service


def kubectl_apply(gitops: GitOps, docs: list[dict[str, Any]]) -> None:
    subprocess.run(["kubectl", "--kubeconfig", str(gitops.dev.kubeconfig), "apply", "--server-side",
                    "-n", gitops.namespace, "-f", "-"], input=yaml.safe_dump_all(docs), text=True,
                   check=True, capture_output=True)


def wait_healthy(gitops: GitOps, name: str = "app", timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        gitops.reconcile(name, automate=False)
        if gitops.state(name).health == "Healthy":
            return
        time.sleep(1)
    raise AssertionError(f"{name} not Healthy: {gitops.state(name).health} {gitops.state(name).health_message}")


def test_hand_applied_app_is_synced_and_healthy_then_drifts_on_a_git_change(gitops: GitOps) -> None:
    docs = [deployment("web", replicas=2), service("web"), job("once")]
    gitops.push({"app/all.yaml": docs})
    gitops.application()
    kubectl_apply(gitops, docs)
    wait_healthy(gitops)
    state = gitops.state()
    assert state.sync_status == "Synced", [(str(r.key), r.changed) for r in state.resources if r.changed]
    assert {r.status for r in state.resources} == {"Synced"}
    assert len(state.resources) == 3

    gitops.push({"app/all.yaml": [deployment("web", replicas=3), service("web"), job("once")]})
    gitops.reconcile(automate=False)
    state = gitops.state()
    assert state.sync_status == "OutOfSync"
    [changed] = [r for r in state.resources if r.status == "OutOfSync"]
    assert (changed.kind, changed.name, changed.changed) == ("Deployment", "web", ["spec.replicas"])
    assert "replicas: 3" in changed.diff


def test_missing_objects_are_out_of_sync_and_missing(gitops: GitOps) -> None:
    gitops.push({"app/cm.yaml": configmap("settings"), "app/web.yaml": deployment("web")})
    gitops.application()
    gitops.reconcile(automate=False)
    state = gitops.state()
    assert state.sync_status == "OutOfSync"
    assert {(r.kind, r.health) for r in state.resources} == {("ConfigMap", "Missing"), ("Deployment", "Missing")}
    assert state.health == "Missing"
    assert gitops.live("ConfigMap", "settings") is None  # a refresh writes nothing


def test_kustomize_and_helm_apps_render_compare_and_sync(gitops: GitOps) -> None:
    gitops.push({
        "kust/kustomization.yaml": {"resources": ["cm.yaml"], "namePrefix": "base-"},
        "kust/cm.yaml": configmap("settings"),
        "chart/Chart.yaml": {"apiVersion": "v2", "name": "demo", "version": "0.1.0"},
        "chart/values.yaml": {"replicas": 1},
        "chart/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cm\n"
                                   "data:\n  replicas: \"{{ .Values.replicas }}\"\n",
    })
    gitops.application("kust", path="kust", source={"kustomize": {"namePrefix": "app-"}})
    gitops.application("chart", path="chart", source={"helm": {"releaseName": "rel",
                                                               "parameters": [{"name": "replicas", "value": "4"}]}})
    # Like Argo CD, the Application's namePrefix replaces the kustomization's own (`kustomize edit set`).
    for name, expected in (("kust", "app-settings"), ("chart", "rel-cm")):
        gitops.reconcile(name, automate=False)
        assert gitops.state(name).sync_status == "OutOfSync"
        outcome = gitops.sync(name)
        assert not outcome.changes.failed, str(outcome.changes)
        assert gitops.state(name).sync_status == "Synced"
        assert gitops.live("ConfigMap", expected) is not None
    assert gitops.live("ConfigMap", "rel-cm")["data"] == {"replicas": "4"}  # type: ignore[index]


def condition(gitops: GitOps, name: str = "app") -> str:
    state = gitops.state(name)
    assert state.sync_status == "Unknown", state.sync_status
    [cond] = state.conditions
    assert cond["type"] == "ComparisonError"
    return cond["message"]


def test_invalid_yaml_names_file_and_line(gitops: GitOps) -> None:
    gitops.push({"app/bad.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n"})
    gitops.application()
    gitops.reconcile()
    message = condition(gitops)
    assert "bad.yaml" in message and "line" in message


def test_object_without_kind_or_name(gitops: GitOps) -> None:
    gitops.push({"app/a.yaml": {"apiVersion": "v1", "metadata": {"name": "x"}}})
    gitops.application()
    gitops.reconcile()
    assert "kind" in condition(gitops)
    gitops.push({"app/a.yaml": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}})
    gitops.reconcile()
    assert "name" in condition(gitops)


def test_same_object_twice(gitops: GitOps) -> None:
    gitops.push({"app/a.yaml": configmap("dup"), "app/b.yaml": configmap("dup")})
    gitops.application()
    gitops.reconcile()
    message = condition(gitops)
    assert "dup" in message and "a.yaml" in message and "b.yaml" in message


def test_paths_leaving_the_repository_are_refused(gitops: GitOps) -> None:
    gitops.push({"app/cm.yaml": configmap("x"), "chart/Chart.yaml": {"apiVersion": "v2", "name": "c",
                                                                      "version": "0.1.0"}})
    gitops.application("up", path="../..")
    gitops.reconcile("up")
    assert "path" in condition(gitops, "up")

    gitops.repo.symlink("app/passwd.yaml", "/etc/passwd")
    gitops.push({})
    gitops.application()
    gitops.reconcile()
    message = condition(gitops)
    assert "passwd.yaml" in message and "links to absolute" in message
    assert "root:" not in message

    gitops.push({"app/passwd.yaml": None})  # a snapshot with such a link is refused whole
    gitops.application("vals", path="chart", source={"helm": {"valueFiles": ["../../../etc/passwd"]}})
    gitops.reconcile("vals")
    message = condition(gitops, "vals")
    assert "valueFiles" in message and "root:" not in message


def test_unknown_revision_and_unreachable_repo_keep_the_last_good_state(gitops: GitOps) -> None:
    gitops.push({"app/cm.yaml": configmap("x")})
    gitops.application("ghost", source={"targetRevision": "no-such-branch"})
    gitops.reconcile("ghost")
    assert "no-such-branch" in condition(gitops, "ghost")

    gitops.application()
    gitops.sync()
    good = gitops.state()
    assert good.sync_status == "Synced"
    snapshots = gitops.store.list("snapshots/")
    assert snapshots
    gitops.application(source={"repoURL": "http://127.0.0.1:9/nowhere.git"})
    gitops.reconcile()
    message = condition(gitops)
    assert "127.0.0.1:9" in message
    assert gitops.store.list("snapshots/") == snapshots
    assert gitops.state().revision == good.revision
    assert gitops.live("ConfigMap", "x") is not None
