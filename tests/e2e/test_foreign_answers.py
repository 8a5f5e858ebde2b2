"""Issue 29's acceptance "The api, the CLI and every dashboard page keep answering for the other apps while
one app's registry answers HTML", on the real components: the control plane, the git server, the
distribution registry (a chart pushed with `helm push`), the api function under functions-framework, the
`tidecd` command (locally and against the running api) and the dashboard's pages over HTTP.

Four apps: a chart from the real OCI registry and a directory from git, both synced, and two whose
registry answers every request with an HTML login page and a 200: an OCI chart and a chart from a helm
repository (the case the issue found made the api answer 500 and `tidecd app list` fail for every app).
While that site answers so, every answer about the good apps is what it would be without it, and each bad
app carries a condition that names its source and says what was wrong.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.test_chart_sources import assert_synced, chart_app, cm
from tests.support import localhttp
from tests.support.apps import GitOps, configmap
from tests.support.charts import Registry, package, write_chart
from tests.support.functions import Functions

pytestmark = pytest.mark.e2e

LOGIN_PAGE = b"<!doctype html><html><head><title>Sign in</title></head><body><form>login</form></body></html>"
EXIT_APP_ERROR = 5  # `tidecd` exit code: an app fails to compare (cli.app.EXIT_APP_ERROR)


@pytest.fixture
def html_registry() -> Iterator[str]:
    """A site that answers every GET, whatever the path, with an HTML page and a 200 (a captive portal, a
    proxy's login page, a registry URL that is really a web site): its host:port."""
    asked: list[str] = []

    def answer(req: BaseHTTPRequestHandler) -> None:
        asked.append(req.path)
        req.send_response(200)
        req.send_header("Content-Type", "text/html; charset=utf-8")
        req.send_header("Content-Length", str(len(LOGIN_PAGE)))
        req.end_headers()
        req.wfile.write(LOGIN_PAGE)

    httpd = localhttp.serve_get(answer)
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}"
    finally:
        localhttp.stop(httpd)
    assert asked, "the bad apps did ask the site"


def tidecd(gitops: GitOps, *args: str, server: str = "", token: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TIDECD_CONFIG": str(gitops.config_dir), "TIDECD_STORE": str(gitops.store.root),
           "KUBECONFIG": str(gitops.dev.kubeconfig)}
    if server:
        env |= {"TIDECD_SERVER": server, "TIDECD_API_TOKEN": token}
    return subprocess.run([sys.executable, "-m", "tidecd.cli", *args], env=env, capture_output=True, text=True,
                          timeout=300)


def test_api_cli_and_dashboard_keep_answering_while_one_registry_answers_html(
        gitops: GitOps, oci_registry: Registry, functions: Functions, html_registry: str, tmp_path: Path) -> None:
    charts = f"charts-{uuid.uuid4().hex[:6]}"
    home = tmp_path / "home"
    oci_registry.helm_push(package(write_chart(tmp_path / "web", "web", "1.0.0"), tmp_path / "out", home), charts,
                           home)
    gitops.push({"app/cm.yaml": configmap("from-git")})
    good_oci = chart_app(gitops, f"oci://{oci_registry.host}/{charts}/web", "1.x", name="good-oci", chart="",
                         automated={"prune": True})
    good_git = gitops.application("good-git", automated={"prune": True})
    bad_oci = chart_app(gitops, f"oci://{html_registry}/charts/web", "1.x", name="bad-oci", chart="",
                        automated={"prune": True})
    bad_helm = chart_app(gitops, f"http://{html_registry}/charts", "1.x", name="bad-helm", automated={"prune": True})
    bad_says = {bad_oci: f"oci://{html_registry}/charts/web: registry {html_registry}: charts/web: the tags list "
                         "is not JSON",
                bad_helm: f"http://{html_registry}/charts/index.yaml: not a helm repository index"}
    good = (good_oci, good_git)
    every = (*good, *bad_says)

    for name in ("good-oci", "good-git"):
        gitops.sync(name)
        assert_synced(gitops.state(name))
    assert cm(gitops, "good-oci")["data"]["version"] == "1.0.0"
    for name in ("bad-oci", "bad-helm"):
        gitops.reconcile(name)  # the step records the problem on the app (it does not raise)
        state = gitops.state(name)
        assert state.sync_status == "Unknown" and state.inventory == [], state
        assert any(bad_says[gitops.real(name)] in c["message"] for c in state.conditions), state.conditions

    # --- the poll tick asks every source, the bad ones too: each is an error of its own, the tick goes on -----
    from tidecd.triggers.dispatch import ManualDispatcher
    from tidecd.usecases.poll import poll

    summary = poll(gitops.runtime(), ManualDispatcher(), jitter_seconds=0)
    assert summary.repos_checked >= 3 and not summary.left, summary
    assert any(html_registry in error for error in summary.errors), summary.errors
    assert not any(oci_registry.host in error or gitops.repo.url in error for error in summary.errors), summary

    # --- the api, through functions-framework ---------------------------------------------------------------
    api = functions.start("api").url
    bearer = {"Authorization": f"Bearer {functions.token}"}

    def ask(method: str, path: str, **params: str) -> dict[str, Any]:
        answer = requests.request(method, f"{api}/api/v1{path}", headers=bearer, params=params, timeout=300)
        assert answer.status_code == 200, (method, path, answer.status_code, answer.text[:500])
        body: dict[str, Any] = answer.json()
        return body

    listed = {a["name"]: a for a in ask("GET", "/apps")["apps"]}
    assert set(every) <= set(listed), listed
    assert all(listed[n]["sync"] == "Synced" for n in good) and all(listed[n]["sync"] == "Unknown" for n in bad_says)
    for name in good:
        assert ask("GET", f"/apps/{name}", refresh="true")["syncStatus"] == "Synced"
        assert ask("GET", f"/apps/{name}")["health"] == "Healthy"
    for name, says in bad_says.items():
        for body in (ask("GET", f"/apps/{name}", refresh="true"), ask("GET", f"/apps/{name}")):
            errors = [c["message"] for c in body.get("conditions", []) if c["type"] == "ComparisonError"]
            assert len(errors) == 1 and says in errors[0], body
            assert "<html" not in json.dumps(body).lower(), "the page is not echoed"
        assert ask("POST", f"/apps/{name}/refresh")["sync"] == "Unknown"
        assert ask("GET", f"/apps/{name}/history")["history"] == []
    assert {a["name"] for a in ask("GET", "/apps")["apps"]} == set(listed)  # and again, after the refreshes

    # --- the CLI, locally and against the running api ------------------------------------------------------
    for server in ("", api):
        where = f"--server {server}" if server else "locally"
        shown = tidecd(gitops, "app", "list", server=server, token=functions.token)
        assert "Traceback" not in shown.stderr, shown.stderr
        rows = {line.split()[0]: line.split()[1:3] for line in shown.stdout.splitlines()[1:] if line.split()}
        assert all(rows.get(n) == ["Synced", "Healthy"] for n in good), (where, shown.stdout)
        assert all(rows.get(n, [""])[0] == "Unknown" for n in bad_says), (where, shown.stdout)
        assert shown.returncode == EXIT_APP_ERROR, (where, shown.returncode, shown.stderr)  # documented: app in error
        for name in good:
            got = tidecd(gitops, "app", "get", name, server=server, token=functions.token)
            assert got.returncode == 0 and "Synced" in got.stdout, (where, got.stdout, got.stderr)
        for name, says in bad_says.items():
            got = tidecd(gitops, "app", "get", name, "-o", "json", server=server, token=functions.token)
            assert got.returncode == EXIT_APP_ERROR, (where, got.returncode, got.stderr)
            assert says in got.stdout and "Traceback" not in got.stderr, (where, got.stdout, got.stderr)

    # --- every dashboard page --------------------------------------------------------------------------------
    pages = ["/ui/", "/ui/projects", "/ui/clusters"]
    pages += [f"/ui/apps/{name}" for name in every] + [f"/ui/apps/{name}/live" for name in every]
    for path in pages:
        page = requests.get(api + path, headers=bearer, timeout=120, allow_redirects=False)
        assert page.status_code == 200, (path, page.status_code, page.text[:500])
        assert "internal error" not in page.text.lower(), path
    front = requests.get(api + "/ui/", headers=bearer, timeout=120).text
    assert all(f"data-app='{n}'" in front or f'data-app="{n}"' in front for n in every), front[:2000]
    for name in bad_says:
        text = requests.get(f"{api}/ui/apps/{name}", headers=bearer, timeout=120).text
        assert "the tags list is not JSON" in text or "not a helm repository index" in text, text[:3000]
        assert "<form>login</form>" not in text
    for name in good:
        assert "Synced" in requests.get(f"{api}/ui/apps/{name}", headers=bearer, timeout=120).text
    for name in every:  # the dashboard's refresh button: one step each, answered by a redirect to the app
        done = requests.post(f"{api}/ui/apps/{name}/refresh", headers=bearer, timeout=300, allow_redirects=False)
        assert done.status_code == 303 and f"/ui/apps/{name}" in done.headers["Location"], (name, done.text[:500])
