"""Argo CD material that used to fail or be ignored, synced against the real control plane (issue 12):
generateName hooks, hook-weight waves, app-level sync options, jsonnet directories, jq ignore rules with
RespectIgnoreDifferences, and managedNamespaceMetadata."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest

from tests.support.apps import GitOps, configmap, deployment, job
from tidecd.state.app import AppState

pytestmark = pytest.mark.e2e

HOOK = "argocd.argoproj.io/hook"
DELETE_POLICY = "argocd.argoproj.io/hook-delete-policy"


def assert_succeeded(state: AppState) -> None:
    assert state.operation is not None
    assert state.operation.phase == "Succeeded", state.operation.message


def generated_job(prefix: str, **annotations: str) -> dict[str, Any]:
    obj = job("unused", annotations=annotations)
    del obj["metadata"]["name"]
    obj["metadata"]["generateName"] = prefix
    return obj


def jobs(gitops: GitOps, prefix: str) -> list[dict[str, Any]]:
    listed = gitops.kube.list("batch", "Job", namespace=gitops.namespace)
    return [j for j in listed
            if j["metadata"]["name"].startswith(prefix) and not j["metadata"].get("deletionTimestamp")]


def test_generate_name_hooks_run_once_per_sync_with_their_delete_policies(gitops: GitOps) -> None:
    gitops.push({
        "app/migrate.yaml": generated_job("migrate-", **{HOOK: "PreSync"}),
        "app/smoke.yaml": generated_job("smoke-", **{HOOK: "PostSync", DELETE_POLICY: "HookSucceeded"}),
        "app/cm.yaml": configmap("cm"),
    })
    gitops.application()
    gitops.sync()
    state = gitops.state()
    assert_succeeded(state)
    [first] = jobs(gitops, "migrate-")
    assert first["metadata"]["name"].startswith(f"migrate-{state.revision[:7]}-presync-")
    assert first["metadata"]["generateName"] == "migrate-"
    assert jobs(gitops, "smoke-") == []  # HookSucceeded deleted it
    assert {r.kind for r in state.resources} == {"ConfigMap"}  # hooks are not resources
    # The next sync creates a new hook and (BeforeHookCreation) removes this app's earlier copy.
    gitops.sync()
    assert_succeeded(gitops.state())
    [second] = jobs(gitops, "migrate-")
    assert second["metadata"]["name"] != first["metadata"]["name"]


def test_hook_weight_orders_plain_objects_as_a_wave(gitops: GitOps) -> None:
    weight = "helm.sh/hook-weight"
    gitops.push({"app/db.yaml": deployment("db", annotations={weight: "-1"}), "app/web.yaml": deployment("web")})
    gitops.application()
    gitops.sync()
    assert_succeeded(gitops.state())
    db, web = gitops.live("Deployment", "db", "apps"), gitops.live("Deployment", "web", "apps")
    assert db is not None and web is not None
    [available] = [c for c in db["status"]["conditions"] if c["type"] == "Available" and c["status"] == "True"]

    def ts(text: str) -> datetime.datetime:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))

    assert ts(web["metadata"]["creationTimestamp"]) >= ts(available["lastTransitionTime"])


def test_app_level_replace_recreates_an_immutable_object_and_unknown_options_are_reported(gitops: GitOps) -> None:
    gitops.push({"app/job.yaml": job("once", "echo 1")})
    gitops.application(sync_options=["Replace=true", "Force=true", "Prune=confirm"])  # Force: recreate on immutable
    gitops.sync()
    assert_succeeded(gitops.state())
    uid = gitops.live("Job", "once", "batch")["metadata"]["uid"]  # type: ignore[index]
    gitops.push({"app/job.yaml": job("once", "echo 2")})  # a Job's template is immutable
    gitops.sync()
    state = gitops.state()
    assert_succeeded(state)
    live = gitops.live("Job", "once", "batch")
    assert live is not None and live["metadata"]["uid"] != uid
    assert "echo 2" in live["spec"]["template"]["spec"]["containers"][0]["command"]
    [condition] = [c for c in state.conditions if c["type"] == "UnsupportedSyncOption"]
    assert "'Prune=confirm' is not supported by tidecd" in condition["message"]


def test_jsonnet_directory_renders_with_tlas_ext_vars_and_libs(gitops: GitOps) -> None:
    gitops.push({
        "lib/cm.libsonnet": "{ cm(name, data):: { apiVersion: 'v1', kind: 'ConfigMap', "
                            "metadata: { name: name }, data: data } }\n",
        "app/main.jsonnet": "local k = import 'cm.libsonnet';\n"
                            "function(count=1) [k.cm('env', { env: std.extVar('env') }),"
                            " k.cm('count', { n: std.toString(count * 2) })]\n",
    })
    gitops.application(source={"directory": {"jsonnet": {
        "tlas": [{"name": "count", "value": "21", "code": True}],
        "extVars": [{"name": "env", "value": "prod"}], "libs": ["lib"]}}})
    gitops.sync()
    state = gitops.state()
    assert_succeeded(state)
    assert gitops.live("ConfigMap", "env")["data"] == {"env": "prod"}  # type: ignore[index]
    assert gitops.live("ConfigMap", "count")["data"] == {"n": "42"}  # type: ignore[index]
    assert (state.sync_status, len(state.resources)) == ("Synced", 2)


def test_jq_ignore_rules_and_respect_ignore_differences(gitops: GitOps) -> None:
    gitops.push({"app/web.yaml": deployment("web", replicas=1)})
    gitops.application(
        sync_options=["RespectIgnoreDifferences=true"],
        extra_spec={"ignoreDifferences": [{"group": "apps", "kind": "Deployment",
                                           "jqPathExpressions": [".spec.replicas"]}]})
    gitops.sync()
    assert_succeeded(gitops.state())
    # Someone (an autoscaler) scales it: the ignored field does not make the app OutOfSync...
    path = gitops.kube.resource("apps", "Deployment").path(gitops.namespace, "web")
    gitops.kube.request("PATCH", path, body={"spec": {"replicas": 3}}, query={"fieldManager": "hpa"},
                        content_type="application/merge-patch+json")
    gitops.reconcile(automate=False)
    assert gitops.state().sync_status == "Synced"
    # ...and a sync of another change keeps the live value of the ignored field.
    gitops.push({"app/web.yaml": deployment("web", replicas=1, image="nginx:1.28")})
    gitops.sync()
    assert_succeeded(gitops.state())
    live = gitops.live("Deployment", "web", "apps")
    assert live is not None
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.28"
    assert live["spec"]["replicas"] == 3


def test_create_namespace_with_managed_namespace_metadata(gitops: GitOps) -> None:
    target = f"{gitops.namespace}-managed-{uuid.uuid4().hex[:4]}"
    gitops.push({"app/cm.yaml": configmap("cm")})
    gitops.application(namespace=target, sync_options=["CreateNamespace=true"],
                       managedNamespaceMetadata={"labels": {"team": "payments"},
                                                 "annotations": {"owner": "alice"}})
    try:
        gitops.sync()
        assert_succeeded(gitops.state())
        ns = gitops.live("Namespace", target, namespace="")
        assert ns is not None
        assert ns["metadata"]["labels"]["team"] == "payments"
        assert ns["metadata"]["annotations"]["owner"] == "alice"
        assert gitops.live("ConfigMap", "cm", namespace=target) is not None
    finally:
        from tidecd.base.model import ResourceKey

        gitops.kube.delete(ResourceKey("", "Namespace", "", target))
