"""The dashboard's single sign-on: `GET /ui/auth/login` sends the browser to the OIDC issuer, and
`GET /ui/auth/callback` turns the issuer's code into a session (`tidecd.usecases.login` does the OIDC).

Between the two the function keeps nothing: the login's state, its expiry and the page to return to travel
in a short-lived signed cookie (`tidecd_oidc`, Path=/ui/auth, HttpOnly, SameSite=Lax so that the issuer's
top-level redirect back carries it), and the callback refuses a state that is not that cookie's. The
session cookie itself is SameSite=Strict, which a browser leaves out of a navigation that a cross-site
redirect started, so the callback answers a small page that moves on to the dashboard by itself (a meta
refresh: same-site, and no script under the Content-Security-Policy).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from typing import Any

from tidecd.base.errors import TidecdError
from tidecd.ui import Context, Page, auth, error_page, redirect, render, route, safe_next, secured, tokens_of
from tidecd.usecases import login

FLOW_COOKIE = "tidecd_oidc"
FLOW_SECONDS = 600


def redirect_uri(ctx: Context) -> str:
    """argocd-cm `url` (or TIDECD_PUBLIC_URL, else this request's host) + /ui/auth/callback; the issuer
    accepts only the redirect URIs registered for the client, so a forged Host header gains nothing."""
    base = login.sso(ctx.runtime).url or ctx.runtime.settings.public_url.rstrip("/")
    if not base:
        host = auth.header(ctx.request.headers, "X-Forwarded-Host").split(",")[0].strip() or \
            auth.header(ctx.request.headers, "Host")
        base = f"{'https' if auth.is_https(ctx.request.headers, ctx.request.scheme) else 'http'}://{host}"
    return base + "/ui/auth/callback"


def _flow_value(key: bytes, state: str, target: str, expires: int) -> str:
    body = f"{state}.{expires}.{base64.urlsafe_b64encode(target.encode()).decode()}"
    return f"{body}.{hmac.new(key, f'oidc-flow:{body}'.encode(), hashlib.sha256).hexdigest()}"


def _read_flow(key: bytes, value: str, state: str) -> str | None:
    """The page to return to, when the cookie is ours, unexpired and holds this state; else None."""
    body, _, signature = value.rpartition(".")
    expected = hmac.new(key, f"oidc-flow:{body}".encode(), hashlib.sha256).hexdigest()
    if len(value) > 1024 or not hmac.compare_digest(expected.encode(), signature.encode()):
        return None
    parts = body.split(".")
    if len(parts) != 3 or not parts[1].isdigit() or int(parts[1]) < time.time():
        return None
    if not state or not hmac.compare_digest(parts[0].encode(), state.encode()):
        return None
    try:
        return base64.urlsafe_b64decode(parts[2]).decode()
    except ValueError:
        return None


def _flow_cookie(value: str, *, secure: bool, clear: bool = False) -> str:
    attrs = ["Path=/ui/auth", "HttpOnly", "SameSite=Lax", *(["Secure"] if secure else []),
             "Max-Age=0" if clear else f"Max-Age={FLOW_SECONDS}"]
    return f"{FLOW_COOKIE}={'' if clear else value}; " + "; ".join(attrs)


def _refused(ctx: Context, status: int, problem: str) -> Page:
    return secured(render("login.html", ctx, status, next="/ui/", problem=problem, **login_options(ctx)))


def login_options(ctx: Context) -> dict[str, Any]:
    """What the login page offers: the SSO button (with the issuer's name) and the password form."""
    settings = login.sso(ctx.runtime)
    return {"sso_name": settings.oidc.name if settings.oidc else "",
            "passwords": settings.sealed_secret is not None}


@route("GET", "/auth/login", public=True)
def oidc_login(ctx: Context) -> Page:
    tokens = tokens_of(ctx.runtime)
    if not tokens.can_sign:
        return error_page(ctx.runtime, None, 503, "single sign-on needs a session signing key: set server.secretkey "
                                                   "in the sealed argocd-secret (or TIDECD_API_TOKEN)")
    try:
        started = login.start_oidc(ctx.runtime, redirect_uri(ctx), tokens.key())
    except TidecdError as exc:
        return _refused(ctx, 503, f"Single sign-on is not available: {exc}")
    flow = _flow_value(tokens.key(), started.state, safe_next(ctx.request.query.get("next", "")),
                       int(time.time()) + FLOW_SECONDS)
    secure = auth.is_https(ctx.request.headers, ctx.request.scheme)
    return redirect(started.url, ("Set-Cookie", _flow_cookie(flow, secure=secure)))


@route("GET", "/auth/callback", public=True)
def oidc_callback(ctx: Context) -> Page:
    query = ctx.request.query
    if query.get("error"):
        return _refused(ctx, 401, f"The identity provider refused the login: {query['error'][:100]}")
    tokens = tokens_of(ctx.runtime)
    cookie = auth.parse_cookies(auth.header(ctx.request.headers, "Cookie")).get(FLOW_COOKIE, "")
    target = _read_flow(tokens.key(), cookie, query.get("state", "")) if tokens.can_sign and cookie else None
    if target is None:
        return _refused(ctx, 400, "This login was not started here, or took longer than 10 minutes: log in again.")
    try:
        principal, expires = login.finish_oidc(ctx.runtime, redirect_uri(ctx), tokens.key(), query["state"],
                                               query.get("code", ""))
    except TidecdError as exc:
        return _refused(ctx, 401, f"Single sign-on failed: {exc}")
    secure = auth.is_https(ctx.request.headers, ctx.request.scheme)
    session = auth.new_session(tokens, auth.Role.READ, principal, expires=expires or None)
    if len(session) > auth.MAX_COOKIE:
        return _refused(ctx, 401, f"Single sign-on failed: the ID token of {principal.subject} carries more groups "
                                  "than a session cookie holds (4 KB): ask for fewer groups in the token")
    page = render("continue.html", None, target=safe_next(target))
    page.headers += [("Set-Cookie", auth.session_cookie(session, secure=secure)),
                     ("Set-Cookie", _flow_cookie("", secure=secure, clear=True))]
    return secured(page)
