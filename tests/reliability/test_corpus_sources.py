"""Issue 29's corpus: hostile sources, tried as the issue describes, through the real reconcile step against
the session's control plane and git server, with the real helm and kustomize. Loopback sites stand for the
hostile helm repositories and OCI registries (another port is another origin).

Like `test_corpus.py`, every case has a well-behaved app beside the hostile one and asserts that it still
syncs; a refusal is a condition on the hostile app naming what was refused, with nothing of it applied.
The classes: a credential leaving its origin through a redirect, a token realm or a tags `Link`; data that
would become syntax (a tag with `\\,` and `=` through helm, an image override kustomize would split); a
templatePatch moving a generated app to another project; archive, layer and index bounds, with time and
memory measured; and an answer that is no answer (HTML) in `test_foreign_answers.py`.
"""

from __future__ import annotations

import hashlib
import json
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from tests.support.apps import GitOps, configmap
from tests.unit import test_hostile_sources as hostile
from tests.unit.test_chart_sources import tar_gz
from tests.unit.test_hostile_sources import MiB, Site, bomb_chart, index_of, oci_registry
from tests.unit.test_registry_credentials import BASIC, PASSWORD, USER, Server
from tidecd.base.constants import LABEL_SECRET_TYPE, SECRET_TYPE_REPOSITORY
from tidecd.images import state as images_state
from tidecd.images.state import ImageValue
from tidecd.usecases import appsets

HOSTILE_TAG = "zz\\,evil=injected"
sites = hostile.sites  # the loopback sites fixture: a helm repository, a CDN, an OCI registry each


def chart(name: str, cm_name: str) -> bytes:
    """A chart whose one ConfigMap `cm_name` holds every value helm was given, as JSON."""
    return tar_gz({f"{name}/Chart.yaml": f"apiVersion: v2\nname: {name}\nversion: 1.0.0\n".encode(),
                   f"{name}/values.yaml": b"image: {repository: reg.io/web, tag: '1.0'}\n",
                   f"{name}/templates/cm.yaml": (f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {cm_name}}}\n"
                                                 "data:\n  values: {{ toJson .Values | quote }}\n").encode()})


@pytest.fixture
def good(gitops: GitOps) -> Iterator[Callable[[], None]]:
    """A well-behaved app in the same namespace; calling the fixture's value checks it still syncs."""
    gitops.push({"good/cm.yaml": configmap("good-cm")})
    gitops.application("good", path="good", automated={"prune": True})

    def still_syncs() -> None:
        gitops.reconcile("good")
        assert gitops.state("good").sync_status == "Synced", gitops.state("good").conditions
        assert gitops.live("ConfigMap", "good-cm") is not None

    yield still_syncs


def repository_secret(gitops: GitOps, url: str, kind: str) -> None:
    name = f"repo-{hashlib.sha256(url.encode()).hexdigest()[:8]}"
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": name, "namespace": "argocd", "labels": {LABEL_SECRET_TYPE: SECRET_TYPE_REPOSITORY}},
              "stringData": {"type": kind, "url": url, "username": USER, "password": PASSWORD}}
    (gitops.config_dir / f"{name}.yaml").write_text(yaml.safe_dump(secret))


def conditions(gitops: GitOps, app: str) -> str:
    return " | ".join(c["message"] for c in gitops.state(app).conditions)


# --- credentials leave their origin only where the one rule lets them --------------------------------------


@pytest.mark.parametrize("mode", ["realm", "link"])
def test_an_oci_registry_cannot_send_its_credentials_elsewhere(gitops: GitOps, good: Callable[[], None],
                                                               mode: str) -> None:
    """The registry names another origin as its token realm (asked anonymously), as the `Link` of its tags
    list (not followed), and as where its blob is (a redirect, followed without credentials)."""
    elsewhere = Server("elsewhere").start()
    registry = Server(mode, peer=elsewhere).start()
    try:
        url = f"oci://{registry.host}/team/app"
        repository_secret(gitops, url, "helm")
        gitops.application("bad", path="app", automated={"prune": True},
                           source={"repoURL": url, "targetRevision": "1.x"})
        gitops.reconcile("bad")
        assert all(auth == "" for _, auth in elsewhere.seen), elsewhere.seen
        assert elsewhere.seen, "elsewhere was asked (the realm, the blob): without credentials"
        if mode == "link":
            assert not any("/tags/list" in path for path, _ in elsewhere.seen)
            assert BASIC in {auth for _, auth in registry.seen}  # the registry itself got them
        else:  # the realm elsewhere was asked anonymously; its token (a public one) was enough
            assert any(path.startswith("/token") for path, _ in elsewhere.seen)
        assert any(path.startswith("/blob") for path, _ in elsewhere.seen)  # the redirect, followed bare
        assert gitops.state("bad").sync_status == "Synced", conditions(gitops, "bad")
        assert gitops.live("ConfigMap", "x") is not None
    finally:
        registry.stop()
        elsewhere.stop()
    good()


def test_a_helm_repository_redirect_elsewhere_gets_no_credentials(gitops: GitOps, good: Callable[[], None],
                                                                  sites: Callable[[], Site]) -> None:
    repo, mirror = sites(), sites()
    archive = chart("web", "bad-web")
    repo.routes["/index.yaml"] = (302, {"Location": f"{mirror.url}/index.yaml"}, b"")
    mirror.routes["/index.yaml"] = (200, {}, index_of({"web": [("1.0.0", archive, f"{mirror.url}/web-1.0.0.tgz")]}))
    mirror.routes["/web-1.0.0.tgz"] = (200, {}, archive)
    repository_secret(gitops, repo.url, "helm")
    gitops.application("bad", path=".", automated={"prune": True},
                       source={"repoURL": repo.url, "chart": "web", "targetRevision": "1.x"})
    gitops.reconcile("bad")
    assert repo.auth_on("/index.yaml") == {BASIC}
    assert mirror.seen and all(auth == "" for _, auth in mirror.seen), mirror.seen
    assert gitops.state("bad").sync_status == "Synced", conditions(gitops, "bad")  # public there: it works
    good()


# --- data is never syntax ------------------------------------------------------------------------------------


def test_a_hostile_tag_reaches_the_cluster_as_that_literal_tag(gitops: GitOps, good: Callable[[], None],
                                                               sites: Callable[[], Site]) -> None:
    """The issue's `zz\\,evil=injected` through the argocd write-back, and as a helm parameter of the app:
    helm is given one value, the cluster gets that string, and no `evil` key appears anywhere."""
    repo = sites()
    archive = chart("web", "tagged")
    repo.routes["/index.yaml"] = (200, {}, index_of({"web": [("1.0.0", archive, "web-1.0.0.tgz")]}))
    repo.routes["/web-1.0.0.tgz"] = (200, {}, archive)
    bad = gitops.application("bad", path=".", automated={"prune": True}, source={
        "repoURL": repo.url, "chart": "web", "targetRevision": "1.x",
        "helm": {"parameters": [{"name": "note", "value": "a,b=c\\,d=e"}]}})
    images_state.update(gitops.store, bad, lambda s: s.set_override([ImageValue(
        "web", "reg.io/web", HOSTILE_TAG, helm_image_name="image.repository", helm_image_tag="image.tag")]))
    gitops.reconcile("bad")
    live = gitops.live("ConfigMap", "tagged")
    assert live is not None, conditions(gitops, "bad")
    assert json.loads(live["data"]["values"]) == {"image": {"repository": "reg.io/web", "tag": HOSTILE_TAG},
                                                  "note": "a,b=c\\,d=e"}
    good()


def test_an_image_override_kustomize_would_split_is_refused(gitops: GitOps, good: Callable[[], None]) -> None:
    bad = gitops.real("bad")
    gitops.push({"bad/kustomization.yaml": "resources: [deploy.yaml]\n",
                 "bad/deploy.yaml": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "bad-web"},
                                     "spec": {"selector": {"matchLabels": {"app": "w"}}, "template": {
                                         "metadata": {"labels": {"app": "w"}},
                                         "spec": {"containers": [{"name": "w", "image": "reg.io/web:1"}]}}}},
                 f"bad/.argocd-source-{bad}.yaml": "kustomize:\n  images: ['reg.io/web:1=evil.example/img:2']\n"})
    gitops.application("bad", path="bad", automated={"prune": True})
    gitops.reconcile("bad")
    assert f"bad/.argocd-source-{bad}.yaml: kustomize image" in conditions(gitops, "bad")
    assert gitops.live("Deployment", "bad-web", group="apps") is None
    good()


# --- a templatePatch cannot move an app to another project -------------------------------------------------


def test_a_template_patch_cannot_move_a_generated_app_to_another_project(gitops: GitOps,
                                                                         good: Callable[[], None]) -> None:
    """A git files generator's parameters feed a templatePatch that would set the project (a project that
    may deploy anywhere) and the destination (kube-system): that app is set aside, saying why; its sibling
    is generated and syncs; nothing reaches kube-system."""
    gitops.project({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "team"},
                    "spec": {"sourceRepos": [gitops.repo.url],
                             "destinations": [{"server": "*", "namespace": gitops.namespace}]}})
    gitops.push({"teams/web.json": json.dumps({"name": "web", "project": "team", "namespace": gitops.namespace}),
                 "teams/evil.json": json.dumps({"name": "evil", "project": "default", "namespace": "kube-system"}),
                 "apps/web/cm.yaml": configmap("team-web"), "apps/evil/cm.yaml": configmap("team-evil")})
    appset = {"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "metadata": {"name": "teams"},
              "spec": {"goTemplate": True, "generators": [{"git": {
                  "repoURL": gitops.repo.url, "revision": "main", "files": [{"path": "teams/*.json"}]}}],
                  "template": {"metadata": {"name": "{{ .name }}-" + gitops.namespace},
                               "spec": {"project": "team",
                                        "source": {"repoURL": gitops.repo.url, "targetRevision": "main",
                                                   "path": "apps/{{ .name }}"},
                                        "destination": {"name": "in-cluster", "namespace": gitops.namespace},
                                        "syncPolicy": {"automated": {"prune": True}}}},
                  "templatePatch": "spec:\n  project: {{ .project }}\n  destination:\n"
                                   "    namespace: {{ .namespace }}\n"}}
    (gitops.config_dir / "appset.yaml").write_text(yaml.safe_dump(appset))
    runtime = gitops.runtime()
    summary = appsets.refresh(runtime)
    config = gitops.runtime().config()
    assert gitops.real("web") in config.applications and gitops.real("evil") not in config.applications, summary
    problems = " | ".join([*config.problems, *summary.errors])
    assert "sets spec.project to 'default' (the template's is 'team'): a templatePatch may not change the " \
           "project" in problems, problems
    gitops.reconcile("web")
    assert gitops.state("web").sync_status == "Synced", conditions(gitops, "web")
    assert gitops.live("ConfigMap", "team-evil", namespace="kube-system") is None
    good()


# --- bounds: measured, refused, recorded, not fetched again -------------------------------------------------


def measured(call: Callable[[], Any]) -> tuple[float, float]:
    """Wall seconds and peak MiB allocated (tracemalloc) of `call`."""
    tracemalloc.start()
    start = time.monotonic()
    try:
        call()
    finally:
        seconds = time.monotonic() - start
        peak = tracemalloc.get_traced_memory()[1] / MiB
        tracemalloc.stop()
    return seconds, peak


def test_a_chart_that_expands_to_3_gib_is_a_condition_in_bounded_time_and_memory(
        gitops: GitOps, good: Callable[[], None], sites: Callable[[], Site]) -> None:
    bomb = bomb_chart(3 * 1024)
    repo = sites()
    repo.routes["/index.yaml"] = (200, {}, index_of({"web": [("1.0.0", bomb, "web-1.0.0.tgz")]}))
    repo.routes["/web-1.0.0.tgz"] = (200, {}, bomb)
    gitops.application("bad", path=".", automated={"prune": True},
                       source={"repoURL": repo.url, "chart": "web", "targetRevision": "1.x"})
    seconds, peak = measured(lambda: gitops.reconcile("bad"))
    print(f"\n3 GiB chart bomb through the step: {seconds:.1f}s, peak {peak:.1f} MiB allocated")
    assert "chart web 1.0.0: expanded size: over the limit of 268,435,456 bytes (TIDECD_MAX_ARCHIVE_BYTES)" in \
        conditions(gitops, "bad")
    assert seconds < 60 and peak < 64, (seconds, peak)
    gitops.reconcile("bad")
    assert sum(path == "/web-1.0.0.tgz" for path, _ in repo.seen) == 1, "refused once, recorded, not fetched again"
    assert gitops.state("bad").inventory == []
    good()


def test_an_artifact_of_200_layers_is_a_condition_before_any_layer_is_fetched(
        gitops: GitOps, good: Callable[[], None], sites: Callable[[], Site]) -> None:
    site = sites()
    registry, asked = oci_registry(site, [(tar_gz({"app/cm.yaml": b"kind: ConfigMap\n"}), 8 * MiB)] * 200)
    gitops.application("bad", path="app", automated={"prune": True},
                       source={"repoURL": registry.ref.url, "targetRevision": "1.0.0"})
    site.routes["/v2/team/app/tags/list"] = (200, {}, json.dumps({"tags": ["1.0.0"]}).encode())
    manifest = site.routes["/v2/team/app/manifests/1.0.0"]
    assert isinstance(manifest, tuple)
    site.routes[f"/v2/team/app/manifests/sha256:{hashlib.sha256(manifest[2]).hexdigest()}"] = manifest
    seconds, peak = measured(lambda: gitops.reconcile("bad"))
    digest = "sha256:" + hashlib.sha256(manifest[2]).hexdigest()  # the tag resolved, the manifest pinned by digest
    assert f"{registry.ref.url}@{digest}: 200 layers: over the limit of 16 (TIDECD_MAX_OCI_LAYERS)" in \
        conditions(gitops, "bad")
    assert asked == [] and seconds < 30 and peak < 32, (asked, seconds, peak)
    good()


def test_a_helm_index_past_its_bound_is_a_condition(gitops: GitOps, good: Callable[[], None],
                                                    sites: Callable[[], Site], monkeypatch: pytest.MonkeyPatch) -> None:
    repo = sites()
    repo.routes["/index.yaml"] = (200, {}, b"apiVersion: v1\nentries: {}\n" + b"#" * (4 * MiB))
    monkeypatch.setenv("TIDECD_MAX_HELM_INDEX_BYTES", str(MiB))
    gitops.application("bad", path=".", automated={"prune": True},
                       source={"repoURL": repo.url, "chart": "web", "targetRevision": "1.x"})
    seconds, peak = measured(lambda: gitops.reconcile("bad"))
    assert f"helm repository index {repo.url}/index.yaml: size: over the limit of 1,048,576 bytes " \
           "(TIDECD_MAX_HELM_INDEX_BYTES)" in conditions(gitops, "bad")
    assert seconds < 30 and peak < 16, (seconds, peak)
    good()

