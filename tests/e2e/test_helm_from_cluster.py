"""Helm charts in git rendered as Argo CD renders them on the real control plane (issue 23):

1. `.Capabilities` are the destination's: its version and served API versions reach `helm template`.
   The real Argo CD v3.6.1 renders the same chart from the same commit beside tidecd; both deploy the same
   kinds and the same capability values. A CRD installed afterwards is seen on the next render (the
   rendered-manifest cache is keyed by the API versions), and the chart's CRD-gated branch lands.
2. A chart committed without its dependencies (Argo CD's `helm-dependency` example, written again here:
   a `wordpress` dependency from a helm repository, customised by the parent's values.yaml) is built as
   `helm dependency build` builds it, with the dependency fetched by tidecd as a snapshot; a project whose
   sourceRepos do not list the chart repository refuses it by name and fetches nothing. The same example
   against the real Argo CD: the conformance oracle's `ex-helm-dependency` (its repo server reaches the
   session's helm repository).
3. A git submodule (a relative URL in `.gitmodules`) is fetched as its own snapshot and rendered from; a
   project whose sourceRepos do not list its repository refuses it, naming `.gitmodules` and the URL.
4. Kustomize `helmCharts`: refused by name until argocd-cm's `kustomize.buildOptions` holds `--enable-helm`,
   then inflated from a chart tidecd fetched (kustomize pulls nothing).
"""

from __future__ import annotations

import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.test_health_crds import crd, established
from tests.support.apps import GitOps, configmap
from tests.support.charts import HelmRepo
from tests.support.example_cases import CHARTS, helm_dependency
from tests.support.gitserver import GitRepo
from tidecd.base.model import ResourceKey
from tidecd.clients import cluster as cluster_client
from tidecd_dev.peers import ArgoCD

pytestmark = pytest.mark.e2e

GATED = textwrap.dedent("""\
    {{- if .Capabilities.APIVersions.Has "policy/v1/PodDisruptionBudget" }}
    apiVersion: policy/v1
    kind: PodDisruptionBudget
    metadata: {name: {{ .Release.Name }}-pdb}
    spec: {maxUnavailable: 1, selector: {matchLabels: {app: {{ .Release.Name }}}}}
    {{- end }}
    ---
    {{- $modern := semverCompare ">=1.19-0" .Capabilities.KubeVersion.Version }}
    {{- if and (.Capabilities.APIVersions.Has "networking.k8s.io/v1/Ingress") $modern }}
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata: {name: {{ .Release.Name }}-web}
    spec: {defaultBackend: {service: {name: web, port: {number: 80}}}}
    {{- end }}
    ---
    apiVersion: v1
    kind: ConfigMap
    metadata: {name: {{ .Release.Name }}-caps}
    data:
      kubeVersion: {{ .Capabilities.KubeVersion.Version | quote }}
      minor: {{ .Capabilities.KubeVersion.Minor | quote }}
      atLeast134: {{ semverCompare ">=1.34.1-0" .Capabilities.KubeVersion.Version | quote }}
      widgets: {{ .Capabilities.APIVersions.Has (printf "%s/v1/Widget" .Values.group) | quote }}
    """)


def caps_chart(group: str) -> dict[str, Any]:
    return {"caps/Chart.yaml": "apiVersion: v2\nname: caps\nversion: 0.1.0\n",
            "caps/values.yaml": f"group: {group}\n", "caps/templates/all.yaml": GATED}


def kinds_of(gitops: GitOps, release: str) -> dict[str, Any]:
    found = {}
    for group, kind, suffix in (("policy", "PodDisruptionBudget", "pdb"), ("networking.k8s.io", "Ingress", "web"),
                                ("", "ConfigMap", "caps")):
        if (live := gitops.live(kind, f"{release}-{suffix}", group)) is not None:
            found[kind] = live
    return found


def synced(gitops: GitOps, name: str = "app") -> None:
    state = gitops.state(name)
    text = " | ".join(f"{c['type']}: {c['message']}" for c in state.conditions)
    assert state.operation is not None and state.operation.phase == "Succeeded", (text, state.operation)
    assert state.sync_status == "Synced", text


def tidecd_caps(gitops: GitOps, name: str) -> tuple[str, str, dict[str, Any]]:
    """The capability chart pushed and synced by tidecd: (its commit, its group, the kinds it deployed)."""
    group = f"caps.{gitops.namespace}.example.com"
    sha = gitops.push(caps_chart(group))
    gitops.application(name, path="caps")
    gitops.sync(name)
    synced(gitops, name)
    return sha, group, kinds_of(gitops, gitops.real(name))


def test_helm_capabilities_are_the_destinations(gitops: GitOps, monkeypatch: pytest.MonkeyPatch) -> None:
    _, group, ours = tidecd_caps(gitops, "caps")
    version = gitops.kube.request("GET", "/version")["gitVersion"]
    assert sorted(ours) == ["ConfigMap", "Ingress", "PodDisruptionBudget"]
    assert ours["ConfigMap"]["data"] == {"kubeVersion": version, "minor": version.split(".")[1],
                                         "atLeast134": "true", "widgets": "false"}  # 1.34.4, not the pinned 1.34
    widgets = f"widgets.{group}"
    gitops.kube.apply(crd(group, "Widget", "widgets"))
    try:
        established(gitops, widgets)
        monkeypatch.setattr(cluster_client, "SERVED_TTL", 0.0)  # instead of waiting out the minute
        deadline = time.monotonic() + 30
        while gitops.reconcile("caps").state.sync_status != "OutOfSync":  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the CRD's API version never reached helm"
            time.sleep(0.5)
        gitops.sync("caps")
        synced(gitops, "caps")
        assert kinds_of(gitops, gitops.real("caps"))["ConfigMap"]["data"]["widgets"] == "true"
    finally:
        gitops.kube.delete(ResourceKey("apiextensions.k8s.io", "CustomResourceDefinition", "", widgets))


def test_helm_capabilities_agree_with_argo_cd(gitops: GitOps, argocd: ArgoCD) -> None:
    sha, _, ours = tidecd_caps(gitops, "caps")
    argo = f"argo-{gitops.real('caps')}"
    argocd.apply_application(argo, gitops.repo.url, "caps", gitops.namespace)
    argocd.wait_status(argo, revision=sha, healthy=False)
    theirs = kinds_of(gitops, argo)
    assert sorted(theirs) == sorted(ours) == ["ConfigMap", "Ingress", "PodDisruptionBudget"]
    assert theirs["ConfigMap"]["data"] == ours["ConfigMap"]["data"]


def test_the_helm_dependency_example_syncs_with_its_dependency_fetched_by_tidecd(
        gitops: GitOps, helm_repo: HelmRepo) -> None:
    for chart in CHARTS:  # wordpress 9.0.2 and 9.0.3
        helm_repo.add(**chart)
    gitops.push({f"helm-dependency/{name}": text.replace("@CHARTS@", helm_repo.url)  # the oracle's case's files
                 for name, text in helm_dependency().items()})
    gitops.application("deps", path="helm-dependency")
    gitops.sync("deps")
    synced(gitops, "deps")
    secret = gitops.live("Secret", "mywordpress")
    assert secret is not None and sorted(secret["data"]) == ["mariadb-password", "mariadb-root-password",
                                                             "wordpress-password"]
    assert gitops.live("Service", "mywordpress") is not None
    assert [k for k in gitops.store.list("snapshots/") if "/charts/wordpress-9.0.3-" in k]
    fetched = [p for p in helm_repo.requests if p.endswith(".tgz")]
    assert fetched == ["/charts/wordpress-9.0.3.tgz"]  # by tidecd, once: helm fetched nothing itself
    gitops.project({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "narrow"},
                    "spec": {"sourceRepos": [gitops.repo.url], "destinations": [{"namespace": "*", "server": "*"}]}})
    gitops.application("narrow", path="helm-dependency", project="narrow")
    gitops.reconcile("narrow", automate=False)
    state = gitops.state("narrow")
    messages = " | ".join(c["message"] for c in state.conditions)
    assert "helm-dependency/Chart.yaml: dependency wordpress: repository" in messages, messages
    assert "not permitted by the project's sourceRepos" in messages, messages
    assert [p for p in helm_repo.requests if p.endswith(".tgz")] == fetched


def test_a_git_submodule_is_fetched_within_the_projects_source_repos(gitops: GitOps, git_server: Any,
                                                                      tmp_path: Path) -> None:
    lib = GitRepo(git_server, f"lib-{uuid.uuid4().hex[:8]}", tmp_path / "lib")
    lib.write("manifests/cm.yaml", yaml.safe_dump(configmap("from-submodule", {"where": "lib"})))
    lib_sha = lib.commit("lib")
    lib.push()
    relative = "../" + lib.url.rsplit("/", 1)[1]  # resolved against the superproject's URL, as git does
    gitops.repo.write(".gitmodules", f'[submodule "lib"]\n\tpath = vendor/lib\n\turl = {relative}\n')
    gitops.repo.write("app/cm.yaml", yaml.safe_dump(configmap("from-superproject")))
    gitops.repo.git("add", ".gitmodules", "app/cm.yaml")
    gitops.repo.git("update-index", "--add", "--cacheinfo", f"160000,{lib_sha},vendor/lib")
    gitops.repo.git("commit", "--quiet", "-m", "with a submodule")
    gitops.repo.push()
    gitops.application("sub", path="vendor/lib/manifests")
    gitops.sync("sub")
    synced(gitops, "sub")
    live = gitops.live("ConfigMap", "from-submodule")
    assert live is not None and live["data"] == {"where": "lib"}
    gitops.project({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "own"},
                    "spec": {"sourceRepos": [gitops.repo.url], "destinations": [{"namespace": "*", "server": "*"}]}})
    gitops.application("own", path="app", project="own")
    gitops.reconcile("own", automate=False)
    messages = " | ".join(c["message"] for c in gitops.state("own").conditions)
    assert f".gitmodules: submodule 'vendor/lib' ({lib.url})" in messages, messages
    assert "not permitted by the project's sourceRepos" in messages, messages


def test_kustomize_helm_charts_are_fetched_by_tidecd_when_argocd_cm_enables_helm(
        gitops: GitOps, helm_repo: HelmRepo) -> None:
    helm_repo.add("web", "1.2.0")
    gitops.push({"kz/kustomization.yaml": yaml.safe_dump({"helmCharts": [
        {"name": "web", "repo": helm_repo.url, "version": "1.2.0", "releaseName": "kz",
         "valuesInline": {"color": "green"}}]})})
    gitops.application("kz", path="kz")
    gitops.reconcile("kz", automate=False)
    messages = " | ".join(c["message"] for c in gitops.state("kz").conditions)
    assert "helmCharts: helm chart inflation needs argocd-cm's kustomize.buildOptions: --enable-helm" in messages
    (gitops.config_dir / "argocd-cm.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argocd-cm", "namespace": "argocd"},
        "data": {"kustomize.buildOptions": "--enable-helm"}}))
    gitops.sync("kz")
    synced(gitops, "kz")
    live = gitops.live("ConfigMap", "kz-cm")
    assert live is not None and live["data"] == {"chart": "web", "version": "1.2.0", "color": "green"}
    assert [p for p in helm_repo.requests if p.endswith(".tgz")] == ["/charts/web-1.2.0.tgz"]  # by tidecd, once
