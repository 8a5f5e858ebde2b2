"""Pull-request previews on an in-memory cluster against the GitHub stand-in, with octokit's payloads."""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any

import pytest

from tests.support.fakecluster import FakeCluster, FakeGit, application, fake_runtime
from tests.support.github_standin import GitHubStandIn
from tidecd.clients import github as gh
from tidecd.clients.cluster import ApiResource
from tidecd.clients.store import MemoryStore
from tidecd.config.load import AppProject, Config
from tidecd.runtime import Runtime
from tidecd.step import reconcile
from tidecd.usecases import commands, preview
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
    res = preview.AppPreview("a", "f" * 40, errors=("boom",))
    text = preview.render_comment(gh.Repo("o", "r"), 1, "f" * 40, {"a": res, "b": None}, limit=100_000)
    assert text.startswith(preview.comment_marker(gh.Repo("o", "r"), 1))
    assert "| `b` | ⏳ pending" in text and "❌ boom" in text
