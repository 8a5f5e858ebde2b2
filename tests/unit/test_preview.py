"""Pull-request previews on an in-memory cluster against the GitHub stand-in, with octokit's payloads."""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any

import pytest

from tests.support.fakecluster import FakeCluster, FakeGit, application, fake_runtime
from tests.support.github_standin import GitHubStandIn
from tidecd.base.model import ResourceKey
from tidecd.clients import github as gh
from tidecd.clients.cluster import ApiResource
from tidecd.clients.store import MemoryStore, read_json
from tidecd.config.load import AppProject, Config
from tidecd.runtime import Runtime
from tidecd.step import reconcile
from tidecd.usecases import commands, preview, preview_text
from tidecd.usecases.webhook import pr_apps

REPO = "octo/web"
CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web"}, "data": {"k": "v1"}}
SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
          "stringData": {"password": "hunter2-very-secret"}}
CLUSTERROLE = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": "everything"}, "rules": [{"apiGroups": ["*"], "resources": ["*"],
                                                              "verbs": ["*"]}]}


class Inline:
    """Runs the jobs at once (the fan-out itself is tested with ThreadRunner below)."""

    def submit(self, runtime: Runtime, jobs: Any) -> dict[str, str]:
        for job in jobs:
            preview.run_job(runtime, job)
        return {}


def _payload(examples: dict[str, list[dict[str, Any]]], standin: GitHubStandIn, action: str, number: int,
             head: str) -> dict[str, Any]:
    doc = copy.deepcopy(next(e for e in examples["pull_request"] if e["action"] == action))
    doc["number"] = doc["pull_request"]["number"] = number
    doc["pull_request"]["head"]["sha"] = head
    doc["pull_request"]["base"]["ref"] = "main"
    doc["repository"].update(clone_url=f"{standin.base_url}/{REPO}.git", html_url=f"{standin.base_url}/{REPO}",
                             full_name=REPO, default_branch="main")
    return doc


def _setup(standin: GitHubStandIn, names: list[str], project: AppProject | None = None
           ) -> tuple[Runtime, FakeGit, FakeCluster]:
    cluster, git, store = FakeCluster(), FakeGit(), MemoryStore()
    cluster.kinds[("rbac.authorization.k8s.io", "ClusterRole")] = ApiResource(
        "rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False)
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    apps = []
    for name in names:
        app = application(name)
        apps.append(dataclasses.replace(app, project=project.name if project else "default",
                                        source=dataclasses.replace(app.source, path=f"apps/{name}",
                                                                   repo_url=f"{standin.base_url}/{REPO}.git")))
    projects = {"default": AppProject("default", cluster_resource_whitelist=())}
    if project:
        projects[project.name] = project
    runtime = fake_runtime(cluster, store, apps[0], git,
                           config=Config(applications={a.name: a for a in apps}, projects=projects),
                           secrets=[{"kind": "Secret", "metadata": {"name": "gh", "labels": {
                               "argocd.argoproj.io/secret-type": "github"}}, "stringData": {"token": "gh-token"}}])
    runtime.settings.github_api_url, runtime.settings.public_url = standin.base_url, "https://cd.example"
    return runtime, git, cluster


def _pr(doc: dict[str, Any], runtime: Runtime, delivery: str = "",
        runner: preview.Runner | None = None) -> tuple[int, dict[str, Any]]:
    return preview.on_pull_request(doc, runtime, pr_apps, delivery, runner=runner)


def test_one_comment_per_pr_updated_on_push(github_standin: GitHubStandIn, webhook_examples: Any) -> None:
    runtime, git, cluster = _setup(github_standin, ["web"])
    git.push([CONFIGMAP])
    assert reconcile.reconcile(runtime, "web").state is not None
    commands.start_operation(runtime, "web", commands.SyncRequest())
    for _ in range(5):
        if reconcile.reconcile(runtime, "web").continue_after is None:
            break
    live = cluster.objects[next(k for k in cluster.objects if k.kind == "ConfigMap")]
    assert live["data"] == {"k": "v1"}
    main_head = git.head
    head1 = git.push([{**CONFIGMAP, "data": {"k": "v2"}}, SECRET])
    git.head = main_head  # the PR is not merged
    writes = cluster.writes
    status, body = _pr(_payload(webhook_examples, github_standin, "opened", 7, head1),
                                           runtime, "d-1", runner=Inline())
    assert status == 202 and body["preview"] == ["web"]
    assert cluster.writes == writes  # nothing written to the cluster
    [comment] = github_standin.comment_bodies(REPO, 7)
    assert "ConfigMap ns/web" in comment and "+  k: v2" in comment and "Secret ns/creds" in comment
    assert "hunter2" not in comment and "<details>" in comment
    assert github_standin.status_states(REPO, head1, "tidecd/preview/web") == ["success"]

    head2 = git.push([{**CONFIGMAP, "data": {"k": "v3"}}])
    git.head = main_head
    _pr(_payload(webhook_examples, github_standin, "synchronize", 7, head2), runtime, "d-2",
                            runner=Inline())
    [comment] = github_standin.comment_bodies(REPO, 7)  # the same comment, updated
    assert "+  k: v3" in comment and "Secret ns/creds" not in comment and head2[:12] in comment
    assert len(github_standin.calls_to("issues/create-comment")) == 1
    assert len(github_standin.calls_to("issues/update-comment")) == 1
    # a redelivery does nothing
    again = _pr(_payload(webhook_examples, github_standin, "synchronize", 7, head2), runtime, "d-2", runner=Inline())
    assert again[1].get("duplicate") is True
    closed = _pr(_payload(webhook_examples, github_standin, "closed", 7, head2), runtime, "d-3", runner=Inline())
    assert closed[0] == 200 and runtime.store.list("previews/") == []


def test_forbidden_clusterrole_fails_the_preview_status(github_standin: GitHubStandIn, webhook_examples: Any) -> None:
    runtime, git, _ = _setup(github_standin, ["web"])
    git.push([CONFIGMAP])
    head = git.push([CONFIGMAP, CLUSTERROLE])
    _pr(_payload(webhook_examples, github_standin, "opened", 8, head), runtime, "",
                            runner=Inline())
    assert github_standin.status_states(REPO, head, "tidecd/preview/web") == ["failure"]
    [comment] = github_standin.comment_bodies(REPO, 8)
    assert "project rule" in comment and "ClusterRole" in comment


def test_render_error_fails_the_preview(github_standin: GitHubStandIn, webhook_examples: Any,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    runtime, _, _ = _setup(github_standin, ["web"])
    from tidecd.base.errors import RenderError

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RenderError("apps/web/kustomization.yaml: resources[0]: file not found")

    runtime.render = broken
    head = "c" * 40
    _pr(_payload(webhook_examples, github_standin, "reopened", 9, head), runtime, "",
                            runner=Inline())
    assert github_standin.status_states(REPO, head, "tidecd/preview/web") == ["failure"]
    assert "file not found" in github_standin.comment_bodies(REPO, 9)[0]


def test_changed_files_narrow_the_apps(github_standin: GitHubStandIn, webhook_examples: Any) -> None:
    runtime, git, _ = _setup(github_standin, ["web", "api"])
    apps = runtime.config().applications
    for name in ("web", "api"):
        apps[name] = dataclasses.replace(apps[name], annotations=(
            ("argocd.argoproj.io/manifest-generate-paths", "."),))
    head = git.push([CONFIGMAP])
    github_standin.pull_files[(REPO, 10)] = ["apps/api/deploy.yaml", "README.md"]
    status, body = _pr(_payload(webhook_examples, github_standin, "opened", 10, head), runtime, "", runner=Inline())
    assert status == 202 and body["preview"] == ["api"]


def test_fifty_apps_fan_out_and_the_comment_stays_under_the_limit(
        github_standin: GitHubStandIn, webhook_examples: Any) -> None:
    names = [f"app{i:02d}" for i in range(50)]
    runtime, git, _ = _setup(github_standin, names)
    big = {**CONFIGMAP, "data": {f"key{i}": "x" * 200 for i in range(40)}}  # ~9 kB of diff per app
    head = git.push([big])
    runner = preview.ThreadRunner(workers=4, runtime_factory=lambda rt: rt)
    started = time.monotonic()
    status, body = _pr(_payload(webhook_examples, github_standin, "opened", 11, head), runtime, "", runner=runner)
    answered = time.monotonic() - started
    assert status == 202 and len(body["preview"]) == 50
    assert answered < 2.0  # the webhook hands the work over; GitHub gives a delivery 10 s
    assert runner.wait(120)
    [comment] = github_standin.comment_bodies(REPO, 11)
    assert len(comment) <= gh.COMMENT_LIMIT
    assert "left out" in comment and "pending" not in comment
    assert all(f"`{n}`" in comment for n in names)  # every app is in the summary table
    assert len(github_standin.calls_to("issues/create-comment")) == 1
    assert sum(1 for s in github_standin.statuses[(REPO, head)] if s["context"].startswith("tidecd/preview/")) == 50


def test_render_comment_is_pure_and_bounded() -> None:
    res = preview_text.AppPreview("a", "f" * 40, errors=("boom",))
    text = preview_text.render_comment(gh.Repo("o", "r"), 1, "f" * 40, {"a": res, "b": None}, limit=100_000)
    assert text.startswith(preview_text.comment_marker(gh.Repo("o", "r"), 1))
    assert "| `b` | ⏳ pending" in text and "❌ boom" in text


# --- forks -----------------------------------------------------------------------------------------------

FORK = "mallory/web"
LIVE_ONLY = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared", "namespace": "ns"},
             "data": {"token": "live-only-value"}}  # in the cluster, no app owns it


def _fork_payload(examples: dict[str, list[dict[str, Any]]], standin: GitHubStandIn, action: str, number: int,
                  head: str, *, labels: tuple[str, ...] = (), label: str = "") -> dict[str, Any]:
    doc = _payload(examples, standin, "labeled" if action == "labeled" else "opened", number, head)
    doc["action"] = action
    doc["pull_request"]["head"]["repo"] = doc["pull_request"]["head"]["repo"] | {"full_name": FORK}
    doc["pull_request"]["base"]["repo"] = doc["pull_request"]["base"]["repo"] | {"full_name": REPO}
    template = doc["pull_request"]["labels"][0] if doc["pull_request"]["labels"] else {}
    doc["pull_request"]["labels"] = [template | {"name": n} for n in labels]
    if label:
        doc["label"] = template | {"name": label}
    return doc


def _comment_payload(examples: dict[str, list[dict[str, Any]]], standin: GitHubStandIn, number: int, body: str,
                     association: str) -> dict[str, Any]:
    doc = copy.deepcopy(next(e for e in examples["issue_comment"] if e["action"] == "created"))
    doc["issue"]["number"] = number
    doc["issue"]["pull_request"] = {"url": f"{standin.base_url}/repos/{REPO}/pulls/{number}",
                                    "html_url": f"https://github.com/{REPO}/pull/{number}",
                                    "diff_url": f"https://github.com/{REPO}/pull/{number}.diff",
                                    "patch_url": f"https://github.com/{REPO}/pull/{number}.patch", "merged_at": None}
    doc["comment"].update(body=body, author_association=association)
    doc["repository"].update(clone_url=f"{standin.base_url}/{REPO}.git", html_url=f"{standin.base_url}/{REPO}",
                             full_name=REPO, default_branch="main")
    return doc


class Watched:
    """The fakes' reads: what the cluster was asked, and what each render could reach."""

    def __init__(self, cluster: FakeCluster, git: FakeGit, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads: list[str] = []
        self.renders: list[tuple[str, int, bool, bool]] = []  # (revision, secrets, credentials, keys)
        for verb in ("get", "list", "is_namespaced"):
            original = getattr(cluster, verb)

            def watched(*args: Any, _verb: str = verb, _original: Any = original, **kwargs: Any) -> Any:
                self.reads.append(_verb)
                return _original(*args, **kwargs)

            monkeypatch.setattr(cluster, verb, watched)
        render = git.render

        def recorded(runtime: Runtime, app: Any, revision: str = "", warnings: Any = None) -> Any:
            self.renders.append((revision, len(runtime.secrets()),
                                 runtime.repo_credentials(app.source.repo_url) is not None,
                                 bool(runtime.private_keys())))
            return render(runtime, app, revision, warnings)

        monkeypatch.setattr(git, "render", recorded)


def _synced_with_a_free_object(standin: GitHubStandIn, monkeypatch: pytest.MonkeyPatch
                               ) -> tuple[Runtime, FakeGit, FakeCluster, Watched]:
    runtime, git, cluster = _setup(standin, ["web"])
    runtime.secrets().append({"kind": "Secret", "metadata": {"name": "repo", "labels": {
        "argocd.argoproj.io/secret-type": "repository"}}, "stringData": {
        "url": f"{standin.base_url}/{REPO}.git", "username": "bot", "password": "repo-password-1"}})
    git.push([CONFIGMAP])
    commands.start_operation(runtime, "web", commands.SyncRequest())
    for _ in range(5):
        if reconcile.reconcile(runtime, "web").continue_after is None:
            break
    cluster.add(copy.deepcopy(LIVE_ONLY))
    watched = Watched(cluster, git, monkeypatch)
    runtime.render = git.render
    return runtime, git, cluster, watched


def test_a_fork_gets_nothing_but_a_note_until_a_maintainer_labels_it(
        github_standin: GitHubStandIn, webhook_examples: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime, git, cluster, watched = _synced_with_a_free_object(github_standin, monkeypatch)
    base = git.head
    head = git.push([{**CONFIGMAP, "data": {"k": "v2"}}, {**LIVE_ONLY, "data": {"token": "from-the-fork"}}])
    git.head = base
    status, body = _pr(_fork_payload(webhook_examples, github_standin, "opened", 20, head), runtime, "f-1",
                       runner=Inline())
    assert (status, body["mode"]) == (200, "waiting") and body["waiting"] == ["web"]
    assert "tidecd:preview" in body["reason"]
    [note] = github_standin.comment_bodies(REPO, 20)
    assert "waiting for a maintainer" in note and f"`{FORK}`" in note and "`/tidecd preview`" in note
    assert "live-only-value" not in note and "from-the-fork" not in note
    assert watched.renders == [] and watched.reads == []  # nothing rendered, the cluster not asked
    assert github_standin.calls_to("repos/create-commit-status") == []
    # a fork's next push writes nothing to GitHub: the note is there
    head2 = git.push([{**CONFIGMAP, "data": {"k": "v3"}}, {**LIVE_ONLY, "data": {"token": "from-the-fork"}}])
    git.head = base
    def writes() -> int:
        return sum(len(github_standin.calls_to(op)) for op in ("issues/create-comment", "issues/update-comment"))

    before = writes()
    status, _ = _pr(_fork_payload(webhook_examples, github_standin, "synchronize", 20, head2), runtime, "f-2",
                    runner=Inline())
    assert status == 200 and writes() == before
    assert github_standin.statuses == {}

    # a maintainer adds the label: rendered without credentials, diffed against the base's render
    status, body = _pr(_fork_payload(webhook_examples, github_standin, "labeled", 20, head2,
                                     labels=("tidecd:preview",), label="tidecd:preview"), runtime, "f-3",
                       runner=Inline())
    assert (status, body["mode"], body["preview"]) == (202, "fork", ["web"])
    assert watched.reads == []  # not even discovery
    assert watched.renders == [(head2, 0, False, False), (base, 0, False, False)]
    [comment] = github_standin.comment_bodies(REPO, 20)
    assert "(fork: rendered only)" in comment and f"`{base[:12]}`" in comment
    assert "+  k: v3" in comment and "-  k: v1" in comment and "--- base/" in comment
    assert "from-the-fork" in comment and "live-only-value" not in comment  # the fork's own file, never live data
    assert "The cluster was not read" in comment
    assert "repo-password-1" not in comment
    assert github_standin.status_states(REPO, head2, "tidecd/preview/web") == ["success"]
    assert github_standin.status_states(REPO, head, "tidecd/preview/web") == []
    assert cluster.objects[ResourceKey("", "ConfigMap", "ns", "shared")]["data"] == {"token": "live-only-value"}


def test_a_maintainers_comment_previews_a_fork_and_anyone_elses_is_refused(
        github_standin: GitHubStandIn, webhook_examples: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime, git, _, watched = _synced_with_a_free_object(github_standin, monkeypatch)
    base = git.head
    head = git.push([{**CONFIGMAP, "data": {"k": "v2"}}])
    git.head = base
    github_standin.pull_heads[(REPO, 21)] = {"head_sha": head, "head_repo": FORK, "base_ref": "main"}
    _pr(_fork_payload(webhook_examples, github_standin, "opened", 21, head), runtime, "c-0", runner=Inline())

    refused = preview.on_issue_comment(_comment_payload(webhook_examples, github_standin, 21, "/tidecd preview",
                                                        "CONTRIBUTOR"), runtime, pr_apps, "c-1", runner=Inline())
    assert refused[0] == 200 and "refused" in refused[1]["ignored"] and "CONTRIBUTOR" in refused[1]["ignored"]
    assert github_standin.calls_to("pulls/get") == [] and watched.renders == []
    stale = preview.on_issue_comment(_comment_payload(webhook_examples, github_standin, 21,
                                                      "/tidecd preview 0123456", "MEMBER"),
                                     runtime, pr_apps, "c-2", runner=Inline())
    assert stale[0] == 200 and "the head is now" in stale[1]["ignored"] and watched.renders == []

    status, body = preview.on_issue_comment(_comment_payload(webhook_examples, github_standin, 21,
                                                             "looks fine\n/tidecd preview\n", "MEMBER"),
                                            runtime, pr_apps, "c-3", runner=Inline())
    assert (status, body["mode"], body["preview"]) == (202, "fork", ["web"])
    assert watched.reads == [] and all(not any(r[1:]) for r in watched.renders)
    assert github_standin.status_states(REPO, head, "tidecd/preview/web") == ["success"]
    [comment] = github_standin.comment_bodies(REPO, 21)
    assert "(fork: rendered only)" in comment and "+  k: v2" in comment
    again = preview.on_issue_comment(_comment_payload(webhook_examples, github_standin, 21, "/tidecd preview",
                                                      "MEMBER"), runtime, pr_apps, "c-3", runner=Inline())
    assert again[1].get("duplicate") is True


def test_a_deleted_forks_pull_request_waits_too(github_standin: GitHubStandIn, webhook_examples: Any) -> None:
    runtime, git, _ = _setup(github_standin, ["web"])
    head = git.push([CONFIGMAP])
    doc = _fork_payload(webhook_examples, github_standin, "opened", 22, head)
    doc["pull_request"]["head"]["repo"] = None
    status, body = _pr(doc, runtime, "", runner=Inline())
    assert (status, body["mode"]) == (200, "waiting")
    assert "a fork that no longer exists" in github_standin.comment_bodies(REPO, 22)[0]


def test_a_preview_never_shows_an_object_no_app_owns(
        github_standin: GitHubStandIn, webhook_examples: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime, git, cluster, _ = _synced_with_a_free_object(github_standin, monkeypatch)
    base = git.head
    head = git.push([CONFIGMAP, {**LIVE_ONLY, "data": {"token": "from-the-branch"}}])
    git.head = base
    dry_runs = [c for c in cluster.calls if c[0] == "dry-run"]
    status, body = _pr(_payload(webhook_examples, github_standin, "opened", 23, head), runtime, "", runner=Inline())
    assert (status, body["mode"]) == (202, "full")
    [comment] = github_standin.comment_bodies(REPO, 23)
    assert "live-only-value" not in comment and "from-the-branch" not in comment
    assert "take over" in comment and "ConfigMap ns/shared" in comment and "1 to take over" in comment
    free = ResourceKey("", "ConfigMap", "ns", "shared")
    assert ("dry-run", free) not in cluster.calls[len(dry_runs):]  # not even dry-run
    found = read_json(runtime.store, f"previews/{REPO}/23/apps/web.json")
    assert found is not None and preview_text.AppPreview.from_json(found[0]).taken == (free,)


def test_sealed_secrets_stay_sealed_in_a_forks_preview(
        github_standin: GitHubStandIn, webhook_examples: Any) -> None:
    runtime, git, _ = _setup(github_standin, ["web"])
    sealed = {"apiVersion": "bitnami.com/v1alpha1", "kind": "SealedSecret", "metadata": {"name": "db"},
              "spec": {"encryptedData": {"password": "AgBy3i4OJSWK+PiTySYZZA=="}}}
    head = git.push([CONFIGMAP, sealed])
    runtime.settings.sealing_keys = "/nonexistent/sealing-keys"  # reading the keys would fail the render
    result = preview.preview_fork(runtime, runtime.app("web"), head)
    assert not result.errors, result.errors
    assert [str(d.key) for d in result.created] == ["ConfigMap ns/web", "bitnami.com/SealedSecret ns/db"]
    assert "AgBy3i4OJSWK" in result.created[1].text  # as written in git: nothing was opened
    assert result.base == "" and result.mode == "fork"


def test_a_fork_cannot_fetch_over_ssh(github_standin: GitHubStandIn) -> None:
    runtime, git, _ = _setup(github_standin, ["web"])
    app = runtime.app("web")
    ssh = dataclasses.replace(app, source=dataclasses.replace(app.source, repo_url="git@github.com:octo/web.git"))
    result = preview.preview_fork(runtime, ssh, git.push([CONFIGMAP]))
    assert result.failed and "over http(s) only" in result.errors[0] and git.renders == 0


def test_render_errors_are_inert_in_the_comment() -> None:
    res = preview_text.AppPreview("a", "f" * 40, errors=("values.yaml: @octo/admins <img src=x> ping\nline two",))
    text = preview_text.render_comment(gh.Repo("o", "r"), 1, "f" * 40, {"a": res}, limit=100_000)
    assert "@octo" not in text and "<img" not in text and "&lt;img" in text
