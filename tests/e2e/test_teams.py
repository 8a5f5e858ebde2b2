"""Two teams' config sources in git beside the main one, each bounded by its projects (issue 26, item 5).

Real parts only: the git server holds the app repository and each team's config source, the control plane
receives what is applied, and the webhook runs as the function process the forge would call.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.apps import GitOps, configmap
from tests.support.functions import Functions, push_payload
from tests.support.gitserver import GitRepo
from tidecd.base.errors import ConfigError
from tidecd.usecases.commands import SyncRequest
from tidecd_dev.gitserver import GitServer

ZERO = "0" * 40


def project(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": name},
            "spec": {"sourceNamespaces": [name], "sourceRepos": ["*"],
                     "destinations": [{"name": "in-cluster", "namespace": namespace}]}}


def application(gitops: GitOps, name: str, project: str, path: str) -> str:
    return yaml.safe_dump({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": gitops.real(name)},
        "spec": {"project": project,
                 "source": {"repoURL": gitops.repo.url, "targetRevision": "main", "path": path},
                 "destination": {"name": "in-cluster", "namespace": gitops.namespace}}})


def name_sources(gitops: GitOps, sources: dict[str, str]) -> None:
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tidecd-config-sources"}, "data": sources}
    (gitops.config_dir / "sources.yaml").write_text(yaml.safe_dump(doc))


@pytest.fixture
def teams(gitops: GitOps, git_server: GitServer, tmp_path: Path) -> dict[str, GitRepo]:
    """Team A's source at `apps/` of its repository, team B's at the root of its own; two projects in the
    main source, each admitting one team."""
    gitops.push({"a/cm.yaml": configmap("team-a-web"), "steal/cm.yaml": configmap("stolen"),
                 "b/cm.yaml": configmap("team-b-api")})
    gitops.project(project("team-a", gitops.namespace))
    gitops.project(project("team-b", gitops.namespace))
    repos = {team: GitRepo(git_server, f"{team}-{uuid.uuid4().hex[:8]}", tmp_path / team)
             for team in ("team-a", "team-b")}
    repos["team-a"].write("apps/web.yaml", application(gitops, "web", "team-a", "a"))
    repos["team-a"].write("apps/steal.yaml", application(gitops, "steal", "team-b", "steal"))
    repos["team-b"].write("api.yaml", application(gitops, "api", "team-b", "b"))
    for repo in repos.values():
        repo.commit("the team's apps")
        repo.push()
    name_sources(gitops, {"team-a": f"{repos['team-a'].url}#main:apps", "team-b": f"{repos['team-b'].url}#main"})
    return repos


def test_each_team_deploys_in_its_own_project_only(gitops: GitOps, teams: dict[str, GitRepo]) -> None:
    config = gitops.runtime().config()
    assert config.teams == {gitops.real("web"): "team-a", gitops.real("steal"): "team-a",
                            gitops.real("api"): "team-b"}

    gitops.sync("web")
    gitops.sync("api")
    assert gitops.live("ConfigMap", "team-a-web") is not None
    assert gitops.live("ConfigMap", "team-b-api") is not None

    # team A's app naming team B's project: refused with file, app, project and field, and never applied
    message = config.invalid[gitops.real("steal")]
    assert f"apps/steal.yaml: Application/{gitops.real('steal')}: spec.project: project 'team-b' does not " \
           "admit team config source 'team-a'" in message and "spec.sourceNamespaces (team-b)" in message
    with pytest.raises(ConfigError, match="does not admit team config source 'team-a'"):
        gitops.reconcile("steal", SyncRequest())
    state = gitops.reconcile("steal").state  # a refresh records the refusal as the app's condition
    assert state is not None and state.operation is None and not state.resources
    assert [c["type"] for c in state.conditions] == ["ComparisonError"]
    assert "does not admit team config source 'team-a'" in state.conditions[0]["message"]
    assert gitops.live("ConfigMap", "stolen") is None


def test_a_broken_team_source_leaves_the_other_team_working(gitops: GitOps, teams: dict[str, GitRepo]) -> None:
    gitops.sync("web")
    teams["team-b"].write("api.yaml", application(gitops, "api", "team-b", "b") + "  broken: [\n")
    teams["team-b"].commit("invalid YAML")
    teams["team-b"].push()
    config = gitops.runtime().config()
    assert "YAML syntax error" in config.invalid[gitops.real("api")]
    assert gitops.real("web") in config.applications

    gitops.push({"a/cm.yaml": configmap("team-a-web", {"k": "after"})})
    gitops.sync("web")
    assert (gitops.live("ConfigMap", "team-a-web") or {}).get("data") == {"k": "after"}

    # team B's source unreachable: one problem naming the team; team A still syncs
    name_sources(gitops, {"team-a": f"{teams['team-a'].url}#main:apps", "team-b": "http://127.0.0.1:1/gone.git"})
    config = gitops.runtime().config()
    assert gitops.real("api") not in config.applications and gitops.real("api") not in config.invalid
    assert any("team config source 'team-b'" in p and "could not be loaded" in p for p in config.problems)
    gitops.push({"a/cm.yaml": configmap("team-a-web", {"k": "again"})})
    gitops.sync("web")
    assert (gitops.live("ConfigMap", "team-a-web") or {}).get("data") == {"k": "again"}


def test_a_push_to_a_team_source_refreshes_its_apps(gitops: GitOps, teams: dict[str, GitRepo],
                                                    functions: Functions) -> None:
    repo = teams["team-a"]
    repo.write("apps/web.yaml", application(gitops, "web", "team-a", "a"))
    sha = repo.commit("touch")
    repo.push()
    answer = functions.deliver("push", push_payload(repo.url, "refs/heads/main", ZERO, sha, ["apps/web.yaml"]))
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert body["team_sources"] == ["team-a"]
    assert body["refreshed"] == [gitops.real("web")]  # steal is set aside, not refreshed
    assert gitops.real("steal") in body["set_aside"]

    elsewhere = functions.deliver("push", push_payload(repo.url, "refs/heads/main", sha, sha, ["README.md"]))
    assert elsewhere.json()["refreshed"] == [] and "team_sources" not in elsewhere.json()
