"""tidecd.clients.github against the OpenAPI-driven stand-in: statuses, deployments, comments, auth, backoff."""

from __future__ import annotations

import base64
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.github_standin import GitHubStandIn
from tidecd.base.errors import ConfigError
from tidecd.clients import github as gh
from tidecd.clients.store import MemoryStore

SHA = "a" * 40
REPO = gh.Repo("octo", "app")


def _token_client(standin: GitHubStandIn, store: MemoryStore | None = None) -> gh.GitHub:
    auth = gh.GitHubAuth(token="t0ken", api_url=standin.base_url)
    return gh.GitHub(gh.PyGithubApi(auth), store or MemoryStore())


@pytest.mark.parametrize(("url", "expected"), [
    ("https://github.com/octo/app.git", "octo/app"),
    ("https://github.com/octo/app", "octo/app"),
    ("git@github.com:octo/app.git", "octo/app"),
    ("ssh://git@github.com/octo/app.git", "octo/app"),
    ("https://gitlab.com/octo/app.git", None),
    ("https://github.com/octo", None),
])
def test_repo_of(url: str, expected: str | None) -> None:
    found = gh.repo_of(url)
    assert (found.full_name if found else None) == expected


def test_repo_of_enterprise_host() -> None:
    found = gh.repo_of("http://127.0.0.1:8080/git/octo/app.git", "http://127.0.0.1:9999")
    assert found == gh.Repo("octo", "app")


def test_status_is_posted_and_cut_to_140(github_standin: GitHubStandIn) -> None:
    client = _token_client(github_standin)
    delivery = client.status(REPO, SHA, "pending", "tidecd/app", "x" * 500, "http://ui/ui/apps/app")
    assert delivery.ok, delivery
    [call] = github_standin.calls_to("repos/create-commit-status")
    assert call.authorization == "token t0ken"
    assert len(call.body["description"]) == 140
    assert call.body["target_url"] == "http://ui/ui/apps/app"
    assert github_standin.status_states("octo/app", SHA, "tidecd/app") == ["pending"]


def test_422_too_many_statuses_is_rejected_not_raised(github_standin: GitHubStandIn) -> None:
    github_standin.fail_next("repos/create-commit-status", 422, body={
        "message": "Validation Failed", "errors": [{"resource": "Status", "code": "custom",
                                                    "message": "This SHA and context has reached the maximum "
                                                               "number of statuses."}]})
    store = MemoryStore()
    client = _token_client(github_standin, store)
    first = client.status(REPO, SHA, "success", "tidecd/app")
    assert first.result == "rejected" and "422" in first.detail
    again = _token_client(github_standin, store).status(REPO, SHA, "success", "tidecd/app")
    assert again.result == "rejected"  # recorded: not sent again for this sha and context
    assert len(github_standin.calls_to("repos/create-commit-status")) == 1
    from tidecd.clients import metrics

    assert metrics.GITHUB_CALLS.labels(kind="status", result="rejected")._value.get() >= 1
    assert client.status(REPO, "b" * 40, "success", "tidecd/app").ok  # no backoff window for a 422


@pytest.mark.parametrize("status", [403, 429])
def test_rate_limit_opens_a_shared_backoff_window(github_standin: GitHubStandIn, status: int) -> None:
    reset = int(time.time()) + 120
    github_standin.fail_next("repos/create-commit-status", status, headers={
        "x-ratelimit-limit": "5000", "x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)},
        body={"message": "API rate limit exceeded for installation."})
    store = MemoryStore()
    assert _token_client(github_standin, store).status(REPO, SHA, "pending", "c").result == "backoff"
    other_instance = _token_client(github_standin, store)
    assert other_instance.backoff_until() == reset
    dropped = other_instance.status(REPO, SHA, "pending", "c")
    assert dropped.result == "backoff"
    assert len(github_standin.calls_to("repos/create-commit-status")) == 1  # the second never reached GitHub
    later = gh.GitHub(gh.PyGithubApi(gh.GitHubAuth(token="t", api_url=github_standin.base_url)), store,
                      clock=lambda: reset + 1.0)
    assert later.status(REPO, SHA, "success", "c").ok


def test_retry_after_header_sets_the_window(github_standin: GitHubStandIn) -> None:
    github_standin.fail_next("repos/create-commit-status", 403, headers={"retry-after": "30"},
                             body={"message": "You have exceeded a secondary rate limit."})
    client = _token_client(github_standin)
    before = time.time()
    assert client.status(REPO, SHA, "pending", "c").result == "backoff"
    assert before + 29 <= client.backoff_until() <= time.time() + 31


def test_outage_is_an_error_delivery(github_standin: GitHubStandIn) -> None:
    github_standin.fail_next("repos/create-commit-status", 502)
    assert _token_client(github_standin).status(REPO, SHA, "pending", "c").result == "error"
    down = gh.GitHub(gh.PyGithubApi(gh.GitHubAuth(token="t", api_url="http://127.0.0.1:9")), MemoryStore())
    assert down.status(REPO, SHA, "pending", "c").result == "error"


def test_deployment_reused_per_sha_and_environment(github_standin: GitHubStandIn) -> None:
    client = _token_client(github_standin)
    first = client.deployment(REPO, SHA, "prod", "in_progress", "syncing", "http://ui/ui/apps/app")
    second = client.deployment(REPO, SHA, "prod", "success", "synced", "http://ui/ui/apps/app")
    assert first.ok and second.ok and first.value == second.value
    states = [s["state"] for s in github_standin.deployment_statuses[("octo/app", first.value)]]
    assert states == ["in_progress", "success"]
    assert github_standin.deployment_statuses[("octo/app", first.value)][0]["environment_url"] == \
        "http://ui/ui/apps/app"
    assert len(github_standin.deployments["octo/app"]) == 1


def test_comment_upserted_by_marker(github_standin: GitHubStandIn) -> None:
    client = _token_client(github_standin)
    mark = gh.marker("preview", "octo/app#7")
    client.comment(REPO, 7, "<!-- someone else -->", "unrelated")
    a = client.comment(REPO, 7, mark, f"{mark}\none")
    b = client.comment(REPO, 7, mark, f"{mark}\ntwo")
    assert a.ok and a.value == b.value
    bodies = [c["body"] for c in github_standin.comments[("octo/app", 7)]]
    assert bodies == ["unrelated", f"{mark}\ntwo"]


def test_github_app_auth_exchanges_a_jwt_for_an_installation_token(github_standin: GitHubStandIn) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "gh", "labels": {"argocd.argoproj.io/secret-type": "github"}},
              "data": {k: base64.b64encode(v.encode()).decode()
                       for k, v in {"appID": "1234", "installationID": "42", "privateKey": pem}.items()}}
    client = gh.client_for([secret], MemoryStore(), github_standin.base_url)
    assert client is not None
    assert client.status(REPO, SHA, "success", "c").ok
    [exchange] = github_standin.calls_to("apps/create-installation-access-token")
    assert exchange.path == "/app/installations/42/access_tokens"
    claims = jwt.decode(exchange.authorization.removeprefix("Bearer "), key.public_key(), algorithms=["RS256"])
    assert claims["iss"] == "1234"
    [status] = github_standin.calls_to("repos/create-commit-status")
    assert status.authorization.startswith("token ") and status.authorization != exchange.authorization


def test_auth_from_secrets_errors_name_the_secret_and_never_the_value() -> None:
    secret = {"metadata": {"name": "gh", "labels": {"argocd.argoproj.io/secret-type": "github"}},
              "stringData": {"appID": "1", "privateKey": "-----BEGIN SECRET-----"}}
    with pytest.raises(ConfigError, match="github Secret gh: .*missing installationID") as err:
        gh.auth_from_secrets([secret])
    assert "BEGIN SECRET" not in str(err.value)
    token = gh.auth_from_secrets([{**secret, "stringData": {"token": "abc"}}])
    assert token is not None and token.token == "abc" and "abc" not in repr(token)
    assert gh.auth_from_secrets([]) is None
