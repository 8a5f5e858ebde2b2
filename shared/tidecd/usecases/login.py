"""Logging in: a local account's password, the OIDC authorization code flow, and ID tokens as bearers.

The one implementation the dashboard (`tidecd.ui.sso`), the api and `tidecd login` share. Each answers a
`Principal` (who: subject and groups) or raises `LoginRefused` with a message safe to show: it never says
whether an account exists and never includes a password, code or token.

- Local accounts, as Argo CD has them: the builtin `admin` (unless argocd-cm says `admin.enabled: "false"`)
  and `accounts.NAME` with the `login` capability; the bcrypt hashes are the sealed argocd-secret's
  `admin.password` and `accounts.NAME.password`.
- OIDC (argocd-cm `oidc.config`): the function keeps nothing between the redirect to the issuer and the
  callback. The state is random and travels in a signed cookie (`tidecd.ui.sso`); the nonce and the PKCE
  verifier are HMACs of the state under the session key, so only this installation can compute them again.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tidecd.base.errors import ConfigError, TidecdError
from tidecd.base.principal import Principal
from tidecd.clients import oidc
from tidecd.clients.oidc import LoginRefused

if TYPE_CHECKING:
    from tidecd.config.sso import OidcConfig, SsoSettings
    from tidecd.runtime import Runtime

__all__ = ["LoginRefused", "Started", "bearer", "finish_oidc", "local", "oidc_config", "server_secret",
           "start_oidc"]

MAX_PASSWORD = 72  # bcrypt's limit, in bytes
WRONG = "Invalid username or password."  # the same words for every refusal: no account enumeration


@functools.cache
def _dummy_hash() -> bytes:
    """Compared against when the account does not exist, so a refusal takes as long either way."""
    import bcrypt  # lazy: cold start (password logins only)

    return bcrypt.hashpw(b"no such account", bcrypt.gensalt(10))


def sso(runtime: Runtime) -> SsoSettings:
    return runtime.config().argo_settings.sso


def server_secret(runtime: Runtime) -> str:
    """argocd-secret's `server.secretkey`: a session signing key. "" without a sealed argocd-secret, or
    when it cannot be opened (the token logins go on working; a password or SSO login says why)."""
    if sso(runtime).sealed_secret is None:
        return ""
    try:
        return runtime.argocd_secret().get("server.secretkey", "")
    except TidecdError:
        return ""


def local(runtime: Runtime, username: str, password: str) -> Principal:
    """The local account `username`, when `password` matches its bcrypt hash in argocd-secret."""
    import bcrypt  # lazy: cold start (password logins only)

    settings = sso(runtime)
    name = username.strip()
    account = settings.account(name) if 0 < len(name) <= 64 else None
    stored = ""
    if account is not None and settings.sealed_secret is not None:
        stored = runtime.argocd_secret().get(settings.password_key(name), "")
    given = password.encode()
    well_formed = stored.startswith(("$2a$", "$2b$", "$2y$")) and len(given) <= MAX_PASSWORD
    try:
        matches = bcrypt.checkpw(given[:MAX_PASSWORD], stored.encode() if well_formed else _dummy_hash())
    except ValueError:  # a malformed hash in argocd-secret: refused like a wrong password
        matches = False
    if not (matches and well_formed and account is not None):
        raise LoginRefused(WRONG)
    return Principal(name, (), via="local")


def oidc_config(runtime: Runtime) -> OidcConfig:
    found = sso(runtime).oidc
    if found is None:
        raise ConfigError("single sign-on is not configured: argocd-cm has no (valid) oidc.config")
    return found


def _client_secret(runtime: Runtime, config: OidcConfig) -> str:
    if not config.client_secret_key:
        return ""
    settings = sso(runtime)
    if settings.sealed_secret is None:
        raise ConfigError(f"argocd-cm oidc.config: clientSecret: ${config.client_secret_key} names a key of "
                          "argocd-secret, but the config source has no SealedSecret argocd-secret")
    value = runtime.argocd_secret().get(config.client_secret_key)
    if not value:
        raise ConfigError(f"argocd-cm oidc.config: clientSecret: ${config.client_secret_key}: "
                          f"{settings.secret_origin}: SealedSecret/argocd-secret has no key "
                          f"{config.client_secret_key!r}")
    return value


def _proof(key: bytes, state: str) -> oidc.Login:
    nonce = hmac.new(key, f"nonce:{state}".encode(), hashlib.sha256).hexdigest()
    return oidc.Login(state, nonce, oidc.pkce_verifier(key, state))


@dataclass(frozen=True)
class Started:
    url: str  # where to send the browser
    state: str  # to keep in the browser (a signed cookie) until the callback


def start_oidc(runtime: Runtime, redirect_uri: str, key: bytes, *, cli: bool = False) -> Started:
    """The issuer's authorization URL for a new login (code flow, PKCE S256, state, nonce)."""
    config = oidc_config(runtime)
    state = secrets.token_urlsafe(24)
    client = config.cli_client_id or config.client_id if cli else config.client_id
    url = oidc.authorization_url(oidc.provider(config.issuer), client, redirect_uri, config.requested_scopes,
                                 _proof(key, state), groups_essential=config.groups_essential)
    return Started(url, state)


def finish_oidc(runtime: Runtime, redirect_uri: str, key: bytes, state: str, code: str) -> tuple[Principal, int]:
    """Who the issuer says logged in, and when their ID token expires, for the callback's code. The state
    has been checked against the browser's cookie by the caller."""
    config = oidc_config(runtime)
    proof = _proof(key, state)
    found = oidc.provider(config.issuer)
    id_token = oidc.exchange(found, config.client_id, _client_secret(runtime, config), redirect_uri, code,
                             proof.verifier)
    claims = oidc.verify(config.issuer, id_token, config.audiences, nonce=proof.nonce)
    return oidc.principal(claims, _scopes(runtime)), _expiry(claims)


def _scopes(runtime: Runtime) -> tuple[str, ...]:
    """argocd-rbac-cm's `scopes`: the ID token claims whose values are the person's groups."""
    return runtime.config().argo_settings.rbac.scopes


def _expiry(claims: dict[str, Any]) -> int:
    exp = claims.get("exp")
    return int(exp) if isinstance(exp, int | float) else 0


def bearer(runtime: Runtime, token: str) -> Principal | None:
    """The person an ID token of the configured issuer names (the CLI after `tidecd login --sso`), or None
    when SSO is off or the token is not a JWT at all; `LoginRefused` when it is one and fails a check."""
    config = sso(runtime).oidc
    if config is None or token.count(".") != 2:
        return None
    return oidc.principal(oidc.verify(config.issuer, token.strip(), config.audiences), _scopes(runtime))
