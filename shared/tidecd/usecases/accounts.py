"""Local accounts and their API keys, as Argo CD's account service has them: `tidecd account ...`.

    GET    /account                    the accounts the caller may `get` (the builtin admin and argocd-cm's)
    GET    /account/NAME               one account: enabled, capabilities, its tokens (id, issued, expires)
    POST   /account/NAME/token         a new token of an account with the `apiKey` capability: shown once
    DELETE /account/NAME/token/ID      revoke it: the next call made with it is refused
    GET    /session/userinfo           who the caller is (`tidecd account generate-token` without --account)

Gated as Argo CD gates them: the account itself, logged in locally, may; anyone else needs `accounts, get`
or `accounts, update` on the account's name (`tidecd.usecases.authz.account_allowed`). The tokens are
`tidecd.usecases.tokens`', the one implementation project roles use too. Registered on
`tidecd.usecases.api`'s table when that module loads (it imports this one last).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tidecd.base.errors import NotFound
from tidecd.base.model import Response
from tidecd.base.principal import ADMIN_SUBJECT
from tidecd.config.sso import Account
from tidecd.runtime import Runtime
from tidecd.usecases import api, authz, tokens

_NAME = "(?P<name>[A-Za-z0-9._-]{1,64})"


def _accounts(runtime: Runtime) -> dict[str, Account]:
    """Every local account, as Argo CD's `GetAccounts` lists them: the builtin admin (login; enabled unless
    `admin.enabled: "false"`) and each `accounts.NAME` of argocd-cm."""
    sso = runtime.config().argo_settings.sso
    return {ADMIN_SUBJECT: Account(ADMIN_SUBJECT, frozenset({"login"}), sso.admin_enabled), **sso.accounts}


def _shown(runtime: Runtime, account: Account) -> dict[str, Any]:
    """An account as the api shows it (Argo CD's `toAPIAccount`): its tokens newest first, never a token."""
    held = tokens.listed(runtime, tokens.account(runtime, account.name)) if account.name in \
        runtime.config().argo_settings.sso.accounts else []
    return {"name": account.name, "enabled": account.enabled, "capabilities": sorted(account.capabilities),
            "tokens": sorted(held, key=lambda t: -int(t.get("iat", 0)))}


@api.route("GET", "/account")
def listed(runtime: Runtime, _: str, __: dict[str, Any], ___: Mapping[str, str]) -> Response:
    config, who = runtime.config(), api.principal()
    items = [_shown(runtime, a) for name, a in sorted(_accounts(runtime).items())
             if authz.account_allowed(config, who, "get", name)]
    return Response(200, {"items": items})


@api.route("GET", f"/account/{_NAME}")
def get(runtime: Runtime, name: str, _: dict[str, Any], __: Mapping[str, str]) -> Response:
    authz.require_account(runtime, api.principal(), "get", name)
    found = _accounts(runtime).get(name)
    if found is None:
        raise NotFound(f"account {name!r} not found (argocd-cm declares accounts.NAME)")
    return Response(200, _shown(runtime, found))


@api.route("POST", f"/account/{_NAME}/token", body="TokenRequest")
def generate(runtime: Runtime, name: str, payload: dict[str, Any], _: Mapping[str, str]) -> Response:
    """A new API key of the account (Argo CD's `account generate-token`): shown once, in this answer only."""
    authz.require_account(runtime, api.principal(), "update", name)
    holder = tokens.account(runtime, name, issuing=True)
    token, record = tokens.create(runtime, holder, expires_in=float(payload.get("expiresIn", 0)),
                                  token_id=str(payload.get("id", "")))
    authz.done(runtime, api.principal(), authz.ACCOUNTS, "generate-token", name, f"token {record['id']}")
    return Response(201, {"account": name, "token": token, **record})


@api.route("DELETE", "/account/(?P<name>[A-Za-z0-9._-]{1,64}/token/[A-Za-z0-9._-]{1,64})")
def delete(runtime: Runtime, name: str, _: dict[str, Any], __: Mapping[str, str]) -> Response:
    """Revoke one of the account's tokens by its id: the next call made with it is refused."""
    account, token_id = name.split("/token/")
    authz.require_account(runtime, api.principal(), "update", account)
    record = tokens.revoke(runtime, tokens.account(runtime, account), token_id)
    authz.done(runtime, api.principal(), authz.ACCOUNTS, "delete-token", account, f"token {record['id']}")
    return Response(200, {"account": account, "revoked": record})


@api.route("GET", "/session/userinfo")
def userinfo(_: Runtime, __: str, ___: dict[str, Any], ____: Mapping[str, str]) -> Response:
    """Who the caller is, as Argo CD's `session/userinfo` answers it (never how it proved it)."""
    who = api.principal()
    return Response(200, {"loggedIn": True, "username": who.subject, "groups": list(who.groups)})
