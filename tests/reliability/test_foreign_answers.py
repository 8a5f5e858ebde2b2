"""A foreign answer that cannot be read becomes a condition on the app that asked, and on no other (issue 29,
Build 5 "A foreign answer that cannot be parsed", the class "one bad answer stops everything").

Each source client (an OCI chart, a helm repository, a git server) and the image updater's registry client
is pointed at a loopback site that answers every request with one bad answer: an HTML login page with a
200, JSON cut off mid-body (the connection closes before the Content-Length it announced), JSON of the
wrong shape labelled text/html, and bytes that are nothing. The app is refreshed through the api as the
CLI and the dashboard ask for it: the answer is 200, the app carries a ComparisonError naming its source
and saying what was wrong, the api lists every app, and another app (a chart from a well-behaved helm
repository, rendered by the real helm) is Synced meanwhile. The real control plane and registry are in
`tests/e2e/test_foreign_answers.py`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support import localhttp
from tests.support.fakecluster import FakeCluster, application, fake_runtime
from tests.unit.test_chart_sources import tar_gz
from tests.unit.test_hostile_sources import index_of
from tests.unit.test_images import Sent, app_doc, make_runtime, rendered, results
from tidecd.base.errors import SourceUnavailable
from tidecd.base.model import ResourceKey
from tidecd.clients.registry import HttpRegistry, RegistryUnavailable, Repository
from tidecd.clients.store import MemoryStore
from tidecd.config.appset.discovery import ScmSpec
from tidecd.config.appset.generators import GeneratorError
from tidecd.config.load import ApplicationSource
from tidecd.config.model import Config
from tidecd.images import annotations as notes
from tidecd.runtime import Runtime, Settings
from tidecd.source import git, helmrepo
from tidecd.usecases import api
from tidecd.usecases import images as update
from tidecd.usecases.appset_discovery import GitLabScm
from tidecd.usecases.appsets import list_pull_requests

TOKEN = "t0ken"
CHART = tar_gz({"web/Chart.yaml": b"apiVersion: v2\nname: web\nversion: 1.0.0\n",
                "web/templates/cm.yaml": b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: good-cm}\ndata: {k: v}\n"})
HTML = b"<!doctype html><html><head><title>Sign in</title></head><body><form>login</form></body></html>"


@dataclasses.dataclass(frozen=True)
class Bad:
    """One bad answer: status, headers, body, and the length announced (more than the body: cut off)."""

    headers: dict[str, str]
    body: bytes
    announced: int | None = None


BAD_ANSWERS = {
    "an HTML page with a 200": Bad({"Content-Type": "text/html; charset=utf-8"}, HTML),
    "JSON cut off mid-body": Bad({"Content-Type": "application/json"}, b'{"tags": ["1.0.0", "1.1', announced=4096),
    "JSON of the wrong shape as text/html": Bad({"Content-Type": "text/html"}, b'{"errors": [1, 2], "tags": 7}'),
    "bytes that are nothing": Bad({"Content-Type": "application/octet-stream"}, bytes(range(256)) * 4),
}


def serve_bad(bad: Bad) -> ThreadingHTTPServer:
    """A site answering every GET with `bad`; a cut-off answer closes the connection after the body."""

    def answer(req: BaseHTTPRequestHandler) -> None:
        req.send_response(200)
        for key, value in bad.headers.items():
            req.send_header(key, value)
        req.send_header("Content-Length", str(bad.announced if bad.announced is not None else len(bad.body)))
        req.end_headers()
        req.wfile.write(bad.body)
        if bad.announced is not None:
            req.wfile.flush()
            req.close_connection = True
            req.connection.shutdown(socket.SHUT_RDWR)

    return localhttp.serve_get(answer)


def serve_good_charts() -> ThreadingHTTPServer:
    index = index_of({"web": [("1.0.0", CHART, "web-1.0.0.tgz")]})

    def answer(req: BaseHTTPRequestHandler) -> None:
        body = {"/index.yaml": index, "/web-1.0.0.tgz": CHART}.get(req.path.split("?")[0])
        req.send_response(200 if body is not None else 404)
        req.send_header("Content-Length", str(len(body or b"")))
        req.end_headers()
        req.wfile.write(body or b"")

    return localhttp.serve_get(answer)


@pytest.fixture
def servers() -> Iterator[Callable[[ThreadingHTTPServer], str]]:
    """Start-and-remember: `servers(httpd)` gives its `127.0.0.1:port`; every one is stopped after."""
    started: list[ThreadingHTTPServer] = []

    def host(httpd: ThreadingHTTPServer) -> str:
        started.append(httpd)
        return f"127.0.0.1:{httpd.server_address[1]}"

    helmrepo.forget()
    yield host
    helmrepo.forget()
    for httpd in started:
        localhttp.stop(httpd)


SOURCES: dict[str, Callable[[str], tuple[ApplicationSource, str]]] = {
    # kind → (the source at a bad host, the text its condition must name)
    "OCI chart": lambda host: (ApplicationSource(repo_url=f"oci://{host}/charts/web", target_revision="1.x"),
                               f"oci://{host}/charts/web"),
    "helm repository": lambda host: (ApplicationSource(repo_url=f"http://{host}/charts", chart="web",
                                                       target_revision="1.x"), f"http://{host}/charts"),
    "git server": lambda host: (ApplicationSource(repo_url=f"http://{host}/team/deploy.git", path="app",
                                                  target_revision="main"), f"http://{host}/team/deploy.git"),
}
SAYS = {  # what the condition says was wrong, by answer (any of these per source kind)
    "an HTML page with a 200": r"not JSON|not a (valid )?helm repository index|not git's protocol",
    "JSON cut off mid-body": r"cut off|ChunkedEncodingError|IncompleteRead|not JSON|not a valid helm",
    "JSON of the wrong shape as text/html": r"malformed tags list|not a helm repository index|not git's protocol",
    "bytes that are nothing": r"not JSON|not UTF-8|not a (valid )?helm repository index|not git's protocol",
}


def _ask(runtime: Runtime, path: str, **query: str) -> dict[str, Any]:
    answer = api.handle("GET", f"/api/v1{path}", {"Authorization": f"Bearer {TOKEN}"}, b"", runtime, query=query)
    assert answer.status == 200, (path, answer.status, answer.body)
    return dict(answer.body)


@pytest.mark.parametrize("answer", list(BAD_ANSWERS))
@pytest.mark.parametrize("kind", list(SOURCES))
def test_a_bad_answer_is_a_condition_on_that_app_only(kind: str, answer: str,
                                                      servers: Callable[[ThreadingHTTPServer], str]) -> None:
    bad_source, named = SOURCES[kind](servers(serve_bad(BAD_ANSWERS[answer])))
    good_host = servers(serve_good_charts())
    good = dataclasses.replace(application("good", namespace="ns", automated=True), source=ApplicationSource(
        repo_url=f"http://{good_host}", chart="web", target_revision="1.x"))
    bad = dataclasses.replace(application("bad", namespace="ns", automated=True), source=bad_source)
    cluster = FakeCluster()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    runtime = fake_runtime(cluster, MemoryStore(), good,
                           config=Config(applications={"good": good, "bad": bad}))
    runtime.settings.api_token = TOKEN

    got = _ask(runtime, "/apps/bad", refresh="true")
    errors = [c["message"] for c in got.get("conditions", []) if c.get("type") == "ComparisonError"]
    assert len(errors) == 1 and named in errors[0], got
    assert re.search(SAYS[answer], errors[0]), errors[0]
    assert "<html" not in errors[0].lower() and "Traceback" not in errors[0], "no page or trace echoed"
    assert got["syncStatus"] == "Unknown", got

    synced = api.handle("POST", "/api/v1/apps/good/refresh", {"Authorization": f"Bearer {TOKEN}"}, b"", runtime)
    assert synced.status == 200, synced.body  # one step, with the automated sync the policy asks for
    assert _ask(runtime, "/apps/good")["syncStatus"] == "Synced"
    assert cluster.get(ResourceKey("", "ConfigMap", "ns", "good-cm")) is not None
    listed = {a["name"]: a for a in _ask(runtime, "/apps")["apps"]}
    assert listed["good"]["sync"] == "Synced" and listed["bad"]["sync"] == "Unknown", listed
    again = _ask(runtime, "/apps/bad")  # the stored status (what `app list` and the dashboard read)
    assert [c["message"] for c in again["conditions"] if c["type"] == "ComparisonError"] == errors


@pytest.mark.parametrize("answer", list(BAD_ANSWERS))
def test_the_image_updater_marks_only_the_app_whose_registry_answered_badly(
        answer: str, servers: Callable[[ThreadingHTTPServer], str], tmp_path: Path) -> None:
    bad_host = servers(serve_bad(BAD_ANSWERS[answer]))
    good_host = servers(_registry_with_tags(["1.0.0", "1.0.1"]))
    runtime = make_runtime(tmp_path, [app_doc("bad", {notes.IMAGE_LIST: f"web={bad_host}/team/web:~1.0"}),
                                      app_doc("good", {notes.IMAGE_LIST: f"web={good_host}/team/web:~1.0"})])
    rendered(runtime, "bad", f"{bad_host}/team/web:1.0.0")
    rendered(runtime, "good", f"{good_host}/team/web:1.0.0")

    summary = update.check(runtime, registry=HttpRegistry(), dispatcher=Sent())

    by_app = results(summary)
    assert by_app["good"].status == "updated", by_app["good"]
    assert by_app["bad"].status == "unavailable", by_app["bad"]
    assert f"registry {bad_host}" in by_app["bad"].message and "images left as they are" in by_app["bad"].message
    runtime.settings.api_token = TOKEN  # and the api shows it on that app, as a condition, and on no other
    shown = _ask(runtime, "/apps/bad")
    assert [c["type"] for c in shown.get("conditions", [])] == ["ImageUpdaterError"], shown
    assert f"registry {bad_host}" in shown["conditions"][0]["message"]
    assert _ask(runtime, "/apps/good").get("conditions", []) == []


def _registry_with_tags(tags: list[str]) -> ThreadingHTTPServer:
    body = json.dumps({"name": "team/web", "tags": tags}).encode()

    def answer(req: BaseHTTPRequestHandler) -> None:
        ok = req.path.startswith("/v2/team/web/tags/list")
        req.send_response(200 if ok else 404)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(body) if ok else 0))
        req.end_headers()
        req.wfile.write(body if ok else b"")

    return localhttp.serve_get(answer)


@pytest.mark.parametrize("answer", list(BAD_ANSWERS))
def test_the_registry_client_never_takes_a_page_for_a_manifest(
        answer: str, servers: Callable[[ThreadingHTTPServer], str]) -> None:
    """The updater's digest strategy pins what `digest` answers: a page's hash must never be one."""
    host = servers(serve_bad(BAD_ANSWERS[answer]))
    repo = Repository(host, "team/web")
    for ask in (lambda: HttpRegistry().digest(repo, "1.0.0", None), lambda: HttpRegistry().tags(repo, None),
                lambda: HttpRegistry().created(repo, "1.0.0", None)):
        with pytest.raises(RegistryUnavailable, match=rf"^registry {re.escape(host)}: team/web: "):
            ask()


@pytest.mark.parametrize("answer", list(BAD_ANSWERS))
def test_a_github_api_that_answers_badly_is_the_generators_error(
        answer: str, servers: Callable[[ThreadingHTTPServer], str]) -> None:
    """The pull-request generator reads GitHub's API through PyGithub, which parses as it goes: whatever it
    meets is the ApplicationSet's GeneratorError (its config problem), never another exception."""
    host = servers(serve_bad(BAD_ANSWERS[answer]))
    with pytest.raises(GeneratorError, match=r"^pullRequest: GitHub acme/deploy: "):
        list_pull_requests(f"http://{host}", "acme", "deploy", "", ())


@pytest.mark.parametrize("answer", list(BAD_ANSWERS))
def test_a_gitlab_api_that_answers_badly_is_the_generators_error(
        answer: str, servers: Callable[[ThreadingHTTPServer], str], tmp_path: Path) -> None:
    """scmProvider's gitlab reads GitLab's API through python-gitlab: whatever it meets is the ApplicationSet's
    GeneratorError, never another exception."""
    host = servers(serve_bad(BAD_ANSWERS[answer]))
    runtime = Runtime(settings=Settings(config=str(tmp_path)), store=MemoryStore())
    scm = GitLabScm(runtime, ScmSpec(provider="gitlab", organization="acme", api=f"http://{host}"))
    with pytest.raises(GeneratorError, match=r"^scmProvider: GitLab group acme: "):
        scm.repositories()


def test_a_git_server_that_asks_to_retry_after_a_year_is_not_waited_for(
        servers: Callable[[ThreadingHTTPServer], str]) -> None:
    """urllib3 (under dulwich) would sleep as long as a 429 or 503 asks, inside the step: it does not; the
    step's own retry, the SourceUnavailable's delay, waits instead."""
    def answer(req: BaseHTTPRequestHandler) -> None:
        req.send_response(503)
        req.send_header("Retry-After", str(365 * 24 * 3600))
        req.send_header("Content-Length", "0")
        req.end_headers()

    host = servers(localhttp.serve_get(answer))
    start = time.monotonic()
    with pytest.raises(SourceUnavailable, match=r"unexpected http resp 503"):
        git.ls_remote(f"http://{host}/team/deploy.git")
    assert time.monotonic() - start < 5


def test_a_registry_retry_after_that_is_no_number_is_a_minute() -> None:
    from tidecd.clients.registry import MAX_RETRY_AFTER, _retry_after

    assert _retry_after("²") == 60.0 and _retry_after("9" * 400) == MAX_RETRY_AFTER
    assert _retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0 and _retry_after("3") == 3.0


@pytest.mark.parametrize("answer", list(BAD_ANSWERS))
def test_the_cli_pointed_at_something_else_says_so(answer: str, servers: Callable[[ThreadingHTTPServer], str]) -> None:
    """`--server` at a URL whose answer is no api answer (a proxy's login page, a web site): one line that
    says so, exit 4 (cannot connect), no traceback."""
    host = servers(serve_bad(BAD_ANSWERS[answer]))
    env = {**os.environ, "TIDECD_SERVER": f"http://{host}", "TIDECD_API_TOKEN": "t"}
    for args in (["app", "list"], ["app", "get", "web"]):
        done = subprocess.run([sys.executable, "-m", "tidecd.cli", *args], env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 4, (args, done.returncode, done.stderr)
        assert done.stderr.startswith((f"error: http://{host} did not answer as tidecd's api does (HTTP 200, ",
                                       f"error: cannot reach http://{host}: ChunkedEncodingError")), done.stderr
        assert "Traceback" not in done.stderr and "<html" not in done.stderr.lower()
