"""The pure parts of adopt/release (tidecd.sync.adopt): Argo CD's names, its settings, the patches."""

from __future__ import annotations

import json

from tidecd.base.model import ResourceKey
from tidecd.sync import adopt

KEY = ResourceKey("apps", "Deployment", "ns", "web")


def test_argo_app_reads_status_resources_automation_and_finalizers() -> None:
    doc = {"metadata": {"name": "web", "namespace": "argocd",
                        "finalizers": ["other", "resources-finalizer.argocd.argoproj.io"]},
           "spec": {"syncPolicy": {"automated": {"prune": True}}},
           "status": {"resources": [{"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "ns",
                                     "name": "web"}, {"version": "v1", "kind": "Namespace", "name": "ns"}]}}
    argo = adopt.ArgoApp.of(doc)
    assert argo.tracked == (ResourceKey("", "Namespace", "", "ns"), KEY)
    assert argo.automated and argo.instance == "web"
    assert adopt.ArgoApp.of({**doc, "metadata": {"name": "web", "namespace": "team"}}).instance == "team_web"
    off = {**doc, "spec": {"syncPolicy": {"automated": {"enabled": False}}}}
    assert not adopt.ArgoApp.of(off).automated
    steps = adopt.argocd_steps_after_adopt(argo)
    patch = json.loads(steps[0].split("-p '", 1)[1].rstrip("'"))
    finalizer = "resources-finalizer.argocd.argoproj.io"
    assert patch == [{"op": "test", "path": "/metadata/finalizers/1", "value": finalizer},
                     {"op": "remove", "path": "/metadata/finalizers/1"}]
    assert steps[1] == "kubectl delete -n argocd application web"
    bare = adopt.ArgoApp("argocd", "web")
    assert adopt.argocd_steps_after_adopt(bare) == ["kubectl delete -n argocd application web"]


def test_release_marks_as_argo_cd_would_from_its_settings() -> None:
    obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "ns"}}
    plain = adopt.argocd_marked(obj, "web", adopt.ArgoSettings.of({}))
    assert plain["metadata"] == {"name": "web", "namespace": "ns",
                                 "annotations": {"argocd.argoproj.io/tracking-id": "web:apps/Deployment:ns/web"}}
    both = adopt.argocd_marked(obj, "web", adopt.ArgoSettings.of({
        "application.resourceTrackingMethod": "annotation+label", "installationID": "east",
        "application.instanceLabelKey": "argocd.argoproj.io/instance"}))
    assert both["metadata"]["annotations"]["argocd.argoproj.io/installation-id"] == "east"
    assert both["metadata"]["labels"] == {"argocd.argoproj.io/instance": "web"}
    label = adopt.argocd_marked(obj, "web", adopt.ArgoSettings.of({"application.resourceTrackingMethod": "label"}))
    assert "annotations" not in label["metadata"]
    assert label["metadata"]["labels"] == {"app.kubernetes.io/instance": "web"}


def test_the_rewrite_is_guarded_and_drops_only_the_named_managers() -> None:
    live = {"metadata": {"resourceVersion": "7", "annotations": {"argocd.argoproj.io/tracking-id": "x"},
                         "managedFields": [{"manager": "tidecd"}, {"manager": "argocd-controller"},
                                           {"manager": "kube-controller-manager", "subresource": "status"}]}}
    ops = adopt._rewrite(live, [("annotations", "argocd.argoproj.io/tracking-id"), ("labels", "absent")],
                         remove_managers={"argocd-controller"})
    assert ops == [{"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                   {"op": "remove", "path": "/metadata/annotations/argocd.argoproj.io~1tracking-id"},
                   {"op": "replace", "path": "/metadata/managedFields",
                    "value": [{"manager": "tidecd"}, {"manager": "kube-controller-manager", "subresource": "status"}]}]
