"""Tokens the migrated Argo CD issued keep working in tidecd, checked as Argo CD's session manager checks
them (`usecases.tokens.issued_by_argocd`): signed with argocd-secret's `server.secretkey`, unexpired, and
still listed (a project role's `spec.roles[].jwtTokens`, by id or, without one, by iat; an account's
argocd-secret `accounts.NAME.tokens`). Each token here is made as Argo CD's `sessionmanager.Create` makes
one: HS256, issuer `argocd`, `sub`, `iat`, `nbf`, `jti`, and `exp` when it expires.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import jwt
import pytest

from tests.unit.test_account_tokens import session
from tests.unit.test_openapi import Session
from tidecd.clients.store import MemoryStore
from tidecd.config.load import AppProject
from tidecd.config.rbac import IssuedToken, ProjectRole
from tidecd.usecases import tokens

SERVER_KEY = "argo-server-secret-key-of-the-old-install"
NOW = int(time.time())
ROLE = ProjectRole(name="ci", policies=("p, proj:team-a:ci, applications, get, team-a/*, allow",
                                        "p, proj:team-a:ci, applications, sync, team-a/web, allow"),
                   jwt_tokens=(IssuedToken(iat=NOW - 100, id="p-1"), IssuedToken(iat=NOW - 50)))


def argo_token(sub: str, *, jti: str = "", iat: int = NOW - 100, exp: int = 0, key: str = SERVER_KEY) -> str:
    claims: dict[str, Any] = {"iss": "argocd", "sub": sub, "iat": iat, "nbf": iat}
    if jti:
        claims["jti"] = jti
    if exp:
        claims["exp"] = exp
    return jwt.encode(claims, key.encode(), algorithm="HS256")


def migrated(store: MemoryStore, secret: dict[str, str] | None = None) -> Session:
    s = session(store)
    config = s.runtime.config()
    projects = dict(config.projects) | {"team-a": replace(AppProject(name="team-a"), roles=(ROLE,))}
    s.runtime._config = replace(config, projects=projects)  # noqa: SLF001 - the project with its Argo CD role
    s.runtime._argocd_secret = secret if secret is not None else {  # noqa: SLF001 - as opened from the sealed secret
        "server.secretkey": SERVER_KEY,
        "accounts.ci.tokens": json.dumps([{"id": "acc-1", "iat": NOW - 10, "exp": 0}])}
    return s


@pytest.fixture()
def store() -> MemoryStore:
    return MemoryStore()


def test_a_listed_project_token_acts_with_the_roles_policies(store: MemoryStore) -> None:
    s = migrated(store)
    by_id = argo_token("proj:team-a:ci", jti="p-1")
    assert [a["name"] for a in s.call("GET", "/api/v1/apps", token=by_id).body["apps"]] == ["frozen", "web"]
    started = s.call("POST", "/api/v1/apps/web/sync", {"dryRun": True}, token=by_id)
    assert started.status == 202 and "proj:team-a:ci" in started.body["operation"]["initiatedBy"]
    assert s.call("POST", "/api/v1/apps/frozen/sync", {}, token=by_id).status == 403  # not in the role's policy
    by_iat = argo_token("proj:team-a:ci", iat=NOW - 50)  # an older token without an id: found by its iat
    assert s.call("GET", "/api/v1/apps", token=by_iat).status == 200


@pytest.mark.parametrize("token", [
    argo_token("proj:team-a:ci", jti="p-2"),  # not listed: revoked by deleting it from git
    argo_token("proj:team-a:ci", iat=NOW - 51),  # no id, and no entry with its iat
    argo_token("proj:team-a:ci", jti="p-1", key="another-key"),  # forged
    argo_token("proj:team-a:ci", jti="p-1", exp=NOW - 1),  # expired
    argo_token("proj:team-a:admin", jti="p-1"),  # no such role
    argo_token("proj:team-b:ci", jti="p-1"),  # no such project
    argo_token("admin", jti="p-1"),  # a login session of Argo CD's: not an API token
], ids=["unlisted", "unlisted-iat", "forged", "expired", "no-role", "no-project", "session"])
def test_an_unlisted_forged_or_expired_argocd_token_is_refused(store: MemoryStore, token: str) -> None:
    assert migrated(store).call("GET", "/api/v1/apps", token=token).status == 401


def test_an_account_token_is_accepted_while_argocd_secret_lists_it(store: MemoryStore) -> None:
    s = migrated(store)
    listed = argo_token("ci:apiKey", jti="acc-1", iat=NOW - 10)
    assert s.call("GET", "/api/v1/session/userinfo", token=listed).body["username"] == "ci"
    assert s.call("GET", "/api/v1/apps", token=argo_token("ci:apiKey", jti="acc-2")).status == 401
    off = argo_token("off:apiKey", jti="acc-1")  # a disabled account's token is refused, listed or not
    assert tokens.issued_by_argocd(s.runtime, off) is None


def test_without_server_secretkey_no_argocd_token_is_accepted(store: MemoryStore) -> None:
    s = migrated(store, secret={})
    assert s.call("GET", "/api/v1/apps", token=argo_token("proj:team-a:ci", jti="p-1")).status == 401
