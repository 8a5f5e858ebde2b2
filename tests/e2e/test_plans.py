"""One plan per pull request, and apply exactly the plan (issue 28), end to end: the webhook under
functions-framework, the OpenAPI-driven GitHub stand-in, the real git server and the real control plane.

- A pull request to the config source (in git) that adds an Application and edits an ApplicationSet gets
  one `tidecd/plan` status and one comment listing the new and changed apps with their rendered diffs.
- A pull request that changes only an ApplicationSet gets a plan listing the apps it would add, change and
  remove (issue 24's preview of an ApplicationSet change).
- An app that requires a plan: a plan is approved by merging its pull request; a live object changed by hand
  before the sync stops the sync, which names the object and applies nothing; without the hand change the
  sync applies exactly the plan, and the pull request's check names the operation.
"""

from __future__ import annotations

import copy
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.test_github import BAD_SERVICE, _env, _pr_payload, _repo_name, eventually, hub, hub_functions, sealing  # noqa: F401
from tests.support.apps import GitOps, configmap
from tests.support.functions import Functions
from tests.support.github_standin import GitHubStandIn
from tests.support.gitserver import GitRepo
from tidecd.base.model import ResourceKey
from tidecd.clients.secrets import KeyPair
from tidecd.state.app import OperationPhase
from tidecd.usecases import appsets, preview
from tidecd.usecases.commands import SyncRequest
from tidecd.usecases.webhook import pr_apps

pytestmark = pytest.mark.e2e


def _application(gitops: GitOps, name: str, path: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": gitops.real(name), **({"annotations": annotations} if annotations else {})}
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": meta,
            "spec": {"project": "default",
                     "source": {"repoURL": gitops.repo.url, "targetRevision": "main", "path": path},
                     "destination": {"name": "in-cluster", "namespace": gitops.namespace}}}


def _appset(gitops: GitOps, elements: list[dict[str, str]]) -> dict[str, Any]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "metadata": {"name": "sets"},
            "spec": {"goTemplate": True, "generators": [{"list": {"elements": elements}}],
                     "template": {"metadata": {"name": "set-{{ .name }}-" + gitops.namespace},
                                  "spec": {"project": "default",
                                           "source": {"repoURL": gitops.repo.url, "targetRevision": "main",
                                                      "path": "{{ .path }}"},
                                           "destination": {"name": "in-cluster", "namespace": gitops.namespace}}}}}


def _config_pr(examples: dict[str, list[dict[str, Any]]], config: GitRepo, full: str, number: int,
               head: str) -> dict[str, Any]:
    doc = copy.deepcopy(next(e for e in examples["pull_request"] if e["action"] == "opened"))
    doc["number"] = doc["pull_request"]["number"] = number
    doc["pull_request"]["head"].update(sha=head, ref="feature")
    doc["pull_request"]["base"]["ref"] = "main"
    doc["repository"].update(clone_url=config.url, html_url=config.url.removesuffix(".git"), full_name=full,
                             name=full.split("/")[1], default_branch="main")
    return doc


def test_a_config_source_pull_request_lists_new_and_changed_apps_with_their_rendered_diffs(
        hub: GitOps, hub_functions: Functions, github_standin: GitHubStandIn, sealing: tuple[KeyPair, Path],  # noqa: F811
        webhook_examples: dict[str, list[dict[str, Any]]], git_server: Any, tmp_path: Path) -> None:
    functions = hub_functions
    _env(functions, github_standin, sealing[1])
    hub.push({"app/cm.yaml": configmap("web", {"color": "blue"}), "apps/a/cm.yaml": configmap("set-a", {"v": "1"}),
              "apps/a2/cm.yaml": configmap("set-a", {"v": "2"}), "apps/b/cm.yaml": configmap("set-b"),
              "apps/b/svc.yaml": BAD_SERVICE,
              "apps/new/cm.yaml": configmap("brand-new", {"fresh": "yes"})})
    full = f"octo/config-{uuid.uuid4().hex[:8]}"
    config = GitRepo(git_server, full, tmp_path / "config-work")
    for item in hub.config_dir.iterdir():  # the sealed github Secret
        shutil.copy(item, config.workdir / item.name)
    config.write("web.yaml", yaml.safe_dump(_application(hub, "web", "app")))
    config.write("sets.yaml", yaml.safe_dump(_appset(hub, [{"name": "a", "path": "apps/a"}])))
    config.commit("config")
    config.push()
    source = f"{config.url}#main"
    functions.extra_env["TIDECD_CONFIG"] = source
    runtime = hub.runtime(config=source, sealing_keys=str(sealing[1]))
    assert appsets.refresh(runtime).created == [f"set-a-{hub.namespace}"]
    for name in ("web", "set-a"):
        outcome = hub.reconcile(name, request=SyncRequest(), runtime=hub.runtime(config=source,
                                                                                   sealing_keys=str(sealing[1])))
        assert outcome.state is not None and outcome.state.sync_status == "Synced", outcome.state

    config.git("checkout", "--quiet", "-b", "plan")
    config.write("new.yaml", yaml.safe_dump(_application(hub, "new", "apps/new")))
    config.write("sets.yaml", yaml.safe_dump(_appset(hub, [{"name": "a", "path": "apps/a2"},
                                                           {"name": "b", "path": "apps/b"}])))
    head = config.commit("add an app, edit the set")
    config.push("plan")
    answer = functions.deliver("pull_request", _config_pr(webhook_examples, config, full, 5, head))
    assert answer.status_code == 202, answer.text
    assert answer.json()["plan"] is True and answer.json()["preview"] == []
    states = eventually(lambda: github_standin.status_states(full, head, "tidecd/plan"), what="the plan's status")
    assert states == ["failure"], github_standin.statuses[(full, head)]  # set-b's Service is refused
    [comment] = eventually(lambda: github_standin.comment_bodies(full, 5), what="the plan's comment")
    ns = hub.namespace
    assert f"tidecd plan of the config source at `{head[:12]}`" in comment
    assert f"new app `new-{ns}`" in comment and f"new app `set-b-{ns}`" in comment
    assert f"changed app `set-a-{ns}`" in comment and f"web-{ns}" not in comment
    assert "apps/a2" in comment  # the spec diff of the changed app
    assert f"ConfigMap {ns}/brand-new" in comment and "+  fresh: 'yes'" in comment  # the new app's rendered diff
    assert "-  v: '1'" in comment and "+  v: '2'" in comment  # the changed app's, against the live object
    assert f"ConfigMap {ns}/set-b" in comment
    assert f"Service {ns}/bad: dry-run failed" in comment and "99999" in comment  # the server's refusal of a new object
    assert hub.live("ConfigMap", "set-a")["data"] == {"v": "1"}  # type: ignore[index]  # nothing applied
    assert hub.live("ConfigMap", "brand-new") is None


def test_a_pull_request_changing_only_an_application_set_lists_the_apps_it_adds_changes_and_removes(
        hub: GitOps, hub_functions: Functions, github_standin: GitHubStandIn, sealing: tuple[KeyPair, Path],  # noqa: F811
        webhook_examples: dict[str, list[dict[str, Any]]], git_server: Any, tmp_path: Path) -> None:
    """Issue 24, Build 4: the preview of an ApplicationSet change is the config source's plan."""
    functions = hub_functions
    _env(functions, github_standin, sealing[1])
    hub.push({f"apps/{n}/cm.yaml": configmap(f"set-{n}", {"v": n}) for n in ("a", "a2", "b", "c")})
    full = f"octo/config-{uuid.uuid4().hex[:8]}"
    config = GitRepo(git_server, full, tmp_path / "config-work")
    for item in hub.config_dir.iterdir():  # the sealed github Secret
        shutil.copy(item, config.workdir / item.name)
    config.write("sets.yaml", yaml.safe_dump(_appset(hub, [{"name": "a", "path": "apps/a"},
                                                           {"name": "c", "path": "apps/c"}])))
    config.commit("config")
    config.push()
    source = f"{config.url}#main"
    functions.extra_env["TIDECD_CONFIG"] = source
    ns = hub.namespace
    runtime = hub.runtime(config=source, sealing_keys=str(sealing[1]))
    assert appsets.refresh(runtime).created == [f"set-a-{ns}", f"set-c-{ns}"]

    config.git("checkout", "--quiet", "-b", "plan")
    config.write("sets.yaml", yaml.safe_dump(_appset(hub, [{"name": "a", "path": "apps/a2"},
                                                           {"name": "b", "path": "apps/b"}])))
    head = config.commit("the ApplicationSet alone: a moves, b is new, c goes")
    config.push("plan")
    answer = functions.deliver("pull_request", _config_pr(webhook_examples, config, full, 7, head))
    assert answer.status_code == 202 and answer.json()["plan"] is True, answer.text
    states = eventually(lambda: github_standin.status_states(full, head, "tidecd/plan"), what="the plan's status")
    # the status and the comment are two calls to GitHub: wait for the comment too (it may come second)
    [comment] = eventually(lambda: github_standin.comment_bodies(full, 7), what="the plan's comment")
    assert "1 app(s) added, 1 changed, 1 removed" in comment, comment
    assert f"new app `set-b-{ns}`" in comment and f"changed app `set-a-{ns}`" in comment
    assert f"removed app `set-c-{ns}`" in comment and "apps/a2" in comment
    assert f"ConfigMap {ns}/set-b" in comment  # the new app's rendered objects
    assert states == ["success"], (states, comment)


def _merge(gitops: GitOps, branch: str) -> str:
    gitops.repo.git("checkout", "--quiet", "main")
    gitops.repo.git("merge", "--quiet", "--no-ff", "-m", f"Merge {branch}", branch)
    gitops.repo.push("main")
    return str(gitops.repo.head())


def _planned_and_merged(gitops: GitOps, functions: Functions, standin: GitHubStandIn,
                        examples: dict[str, list[dict[str, Any]]], app: str, number: int, color: str) -> str:
    branch = f"color-{color}"
    gitops.repo.git("checkout", "--quiet", "-b", branch, "main")
    gitops.repo.write("app/cm.yaml", yaml.safe_dump(configmap("web", {"color": color})))
    head = str(gitops.repo.commit(color))
    gitops.repo.push(branch)
    answer = functions.deliver("pull_request", _pr_payload(examples, gitops, "opened", number, head, branch))
    assert answer.status_code == 202, answer.text
    repo = _repo_name(gitops)
    assert eventually(lambda: standin.status_states(repo, head, f"tidecd/preview/{app}")) == ["success"]
    merged = _merge(gitops, branch)
    closed = _pr_payload(examples, gitops, "closed", number, head, branch)
    closed["pull_request"].update(merged=True, merge_commit_sha=merged, state="closed")
    answer = functions.deliver("pull_request", closed)
    assert answer.status_code == 200 and answer.json()["approved"] == [app], answer.text
    return head


def test_a_merged_plan_is_applied_exactly_and_a_hand_change_stops_the_sync(
        hub: GitOps, hub_functions: Functions, github_standin: GitHubStandIn, sealing: tuple[KeyPair, Path],  # noqa: F811
        webhook_examples: dict[str, list[dict[str, Any]]]) -> None:
    functions = hub_functions
    _env(functions, github_standin, sealing[1])
    repo = _repo_name(hub)
    hub.push({"app/cm.yaml": configmap("web", {"color": "blue"})})
    app = hub.application()
    runtime = hub.runtime(sealing_keys=str(sealing[1]), github_api_url=github_standin.base_url,
                          public_url="https://cd.example")
    assert hub.reconcile(request=SyncRequest(), runtime=runtime).state.operation.phase is OperationPhase.SUCCEEDED  # type: ignore[union-attr]
    hub.application(annotations={"tidecd.io/require-plan": "true"})

    head = _planned_and_merged(hub, functions, github_standin, webhook_examples, app, 42, "green")
    key = ResourceKey("", "ConfigMap", hub.namespace, "web")
    hub.kube.json_patch(key, [{"op": "replace", "path": "/data/color", "value": "red"}])  # kubectl edit
    state = hub.reconcile(request=SyncRequest(), runtime=hub.runtime(sealing_keys=str(sealing[1]),
                          github_api_url=github_standin.base_url, public_url="https://cd.example")).state
    assert state is not None and state.operation is not None
    assert state.operation.phase is OperationPhase.FAILED
    assert f"ConfigMap {hub.namespace}/web" in state.operation.message and "moved" in state.operation.message
    assert any(c["type"] == "PlanMismatch" for c in state.conditions)
    assert hub.live("ConfigMap", "web")["data"] == {"color": "red"}  # type: ignore[index]  # nothing applied
    [refused] = [s for s in github_standin.statuses[(repo, head)] if s["context"] == f"tidecd/preview/{app}"][:1]
    assert refused["state"] == "failure" and state.operation.id in refused["description"]

    head = _planned_and_merged(hub, functions, github_standin, webhook_examples, app, 43, "yellow")
    state = hub.reconcile(request=SyncRequest(), runtime=hub.runtime(sealing_keys=str(sealing[1]),
                          github_api_url=github_standin.base_url, public_url="https://cd.example")).state
    assert state is not None and state.operation is not None
    assert state.operation.phase is OperationPhase.SUCCEEDED, state.operation.message
    assert hub.live("ConfigMap", "web")["data"] == {"color": "yellow"}  # type: ignore[index]
    [applied] = [s for s in github_standin.statuses[(repo, head)] if s["context"] == f"tidecd/preview/{app}"][:1]
    assert applied["state"] == "success" and f"operation {state.operation.id}" in applied["description"]
    assert applied["target_url"] == f"https://cd.example/ui/apps/{app}"


class Inline:
    """Runs the preview's jobs at once, in this process (the fan-out is tested in test_github)."""

    def submit(self, runtime: Any, jobs: Any) -> dict[str, str]:
        for job in jobs:
            preview.run_job(runtime, job)
        return {}


def test_a_pull_request_to_a_values_repository_previews_the_multi_source_app_with_its_values_at_the_head(
        hub: GitOps, github_standin: GitHubStandIn, sealing: tuple[KeyPair, Path],  # noqa: F811
        webhook_examples: dict[str, list[dict[str, Any]]], git_server: Any, tmp_path: Path) -> None:
    from tests.e2e.test_multi_source import CHART, multi_app, push

    full = f"octo/values-{uuid.uuid4().hex[:8]}"
    values = GitRepo(git_server, full, tmp_path / "values-work")
    hub.push(CHART)
    push(values, {"envs/prod.yaml": "color: blue\n", "extra/cm.yaml": configmap("extra", {"from": "values"})})
    app = multi_app(hub, values)
    runtime = hub.runtime(sealing_keys=str(sealing[1]), github_api_url=github_standin.base_url)
    assert hub.reconcile(request=SyncRequest(), runtime=runtime).state.sync_status == "Synced"  # type: ignore[union-attr]

    values.git("checkout", "--quiet", "-b", "greener")
    values.write("envs/prod.yaml", "color: green\n")
    head = str(values.commit("greener"))
    values.push("greener")
    doc = _config_pr(webhook_examples, values, full, 9, head)  # a pull request to the values repository
    status, body = preview.on_pull_request(doc, hub.runtime(sealing_keys=str(sealing[1]),
                                           github_api_url=github_standin.base_url), pr_apps, runner=Inline())
    assert status == 202 and body["preview"] == [app], body
    assert github_standin.status_states(full, head, f"tidecd/preview/{app}") == ["success"]
    [comment] = github_standin.comment_bodies(full, 9)
    assert f"ConfigMap {hub.namespace}/web-settings" in comment
    assert "-  color: blue" in comment and "+  color: green" in comment  # the chart at main, the values at the head
    assert f"ConfigMap {hub.namespace}/extra" not in comment  # unchanged
    assert hub.live("ConfigMap", "web-settings")["data"]["color"] == "blue"  # type: ignore[index]
