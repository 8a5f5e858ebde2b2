"""`tidecd app adopt` / `release` against the real API server (issue 18.2), Argo CD's side made by hand.

The objects are applied as Argo CD applies them: its tracking id, by its field manager `argocd-controller`.
The Argo CD Application is a real `argoproj.io/v1alpha1` object (a minimal CRD when Argo CD's own is
not installed yet), with the `status.resources` Argo CD would report. The same flow with the real Argo CD
is in tests/e2e/test_argocd_side_by_side.py.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.e2e.test_ownership import apply_as, marked
from tests.support.apps import GitOps, configmap, deployment, service
from tidecd.base.model import Action, ResourceKey
from tidecd.cli import app as tidecd_cli
from tidecd.clients.cluster import KubeCluster, UnknownKind
from tidecd.sync.adopt import AdoptRefused
from tidecd.usecases import adoption

APP_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "applications.argoproj.io"},
    "spec": {"group": "argoproj.io", "scope": "Namespaced",
             "names": {"kind": "Application", "plural": "applications", "singular": "application"},
             "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}


def ensure_application_kind(gitops: GitOps) -> None:
    try:
        gitops.kube.resource("argoproj.io", "Application")
        return
    except UnknownKind:
        gitops.kube.apply(APP_CRD)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            gitops.kube.resource("argoproj.io", "Application")
            return
        except UnknownKind:
            time.sleep(0.3)
    raise AssertionError("the Application CRD was not served within 30 s")


def argo_application(gitops: GitOps, name: str, keys: list[ResourceKey], *, automated: bool = False) -> None:
    """The Argo CD Application `name` in the test's namespace (standing in for `argocd`), tracking `keys`."""
    ensure_application_kind(gitops)
    spec: dict[str, Any] = {"project": "default", "destination": {"namespace": gitops.namespace},
                            "source": {"repoURL": gitops.repo.url, "path": "app"}}
    if automated:
        spec["syncPolicy"] = {"automated": {"prune": True}}
    doc = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
           "metadata": {"name": name, "namespace": gitops.namespace,
                        "finalizers": ["resources-finalizer.argocd.argoproj.io"]},
           "spec": spec,
           "status": {"resources": [{"group": k.group, "version": "v1", "kind": k.kind, "namespace": k.namespace,
                                     "name": k.name, "status": "Synced"} for k in keys]}}
    apply_as(gitops, doc, "argocd-application-controller")


CONTROLLERS = ("kube-controller-manager", "kwok")  # they write status and revision annotations on their own


def written(obj: dict[str, Any] | None) -> Any:
    """What a write by a tool changes (controllers' status updates aside): marks, owners, content."""
    assert obj is not None
    meta = obj["metadata"]
    owners = sorted((e.get("manager"), e.get("operation"), json.dumps(e.get("fieldsV1"), sort_keys=True))
                    for e in meta.get("managedFields") or []
                    if e.get("subresource") != "status" and e.get("manager") not in CONTROLLERS)
    notes = {k: v for k, v in (meta.get("annotations") or {}).items() if k != "deployment.kubernetes.io/revision"}
    return (notes, meta.get("labels"), owners,
            {k: v for k, v in obj.items() if k not in ("metadata", "status")})


def count_writes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every write request any KubeCluster makes from now on (server-side dry-runs are not writes)."""
    seen: list[str] = []
    original = KubeCluster.request

    def request(self: KubeCluster, method: str, path: str, **kwargs: Any) -> Any:
        if method != "GET" and (kwargs.get("query") or {}).get("dryRun") != "All":
            seen.append(f"{method} {path}")
        return original(self, method, path, **kwargs)

    monkeypatch.setattr(KubeCluster, "request", request)
    return seen


def managers(obj: dict[str, Any]) -> set[str]:
    return {str(e.get("manager")) for e in obj["metadata"].get("managedFields") or []}


def manifests() -> dict[str, Any]:
    files: dict[str, Any] = {f"app/cm-{i}.yaml": configmap(f"cm-{i}", {"n": str(i)}) for i in range(6)}
    files["app/web.yaml"] = deployment("web", replicas=1)
    files["app/svc.yaml"] = service("web")
    return files


@pytest.fixture()
def argo_managed(gitops: GitOps) -> tuple[str, dict[ResourceKey, dict[str, Any]]]:
    """8 objects Argo CD manages for an Application named like tidecd's app, and that app in tidecd."""
    name = gitops.real("app")
    live = {}
    for obj in manifests().values():
        written = apply_as(gitops, marked(obj, name, gitops), "argocd-controller")
        live[ResourceKey.of(written)] = written
    web = ResourceKey("apps", "Deployment", gitops.namespace, "web")
    # an autoscaler owns replicas now: the app's managedFieldsManagers rule ignores them
    res = gitops.kube.resource("apps", "Deployment")
    live[web] = dict(gitops.kube.request("PATCH", res.path(web.namespace, web.name),
                                         body={"spec": {"replicas": 3}},
                                         query={"fieldManager": "autoscaler"},
                                         content_type="application/merge-patch+json", key=web))
    gitops.push(manifests())
    gitops.application(extra_spec={"ignoreDifferences": [{"group": "apps", "kind": "Deployment",
                                                          "managedFieldsManagers": ["autoscaler"]}]})
    return name, live


def test_adopt_refuses_what_is_not_exactly_argo_cds(gitops: GitOps,
                                                    argo_managed: tuple[str, dict[ResourceKey, Any]]) -> None:
    name, live = argo_managed
    keys = sorted(live)
    runtime = gitops.runtime()
    ensure_application_kind(gitops)
    with pytest.raises(AdoptRefused, match=f"Argo CD Application {gitops.namespace}/{name} not found"):
        adoption.adopt_app(runtime, name, argocd_namespace=gitops.namespace)
    argo_application(gitops, name, [*keys, ResourceKey("", "ConfigMap", gitops.namespace, "extra")], automated=True)
    with pytest.raises(AdoptRefused) as refused:
        adoption.adopt_app(runtime, name, argocd_namespace=gitops.namespace)
    text = str(refused.value)
    assert "automated sync is on" in text and f"ConfigMap {gitops.namespace}/extra: Argo CD tracks it" in text
    argo_application(gitops, name, keys)
    gitops.push({"app/cm-0.yaml": configmap("cm-0", {"n": "changed"})})
    with pytest.raises(AdoptRefused, match=f"ConfigMap {gitops.namespace}/cm-0: differs from git \\(data.n\\)"):
        adoption.adopt_app(runtime, name, argocd_namespace=gitops.namespace)
    for key, before in live.items():  # nothing was written by any refusal
        assert written(gitops.kube.get(key)) == written(before)


def test_adopt_moves_ownership_in_place_and_release_gives_it_back(
        gitops: GitOps, argo_managed: tuple[str, dict[ResourceKey, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    name, live = argo_managed
    argo_application(gitops, name, sorted(live))
    monkeypatch.setenv("TIDECD_CONFIG", str(gitops.config_dir))
    monkeypatch.setenv("TIDECD_STORE", str(gitops.store.root))
    monkeypatch.setenv("KUBECONFIG", str(gitops.dev.kubeconfig))
    dry = CliRunner().invoke(tidecd_cli, ["app", "adopt", name, "--dry-run", "--argocd-namespace", gitops.namespace])
    assert dry.exit_code == 0, dry.output
    assert dry.output.count("(dry run)") == len(live) and "argocd-controller -> tidecd" in dry.output
    for key, before in live.items():
        assert written(gitops.kube.get(key)) == written(before)

    start = time.monotonic()
    done = CliRunner().invoke(tidecd_cli, ["app", "adopt", name, "--argocd-namespace", gitops.namespace, "-o", "json"])
    took = time.monotonic() - start
    assert done.exit_code == 0, done.output
    body = json.loads(done.output)
    assert [c["action"] for c in body["changes"]] == [Action.CONFIGURED.value] * len(live)
    assert body["next"][0].startswith(f"kubectl patch -n {gitops.namespace} application {name} --type json")
    assert "resources-finalizer.argocd.argoproj.io" in body["next"][0]
    assert body["next"][1] == f"kubectl delete -n {gitops.namespace} application {name}"
    for key, before in live.items():
        now = gitops.kube.get(key)
        assert now is not None and now["metadata"]["uid"] == before["metadata"]["uid"]
        assert {k: v for k, v in now.items() if k not in ("metadata", "status")} == \
            {k: v for k, v in before.items() if k not in ("metadata", "status")}
        notes = now["metadata"].get("annotations") or {}
        assert notes["tidecd.io/tracking-id"] == f"default:{key.tracking_id(name)}"
        assert "argocd.argoproj.io/tracking-id" not in notes
        assert not managers(now) & {"argocd-controller", "argocd-application-controller"}, managers(now)
        assert "tidecd" in managers(now)
    web = gitops.kube.get(ResourceKey("apps", "Deployment", gitops.namespace, "web"))
    assert web is not None and web["spec"]["replicas"] == 3 and "autoscaler" in managers(web)
    # tidecd: Synced, and not one write
    adopted = {key: written(gitops.kube.get(key)) for key in live}
    writes = count_writes(monkeypatch)
    gitops.reconcile()
    assert gitops.state().sync_status == "Synced", [(r.name, r.diff) for r in gitops.state().resources]
    assert writes == [] and {key: written(gitops.kube.get(key)) for key in live} == adopted
    assert sorted(k for k, _ in gitops.state().inventory_keys()) == sorted(live)
    # again: nothing left to move
    again = adoption.adopt_app(gitops.runtime(), name, argocd_namespace=gitops.namespace)
    assert {c.action for c in again.changes} == {Action.UNCHANGED}

    released = CliRunner().invoke(tidecd_cli, ["app", "release", name, "--argocd-namespace", gitops.namespace])
    assert released.exit_code == 0, released.output
    for key, before in live.items():
        now = gitops.kube.get(key)
        assert now is not None and now["metadata"]["uid"] == before["metadata"]["uid"]
        notes = now["metadata"].get("annotations") or {}
        assert notes["argocd.argoproj.io/tracking-id"] == key.tracking_id(name)
        assert "tidecd.io/tracking-id" not in notes and "tidecd" not in managers(now)
        assert "argocd-controller" in managers(now)
    writes.clear()  # the release's own
    gitops.reconcile()
    state = gitops.state()
    assert [c["type"] for c in state.conditions if c["type"] == "SharedResourceWarning"]
    assert writes == []
    print(f"adopt of {len(live)} objects took {took:.2f} s")


def test_the_adopt_annotation_takes_the_app_over_on_reconcile(gitops: GitOps) -> None:
    name = gitops.real("app")
    live = {}
    for obj in manifests().values():
        written_obj = apply_as(gitops, marked(obj, name, gitops), "argocd-controller")
        live[ResourceKey.of(written_obj)] = written_obj
    gitops.push(manifests())
    gitops.application(annotations={"tidecd.io/adopt-from-argocd": f"{gitops.namespace}/{name}"})
    argo_application(gitops, name, sorted(live)[1:])  # one object short: refused, nothing written
    gitops.reconcile()
    state = gitops.state()
    refused = [c["message"] for c in state.conditions if c["type"] == "ArgoCDAdoptionRefused"]
    assert refused and "not tracked by Argo CD Application" in refused[0], state.conditions
    for key, before in live.items():
        assert written(gitops.kube.get(key)) == written(before)
    argo_application(gitops, name, sorted(live))
    gitops.reconcile()
    state = gitops.state()
    assert state.sync_status == "Synced", state.conditions
    assert not [c for c in state.conditions if c["type"] in ("ArgoCDAdoptionRefused", "SharedResourceWarning")]
    for key, before in live.items():
        now = gitops.kube.get(key)
        assert now is not None and now["metadata"]["uid"] == before["metadata"]["uid"]
        assert "argocd.argoproj.io/tracking-id" not in (now["metadata"].get("annotations") or {})
    assert sorted(k for k, _ in state.inventory_keys()) == sorted(live)
