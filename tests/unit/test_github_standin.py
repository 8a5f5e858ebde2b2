"""The GitHub stand-in itself: PyGithub's requests pass the spec, requests the spec forbids are caught."""

from __future__ import annotations

import github
import requests
from github import Auth

from tests.support.github_standin import GitHubStandIn, Spec

SHA = "6dcb09b5b57875f334f61aebed695e2e4193db5e"


def _client(standin: GitHubStandIn) -> github.Github:
    return github.Github(auth=Auth.Token("test-token"), base_url=standin.base_url, retry=None, lazy=True,
                         seconds_between_requests=None, seconds_between_writes=None)


def test_pygithub_commit_status_is_valid_and_recorded(github_standin: GitHubStandIn) -> None:
    repo = _client(github_standin).get_repo("octo/app")
    repo.get_commit(SHA).create_status("pending", target_url="http://ui/apps/a", description="d", context="tidecd/a")
    repo.get_commit(SHA).create_status("success", context="tidecd/a")
    assert github_standin.status_states("octo/app", SHA, "tidecd/a") == ["pending", "success"]
    call = github_standin.calls_to("repos/create-commit-status")[0]
    assert call.authorization == "token test-token"
    assert call.body == {"state": "pending", "target_url": "http://ui/apps/a", "description": "d",
                         "context": "tidecd/a"}
    assert [c.sha for c in repo.get_commits()] == [SHA]  # a list call with PyGithub's paging parameters


def test_pygithub_legacy_status_list_is_caught(github_spec: Spec) -> None:
    """PyGithub's Commit.get_statuses uses GET /repos/{o}/{r}/statuses/{sha}, which the spec does not have
    (it lists /commits/{ref}/statuses): the stand-in refuses it, as it would any request outside the spec."""
    standin = GitHubStandIn(github_spec).start()
    try:
        repo = _client(standin).get_repo("octo/app")
        try:
            list(repo.get_commit(SHA).get_statuses())
        except github.GithubException as exc:
            assert exc.status == 400
    finally:
        standin.stop()
    assert standin.violations == [f"GET /repos/octo/app/statuses/{SHA}: method not allowed"]


def test_comments_upsert_and_deployments(github_standin: GitHubStandIn) -> None:
    repo = _client(github_standin).get_repo("octo/app")
    issue = repo.get_issue(7)
    issue.create_comment("first")
    comment = next(iter(issue.get_comments()))
    comment.edit("second")
    assert [c["body"] for c in github_standin.comments[("octo/app", 7)]] == ["second"]
    deployment = repo.create_deployment(SHA, environment="prod", auto_merge=False, required_contexts=[])
    deployment.create_status("in_progress", environment_url="http://ui/apps/a")
    assert [s["state"] for s in github_standin.deployment_statuses[("octo/app", deployment.id)]] == ["in_progress"]


def test_a_request_the_spec_forbids_is_a_violation(github_spec: Spec) -> None:
    standin = GitHubStandIn(github_spec).start()
    try:
        url = f"{standin.base_url}/repos/octo/app/statuses/{SHA}"
        assert requests.post(url, json={"state": "green"}, timeout=5).status_code == 400
        assert requests.post(url, json={"context": "x"}, timeout=5).status_code == 400
        assert requests.get(f"{standin.base_url}/no/such/thing", timeout=5).status_code == 400
        bogus = f"{standin.base_url}/repos/octo/app/issues/1/comments?bogus=1"
        assert requests.get(bogus, timeout=5).status_code == 400
        assert requests.delete(f"{standin.base_url}/repos/octo/app/statuses/{SHA}", timeout=5).status_code == 400
    finally:
        standin.stop()
    assert len(standin.violations) == 5
    assert any("state" in v and "green" in v for v in standin.violations)
    assert any("'state' is a required property" in v for v in standin.violations)


def test_fault_injection_answers_the_next_call(github_standin: GitHubStandIn) -> None:
    github_standin.fail_next("repos/create-commit-status", 422, body={"message": "Validation Failed"})
    repo = _client(github_standin).get_repo("octo/app")
    try:
        repo.get_commit(SHA).create_status("pending", context="c")
    except github.GithubException as exc:
        assert exc.status == 422
    else:
        raise AssertionError("the fault was not answered")
    repo.get_commit(SHA).create_status("pending", context="c")
    assert github_standin.status_states("octo/app", SHA, "c") == ["pending"]


def test_webhook_examples_have_pull_request_payloads(webhook_examples: dict[str, list[dict[str, object]]]) -> None:
    actions = {e["action"] for e in webhook_examples["pull_request"]}
    assert {"opened", "synchronize", "reopened", "closed"} <= actions
