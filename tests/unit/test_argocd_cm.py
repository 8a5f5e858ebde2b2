"""argocd-cm and the other Argo CD settings objects in a config source: recognised, the honoured part read into
`config.argo_settings`, the rest reported once as notices, and never a reason for the apps to stop loading."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tidecd.base.errors import ConfigError
from tidecd.config.argocd_settings import IgnoreRule, ResourceFilter
from tidecd.config.load import load_config

APP = """apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: guestbook}
spec:
  project: default
  source: {repoURL: https://example.com/repo.git, path: guestbook}
  destination: {server: https://kubernetes.default.svc, namespace: guestbook}
"""

CERT_LUA = """hs = {}
if obj.status ~= nil then hs.status = "Healthy" end
return hs
"""


def configmap(name: str, data: dict[str, str]) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": name, "namespace": "argocd",
                                        "labels": {"app.kubernetes.io/part-of": "argocd"}},
                           "data": data})


def write(tmp_path: Path, **files: str) -> Path:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_an_argocd_cm_no_longer_stops_every_app(tmp_path: Path) -> None:
    write(tmp_path, **{"app.yaml": APP, "argocd-cm.yaml": configmap("argocd-cm", {"url": "https://argo.example"})})
    config = load_config(tmp_path, strict=False)
    assert sorted(config.applications) == ["guestbook"]
    assert config.problems == [] and config.invalid == {}
    strict = load_config(tmp_path)  # the CLI's strict load accepts it too
    assert sorted(strict.applications) == ["guestbook"]


def test_health_lua_split_keys_and_block_form(tmp_path: Path) -> None:
    block = yaml.safe_dump({
        "apps/Deployment": {"health.lua": "return {status = 'Healthy'}", "health.lua.useOpenLibs": True},
        "Service": {"health.lua": "return {status = 'Degraded'}"},
        "cert-manager.io/Certificate": {"health.lua": "overridden by the split key"},
    })
    write(tmp_path, **{"cm.yaml": configmap("argocd-cm", {
        "resource.customizations": block,
        "resource.customizations.health.cert-manager.io_Certificate": CERT_LUA,
        "resource.customizations.health.ConfigMap": "return {status = 'Healthy'}",
        "resource.customizations.health.*.crossplane.io_*": "return {status = 'Progressing'}",
        "resource.customizations.useOpenLibs.cert-manager.io_Certificate": "true",
    })})
    settings = load_config(tmp_path, strict=False).argo_settings
    assert dict(settings.health_lua) == {
        "apps/Deployment": "return {status = 'Healthy'}",
        "/Service": "return {status = 'Degraded'}",
        "cert-manager.io/Certificate": CERT_LUA,
        "/ConfigMap": "return {status = 'Healthy'}",
        "*.crossplane.io/*": "return {status = 'Progressing'}",
    }
    assert settings.health_lua_open_libs == {"apps/Deployment", "cert-manager.io/Certificate"}
    assert settings.health_script("ec2.aws.crossplane.io", "Instance") == "return {status = 'Progressing'}"
    assert settings.health_script("", "Service") == "return {status = 'Degraded'}"
    assert settings.health_script("apps", "StatefulSet") is None
    with pytest.raises(TypeError):
        settings.health_lua["x/Y"] = "frozen"  # type: ignore[index]


def test_ignore_differences_exclusions_and_timeout(tmp_path: Path) -> None:
    write(tmp_path, **{"cm.yaml": configmap("argocd-cm", {
        "resource.customizations.ignoreDifferences.admissionregistration.k8s.io_MutatingWebhookConfiguration":
            "jsonPointers:\n- /webhooks/0/clientConfig/caBundle\njqPathExpressions:\n"
            "- .webhooks[0].clientConfig.caBundle\n",
        "resource.customizations.ignoreDifferences.all": "managedFieldsManagers:\n- kube-controller-manager\n",
        "resource.exclusions": "- apiGroups: [repositories.stash.appscode.com]\n  kinds: [Snapshot]\n"
                               "  clusters: ['*.local']\n",
        "timeout.reconciliation": "300s",
        "timeout.reconciliation.jitter": "1m",
    })})
    settings = load_config(tmp_path, strict=False).argo_settings
    assert settings.ignore_rules("admissionregistration.k8s.io", "MutatingWebhookConfiguration") == (
        IgnoreRule(json_pointers=("/webhooks/0/clientConfig/caBundle",),
                   jq_path_expressions=(".webhooks[0].clientConfig.caBundle",)),
        IgnoreRule(managed_fields_managers=("kube-controller-manager",)))
    every = IgnoreRule(managed_fields_managers=("kube-controller-manager",))
    assert settings.ignore_rules("apps", "Deployment") == (every,)
    assert settings.exclusions == (ResourceFilter(("repositories.stash.appscode.com",), ("Snapshot",), ("*.local",)),)
    assert settings.excluded("repositories.stash.appscode.com", "Snapshot", "https://a.local")
    assert not settings.excluded("repositories.stash.appscode.com", "Snapshot", "https://a.example.com")
    assert not settings.excluded("apps", "Deployment")
    assert settings.reconciliation_timeout == 300.0 and settings.reconciliation_jitter == 60.0
    assert settings.notices == ()


def test_inclusions_leave_out_every_other_kind(tmp_path: Path) -> None:
    write(tmp_path, **{"cm.yaml": configmap("argocd-cm", {"resource.inclusions": "- apiGroups: ['', apps]\n"})})
    settings = load_config(tmp_path, strict=False).argo_settings
    assert not settings.excluded("apps", "Deployment") and not settings.excluded("", "Service")
    assert settings.excluded("batch", "Job")


def test_the_rest_is_reported_once_as_notices_naming_the_key(tmp_path: Path) -> None:
    write(tmp_path, **{
        "app.yaml": APP,
        "cm.yaml": configmap("argocd-cm", {"dex.config": "connectors: []", "application.instanceLabelKey": "x",
                                           "resource.customizations.actions.apps_Deployment": "discovery.lua: ''",
                                           "no.such.setting": "1"}),
        "rbac.yaml": configmap("argocd-rbac-cm", {"policy.csv": "p, role:x, *, *, */*, allow",
                                                  "policy.default": "role:readonly"}),
        "secret.yaml": yaml.safe_dump({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "argocd-secret"},
                                       "stringData": {"admin.password": "hunter2-do-not-echo"}}),
    })
    config = load_config(tmp_path, strict=False)
    assert sorted(config.applications) == ["guestbook"] and config.problems == []
    notices = "\n".join(config.argo_settings.notices)
    assert "ConfigMap/argocd-cm: dex.config: not honoured by tidecd: tidecd runs no Dex" in notices
    assert "application.instanceLabelKey: not honoured by tidecd: tidecd writes its own ownership marks" in notices
    assert ("resource.customizations.actions.apps_Deployment: not honoured by tidecd: tidecd runs the Lua resource "
            "actions of Argo CD's bundled catalogue") in notices
    assert "no.such.setting: not honoured by tidecd: not a setting tidecd knows" in notices
    assert "argocd-rbac-cm" not in notices  # read: tidecd.config.rbac
    assert config.argo_settings.rbac.default_role == "role:readonly"
    assert config.argo_settings.rbac.policy_csv == "p, role:x, *, *, */*, allow"
    assert "secret.yaml: Secret/argocd-secret: a plain Secret is not read" in notices
    assert "hunter2" not in notices
    assert len(config.argo_settings.notices) == 5


def test_a_broken_rbac_policy_is_a_problem_and_only_the_builtin_roles_answer(tmp_path: Path) -> None:
    write(tmp_path, **{"app.yaml": APP, "rbac.yaml": configmap("argocd-rbac-cm", {
        "policy.csv": "p, role:x, applications, get, */*, allow\nq, nonsense\n", "policy.default": "role:admin"})})
    config = load_config(tmp_path, strict=False)
    assert sorted(config.applications) == ["guestbook"]
    assert any("rbac.yaml: ConfigMap/argocd-rbac-cm: policy.csv: line 2: invalid RBAC policy" in p
               for p in config.problems), config.problems
    assert config.argo_settings.rbac.policy_csv == "" and config.argo_settings.rbac.default_role == ""


def test_a_malformed_honoured_setting_is_a_problem_naming_the_key_and_the_apps_go_on(tmp_path: Path) -> None:
    write(tmp_path, **{"app.yaml": APP, "cm.yaml": configmap("argocd-cm", {
        "resource.exclusions": "- apiGroups: [a\n",
        "timeout.reconciliation": "soon",
        "resource.customizations.ignoreDifferences.apps_Deployment": "jqPathExpressions: ['.spec[']\n",
        "resource.customizations.health.a_b_c": "return {}",
    })})
    config = load_config(tmp_path, strict=False)
    assert sorted(config.applications) == ["guestbook"]
    problems = "\n".join(config.problems)
    assert "cm.yaml: ConfigMap/argocd-cm: data.resource.exclusions: YAML syntax error" in problems
    assert "data.timeout.reconciliation: 'soon' is not a duration" in problems
    assert "data.resource.customizations.ignoreDifferences.apps_Deployment: jqPathExpressions:" in problems
    assert "data.resource.customizations.health.a_b_c: expected resource.customizations" in problems
    with pytest.raises(ConfigError, match="timeout.reconciliation"):
        load_config(tmp_path)


def test_two_argocd_cms_are_a_problem_and_the_first_is_read(tmp_path: Path) -> None:
    write(tmp_path, **{"a.yaml": configmap("argocd-cm", {"timeout.reconciliation": "60s"}),
                       "b.yaml": configmap("argocd-cm", {"timeout.reconciliation": "90s"})})
    config = load_config(tmp_path, strict=False)
    assert config.argo_settings.reconciliation_timeout == 60.0
    assert any("b.yaml: ConfigMap/argocd-cm: defined more than once (also in" in p for p in config.problems)


def test_other_configmaps_are_still_unsupported_objects(tmp_path: Path) -> None:
    write(tmp_path, **{"cm.yaml": configmap("my-app-settings", {"a": "b"})})
    config = load_config(tmp_path, strict=False)
    assert any("unsupported object (apiVersion 'v1', kind 'ConfigMap')" in p for p in config.problems)


def test_kustomize_build_options_enable_helm_and_nothing_else(tmp_path: Path) -> None:
    write(tmp_path, **{"app.yaml": APP, "cm.yaml": configmap("argocd-cm", {
        "kustomize.buildOptions": "--enable-helm --load-restrictor LoadRestrictionsNone"})})
    config = load_config(tmp_path, strict=False)
    assert config.argo_settings.kustomize_enable_helm and config.problems == []
    notices = "\n".join(config.argo_settings.notices)
    assert ("kustomize.buildOptions: --load-restrictor LoadRestrictionsNone: not honoured by tidecd (only "
            "--enable-helm)") in notices
    write(tmp_path, **{"cm.yaml": configmap("argocd-cm", {"kustomize.buildOptions": "--enable-alpha-plugins"})})
    assert not load_config(tmp_path, strict=False).argo_settings.kustomize_enable_helm
