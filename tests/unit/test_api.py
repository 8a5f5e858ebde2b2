"""The api use case without a cluster: auth, routing, errors, stored status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tidecd.base.model import HealthStatus, Response, SyncStatus
from tidecd.clients.store import MemoryStore
from tidecd.runtime import Runtime, Settings
from tidecd.state import app as app_state
from tidecd.usecases import api

TOKEN = "t0ken-for-tests"


@pytest.fixture()
def runtime(tmp_path: Path) -> Runtime:
    (tmp_path / "app.yaml").write_text(yaml.safe_dump({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "web"},
        "spec": {"project": "default", "source": {"repoURL": "https://example.com/r.git", "path": "."},
                 "destination": {"name": "in-cluster", "namespace": "web"}}}))
    store = MemoryStore()
    state = app_state.AppState(app="web", sync_status=SyncStatus.OUT_OF_SYNC, health=HealthStatus.HEALTHY,
                               revision="a" * 40)
    state.resources = [app_state.ResourceStatus("apps", "Deployment", "web", "web", SyncStatus.OUT_OF_SYNC,
                                                HealthStatus.HEALTHY, changed=["spec.replicas"],
                                                diff="-replicas: 1\n+replicas: 2")]
    state.add_history("b" * 40, "Succeeded", ".", "main")
    app_state.save(store, state)
    return Runtime(settings=Settings(config=str(tmp_path), api_token=TOKEN), store=store)


def call(runtime: Runtime, method: str, path: str, body: dict[str, object] | None = None,
         token: str = TOKEN) -> Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return api.handle(method, path, headers, json.dumps(body or {}).encode(), runtime)


def test_every_call_needs_the_token(runtime: Runtime) -> None:
    assert call(runtime, "GET", "/api/v1/apps", token="").status == 401
    assert call(runtime, "GET", "/api/v1/apps", token="wrong").status == 401
    runtime.settings.api_token = ""
    answer = call(runtime, "GET", "/api/v1/apps", token="")
    assert answer.status == 401 and answer.body["error"] == "unauthorized"


def test_list_get_diff_history(runtime: Runtime) -> None:
    listed = call(runtime, "GET", "/api/v1/apps")
    assert listed.status == 200
    assert listed.body["apps"] == [{"name": "web", "sync": "OutOfSync", "health": "Healthy",
                                    "revision": "a" * 40, "revisions": [], "reconciledAt": "", "conditions": [],
                                    "project": "default", "labels": {},
                                    "destination": {"server": "", "name": "in-cluster", "namespace": "web"}}]
    got = call(runtime, "GET", "/api/v1/apps/web").body
    assert got["syncStatus"] == "OutOfSync" and "diff" not in got["resources"][0]
    diff = call(runtime, "GET", "/api/v1/apps/web/diff").body
    [change] = diff["changes"]
    assert (change["resource"], change["action"], change["message"]) == (
        "apps/Deployment web/web", "configured", "spec.replicas")
    assert change["diff"] == "-replicas: 1\n+replicas: 2"
    history = call(runtime, "GET", "/api/v1/apps/web/history").body["history"]
    assert [(h["id"], h["revision"]) for h in history] == [(1, "b" * 40)]


def test_errors_have_a_code_and_a_message(runtime: Runtime) -> None:
    missing = call(runtime, "GET", "/api/v1/apps/nope")
    assert missing.status == 404 and "nope" in missing.body["message"]
    assert call(runtime, "PUT", "/api/v1/apps/web/history").status == 405
    assert call(runtime, "GET", "/api/v1/whatever").status == 404
    bad = api.handle("POST", "/api/v1/apps/web/sync", {"Authorization": f"Bearer {TOKEN}"}, b"{nope", runtime)
    assert bad.status == 400 and bad.body["error"] == "bad_request"
    no_id = call(runtime, "POST", "/api/v1/apps/web/rollback", {"id": "x"})
    assert no_id.status == 400 and "id" in no_id.body["message"]
    unknown = call(runtime, "POST", "/api/v1/apps/web/rollback", {"id": 99})
    assert unknown.status == 404 and "99" in unknown.body["message"]
    bad_resource = call(runtime, "POST", "/api/v1/apps/web/sync", {"resources": ["Deployment"]})
    assert bad_resource.status == 400 and "GROUP/KIND/NAME" in bad_resource.body["message"]


def test_resource_selection_matches_group_kind_name(runtime: Runtime) -> None:
    [key] = api.select_resources(runtime, "web", ["apps/Deployment/web"])
    assert str(key) == "apps/Deployment web/web"
    with pytest.raises(Exception, match="no resource"):
        api.select_resources(runtime, "web", ["/ConfigMap/web"])
