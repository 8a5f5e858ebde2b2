"""Argo CD's build environment through the real helm and kustomize (built by `bash scripts/tools.sh helm
kustomize`): `$ARGOCD_APP_*` is substituted in exactly the fields Argo CD substitutes (issue 23, "Build
environment"), and the example apps, given it in every such field, render with no `$ARGOCD_` left."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.e2e.test_render_fidelity import _binaries, write  # noqa: F401 - the autouse fixture checks helm and kustomize
from tidecd.base.errors import RenderError
from tidecd.base.model import Manifest
from tidecd.config.load import (
    ApplicationSource,
    DirectorySpec,
    HelmParameter,
    HelmSpec,
    JsonnetSpec,
    JsonnetVar,
    KustomizeSpec,
)
from tidecd.render import BuildEnv, render

pytestmark = pytest.mark.e2e

REPO = "https://git.example.com/apps.git"
SHA = "f913b6cbf58aa5ae5ca1f8a2b149477aebcbd9d8"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "apps"



def by_kind_name(manifests: list[Manifest]) -> dict[tuple[str, str], Manifest]:
    return {(m["kind"], m["metadata"]["name"]): m for m in manifests}


CONFIGMAP = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Values.name }}
data:
  tag: {{ .Values.tag | quote }}
  escaped: {{ .Values.escaped | quote }}
  unknown: {{ .Values.unknown | quote }}
  items: {{ join "," .Values.items | quote }}
  fromFile: {{ .Values.fromFile | quote }}
  fromValueFile: {{ .Values.fromValueFile | quote }}
  inline: {{ .Values.inline | quote }}
"""


def test_helm_substitutes_parameters_value_files_and_file_parameters(tmp_path: Path) -> None:
    write(tmp_path, "chart/Chart.yaml", "apiVersion: v2\nname: web\nversion: 0.1.0\n")
    write(tmp_path, "chart/values.yaml", "unknown: ''\nfromFile: ''\nfromValueFile: ''\ninline: ''\nitems: []\n")
    write(tmp_path, "chart/templates/cm.yaml", CONFIGMAP)
    write(tmp_path, "chart/values-demo.yaml", "fromValueFile: picked by the app's name\n")
    write(tmp_path, "files/f913b6c.txt", "picked by the short revision")
    spec = HelmSpec(
        parameters=(HelmParameter("name", "$ARGOCD_APP_NAME"),
                    HelmParameter("tag", "${ARGOCD_APP_REVISION_SHORT}", force_string=True),
                    HelmParameter("escaped", "$$ARGOCD_APP_NAME", force_string=True),
                    HelmParameter("unknown", "[$KUBE_VERSION]", force_string=True),
                    HelmParameter("items", "{$ARGOCD_APP_PROJECT_NAME,$ARGOCD_APP_NAMESPACE}")),
        value_files=("values-$ARGOCD_APP_NAME.yaml",),
        file_parameters=(("fromFile", "/files/$ARGOCD_APP_REVISION_SHORT.txt"),),
        values="inline: $ARGOCD_APP_NAME\n",  # values and valuesObject: never substituted by Argo CD
    )
    src = ApplicationSource(repo_url=REPO, path="chart", helm=spec)
    [cm] = render(tmp_path, src, app_name="demo", namespace="web", build_env=BuildEnv("team-a", SHA))
    assert cm["metadata"]["name"] == "demo"
    assert cm["data"] == {
        "tag": SHA[:7],
        "escaped": "$ARGOCD_APP_NAME",
        "unknown": "[]",  # KUBE_VERSION is a plugin-only variable: Argo CD empties it here
        "items": "team-a,web",
        "fromFile": "picked by the short revision",
        "fromValueFile": "picked by the app's name",
        "inline": "$ARGOCD_APP_NAME",
    }


def test_helm_ref_value_files_are_substituted_after_the_ref_name(tmp_path: Path) -> None:
    """`$values/envs/$ARGOCD_APP_NAME.yaml` reads the ref source's file; `$ARGOCD_APP_NAME/...` (a variable,
    not a ref) is a path of this repository; an unknown `$other/` still names the refs."""
    repo, values = tmp_path / "repo", tmp_path / "values"
    write(repo, "chart/Chart.yaml", "apiVersion: v2\nname: web\nversion: 0.1.0\n")
    write(repo, "chart/templates/cm.yaml",
          "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {a: {{ .Values.a | quote }}, "
          "b: {{ .Values.b | quote }}}\n")
    write(repo, "chart/values.yaml", "a: ''\nb: ''\n")
    write(repo, "chart/demo/b.yaml", "b: from this repository\n")
    write(values, "envs/demo.yaml", "a: from the ref source\n")
    spec = HelmSpec(value_files=("$values/envs/$ARGOCD_APP_NAME.yaml", "${ARGOCD_APP_NAME}/b.yaml"))
    src = ApplicationSource(repo_url=REPO, path="chart", helm=spec)
    [cm] = render(repo, src, app_name="demo", namespace="web", value_refs={"values": values},
                  build_env=BuildEnv("p", SHA))
    assert cm["data"] == {"a": "from the ref source", "b": "from this repository"}
    other = ApplicationSource(repo_url=REPO, path="chart", helm=HelmSpec(value_files=("$other/x.yaml",)))
    with pytest.raises(RenderError, match=r"no source has ref 'other' \(refs: \$values\)"):
        render(repo, other, app_name="demo", namespace="web", value_refs={"values": values})


def test_a_substituted_parameter_stays_data(tmp_path: Path) -> None:
    """The environment's values reach helm escaped like any value: a comma in the target revision does
    not start a second parameter."""
    write(tmp_path, "chart/Chart.yaml", "apiVersion: v2\nname: web\nversion: 0.1.0\n")
    write(tmp_path, "chart/templates/cm.yaml",
          "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {ref: {{ .Values.ref | quote }}, "
          "evil: {{ .Values.evil | default \"unset\" | quote }}}\n")
    spec = HelmSpec(parameters=(HelmParameter("ref", "$ARGOCD_APP_SOURCE_TARGET_REVISION"),))
    src = ApplicationSource(repo_url=REPO, path="chart", target_revision="main,evil=x", helm=spec)
    [cm] = render(tmp_path, src, app_name="demo", namespace="web", build_env=BuildEnv("p", SHA))
    assert cm["data"] == {"ref": "main,evil=x", "evil": "unset"}


KUSTOMIZE_DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, annotations: {note: $ARGOCD_APP_NAME}}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx:1.25}]}
"""


def test_kustomize_substitutes_images_and_common_labels_only(tmp_path: Path) -> None:
    write(tmp_path, "app/kustomization.yaml", "resources: [deployment.yaml]\n")
    write(tmp_path, "app/deployment.yaml", KUSTOMIZE_DEPLOYMENT)
    spec = KustomizeSpec(images=("nginx=registry.example.com/nginx:${ARGOCD_APP_REVISION_SHORT_8}",),
                         common_labels=(("project", "$ARGOCD_APP_PROJECT_NAME"),),
                         common_annotations=(("plain", "$ARGOCD_APP_NAME"),))  # no commonAnnotationsEnvsubst
    src = ApplicationSource(repo_url=REPO, path="app", kustomize=spec)
    [deployment] = render(tmp_path, src, app_name="demo", namespace="web", build_env=BuildEnv("team-a", SHA))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"registry.example.com/nginx:{SHA[:8]}"
    assert deployment["metadata"]["labels"] == {"project": "team-a"}
    # Argo CD leaves commonAnnotations (without commonAnnotationsEnvsubst) and the repository's files alone.
    assert deployment["metadata"]["annotations"] == {"note": "$ARGOCD_APP_NAME", "plain": "$ARGOCD_APP_NAME"}


def test_kustomize_common_annotations_with_envsubst(tmp_path: Path) -> None:
    write(tmp_path, "app/kustomization.yaml", "resources: [deployment.yaml]\n")
    write(tmp_path, "app/deployment.yaml", KUSTOMIZE_DEPLOYMENT)
    spec = KustomizeSpec(common_annotations=(("revision", "boop-${ARGOCD_APP_REVISION}"),
                                             ("escaped", "$$ARGOCD_APP_NAME")), common_annotations_envsubst=True)
    src = ApplicationSource(repo_url=REPO, path="app", kustomize=spec)
    [deployment] = render(tmp_path, src, app_name="demo", namespace="web", build_env=BuildEnv("p", SHA))
    assert deployment["metadata"]["annotations"] == {"note": "$ARGOCD_APP_NAME", "revision": f"boop-{SHA}",
                                                     "escaped": "$ARGOCD_APP_NAME"}


def test_kustomize_name_prefix_is_not_substituted(tmp_path: Path) -> None:
    """Argo CD passes namePrefix to `kustomize edit set nameprefix` as written (util/kustomize
    `applyNamePrefix`): the literal text is what it renders too."""
    write(tmp_path, "app/kustomization.yaml", "resources: [deployment.yaml]\n")
    write(tmp_path, "app/deployment.yaml", KUSTOMIZE_DEPLOYMENT)
    src = ApplicationSource(repo_url=REPO, path="app", kustomize=KustomizeSpec(name_prefix="$ARGOCD_APP_NAME-"))
    [deployment] = render(tmp_path, src, app_name="demo", namespace="web", build_env=BuildEnv("p", SHA))
    assert deployment["metadata"]["name"] == "$ARGOCD_APP_NAME-web"


# -- acceptance: the examples, given the environment in every field Argo CD substitutes --------------------

JSONNET = """
function(name) [{apiVersion: 'v1', kind: 'ConfigMap', metadata: {name: name},
                 data: {revision: std.extVar('revision')}}]
"""


def example_sources() -> dict[str, ApplicationSource]:
    every = "$ARGOCD_APP_NAME.$ARGOCD_APP_NAMESPACE.$ARGOCD_APP_PROJECT_NAME.${ARGOCD_APP_REVISION_SHORT}"
    jsonnet = JsonnetSpec(tlas=(JsonnetVar("name", "${ARGOCD_APP_NAME}-jsonnet"),),
                          ext_vars=(JsonnetVar("revision", "$ARGOCD_APP_REVISION $ARGOCD_APP_SOURCE_REPO_URL "
                                                           "$ARGOCD_APP_SOURCE_PATH"),))
    return {
        "guestbook": ApplicationSource(repo_url=REPO, path="guestbook",
                                       directory=DirectorySpec(jsonnet=jsonnet)),
        "helm-guestbook": ApplicationSource(repo_url=REPO, path="helm-guestbook", target_revision="demo", helm=HelmSpec(
            value_files=("values-$ARGOCD_APP_SOURCE_TARGET_REVISION.yaml",),
            parameters=(HelmParameter("image.tag", "$ARGOCD_APP_REVISION_SHORT_8"),
                        HelmParameter("extra", every, force_string=True)))),
        "kustomize-guestbook": ApplicationSource(
            repo_url=REPO, path="kustomize-guestbook/overlays/demo", kustomize=KustomizeSpec(
                images=("gcr.io/heptio-images/ks-guestbook-demo:${ARGOCD_APP_REVISION}",),
                common_labels=(("app.kubernetes.io/instance", "$ARGOCD_APP_NAME"),
                               ("project", "${ARGOCD_APP_PROJECT_NAME}")))),
    }


def test_no_example_deploys_text_argo_cd_would_have_substituted(tmp_path: Path) -> None:
    checkout = tmp_path / "repo"
    shutil.copytree(EXAMPLES, checkout)
    write(checkout, "guestbook/config.jsonnet", JSONNET)
    rendered: dict[str, list[Manifest]] = {}
    for name, src in example_sources().items():
        rendered[name] = render(checkout, src, app_name=name, namespace="demo", build_env=BuildEnv("default", SHA))
    for name, manifests in rendered.items():
        assert manifests, name
        text = json.dumps(manifests)
        assert "$ARGOCD_" not in text and "${ARGOCD_" not in text, (name, text)
    helm = by_kind_name(rendered["helm-guestbook"])
    image = helm[("Deployment", "helm-guestbook-ui")]["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith(f":{SHA[:8]}")
    [jsonnet_cm] = [m for m in rendered["guestbook"] if m["kind"] == "ConfigMap"]
    assert jsonnet_cm["metadata"]["name"] == "guestbook-jsonnet"
    assert jsonnet_cm["data"] == {"revision": f"{SHA} {REPO} guestbook"}
    for obj in rendered["kustomize-guestbook"]:
        assert obj["metadata"]["labels"]["project"] == "default"
