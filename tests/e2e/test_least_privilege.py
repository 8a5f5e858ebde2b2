"""Least privilege on clusters, against the real control plane: syncs that act as a ServiceAccount
(Argo CD's sync impersonation), and a cluster reached through an exec credential plugin whose short-lived
tokens are refreshed."""

from __future__ import annotations

import yaml

from tests.support.apps import GitOps, configmap, service
from tidecd.base import constants

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
