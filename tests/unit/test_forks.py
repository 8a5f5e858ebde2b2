"""Who gets which preview: the pure decision of `tidecd.usecases.forks`, and GitHub's webhook schemas for
the fields it reads."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.github_standin import Spec
from tidecd.base.errors import ConfigError
from tidecd.usecases import forks
from tidecd.usecases.forks import Ask, Mode, Policy, decide

POLICY = Policy()


def pr(action: str, *, fork: bool, labels: tuple[str, ...] = (), label: str = "", open: bool = True) -> Ask:
    return Ask("pull_request", action, fork, frozenset(labels), label=label, who="octocat", open=open)


def comment(body: str, association: str, *, fork: bool = True, action: str = "created") -> Ask:
    return Ask("issue_comment", action, fork, body=body, association=association, who="someone")


@pytest.mark.parametrize("action", ["opened", "synchronize", "reopened"])
def test_the_base_repositorys_own_branch_gets_the_full_preview(action: str) -> None:
    assert decide(pr(action, fork=False), POLICY).mode is Mode.FULL


@pytest.mark.parametrize("action", ["opened", "synchronize", "reopened"])
def test_a_fork_waits_for_a_maintainer(action: str) -> None:
    decision = decide(pr(action, fork=True, labels=("bug",)), POLICY)
    assert decision.mode is Mode.WAITING
    assert "tidecd:preview" in decision.reason and "/tidecd preview" in decision.reason


def test_the_label_approves_every_push_while_it_stays_on() -> None:
    assert decide(pr("labeled", fork=True, label="tidecd:preview"), POLICY).mode is Mode.FORK
    assert decide(pr("synchronize", fork=True, labels=("tidecd:preview",)), POLICY).mode is Mode.FORK
    assert decide(pr("labeled", fork=True, label="bug"), POLICY).mode is Mode.IGNORED
    assert decide(pr("unlabeled", fork=True, label="tidecd:preview"), POLICY).mode is Mode.IGNORED
    # a trusted PR is previewed on every push already: the label asks nothing more
    assert decide(pr("labeled", fork=False, label="tidecd:preview"), POLICY).mode is Mode.IGNORED
    assert decide(pr("labeled", fork=True, label="tidecd:preview", open=False), POLICY).mode is Mode.IGNORED


def test_the_label_is_configurable() -> None:
    policy = Policy.of("ok-to-preview", "/preview please")
    assert decide(pr("labeled", fork=True, label="ok-to-preview"), policy).mode is Mode.FORK
    assert decide(pr("labeled", fork=True, label="tidecd:preview"), policy).mode is Mode.IGNORED
    assert decide(comment("/preview please", "MEMBER"), policy).mode is Mode.FORK
    assert Policy.of("", "") == Policy()
    assert Policy.from_env({"TIDECD_PREVIEW_LABEL": " ok-to-preview ", "TIDECD_PREVIEW_COMMAND": "/preview  please"}) \
        == policy
    assert Policy.from_env({}) == Policy()


@pytest.mark.parametrize(("label", "command", "named"), [
    ("x" * 51, "/tidecd preview", "TIDECD_PREVIEW_LABEL"),
    ("tidecd:preview", "tidecd preview", "TIDECD_PREVIEW_COMMAND"),
])
def test_a_bad_policy_names_its_variable(label: str, command: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        Policy.of(label, command)


@pytest.mark.parametrize("association", ["OWNER", "MEMBER", "COLLABORATOR"])
def test_a_maintainers_command_approves(association: str) -> None:
    assert decide(comment("LGTM\n/tidecd preview\n", association), POLICY).mode is Mode.FORK
    assert decide(comment("/tidecd preview", association, fork=False), POLICY).mode is Mode.FULL


@pytest.mark.parametrize("association", ["CONTRIBUTOR", "FIRST_TIME_CONTRIBUTOR", "FIRST_TIMER", "NONE",
                                         "MANNEQUIN", ""])
def test_anyone_elses_command_is_refused_and_says_who_may(association: str) -> None:
    decision = decide(comment("/tidecd preview", association), POLICY)
    assert decision.mode is Mode.IGNORED
    assert "refused" in decision.reason and "COLLABORATOR, MEMBER, OWNER" in decision.reason


@pytest.mark.parametrize(("body", "found", "sha"), [
    ("/tidecd preview", True, ""),
    ("  /TideCD   Preview  ", True, ""),
    ("thanks!\r\n/tidecd preview abc1234\r\n", True, "abc1234"),
    ("please run /tidecd preview", False, ""),  # not on its own line
    ("/tidecd previews", False, ""),
    ("/tidecd preview now", False, ""),  # a word that is no sha
    ("> /tidecd preview", False, ""),  # quoted
    ("", False, ""),
])
def test_the_command_stands_on_its_own_line(body: str, found: bool, sha: str) -> None:
    assert forks.command_in(body, POLICY.command) == (found, sha)


def test_only_a_created_comment_on_an_open_pull_request_counts() -> None:
    assert decide(comment("/tidecd preview", "OWNER", action="edited"), POLICY).mode is Mode.IGNORED
    assert decide(comment("/tidecd preview", "OWNER", action="deleted"), POLICY).mode is Mode.IGNORED
    closed = Ask("issue_comment", "created", True, body="/tidecd preview", association="OWNER", open=False)
    assert decide(closed, POLICY).mode is Mode.IGNORED
    assert decide(comment("/tidecd preview abcdef0", "OWNER"), POLICY).sha == "abcdef0"


def _side(full_name: str | None) -> dict[str, Any]:
    return {"repo": None if full_name is None else {"full_name": full_name}}


@pytest.mark.parametrize(("head", "base", "fork"), [
    ("octo/web", "octo/web", False),
    ("Octo/Web", "octo/web", False),  # GitHub's names are case-insensitive
    ("mallory/web", "octo/web", True),
    (None, "octo/web", True),  # the fork was deleted: head.repo is null
])
def test_a_fork_is_a_head_repository_other_than_the_base(head: str | None, base: str, fork: bool) -> None:
    assert forks.is_fork({"head": _side(head), "base": _side(base)}) is fork


def test_no_cluster_is_asked_for_scopes() -> None:
    scopes = forks.StaticScopes.of([("example.com", "Widget", ""), ("", "ConfigMap", "ns")])
    assert scopes.is_namespaced("", "ConfigMap") and scopes.is_namespaced("apps", "Deployment")
    assert not scopes.is_namespaced("rbac.authorization.k8s.io", "ClusterRole")
    assert not scopes.is_namespaced("example.com", "Widget")  # the app's recorded object says so
    assert scopes.is_namespaced("example.com", "Gadget")  # unknown: namespaced


@pytest.mark.parametrize(("url", "free"), [
    ("https://github.com/octo/web.git", True),
    ("http://127.0.0.1:8080/octo/web.git", True),
    ("oci://ghcr.io/octo/charts", True),
    ("ghcr.io/octo/charts", True),
    ("git@github.com:octo/web.git", False),
    ("ssh://git@github.com/octo/web.git", False),
    ("https://user:pw@github.com/octo/web.git", False),
    ("file:///srv/git/web", False),
])
def test_a_fork_fetches_only_what_needs_no_credential(url: str, free: bool) -> None:
    assert forks.credential_free_url(url) is free


def _property(spec: Spec, schema: Any, *path: str) -> Any:
    """`schema.properties[a].properties[b]...`, through $refs and allOf/anyOf/oneOf."""
    node = spec.resolve(schema)
    for name in path:
        candidates = [node, *[spec.resolve(s) for k in ("allOf", "anyOf", "oneOf") for s in node.get(k, [])]]
        node = spec.resolve(next(c["properties"][name] for c in candidates if name in c.get("properties", {})))
    return node


def test_the_fields_read_are_in_githubs_webhook_schemas(github_spec: Spec) -> None:
    def payload(event: str) -> Any:
        return github_spec.pointer(f"/x-webhooks/{event}/post/requestBody/content/application~1json/schema")

    labeled = payload("pull-request-labeled")
    assert _property(github_spec, labeled, "label", "name")["type"] == "string"
    head_repo = _property(github_spec, labeled, "pull_request", "head", "repo")
    assert head_repo.get("nullable") is True  # a deleted fork
    assert "full_name" in head_repo["properties"]
    assert _property(github_spec, labeled, "pull_request", "labels")["type"] == "array"
    created = payload("issue-comment-created")
    assert "url" in _property(github_spec, created, "issue", "pull_request")["properties"]
    association = _property(github_spec, created, "comment", "author_association")
    assert {"OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR", "NONE"} <= set(association["enum"])
    assert _property(github_spec, created, "comment", "body")["type"] == "string"
