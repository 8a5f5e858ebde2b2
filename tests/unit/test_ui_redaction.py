"""No dashboard page shows a repoURL's password (issue 29): every page, for a single-source and a
multi-source app whose every repoURL carries one, read-only and admin alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_ui import ADMIN, HOST, READ, FakeLister
from tidecd import ui
from tidecd.base.model import HealthStatus, SyncStatus
from tidecd.clients.store import MemoryStore
from tidecd.runtime import Runtime, Settings
from tidecd.state import app as app_state

SECRETS = ("s3cret-one", "s3cret-two", "s3cret-three", "s3cret-four")
SINGLE = f"https://deploy:{SECRETS[0]}@github.com/o/r.git"
SOURCES = [f"https://ci:{SECRETS[1]}@github.com/o/charts.git", f"https://ci:{SECRETS[2]}@gitlab.example/o/values.git"]
PROJECT_REPO = f"https://bot:{SECRETS[3]}@github.com/o/*"


def application(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": name},
            "spec": {"project": "team", "destination": {"name": "in-cluster", "namespace": "web"}, **spec}}


@pytest.fixture()
def runtime(tmp_path: Path) -> Runtime:
    (tmp_path / "apps.yaml").write_text(yaml.safe_dump_all([
        application("web", {"source": {"repoURL": SINGLE, "path": "deploy", "targetRevision": "main"}}),
        application("multi", {"sources": [{"repoURL": SOURCES[0], "path": "chart", "targetRevision": "main"},
                                          {"repoURL": SOURCES[1], "targetRevision": "main", "ref": "values"}]}),
        {"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "team"},
         "spec": {"sourceRepos": ["https://github.com/o/*", "https://gitlab.example/o/*", PROJECT_REPO],
                  "destinations": [{"name": "in-cluster", "namespace": "*"}]}},
    ]))
    store = MemoryStore()
    for name, revisions in (("web", None), ("multi", ["a" * 40, "b" * 40])):
        state = app_state.AppState(app=name, sync_status=SyncStatus.SYNCED, health=HealthStatus.HEALTHY,
                                   revision="a" * 40 if revisions is None else ",".join(revisions))
        state.revisions = list(revisions or [])
        state.add_history(state.revision, "Succeeded", "deploy", "main", revisions=revisions)
        state.operation = app_state.Operation("o1", state.revision, app_state.OperationPhase.RUNNING,
                                              started_at="t0", revisions=list(revisions or []))
        state.memo.reconciled_at = "2999-01-01T00:00:00Z"
        app_state.save(store, state)
    return Runtime.of(Settings(config=str(tmp_path), api_token=ADMIN, api_readonly_token=READ), store,
                      clusters={"in-cluster": FakeLister()})  # type: ignore[dict-item]


PAGES = ["/ui/", "/ui/?q=github", "/ui/?q=s3cret", "/ui/apps/web", "/ui/apps/multi", "/ui/apps/web/live",
         "/ui/apps/multi/live", "/ui/apps/multi?diff=split", "/ui/projects", "/ui/clusters", "/ui/apps/nope",
         "/ui/login"]


@pytest.mark.parametrize("token", [READ, ADMIN])
@pytest.mark.parametrize("path", PAGES)
def test_no_page_shows_a_repo_password(runtime: Runtime, path: str, token: str) -> None:
    target, _, query = path.partition("?")
    params = dict(q.split("=", 1) for q in query.split("&")) if query else {}
    page = ui.handle(ui.Request("GET", target, {"Authorization": f"Bearer {token}", "Host": HOST}, params), runtime)
    body = page.body.decode()
    assert page.status in (200, 404), body[:500]
    leaked = [s for s in SECRETS if s in body]
    assert leaked == [], f"{path} shows {leaked}"


def test_the_app_pages_still_show_where_the_source_is(runtime: Runtime) -> None:
    headers = {"Authorization": f"Bearer {READ}", "Host": HOST}
    web = ui.handle(ui.Request("GET", "/ui/apps/web", headers), runtime).body.decode()
    assert "https://github.com/o/r.git" in web
    assert "https://github.com/o/r/commit/" + "a" * 40 in web  # the commit link still works
    multi = ui.handle(ui.Request("GET", "/ui/apps/multi", headers), runtime).body.decode()
    assert 'title="https://github.com/o/charts.git"' in multi
    assert 'title="https://gitlab.example/o/values.git"' in multi
    searched = ui.handle(ui.Request("GET", "/ui/", headers, {"q": "s3cret"}), runtime).body.decode()
    assert 'data-app="' not in searched  # a search for the password matches no app: the rows hold none
