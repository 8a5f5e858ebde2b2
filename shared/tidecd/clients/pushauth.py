"""Who sent a Pub/Sub push: the OIDC token Pub/Sub signs each push request with, verified here.

The webhook function is public (GitHub and registries cannot send Google ID tokens), so Cloud Run's IAM
does not check the token of a Pub/Sub push that reaches it; this module does, for the pushes the webhook
takes (Artifact Registry's `gcr` topic, the audit-log sink). A push subscription configured with
`oidc_token { service_account_email, audience }` sends `Authorization: Bearer <JWT>`; the JWT is accepted
when its RS256 signature verifies against Google's published keys, `iss` is Google's, `aud` is the
configured audience, `email` is the configured push service account with `email_verified`, and it has not
expired (10 s of clock skew). Anything else is refused with a reason that never contains the token.

Google's keys (`TIDECD_GOOGLE_CERTS_URL`, by default Google's v1 certs: key id → PEM certificate) are
fetched at most once an hour per process, with a timeout and a size cap; a key id not among them fetches
once more (keys rotate). Tests point the URL at a local server with their own key.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidecd.base.errors import PermanentError, TemporaryError

GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
ISSUERS = ("accounts.google.com", "https://accounts.google.com")
CERTS_TTL = 3600.0
CERTS_TIMEOUT = 5.0
MAX_CERTS_BYTES = 256 * 1024
MAX_TOKEN_BYTES = 8 * 1024
CLOCK_SKEW = 10

_lock = threading.Lock()
_cache: dict[str, tuple[float, dict[str, str]]] = {}


class PushRefused(PermanentError):
    """The push is not from the configured Pub/Sub subscription; the message says why (no token in it)."""


@dataclass(frozen=True)
class PushIdentity:
    """What a push must prove: the audience its subscription signs for, and the service account it uses."""

    audience: str
    service_account: str

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PushIdentity:
        env = os.environ if env is None else env
        return cls(env.get("TIDECD_PUSH_AUDIENCE", "").strip(), env.get("TIDECD_PUSH_SERVICE_ACCOUNT", "").strip())


def verify(headers: Mapping[str, str], identity: PushIdentity, *, certs_url: str | None = None) -> dict[str, Any]:
    """The verified claims of the push's token; PushRefused when it is missing, forged, expired or not ours."""
    if not identity.audience or not identity.service_account:
        raise PushRefused("Pub/Sub push authentication is not configured (TIDECD_PUSH_AUDIENCE and "
                          "TIDECD_PUSH_SERVICE_ACCOUNT): every push is refused")
    lowered = {k.lower(): v for k, v in headers.items()}
    scheme, _, token = lowered.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise PushRefused("missing Authorization: Bearer header (set oidc_token on the push subscription)")
    if len(token) > MAX_TOKEN_BYTES:
        raise PushRefused(f"the push's token is longer than {MAX_TOKEN_BYTES} bytes")
    url = certs_url or os.environ.get("TIDECD_GOOGLE_CERTS_URL", "") or GOOGLE_CERTS_URL
    claims = _decode(token, url, identity.audience)
    if claims.get("iss") not in ISSUERS:
        raise PushRefused("the push's token was not issued by Google")
    if claims.get("email") != identity.service_account or claims.get("email_verified") is not True:
        raise PushRefused("the push's token names another service account than TIDECD_PUSH_SERVICE_ACCOUNT")
    return claims


class NotAnEnvelope(PermanentError):
    """A push body that is not a Pub/Sub push envelope; the message names the field."""


def message_data(body: bytes) -> bytes:
    """The `message.data` (base64-decoded) of a Pub/Sub push envelope (`{"message": {"data": ...}}`): the
    one reading of it, for every route a subscription pushes to."""
    try:
        envelope = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise NotAnEnvelope(f"body is not valid JSON: {getattr(exc, 'msg', type(exc).__name__)}") from None
    message = envelope.get("message") if isinstance(envelope, dict) else None
    if not isinstance(message, dict) or not isinstance(message.get("data"), str):
        raise NotAnEnvelope("Pub/Sub push: field `message.data` is missing (not a push envelope)")
    try:
        return base64.b64decode(message["data"], validate=True)
    except (binascii.Error, ValueError):
        raise NotAnEnvelope("Pub/Sub push: field `message.data` is not base64") from None


def _decode(token: str, url: str, audience: str) -> dict[str, Any]:
    # lazy: cold start (google-auth's jwt and cryptography only when a push arrives)
    from google.auth import exceptions, jwt

    key_id = _key_id(token)
    certs = _certs(url, refresh=False)
    if key_id not in certs:
        certs = _certs(url, refresh=True)  # Google rotated its keys since we fetched them
    try:
        claims: dict[str, Any] = jwt.decode(  # type: ignore[no-untyped-call]
            token, certs=certs, audience=audience, clock_skew_in_seconds=CLOCK_SKEW)
    except (ValueError, exceptions.GoogleAuthError) as exc:
        reason = str(exc).split(":")[0][:120]  # google-auth's messages may quote the token's claims: cut
        raise PushRefused(f"the push's token does not verify ({reason})") from None
    return claims


def _key_id(token: str) -> str:
    """The `kid` of the token's header (unverified: it only picks which of Google's keys to verify with)."""
    header = token.split(".", 1)[0]
    try:
        doc = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors
        raise PushRefused("the push's token is not a JWT") from None
    if not isinstance(doc, dict) or token.count(".") != 2:
        raise PushRefused("the push's token is not a JWT")
    return str(doc.get("kid", ""))


def _certs(url: str, *, refresh: bool) -> dict[str, str]:
    """Key id → PEM certificate, from cache when fresh; TemporaryError when Google cannot be reached."""
    import requests  # lazy: cold start

    now = time.monotonic()
    with _lock:
        cached = _cache.get(url)
        if cached is not None and not refresh and now - cached[0] < CERTS_TTL:
            return cached[1]
    try:
        with requests.get(url, timeout=CERTS_TIMEOUT, stream=True) as response:
            response.raise_for_status()
            body = response.raw.read(MAX_CERTS_BYTES + 1, decode_content=True)
    except requests.RequestException as exc:
        raise TemporaryError(f"Google's token keys could not be fetched ({type(exc).__name__})") from None
    if len(body) > MAX_CERTS_BYTES:
        raise TemporaryError(f"Google's token keys are larger than {MAX_CERTS_BYTES} bytes")
    try:
        doc = json.loads(body)
    except ValueError:
        raise TemporaryError("Google's token keys are not JSON") from None
    if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
        raise TemporaryError("Google's token keys are not a map of key id to certificate")
    certs = {str(k): v for k, v in doc.items()}
    with _lock:
        _cache[url] = (now, certs)
    return certs
