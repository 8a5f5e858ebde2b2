"""Apply exactly the plan (issue 28), on the in-memory cluster against the GitHub stand-in: a preview records
the plan, a merge approves it, a sync applies it only while the live objects it was computed against stand."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from tests.support.fakecluster import FakeCluster, FakeGit, application, fake_runtime
from tests.support.github_standin import GitHubStandIn
from tidecd.base.model import ResourceKey
from tidecd.clients import github as gh
from tidecd.clients.store import MemoryStore
from tidecd.config.load import AppProject, Config
from tidecd.runtime import Runtime
from tidecd.state import plans
from tidecd.state.app import OperationPhase
from tidecd.step import plangate
from tidecd.triggers.dispatch import reconcile_step
from tidecd.usecases import commands, plan_text, preview, preview_text
from tidecd.usecases import plan as planning
from tidecd.usecases.webhook import pr_apps

REPO = "octo/plans"
KEY = ResourceKey("", "ConfigMap", "ns", "web")
REQUIRE = (plans.ANNOTATION_REQUIRE_PLAN, "true")


def configmap(value: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web"}, "data": {"k": value}}


class Inline:
    def submit(self, runtime: Runtime, jobs: Any) -> dict[str, str]:
        for job in jobs:
            preview.run_job(runtime, job)
        return {}


def _setup(standin: GitHubStandIn) -> tuple[Runtime, FakeGit, FakeCluster]:
    cluster, git, store = FakeCluster(), FakeGit(), MemoryStore()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    app = application("web")
    app = dataclasses.replace(app, source=dataclasses.replace(app.source, repo_url=f"{standin.base_url}/{REPO}.git"))
    runtime = fake_runtime(cluster, store, app, git, config=Config(applications={"web": app}, projects={
        "default": AppProject("default", cluster_resource_whitelist=())}), secrets=[
        {"kind": "Secret", "metadata": {"name": "gh", "labels": {"argocd.argoproj.io/secret-type": "github"}},
         "stringData": {"token": "gh-token"}}])
    runtime.settings.github_api_url, runtime.settings.public_url = standin.base_url, "https://cd.example"
    return runtime, git, cluster


def _payload(examples: dict[str, list[dict[str, Any]]], standin: GitHubStandIn, action: str, number: int,
             head: str, *, merged: bool = False) -> dict[str, Any]:
    doc = copy.deepcopy(next(e for e in examples["pull_request"] if e["action"] == action))
    doc["number"] = doc["pull_request"]["number"] = number
    doc["pull_request"]["head"]["sha"] = head
    doc["pull_request"]["base"]["ref"] = "main"
    doc["pull_request"].update(merged=merged, merge_commit_sha=head if merged else None,
                               state="closed" if action == "closed" else "open")
    doc["repository"].update(clone_url=f"{standin.base_url}/{REPO}.git", html_url=f"{standin.base_url}/{REPO}",
                             full_name=REPO, default_branch="main")
    return doc


def _apply_comment(examples: dict[str, list[dict[str, Any]]], standin: GitHubStandIn, number: int,
                   association: str) -> dict[str, Any]:
    doc = copy.deepcopy(next(e for e in examples["issue_comment"] if e["action"] == "created"))
    doc["issue"].update(number=number, state="closed", pull_request={"url": "x"})
    doc["comment"].update(body="/tidecd apply", author_association=association)
    doc["repository"].update(clone_url=f"{standin.base_url}/{REPO}.git", html_url=f"{standin.base_url}/{REPO}",
                             full_name=REPO, default_branch="main")
    return doc


def _sync(runtime: Runtime) -> Any:
    commands.start_operation(runtime, "web", commands.SyncRequest())
    outcome = reconcile_step(runtime, "web")
    for _ in range(5):
        if outcome.continue_after is None:
            break
        outcome = reconcile_step(runtime, "web")
    return outcome.state


def _require_plan(runtime: Runtime) -> None:
    apps = runtime.config().applications
    apps["web"] = dataclasses.replace(apps["web"], annotations=(REQUIRE,))


def _merged_plan(runtime: Runtime, git: FakeGit, standin: GitHubStandIn, examples: Any, number: int,
                 value: str) -> str:
    """A pull request changing the ConfigMap to `value`: previewed, then merged (git's head moves to it)."""
    main = git.head
    head = git.push([configmap(value)])
    git.head = main
    status, body = preview.on_pull_request(_payload(examples, standin, "opened", number, head), runtime, pr_apps,
                                           runner=Inline())
    assert status == 202 and body["preview"] == ["web"], body
    status, body = preview.on_pull_request(_payload(examples, standin, "closed", number, head, merged=True),
                                           runtime, pr_apps, runner=Inline())
    assert body["approved"] == ["web"], body
    git.head = head
    return head


def test_a_moved_object_stops_the_sync_and_a_maintainer_approves_the_replan(
        github_standin: GitHubStandIn, webhook_examples: Any) -> None:
    runtime, git, cluster = _setup(github_standin)
    git.push([configmap("blue")])
    assert _sync(runtime).operation.phase is OperationPhase.SUCCEEDED
    _require_plan(runtime)
    head = _merged_plan(runtime, git, github_standin, webhook_examples, 7, "green")

    hand = copy.deepcopy(cluster.objects[KEY])
    hand["data"] = {"k": "by-hand"}
    cluster.add(hand)  # kubectl edit: a new resourceVersion
    writes = cluster.writes
    state = _sync(runtime)
    assert state.operation.phase is OperationPhase.FAILED
    assert "ConfigMap ns/web" in state.operation.message and "moved" in state.operation.message
    assert any(c["type"] == plangate.CONDITION and "ConfigMap ns/web" in c["message"] for c in state.conditions)
    assert cluster.writes == writes and cluster.objects[KEY]["data"] == {"k": "by-hand"}  # nothing applied
    assert github_standin.status_states(REPO, head, "tidecd/preview/web")[-1] == "failure"
    [replanned] = plans.replans_of(runtime.store, REPO, 7)
    assert dict(replanned.plan.versions)[KEY] == cluster.objects[KEY]["metadata"]["resourceVersion"]

    refused = preview.on_issue_comment(_apply_comment(webhook_examples, github_standin, 7, "NONE"), runtime, pr_apps)
    assert "refused" in refused[1]["ignored"]
    approved = preview.on_issue_comment(_apply_comment(webhook_examples, github_standin, 7, "MEMBER"), runtime,
                                        pr_apps)
    assert approved[1]["approved"] == ["web"]
    state = _sync(runtime)
    assert state.operation.phase is OperationPhase.SUCCEEDED, state.operation.message
    assert cluster.objects[KEY]["data"] == {"k": "green"}


def test_without_a_hand_change_the_sync_applies_the_plan_and_the_check_names_the_operation(
        github_standin: GitHubStandIn, webhook_examples: Any) -> None:
    runtime, git, cluster = _setup(github_standin)
    git.push([configmap("blue")])
    _sync(runtime)
    _require_plan(runtime)
    head = _merged_plan(runtime, git, github_standin, webhook_examples, 8, "green")
    state = _sync(runtime)
    assert state.operation.phase is OperationPhase.SUCCEEDED, state.operation.message
    assert cluster.objects[KEY]["data"] == {"k": "green"}
    last = github_standin.statuses[(REPO, head)][0]  # newest first, as GitHub lists them
    assert last["context"] == "tidecd/preview/web" and last["state"] == "success"
    assert f"operation {state.operation.id}" in last["description"]
    assert last["target_url"] == "https://cd.example/ui/apps/web"

    again = _sync(runtime)  # the plan applied before: every object as desired, nothing moved
    assert again.operation.phase is OperationPhase.SUCCEEDED, again.operation.message

    other = git.push([configmap("red")])  # merged without a plan: nothing approved renders these objects
    git.head = other
    state = _sync(runtime)
    assert state.operation.phase is OperationPhase.FAILED and "requires an approved plan" in state.operation.message
    assert cluster.objects[KEY]["data"] == {"k": "green"}


def test_an_app_without_the_annotation_syncs_as_before_and_a_project_can_require_plans(
        github_standin: GitHubStandIn) -> None:
    runtime, git, cluster = _setup(github_standin)
    git.push([configmap("blue")])
    assert _sync(runtime).operation.phase is OperationPhase.SUCCEEDED
    app = runtime.config().applications["web"]
    assert not plangate.requires_plan(app, AppProject("default"))
    assert plangate.requires_plan(app, AppProject("default", annotations=(REQUIRE,)))
    assert plangate.requires_plan(dataclasses.replace(app, annotations=(REQUIRE,)), AppProject("default"))


def test_the_digest_ignores_order_and_moved_names_every_kind_of_move() -> None:
    a, b = configmap("a"), {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "ns"}}
    assert plans.rendered_digest([a, b]) == plans.rendered_digest([b, a]) != plans.rendered_digest([a])
    other = ResourceKey("", "Service", "ns", "s")
    plan = plans.AppPlan("web", "d", ((KEY, "5"), (ResourceKey("", "Secret", "ns", "new"), "")))
    live = {KEY: {"metadata": {"resourceVersion": "5"}}, other: {"metadata": {"resourceVersion": "9"}}}
    assert plan.moved(live, [KEY]) == []
    assert plan.moved({KEY: {"metadata": {"resourceVersion": "6"}}}, []) == []  # as desired: nothing to write
    moved = plan.moved({KEY: {"metadata": {"resourceVersion": "6"}}}, [KEY, other])
    assert moved == ["ConfigMap ns/web (planned at resourceVersion 5, now 6)",
                     "Service ns/s (in sync when planned, changed since)"]
    again = plan.again(live, [other])
    assert dict(again.versions) == {KEY: "5", ResourceKey("", "Secret", "ns", "new"): "", other: "9"}
    assert plans.AppPlan.from_json(again.to_json()) == again
    assert plans.AppPlan.from_json({"digest": "x"}) is None


def test_the_plan_comment_lists_apps_and_says_when_cut() -> None:
    result = preview_text.AppPreview("new", "f" * 40, hooks=("PreSync Job/ns/migrate",),
                                     held="automated sync blocked by the active deny window")
    plan = plan_text.ConfigPlan("f" * 40, added=("new",), removed=(("old", ("ConfigMap ns/x",)),),
                                changed=(("web", "-  path: a\n+  path: b"),), results=(result,), cut=3,
                                errors=("Application bad: spec.project: <b>@admins</b>",))
    text = plan_text.render_plan(gh.Repo("o", "r"), 1, plan_text.ConfigPlan.from_json(plan.to_json()))
    assert text.startswith(plan_text.plan_marker(gh.Repo("o", "r"), 1))
    assert "new app `new`" in text and "changed app `web`" in text and "removed app `old`" in text
    assert "+  path: b" in text and "PreSync Job/ns/migrate" in text and "deny window" in text
    assert "3 added or changed app(s) not planned" in text
    assert "<b>" not in text and "@\u200badmins" in text
    assert plan.failed and "1 problem(s)" in plan.summary()


def test_a_multi_source_app_previews_only_the_pull_requests_sources_at_the_head() -> None:
    from tidecd.config.load import ApplicationSource

    app = dataclasses.replace(application("web"), sources=(
        ApplicationSource("https://charts.example/repo.git", chart="web"),
        ApplicationSource("https://git.example/values.git", ref="values")))
    from tidecd.config.load import normalize_repo_url
    from tidecd.state.app import split_revisions

    sha = "a" * 40
    revision = planning.pr_revision(app, sha, {normalize_repo_url("https://git.example/values.git")})

    assert split_revisions(revision) == ["", sha]
    assert planning.pr_revision(application("web"), sha, ()) == sha


def test_a_config_plan_lists_added_removed_and_changed_apps_and_stops_at_its_bound(
        github_standin: GitHubStandIn) -> None:
    runtime, git, _ = _setup(github_standin)
    git.push([configmap("blue")])
    _sync(runtime)
    base = runtime.config()
    web = base.applications["web"]
    added = {f"app{i:02d}": dataclasses.replace(web, name=f"app{i:02d}") for i in range(planning.MAX_PLAN_APPS + 5)}
    head = dataclasses.replace(base, applications={
        "web": dataclasses.replace(web, source=dataclasses.replace(web.source, path="other")), **added})
    previewed: list[str] = []

    def preview_app(rt: Runtime, app: Any, revision: str) -> preview_text.AppPreview:
        assert rt.config() is head and revision == ""  # rendered under the head's config, at the app's target
        previewed.append(app.name)
        return preview.preview_app(rt, app, revision)

    plan = planning.plan_configs(runtime, base, head, "f" * 40, preview_app)
    assert plan.added == tuple(sorted(added)) and [a for a, _ in plan.changed] == ["web"]
    assert "-    path: app" in plan.changed[0][1] and "+    path: other" in plan.changed[0][1]
    assert "helm" not in plan.changed[0][1]  # unset fields are no change to show
    assert len(previewed) == planning.MAX_PLAN_APPS and plan.cut == 6  # 25 added + 1 changed, 20 planned
    assert all(r.head_sha == "f" * 40 and r.plan is not None for r in plan.results), plan.results[:2]
    gone = planning.plan_configs(runtime, head, dataclasses.replace(head, applications={}), "e" * 40, preview_app)
    assert [a for a, _ in gone.removed] == sorted([*added, "web"]) and not gone.results
    assert dict(gone.removed)["web"] == ("ConfigMap ns/web",)  # what the removed app owns
    text = plan_text.render_plan(gh.Repo("o", "r"), 1, plan)
    assert "6 added or changed app(s) not planned" in text and "ConfigMap ns/web" in text

    window = dataclasses.replace(base, projects={"default": AppProject("default", cluster_resource_whitelist=(),
                                                                       description="frozen")})
    moved = planning.plan_configs(runtime, base, window, "c" * 40, lambda rt, app, rev: preview_text.AppPreview(
        app.name, rev))
    assert [a for a, _ in moved.changed] == ["web"] and "+  description: frozen" in moved.changed[0][1]


def test_a_forks_pull_request_to_the_config_source_is_not_planned_and_says_so(
        github_standin: GitHubStandIn, webhook_examples: Any) -> None:
    runtime, git, _ = _setup(github_standin)
    runtime.settings.config = f"{github_standin.base_url}/{REPO}.git#main"  # the config source is this repository
    git.push([configmap("blue")])
    head = "d" * 40
    doc = _payload(webhook_examples, github_standin, "opened", 12, head)
    doc["pull_request"]["head"]["repo"] = doc["pull_request"]["head"]["repo"] | {"full_name": "mallory/plans"}
    doc["pull_request"]["base"]["repo"] = doc["pull_request"]["base"]["repo"] | {"full_name": REPO}
    doc["pull_request"]["labels"] = [{"name": "tidecd:preview"}]
    git.revisions[head] = [configmap("from-a-fork")]
    status, body = preview.on_pull_request(doc, runtime, pr_apps, runner=Inline())
    assert status == 202 and body["mode"] == "fork" and body["plan"] is True, body
    assert github_standin.status_states(REPO, head, "tidecd/plan") == ["failure"]
    plan_comment = next(c for c in github_standin.comment_bodies(REPO, 12) if "tidecd plan of the config" in c)
    assert "a fork's change to the config source is not planned" in plan_comment
    assert "ConfigMap" not in plan_comment  # nothing rendered, nothing read from the cluster

    waiting = dict(doc, pull_request=doc["pull_request"] | {"labels": []})
    status, body = preview.on_pull_request(waiting, runtime, pr_apps, runner=Inline())
    assert body["mode"] == "waiting" and "plan" not in body  # nobody asked: no job at all
