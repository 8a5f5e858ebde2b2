"""Argo CD's build environment (`render.buildenv`): its substitution rule, byte for byte Go's `os.Expand` with
Argo CD's `Env.Envsubst` mapping, and jsonnet tlas/extVars rendered with it (helm and kustomize, which need
the real binaries: tests/e2e/test_render_buildenv.py)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tidecd.clients.store import MemoryStore
from tidecd.config.load import ApplicationSource, DirectorySpec, JsonnetSpec, JsonnetVar, load_config
from tidecd.render import BuildEnv, manifest_key, render, render_cached
from tidecd.render.buildenv import substitute

REPO = "https://git.example.com/apps.git"
SHA = "f913b6cbf58aa5ae5ca1f8a2b149477aebcbd9d8"
ENV = {"ARGOCD_APP_NAME": "demo", "ARGOCD_APP_REVISION": SHA, "A": "x"}


@pytest.mark.parametrize(("text", "expected"), [
    ("plain", "plain"),
    ("$ARGOCD_APP_NAME", "demo"),  # the bare form
    ("${ARGOCD_APP_NAME}", "demo"),  # the braced form
    ("img:$ARGOCD_APP_REVISION", f"img:{SHA}"),
    ("${ARGOCD_APP_NAME}-web", "demo-web"),
    ("$ARGOCD_APP_NAME-web", "demo-web"),  # a name is letters, digits and _: `-` ends it
    ("$ARGOCD_APP_NAMEweb", ""),  # ... so this is the (unknown) variable ARGOCD_APP_NAMEweb
    ("$$ARGOCD_APP_NAME", "$ARGOCD_APP_NAME"),  # `$$` escapes a dollar
    ("$${ARGOCD_APP_NAME}", "${ARGOCD_APP_NAME}"),
    ("a$$b", "a$b"),
    ("$$$A", "$x"),
    ("${$}", "$"),  # a special one-character name in braces: `$` maps to itself
    ("$HOME/x", "/x"),  # unknown variables become empty, never kept
    ("${NOPE}", ""),
    ("$KUBE_VERSION", ""),  # not in the environment of helm, kustomize or jsonnet (plugins only)
    ("$1abc", "abc"),  # a digit is a one-character special name (unknown: empty)
    ("$-", ""),
    ("$", "$"),  # a final dollar is kept
    ("a$", "a$"),
    ("$ a", "$ a"),  # a dollar followed by nothing nameable is kept
    ("$/x", "$/x"),
    ("$é", "$é"),
    ("${}x", "x"),  # bad syntax: `${}` is dropped
    ("${A", "A"),  # an unclosed `${`: the `${` is dropped, the rest kept
    ("${A B}", ""),  # everything up to `}` is the name (here unknown)
    ("${A}${A}$A", "xxx"),
    ("ü$A/ü", "üx/ü"),
])
def test_substitute_is_argo_cds_envsubst(text: str, expected: str) -> None:
    assert substitute(text, ENV) == expected


def test_variables_are_argo_cds_new_env() -> None:
    env = BuildEnv("team-a", SHA).complete(app_name="demo", namespace="web", repo_url=REPO, path="app",
                                           target_revision="main")
    assert env.variables() == {
        "ARGOCD_APP_NAME": "demo",
        "ARGOCD_APP_NAMESPACE": "web",
        "ARGOCD_APP_PROJECT_NAME": "team-a",
        "ARGOCD_APP_REVISION": SHA,
        "ARGOCD_APP_REVISION_SHORT": "f913b6c",
        "ARGOCD_APP_REVISION_SHORT_8": "f913b6cb",
        "ARGOCD_APP_SOURCE_REPO_URL": REPO,
        "ARGOCD_APP_SOURCE_PATH": "app",
        "ARGOCD_APP_SOURCE_TARGET_REVISION": "main",
    }
    assert env.subst("${ARGOCD_APP_PROJECT_NAME}/$ARGOCD_APP_REVISION_SHORT_8") == "team-a/f913b6cb"


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))


JSONNET = """
function(revision, name) {
  apiVersion: 'v1', kind: 'ConfigMap',
  metadata: { name: name },
  data: { revision: revision, short: std.extVar('short'), code: std.toString(std.extVar('count')),
          escaped: std.extVar('escaped'), unknown: std.extVar('unknown') },
}
"""


def test_jsonnet_tlas_and_ext_vars_are_substituted(tmp_path: Path) -> None:
    write(tmp_path, "app/main.jsonnet", JSONNET)
    jsonnet = JsonnetSpec(
        tlas=(JsonnetVar("revision", "$ARGOCD_APP_REVISION"), JsonnetVar("name", "${ARGOCD_APP_NAME}-cm")),
        ext_vars=(JsonnetVar("short", "$ARGOCD_APP_REVISION_SHORT"),
                  JsonnetVar("count", "std.length('$ARGOCD_APP_PROJECT_NAME')", code=True),
                  JsonnetVar("escaped", "$$ARGOCD_APP_NAME"), JsonnetVar("unknown", "[$NOT_THERE]")))
    src = ApplicationSource(repo_url=REPO, path="app", directory=DirectorySpec(jsonnet=jsonnet))
    [cm] = render(tmp_path, src, app_name="demo", namespace="web", build_env=BuildEnv("team-a", SHA))
    assert cm["metadata"]["name"] == "demo-cm"
    assert cm["data"] == {"revision": SHA, "short": SHA[:7], "code": "6", "escaped": "$ARGOCD_APP_NAME",
                          "unknown": "[]"}


def test_plain_manifests_are_read_as_they_are(tmp_path: Path) -> None:
    """Argo CD substitutes fields of the Application, never the repository's files."""
    write(tmp_path, "app/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"
                                   "data: {name: $ARGOCD_APP_NAME}\n")
    src = ApplicationSource(repo_url=REPO, path="app")
    [cm] = render(tmp_path, src, app_name="demo", namespace="web", build_env=BuildEnv("p", SHA))
    assert cm["data"] == {"name": "$ARGOCD_APP_NAME"}


def test_the_cache_key_follows_the_build_environment(tmp_path: Path) -> None:
    """A render depends on the project (the revision and the source are in the key already)."""
    src = ApplicationSource(repo_url=REPO, path="app")
    key = manifest_key("demo", SHA, src, "web", build_env=BuildEnv("a", SHA))
    assert key == manifest_key("demo", SHA, src, "web", build_env=BuildEnv("a", SHA))
    assert key != manifest_key("demo", SHA, src, "web", build_env=BuildEnv("b", SHA))
    store = MemoryStore()
    calls: list[str] = []

    def rendered(project: str) -> list[dict[str, object]]:
        def render_fn() -> list[dict[str, object]]:
            calls.append(project)
            return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": project}}]
        return render_cached(store, "demo", SHA, src, render_fn, namespace="web", build_env=BuildEnv(project, SHA))

    assert json.dumps(rendered("a")) == json.dumps(rendered("a"))
    assert rendered("b")[0]["metadata"] == {"name": "b"}
    assert calls == ["a", "b"]


APP = """
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: demo}
spec:
  project: default
  source:
    repoURL: https://git.example.com/apps.git
    path: app
    kustomize:
      commonAnnotations: {revision: "boop-${ARGOCD_APP_REVISION}"}
      commonAnnotationsEnvsubst: true
  destination: {server: https://kubernetes.default.svc, namespace: web}
"""


def test_common_annotations_envsubst_is_read(tmp_path: Path) -> None:
    (tmp_path / "app.yaml").write_text(APP)
    spec = load_config(tmp_path).applications["demo"].source.kustomize
    assert spec is not None and spec.common_annotations_envsubst
    assert spec.common_annotations == (("revision", "boop-${ARGOCD_APP_REVISION}"),)
