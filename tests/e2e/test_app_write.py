"""Creating an app from the dashboard (issue 25): Debian's chromium fills the New app form of the real api
function; the Application lands as a commit by the logged-in user in the config repo on the session's git
server, and the app deploys from it on the session's control plane, Synced and Healthy, without a poll.
A protected branch (a pre-receive hook that declines pushes to main) gets the commit on a branch instead,
and main is left as it was."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.test_ui import dashboard, log_in, wait_for
from tests.support.apps import GitOps, deployment
from tests.support.browser import screenshot_dir
from tests.support.functions import Functions
from tests.support.github_repos import GitHubReposStandIn
from tests.support.gitserver import GitRepo
from tidecd.clients.secrets import KeyPair, seal_secret
from tidecd.clients.store import LocalStore
from tidecd.runtime import Runtime, Settings
from tidecd.triggers.dispatch import ManualDispatcher
from tidecd.usecases import api


def _config_source(gitops: GitOps, functions: Functions) -> str:
    """The app repo's `config/` folder as TIDECD_CONFIG, with the workload the new app will point at."""
    gitops.push({"app/web.yaml": deployment("web"), "config/.keep": ""})
    source = f"{gitops.repo.url}#main:config"
    functions.extra_env["TIDECD_CONFIG"] = source
    return source


def _commit_of(gitops: GitOps, path: str, ref: str = "origin/main") -> tuple[str, str, str]:
    """(author name, subject, file text) of the last commit touching `path` on `ref`, read from the server."""
    gitops.repo.git("fetch", "--quiet", "origin", "+refs/heads/*:refs/remotes/origin/*")
    log = gitops.repo.git("log", "-1", "--format=%an%x00%s", ref, "--", path)
    author, _, subject = log.partition("\0")
    return author, subject, gitops.repo.git("show", f"{ref}:{path}")


def test_an_app_created_in_the_dashboard_is_a_commit_by_the_user_and_deploys_from_it(
        browser: Any, gitops: GitOps, functions: Functions, tmp_path: Path) -> None:
    _config_source(gitops, functions)
    name = gitops.real("made")
    base = dashboard(functions)
    page = log_in(browser, base, functions.token)
    page.click("[data-new-app]")
    page.wait_for_selector("[data-app-form]")
    page.fill("input[name=name]", name)
    page.fill("input[name=repoURL]", gitops.repo.url)
    page.fill("input[name=targetRevision]", "main")
    page.fill("input[name=path]", "app")
    page.fill("input[name=namespace]", "elsewhere-not-permitted")
    page.fill("input[name=project]", "no-such-project")
    page.check("input[name=automated]")
    page.click("button[name=save]")
    problem = page.locator("[data-problem]").inner_text()  # the loader's own check, naming the field
    assert "spec.project: project 'no-such-project' is not defined" in problem
    assert page.locator("input[name=project]").get_attribute("aria-invalid") == "true"
    assert page.input_value("input[name=name]") == name  # what was typed is kept
    page.screenshot(path=str(screenshot_dir(tmp_path) / "create-app.png"), full_page=True)

    page.fill("input[name=project]", "default")
    page.fill("input[name=namespace]", gitops.namespace)
    page.click("button[name=save]")
    page.wait_for_url(re.compile(rf"/ui/apps/{name}\?notice=app-committed"))
    assert "Committed to the config source in git" in page.locator("[data-notice]").inner_text()
    author, subject, text = _commit_of(gitops, f"config/{name}.yaml")
    assert (author, subject) == ("admin", f"Create Application {name}")
    doc = yaml.safe_load(text)
    assert doc["spec"]["source"] == {"repoURL": gitops.repo.url, "targetRevision": "main", "path": "app"}
    assert doc["spec"]["syncPolicy"]["automated"] == {"prune": False, "selfHeal": False}

    def deployed() -> bool:
        state = gitops.state(name)
        return state.sync_status == "Synced" and state.health == "Healthy"

    wait_for(deployed, 120, "the new app to deploy from the commit")
    assert gitops.live("Deployment", "web", group="apps") is not None
    page.goto(f"{base}apps/{name}")
    page.wait_for_selector("text=Healthy")
    page.screenshot(path=str(screenshot_dir(tmp_path) / "created-app.png"), full_page=True)

    # Edit: the same file is rewritten, by the same user
    page.goto(f"{base}apps/{name}/edit")
    assert page.input_value("input[name=path]") == "app"
    page.check("input[name=selfHeal]")
    page.click("button[name=save]")
    page.wait_for_url(re.compile(rf"/ui/apps/{name}\?"))
    author, subject, text = _commit_of(gitops, f"config/{name}.yaml")
    assert (author, subject) == ("admin", f"Update Application {name}")
    assert yaml.safe_load(text)["spec"]["syncPolicy"]["automated"]["selfHeal"] is True


def test_a_protected_branch_gets_the_app_on_a_branch_and_main_is_left_alone(
        gitops: GitOps, functions: Functions) -> None:
    _config_source(gitops, functions)
    hook = gitops.repo.server.root / f"{gitops.repo.name}.git" / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\nwhile read old new ref; do\n  [ \"$ref\" = refs/heads/main ] && "
                    "{ echo 'main is protected' >&2; exit 1; }\ndone\nexit 0\n")
    hook.chmod(0o755)
    before = gitops.repo.git("ls-remote", "origin", "refs/heads/main")
    name = gitops.real("guarded")
    manifest = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": name},
                "spec": {"project": "default", "destination": {"name": "in-cluster", "namespace": gitops.namespace},
                         "source": {"repoURL": gitops.repo.url, "targetRevision": "main", "path": "app"}}}
    answer = functions.api("POST", "/apps", manifest)
    # no GitHub here: the answer says where the commit went and that no pull request could be opened
    assert answer.status_code == 400, answer.text
    assert f"the commit is on the branch tidecd/app-{name}" in answer.json()["message"]
    assert gitops.repo.git("ls-remote", "origin", "refs/heads/main") == before
    author, subject, _ = _commit_of(gitops, f"config/{name}.yaml", f"origin/tidecd/app-{name}")
    assert (author, subject) == ("admin", f"Create Application {name}")


def test_tidecd_app_create_commits_the_app_as_argocd_app_create_would_describe_it(
        gitops: GitOps, functions: Functions) -> None:
    source = _config_source(gitops, functions)
    name = gitops.real("cli")
    env = {**os.environ, "TIDECD_CONFIG": source, "TIDECD_STORE": str(gitops.store.root),
           "KUBECONFIG": str(gitops.dev.kubeconfig)}
    run = subprocess.run([sys.executable, "-m", "tidecd.cli", "app", "create", name, "--repo", gitops.repo.url,
                          "--path", "app", "--revision", "main", "--dest-namespace", gitops.namespace,
                          "--sync-policy", "automated", "--self-heal", "--sync-option", "CreateNamespace=true"],
                         env=env, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"application {name}: committed" in run.stdout and f"config/{name}.yaml on main" in run.stdout
    author, subject, text = _commit_of(gitops, f"config/{name}.yaml")
    assert (author, subject) == ("admin", f"Create Application {name}")
    spec = yaml.safe_load(text)["spec"]
    assert spec["syncPolicy"] == {"automated": {"prune": False, "selfHeal": True},
                                  "syncOptions": ["CreateNamespace=true"]}
    again = subprocess.run([sys.executable, "-m", "tidecd.cli", "app", "create", name, "--repo", gitops.repo.url,
                            "--path", "app", "--dest-namespace", gitops.namespace],
                           env=env, capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode != 0 and f"metadata.name: an app '{name}' already exists" in again.stdout + again.stderr


def test_on_github_a_protected_branch_gets_a_pull_request_opened_once(
        git_server: Any, tmp_path: Path, sealing: tuple[KeyPair, Path], github_repos: GitHubReposStandIn) -> None:
    """The config repo named owner/name as on GitHub, the github Secret sealed in it: the declined push becomes
    a branch and a pull request on the stand-in; asking again finds that pull request instead of a second."""
    repo = GitRepo(git_server, f"octo/config-{uuid.uuid4().hex[:10]}", tmp_path / "work")
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "github", "namespace": "tidecd",
                           "labels": {"argocd.argoproj.io/secret-type": "github"}},
              "stringData": {"token": "e2e-github-token"}}
    repo.write("config/github.yaml", yaml.safe_dump(seal_secret(secret, sealing[0].cert_pem)))
    repo.commit("config")
    repo.push()
    hook = git_server.root / f"{repo.name}.git" / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\nwhile read old new ref; do\n  [ \"$ref\" = refs/heads/main ] && exit 1\ndone\nexit 0\n")
    hook.chmod(0o755)
    rt = Runtime(settings=Settings(config=f"{repo.url}#main:config", store=str(tmp_path / "store"), api_token="t",
                                   sealing_keys=str(sealing[1]), github_api_url=github_repos.base_url),
                 store=LocalStore(tmp_path / "store"))
    manifest = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "guarded"},
                "spec": {"project": "default", "destination": {"name": "in-cluster", "namespace": "guarded"},
                         "source": {"repoURL": repo.url, "targetRevision": "main", "path": "app"}}}
    for _ in range(2):
        answer = api.handle("POST", "/api/v1/apps", {"Authorization": "Bearer t"}, json.dumps(manifest).encode(),
                            rt, dispatcher=ManualDispatcher())
        assert answer.status == 201, answer.body
        assert answer.body["branch"] == "tidecd/app-guarded" and "/pull/1" in answer.body["pull"]
    created = github_repos.calls_to("pulls/create")
    assert len(created) == 1 and created[0].body["base"] == "main" and created[0].body["head"] == "tidecd/app-guarded"
    assert created[0].body["title"] == "Create Application guarded"
    main = repo.git("ls-remote", "origin", "refs/heads/main").split()[0]
    assert main == repo.head()  # main is as it was
