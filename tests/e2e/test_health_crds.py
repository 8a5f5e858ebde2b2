"""Health of custom resources on the real control plane: Argo Rollouts without a controller, a user's
Lua health check from argocd-cm, and a broken script (issue 12, "Health")."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.support.apps import GitOps, configmap
from tidecd.base.model import ResourceKey

pytestmark = pytest.mark.e2e

ROLLOUT_CRD = "rollouts.argoproj.io"


def crd(group: str, kind: str, plural: str, version: str = "v1") -> dict[str, Any]:
    """A minimal CRD: any fields, a status subresource (so the API server keeps metadata.generation)."""
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
                     "versions": [{"name": version, "served": True, "storage": True,
                                   "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": {"type": "object",
                                                                  "x-kubernetes-preserve-unknown-fields": True}}}]}}


def established(gitops: GitOps, name: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        live = gitops.kube.get(ResourceKey("apiextensions.k8s.io", "CustomResourceDefinition", "", name)) or {}
        if any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (live.get("status") or {}).get("conditions") or []):
            return
        time.sleep(0.2)
    pytest.fail(f"CRD {name} not established within 30s")


@pytest.fixture()
def rollout_crd(gitops: GitOps) -> Iterator[None]:
    """Argo Rollouts' CRD, reduced to its name and version; no Rollouts controller runs anywhere."""
    gitops.kube.apply(crd("argoproj.io", "Rollout", "rollouts", "v1alpha1"))
    established(gitops, ROLLOUT_CRD)
    yield
    gitops.kube.delete(ResourceKey("apiextensions.k8s.io", "CustomResourceDefinition", "", ROLLOUT_CRD))


def rollout(name: str) -> dict[str, Any]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": name, "image": "nginx:1.27"}]}},
                     "strategy": {"canary": {"steps": [{"setWeight": 50}, {"pause": {}}]}}}}


def argocd_cm(gitops: GitOps, data: dict[str, str]) -> None:
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argocd-cm", "namespace": "argocd"},
           "data": data}
    (gitops.config_dir / "argocd-cm.yaml").write_text(yaml.safe_dump(doc))


def resource(gitops: GitOps, kind: str, name: str) -> Any:
    [found] = [r for r in gitops.state().resources if r.kind == kind and r.name == name]
    return found


def test_a_rollout_with_no_controller_reads_progressing(gitops: GitOps, rollout_crd: None) -> None:
    gitops.push({"app/rollout.yaml": rollout("web"), "app/cm.yaml": configmap("web-config")})
    gitops.application()
    gitops.sync()
    state = gitops.state()
    assert state.operation is not None and state.operation.phase == "Succeeded", state.operation
    web = resource(gitops, "Rollout", "web")
    assert (web.health, web.health_message) == ("Progressing", "Waiting for rollout spec update to be observed")
    assert state.health == "Progressing"
    assert "Waiting for rollout spec update to be observed" in state.health_message
    # what a Rollouts controller would report once it observed the spec and finished
    live = gitops.live("Rollout", "web", "argoproj.io")
    assert live is not None
    live["status"] = {"observedGeneration": str(live["metadata"]["generation"]), "phase": "Healthy",
                      "currentPodHash": "abc", "stableRS": "abc", "replicas": 1, "updatedReplicas": 1,
                      "availableReplicas": 1}
    gitops.kube.request("PUT", gitops.kube.resource("argoproj.io", "Rollout").path(gitops.namespace, "web")
                        + "/status", body=live)
    gitops.reconcile()
    assert resource(gitops, "Rollout", "web").health == "Healthy"
    assert gitops.state().health == "Healthy"


WIDGET_LUA = """\
local hs = {status = "Progressing", message = "waiting for the widget controller"}
if obj.spec ~= nil and obj.spec.size ~= nil then
  if obj.spec.size > 2 then
    hs.status = "Degraded"
    hs.message = "size " .. obj.spec.size .. " is more than 2"
  else
    hs.status = "Healthy"
    hs.message = "size " .. obj.spec.size .. " is fine"
  end
end
return hs
"""


def test_a_user_lua_check_changes_the_apps_health(gitops: GitOps) -> None:
    group = f"{gitops.namespace}.example.com"
    widget = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 3}}
    gitops.push({"app/crd.yaml": crd(group, "Widget", "widgets"), "app/widget.yaml": widget})
    gitops.application()
    gitops.sync()
    assert gitops.state().operation.phase == "Succeeded"  # type: ignore[union-attr]
    assert resource(gitops, "Widget", "w1").health is None  # no check of its own, no kstatus conditions
    assert gitops.state().health == "Healthy"

    argocd_cm(gitops, {f"resource.customizations.health.{group}_Widget": WIDGET_LUA})
    gitops.reconcile()
    w1 = resource(gitops, "Widget", "w1")
    assert (w1.health, w1.health_message) == ("Degraded", "size 3 is more than 2")
    assert gitops.state().health == "Degraded"

    gitops.push({"app/widget.yaml": {**widget, "spec": {"size": 1}}})
    gitops.sync()
    w1 = resource(gitops, "Widget", "w1")
    assert (w1.health, w1.health_message) == ("Healthy", "size 1 is fine")
    assert gitops.state().health == "Healthy"


def test_a_broken_script_shows_a_clear_message(gitops: GitOps) -> None:
    group = f"{gitops.namespace}.example.com"
    widget = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 1}}
    gitops.push({"app/crd.yaml": crd(group, "Widget", "widgets"), "app/widget.yaml": widget,
                 "app/cm.yaml": configmap("other")})
    argocd_cm(gitops, {f"resource.customizations.health.{group}_Widget": "hs = {status = \n return hs",
                       "resource.customizations.health.ConfigMap": "while true do end"})
    gitops.application()
    gitops.sync()
    assert gitops.state().operation.phase == "Succeeded"  # type: ignore[union-attr]
    w1 = resource(gitops, "Widget", "w1")
    assert w1.health == "Unknown"
    assert w1.health_message.startswith(
        f"health check for {group}/Widget (argocd-cm resource.customizations.health.{group}_Widget): "
        "Lua error: health.lua:2: unexpected symbol near 'return'"), w1.health_message
    other = resource(gitops, "ConfigMap", "other")
    assert other.health == "Unknown"
    assert other.health_message.startswith("health check for ConfigMap (argocd-cm "
                                           "resource.customizations.health.ConfigMap): the script exceeded its "
                                           "time budget"), other.health_message
    state = gitops.state()  # the app names the first resource with the worst health
    assert state.health == "Unknown" and "health check for" in state.health_message
