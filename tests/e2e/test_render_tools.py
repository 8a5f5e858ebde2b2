"""Kustomize and helm apps rendered by the real binaries (built by `bash scripts/tools.sh helm kustomize`)."""

from __future__ import annotations

import hashlib
import textwrap
import time
from pathlib import Path

import pytest

from tidecd.base.constants import HELM_HOOK, HELM_HOOK_WEIGHT
from tidecd.base.errors import RenderError, UnsafePathError
from tidecd.base.model import Manifest
from tidecd.clients import tools
from tidecd.config.load import ApplicationSource, HelmParameter, HelmSpec, KustomizeSpec
from tidecd.render import render

pytestmark = pytest.mark.e2e

REPO = "https://git.example.com/apps.git"


def need(name: str) -> str:
    try:
        return tools.binary(name)
    except tools.MissingTool as exc:
        pytest.fail(f"{exc}\n(build it with: bash scripts/tools.sh {name})")


@pytest.fixture(autouse=True)
def _binaries() -> None:
    need("helm")
    need("kustomize")


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def by_kind_name(manifests: list[Manifest]) -> dict[tuple[str, str], Manifest]:
    return {(m["kind"], m["metadata"]["name"]): m for m in manifests}


def tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# -- kustomize ---------------------------------------------------------------------------------------------

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: nginx:1.25
"""


@pytest.fixture
def kustomize_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    write(repo, "base/kustomization.yaml", "resources: [deployment.yaml, service.yaml]\n")
    write(repo, "base/deployment.yaml", DEPLOYMENT)
    write(repo, "base/service.yaml", """
        apiVersion: v1
        kind: Service
        metadata: {name: web}
        spec:
          selector: {app: web}
          ports: [{port: 80}]
        """)
    write(repo, "overlays/prod/kustomization.yaml", """
        resources: [../../base]
        namePrefix: prod-
        """)
    return repo


def test_kustomize_build_without_overrides(kustomize_repo: Path) -> None:
    src = ApplicationSource(repo_url=REPO, path="overlays/prod")
    got = by_kind_name(render(kustomize_repo, src, app_name="web", namespace="team"))
    assert set(got) == {("Deployment", "prod-web"), ("Service", "prod-web")}


def test_kustomize_overrides_are_applied_in_a_copy(kustomize_repo: Path) -> None:
    before = tree_digest(kustomize_repo)
    spec = KustomizeSpec(
        name_prefix="tide-",
        name_suffix="-v2",
        images=("nginx=registry.example.com/nginx:1.27",),
        common_labels=(("team", "blue"), ("tier", "frontend")),
    )
    src = ApplicationSource(repo_url=REPO, path="overlays/prod", kustomize=spec)
    got = by_kind_name(render(kustomize_repo, src, app_name="web", namespace="team"))

    # Argo CD's `kustomize edit set nameprefix` replaces the overlay's own prefix.
    assert set(got) == {("Deployment", "tide-web-v2"), ("Service", "tide-web-v2")}
    deployment = got[("Deployment", "tide-web-v2")]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example.com/nginx:1.27"
    for obj in got.values():
        assert obj["metadata"]["labels"] == {"team": "blue", "tier": "frontend"}
    assert deployment["spec"]["selector"]["matchLabels"] == {"app": "web", "team": "blue", "tier": "frontend"}
    assert tree_digest(kustomize_repo) == before  # the shared checkout is never edited


def test_kustomize_overrides_do_not_write_through_a_symlinked_kustomization(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write(repo, "app/deployment.yaml", DEPLOYMENT)
    write(repo, "shared/kustomization.yaml", "resources: [deployment.yaml]\n")
    (repo / "app/kustomization.yaml").symlink_to(repo / "shared/kustomization.yaml")  # absolute target
    before = tree_digest(repo)
    src = ApplicationSource(repo_url=REPO, path="app", kustomize=KustomizeSpec(name_prefix="x-"))
    assert [m["metadata"]["name"] for m in render(repo, src, app_name="web", namespace="")] == ["x-web"]
    assert tree_digest(repo) == before


def test_kustomize_error_quotes_kustomize_without_temp_paths(kustomize_repo: Path) -> None:
    write(kustomize_repo, "broken/kustomization.yaml", "resources: [cm.yaml]\n")
    write(kustomize_repo, "broken/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: [1, 2\n")
    src = ApplicationSource(repo_url=REPO, path="broken", kustomize=KustomizeSpec(name_prefix="p-"))
    with pytest.raises(RenderError) as err:
        render(kustomize_repo, src, app_name="web", namespace="team")
    message = str(err.value)
    assert message.startswith("kustomize build broken failed: ")
    assert "cm.yaml" in message
    assert "tidecd-kustomize-" not in message and str(kustomize_repo) not in message


def test_a_missing_kustomize_resource_is_named_before_kustomize_runs(kustomize_repo: Path) -> None:
    write(kustomize_repo, "gone/kustomization.yaml", "resources: [missing.yaml]\n")
    with pytest.raises(RenderError, match=r"^kustomization gone/kustomization.yaml: resources\[0\] 'missing.yaml' "
                                          r"is not a file or directory in the repository"):
        render(kustomize_repo, ApplicationSource(repo_url=REPO, path="gone"), app_name="web", namespace="")


def test_kustomize_remote_base_fails_clearly(tmp_path: Path) -> None:
    write(tmp_path, "app/kustomization.yaml", """
        resources:
          - https://github.com/kubernetes-sigs/kustomize//examples/helloWorld?ref=v5.0.0
        """)
    started = time.monotonic()
    with pytest.raises(RenderError, match=r"kustomization app/kustomization.yaml: resources\[0\] 'https://github"
                                          r".* is remote: .*vendor anything else into the repository"):
        render(tmp_path, ApplicationSource(repo_url=REPO, path="app"), app_name="web", namespace="")
    assert time.monotonic() - started < 60


def test_kubectl_kustomize_is_the_fallback(
    kustomize_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubectl = need("kubectl")
    only_kubectl = tmp_path / "path"
    only_kubectl.mkdir()
    (only_kubectl / "kubectl").symlink_to(kubectl)
    monkeypatch.setenv("PATH", str(only_kubectl))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "no-cache"))
    monkeypatch.delenv("TIDECD_BIN_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(tools.MissingTool):
        tools.binary("kustomize")

    src = ApplicationSource(repo_url=REPO, path="overlays/prod")
    got = by_kind_name(render(kustomize_repo, src, app_name="web", namespace="team"))
    assert set(got) == {("Deployment", "prod-web"), ("Service", "prod-web")}

    edited = ApplicationSource(repo_url=REPO, path="overlays/prod", kustomize=KustomizeSpec(name_prefix="x-"))
    with pytest.raises(tools.MissingTool, match="kustomize not found"):
        render(kustomize_repo, edited, app_name="web", namespace="team")


# -- helm ---------------------------------------------------------------------------------------------------

@pytest.fixture
def helm_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    write(repo, "charts/web/Chart.yaml", """
        apiVersion: v2
        name: web
        version: 0.1.0
        dependencies:
          - name: sidecar
            version: 0.1.0
        """)
    write(repo, "charts/web/values.yaml", """
        replicas: 1
        image: {repository: nginx, tag: "1.25"}
        color: red
        note: default
        """)
    write(repo, "charts/web/values-extra.yaml", "color: green\n")
    write(repo, "envs/prod.yaml", "replicas: 2\ncolor: blue\n")
    write(repo, "charts/web/templates/deployment.yaml", """
        apiVersion: apps/v1
        kind: Deployment
        metadata:
          name: {{ .Release.Name }}-web
          namespace: {{ .Release.Namespace }}
          labels:
            color: {{ .Values.color | quote }}
            kube-minor: {{ .Capabilities.KubeVersion.Minor | quote }}
        spec:
          replicas: {{ .Values.replicas }}
          selector: {matchLabels: {app: web}}
          template:
            metadata: {labels: {app: web}}
            spec:
              containers:
                - name: web
                  image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
        """)
    write(repo, "charts/web/templates/configmaps.yaml", """
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: {{ .Release.Name }}-note
        data:
          note: {{ .Values.note | quote }}
          kind: {{ kindOf .Values.note | quote }}
        ---
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: {{ .Release.Name }}-second
        """)
    write(repo, "charts/web/templates/migrate-job.yaml", """
        apiVersion: batch/v1
        kind: Job
        metadata:
          name: {{ .Release.Name }}-migrate
          annotations:
            helm.sh/hook: pre-install,pre-upgrade
            helm.sh/hook-weight: "-5"
        spec:
          template:
            spec:
              restartPolicy: Never
              containers: [{name: migrate, image: busybox}]
        """)
    write(repo, "charts/web/crds/widgets.yaml", """
        apiVersion: apiextensions.k8s.io/v1
        kind: CustomResourceDefinition
        metadata: {name: widgets.example.com}
        spec:
          group: example.com
          names: {kind: Widget, plural: widgets}
          scope: Namespaced
          versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}]
        """)
    write(repo, "charts/web/charts/sidecar/Chart.yaml", "apiVersion: v2\nname: sidecar\nversion: 0.1.0\n")
    write(repo, "charts/web/charts/sidecar/templates/sa.yaml", """
        apiVersion: v1
        kind: ServiceAccount
        metadata: {name: {{ .Release.Name }}-sidecar}
        """)
    return repo


def helm_source(spec: HelmSpec | None = None) -> ApplicationSource:
    return ApplicationSource(repo_url=REPO, path="charts/web", helm=spec or HelmSpec())


def test_helm_template_with_values_parameters_and_namespace(helm_repo: Path) -> None:
    src = helm_source(HelmSpec(
        release_name="prod",
        value_files=("../../envs/prod.yaml", "values-extra.yaml"),
        values="replicas: 3\nimage: {tag: '1.26'}\n",
        parameters=(HelmParameter("image.tag", "1.27"), HelmParameter("note", "a,b", force_string=True)),
    ))
    got = by_kind_name(render(helm_repo, src, app_name="web", namespace="team"))
    assert set(got) == {
        ("CustomResourceDefinition", "widgets.example.com"),  # --include-crds
        ("Deployment", "prod-web"),
        ("ConfigMap", "prod-note"),
        ("ConfigMap", "prod-second"),
        ("Job", "prod-migrate"),
        ("ServiceAccount", "prod-sidecar"),  # vendored dependency
    }
    deployment = got[("Deployment", "prod-web")]
    assert deployment["metadata"]["namespace"] == "team"
    assert deployment["metadata"]["labels"] == {"color": "green", "kube-minor": "34"}  # later file wins
    assert deployment["spec"]["replicas"] == 3  # inline values over value files
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "nginx:1.27"  # parameters over inline values
    assert got[("ConfigMap", "prod-note")]["data"] == {"note": "a,b", "kind": "string"}


def test_helm_hook_annotations_are_kept(helm_repo: Path) -> None:
    got = by_kind_name(render(helm_repo, helm_source(), app_name="web", namespace="team"))
    annotations = got[("Job", "web-migrate")]["metadata"]["annotations"]  # release name defaults to the app
    assert annotations == {HELM_HOOK: "pre-install,pre-upgrade", HELM_HOOK_WEIGHT: "-5"}


def test_chart_is_discovered_without_a_helm_block(helm_repo: Path) -> None:
    src = ApplicationSource(repo_url=REPO, path="charts/web")
    got = render(helm_repo, src, app_name="shop", namespace="")
    assert ("Deployment", "shop-web") in by_kind_name(got)
    assert by_kind_name(got)[("Deployment", "shop-web")]["metadata"]["namespace"] == "default"


def test_helm_output_is_stable(helm_repo: Path) -> None:
    first = render(helm_repo, helm_source(), app_name="web", namespace="team")
    assert render(helm_repo, helm_source(), app_name="web", namespace="team") == first


def test_value_file_leaving_the_repository_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write(repo, "web/Chart.yaml", "apiVersion: v2\nname: web\nversion: 0.1.0\n")
    write(tmp_path, "x.yaml", "secret: outside\n")
    src = ApplicationSource(repo_url=REPO, path="web", helm=HelmSpec(value_files=("../../x.yaml",)))
    with pytest.raises(UnsafePathError, match=r"spec.source.helm.valueFiles\[0\] '../../x.yaml' leaves"):
        render(repo, src, app_name="web", namespace="team")


def test_value_file_from_the_repository_root(helm_repo: Path) -> None:
    got = render(helm_repo, helm_source(HelmSpec(value_files=("/envs/prod.yaml",))), app_name="web", namespace="")
    assert by_kind_name(got)[("Deployment", "web-web")]["spec"]["replicas"] == 2


def test_missing_value_file_is_named(helm_repo: Path) -> None:
    src = helm_source(HelmSpec(value_files=("values-extra.yaml", "values-nope.yaml")))
    with pytest.raises(RenderError, match=r"valueFiles\[1\] 'values-nope.yaml' does not exist"):
        render(helm_repo, src, app_name="web", namespace="team")


def test_invalid_inline_values_name_the_field(helm_repo: Path) -> None:
    with pytest.raises(RenderError, match=r"^spec.source.helm.values line 2: invalid YAML"):
        render(helm_repo, helm_source(HelmSpec(values="a: 1\n b: 2\n")), app_name="web", namespace="team")


def test_template_error_quotes_helm_without_temp_paths(helm_repo: Path) -> None:
    template = '{{ required "color2 is required" .Values.color2 }}\n'
    write(helm_repo, "charts/web/templates/broken.yaml", template)
    with pytest.raises(RenderError) as err:
        render(helm_repo, helm_source(), app_name="web", namespace="team")
    message = str(err.value)
    assert message.startswith("helm template charts/web failed: ")
    assert "color2 is required" in message
    assert str(helm_repo) not in message and "tidecd-helm-" not in message


def test_unvendored_dependency_fails_with_a_hint(helm_repo: Path) -> None:
    for path in sorted((helm_repo / "charts/web/charts").rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    with pytest.raises(RenderError, match=r"missing in charts/.*helm dependency build"):
        render(helm_repo, helm_source(), app_name="web", namespace="team")

