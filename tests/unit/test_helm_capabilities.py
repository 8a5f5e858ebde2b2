"""Helm's `.Capabilities` are the destination's (issue 23): its version and served API versions reach
`helm template` as Argo CD passes them, `helm.kubeVersion` / `helm.apiVersions` override them, and the
rendered-manifest cache is keyed by them. Rendered by the real helm (`bash scripts/tools.sh helm`)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from tidecd.base.errors import RenderError
from tidecd.config.load import ApplicationSource, HelmSpec
from tidecd.render import BuildEnv, manifest_key, render
from tidecd.render.helm import KUBE_VERSION, parse_kube_version, template_argv

REPO = "https://git.example.com/charts.git"
GATED = textwrap.dedent("""\
    {{- if .Capabilities.APIVersions.Has "policy/v1/PodDisruptionBudget" }}
    apiVersion: policy/v1
    kind: PodDisruptionBudget
    metadata:
      name: web
    spec:
      maxUnavailable: 1
      selector: {matchLabels: {app: web}}
    {{- end }}
    ---
    {{- if .Capabilities.APIVersions.Has "networking.k8s.io/v1/Ingress" }}
    apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: web
    spec:
      defaultBackend: {service: {name: web, port: {number: 80}}}
    {{- end }}
    ---
    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: caps
    data:
      kubeVersion: {{ .Capabilities.KubeVersion.Version | quote }}
      modern: {{ semverCompare ">=1.33-0" .Capabilities.KubeVersion.Version | quote }}
      monitoring: {{ .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" | quote }}
    """)


@pytest.fixture()
def chart(tmp_path: Path) -> Path:
    (tmp_path / "chart" / "templates").mkdir(parents=True)
    (tmp_path / "chart" / "Chart.yaml").write_text("apiVersion: v2\nname: gated\nversion: 0.1.0\n")
    (tmp_path / "chart" / "templates" / "all.yaml").write_text(GATED)
    return tmp_path


def rendered(checkout: Path, env: BuildEnv, spec: HelmSpec | None = None) -> dict[str, Any]:
    source = ApplicationSource(repo_url=REPO, path="chart", helm=spec or HelmSpec())
    return {m["kind"]: m for m in render(checkout, source, app_name="web", namespace="team", build_env=env)}


def test_charts_see_the_destinations_version_and_api_versions(chart: Path) -> None:
    served = ("networking.k8s.io/v1", "networking.k8s.io/v1/Ingress", "policy/v1", "policy/v1/PodDisruptionBudget",
              "v1", "v1/ConfigMap")
    objects = rendered(chart, BuildEnv(kube_version="v1.34.4", api_versions=served))
    assert sorted(objects) == ["ConfigMap", "Ingress", "PodDisruptionBudget"]
    assert objects["ConfigMap"]["data"] == {"kubeVersion": "v1.34.4", "modern": "true", "monitoring": "false"}
    old = rendered(chart, BuildEnv(kube_version="v1.27.3-gke.100", api_versions=("v1", "v1/ConfigMap")))
    assert sorted(old) == ["ConfigMap"]  # neither gated kind is served: neither is rendered
    assert old["ConfigMap"]["data"]["kubeVersion"] == "v1.27.3" and old["ConfigMap"]["data"]["modern"] == "false"


def test_helm_kube_version_and_api_versions_override_the_destinations(chart: Path) -> None:
    env = BuildEnv(kube_version="v1.34.4", api_versions=("policy/v1", "policy/v1/PodDisruptionBudget"))
    objects = rendered(chart, env, HelmSpec(kube_version="1.30.0", api_versions=("monitoring.coreos.com/v1",)))
    assert sorted(objects) == ["ConfigMap"]  # the list replaces the cluster's, as Argo CD's GetAPIVersionsOrDefault
    assert objects["ConfigMap"]["data"] == {"kubeVersion": "v1.30.0", "modern": "false", "monitoring": "true"}


def test_without_a_destination_the_pinned_version_and_no_api_versions() -> None:
    argv = template_argv("helm", HelmSpec(), Path("/c"), [], None, release="r", namespace="ns")
    assert argv[argv.index("--kube-version") + 1] == KUBE_VERSION and "--api-versions" not in argv
    argv = template_argv("helm", HelmSpec(), Path("/c"), [], None, release="r", namespace="ns",
                         kube_version="v1.35.0+k3s1", api_versions=("v1", "v1/Pod"))
    assert argv[argv.index("--kube-version") + 1] == "1.35.0"
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--api-versions"] == ["v1", "v1/Pod"]


@pytest.mark.parametrize(("text", "expected"), [
    ("v1.34.4", "1.34.4"), ("1.30", "1.30"), ("v1.27.3-gke.100", "1.27.3"), ("v1.29.1+k3s1", "1.29.1"),
    ("1.31.0-eks-123", "1.31.0")])
def test_kube_versions_are_read_as_argo_cd_reads_them(text: str, expected: str) -> None:
    assert parse_kube_version(text, "x") == expected


@pytest.mark.parametrize("text", ["latest", "1", "v", ""])
def test_a_kube_version_that_is_none_is_named(text: str) -> None:
    with pytest.raises(RenderError, match=r"spec.source.helm.kubeVersion .*could not parse"):
        template_argv("helm", HelmSpec(kube_version=text or " "), Path("/c"), [], None, release="r", namespace="n")


def test_the_manifest_cache_key_follows_the_destinations_capabilities() -> None:
    source = ApplicationSource(repo_url=REPO, path="chart")
    keys = {manifest_key("web", "a" * 40, source, "team", build_env=env) for env in (
        BuildEnv("default", "a" * 40, kube_version="v1.34.4", api_versions=("v1",)),
        BuildEnv("default", "a" * 40, kube_version="v1.34.4", api_versions=("v1", "example.com/v1")),  # a CRD
        BuildEnv("default", "a" * 40, kube_version="v1.35.0", api_versions=("v1",)),  # an upgrade
    )}
    assert len(keys) == 3
