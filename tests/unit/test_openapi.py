"""Every api answer matches the OpenAPI document served at /api/v1/openapi.json (camelCase throughout).

A whole session against a fake cluster walks every route, the happy paths and the errors; each answer is
checked against the schema the document gives for its path, method and status.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tests.support.fakecluster import FakeCluster, FakeGit, application, fake_runtime
from tidecd.base.model import Response
from tidecd.clients.store import MemoryStore
from tidecd.runtime import Runtime
from tidecd.triggers.dispatch import ManualDispatcher
from tidecd.usecases import api

TOKEN = "openapi-test-token"
DOC = api.openapi()


def configmap(name: str, value: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns"},
            "data": {"v": value}}


class Session:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.checked: list[tuple[str, str, int]] = []
        self.dispatcher = ManualDispatcher()  # the test takes the operations' steps itself (`run`)

    def run(self, operation_id: str) -> Any:
        """Step the app until the operation has finished; every change it made."""
        return api.drive(self.runtime, "web", "test", operation_id)[1]

    def call(self, method: str, path: str, body: Any = None, *, token: str = TOKEN,
             raw: bytes | None = None) -> Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        data = raw if raw is not None else json.dumps(body or {}).encode()
        bare, _, query = path.partition("?")
        answer = api.handle(method, bare, headers, data, self.runtime,
                            query=dict(q.split("=") for q in query.split("&")) if query else None,
                            dispatcher=self.dispatcher)
        check(method, bare, answer)
        self.checked.append((method, bare, answer.status))
        return answer


def schema_for(method: str, path: str, status: int) -> dict[str, Any]:
    relative = path.removeprefix("/api/v1")
    for template, ops in DOC["paths"].items():
        if re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", template), relative) and method.lower() in ops:
            responses = ops[method.lower()]["responses"]
            break
    else:
        responses = {}
    answer = responses.get(str(status)) or {"$ref": f"#/components/responses/E{status}"}
    if "$ref" in answer:
        answer = DOC["components"]["responses"][answer["$ref"].rsplit("/", 1)[1]]
    return dict(answer["content"]["application/json"]["schema"])


def check(method: str, path: str, answer: Response) -> None:
    schema = {**schema_for(method, path, answer.status), "components": DOC["components"]}
    errors = list(Draft202012Validator(schema).iter_errors(answer.body))
    assert not errors, f"{method} {path} {answer.status}: {errors[0].message} at {list(errors[0].path)}"
    json.dumps(answer.body)  # and it is JSON


def snake_keys(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [k for k in value if "_" in k] + [s for v in value.values() for s in snake_keys(v)]
    if isinstance(value, list):
        return [s for v in value for s in snake_keys(v)]
    return []


@pytest.fixture()
def session(monkeypatch: pytest.MonkeyPatch) -> Iterator[Session]:
    cluster, store, git = FakeCluster(), MemoryStore(), FakeGit()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    git.push([configmap("a", "1")])
    runtime = fake_runtime(cluster, store, application("web"), git)
    runtime.settings.api_token = TOKEN
    session = Session(runtime)
    session.git = git  # type: ignore[attr-defined]
    yield session


def test_every_answer_matches_the_document(session: Session) -> None:
    s = session
    assert s.call("GET", "/api/v1/openapi.json", token="").body["openapi"].startswith("3.1")
    assert s.call("GET", "/api/v1/apps").status == 200
    assert s.call("GET", "/api/v1/apps/web?refresh=true").body["syncStatus"] == "OutOfSync"
    diff = s.call("GET", "/api/v1/apps/web/diff").body
    assert [(c["resource"], c["action"]) for c in diff["changes"]] == [("ConfigMap ns/a", "created")]
    assert "+  v: '1'" in diff["changes"][0]["diff"] or "v: '1'" in diff["changes"][0]["diff"]
    dry = s.call("POST", "/api/v1/apps/web/sync", {"dryRun": True})
    assert dry.status == 202 and dry.body["operation"]["phase"] == "Running"
    assert [c.action for c in s.run(dry.body["operationId"]).entries] == ["created"]
    started = s.call("POST", "/api/v1/apps/web/sync", {"prune": True})
    assert started.status == 202 and s.dispatcher.scheduled[-1][:2] == ("web", 0.0)  # its first step, now
    busy = s.call("POST", "/api/v1/apps/web/sync", {})
    assert busy.status == 409 and busy.body["operationId"] == started.body["operationId"]
    s.run(started.body["operationId"])
    assert s.call("GET", "/api/v1/apps/web").body["operation"]["phase"] == "Succeeded"
    s.git.push([configmap("a", "2")])  # type: ignore[attr-defined]
    assert s.call("POST", "/api/v1/apps/web/refresh").status == 200
    got = s.call("GET", "/api/v1/apps/web").body
    assert not snake_keys(got), snake_keys(got)
    history = s.call("GET", "/api/v1/apps/web/history").body["history"]
    assert history and "deployedAt" in history[0]
    rolled = s.call("POST", "/api/v1/apps/web/rollback", {"id": history[0]["id"]})
    assert rolled.status == 202
    stopping = s.call("DELETE", "/api/v1/apps/web/operation")
    assert stopping.body == {"app": "web", "operationId": rolled.body["operationId"], "phase": "Terminating"}
    s.run(rolled.body["operationId"])
    ended = s.call("GET", "/api/v1/apps/web").body["operation"]
    assert ended["phase"] == "Failed" and "terminat" in ended["message"], ended
    assert s.call("DELETE", "/api/v1/apps/web/operation").status == 404  # none runs
    assert s.call("POST", "/api/v1/apps/web/images/unpin").status == 200
    assert s.call("POST", "/api/v1/images/check", {}).status == 200
    # errors: every one is JSON of the Error shape
    assert s.call("GET", "/api/v1/apps", token="").status == 401
    assert s.call("GET", "/api/v1/apps/nope").status == 404
    assert s.call("GET", "/api/v1/nothing").status == 404
    assert s.call("PATCH", "/api/v1/apps/web").status == 405
    assert s.call("DELETE", "/api/v1/apps/web").status == 400  # a directory config source: no commit to make
    assert s.call("POST", "/api/v1/apps/web/sync", raw=b"{nope").status == 400
    assert s.call("POST", "/api/v1/apps/web/sync", raw=b"[" * 100_000 + b"]" * 100_000).status == 400
    assert s.call("POST", "/api/v1/apps/web/rollback", {"id": 999}).status == 404
    assert len(s.checked) >= 22


def test_bodies_are_validated_by_the_schema_naming_the_field(session: Session) -> None:
    bad = session.call("POST", "/api/v1/apps/web/sync", {"resources": [1, 2]})
    assert bad.status == 400 and bad.body["message"].startswith("request body: resources[0]: ")
    unknown = session.call("POST", "/api/v1/apps/web/sync", {"dryrun": True})
    assert unknown.status == 400 and "dryrun" in unknown.body["message"]
    no_id = session.call("POST", "/api/v1/apps/web/rollback", {"id": "x"})
    assert no_id.status == 400 and no_id.body["message"].startswith("request body: id: ")


def test_an_unknown_app_creates_nothing(session: Session) -> None:
    store = session.runtime.store
    before = store.list("")
    assert session.call("GET", "/api/v1/apps/nope?refresh=true").status == 404
    assert session.call("POST", "/api/v1/apps/nope/sync", {}).status == 404
    assert session.call("POST", "/api/v1/apps/nope/refresh").status == 404
    assert store.list("") == before


def test_one_change_vocabulary_for_the_api_the_logs_and_the_cli(session: Session) -> None:
    from structlog.testing import capture_logs

    from tidecd.base import logs as log_setup
    from tidecd.base.model import ChangeSet

    log_setup.configure()  # an in-process CLI test before this one may have left the level at WARNING
    with capture_logs() as logs:
        started = session.call("POST", "/api/v1/apps/web/sync", {}).body
        changes = session.run(started["operationId"]).to_dicts()
    [change] = changes
    assert (change["resource"], change["action"], change["phase"], change["wave"]) == ("ConfigMap ns/a", "created",
                                                                                      "Sync", 0)
    assert "v: '1'" in change["diff"]  # the comparison's masked diff travels with the entry
    logged = [e["event"] for e in logs if e.get("action") == "created"]
    printed = ChangeSet.from_dicts(changes).lines()  # what `tidecd app sync` prints
    assert logged == printed == ["ConfigMap ns/a created"]
