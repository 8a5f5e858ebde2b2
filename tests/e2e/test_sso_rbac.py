"""Single sign-on and Argo CD's RBAC together, end to end: a person logs in through Dex (the real OIDC
provider) in Chromium, sees only the apps argocd-rbac-cm lets their group see, is refused a sync the policy
denies (and the refusal is in the audit log), syncs what they may on the real control plane, and the
operation names them in the history, on the dashboard and in the notification.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.apps import GitOps, configmap
from tests.support.dex import MOCK_USER, Client, Dex
from tests.support.functions import ROOT, Function
from tidecd.clients.secrets import KeyPair, seal_secret
from tidecd.clients.store import LocalStore
from tidecd.state import auditlog
from tidecd.ui import auth
from tidecd_dev.devcluster import free_port

pytestmark = pytest.mark.e2e
CLIENT_SECRET, SERVER_KEY = "dex-client-secret-rbac", "server-secret-key-rbac"


@pytest.fixture()
def received() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A notification webhook target on loopback: (url, the JSON bodies posted to it)."""
    bodies: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            bodies.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", bodies
    finally:
        server.shutdown()


def write_config(gitops: GitOps, base: str, dex: Dex, pair: KeyPair, hook: str) -> tuple[str, str, str]:
    """The config source: a team project and its apps, another app, argocd-cm's OIDC, argocd-rbac-cm
    granting the group `authors` its team's apps (sync only for web-*), sealed secrets. (web, locked, other)."""
    team = f"team-{gitops.namespace}"[:60]
    gitops.project({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": team},
                    "spec": {"sourceRepos": ["*"], "destinations": [{"name": "in-cluster", "namespace": "*"}]}})
    subscribe = {"notifications.argoproj.io/subscribe.on-sync-succeeded.webhook": "ops"}
    web = gitops.application("web", project=team, annotations=subscribe)
    locked = gitops.application("locked", project=team)
    other = gitops.application("other")
    oidc = {"name": "Dex", "issuer": dex.issuer, "clientID": "tidecd", "clientSecret": "$oidc.clientSecret",
            "requestedScopes": ["openid", "profile", "email", "groups"]}
    documents = {
        "argocd-cm": {"url": base, "oidc.config": yaml.safe_dump(oidc)},
        "argocd-rbac-cm": {"policy.csv": f"p, role:team, applications, get, {team}/*, allow\n"
                                         f"p, role:team, applications, sync, {team}/web-*, allow\n"
                                         "g, authors, role:team\n"},
    }
    for name, data in documents.items():
        (gitops.config_dir / f"{name}.yaml").write_text(yaml.safe_dump(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "argocd"},
             "data": data}))
    secrets = {"argocd-secret": ({}, {"oidc.clientSecret": CLIENT_SECRET, "server.secretkey": SERVER_KEY}),
               "notifications": ({"argocd.argoproj.io/secret-type": "notifications"}, {"webhook.ops.url": hook})}
    for name, (labels, data) in secrets.items():
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "argocd",
                                                                     "labels": labels}, "stringData": data}
        (gitops.config_dir / f"{name}.yaml").write_text(yaml.safe_dump(seal_secret(secret, pair.cert_pem)))
    return web, locked, other


def test_a_person_sees_syncs_and_is_refused_as_their_groups_allow(
        browser: Any, gitops: GitOps, sealing: tuple[KeyPair, Path], tmp_path: Path,
        received: tuple[str, list[dict[str, Any]]]) -> None:
    pair, keys = sealing
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    dex = Dex(tmp_path, {}, [Client("tidecd", CLIENT_SECRET, [f"{base}/ui/auth/callback"])]).start()
    hook, bodies = received
    gitops.push({"app/cm.yaml": configmap("sso-made")})
    web, locked, other = write_config(gitops, base, dex, pair, hook)
    env = {**os.environ, "TIDECD_CONFIG": str(gitops.config_dir), "TIDECD_STORE": str(gitops.store.root),
           "KUBECONFIG": str(gitops.dev.kubeconfig), "TIDECD_SEALING_KEYS": str(keys),
           "PYTHONPATH": str(ROOT / "shared") + os.pathsep + str(ROOT)}
    for name in ("TIDECD_API_TOKEN", "TIDECD_API_READONLY_TOKEN"):
        env.pop(name, None)
    function = Function("api", env, tmp_path, port=port)
    try:
        context = browser.new_context()
        context.set_default_timeout(30_000)  # each wait fails fast
        page = context.new_page()
        page.goto(base + "/ui/login")
        page.click("a[data-sso]")
        page.click("text=Log in with Example")  # Dex's mock connector: Kilgore Trout, group "authors"
        page.wait_for_url(re.compile(r"/ui/$"))
        person = MOCK_USER[0]
        assert page.locator("[data-subject]").inner_text() == person

        # Only the team's apps: the list, its counts, and another app's page
        assert page.locator(f"tr[data-app='{web}']").count() == 1
        assert page.locator(f"tr[data-app='{locked}']").count() == 1
        assert page.locator(f"tr[data-app='{other}']").count() == 0
        assert other not in page.content()
        assert page.goto(f"{base}/ui/apps/{other}").status == 404

        # A sync the policy denies: no button, no sync panel, and the confirmed POST is refused (audited)
        page.goto(f"{base}/ui/apps/{locked}")
        assert page.locator("[data-actions]").count() == 0
        assert page.goto(f"{base}/ui/apps/{locked}/sync").status == 403
        cookie = next(c["value"] for c in context.cookies() if c["name"] == auth.COOKIE)
        session = auth.read_session(auth.Tokens("", "", SERVER_KEY), cookie)
        assert session is not None
        answer = page.evaluate(f"""fetch('/ui/apps/{locked}/sync', {{method: 'POST',
                                   body: new URLSearchParams({{csrf: '{session.csrf}', confirm: 'yes'}})}})
                                   .then(async r => [r.status, await r.text()])""")
        assert answer[0] == 403 and "permission denied: applications, sync" in answer[1], answer

        # A sync it may do, from the dashboard, on the real control plane
        page.goto(f"{base}/ui/apps/{web}")
        page.click("button[name=sync]")  # the sync panel first: options, resources, revision
        page.wait_for_selector("[data-sync-panel]")
        page.click("button[name=synchronize]")
        page.wait_for_selector("[data-notice]")
        page.wait_for_selector("[data-initiated-by]")  # the history entry, once it ran (the page is live)
        assert page.locator("[data-initiated-by]").first.inner_text() == f"by {person}"
        assert page.locator("[data-trigger]").first.inner_text() == "manual sync"
        assert gitops.live("ConfigMap", "sso-made") is not None
        state = gitops.state(web)
        assert state.history[-1].initiated_by == person and state.operation is not None
        assert state.operation.request.initiated_by == person
        deadline = time.monotonic() + 30  # the notification is sent after the step that ended the sync
        while not [b for b in bodies if b.get("trigger") == "on-sync-succeeded"] and time.monotonic() < deadline:
            time.sleep(0.2)
        told = [b for b in bodies if b.get("trigger") == "on-sync-succeeded"]
        assert told and told[0]["app"] == web and told[0]["initiated_by"] == person, bodies
        context.close()

        entries = auditlog.page(LocalStore(gitops.store.root), limit=500)[0]
        seen = {(e["subject"], e["action"], e["object"].split("/")[-1], e["allowed"]) for e in entries}
        assert (person, "sync", locked, False) in seen and (person, "sync", web, True) in seen
        assert (person, "get", other, False) in seen  # the page of an app it may not see
    finally:
        function.stop()
        dex.stop()
