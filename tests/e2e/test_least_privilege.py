"""Least privilege on clusters, against the real control plane: syncs that act as a ServiceAccount
(Argo CD's sync impersonation), and a cluster reached through an exec credential plugin whose short-lived
tokens are refreshed."""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from pathlib import Path

import yaml

from tests.support.apps import GitOps, configmap, service
from tidecd.base import constants
from tidecd.base.model import ResourceKey
from tidecd.clients import credentials
from tidecd.usecases.preview import preview_app

RBAC = "rbac.authorization.k8s.io"


def enable_impersonation(gitops: GitOps) -> None:
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argocd-cm", "namespace": "argocd"},
           "data": {"application.sync.impersonation.enabled": "true"}}
    (gitops.config_dir / "argocd-cm.yaml").write_text(yaml.safe_dump(doc))


def project(gitops: GitOps, accounts: list[dict[str, str]]) -> None:
    gitops.project({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
                    "metadata": {"name": "team", "namespace": "argocd"},
                    "spec": {"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}],
                             "destinationServiceAccounts": accounts}})


def deployer(gitops: GitOps, name: str, resources: list[str], verbs: list[str] | None = None) -> None:
    """A ServiceAccount of the test's namespace that may change only `resources` there."""
    ns, kube = gitops.namespace, gitops.kube
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}})
    kube.apply({"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": {"name": name, "namespace": ns},
                "rules": [{"apiGroups": [""], "resources": resources,
                           "verbs": verbs or ["get", "list", "watch", "create", "patch", "update", "delete"]}]})
    kube.apply({"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding", "metadata": {"name": name, "namespace": ns},
                "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]})


def test_a_sync_acts_as_the_projects_service_account_and_applies_nothing_it_may_not(gitops: GitOps) -> None:
    enable_impersonation(gitops)
    project(gitops, [{"server": "https://other.example", "namespace": "*", "defaultServiceAccount": "nobody"},
                     {"server": "*", "namespace": gitops.namespace, "defaultServiceAccount": "deployer"},
                     {"server": "*", "namespace": "*", "defaultServiceAccount": "never-reached"}])
    deployer(gitops, "deployer", ["configmaps"])  # may change ConfigMaps, not Services
    gitops.push({"app/cm.yaml": configmap("settings"), "app/svc.yaml": service("web")})
    gitops.application(project="team")
    gitops.sync()
    state = gitops.state()
    assert state.operation is not None and state.operation.phase in ("Failed", "Error"), state.operation
    message = state.operation.message + " ".join(r.message for r in state.operation.results)
    user = f"system:serviceaccount:{gitops.namespace}:deployer"
    assert 'services "web" is forbidden' in message and user in message, message
    assert "cannot patch" in message or "cannot create" in message, message
    # the up-front dry-run acted as the ServiceAccount too: nothing was half-applied
    assert gitops.live("ConfigMap", "settings") is None and gitops.live("Service", "web") is None
    # a pull request's preview dry-runs as the sync would, so it shows the refusal before anyone syncs
    runtime = gitops.runtime()
    preview = preview_app(runtime, runtime.app(gitops.real("app")), "")
    assert any('services "web" is forbidden' in error and user in error for error in preview.errors), preview.errors

    deployer(gitops, "deployer", ["configmaps", "services"])
    gitops.sync()
    state = gitops.state()
    assert state.operation is not None
    assert state.operation.phase == "Succeeded", state.operation.message
    made = gitops.live("Service", "web")
    assert made is not None and gitops.live("ConfigMap", "settings") is not None
    managers = {entry.get("manager") for entry in made["metadata"].get("managedFields") or []}
    assert constants.FIELD_MANAGER in managers


def test_no_matching_service_account_fails_the_sync_as_argo_cd_does(gitops: GitOps) -> None:
    enable_impersonation(gitops)
    project(gitops, [{"server": "*", "namespace": "elsewhere-*", "defaultServiceAccount": "deployer"}])
    gitops.push({"app/cm.yaml": configmap("settings")})
    gitops.application(project="team")
    gitops.sync()
    state = gitops.state()
    said = " ".join([state.operation.message if state.operation else "",
                     *(c.get("message", "") for c in state.conditions)])
    assert ("failed to find a matching service account to impersonate: no matching service account found "
            f"for destination server https://kubernetes.default.svc and namespace {gitops.namespace}") in said, said
    assert gitops.live("ConfigMap", "settings") is None


PLUGIN = '''\
"""A stand-in exec credential plugin: each run makes a new ServiceAccount token bound to a new Secret and
deletes the previous Secret, which revokes the previous token; it reports a short expiry."""
import datetime, json, os, time
from tidecd.base.model import ResourceKey
from tidecd.clients.cluster import KubeCluster

count_file, ns = os.environ["COUNT_FILE"], os.environ["NS"]
n = int(open(count_file).read() or 0) + 1 if os.path.exists(count_file) else 1
open(count_file, "w").write(str(n))
kube = KubeCluster.from_kubeconfig(os.environ["ADMIN_KUBECONFIG"])
made = kube.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"bound-{n}", "namespace": ns}})
answer = kube.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/plugged/token", body={
    "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
    "spec": {"expirationSeconds": 600, "boundObjectRef": {"kind": "Secret", "apiVersion": "v1",
                                                          "name": f"bound-{n}", "uid": made["metadata"]["uid"]}}})
if n > 1:
    kube.delete(ResourceKey("", "Secret", ns, f"bound-{n - 1}"))
until = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=float(os.environ["LIFETIME"]))
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": answer["status"]["token"],
                             "expirationTimestamp": until.strftime("%Y-%m-%dT%H:%M:%SZ")}}))
'''


def test_a_cluster_reached_through_an_exec_plugin_syncs_and_its_tokens_are_refreshed(
        gitops: GitOps, tmp_path: Path) -> None:
    deployer(gitops, "plugged", ["configmaps"])
    # tidecd lists the kinds it manages cluster-wide (by its label): the builtin `view` everywhere
    reader = f"plugged-view-{gitops.namespace}"
    gitops.kube.apply({"apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding", "metadata": {"name": reader},
                       "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "view"},
                       "subjects": [{"kind": "ServiceAccount", "name": "plugged", "namespace": gitops.namespace}]})
    try:
        synced_through_the_plugin(gitops, tmp_path)
    finally:
        gitops.kube.delete(ResourceKey(RBAC, "ClusterRoleBinding", "", reader))


def synced_through_the_plugin(gitops: GitOps, tmp_path: Path) -> None:
    script, count = tmp_path / "plugin.py", tmp_path / "count"
    script.write_text(PLUGIN)
    lifetime = credentials.EXPIRY_MARGIN + 4  # each token is used for about 4 s, then the plugin runs again
    config = {"execProviderConfig": {
        "command": sys.executable, "args": [str(script)], "apiVersion": "client.authentication.k8s.io/v1",
        "env": {"COUNT_FILE": str(count), "NS": gitops.namespace, "ADMIN_KUBECONFIG": str(gitops.dev.kubeconfig),
                "PYTHONPATH": os.pathsep.join(sys.path), "LIFETIME": str(lifetime)}},
        "tlsClientConfig": {"caData": base64.b64encode((gitops.dev.workdir / "pki" / "ca.crt").read_bytes()).decode()}}
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "cluster-plugged", "namespace": "argocd",
                           "labels": {constants.LABEL_SECRET_TYPE: constants.SECRET_TYPE_CLUSTER}},
              "stringData": {"name": "plugged", "server": gitops.dev.server, "config": json.dumps(config)}}
    (gitops.config_dir / "cluster-plugged.yaml").write_text(yaml.safe_dump(secret))
    gitops.push({"app/cm.yaml": configmap("settings")})
    gitops.application(extra_spec={"destination": {"name": "plugged", "namespace": gitops.namespace}})
    gitops.sync()
    state = gitops.state()
    assert state.operation is not None
    assert state.operation.phase == "Succeeded", state.operation.message
    made = gitops.live("ConfigMap", "settings")
    assert made is not None
    first = int(count.read_text())
    assert 1 <= first <= 3, first  # cached: not one run per request
    time.sleep(lifetime - credentials.EXPIRY_MARGIN + 1)  # the token expires (and is revoked by the next run)
    gitops.push({"app/cm.yaml": configmap("settings", {"colour": "blue"})})
    gitops.sync()
    state = gitops.state()
    assert state.operation is not None
    assert state.operation.phase == "Succeeded", state.operation.message
    assert int(count.read_text()) > first
    live = gitops.live("ConfigMap", "settings")
    assert live is not None and live["data"] == {"colour": "blue"}
