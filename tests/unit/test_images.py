"""The image updater's decisions: annotations, constraints, strategies, write-back edits and one tick over
many apps, with a counting in-memory registry (the real registry and git server are in the e2e tests)."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidecd import render
from tidecd.base import semver as versions
from tidecd.clients.registry import (
    Credentials,
    HttpRegistry,
    RegistryUnavailable,
    Repository,
    docker_config_auths,
    image_reference,
    parse_image,
)
from tidecd.clients.store import MemoryStore
from tidecd.config.load import ApplicationSource, HelmParameter, HelmSpec, KustomizeSpec
from tidecd.images import annotations as notes
from tidecd.images import state as images_state
from tidecd.images import writeback
from tidecd.images.state import ImageValue
from tidecd.render.overrides import SourceOverride, apply
from tidecd.runtime import Runtime, Settings
from tidecd.state import app as app_state
from tidecd.triggers.dispatch import Refresh
from tidecd.usecases import images as update

P = notes.PREFIX


# --- annotations -----------------------------------------------------------------------------------------


def test_image_list_with_aliases_constraints_and_registry_ports() -> None:
    config, problems = notes.parse({
        notes.IMAGE_LIST: "web=localhost:5000/team/web:~1.2, nginx, api=ghcr.io/acme/api:1.x-0",
        P + "web.update-strategy": "latest", P + "web.allow-tags": "regexp:^1\\.", P + "web.ignore-tags": "*-rc*, dev",
        P + "web.platforms": "linux/arm64,linux/amd64", P + "web.pull-secret": "pullsecret:argocd/regcred",
        P + "api.helm.image-name": "api.image.repository", P + "api.helm.image-tag": "api.image.tag",
        P + "update-strategy": "alphabetical",  # the app-wide default for aliases without their own
    })
    assert problems == [] and config is not None
    web, nginx, api = config.images
    assert (web.alias, web.image, web.constraint_text, web.strategy) == ("web", "localhost:5000/team/web", "~1.2",
                                                                         notes.Strategy.NEWEST_BUILD)
    assert web.ignore_tags == ("*-rc*", "dev") and web.platforms == ("linux/arm64", "linux/amd64")
    assert web.pull_secret == notes.SecretRef("pullsecret", "argocd", "regcred")
    assert web.allows("1.2.3") and not web.allows("1.2.3-rc1") and not web.allows("dev") and not web.allows("2.0")
    assert (nginx.alias, nginx.strategy) == ("nginx", notes.Strategy.ALPHABETICAL)
    assert (api.helm_image_name, api.helm_image_tag) == ("api.image.repository", "api.image.tag")
    assert config.write_back == notes.WriteBack()  # argocd by default


@pytest.mark.parametrize(("extra", "named"), [
    ({P + "a.update-strategy": "fastest"}, P + "a.update-strategy"),
    ({P + "a.allow-tags": "regexp:(unclosed"}, P + "a.allow-tags"),
    ({P + "a.allow-tags": "glob:*"}, P + "a.allow-tags"),
    ({P + "a.platforms": "amd64"}, P + "a.platforms"),
    ({P + "a.pull-secret": "ext:/bin/creds"}, P + "a.pull-secret"),
    ({P + "a.pull-secret": "secret:argocd/creds"}, P + "a.pull-secret"),
    ({P + "a.force-update": "yes"}, P + "a.force-update"),
    ({P + "write-back-method": "svn"}, P + "write-back-method"),
    ({P + "write-back-method": "git", P + "write-back-target": "values"}, P + "write-back-target"),
    ({P + "write-back-target": "kustomization"}, P + "write-back-target"),  # needs git
    ({P + "git-branch": "main:"}, P + "git-branch"),
    ({P + "git-branch": "ma..in"}, P + "git-branch"),
    ({notes.IMAGE_LIST: "a=repo/app:>>1"}, notes.IMAGE_LIST),
    ({notes.IMAGE_LIST: "a=repo/app, a=repo/other"}, notes.IMAGE_LIST),
    ({notes.IMAGE_LIST: "a=Not An Image"}, notes.IMAGE_LIST),
    ({notes.IMAGE_LIST: "a=repo/app", P + "a.update-strategy": "digest"}, notes.IMAGE_LIST),
])
def test_invalid_values_are_problems_naming_the_annotation(extra: dict[str, str], named: str) -> None:
    config, problems = notes.parse({notes.IMAGE_LIST: "a=repo/app:1.x", **extra})
    assert config is None and problems and f"annotation {named}:" in problems[0]


def test_write_back_git_with_secret_branch_forms_and_targets() -> None:
    def wb(**more: str) -> notes.WriteBack:
        config, problems = notes.parse({notes.IMAGE_LIST: "a=repo/app", **{P + k: v for k, v in more.items()}})
        assert problems == [] and config is not None
        return config.write_back

    assert wb(**{"write-back-method": "git"}).method is notes.Method.GIT
    got = wb(**{"write-back-method": "git:secret:argocd/git-creds", "git-branch": "main:image-updates"})
    assert got.secret == notes.SecretRef("secret", "argocd", "git-creds")
    assert (got.base_branch, got.target_branch) == ("main", "image-updates")
    assert (wb(**{"git-branch": ":only-target"}).base_branch, wb(**{"git-branch": "dev"}).base_branch) == ("", "dev")
    target = wb(**{"write-back-method": "git", "write-back-target": "helmvalues:/env/values.yaml"})
    assert (target.target, target.target_path) == (notes.Target.HELM_VALUES, "/env/values.yaml")
    target = wb(**{"write-back-method": "git", "write-back-target": "kustomization:../base"})
    assert (target.target, target.target_path) == (notes.Target.KUSTOMIZATION, "../base")


def test_alias_with_slash_is_written_with_underscore_in_option_keys() -> None:
    config, _ = notes.parse({notes.IMAGE_LIST: "argoproj/argocd=quay.io/argoproj/argocd",
                             P + "argoproj_argocd.update-strategy": "name"})
    assert config is not None and config.images[0].strategy is notes.Strategy.ALPHABETICAL


# --- versions and strategies -----------------------------------------------------------------------------

TAGS = ["1.0.0", "1.2.0", "v1.2.5", "1.3.0-rc1", "1.10.0", "2.0.0", "2.1", "latest", "dev", "1.2"]


@pytest.mark.parametrize(("constraint", "expected"), [
    ("", "2.1"), ("~1.2", "v1.2.5"), ("1.2.x", "v1.2.5"), ("^1.0", "1.10.0"), ("1.x", "1.10.0"),
    (">=1.0 <1.5", "v1.2.5"), ("<1.2", "1.0.0"), ("<=1.2", "v1.2.5"), (">1.2.5, <2", "1.10.0"),
    ("1.0.0 - 1.2.0", "1.2.0"), ("~1.2 || ~2.0", "2.0.0"), ("!=2.1, >=2", "2.0.0"), ("1.x-0", "1.10.0"),
    ("~1.3.0-0", "1.3.0-rc1"), ("^0.1", None), ("=1.0.0", "1.0.0"), ("*", "2.1"),
])
def test_semver_picks_the_highest_allowed(constraint: str, expected: str | None) -> None:
    parsed = versions.parse_constraint(constraint) if constraint else None
    assert versions.newest_semver(TAGS, parsed) == expected


def test_alphabetical_and_newest_build() -> None:
    assert versions.alphabetical(["2024-01-02", "2024-11-01", "2024-02-30"]) == "2024-11-01"
    created = {"a1": "2024-01-01T10:00:00Z", "b2": "2024-01-01T12:00:00+02:00", "c3": "2024-01-01T10:30:00.5Z"}
    assert versions.newest_build(created) == "c3"  # b2 is 10:00 UTC
    assert versions.newest_build({"x": "2024-01-01T00:00:00Z", "y": "2024-01-01T00:00:00Z"}) == "y"


def test_image_references_are_normalised_like_docker() -> None:
    assert parse_image("nginx") == Repository("docker.io", "library/nginx")
    assert parse_image("index.docker.io/bitnami/nginx:1") == Repository("docker.io", "bitnami/nginx")
    assert parse_image("localhost:5000/team/app:1.0") == Repository("localhost:5000", "team/app")
    assert image_reference("reg.io/a/b:1.2@sha256:ab") == (Repository("reg.io", "a/b"), "1.2", "sha256:ab")
    assert image_reference("reg.io:443/a") == (Repository("reg.io:443", "a"), "", "")


def test_docker_config_json_credentials() -> None:
    import base64

    config = {"auths": {"https://index.docker.io/v1/": {"auth": base64.b64encode(b"me:pw").decode()},
                        "reg.io:5000": {"username": "u", "password": "p"}}}
    secret = {"metadata": {"name": "regcred"}, "type": "kubernetes.io/dockerconfigjson",
              "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()}}
    auths = docker_config_auths(secret)
    assert auths == {"docker.io": Credentials("me", "pw"), "reg.io:5000": Credentials("u", "p")}
    assert "pw" not in repr(auths)


# --- render overrides ------------------------------------------------------------------------------------


def test_overrides_merge_by_name_and_files_replace() -> None:
    source = ApplicationSource("https://git.example/r", kustomize=KustomizeSpec(images=("nginx:1.0", "redis:6")),
                               helm=None)
    override = SourceOverride(kustomize_images=("nginx:1.2",))
    merged, replaced = (apply(source, "Kustomize", override, replace=flag).kustomize for flag in (False, True))
    assert merged is not None and merged.images == ("redis:6", "nginx:1.2")
    assert replaced is not None and replaced.images == ("nginx:1.2",)
    helm = ApplicationSource("https://git.example/r", helm=HelmSpec(parameters=(HelmParameter("image.tag", "1"),
                                                                                HelmParameter("replicas", "2"))))
    got = apply(helm, "Helm", SourceOverride(helm_parameters=(HelmParameter("image.tag", "2", True),)), replace=False)
    assert got.helm is not None and [p.name for p in got.helm.parameters] == ["replicas", "image.tag"]
    with pytest.raises(Exception, match="only kustomize and helm"):
        apply(source, "Directory", override, replace=False)
    assert render.manifest_key("a", "f" * 40, source, "ns") != render.manifest_key("a", "f" * 40, source, "ns",
                                                                                    override)


def test_image_values_as_kustomize_and_helm() -> None:
    value = ImageValue("web", "reg.io/team/web", "1.2.3", kustomize_name="web")
    assert value.kustomize_image() == "web=reg.io/team/web:1.2.3"
    pinned = ImageValue("web", "reg.io/team/web", "latest", "sha256:abc")
    assert pinned.kustomize_image() == "reg.io/team/web@sha256:abc" and pinned.version == "sha256:abc"
    assert [(p.name, p.value) for p in value.helm_parameters()] == [("image.name", "reg.io/team/web"),
                                                                    ("image.tag", "1.2.3")]
    spec = ImageValue("web", "reg.io/team/web", "1.2.3", helm_image_spec="web.image")
    assert [(p.name, p.value) for p in spec.helm_parameters()] == [("web.image", "reg.io/team/web:1.2.3")]


# --- write-back edits ------------------------------------------------------------------------------------

V = [ImageValue("web", "reg.io/team/web", "1.2.3")]


def test_source_file_kustomize_and_helm() -> None:
    text = writeback.edit_source_file("kustomize:\n  images: [other:1, reg.io/team/web:1.0]\n", V, "Kustomize", "f")
    assert yaml.safe_load(text) == {"kustomize": {"images": ["other:1", "reg.io/team/web:1.2.3"]}}
    text = writeback.edit_source_file(None, V, "Helm", "f")
    assert yaml.safe_load(text)["helm"]["parameters"] == [
        {"name": "image.name", "value": "reg.io/team/web", "forcestring": True},
        {"name": "image.tag", "value": "1.2.3", "forcestring": True}]


def test_kustomization_images_and_helm_values() -> None:
    text = writeback.edit_kustomization("resources: [d.yaml]\nimages:\n- name: reg.io/team/web\n  newTag: 1.0\n",
                                        V, "k")
    assert yaml.safe_load(text) == {"resources": ["d.yaml"], "images": [{"name": "reg.io/team/web",
                                                                         "newTag": "1.2.3"}]}
    values = [ImageValue("web", "reg.io/team/web", "1.2.3", helm_image_name="web.image.repository",
                         helm_image_tag="web.image.tag")]
    text = writeback.edit_helm_values("replicas: 2\nweb:\n  image:\n    tag: '1.0'\n", values, "v")
    assert yaml.safe_load(text) == {"replicas": 2, "web": {"image": {"tag": "1.2.3",
                                                                     "repository": "reg.io/team/web"}}}


def test_write_back_paths_stay_in_the_repository() -> None:
    assert writeback.repo_path("apps/web", "../base") == "apps/base"
    assert writeback.repo_path("apps/web", "/env/values.yaml") == "env/values.yaml"
    with pytest.raises(Exception, match="leaves the repository"):
        writeback.repo_path("apps/web", "../../../etc")


def test_branch_templates() -> None:
    changes = [update.Change("web", "reg.io/web", "1.0", "1.1")]
    assert update._branch_template("image-updater{{range .Images}}-{{.Alias}}-{{.NewTag}}{{end}}",
                                   changes) == "image-updater-web-1.1"
    assert len(update._branch_template("upd-{{.SHA256}}", changes)) == 4 + 64


# --- one tick ------------------------------------------------------------------------------------------


class FakeRegistry:
    """Tags, digests and build times per repository; every call counted; some registries down."""

    def __init__(self, tags: dict[str, list[str]], *, created: dict[str, dict[str, str]] | None = None,
                 digests: dict[str, dict[str, str]] | None = None) -> None:
        self.repos = {parse_image(k): v for k, v in tags.items()}
        self.created_at = {parse_image(k): v for k, v in (created or {}).items()}
        self.digests = {parse_image(k): v for k, v in (digests or {}).items()}
        self.calls: list[tuple[str, str]] = []
        self.down: set[str] = set()
        self.creds_seen: list[Credentials | None] = []
        self._lock = threading.Lock()

    def _call(self, kind: str, repo: Repository, creds: Credentials | None) -> None:
        with self._lock:
            self.calls.append((kind, str(repo)))
            self.creds_seen.append(creds)
        if repo.registry in self.down:
            raise RegistryUnavailable(f"registry {repo.registry} is unavailable: ConnectionError")

    def tags(self, repo: Repository, creds: Credentials | None) -> list[str]:
        self._call("tags", repo, creds)
        return list(self.repos[repo])

    def digest(self, repo: Repository, reference: str, creds: Credentials | None,
               platforms: tuple[str, ...] = ()) -> str:
        self._call("digest", repo, creds)
        return self.digests[repo][reference]

    def created(self, repo: Repository, reference: str, creds: Credentials | None,
                platforms: tuple[str, ...] = ()) -> str:
        self._call("created", repo, creds)
        return self.created_at[repo][reference]

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.calls if k == kind)


class Sent:
    def __init__(self) -> None:
        self.refreshes: list[Refresh] = []

    def dispatch(self, refreshes: Sequence[Refresh]) -> dict[str, str]:
        self.refreshes.extend(refreshes)
        return {}

    def schedule(self, app: str, delay: float, reason: str) -> None:
        raise AssertionError("the image updater schedules no continuation")


def app_doc(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"project": "default", "source": {"repoURL": "https://git.example/apps", "path": name,
                                                      "targetRevision": "main", "kustomize": {}},
                     "destination": {"server": "https://kubernetes.default.svc", "namespace": name}}}


def make_runtime(tmp_path: Path, apps: list[dict[str, Any]], extra: Sequence[dict[str, Any]] = ()) -> Runtime:
    folder = tmp_path / "config"
    folder.mkdir(exist_ok=True)
    for doc in [*apps, *extra]:
        (folder / f"{doc['kind']}-{doc['metadata']['name']}.yaml").write_text(yaml.safe_dump(doc))
    return Runtime(settings=Settings(config=str(folder)), store=MemoryStore())


def rendered(runtime: Runtime, name: str, *images: str) -> None:
    """What a reconcile leaves behind: the app's revision and the rendered manifests running `images`."""
    app = runtime.app(name)
    sha = "a" * 40
    state = app_state.AppState(app=name, revision=sha)
    app_state.save(runtime.store, state)
    override = images_state.render_override(runtime.store, name)
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                  "spec": {"template": {"spec": {"containers": [{"name": f"c{i}", "image": image}
                                                                for i, image in enumerate(images)]}}}}
    key = render.manifest_key(name, sha, app.source, app.destination.namespace, override,
                              render.BuildEnv(app.project, sha))  # the key the step renders under
    runtime.store.write(key, json.dumps({"format": render.CACHE_FORMAT, "manifests": [deployment]}).encode())


def results(summary: update.TickSummary) -> dict[str, update.AppResult]:
    return {r.app: r for r in summary.apps}


def test_one_tags_list_per_repository_however_many_apps(tmp_path: Path) -> None:
    apps = [app_doc(f"app{i}", {notes.IMAGE_LIST: f"web=reg.io/team/svc{i % 5}:~1.0"}) for i in range(40)]
    runtime = make_runtime(tmp_path, apps)
    for i in range(40):
        rendered(runtime, f"app{i}", f"reg.io/team/svc{i % 5}:1.0.0")
    registry = FakeRegistry({f"reg.io/team/svc{i}": ["1.0.0", "1.0.1", "1.1.0"] for i in range(5)})
    sent = Sent()

    summary = update.check(runtime, registry=registry, dispatcher=sent)

    assert registry.count("tags") == 5 and summary.tags_list_calls == 5 and summary.repositories == 5
    assert {r.status for r in summary.apps} == {"updated"}
    assert {r.app for r in sent.refreshes} == {f"app{i}" for i in range(40)}
    state = images_state.load(runtime.store, "app3")
    assert [v.reference for v in state.override] == ["reg.io/team/svc3:1.0.1"]  # ~1.0 excludes 1.1.0


def test_a_registry_notification_checks_only_the_images_of_the_pushed_repository(tmp_path: Path) -> None:
    """`repositories` (a push notification): the apps naming it, and in them only its images; one tags call."""
    apps = [app_doc("both", {notes.IMAGE_LIST: "web=reg.io/web:~1.0, api=reg.io/api:~1.0"}),
            app_doc("web-only", {notes.IMAGE_LIST: "web=reg.io/web:~1.0"}),
            app_doc("api-only", {notes.IMAGE_LIST: "api=reg.io/api:~1.0"})]
    runtime = make_runtime(tmp_path, apps)
    rendered(runtime, "both", "reg.io/web:1.0.0", "reg.io/api:1.0.0")
    rendered(runtime, "web-only", "reg.io/web:1.0.0")
    rendered(runtime, "api-only", "reg.io/api:1.0.0")
    registry = FakeRegistry({"reg.io/web": ["1.0.0", "1.0.1"], "reg.io/api": ["1.0.0", "1.0.2"]})
    sent = Sent()

    summary = update.check(runtime, registry=registry, dispatcher=sent,
                           repositories=frozenset({parse_image("reg.io/web")}))

    assert registry.calls == [("tags", "reg.io/web")] and summary.tags_list_calls == 1
    assert {r.app: [c.new for c in r.changes] for r in summary.apps} == {"both": ["1.0.1"], "web-only": ["1.0.1"]}
    assert sorted(r.app for r in sent.refreshes) == ["both", "web-only"]
    assert images_state.summary(runtime.store, "both")["override"] == ["reg.io/web:1.0.1"]  # api left as it is
    assert images_state.load(runtime.store, "api-only").override == []


def test_argocd_write_back_then_nothing_more_to_do(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, [app_doc("web", {notes.IMAGE_LIST: "web=reg.io/web:1.x",
                                                      P + "web.ignore-tags": "1.9.*",
                                                      P + "web.allow-tags": "regexp:^1\\.[0-9]+\\.[0-9]+$"})])
    rendered(runtime, "web", "reg.io/web:1.0.0")
    registry = FakeRegistry({"reg.io/web": ["1.0.0", "1.1.0", "1.9.0", "2.0.0", "1.2.0-rc1", "1.3.0.1"]})

    first = results(update.check(runtime, registry=registry, dispatcher=Sent()))["web"]
    assert first.status == "updated" and first.changes == [update.Change("web", "reg.io/web", "1.0.0", "1.1.0")]
    override = images_state.render_override(runtime.store, "web")
    assert override is not None and override.kustomize_images == ("reg.io/web:1.1.0",)

    rendered(runtime, "web", "reg.io/web:1.1.0")  # the refresh rendered it
    sent = Sent()
    second = results(update.check(runtime, registry=registry, dispatcher=sent))["web"]
    assert second.status == "unchanged" and sent.refreshes == []
    assert images_state.summary(runtime.store, "web")["override"] == ["reg.io/web:1.1.0"]


def test_strategies_newest_build_digest_alphabetical(tmp_path: Path) -> None:
    apps = [
        app_doc("build", {notes.IMAGE_LIST: "b=reg.io/build", P + "b.update-strategy": "newest-build",
                          P + "b.ignore-tags": "latest"}),
        app_doc("dig", {notes.IMAGE_LIST: "d=reg.io/dig:stable", P + "d.update-strategy": "digest"}),
        app_doc("cal", {notes.IMAGE_LIST: "c=reg.io/cal", P + "c.update-strategy": "name"}),
    ]
    runtime = make_runtime(tmp_path, apps)
    rendered(runtime, "build", "reg.io/build:aaa111")
    rendered(runtime, "dig", "reg.io/dig:stable")
    rendered(runtime, "cal", "reg.io/cal:2024-01-01")
    registry = FakeRegistry(
        {"reg.io/build": ["aaa111", "fff999", "ccc333", "latest"], "reg.io/dig": ["stable"],
         "reg.io/cal": ["2024-01-01", "2024-03-01", "2023-12-31"]},
        created={"reg.io/build": {"aaa111": "2024-01-01T00:00:00Z", "fff999": "2024-01-02T00:00:00Z",
                                  "ccc333": "2024-01-03T00:00:00Z", "latest": "2024-02-01T00:00:00Z"}},
        digests={"reg.io/dig": {"stable": "sha256:" + "b" * 64}})

    got = results(update.check(runtime, registry=registry, dispatcher=Sent()))

    assert got["build"].changes[0].new == "ccc333"  # newest build, `latest` ignored
    assert got["dig"].changes[0].new == "sha256:" + "b" * 64
    assert got["cal"].changes[0].new == "2024-03-01"
    assert registry.count("tags") == 2  # digest needs no tags list
    override = images_state.render_override(runtime.store, "dig")
    assert override is not None and override.kustomize_images == ("reg.io/dig@sha256:" + "b" * 64,)


def test_registry_down_changes_nothing_and_says_so(tmp_path: Path) -> None:
    apps = [app_doc("a", {notes.IMAGE_LIST: "x=down.io/x"}), app_doc("b", {notes.IMAGE_LIST: "y=up.io/y"})]
    runtime = make_runtime(tmp_path, apps)
    rendered(runtime, "a", "down.io/x:1.0.0")
    rendered(runtime, "b", "up.io/y:1.0.0")
    registry = FakeRegistry({"down.io/x": ["1.0.0", "2.0.0"], "up.io/y": ["1.0.0", "1.0.1"]})
    registry.down.add("down.io")

    got = results(update.check(runtime, registry=registry, dispatcher=Sent()))

    assert got["a"].status == "unavailable" and "down.io is unavailable" in got["a"].message
    assert "left as they are" in got["a"].message
    assert images_state.render_override(runtime.store, "a") is None
    assert got["b"].status == "updated"  # one registry down never stops the others
    assert images_state.summary(runtime.store, "a")["check"]["status"] == "unavailable"


def test_invalid_annotations_are_reported_and_nothing_is_asked(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, [app_doc("bad", {notes.IMAGE_LIST: "x=reg.io/x",
                                                      P + "x.update-strategy": "fastest"})])
    registry = FakeRegistry({})
    got = results(update.check(runtime, registry=registry, dispatcher=Sent()))["bad"]
    assert got.status == "invalid" and P + "x.update-strategy" in got.message and registry.calls == []
    assert images_state.summary(runtime.store, "bad")["check"]["problems"] == got.problems


def test_a_pinned_app_is_skipped_until_unpinned(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, [app_doc("web", {notes.IMAGE_LIST: "web=reg.io/web"})])
    rendered(runtime, "web", "reg.io/web:1.0.0")
    registry = FakeRegistry({"reg.io/web": ["1.0.0", "1.1.0"]})
    update.check(runtime, registry=registry, dispatcher=Sent())  # override → 1.1.0
    first_time = images_state.load(runtime.store, "web").log[-1]["at"]

    images_state.pin(runtime.store, "web", by="rollback", revision="a" * 40, deployed_at="2000-01-01T00:00:00Z")
    registry.repos[parse_image("reg.io/web")].append("1.2.0")
    got = results(update.check(runtime, registry=registry, dispatcher=Sent()))["web"]
    assert got.status == "pinned" and got.message.startswith("pinned since ") and got.message.endswith("by rollback")
    assert images_state.render_override(runtime.store, "web") is None  # back to before the first update
    assert first_time > "2000-01-01T00:00:00Z"

    assert images_state.unpin(runtime.store, "web") is True
    rendered(runtime, "web", "reg.io/web:1.0.0")
    got = results(update.check(runtime, registry=registry, dispatcher=Sent()))["web"]
    assert got.status == "updated" and got.changes[0].new == "1.2.0"


def test_pull_secret_credentials_reach_the_registry(tmp_path: Path) -> None:
    import base64

    config = {"auths": {"reg.io": {"username": "robot", "password": "s3cret"}}}
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
              "metadata": {"name": "regcred", "namespace": "argocd"},
              "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()}}
    apps = [app_doc("a", {notes.IMAGE_LIST: "x=reg.io/x", P + "x.pull-secret": "pullsecret:argocd/regcred"}),
            app_doc("b", {notes.IMAGE_LIST: "x=reg.io/x", P + "x.pull-secret": "pullsecret:argocd/missing"}),
            app_doc("c", {notes.IMAGE_LIST: "x=reg.io/y"})]  # no annotation: the Secret knows reg.io
    runtime = make_runtime(tmp_path, apps, [secret])
    for name, image in (("a", "reg.io/x:1.0.0"), ("b", "reg.io/x:1.0.0"), ("c", "reg.io/y:1.0.0")):
        rendered(runtime, name, image)
    registry = FakeRegistry({"reg.io/x": ["1.0.0", "1.0.1"], "reg.io/y": ["1.0.0"]})

    got = results(update.check(runtime, registry=registry, dispatcher=Sent()))

    assert got["a"].status == "updated" and got["c"].status == "unchanged"
    assert got["b"].status == "invalid" and "no Secret argocd/missing" in got["b"].message
    assert registry.creds_seen and all(c == Credentials("robot", "s3cret") for c in registry.creds_seen)


def test_an_image_the_app_does_not_run_is_left_alone_unless_forced(tmp_path: Path) -> None:
    apps = [app_doc("a", {notes.IMAGE_LIST: "x=reg.io/x"}),
            app_doc("b", {notes.IMAGE_LIST: "x=reg.io/x", P + "x.force-update": "true"})]
    runtime = make_runtime(tmp_path, apps)
    rendered(runtime, "a", "reg.io/other:1")
    rendered(runtime, "b", "reg.io/other:1")
    got = results(update.check(runtime, registry=FakeRegistry({"reg.io/x": ["1.0.0"]}), dispatcher=Sent()))
    assert got["a"].status == "unchanged" and "not used by the app" in got["a"].message
    assert got["b"].status == "updated"


# --- the HTTP client against a small real server ----------------------------------------------------------


class _Registry(BaseHTTPRequestHandler):
    pages = {"": (["a", "b"], "</v2/team/app/tags/list?last=b&n=2>; rel=\"next\""), "b": (["c"], "")}
    limited = [0]

    def do_GET(self) -> None:  # noqa: N802
        if self.path.startswith("/token"):
            self._send(200, {"token": "tok-1"})
            return
        if self.headers.get("Authorization") != "Bearer tok-1":
            self.send_response(401)
            host = self.headers["Host"]
            self.send_header("WWW-Authenticate", f'Bearer realm="http://{host}/token",service="reg",'
                                                 'scope="repository:team/app:pull"')
            self.end_headers()
            return
        if self.limited[0] > 0:
            self.limited[0] -= 1
            self.send_response(429)
            self.send_header("Retry-After", "1")
            self.end_headers()
            return
        last = self.path.partition("last=")[2].partition("&")[0]
        tags, link = self.pages[last]
        self._send(200, {"name": "team/app", "tags": tags}, link)

    def _send(self, status: int, body: dict[str, Any], link: str = "") -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if link:
            self.send_header("Link", link)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture
def small_registry() -> Any:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_http_client_bearer_pagination_and_retry_after(small_registry: str) -> None:
    slept: list[float] = []
    client = HttpRegistry(sleep=slept.append)
    _Registry.limited[0] = 1
    repo = Repository(small_registry, "team/app")
    assert client.tags(repo, None) == ["a", "b", "c"]
    assert slept == [1.0] and client.counters.tokens == 1 and client.counters.tags_list == 1

    _Registry.limited[0] = 5
    with pytest.raises(RegistryUnavailable, match="rate limiting"):
        HttpRegistry(sleep=slept.append).tags(repo, Credentials("u", "topsecret"))
    _Registry.limited[0] = 0


def test_http_client_registry_down_is_unavailable() -> None:
    with pytest.raises(RegistryUnavailable, match="127.0.0.1:9 is unavailable"):
        HttpRegistry(timeout=2).tags(Repository("127.0.0.1:9", "x"), Credentials("u", "topsecret"))


def test_a_tick_with_nothing_new_writes_nothing(tmp_path: Path) -> None:
    apps = [app_doc(f"a{i}", {notes.IMAGE_LIST: "x=reg.io/x:1.x"}) for i in range(5)]
    runtime = make_runtime(tmp_path, apps)
    for i in range(5):
        rendered(runtime, f"a{i}", "reg.io/x:1.0.0")
    registry = FakeRegistry({"reg.io/x": ["1.0.0"]})
    update.check(runtime, registry=registry, dispatcher=Sent())
    before = {k: runtime.store.read(k).generation for k in runtime.store.list("state/images/")}  # type: ignore[union-attr]

    update.check(runtime, registry=registry, dispatcher=Sent())

    assert len(before) == 5
    assert {k: runtime.store.read(k).generation for k in runtime.store.list("state/images/")} == before  # type: ignore[union-attr]


def test_token_realms_on_link_local_or_private_addresses_are_refused() -> None:
    from tidecd.clients.registry import _realm_allowed

    assert not _realm_allowed("169.254.169.254", "registry.example.com")  # the cloud metadata server
    assert not _realm_allowed("10.0.0.5", "registry.example.com")
    assert not _realm_allowed("127.0.0.1", "registry.example.com")
    assert _realm_allowed("127.0.0.1", "localhost") and _realm_allowed("10.0.0.5", "10.0.0.9")
    assert _realm_allowed("auth.example.com", "registry.example.com")
