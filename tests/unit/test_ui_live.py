"""Live pages (ui/watch.py) without a browser: the version a page polls, its 204 while nothing changed, the
page itself once a step records something, and the store's generations listing it rests on."""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.test_ui import READ, get, runtime
from tidecd.base.model import HealthStatus
from tidecd.clients.store import LocalStore, MemoryStore
from tidecd.runtime import Runtime
from tidecd.state import app as app_state
from tidecd.ui.watch import POLL_SECONDS, generations

__all__ = ["runtime"]  # the fixture, shared with test_ui


def _watch(html: str) -> str:
    found = re.search(r'data-watch="([^"]+)"', html)
    assert found, "the page carries no watch element"
    return found.group(1).replace("&amp;", "&")


def _poll(runtime: Runtime, url: str, token: str = "") -> tuple[int, bytes, dict[str, str]]:
    path, _, query = url.partition("?")
    params = dict(part.split("=", 1) for part in query.split("&") if part)
    page = get(runtime, path, **({"token": token} if token else {}), **params)
    return page.status, page.body, dict(page.headers)


def test_an_open_app_page_polls_a_version_and_gets_the_page_when_a_step_records(runtime: Runtime) -> None:
    html = get(runtime, "/ui/apps/web", diff="split").body.decode()
    watch = _watch(html)
    assert '<noscript><meta http-equiv="refresh" content="30"></noscript>' in html  # without JavaScript
    assert watch.startswith("/ui/apps/web/version?v=") and "diff=split" in watch
    assert f'hx-trigger="every {POLL_SECONDS}s"' in html and POLL_SECONDS <= 1  # within 3 s: a poll + a render
    status, body, _ = _poll(runtime, watch)
    assert (status, body) == (204, b"")  # nothing recorded: no page rendered, nothing swapped

    current, _ = app_state.load(runtime.store, "web")
    current.health = HealthStatus.DEGRADED
    app_state.save(runtime.store, current)
    status, body, headers = _poll(runtime, watch)
    assert status == 200 and b'data-health="Degraded"' in body
    assert headers["HX-Retarget"] == "main" and headers["HX-Reselect"] == "main"
    moved = _watch(body.decode())
    assert moved != watch and "diff=split" in moved  # the same view, at the new version
    assert _poll(runtime, moved)[0] == 204


def test_the_apps_list_moves_when_any_visible_app_changes_and_not_otherwise(runtime: Runtime) -> None:
    watch = _watch(get(runtime, "/ui/", health="Degraded").body.decode())
    assert watch.startswith("/ui/version?v=") and "health=Degraded" in watch
    assert _poll(runtime, watch)[0] == 204
    runtime.store.write("state/reverts/web.json", b"{}")  # another document: not the list's business
    assert _poll(runtime, watch)[0] == 204
    current, _ = app_state.load(runtime.store, "web")
    current.health = HealthStatus.DEGRADED
    app_state.save(runtime.store, current)
    status, body, _ = _poll(runtime, watch)
    assert status == 200 and b'data-app="web"' in body and b'data-count="health-Degraded">1<' in body


def test_a_version_route_hides_an_app_the_caller_may_not_see(runtime: Runtime) -> None:
    assert get(runtime, "/ui/apps/nope/version", v="x").status == 404
    assert get(runtime, "/ui/apps/web/version", token="", v="x").status == 303  # logged out: to the login
    assert get(runtime, "/ui/apps/web/version", token=READ, v="x").status in (200, 404)


def test_generations_read_headers_not_bodies(tmp_path: Path) -> None:
    for store in (MemoryStore(), LocalStore(tmp_path)):
        first = store.write("state/apps/a.json", b"x" * 100_000)
        second = store.write("state/apps/b.json", b"{}")
        store.write("state/other.json", b"{}")
        assert generations(store, "state/apps/") == {"state/apps/a.json": first, "state/apps/b.json": second}
        assert generations(store, "state/apps/a.json") == {"state/apps/a.json": first}
        assert store.write("state/apps/a.json", b"y") != first
        assert generations(store, "state/apps/a.json")["state/apps/a.json"] != first
        assert generations(store, "nothing/") == {}


def test_live_pages_load_the_script_that_keeps_opened_details(runtime: Runtime) -> None:
    html = get(runtime, "/ui/apps/web").body.decode()
    found = re.search(r'<script src="(/ui/static/live\.js\?v=[0-9a-f]+)"', html)
    assert found, "the app page does not load live.js"
    script = get(runtime, "/ui/static/live.js")
    assert script.status == 200 and script.content_type.startswith("text/javascript") and b"details" in script.body
    assert b"live.js" not in get(runtime, "/ui/projects").body  # a page that does not poll has no need of it
