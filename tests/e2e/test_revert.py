"""Rollback through git, end to end: the seed's ImageOps scenario with the real control plane, the real git
server (the image updater's write-back and the revert are real pushes), the real OCI registry and the
OpenAPI-driven GitHub stand-in for the revert's pull request.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

import tidecd
from tests.e2e.test_continuations import slow
from tests.e2e.test_github import eventually
from tests.e2e.test_images import TOKEN, kustomize_app, remote_file, remote_head, running_image, tick, wait_images
from tests.support.apps import GitOps, deployment
from tests.support.github_repos import GitHubReposStandIn
from tests.support.gitserver import GitRepo
from tidecd import ui
from tidecd.clients.secrets import KeyPair, seal_secret
from tidecd.images import state as images_state
from tidecd.images.annotations import PREFIX
from tidecd.runtime import Runtime
from tidecd.state import app as app_state
from tidecd.state import autorollback as autorollback_state
from tidecd.state import revert as revert_state
from tidecd.step import autorollback
from tidecd.triggers.dispatch import Refresh, dispatcher_for
from tidecd.usecases import api, poll, revert, webhook
from tidecd.usecases.commands import SyncRequest
from tidecd_dev.devcluster import READY_AFTER, DevCluster
from tidecd_dev.imageregistry import Registry, push_image

pytestmark = pytest.mark.e2e

LIST = PREFIX + "image-list"
HOST = "cd.example"
HOOK_KEY = "revert-hook-key"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture()
def octo(git_server: Any, namespace: str, cluster: DevCluster, tmp_path: Path, sealing: tuple[KeyPair, Path]) -> GitOps:
    """An app repository named owner/name (as on GitHub), the github Secret sealed in the config source."""
    home = tmp_path / "octo"
    home.mkdir()
    repo = GitRepo(git_server, f"octo/web-{uuid.uuid4().hex[:10]}", home / "work")
    gitops = GitOps(repo, namespace, cluster, home)
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "github", "namespace": "tidecd",
                           "labels": {"argocd.argoproj.io/secret-type": "github"}},
              "stringData": {"token": "e2e-github-token"}}
    (gitops.config_dir / "github-secret.yaml").write_text(yaml.safe_dump(seal_secret(secret, sealing[0].cert_pem)))
    return gitops


def runtime(gitops: GitOps, keys: Path, standin: GitHubReposStandIn) -> Runtime:
    return gitops.runtime(sealing_keys=str(keys), api_token=TOKEN, github_api_url=standin.base_url,
                          webhook_secret=HOOK_KEY, git_commit_user="Image Bot",
                          git_commit_email="image-bot@tidecd.invalid")


def full_name(gitops: GitOps) -> str:
    """owner/name, as GitHub (and `clients.github.repo_of`) names the app's repository."""
    return "/".join(str(gitops.repo.url).rstrip("/").removesuffix(".git").split("/")[-2:])


def updated_app(gitops: GitOps, rt: Runtime, image: str) -> str:
    """The seed's start: web runs 1.0.0, the updater writes 1.1.0 back to git and it is deployed."""
    push_image(f"{image}:1.0.0")
    kustomize_app(gitops, f"{image}:1.0.0")
    app = gitops.application("web", automated={"prune": True}, annotations={
        LIST: f"web={image}:1.x", PREFIX + "write-back-method": "git"})
    gitops.reconcile("web", runtime=rt)
    assert running_image(gitops) == f"{image}:1.0.0"
    push_image(f"{image}:1.1.0")
    result = tick(rt)[app]
    assert result.status == "updated" and result.commit, result
    wait_images(gitops, f"{image}:1.1.0")
    eventually(lambda: gitops.state("web").revision == result.commit and not (
        (op := gitops.state("web").operation) is not None and op.running), what="the write-back commit deployed")
    return app


def updated(gitops: GitOps, registry: Registry, sealing: tuple[KeyPair, Path],
            standin: GitHubReposStandIn) -> tuple[str, Runtime, str, app_state.HistoryEntry]:
    """(image, runtime, app, its first history entry) after the updater's write-back was deployed."""
    image = f"{registry.host}/{gitops.namespace}/web"
    rt = runtime(gitops, sealing[1], standin)
    app = updated_app(gitops, rt, image)
    return image, rt, app, app_state.load(gitops.store, app)[0].history[0]


def rolled_back(gitops: GitOps, image: str) -> None:
    """The rollback operation has ended (its end is what switches automated sync off)."""
    wait_images(gitops, f"{image}:1.0.0")
    eventually(lambda: (op := gitops.state("web").operation) is not None and not op.running and op.request.rollback,
               what="the rollback operation ended")


def dashboard_login(rt: Runtime, app: str) -> tuple[str, str]:
    """(cookie, CSRF token) of a dashboard session, as the login form makes it."""
    page = ui.handle(ui.Request("POST", "/ui/login", {"Host": HOST, "Origin": f"https://{HOST}"},
                                form={"token": TOKEN, "next": f"/ui/apps/{app}"}), rt)
    assert page.status == 303, page.body[:300]
    cookie = next(v for k, v in page.headers if k == "Set-Cookie").split(";")[0]
    html = ui.handle(ui.Request("GET", f"/ui/apps/{app}", {"Host": HOST, "Cookie": cookie}), rt).body.decode()
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, "no CSRF token on the page"
    return cookie, found.group(1)


def app_page(rt: Runtime, app: str) -> str:
    page = ui.handle(ui.Request("GET", f"/ui/apps/{app}", {"Host": HOST, **AUTH}), rt)
    assert page.status == 200, page.body[:300]
    return page.body.decode()


def cli_get(gitops: GitOps, app: str) -> str:
    env = {"TIDECD_CONFIG": str(gitops.config_dir), "TIDECD_STORE": str(gitops.store.root),
           "KUBECONFIG": str(gitops.dev.kubeconfig), "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
           "PYTHONPATH": str(Path(tidecd.__file__).resolve().parents[1])}  # this tree's tidecd
    cli = subprocess.run([sys.executable, "-m", "tidecd.cli", "app", "get", app, "--cached"], env=env, text=True,
                         capture_output=True, timeout=120, check=False)
    assert cli.returncode in (0, 5), cli.stderr[-1000:]
    return cli.stdout


def deliver(rt: Runtime, event: str, payload: dict[str, Any]) -> Any:
    body = json.dumps(payload).encode()
    signature = "sha256=" + hmac.new(HOOK_KEY.encode(), body, hashlib.sha256).hexdigest()
    headers = {"Content-Type": "application/json", "X-GitHub-Event": event, "X-Hub-Signature-256": signature,
               "X-GitHub-Delivery": uuid.uuid4().hex, "User-Agent": "GitHub-Hookshot/abc"}
    return webhook.handle(headers, body, rt, dispatcher_for(rt))


def closed_payload(examples: dict[str, list[dict[str, Any]]], repo: str, number: int, merged: bool) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(json.dumps(next(e for e in examples["pull_request"] if e["action"] == "closed")))
    doc["number"] = doc["pull_request"]["number"] = number
    doc["pull_request"]["merged"] = merged
    doc["repository"]["full_name"] = repo
    return doc


def test_a_rollback_with_a_revert_pull_request_holds_until_the_merge_then_git_and_cluster_agree(
        octo: GitOps, image_registry: Registry, sealing: tuple[KeyPair, Path], github_repos: GitHubReposStandIn,
        webhook_examples: dict[str, list[dict[str, Any]]]) -> None:
    image, rt, app, first = updated(octo, image_registry, sealing, github_repos)
    updated_head = remote_head(octo)

    # the dashboard's Rollback, with "revert PR" ticked
    cookie, csrf = dashboard_login(rt, app)
    page = ui.handle(ui.Request("POST", f"/ui/apps/{app}/rollback", {"Host": HOST, "Cookie": cookie, "Origin": f"https://{HOST}"},
                                form={"csrf": csrf, "id": str(first.id), "revert": "pr", "confirm": "yes"}), rt)
    assert page.status == 303 and any("notice=rollback-revert-started" in v for _, v in page.headers), page.headers
    rolled_back(octo, image)  # the cluster is back at the old image

    record, _ = revert_state.load(octo.store, app)
    assert record is not None and record.phase == "open" and record.pull.number, record
    repo = full_name(octo)
    created = github_repos.calls_to("pulls/create")
    assert len(created) == 1 and created[0].body["base"] == "main" and created[0].body["head"] == record.branch
    assert record.pull.url == f"https://github.com/{repo}/pull/{record.pull.number}"
    # the revert branch has the app's path as it was at the rolled-back revision: no write-back file
    octo.repo.git("fetch", "--quiet", "origin")
    files = octo.repo.git("ls-tree", "-r", "--name-only", f"origin/{record.branch}", "app").split()
    assert sorted(files) == ["app/kustomization.yaml", "app/web.yaml"], files
    assert f"{image}:1.1.0" in remote_file(octo, f"app/.argocd-source-{app}.yaml")  # main: not merged yet
    assert remote_head(octo) == updated_head

    # while the pull request is open the image updater does not move the app forward
    push_image(f"{image}:1.2.0")
    held = tick(rt)[app]
    assert held.status == "pinned", held
    assert remote_head(octo) == updated_head and running_image(octo) == f"{image}:1.0.0"
    assert app_state.load(octo.store, app)[0].automation.disabled  # automated sync holds too
    got = api.handle("GET", f"/api/v1/apps/{app}", AUTH, b"", rt).body
    assert got["revert"]["phase"] == "open" and got["revert"]["url"] == record.pull.url
    assert got["revert"]["message"] == f"rolled back, waiting for the revert to merge: {record.pull.url}"
    assert f"Revert:     rolled back, waiting for the revert to merge: {record.pull.url}" in cli_get(octo, app)
    html = app_page(rt, app)
    assert 'data-revert="open"' in html and f'href="{record.pull.url}"' in html
    # a poll in between changes nothing: the branch does not have the revert yet
    assert poll.poll(rt, dispatcher_for(rt), jitter_seconds=0).reverts == {}

    # the revert merges on the forge; GitHub tells tidecd
    octo.repo.git("merge", "--quiet", "--no-ff", "-m", "Merge the revert", f"origin/{record.branch}")
    octo.repo.push()
    merged_head = octo.repo.head()
    answer = deliver(rt, "pull_request", closed_payload(webhook_examples, repo, record.pull.number, merged=True))
    assert answer.status == 200 and answer.body.get("reverts") == {app: "merged"}, answer.body

    # the hold lifted by itself: automated sync takes the merge, and git, cluster, api and dashboard agree
    eventually(lambda: octo.state("web").revision == merged_head and str(octo.state("web").sync_status) == "Synced",
               what="the merged revert synced")
    assert not app_state.load(octo.store, app)[0].automation.disabled
    assert running_image(octo) == f"{image}:1.0.0"
    octo.repo.git("fetch", "--quiet", "origin")
    assert f"app/.argocd-source-{app}.yaml" not in octo.repo.git("ls-tree", "-r", "--name-only", "origin/main")
    got = api.handle("GET", f"/api/v1/apps/{app}", AUTH, b"", rt).body
    assert got["revert"]["phase"] == "merged" and got["revision"] == merged_head and got["syncStatus"] == "Synced"
    assert got["images"]["pinned"] == "" and got["images"]["refused"] == [f"{image}:1.1.0"]
    assert 'data-revert="merged"' in app_page(rt, app)
    # the reverted tag is never written back again; a newer one still is
    after = tick(rt)[app]
    assert after.status == "updated" and after.changes[0].new == "1.2.0", after
    assert images_state.load(octo.store, app).pin is None


def test_a_revert_pull_request_closed_unmerged_keeps_the_hold_and_says_so(
        octo: GitOps, image_registry: Registry, sealing: tuple[KeyPair, Path],
        github_repos: GitHubReposStandIn) -> None:
    image, rt, app, first = updated(octo, image_registry, sealing, github_repos)

    answer = api.handle("POST", f"/api/v1/apps/{app}/rollback", AUTH,
                        json.dumps({"id": first.id, "revert": "pr"}).encode(), rt)
    assert answer.status == 202 and answer.body["revert"]["phase"] == "open", answer.body
    rolled_back(octo, image)
    number = answer.body["revert"]["pull"]

    github_repos.pull_heads[(full_name(octo), number)] = {"state": "closed"}  # closed on the forge, not merged
    summary = poll.poll(rt, dispatcher_for(rt), jitter_seconds=0)
    assert summary.reverts == {app: "closed"}, summary

    got = api.handle("GET", f"/api/v1/apps/{app}", AUTH, b"", rt).body
    assert got["revert"]["phase"] == "closed" and "closed without merging" in got["revert"]["message"]
    assert app_state.load(octo.store, app)[0].automation.disabled  # waits for a person
    push_image(f"{image}:1.2.0")
    assert tick(rt)[app].status == "pinned" and running_image(octo) == f"{image}:1.0.0"


def test_a_revert_push_needs_the_apps_permission_and_a_git_source(
        octo: GitOps, image_registry: Registry, sealing: tuple[KeyPair, Path],
        github_repos: GitHubReposStandIn) -> None:
    image, rt, app, first = updated(octo, image_registry, sealing, github_repos)
    head = remote_head(octo)

    answer = api.handle("POST", f"/api/v1/apps/{app}/rollback", AUTH,
                        json.dumps({"id": first.id, "revert": "push"}).encode(), rt)
    assert answer.status == 202, answer.body  # the rollback goes on; the revert is refused, and says why
    assert "tidecd.io/revert-push" in answer.body["revertError"] and "revert" not in answer.body
    assert remote_head(octo) == head and revert_state.load(octo.store, app)[0] is None
    bad = api.handle("POST", f"/api/v1/apps/{app}/rollback", AUTH,
                     json.dumps({"id": first.id, "revert": "squash"}).encode(), rt)
    assert bad.status == 400, bad.body


# -- automatic rollback ---------------------------------------------------------------------------------------


def stuck(obj: dict[str, Any]) -> dict[str, Any]:
    """The Deployment, with pods kwok never makes Ready and a 2 s progress deadline: it turns Degraded."""
    out = slow(obj, **{READY_AFTER: "1h"})
    out["spec"]["progressDeadlineSeconds"] = 2
    return out


def test_an_app_degraded_past_its_window_rolls_back_by_itself_once_and_says_so(
        octo: GitOps, sealing: tuple[KeyPair, Path], github_repos: GitHubReposStandIn) -> None:
    rt = runtime(octo, sealing[1], github_repos)
    good = octo.push({"app/web.yaml": deployment("web")})
    app = octo.application("web", automated={}, annotations={autorollback.ANNOTATION: "on-degraded=5s, revert=pr"})
    dispatcher = dispatcher_for(rt)
    dispatcher.dispatch([Refresh(app, "first")])
    eventually(lambda: octo.state("web").revision == good and str(octo.state("web").health) == "Healthy",
               what="the good revision Healthy")

    bad = octo.push({"app/web.yaml": stuck(deployment("web"))}, message="a release that never becomes ready")
    started = time.monotonic()
    dispatcher.dispatch([Refresh(app, "push")])  # as the webhook would: the automated sync takes it
    eventually(lambda: str(octo.state("web").health) == "Degraded" and octo.state("web").revision == bad,
               what="the bad revision Degraded")
    degraded_at = time.monotonic()

    def rolled_back() -> bool:
        op = octo.state("web").operation
        return op is not None and op.request.initiated_by == "auto-rollback" and not op.running
    eventually(rolled_back, what="the automatic rollback ended", timeout=120)
    took = time.monotonic() - degraded_at
    state = octo.state("web")
    assert state.operation is not None and state.operation.phase == "Succeeded" and state.revision == good
    assert took >= 4.0, f"rolled back {took:.1f}s after turning Degraded: the 5 s window was not kept"
    assert state.automation.disabled  # a rollback's hold: automated sync does not take the bad revision again
    live = octo.live("Deployment", "web", group="apps")
    assert live is not None and READY_AFTER not in (live["spec"]["template"]["metadata"].get("annotations") or {})
    memory = autorollback_state.load(octo.store, app)[0]
    assert memory.rolled_back == bad and memory.to_revision == good and "Degraded for" in memory.reason
    notified = json.loads(octo.store.read(f"notifications/{app}.json").data)  # type: ignore[union-attr]
    assert notified["seen"]["fired"]["on-auto-rollback"] == state.operation.id

    # the poll opens its revert (the step never writes git); the hold waits for it to merge
    assert poll.poll(rt, dispatcher, jitter_seconds=0).reverts == {app: "opened"}
    record, _ = revert_state.load(octo.store, app)
    assert record is not None and record.phase == "open" and record.reverted == bad and record.revision == good
    assert len(github_repos.calls_to("pulls/create")) == 1
    got = api.handle("GET", f"/api/v1/apps/{app}", AUTH, b"", rt).body
    assert got["autoRollback"]["revision"] == bad and got["autoRollback"]["revert"] == "opened"
    assert got["revert"]["message"].startswith("rolled back, waiting for the revert to merge: https://github.com/")
    assert f"Rolled back automatically: {bad[:12]} → {good[:12]}" in cli_get(octo, app)

    # never twice for one revision: a person syncs the bad revision again, it degrades again, and stays
    octo.reconcile("web", SyncRequest(), runtime=rt)

    def degraded_again() -> bool:  # steps as the scheduled continuations would take them
        octo.reconcile("web", runtime=rt, automate=False, follow=False)
        return str(octo.state("web").health) == "Degraded"
    eventually(degraded_again, what="Degraded again")
    time.sleep(8)  # the test waits past the window; tidecd itself only records times and continuations
    octo.reconcile("web", runtime=rt, automate=False)
    final = octo.state("web")
    assert final.revision == bad and str(final.health) == "Degraded"
    assert final.operation is not None and final.operation.request.initiated_by != "auto-rollback"
    assert autorollback_state.load(octo.store, app)[0].operation_id == memory.operation_id
    notified = json.loads(octo.store.read(f"notifications/{app}.json").data)  # type: ignore[union-attr]
    assert notified["seen"]["fired"]["on-auto-rollback"] == state.operation.id
    assert time.monotonic() - started < 150


def test_an_app_that_allows_it_gets_the_revert_pushed_and_the_poll_lifts_the_hold(
        octo: GitOps, image_registry: Registry, sealing: tuple[KeyPair, Path],
        github_repos: GitHubReposStandIn) -> None:
    image = f"{image_registry.host}/{octo.namespace}/web"
    rt = runtime(octo, sealing[1], github_repos)
    push_image(f"{image}:1.0.0")
    kustomize_app(octo, f"{image}:1.0.0")
    app = octo.application("web", automated={"prune": True}, annotations={
        LIST: f"web={image}:1.x", PREFIX + "write-back-method": "git", revert.ALLOW_PUSH: "allow"})
    octo.reconcile("web", runtime=rt)
    push_image(f"{image}:1.1.0")
    written = tick(rt)[app].commit
    wait_images(octo, f"{image}:1.1.0")
    eventually(lambda: octo.state("web").revision == written and not (
        (op := octo.state("web").operation) is not None and op.running), what="the write-back deployed")
    first = app_state.load(octo.store, app)[0].history[0]

    answer = api.handle("POST", f"/api/v1/apps/{app}/rollback", AUTH,
                        json.dumps({"id": first.id, "revert": "push"}).encode(), rt)
    assert answer.status == 202 and answer.body["revert"]["mode"] == "push", answer.body
    commit = answer.body["revert"]["commit"]
    assert remote_head(octo) == commit and github_repos.calls_to("pulls/create") == []  # on main itself
    rolled_back(octo, image)

    summary = poll.poll(rt, dispatcher_for(rt), jitter_seconds=0)
    assert summary.reverts == {app: "merged"}, summary
    eventually(lambda: octo.state("web").revision == commit and str(octo.state("web").sync_status) == "Synced",
               what="automated sync took the pushed revert")
    assert running_image(octo) == f"{image}:1.0.0" and not octo.state("web").automation.disabled
    assert tick(rt)[app].status == "unchanged"  # 1.1.0 is refused now, and nothing newer exists
