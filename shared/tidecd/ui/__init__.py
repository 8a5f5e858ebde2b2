"""The dashboard: server-rendered pages under `/ui/`, served by the api function.

    GET  /ui/                       apps: counts, filters, search, pages of 50
    GET  /ui/apps/NAME              one app: header, live operation, resource tree with diffs, history
    GET  /ui/apps/NAME/live         the operation panel alone (htmx polls it every 2 s while one runs)
    GET  /ui/version, /ui/apps/NAME/version   live pages: 204 while unchanged, else the page (`watch`)
    POST /ui/apps/NAME/refresh      refresh (admin role, CSRF, same origin, as every action)
    GET/POST /ui/apps/NAME/{sync,rollback,terminate}   the sync panel and the confirmations (`act`)
    GET  /ui/projects, /ui/clusters read-only lists with their rules and the apps using each
    GET  /ui/appsets                each ApplicationSet, its generated apps and its errors (`appsets`)
    GET/POST /ui/login, POST /ui/logout   a token, or a local account's password (argocd-cm accounts)
    GET  /ui/auth/login, /ui/auth/callback  single sign-on through argocd-cm's oidc.config (`sso`)
    GET  /ui/static/FILE            htmx (vendored, see static/VENDORED.md) and the style sheet

Framework-free like `tidecd.usecases.api`: `handle` takes a `Request` and returns a `Page`; `web.respond` adapts
Flask. Jinja2 autoescapes every value; no page ever renders a secret (tokens, credentials, Secret data).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2  # loaded with flask by every function already: nothing to save by deferring it

from tidecd.base.errors import NotFound, TidecdError
from tidecd.base.principal import READONLY, Principal
from tidecd.config.load import Config
from tidecd.images import state as images_state
from tidecd.runtime import Runtime
from tidecd.source import Snapshots
from tidecd.state import app as app_state
from tidecd.ui import actions, auth, diffview, tree, views
from tidecd.usecases import authz
from tidecd.usecases import login as logins
from tidecd.usecases.revert import summary as revert_summary

HERE = Path(__file__).parent
STATIC = {"htmx.min.js": "text/javascript; charset=utf-8", "tidecd.css": "text/css; charset=utf-8",
          "live.js": "text/javascript; charset=utf-8", "login.js": "text/javascript; charset=utf-8"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
_NAME = r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,252})"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: Mapping[str, str] = field(default_factory=dict)
    query: Mapping[str, str] = field(default_factory=dict)
    form: Mapping[str, str] = field(default_factory=dict)
    scheme: str = "http"


@dataclass
class Page:
    status: int
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Context:
    runtime: Runtime
    request: Request
    identity: auth.Identity | None
    match: dict[str, str]


Route = Callable[[Context], Page]
_ROUTES: list[tuple[str, re.Pattern[str], Route, bool]] = []


def route(method: str, pattern: str, *, public: bool = False) -> Callable[[Route], Route]:
    def register(fn: Route) -> Route:
        _ROUTES.append((method, re.compile(f"^/ui{pattern}$"), fn, public))
        return fn
    return register


def tokens_of(runtime: Runtime) -> auth.Tokens:
    return auth.Tokens(runtime.settings.api_token, runtime.settings.api_readonly_token, logins.server_secret(runtime))


def handle(request: Request, runtime: Runtime) -> Page:
    identity = auth.identify(tokens_of(runtime), request.headers)
    path = "/ui/" if request.path in ("/ui", "/ui/") else request.path
    for method, pattern, fn, public in _ROUTES:
        match = pattern.match(path)
        if not match:
            continue
        if method != request.method and not (method == "GET" and request.method == "HEAD"):
            continue
        if not public and identity is None:
            if request.method == "GET":
                return _redirect("/ui/login?next=" + quote(path))
            return _error_page(runtime, None, 401, "Log in first.")
        if request.method == "POST" and not public:
            status, reason = auth.check_action(identity, request.headers, request.form)
            if status:
                return _error_page(runtime, identity, status, reason)
        try:
            return _secured(fn(Context(runtime, request, identity, match.groupdict())))
        except NotFound as exc:
            return _error_page(runtime, identity, 404, str(exc))
        except TidecdError as exc:
            return _error_page(runtime, identity, 503, str(exc))
    allowed = [m for m, p, _, _ in _ROUTES if p.match(path)]
    if allowed:
        return _error_page(runtime, identity, 405, f"{request.method} is not allowed here")
    return _error_page(runtime, identity, 404, f"no such page: {path}")


def _secured(page: Page) -> Page:
    page.headers += [("Content-Security-Policy", CSP), ("X-Content-Type-Options", "nosniff"),
                     ("X-Frame-Options", "DENY"), ("Referrer-Policy", "same-origin")]
    if not any(name == "Cache-Control" for name, _ in page.headers):
        page.headers.append(("Cache-Control", "no-store"))
    return page


def _redirect(location: str, *extra: tuple[str, str]) -> Page:
    return _secured(Page(303, b"", headers=[("Location", location), *extra]))


# -- rendering --------------------------------------------------------------------------------------------

@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE / "templates")), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.globals.update(static=static_url, commit_url=views.commit_url, short=_short, NOTICES=actions.NOTICES,
                       watch_seconds=watch.POLL_SECONDS)
    env.filters["quote"] = lambda text: quote(str(text), safe="")
    env.filters["slug"] = lambda text: re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "unknown"
    return env


def _short(sha: str) -> str:
    return sha[:8] if re.fullmatch(r"[0-9a-f]{40,64}", sha or "") else (sha or "")


@cache
def _static_hash(name: str) -> str:
    return hashlib.sha256((HERE / "static" / name).read_bytes()).hexdigest()[:12]


def static_url(name: str) -> str:
    return f"/ui/static/{name}?v={_static_hash(name)}"


def render(template: str, ctx: Context | None, status: int = 200, *, active: str = "", **values: Any) -> Page:
    identity = ctx.identity if ctx else None
    body = environment().get_template(template).render(identity=identity, active=active, **values)
    return Page(status, body.encode())


def _error_page(runtime: Runtime, identity: auth.Identity | None, status: int, message: str) -> Page:
    body = environment().get_template("error.html").render(identity=identity, active="", status=status,
                                                                  message=message)
    return _secured(Page(status, body.encode()))


# -- pages ----------------------------------------------------------------------------------------------

@route("GET", "/static/(?P<file>[a-z.]+)", public=True)
def static(ctx: Context) -> Page:
    name = ctx.match["file"]
    if name not in STATIC:
        raise NotFound(f"no static file {name!r}")
    return Page(200, (HERE / "static" / name).read_bytes(), STATIC[name],
                [("Cache-Control", "public, max-age=31536000, immutable")])


@route("GET", "/login", public=True)
def login_form(ctx: Context) -> Page:
    return render("login.html", ctx, next=_next(ctx.request.query.get("next", "")), problem="",
                  **sso.login_options(ctx))


@route("POST", "/login", public=True)
def login(ctx: Context) -> Page:
    tokens = tokens_of(ctx.runtime)
    problem = auth.same_origin(ctx.request.headers)
    if problem:
        return _error_page(ctx.runtime, None, 403, problem)
    target = _next(ctx.request.form.get("next", ""))
    options = sso.login_options(ctx)
    principal = None
    if "username" in ctx.request.form:  # a local account (argocd-cm accounts.NAME, admin)
        try:
            principal = logins.local(ctx.runtime, ctx.request.form["username"], ctx.request.form.get("password", ""))
        except TidecdError as exc:
            return render("login.html", ctx, 401, next=target, problem=str(exc), **options)
        role: auth.Role | None = auth.Role.ADMIN if principal.subject == "admin" else auth.Role.READ
    else:
        role = tokens.role_of(ctx.request.form.get("token", "")) if (tokens.admin or tokens.read) else None
    if role is None or not tokens.can_sign:
        return render("login.html", ctx, 401, next=target, problem="That token is not valid for this installation.",
                      **options)
    cookie = auth.session_cookie(auth.new_session(tokens, role, principal),
                                 secure=auth.is_https(ctx.request.headers, ctx.request.scheme))
    return _redirect(target, ("Set-Cookie", cookie))


@route("POST", "/logout", public=True)
def logout(ctx: Context) -> Page:
    if auth.same_origin(ctx.request.headers):
        return _error_page(ctx.runtime, ctx.identity, 403, auth.same_origin(ctx.request.headers))
    cookie = auth.session_cookie("", secure=auth.is_https(ctx.request.headers, ctx.request.scheme), clear=True)
    return _redirect("/ui/login", ("Set-Cookie", cookie))


def _next(target: str) -> str:
    """Only a path of this dashboard (never another host: an open redirect)."""
    return target if re.fullmatch(r"/ui/[A-Za-z0-9._~/?=&%+-]*", target or "") and "//" not in target else "/ui/"


def _who(ctx: Context) -> Principal:
    """The signed-in caller (every non-public route has one)."""
    return ctx.identity.principal if ctx.identity is not None else READONLY


def _visible(ctx: Context) -> Config:
    """The config as this caller may see it: the apps its RBAC lets it `get`, and no other (lists, searches,
    counts, projects and clusters pages)."""
    config = ctx.runtime.config()
    shown = set(authz.visible(config, _who(ctx), config.applications))
    return replace(config, applications={n: a for n, a in config.applications.items() if n in shown},
                   invalid=config.invalid if authz.allowed(config, _who(ctx), "applications", "get", "*/*") else {})


@route("GET", "/")
def apps(ctx: Context) -> Page:
    config = _visible(ctx)
    watching = watch.watch_url("/ui/version", watch.version_of(ctx.runtime.store, config.applications),
                               ctx.request.query)
    summaries = views.load_summaries(ctx.runtime.store, sorted(config.applications))
    page = views.apps_page(views.app_rows(config, summaries), ctx.request.query)
    page = replace(page, rows=views.with_commits(ctx.runtime.store, config, page.rows))
    return render("apps.html", ctx, active="apps", page=page, statuses=(views.SYNC_STATUSES, views.HEALTH_STATUSES),
                  watch=watching)


def _app_context(ctx: Context) -> dict[str, Any]:
    name = ctx.match["name"]
    app = authz.app_for(ctx.runtime, _who(ctx), name)  # NotFound for an app this caller may not see
    current = actions.watch(ctx.runtime, app_state.load(ctx.runtime.store, name)[0])
    commit = Snapshots(ctx.runtime.store).commit(app.source.repo_url, current.revision) if current.revision else None
    return {"app": views.shown_app(app), "state": current, "operation": views.operation_view(current.operation),
            "commit": commit,
            "images": images_state.summary(ctx.runtime.store, name),
            "revert": revert_summary(ctx.runtime, name),
            "may_sync": authz.allowed(ctx.runtime.config(), _who(ctx), "applications", "sync",
                                      authz.app_object(app)),
            "notice": actions.NOTICES.get(ctx.request.query.get("notice", ""), "")}


@route("GET", f"/apps/{_NAME}")
def app_page(ctx: Context) -> Page:
    watching = watch.app_watch(ctx)  # before the reads: a change recorded meanwhile moves the version again
    values = _app_context(ctx)
    lister = None
    problem = ""
    try:
        lister = ctx.runtime.cluster(values["app"].destination)
    except Exception as exc:  # any client failure: the page still shows the stored state
        problem = f"the destination cluster cannot be reached ({type(exc).__name__}): {str(exc)[:200]}"
    resource_tree = tree.build(values["state"], lister, ctx.runtime.config().argo_settings.health_lua)
    split = ctx.request.query.get("diff") == "split"
    diffs = {}
    for _, nodes in resource_tree.groups:
        for node in nodes:
            if node.diff:
                items = diffview.lines(node.diff, secret=node.key.kind == "Secret")
                diffs[node.anchor] = diffview.side_by_side(items) if split else items
    return render("app.html", ctx, active="apps", tree=resource_tree, diffs=diffs, split=split,
                  tree_problem=problem or resource_tree.problem, watch=watching, **values)


@route("GET", f"/apps/{_NAME}/live")
def live(ctx: Context) -> Page:
    values = _app_context(ctx)
    page = render("_live.html", ctx, **values)
    current, op = values["state"], values["operation"]
    now = ".".join((current.sync_status, current.health, op.phase if op else ""))
    seen = ctx.request.query.get("seen")
    if seen is not None and seen != now:
        page.headers.append(("HX-Refresh", "true"))  # the status moved: reload for the new tree and history
    return page


def _done(ctx: Context, done: actions.Done) -> Page:
    if done.status == 303:
        return _redirect(f"/ui/apps/{quote(ctx.match['name'])}?notice={done.notice}")
    return _error_page(ctx.runtime, ctx.identity, done.status, done.message)


def _flag(ctx: Context, name: str) -> bool:
    return ctx.request.form.get(name, "") in ("on", "true", "1")


@route("POST", f"/apps/{_NAME}/refresh")
def refresh(ctx: Context) -> Page:
    return _done(ctx, actions.refresh(ctx.runtime, ctx.match["name"], _who(ctx)))


@route("GET", "/projects")
def projects(ctx: Context) -> Page:
    return render("projects.html", ctx, active="projects", projects=views.projects(_visible(ctx)))


@route("GET", "/clusters")
def clusters(ctx: Context) -> Page:
    return render("clusters.html", ctx, active="clusters", clusters=views.clusters(_visible(ctx)))


# the page helpers the single sign-on routes share, under public names
error_page, safe_next, redirect, secured, who = _error_page, _next, _redirect, _secured, _who
app_context, done_page, flag = _app_context, _done, _flag  # for `act`


def visible_names(ctx: Context) -> list[str]:
    """The apps this caller may see (the apps list's rows before its filters)."""
    return sorted(_visible(ctx).applications)


from tidecd.ui import act, appsets, create, graph, resources, sso, watch  # noqa: E402,F401 - their routes use the helpers above
