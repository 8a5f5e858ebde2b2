"""Live pages: the apps list and an app's page follow what the steps record, without a manual reload.

    GET /ui/version?v=VERSION&...            the apps list's version (every app this caller may see)
    GET /ui/apps/NAME/version?v=VERSION&...  one app's version

A page carries the version it was rendered at; htmx asks the route above every second (`POLL_SECONDS`,
`_watch.html`). An unchanged version is a 204 with no body: one metadata read of the store (the state
objects' generations, never their bodies: `clients.store.generations`), no template. A changed one answers
the page itself, rendered for the same query, and htmx swaps its `<main>` in place
(`HX-Retarget`/`HX-Reselect`), so a change is on screen at most one poll interval plus the page's render
after it is recorded: within 3 s, which `tests/e2e/test_ui_live.py` asserts (a 2 s interval plus a
render on a busy machine came too close to it).

Why polling and not server-sent events: on a serverless function an event stream holds an instance (and
its billed time) for as long as the page is open, and the stream would still have to poll the store to
learn of a change, since steps run in other instances. A poll costs one short request and one metadata
read; `bench/live.py` measures both on a warm and a cold instance.

Without JavaScript nothing polls: a plain reload shows the same page.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import replace
from urllib.parse import urlencode

from tidecd.base.principal import Principal
from tidecd.clients.store import ObjectStore
from tidecd.config.load import Config
from tidecd.state import app as app_state
from tidecd.ui import Context, Page, app_page, apps, route, visible_names, who
from tidecd.usecases import authz

POLL_SECONDS = 1
# (caller) → (the config it was computed for, the apps it may see): RBAC over every app is most of a
# list poll's CPU (casbin per app), and the answer changes only with the config (a new object when it does)
_VISIBLE: dict[Principal, tuple[Config, list[str]]] = {}
_VISIBLE_LIMIT = 1024
_APPS_PREFIX = app_state.state_key("").removesuffix(".json")  # "state/apps/"


def generations(store: ObjectStore, prefix: str) -> dict[str, int]:
    """Every object under `prefix` and its generation, read without a body where the backend can (one
    listing on GCS, one header line per file locally: `generations` of each store); other stores (fakes)
    read each object."""
    if (method := getattr(store, "generations", None)) is not None:
        return {str(k): int(v) for k, v in method(prefix).items()}
    found = {key: store.read(key) for key in store.list(prefix)}
    return {key: blob.generation for key, blob in found.items() if blob is not None}


def version_of(store: ObjectStore, names: Iterable[str], prefix: str = _APPS_PREFIX) -> str:
    """A short digest of the named apps' state generations (and of which apps they are): it changes
    whenever a step records anything for one of them, or an app appears or goes."""
    wanted = sorted(set(names))
    # one app's page: a listing of exactly its key
    found = generations(store, app_state.state_key(wanted[0]) if len(wanted) == 1 else prefix)
    digest = hashlib.sha256()
    for name in wanted:
        digest.update(f"{name}\0{found.get(app_state.state_key(name), 0)}\n".encode())
    return digest.hexdigest()[:16]


def watch_url(path: str, version: str, query: Mapping[str, str]) -> str:
    """The version route a page polls: its own query kept, so a changed version renders the same view."""
    kept = {k: v for k, v in query.items() if k != "v"}
    return f"{path}?{urlencode({'v': version, **kept})}"


def app_watch(ctx: Context) -> str:
    name = ctx.match["name"]
    return watch_url(f"/ui/apps/{name}/version", version_of(ctx.runtime.store, [name]), ctx.request.query)


def _answer(ctx: Context, now: str, render_page: Page) -> Page:
    """204 when the page's version is current; the page, to swap into `<main>`, when it moved."""
    if ctx.request.query.get("v", "") == now:
        return Page(204, b"", headers=[("ETag", f'"{now}"')])
    render_page.headers += [("HX-Retarget", "main"), ("HX-Reswap", "outerHTML"), ("HX-Reselect", "main"),
                            ("ETag", f'"{now}"')]
    return render_page


def _as_page(ctx: Context, path: str, match: dict[str, str]) -> Context:
    query = {k: v for k, v in ctx.request.query.items() if k != "v"}
    return replace(ctx, request=replace(ctx.request, path=path, query=query), match=match)


def _visible(ctx: Context) -> list[str]:
    config, caller = ctx.runtime.config(), who(ctx)
    cached = _VISIBLE.get(caller)
    if cached is not None and cached[0] is config:
        return cached[1]
    if len(_VISIBLE) >= _VISIBLE_LIMIT:
        _VISIBLE.clear()
    names = visible_names(ctx)
    _VISIBLE[caller] = (config, names)
    return names


@route("GET", "/version")
def list_version(ctx: Context) -> Page:
    now = version_of(ctx.runtime.store, _visible(ctx))
    if ctx.request.query.get("v", "") == now:
        return _answer(ctx, now, Page(204))
    return _answer(ctx, now, apps(_as_page(ctx, "/ui/", {})))


@route("GET", r"/apps/(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,252})/version")
def app_version(ctx: Context) -> Page:
    name = ctx.match["name"]
    authz.app_for(ctx.runtime, who(ctx), name)  # NotFound for an app this caller may not see
    now = version_of(ctx.runtime.store, [name])
    if ctx.request.query.get("v", "") == now:
        return _answer(ctx, now, Page(204))
    return _answer(ctx, now, app_page(_as_page(ctx, f"/ui/apps/{name}", {"name": name})))
