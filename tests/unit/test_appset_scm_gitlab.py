"""scmProvider's gitlab, as Argo CD v3.6.1's GitlabProvider (applicationset/services/scm_provider/gitlab.go and
its tests, Generators-SCM-Provider.md): run for real through python-gitlab against the GitLab stand-in
(tests/support/gitlab_standin.py, shaped from GitLab's REST API documentation). The cases are tidecd's own.

What is checked: the parameters (organization = the namespace's full path, repository = the project's path,
url by cloneProtocol, branch, sha, short_sha, labels = topics or tag_list, branchNormalized, repository_id);
the group's query parameters (includeSubgroups, includeSharedProjects, includeArchivedRepos, topic); the
filters through the one implementation GitHub's provider uses too; the token from tokenRef only; and 401, a
missing group and junk answers becoming a clear error on that ApplicationSet only."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.gitlab_standin import GitLabStandIn
from tests.unit.test_appset_discovery import parsed_errors, run, runtime_with, secret
from tidecd.clients import gitlab as gl
from tidecd.config.appset.expand import expand
from tidecd.generated import records as generated
from tidecd.usecases.appsets import RuntimeSources, refresh

TOKEN = "glpat-scm-token-value-0123456789"  # noqa: S105 - a test token
SCM_CREDS = {"argocd.argoproj.io/secret-type": "scm-creds"}


def gitlab_set(gitlab: dict[str, Any], name: str = "repos", prefix: str = "", **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "metadata": {"name": name},
            "spec": {"goTemplate": True, "generators": [{"scmProvider": {"gitlab": gitlab, **extra}}],
                     "template": {"metadata": {"name": prefix + "{{ .repository }}-{{ .branchNormalized }}"},
                                  "spec": {"project": "default",
                                           "source": {"repoURL": "{{ .url }}", "targetRevision": "{{ .sha }}",
                                                      "path": "kubernetes/"},
                                           "destination": {"name": "in-cluster", "namespace": "{{ .organization }}"},
                                           "info": [{"name": "p", "value": "{{ .repository_id }}|{{ .branch }}|"
                                                     "{{ .short_sha }}|{{ .short_sha_7 }}|{{ .labels }}"}]}}}}


@pytest.fixture
def acme(gitlab_standin: GitLabStandIn) -> GitLabStandIn:
    """Group acme: web (topics, a kustomization), db (archived, two branches), team/api (a subgroup's), and
    other/lib shared with acme."""
    gitlab_standin.project("acme", "web", topics=["deploy-ok", "frontend"],
                           files={"main": {"kubernetes/kustomization.yaml", "README.md"}})
    gitlab_standin.project("acme", "db", archived=True, branches={"main": "d" * 40, "feature/x": "e" * 40},
                           files={"feature/x": {"helm/Chart.yaml"}})
    gitlab_standin.project("acme/team", "api", tag_list=["legacy"], default_branch="trunk")
    gitlab_standin.project("other", "lib", shared_with=["acme"])
    return gitlab_standin


def apps(out: Any) -> dict[str, dict[str, Any]]:
    assert not out.errors, out.errors
    return {name: app.doc["spec"] for name, app in out.apps.items()}


def test_a_groups_projects_give_argo_cds_parameters(tmp_path: Path, acme: GitLabStandIn) -> None:
    rt = runtime_with(tmp_path, [gitlab_set({"group": "acme", "api": acme.base_url})], "")
    got = apps(run(rt))
    # GitLab's default with_shared=true: other/lib is listed; archived projects are listed unless asked about
    assert sorted(got) == ["db-main", "lib-main", "web-main"]
    web = got["web-main"]
    assert web["source"] == {"repoURL": "git@gitlab.example.com:acme/web.git",
                             "targetRevision": acme.projects[0].branches["main"], "path": "kubernetes/"}
    sha = acme.projects[0].branches["main"]
    assert web["info"] == [{"name": "p", "value": f"1000|main|{sha[:8]}|{sha[:7]}|deploy-ok,frontend"}]
    assert got["lib-main"]["destination"]["namespace"] == "other"  # organization: the project's namespace
    query = acme.calls_to("group-projects")[0].query
    assert query == {"include_subgroups": "false", "with_shared": "true", "page": "1", "per_page": "100"}
    assert {c.route for c in acme.calls} == {"group-projects", "branch"}
    assert all(c.token == "" for c in acme.calls)  # no tokenRef: anonymous, as Argo CD


def test_subgroups_shared_archived_topic_and_https(tmp_path: Path, acme: GitLabStandIn) -> None:
    rt = runtime_with(tmp_path, [gitlab_set({"group": "acme", "api": acme.base_url + "/api/v4/",
                                             "includeSubgroups": True, "includeSharedProjects": False},
                                            cloneProtocol="https")], "")
    got = apps(run(rt))
    assert sorted(got) == ["api-trunk", "db-main", "web-main"]
    api = got["api-trunk"]
    assert api["source"]["repoURL"] == "https://gitlab.example.com/acme/team/api.git"
    assert api["destination"]["namespace"] == "acme/team"
    assert api["info"][0]["value"].endswith("|legacy")  # a GitLab before 14.5: tag_list
    archived = runtime_with(tmp_path / "a", [gitlab_set({"group": str(acme.groups["acme"]), "api": acme.base_url,
                                                         "includeArchivedRepos": True})], "")
    assert sorted(apps(run(archived))) == ["db-main"]  # archived=true: GitLab lists the archived ones only
    assert acme.calls_to("group-projects")[-1].query["archived"] == "true"
    topic = runtime_with(tmp_path / "t", [gitlab_set({"group": "acme", "api": acme.base_url, "topic": "frontend"})],
                         "")
    assert sorted(apps(run(topic))) == ["web-main"]


def test_all_branches_and_the_shared_filters(tmp_path: Path, acme: GitLabStandIn) -> None:
    """allBranches lists every branch (branchNormalized from `feature/x`); pathsExist finds a file and a
    directory, pathsDoNotExist, branchMatch and labelMatch (topics) through the filters GitHub's provider uses."""
    def names(filters: list[dict[str, Any]], sub: str) -> list[str]:
        rt = runtime_with(tmp_path / sub, [gitlab_set({"group": "acme", "api": acme.base_url, "allBranches": True},
                                                      filters=filters)], "")
        return sorted(apps(run(rt)))

    assert names([], "all") == ["db-feature-x", "db-main", "lib-main", "web-main"]
    assert names([{"pathsExist": ["kubernetes/kustomization.yaml"]}], "file") == ["web-main"]
    assert names([{"pathsExist": ["helm"]}], "dir") == ["db-feature-x"]
    assert names([{"repositoryMatch": "^(web|db)$", "pathsDoNotExist": ["README.md"]}], "not") == [
        "db-feature-x", "db-main"]
    assert names([{"branchMatch": "^feature/"}], "branch") == ["db-feature-x"]
    assert names([{"labelMatch": "^deploy-"}], "label") == ["web-main"]
    heads = acme.calls_to("file-head")
    assert heads and all(c.query.get("ref") for c in heads)
    assert any(c.path.endswith("/repository/files/kubernetes%2Fkustomization.yaml") for c in heads)


def test_the_token_comes_from_token_ref_and_stays_out_of_errors(tmp_path: Path, acme: GitLabStandIn) -> None:
    acme.token = TOKEN
    acme.projects[0].public = acme.projects[1].public = False
    token_ref = {"secretName": "gitlab-token", "key": "token"}
    rt = runtime_with(tmp_path, [gitlab_set({"group": "acme", "api": acme.base_url, "tokenRef": token_ref}),
                                 secret("gitlab-token", {"token": TOKEN}, SCM_CREDS)], "")
    assert sorted(apps(run(rt))) == ["db-main", "lib-main", "web-main"]  # private projects seen with the token
    assert acme.calls and all(c.token == TOKEN for c in acme.calls)

    wrong = runtime_with(tmp_path / "w", [gitlab_set({"group": "acme", "api": acme.base_url, "tokenRef": token_ref}),
                                          secret("gitlab-token", {"token": "glpat-wrong"}, SCM_CREDS)], "")
    failed = run(wrong)
    assert failed.failed and len(failed.errors) == 1 and failed.errors[0].endswith(
        "all.yaml: ApplicationSet/repos: spec.generators[0].scmProvider: scmProvider: GitLab group acme: 401: "
        "401 Unauthorized")
    missing = runtime_with(tmp_path / "m", [gitlab_set({"group": "acme", "api": acme.base_url,
                                                        "tokenRef": {"secretName": "nope", "key": "token"}})], "")
    assert "scmProvider: GitLab group acme: tokenRef: no Secret 'nope' in the config source" in \
        run(missing).errors[0]

    acme.fail_next("group-projects", 500, body={"message": f"echoing {TOKEN}"})
    echoed = run(rt)
    assert echoed.errors and TOKEN not in "".join(echoed.errors) and "echoing ***" in echoed.errors[0]


@pytest.mark.parametrize(("route", "status", "body", "message"), [
    ("group-projects", 404, {"message": "404 Group Not Found"}, "GitLab group acme: 404: 404 Group Not Found"),
    ("group-projects", 200, b"<html>not json", "the answer is not what GitLab's API gives (an answer that is not "
                                               "JSON; is http://127.0.0.1:"),
    ("group-projects", 200, {"id": 1}, "the answer is not what GitLab's API gives"),
    ("group-projects", 200, [{"id": "x"}], "the answer is not what GitLab's API gives (a project without"),
    ("branch", 200, {"name": "main"}, "repository acme/web: the answer is not what GitLab's API gives (a branch"),
    ("branch", 403, {"message": "403 Forbidden"}, "repository acme/web: 403: 403 Forbidden"),
])
def test_errors_fail_that_application_set_only(tmp_path: Path, acme: GitLabStandIn, route: str, status: int,
                                               body: Any, message: str) -> None:
    """An error becomes the ApplicationSet's own error naming the generator; another ApplicationSet of the same
    config still generates."""
    rt = runtime_with(tmp_path, [gitlab_set({"group": "acme", "api": acme.base_url}),
                                 gitlab_set({"group": "other", "api": acme.base_url}, name="others")], "")
    acme.fail_next(route, status, body=body)
    sources = RuntimeSources(rt)
    try:
        failed = expand(rt.config().appsets["repos"], sources)
        fine = expand(rt.config().appsets["others"], sources)
    finally:
        sources.close()
    assert failed.failed and message in failed.errors[0], failed.errors
    assert "ApplicationSet/repos: spec.generators[0].scmProvider: scmProvider: GitLab group acme" in failed.errors[0]
    assert list(fine.apps) == ["lib-main"], fine.errors


def test_a_missing_default_branch_drops_the_repository(tmp_path: Path, acme: GitLabStandIn) -> None:
    """Argo CD: a 404 for the branch is no branch, not an error; an empty repository has no default branch."""
    acme.project("acme", "empty", default_branch=None)
    acme.fail_next("branch", 404, body={"message": "404 Branch Not Found"})
    got = apps(run(runtime_with(tmp_path, [gitlab_set({"group": "acme", "api": acme.base_url})], "")))
    assert sorted(got) == ["db-main", "lib-main"]  # web's branch 404, empty has none


def test_pages_are_followed_by_number_and_bounded(acme: GitLabStandIn) -> None:
    for index in range(150):
        acme.project("big", f"p{index:03d}")
    client = gl.GitLab(acme.base_url, "")
    listed = client.group_projects("big", include_subgroups=False, with_shared=True, archived_only=False, topic="",
                                   limit=1000)
    assert [p.path for p in listed] == [f"p{i:03d}" for i in range(150)]
    assert [c.query["page"] for c in acme.calls_to("group-projects")] == ["1", "2"]
    with pytest.raises(gl.TooMany):
        client.group_projects("big", include_subgroups=False, with_shared=True, archived_only=False, topic="",
                              limit=120)
    assert gl.base_url("https://gitlab.example.com/api/v4/") == "https://gitlab.example.com"
    assert gl.base_url("") == "https://gitlab.com"
    assert "glpat" not in repr(gl.GitLab(acme.base_url, TOKEN))
    spent = gl.GitLab(acme.base_url, "", budget=0.0)  # every request of one client together is bounded too
    with pytest.raises(gl.Unreachable, match="took more than 0 s together"):
        spent.branch_sha(1000, "main")
    gone = gl.GitLab("http://user:secret@127.0.0.1:9/", "", timeout=2)  # nothing listens on port 9
    with pytest.raises(gl.Unreachable) as raised:
        gone.path_exists(1000, "x", "main")
    assert "secret" not in str(raised.value) and "http://127.0.0.1:9" in str(raised.value)


def test_gitlab_fields_are_checked_naming_the_field() -> None:
    text = "\n".join(parsed_errors({"scmProvider": {"gitlab": {"includeSubgroups": "yes", "caRef": {
        "configMapName": "argocd-tls-certs-cm", "key": "gitlab-ca"}}}}))
    assert "scmProvider.gitlab.group: required field is missing" in text
    assert "scmProvider.gitlab.includeSubgroups:" in text
    assert "scmProvider.gitlab.caRef: not implemented by tidecd" in text
    both = "\n".join(parsed_errors({"scmProvider": {"gitlab": {"group": "g"}, "github": {"organization": "o"}}}))
    assert "set one provider: github and gitlab are both set" in both
    assert parsed_errors({"scmProvider": {"gitlab": {"group": "g", "tokenRef": {"secretName": "s", "key": "k"},
                                                     "insecure": True, "topic": "t"}}}) == []


def test_a_refresh_records_the_error_on_that_application_set_and_keeps_its_apps(tmp_path: Path,
                                                                                 acme: GitLabStandIn) -> None:
    """Through the refresh use case: a 401 fails `others` only (evaluated first); its app stays as generated
    before, its record holds the error (what the api and `tidecd appset` show), and `repos` is refreshed all
    the same. An unchanged spec is asked again after requeueAfterSeconds, as Argo CD requeues it."""
    rt = runtime_with(tmp_path, [gitlab_set({"group": "acme", "api": acme.base_url}),
                                 gitlab_set({"group": "other", "api": acme.base_url}, name="others",
                                            prefix="o-")], "")
    first = refresh(rt)
    assert sorted(first.created) == ["db-main", "lib-main", "o-lib-main", "web-main"], first.errors
    acme.projects[0].branches["main"] = "f" * 40  # acme/web moved on
    assert refresh(rt).evaluated == []  # not yet asked again: requeueAfterSeconds (default 30 min)
    acme.fail_next("group-projects", 401, body={"message": "401 Unauthorized"})
    second = refresh(rt, now=lambda: time.time() + 1801)
    assert second.evaluated == ["others", "repos"]
    assert len(second.errors) == 1 and "ApplicationSet/others: spec.generators[0].scmProvider: scmProvider: " \
                                       "GitLab group other: 401: 401 Unauthorized" in second.errors[0]
    records = generated.load_records(rt.store)
    assert records["ApplicationSet/others"]["failed"] and records["ApplicationSet/others"]["errors"] == second.errors
    assert sorted(records["ApplicationSet/others"]["apps"]) == ["o-lib-main"]
    assert not records["ApplicationSet/repos"]["failed"]
    web = records["ApplicationSet/repos"]["apps"]["web-main"]["doc"]
    assert web["spec"]["source"]["targetRevision"] == "f" * 40
