"""Who is asking, and may they act: sessions, roles, CSRF and same-origin checks for the dashboard.

Two tokens exist: the api token (role `admin`: may sync, refresh, roll back, terminate) and the optional
read-only token (role `read`: sees everything a page shows, acts on nothing). A caller proves one of them
with a bearer header, or once through the login form, which sets a session cookie. People also log in
through the OIDC issuer of argocd-cm's `oidc.config`, or as a local account (`admin`, `accounts.NAME`)
with a password (`tidecd.usecases.login`); their session carries who they are (a `Principal`: subject and
the groups of their ID token). Until argocd-rbac-cm decides what a person may do, a local `admin` session
acts and every other person's session reads.

The function is stateless, so a session is a signed cookie, not a server-side record:
`v2.<base64url JSON: role, subject, groups, via, expiry, nonce>.<hmac>`, HttpOnly, SameSite=Strict,
Secure over https, at most 12 hours (an SSO session ends when its ID token does, if sooner). The signing
key is derived from both tokens and the sealed argocd-secret's `server.secretkey`, so rotating any of them
ends every session. Every action (any POST) must pass `check_action`: the request's Origin (or Referer)
must be this host, a cross-site `Sec-Fetch-Site` is refused, and a cookie session must echo its CSRF
token (a hidden form field or `X-CSRF-Token`), which is an HMAC of the session nonce. All comparisons are
constant-time.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from tidecd.base.principal import ADMIN, READONLY, Principal

COOKIE = "tidecd_session"
SESSION_SECONDS = 12 * 3600
MAX_COOKIE = 3800  # browsers keep 4096 bytes per cookie; a session that would not fit is refused
MAX_GROUPS = 100


class Role(enum.StrEnum):
    ADMIN = "admin"
    READ = "read"

    @property
    def can_act(self) -> bool:
        return self is Role.ADMIN


@dataclass(frozen=True)
class Identity:
    role: Role
    via: str  # "session" or "bearer"
    csrf: str = ""  # the session's CSRF token ("" for bearer callers, who need none)
    principal: Principal = READONLY  # who: the subject and groups (shown on every page)


@dataclass(frozen=True)
class Tokens:
    admin: str
    read: str = ""
    secret: str = ""  # argocd-secret's server.secretkey: signs sessions when no token is set (SSO only)

    def role_of(self, given: str) -> Role | None:
        """The role a presented token grants, checked in constant time against both tokens."""
        given_b = given.strip().encode()
        is_admin = bool(self.admin) and hmac.compare_digest(given_b, self.admin.encode())
        is_read = bool(self.read) and hmac.compare_digest(given_b, self.read.encode())
        if not given_b:
            return None
        if is_admin:
            return Role.ADMIN
        return Role.READ if is_read else None

    @property
    def can_sign(self) -> bool:
        return bool(self.admin or self.read or self.secret)

    def key(self) -> bytes:
        material = f"{self.admin}\0{self.read}\0{self.secret}".encode()
        return hmac.new(b"tidecd-ui-session-v2", material, hashlib.sha256).digest()


def _sign(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def csrf_token(tokens: Tokens, nonce: str) -> str:
    return _sign(tokens.key(), f"csrf:{nonce}")


def token_principal(role: Role) -> Principal:
    """The subject a shared token acts as: `admin`, or `readonly` for the read-only token."""
    return ADMIN if role is Role.ADMIN else READONLY


def new_session(tokens: Tokens, role: Role, principal: Principal | None = None, *, now: float | None = None,
                expires: float | None = None) -> str:
    """A signed session cookie value for `principal` (the token's subject when None), ending at
    `expires` or after SESSION_SECONDS, whichever is sooner."""
    start = time.time() if now is None else now
    until = int(min(start + SESSION_SECONDS, expires if expires is not None else start + SESSION_SECONDS))
    who = principal or token_principal(role)
    payload = {"r": role.value, "s": who.subject, "g": list(who.groups[:MAX_GROUPS]), "v": who.via, "e": until,
               "n": secrets.token_hex(16)}
    body = "v2." + base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode().rstrip("=")
    return f"{body}.{_sign(tokens.key(), body)}"


def read_session(tokens: Tokens, cookie: str, *, now: float | None = None) -> Identity | None:
    """The identity a session cookie carries, or None when it is forged, stale or from old keys."""
    if not tokens.can_sign or len(cookie) > MAX_COOKIE:
        return None
    body, _, signature = cookie.rpartition(".")
    if not hmac.compare_digest(_sign(tokens.key(), body).encode(), signature.encode()):
        return None
    version, _, encoded = body.partition(".")
    try:
        payload = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
        role, subject, groups = Role(payload["r"]), str(payload["s"]), tuple(str(g) for g in payload["g"])
        expires, nonce, via = int(payload["e"]), str(payload["n"]), str(payload.get("v", ""))
    except (ValueError, KeyError, TypeError):
        return None
    if version != "v2" or expires < (time.time() if now is None else now):
        return None
    if via == "api-token" and (role is Role.ADMIN and not tokens.admin or role is Role.READ and not tokens.read):
        return None
    return Identity(role, "session", csrf_token(tokens, nonce), Principal(subject, groups, via=via))


def parse_cookies(header: str) -> dict[str, str]:
    cookies: dict[str, str] = {}
    for part in header.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep and name:
            cookies.setdefault(name, value.strip().strip('"'))
    return cookies


def header(headers: Mapping[str, str], name: str) -> str:
    wanted = name.lower()
    return next((v for k, v in headers.items() if k.lower() == wanted), "")


def identify(tokens: Tokens, headers: Mapping[str, str]) -> Identity | None:
    """A bearer header first (CLI, scripts), then the session cookie (browsers)."""
    scheme, _, value = header(headers, "Authorization").partition(" ")
    if scheme.lower() == "bearer":
        role = tokens.role_of(value)
        return Identity(role, "bearer", principal=token_principal(role)) if role else None
    cookie = parse_cookies(header(headers, "Cookie")).get(COOKIE, "")
    return read_session(tokens, cookie) if cookie else None


def is_https(headers: Mapping[str, str], scheme: str = "http") -> bool:
    return scheme == "https" or header(headers, "X-Forwarded-Proto").split(",")[0].strip() == "https"


def session_cookie(value: str, *, secure: bool, clear: bool = False) -> str:
    attrs = ["Path=/ui", "HttpOnly", "SameSite=Strict"]
    if secure:
        attrs.append("Secure")
    attrs.append("Max-Age=0" if clear else f"Max-Age={SESSION_SECONDS}")
    return f"{COOKIE}={'' if clear else value}; " + "; ".join(attrs)


def same_origin(headers: Mapping[str, str]) -> str:
    """Why this request is not known to come from a page of this host ("" when it does)."""
    host = header(headers, "X-Forwarded-Host").split(",")[0].strip() or header(headers, "Host")
    if header(headers, "Sec-Fetch-Site").lower() in ("cross-site", "same-site"):
        return "the request came from another site"
    origin = header(headers, "Origin")
    if origin and origin != "null":
        return "" if urlsplit(origin).netloc == host else f"origin {origin!r} is not this dashboard"
    if origin == "null":
        return "an opaque origin may not act"
    referer = header(headers, "Referer")
    if referer:
        return "" if urlsplit(referer).netloc == host else "the referring page is not this dashboard"
    return "no Origin or Referer header: refusing a request that may come from another site"


def check_action(identity: Identity | None, headers: Mapping[str, str], form: Mapping[str, str]) -> tuple[int, str]:
    """(0, "") when `identity` may perform an action with this request, else (HTTP status, reason)."""
    if identity is None:
        return 401, "log in first"
    if identity.via == "bearer" and not header(headers, "Origin") and not header(headers, "Sec-Fetch-Site"):
        return 0, ""  # a script with the token; browsers always send Origin on a POST
    problem = same_origin(headers)
    if problem:
        return 403, problem
    if identity.via == "session":
        given = form.get("csrf") or header(headers, "X-CSRF-Token")
        if not given or not hmac.compare_digest(given.encode(), identity.csrf.encode()):
            return 403, "missing or wrong CSRF token: reload the page and try again"
    return 0, ""
