"""Who is asking, and may they act: sessions, roles, CSRF and same-origin checks for the dashboard.

Two tokens exist: the api token (role `admin`: may sync, refresh, roll back, terminate) and the optional
read-only token (role `read`: sees everything a page shows, acts on nothing). A caller proves one of them
with a bearer header, or once through the login form, which sets a session cookie.

The function is stateless, so a session is a signed cookie, not a server-side record:
`v1.<role>.<expires>.<nonce>.<hmac>`, HttpOnly, SameSite=Strict, Secure over https. The signing key is
derived from both tokens, so rotating either one ends every session. Every action (any POST) must pass
`check_action`: the request's Origin (or Referer) must be this host, a cross-site `Sec-Fetch-Site` is
refused, and a cookie session must echo its CSRF token (a hidden form field or `X-CSRF-Token`), which is
an HMAC of the session nonce. All comparisons are constant-time.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

COOKIE = "tidecd_session"
SESSION_SECONDS = 12 * 3600


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


@dataclass(frozen=True)
class Tokens:
    admin: str
    read: str = ""

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

    def key(self) -> bytes:
        material = f"{self.admin}\0{self.read}".encode()
        return hmac.new(b"tidecd-ui-session-v1", material, hashlib.sha256).digest()


def _sign(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def csrf_token(tokens: Tokens, nonce: str) -> str:
    return _sign(tokens.key(), f"csrf:{nonce}")


def new_session(tokens: Tokens, role: Role, *, now: float | None = None) -> str:
    expires = int((time.time() if now is None else now) + SESSION_SECONDS)
    body = f"v1.{role.value}.{expires}.{secrets.token_hex(16)}"
    return f"{body}.{_sign(tokens.key(), body)}"


def read_session(tokens: Tokens, cookie: str, *, now: float | None = None) -> Identity | None:
    """The identity a session cookie carries, or None when it is forged, stale or from old tokens."""
    if not (tokens.admin or tokens.read) or len(cookie) > 512:
        return None
    body, _, signature = cookie.rpartition(".")
    if not hmac.compare_digest(_sign(tokens.key(), body).encode(), signature.encode()):
        return None
    parts = body.split(".")
    if len(parts) != 4 or parts[0] != "v1" or not parts[2].isdigit():
        return None
    _, role_text, expires, nonce = parts
    if int(expires) < (time.time() if now is None else now) or role_text not in Role._value2member_map_:
        return None
    role = Role(role_text)
    if role is Role.ADMIN and not tokens.admin or role is Role.READ and not tokens.read:
        return None
    return Identity(role, "session", csrf_token(tokens, nonce))


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
        return Identity(role, "bearer") if role else None
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
    if not identity.role.can_act:
        return 403, "this token is read-only"
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
