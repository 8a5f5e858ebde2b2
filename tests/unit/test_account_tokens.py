"""Local accounts' API keys (argocd-cm `accounts.NAME: apiKey`), as Argo CD's account service has them.

Through `api.handle` with the fake cluster, each answer checked against the OpenAPI document: an account
with `apiKey` gets tokens that act as the account under argocd-rbac-cm; one without is refused a token by
name; the account itself may manage its own tokens, others need `accounts, update`; a deleted token, or
an account whose argocd-cm entry loses `apiKey` or is disabled, is refused at the next call.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import jwt
import pytest

from tests.support.fakecluster import FakeCluster, FakeGit, application, fake_runtime
from tests.unit.test_openapi import TOKEN, Session, configmap
from tidecd.base.principal import Principal
from tidecd.clients.store import MemoryStore
from tidecd.config import rbac
from tidecd.config.load import DEFAULT_PROJECT, AppProject, Config
from tidecd.config.sso import Account, SsoSettings
from tidecd.usecases import authz, tokens

POLICY = """\
p, role:team-a, applications, *, team-a/*, allow
p, role:team-a, applications, sync, team-a/frozen, deny
g, ci, role:team-a
p, helpdesk, accounts, update, viewer, allow
"""
ACCOUNTS = {"ci": Account("ci", frozenset({"apiKey"})), "viewer": Account("viewer", frozenset({"login"})),
            "off": Account("off", frozenset({"apiKey", "login"}), enabled=False)}


def session(store: MemoryStore, accounts: dict[str, Account] | None = None) -> Session:
    """A fresh runtime over `store` (its tokens and signing key), as a new call of the function is."""
    cluster, git = FakeCluster(), FakeGit()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    git.push([configmap("a", "1")])
    apps = {"web": replace(application("web"), project="team-a"),
            "frozen": replace(application("frozen"), project="team-a"), "other": application("other")}
    settings = replace(Config().argo_settings, rbac=rbac.from_config_map({"policy.csv": POLICY}),
                       sso=SsoSettings(accounts=MappingProxyType(ACCOUNTS if accounts is None else accounts)))
    config = Config(applications=apps, projects={"default": DEFAULT_PROJECT, "team-a": AppProject(name="team-a")},
                    argo_settings=settings)
    runtime = fake_runtime(cluster, store, apps["web"], git, config=config)
    runtime.settings.api_token = TOKEN
    return Session(runtime)


@pytest.fixture()
def store() -> MemoryStore:
    return MemoryStore()


def names(s: Session, token: str) -> list[str]:
    return [a["name"] for a in s.call("GET", "/api/v1/apps", token=token).body["apps"]]


def test_an_account_token_acts_as_the_account_until_deleted(store: MemoryStore) -> None:
    s = session(store)
    made = s.call("POST", "/api/v1/account/ci/token", {"id": "ci-1", "expiresIn": 3600})
    assert made.status == 201, made.body
    token = made.body["token"]
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["sub"] == "ci:apiKey" and claims["jti"] == "ci-1" and claims["exp"] - claims["iat"] == 3600
    assert names(s, token) == ["frozen", "web"]  # `g, ci, role:team-a`
    started = s.call("POST", "/api/v1/apps/web/sync", {"dryRun": True}, token=token)
    assert started.status == 202 and started.body["operation"]["initiatedBy"] == "ci (token ci-1)"
    assert s.call("POST", "/api/v1/apps/frozen/sync", {}, token=token).status == 403
    assert s.call("GET", "/api/v1/session/userinfo", token=token).body["username"] == "ci"

    shown = s.call("GET", "/api/v1/account/ci").body
    assert shown["capabilities"] == ["apiKey"] and [t["id"] for t in shown["tokens"]] == ["ci-1"]
    assert "token" not in shown["tokens"][0]
    assert s.call("DELETE", "/api/v1/account/ci/token/ci-1").status == 200
    assert s.call("GET", "/api/v1/apps", token=token).status == 401  # the next call
    assert s.call("DELETE", "/api/v1/account/ci/token/ci-1").status == 404
    entries = s.call("GET", "/api/v1/audit").body["entries"]
    audit = [(e["subject"], e["action"], e["object"], e["allowed"]) for e in entries]
    assert ("admin", "generate-token", "ci", True) in audit and ("admin", "delete-token", "ci", True) in audit


def test_an_account_without_api_key_is_refused_a_token_by_name(store: MemoryStore) -> None:
    s = session(store)
    viewer = s.call("POST", "/api/v1/account/viewer/token", {})
    assert viewer.status == 400 and "account 'viewer' does not have apiKey capability" in viewer.body["message"]
    admin = s.call("POST", "/api/v1/account/admin/token", {})
    assert admin.status == 400 and "'admin' does not have apiKey capability" in admin.body["message"]
    off = s.call("POST", "/api/v1/account/off/token", {})
    assert off.status == 400 and "account 'off' is disabled" in off.body["message"]
    assert s.call("POST", "/api/v1/account/ghost/token", {}).status == 404
    assert tokens.listed(s.runtime, tokens.account(s.runtime, "viewer")) == []


def test_an_account_manages_its_own_tokens_and_others_need_accounts_update(store: MemoryStore) -> None:
    s = session(store)
    token = s.call("POST", "/api/v1/account/ci/token", {"id": "first"}).body["token"]
    own = s.call("POST", "/api/v1/account/ci/token", {"id": "second"}, token=token)
    assert own.status == 201  # the account itself, by its own token (Argo CD: issuer is the session manager)
    assert [a["name"] for a in s.call("GET", "/api/v1/account", token=token).body["items"]] == ["ci"]
    assert s.call("GET", "/api/v1/account/viewer", token=token).status == 403
    assert s.call("DELETE", "/api/v1/account/viewer/token/x", token=token).status == 403
    assert [a["name"] for a in s.call("GET", "/api/v1/account").body["items"]] == ["admin", "ci", "off", "viewer"]
    config = s.runtime.config()
    sso_ci = Principal("ci", via="oidc")  # an SSO user named like the account is not the account
    assert not authz.account_allowed(config, sso_ci, "update", "ci")
    assert authz.account_allowed(config, Principal("ci", via="local"), "update", "ci")  # a password login
    assert authz.account_allowed(config, Principal("helpdesk", via="oidc"), "update", "viewer")  # the policy
    assert not authz.account_allowed(config, Principal("helpdesk", via="oidc"), "update", "ci")
    entries = s.call("GET", "/api/v1/audit").body["entries"]
    assert ("ci", "get", "viewer", False, "first") in [
        (e["subject"], e["action"], e["object"], e["allowed"], e.get("tokenId", "")) for e in entries]


@pytest.mark.parametrize("change", [{"ci": Account("ci", frozenset({"login"}))},
                                    {"ci": Account("ci", frozenset({"apiKey"}), enabled=False)}, {}],
                         ids=["apiKey removed", "disabled", "undeclared"])
def test_the_next_call_is_refused_once_argocd_cm_takes_the_account_away(store: MemoryStore,
                                                                          change: dict[str, Account]) -> None:
    token = session(store).call("POST", "/api/v1/account/ci/token", {}).body["token"]
    assert session(store).call("GET", "/api/v1/apps", token=token).status == 200
    assert session(store, change).call("GET", "/api/v1/apps", token=token).status == 401
    assert session(store).call("GET", "/api/v1/apps", token=token).status == 200  # given back: it works again


def test_a_forged_or_expired_account_token_is_refused(store: MemoryStore) -> None:
    s = session(store)
    s.call("POST", "/api/v1/account/ci/token", {"id": "ci-1"})
    forged = jwt.encode({"sub": "ci:apiKey", "iat": 1, "jti": "ci-1", "iss": "tidecd"}, "g" * 32, algorithm="HS256")
    assert s.call("GET", "/api/v1/apps", token=forged).status == 401
    expired = s.call("POST", "/api/v1/account/ci/token", {"id": "short", "expiresIn": 0.001}).body["token"]
    assert tokens.verify(s.runtime, expired) is None
    login_subject = jwt.encode({"sub": "ci", "iat": 1, "jti": "ci-1", "iss": "tidecd"},
                               tokens._key(s.runtime), algorithm="HS256")  # noqa: SLF001 - the real key, a wrong subject
    assert tokens.verify(s.runtime, login_subject) is None
