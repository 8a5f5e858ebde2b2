"""The dashboard in a real browser (Debian's chromium via Playwright) against the real api function
(functions-framework), the session's control plane (with kwok) and git server, and the example apps."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.apps import GitOps, configmap
from tests.support.browser import screenshot_dir
from tests.support.examples import Examples
from tests.support.functions import Functions

WIDE = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


def dashboard(functions: Functions, readonly: str = "") -> str:
    if readonly:
        functions.extra_env["TIDECD_API_READONLY_TOKEN"] = readonly
    return functions.start("api").url + "/ui/"


def log_in(browser: Any, base: str, token: str, **options: Any) -> Any:
    context = browser.new_context(viewport=options.pop("viewport", WIDE), **options)
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(base)
    assert "/ui/login" in page.url  # not logged in yet: sent to the form
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/ui/$"))
    return page


def wait_for(check: Any, timeout: float = 120.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")


def header_status(page: Any) -> tuple[str, str]:
    head = page.locator("section.panel .head")
    return (head.locator("[data-sync]").first.get_attribute("data-sync"),
            head.locator("[data-health]").first.get_attribute("data-health"))


def test_dashboard_shows_syncs_and_rolls_back_the_examples(browser: Any, examples: Examples, functions: Functions,
                                                          tmp_path: Path) -> None:
    gitops = examples.gitops
    base = dashboard(functions)
    shots = screenshot_dir(tmp_path)
    page = log_in(browser, base, functions.token)

    # Every app, with the badges its stored state says.
    assert page.locator("[data-count=all]").inner_text() == "3"
    for name in examples.apps.values():
        row = page.locator(f"tr[data-app='{name}']")
        current = gitops.state(name)
        assert row.locator("[data-sync]").get_attribute("data-sync") == current.sync_status == "Synced"
        assert row.locator("[data-health]").get_attribute("data-health") == current.health == "Healthy"
        assert row.locator(".badge.b-synced").inner_text() == "Synced"
        assert row.locator(".badge.b-healthy").inner_text() == "Healthy"
    page.screenshot(path=str(shots / "apps.png"), full_page=True)

    # Filters and search narrow the list.
    page.fill("input[name=q]", "kustomize")
    wait_for(lambda: page.locator("tr[data-app]").count() == 1, 30, "the search to narrow the list")
    assert page.locator("tr[data-app]").get_attribute("data-app") == examples.apps["kustomize-guestbook"]
    page.goto(base)

    # The guestbook app: its Deployments' ReplicaSets and Pods in the tree, hooks and waves shown.
    app = examples.apps["guestbook"]
    namespace = examples.namespaces["guestbook"]
    page.click(f"a[href='/ui/apps/{app}']")
    page.wait_for_selector("h1[data-app-name]")
    frontend = page.locator("[data-resource='Deployment/frontend']")
    assert frontend.locator(".children [data-resource^='ReplicaSet/frontend-']").count() >= 1
    pods = frontend.locator(".children [data-resource^='Pod/frontend-']")
    live_pods = gitops.kube.list("", "Pod", namespace=namespace)
    frontend_pods = [p["metadata"]["name"] for p in live_pods if p["metadata"]["name"].startswith("frontend-")]
    assert pods.count() == len(frontend_pods) >= 1
    assert frontend.locator(".tag", has_text="wave 1").count() == 1
    assert page.locator("[data-resource='Job/guestbook-migrate'] [data-hook]").inner_text() == "PreSync hook"

    # Change git: Refresh shows OutOfSync and the diff of the Deployment.
    manifest = gitops.repo.workdir / "apps" / "guestbook" / "frontend.yaml"
    manifest.write_text(manifest.read_text().replace("replicas: 1", "replicas: 2", 1))
    gitops.repo.commit("guestbook: 2 frontend replicas")
    gitops.repo.push()
    page.click("button[name=refresh]")
    page.wait_for_selector("[data-notice]")
    assert header_status(page)[0] == "OutOfSync"
    frontend = page.locator("[data-resource='Deployment/frontend']")
    assert frontend.locator("> .row [data-sync]").get_attribute("data-sync") == "OutOfSync"
    frontend.locator("> details[data-diff] > summary").click()
    diff = frontend.locator("> details[data-diff] .diff")
    assert diff.locator("tr.del", has_text="replicas: 1").count() == 1
    assert diff.locator("tr.add", has_text="replicas: 2").count() == 1
    page.click("a[href='?diff=split#tree']")
    frontend = page.locator("[data-resource='Deployment/frontend']")
    frontend.locator("> details[data-diff] > summary").click()
    split_row = frontend.locator("> details[data-diff] .diff tr", has_text="replicas: 1")
    assert split_row.locator("td.del").inner_text().strip() == "replicas: 1"
    assert split_row.locator("td.add").inner_text().strip() == "replicas: 2"

    # Sync: the operation panel follows it to the end; the app ends Synced and Healthy.
    history_before = len(gitops.state(app).history)
    page.click("button[name=sync]")  # the sync panel first: options, resources, revision
    page.click("button[name=synchronize]")
    phases: list[str] = []
    syncing = shots / "app-syncing.png"
    syncing.unlink(missing_ok=True)
    shot = {"steps": False}

    def settled() -> bool:
        phase = page.locator("#live").get_attribute("data-phase") or ""
        if not phases or phases[-1] != phase:
            phases.append(phase)
        if phase == "Running" and not shot["steps"]:  # the README's "during a sync": with its steps, if seen
            shot["steps"] = page.locator("#live [data-task]").count() > 0
            page.screenshot(path=str(syncing), full_page=True)
        return header_status(page) == ("Synced", "Healthy") and phase == "Succeeded"

    try:
        wait_for(settled, 180, "the sync to end Synced and Healthy")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; phases seen {phases}, header {header_status(page)}, "
                             f"stored {gitops.state(app).sync_status}/{gitops.state(app).health}") from None
    assert phases[0] == "Running" and phases[-1] == "Succeeded"  # followed live: the PreSync hook and 2 waves
    assert len(gitops.state(app).history) == history_before + 1
    deployment = gitops.live("Deployment", "frontend", group="apps", namespace=namespace)
    assert deployment is not None and deployment["spec"]["replicas"] == 2
    page.reload()
    page.screenshot(path=str(shots / "app.png"), full_page=True)

    # Roll back to the first deployment from history.
    first = gitops.state(app).history[0]
    page.locator(f"tr[data-history='{first.id}'] button[name=rollback]").click()
    assert "Automated sync is turned off" in page.locator("[data-automation-off]").inner_text()  # asks first
    page.click("button[name=confirm-rollback]")
    wait_for(lambda: (gitops.live("Deployment", "frontend", group="apps", namespace=namespace) or {})
             .get("spec", {}).get("replicas") == 1, 180, "the rollback to scale frontend back to 1")
    page.goto(f"{base}apps/{app}")
    wait_for(lambda: page.reload() or page.locator("[data-revision]").get_attribute("data-revision") == first.revision,
             60, "the page to show the rolled-back revision")
    # the rollback's last step may still be reading health: automation is off once the operation has ended
    wait_for(lambda: page.reload() or page.locator(".facts", has_text="manual (after a rollback)").count() == 1,
             60, "the page to show automated sync off after the rollback")
    assert page.locator("[data-history] [data-current]").count() == 1  # only what is deployed
    page.locator("#history").screenshot(path=str(shots / "history.png"))  # who, what triggered it, rollback
    page.click("button[name=refresh]")  # compared with git again: an older revision than git's, as in Argo CD
    page.wait_for_selector("[data-notice]")
    assert header_status(page)[0] == "OutOfSync"

    # Phone width and dark mode: nothing wider than the screen.
    phone = log_in(browser, base, functions.token, viewport=PHONE, color_scheme="dark")
    assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    phone.screenshot(path=str(shots / "apps-phone-dark.png"), full_page=True)
    phone.goto(f"{base}apps/{app}")
    assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    phone.screenshot(path=str(shots / "app-phone-dark.png"), full_page=True)
    phone.context.close()
    page.context.close()
    for name in ("apps.png", "app.png", "app-syncing.png", "history.png"):
        assert (shots / name).stat().st_size > 10_000


class _Attacker(BaseHTTPRequestHandler):
    """A page of another origin that posts a form to the dashboard as soon as it loads."""

    target = ""

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        body = (f"<!doctype html><form id=f method=post action='{self.target}'>"
                "<input name=prune value=on></form><script>document.getElementById('f').submit()</script>").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture()
def attacker() -> Iterator[tuple[ThreadingHTTPServer, type[_Attacker]]]:
    handler = type("Attacker", (_Attacker,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, handler
    finally:
        server.shutdown()
        server.server_close()


def test_read_only_token_and_cross_site_posts_cannot_act(browser: Any, gitops: GitOps, functions: Functions,
                                                         attacker: tuple[ThreadingHTTPServer, type[_Attacker]]) -> None:
    gitops.push({"app/a.yaml": configmap("a")})
    app = gitops.application()
    gitops.sync()
    before = gitops.state()
    readonly = "read-" + functions.token[::-1]
    base = dashboard(functions, readonly=readonly)

    # Read-only: every page, no action button, and the action routes refuse it.
    page = log_in(browser, base, readonly)
    assert page.locator(".who [data-role]").inner_text() == "read-only"
    page.goto(f"{base}apps/{app}")
    assert page.locator("[data-sync]").first.get_attribute("data-sync") == "Synced"
    assert page.locator("[data-actions]").count() == 0 and page.locator("button[name=rollback]").count() == 0
    answer = page.evaluate(f"""fetch('/ui/apps/{app}/sync',
                                     {{method: 'POST', body: new URLSearchParams({{prune: 'on'}})}})
                               .then(async r => [r.status, await r.text()])""")
    assert answer[0] == 403 and "read-only" in answer[1]
    bearer = requests.post(f"{base}apps/{app}/sync", timeout=60, headers={"Authorization": f"Bearer {readonly}"})
    assert bearer.status_code == 403
    page.context.close()

    # Cross-site: a logged-in admin visits another origin whose page posts to the dashboard.
    admin = log_in(browser, base, functions.token)
    server, handler = attacker
    handler.target = f"{base}apps/{app}/sync"
    with admin.expect_response(handler.target) as posted:
        admin.goto(f"http://127.0.0.1:{server.server_address[1]}/")
    assert posted.value.status == 403
    admin.wait_for_selector("[data-status='403']")
    after = gitops.state()
    assert len(after.history) == len(before.history)
    assert (after.operation.started_at if after.operation else "") == (before.operation.started_at
                                                                       if before.operation else "")

    # The same admin, from the dashboard itself, can act (the refusal above was not a broken button).
    admin.goto(f"{base}apps/{app}")
    admin.click("button[name=sync]")
    admin.click("button[name=synchronize]")
    admin.wait_for_selector("[data-notice]")
    wait_for(lambda: len(gitops.state().history) == len(before.history) + 1, 120, "the admin's sync")
    admin.context.close()


def test_the_demos_login_link_fills_the_form_and_keeps_the_token_out_of_the_address(browser: Any,
                                                                                    functions: Functions) -> None:
    """`make demo` prints /ui/login#token=T: the fragment fills the token form (login.js), leaves the address
    bar and the history at once, and never reaches the server; the person presses Log in."""
    base = dashboard(functions)
    context = browser.new_context(viewport=WIDE)
    page = context.new_page()
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(f"{base}login#token={functions.token}")
    wait_for(lambda: page.input_value("#token") == functions.token, 30, "the link's token in the form")
    assert "#" not in page.url and functions.token not in page.url
    assert page.evaluate("document.activeElement.textContent.trim()") == "Log in"
    assert not [url for url in requested if functions.token in url]  # no request carried it
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/ui/$"))
    assert page.locator(".who [data-role]").inner_text() == "admin"
    page.go_back()  # the history holds the login page without the token
    assert functions.token not in page.url
    context.close()
