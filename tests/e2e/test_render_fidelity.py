"""The kustomize and helm fields of an Application that Argo CD honours, rendered by the real binaries."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from tidecd.base.errors import RenderError, UnsafePathError
from tidecd.base.model import Manifest
from tidecd.clients import tools
from tidecd.config.load import ApplicationSource, HelmSpec, KustomizeSpec
from tidecd.render import render

pytestmark = pytest.mark.e2e

REPO = "https://git.example.com/apps.git"


@pytest.fixture(autouse=True)
def _binaries() -> None:
    for name in ("helm", "kustomize"):
        try:
            tools.binary(name)
        except tools.MissingTool as exc:
            pytest.fail(f"{exc}\n(build it with: bash scripts/tools.sh {name})")


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def by_kind_name(manifests: list[Manifest]) -> dict[tuple[str, str], Manifest]:
    return {(m["kind"], m["metadata"]["name"]): m for m in manifests}


@pytest.fixture
def kustomize_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    write(repo, "app/kustomization.yaml", "resources: [deployment.yaml]\n")
    write(repo, "app/deployment.yaml", """
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: web}
        spec:
          replicas: 1
          selector: {matchLabels: {app: web}}
          template:
            metadata: {labels: {app: web}}
            spec:
              containers: [{name: web, image: nginx:1.25}]
        """)
    write(repo, "components/extra/kustomization.yaml", """
        apiVersion: kustomize.config.k8s.io/v1alpha1
        kind: Component
        resources: [configmap.yaml]
        """)
    write(repo, "components/extra/configmap.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra}\n")
    return repo


def test_kustomize_namespace_annotations_replicas_patches_and_components(kustomize_repo: Path) -> None:
    patch = {"target": {"kind": "Deployment", "name": "web"},
             "patch": "- op: add\n  path: /spec/template/spec/containers/0/env\n  value: [{name: MODE, value: fast}]\n"}
    spec = KustomizeSpec(namespace="team-a", common_annotations=(("owner", "payments"),),
                         replicas=(("web", 4),), patches=(json.dumps(patch),), components=("../components/extra",))
    got = by_kind_name(render(kustomize_repo, ApplicationSource(repo_url=REPO, path="app", kustomize=spec),
                              app_name="web", namespace="default"))
    assert set(got) == {("Deployment", "web"), ("ConfigMap", "extra")}
    web = got[("Deployment", "web")]
    assert all(obj["metadata"]["namespace"] == "team-a" for obj in got.values())
    assert all(obj["metadata"]["annotations"]["owner"] == "payments" for obj in got.values())
    assert web["spec"]["replicas"] == 4
    assert web["spec"]["template"]["spec"]["containers"][0]["env"] == [{"name": "MODE", "value": "fast"}]
    assert "resources: [deployment.yaml]" in (kustomize_repo / "app/kustomization.yaml").read_text()  # untouched


def test_kustomize_components_outside_the_checkout_are_refused(kustomize_repo: Path) -> None:
    spec = KustomizeSpec(components=("../../../elsewhere",))
    with pytest.raises(UnsafePathError, match="spec.source.kustomize.components '../../../elsewhere' leaves"):
        render(kustomize_repo, ApplicationSource(repo_url=REPO, path="app", kustomize=spec), app_name="w",
               namespace="")


@pytest.fixture
def chart_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    write(repo, "chart/Chart.yaml", "apiVersion: v2\nname: web\nversion: 0.1.0\n")
    write(repo, "chart/values.yaml", "color: red\nsize: small\n")
    write(repo, "chart/crds/widget.yaml", """
        apiVersion: apiextensions.k8s.io/v1
        kind: CustomResourceDefinition
        metadata: {name: widgets.example.com}
        spec:
          group: example.com
          names: {kind: Widget, plural: widgets}
          scope: Namespaced
          versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}]
        """)
    write(repo, "chart/templates/cm.yaml", """
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: {{ .Release.Name }}
          namespace: {{ .Release.Namespace }}
        data:
          color: {{ .Values.color | quote }}
          size: {{ .Values.size | quote }}
          config: {{ .Values.config | default "" | quote }}
        """)
    write(repo, "files/config.txt", "line one\n")
    return repo


def test_helm_values_object_skip_crds_missing_files_file_parameters_and_namespace(chart_repo: Path) -> None:
    spec = HelmSpec(values=yaml.safe_dump({"size": "large"}), value_files=("missing.yaml",),
                    ignore_missing_value_files=True, skip_crds=True, namespace="elsewhere",
                    file_parameters=(("config", "/files/config.txt"),))
    got = by_kind_name(render(chart_repo, ApplicationSource(repo_url=REPO, path="chart", helm=spec),
                              app_name="web", namespace="default"))
    assert set(got) == {("ConfigMap", "web")}  # no CRD: skipCrds
    cm = got[("ConfigMap", "web")]
    assert cm["metadata"]["namespace"] == "elsewhere"
    assert cm["data"] == {"color": "red", "size": "large", "config": "line one\n"}


def test_helm_missing_value_file_fails_without_ignore_and_crds_are_included(chart_repo: Path) -> None:
    with pytest.raises(RenderError, match=r"valueFiles\[0\] 'missing.yaml' does not exist"):
        render(chart_repo, ApplicationSource(repo_url=REPO, path="chart", helm=HelmSpec(value_files=("missing.yaml",))),
               app_name="web", namespace="default")
    got = by_kind_name(render(chart_repo, ApplicationSource(repo_url=REPO, path="chart", helm=HelmSpec()),
                              app_name="web", namespace="default"))
    assert ("CustomResourceDefinition", "widgets.example.com") in got


def test_helm_file_parameter_outside_the_checkout_is_refused(chart_repo: Path) -> None:
    spec = HelmSpec(file_parameters=(("config", "../../etc/passwd"),))
    with pytest.raises(UnsafePathError, match=r"fileParameters\[0\].path '../../etc/passwd' leaves"):
        render(chart_repo, ApplicationSource(repo_url=REPO, path="chart", helm=spec), app_name="w", namespace="")
