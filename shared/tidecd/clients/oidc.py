"""The OIDC issuer (Dex, or any other): discovery, the authorization URL (code flow with PKCE), the code
exchange, and the ID token's validation.

One client for the dashboard's login, `tidecd login --sso` and the api's bearer ID tokens, so the three
accept exactly the same tokens. The protocol work is authlib's (`OAuth2Session`: PKCE S256, the token
request) and joserfc's (authlib's JOSE library: the signature against the issuer's JWKS and the registered
claims); nothing here parses or signs a JWT by hand. What this module adds is the policy: the discovery
document must name the configured issuer, an ID token must carry `iss`, `aud` (one of the accepted
audiences), `exp` and, for a login, the nonce the login sent; the groups are the claims argocd-rbac-cm's
`scopes` names. Every
answer is read with a timeout and a size cap, and the discovery document and keys are kept for five
minutes per warm instance (a key the token names and the cache lacks is fetched again once: rotation).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from tidecd.base.errors import PermanentError, TemporaryError
from tidecd.base.principal import Principal
from tidecd.config import rbac

TIMEOUT = 10.0  # seconds per request to the issuer
MAX_BODY = 512 * 1024  # a discovery document, key set or token answer larger than this is refused
CACHE_SECONDS = 300.0
MAX_GROUPS = 100  # groups kept from a token (the session cookie carries them)
MAX_NAME = 256
LEEWAY = 60  # seconds of clock skew allowed on exp/iat
ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "EdDSA"]


class LoginRefused(PermanentError):
    """An OIDC answer or ID token that does not prove who the caller is (never includes the token)."""


class IssuerUnavailable(TemporaryError):
    """The OIDC issuer could not be reached or answered an error."""


@dataclass(frozen=True)
class Provider:
    """What the issuer's discovery document says (`/.well-known/openid-configuration`)."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str


@dataclass(frozen=True)
class Login:
    """One login's proof: the verifier is derived by the caller (see `tidecd.usecases.login`)."""

    state: str
    nonce: str
    verifier: str


_LOCK = threading.Lock()
_PROVIDERS: dict[str, tuple[float, Provider]] = {}
_KEYS: dict[str, tuple[float, Any]] = {}


def forget() -> None:
    """Fetch discovery documents and keys again (tests rotate an issuer's keys)."""
    with _LOCK:
        _PROVIDERS.clear()
        _KEYS.clear()


def _get(url: str, what: str) -> dict[str, Any]:
    import requests  # lazy: cold start (only a login or an ID token reaches the issuer)

    try:
        with requests.get(url, timeout=TIMEOUT, stream=True, headers={"Accept": "application/json"}) as resp:
            body = resp.raw.read(MAX_BODY + 1, decode_content=True)
    except requests.RequestException as exc:
        raise IssuerUnavailable(f"the OIDC issuer's {what} ({url}) cannot be reached: {type(exc).__name__}",
                                delay=30) from None
    if resp.status_code != 200:
        raise IssuerUnavailable(f"the OIDC issuer's {what} ({url}) answered {resp.status_code}", delay=30)
    return _json(body, f"the OIDC issuer's {what} ({url})")


def _json(body: bytes, what: str) -> dict[str, Any]:
    if len(body) > MAX_BODY:
        raise LoginRefused(f"{what} is larger than {MAX_BODY} bytes")
    try:
        doc = json.loads(body)
    except ValueError:
        raise LoginRefused(f"{what} is not JSON") from None
    if not isinstance(doc, dict):
        raise LoginRefused(f"{what} is not a JSON object")
    return doc


def provider(issuer: str) -> Provider:
    """The issuer's endpoints; its discovery document must name this exact issuer (OIDC Discovery 4.3)."""
    now = time.monotonic()
    with _LOCK:
        cached = _PROVIDERS.get(issuer)
    if cached and now - cached[0] < CACHE_SECONDS:
        return cached[1]
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    doc = _get(url, "discovery document")
    fields = {}
    for name in ("issuer", "authorization_endpoint", "token_endpoint", "jwks_uri"):
        value = doc.get(name)
        if not isinstance(value, str) or not value.startswith(("https://", "http://")):
            raise LoginRefused(f"the OIDC issuer's discovery document ({url}): {name}: expected a URL")
        fields[name] = value
    if fields["issuer"].rstrip("/") != issuer.rstrip("/"):
        raise LoginRefused(f"the OIDC issuer's discovery document ({url}) names issuer {fields['issuer']!r}, "
                           f"not the configured {issuer!r} (oidc.config issuer)")
    found = Provider(**fields)
    with _LOCK:
        if len(_PROVIDERS) > 8:
            _PROVIDERS.clear()
        _PROVIDERS[issuer] = (now, found)
    return found


def _keys(found: Provider, *, fresh: bool = False) -> Any:
    from joserfc.jwk import KeySet  # lazy: cold start (JOSE only when a token is checked)

    now = time.monotonic()
    with _LOCK:
        cached = _KEYS.get(found.jwks_uri)
    if cached and not fresh and now - cached[0] < CACHE_SECONDS:
        return cached[1]
    doc = _get(found.jwks_uri, "key set")
    try:
        keys = KeySet.import_key_set(doc)  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 - any malformed key set is the issuer's fault, named as such
        raise LoginRefused(f"the OIDC issuer's key set ({found.jwks_uri}) cannot be read: {type(exc).__name__}") \
            from None
    with _LOCK:
        if len(_KEYS) > 8:
            _KEYS.clear()
        _KEYS[found.jwks_uri] = (now, keys)
    return keys


def pkce_verifier(secret: bytes, state: str) -> str:
    """A PKCE code verifier (RFC 7636: 43-128 characters) derived from a server secret and the state, so a
    stateless function need not store it: only the holder of the secret can compute it again."""
    return base64.urlsafe_b64encode(hmac.new(secret, f"pkce:{state}".encode(), hashlib.sha256).digest() * 2) \
        .decode().rstrip("=")


def authorization_url(found: Provider, client_id: str, redirect_uri: str, scopes: tuple[str, ...], login: Login,
                      *, groups_essential: bool = False) -> str:
    """Where to send the browser: the authorization code flow with PKCE (S256), the state and the nonce."""
    from authlib.integrations.requests_client import OAuth2Session  # lazy: cold start (logins only)

    extra: dict[str, str] = {"nonce": login.nonce}
    if groups_essential:  # Argo CD's requestedIDTokenClaims, sent as the OIDC `claims` parameter
        extra["claims"] = json.dumps({"id_token": {"groups": {"essential": True}}}, separators=(",", ":"))
    with OAuth2Session(client_id, scope=" ".join(scopes), redirect_uri=redirect_uri,
                       code_challenge_method="S256") as session:
        url, _ = session.create_authorization_url(found.authorization_endpoint, state=login.state,
                                                  code_verifier=login.verifier, **extra)
    return str(url)


def exchange(found: Provider, client_id: str, client_secret: str, redirect_uri: str, code: str,
             verifier: str) -> str:
    """The ID token the issuer gives for an authorization code (and its PKCE verifier)."""
    # lazy: cold start (authlib and requests only for a login)
    from authlib.integrations.base_client.errors import OAuthError
    from authlib.integrations.requests_client import OAuth2Session
    from requests import RequestException

    method = "client_secret_basic" if client_secret else "none"
    with OAuth2Session(client_id, client_secret or None, redirect_uri=redirect_uri,
                       token_endpoint_auth_method=method, default_timeout=TIMEOUT) as session:
        try:
            token = session.fetch_token(found.token_endpoint, grant_type="authorization_code", code=code,
                                        code_verifier=verifier)
        except OAuthError as exc:
            raise LoginRefused(f"the OIDC issuer refused the authorization code: {exc.error}") from None
        except RequestException as exc:
            raise IssuerUnavailable(f"the OIDC issuer's token endpoint cannot be reached: {type(exc).__name__}",
                                    delay=30) from None
        except ValueError:
            raise LoginRefused("the OIDC issuer's token answer is not JSON") from None
    id_token = token.get("id_token") if isinstance(token, dict) else None
    if not isinstance(id_token, str) or not id_token or len(id_token) > MAX_BODY:
        raise LoginRefused("the OIDC issuer's token answer has no id_token (is `openid` among requestedScopes?)")
    return id_token


def verify(issuer: str, id_token: str, audiences: tuple[str, ...], *, nonce: str | None = None,
           now: int | None = None) -> dict[str, Any]:
    """The claims of an ID token whose signature verifies against the issuer's keys and whose iss, aud and
    exp (and nonce, when given) are right; `LoginRefused` naming what is wrong, never the token itself."""
    # lazy: cold start (JOSE only when a token is checked)
    from joserfc import jwt
    from joserfc.errors import BadSignatureError, JoseError

    if len(id_token) > MAX_BODY or id_token.count(".") != 2:
        raise LoginRefused("the ID token is not a signed JWT")
    found = provider(issuer)
    try:
        try:
            token = jwt.decode(id_token, _keys(found), algorithms=ALGORITHMS)
        except (ValueError, BadSignatureError):  # a key the cache does not hold yet (rotation): fetch once more
            token = jwt.decode(id_token, _keys(found, fresh=True), algorithms=ALGORITHMS)
        options: dict[str, Any] = {"iss": {"essential": True, "value": found.issuer},
                                   "aud": {"essential": True, "values": list(audiences)},
                                   "exp": {"essential": True}, "sub": {"essential": True}}
        if nonce is not None:
            options["nonce"] = {"essential": True, "value": nonce}
        jwt.JWTClaimsRegistry(now=now, leeway=LEEWAY, **options).validate(token.claims)
    except JoseError as exc:
        raise LoginRefused(f"the ID token is not accepted: {exc.error}"
                           + (f" ({exc.description})" if exc.description else "")) from None
    except ValueError:
        raise LoginRefused("the ID token is not accepted: it cannot be decoded") from None
    claims: dict[str, Any] = dict(token.claims)
    return claims


def principal(claims: dict[str, Any], scopes: tuple[str, ...] = ("groups",)) -> Principal:
    """Who the ID token names: the subject is its email (else preferred_username, else sub); the groups are
    the values of the claims argocd-rbac-cm's `scopes` names (default `[groups]`), as Argo CD's
    `GetScopeValues` reads them."""
    groups = rbac.groups_of(claims, scopes)
    if len(groups) > MAX_GROUPS or any(len(g) > MAX_NAME for g in groups):
        raise LoginRefused(f"the ID token carries more than {MAX_GROUPS} groups, or a group name longer than "
                           f"{MAX_NAME} characters")
    subject = ""
    for name in ("email", "preferred_username", "sub"):
        value = claims.get(name)
        if isinstance(value, str) and value.strip():
            subject = value.strip()
            break
    if not subject or len(subject) > MAX_NAME:
        raise LoginRefused("the ID token names no subject (email, preferred_username or sub)")
    return Principal(subject, tuple(dict.fromkeys(groups)), via="oidc")
