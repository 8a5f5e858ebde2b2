"""The image updater end to end: the real registry (images pushed by crane), the real git server (push over
HTTP with sealed credentials, dulwich), the real control plane, and the same `check` the function runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.support.apps import GitOps, deployment
from tests.support.functions import Functions
from tests.support.gitserver import AuthGitServer, GitRepo
from tidecd.base.constants import LABEL_SECRET_TYPE, SECRET_TYPE_REPOSITORY
from tidecd.clients.secrets import KeyPair, seal_secret
from tidecd.images import state as images_state
from tidecd.images import writeback
from tidecd.images.annotations import PREFIX
from tidecd.runtime import Runtime
from tidecd.state import app as app_state
from tidecd.triggers.dispatch import dispatcher_for
from tidecd.usecases import api
from tidecd.usecases import images as update
from tidecd.usecases.commands import SyncRequest
from tidecd_dev.devcluster import DevCluster, free_port
from tidecd_dev.imageregistry import Registry, push_image

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "api-token-" + uuid.uuid4().hex
LIST = PREFIX + "image-list"


# -- fixtures and helpers -------------------------------------------------------------------------------------


@pytest.fixture()
def private(git_server_auth: AuthGitServer, namespace: str, cluster: DevCluster, tmp_path: Path,
            sealing: tuple[KeyPair, Path]) -> GitOps:
    """An app repository on the git server that requires basic auth, its credentials sealed in the config."""
    name = f"images-{uuid.uuid4().hex[:10]}"
    repo = GitRepo(git_server_auth, name, tmp_path / "work", clone_url=git_server_auth.auth_url(name))
    (tmp_path / "private").mkdir()
    gitops = GitOps(repo, namespace, cluster, tmp_path / "private")
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "app-repo", "namespace": "argocd",
                           "labels": {LABEL_SECRET_TYPE: SECRET_TYPE_REPOSITORY}},
              "type": "Opaque", "stringData": {"type": "git", "url": repo.url, "username": git_server_auth.username,
                                               "password": git_server_auth.password}}
    write_config(gitops, "repo.yaml", seal_secret(secret, sealing[0].cert_pem))
    return gitops


def write_config(gitops: GitOps, filename: str, doc: dict[str, Any]) -> None:
    (gitops.config_dir / filename).write_text(yaml.safe_dump(doc))


def runtime(gitops: GitOps, keys: Path, **settings: str) -> Runtime:
    return gitops.runtime(sealing_keys=str(keys), api_token=TOKEN, git_commit_user="Image Bot",
                          git_commit_email="image-bot@tidecd.invalid", **settings)


def kustomize_app(gitops: GitOps, image: str, *extra: dict[str, Any]) -> None:
    """A kustomize app: one Deployment running `image` (and any extra documents)."""
    gitops.push({"app/kustomization.yaml": {"resources": ["web.yaml"]},
                 "app/web.yaml": [deployment("web", image=image), *extra]})


def tick(rt: Runtime, app: str | None = None) -> dict[str, update.AppResult]:
    summary = update.check(rt, app, dispatcher=dispatcher_for(rt))
    return {r.app: r for r in summary.apps}


def running_image(gitops: GitOps, name: str = "web") -> str:
    live = gitops.live("Deployment", name, group="apps")
    assert live is not None, f"Deployment {name} is not there"
    return str(live["spec"]["template"]["spec"]["containers"][0]["image"])


def images_of(gitops: GitOps, name: str = "web") -> list[str]:
    live = gitops.live("Deployment", name, group="apps")
    return [str(c["image"]) for c in live["spec"]["template"]["spec"]["containers"]] if live else []


def wait_images(gitops: GitOps, *expected: str, name: str = "web", timeout: float = 90) -> None:
    """The refresh a write-back hands over runs on the local scheduler (or Pub/Sub): wait for the deploy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if images_of(gitops, name)[:len(expected)] == list(expected):
            return
        time.sleep(0.3)
    raise AssertionError(f"Deployment {name} runs {images_of(gitops, name)}, not {list(expected)}")


def remote_log(gitops: GitOps) -> list[str]:
    """Subjects and bodies of the remote main branch, newest first (via the test's git CLI)."""
    gitops.repo.git("fetch", "--quiet", "origin")
    log: str = gitops.repo.git("log", "--format=%H %an <%ae>%n%B%n--", "origin/main")
    return log.split("\n--\n")


def remote_file(gitops: GitOps, path: str) -> str:
    gitops.repo.git("fetch", "--quiet", "origin")
    content: str = gitops.repo.git("show", f"origin/main:{path}")
    return content


def remote_head(gitops: GitOps) -> str:
    gitops.repo.git("fetch", "--quiet", "origin")
    head: str = gitops.repo.git("rev-parse", "origin/main")
    return head


# -- git write-back -----------------------------------------------------------------------------------------


def test_a_new_tag_within_the_constraint_becomes_a_commit_and_then_the_running_deployment(
        private: GitOps, image_registry: Registry, sealing: tuple[KeyPair, Path]) -> None:
    image = f"{image_registry.host}/{private.namespace}/web"
    push_image(f"{image}:1.0.0")
    kustomize_app(private, f"{image}:1.0.0")
    app = private.application("web", automated={"prune": True}, annotations={
        LIST: f"web={image}:~1.0", PREFIX + "write-back-method": "git",
        PREFIX + "web.allow-tags": r"regexp:^[0-9]+\.[0-9]+\.[0-7]$", PREFIX + "web.ignore-tags": "1.0.6, *-rc*"})
    rt = runtime(private, sealing[1])
    private.reconcile("web", runtime=rt)
    assert running_image(private) == f"{image}:1.0.0"

    for tag in ("1.1.0", "1.0.6", "1.0.8", "1.0.7-rc1"):  # outside the constraint, ignored, not allowed, ignored
        push_image(f"{image}:{tag}")
    head = remote_head(private)
    result = tick(rt)[app]
    assert result.status == "unchanged", result
    assert remote_head(private) == head and running_image(private) == f"{image}:1.0.0"

    push_image(f"{image}:1.0.1")
    result = tick(rt)[app]

    assert result.status == "updated" and result.commit, result
    newest = remote_log(private)[0]
    assert newest.startswith(f"{result.commit} Image Bot <image-bot@tidecd.invalid>")
    assert f"updates image {image} tag '1.0.0' to '1.0.1'" in newest
    source = yaml.safe_load(remote_file(private, f"app/.argocd-source-{app}.yaml"))
    assert source == {"kustomize": {"images": [f"{image}:1.0.1"]}}
    wait_images(private, f"{image}:1.0.1")  # the refresh after the push synced it

    again = tick(rt)[app]
    assert again.status == "unchanged" and remote_head(private) == result.commit


def test_kustomization_and_helm_values_targets(private: GitOps, image_registry: Registry,
                                               sealing: tuple[KeyPair, Path]) -> None:
    image = f"{image_registry.host}/{private.namespace}/svc"
    for tag in ("2.0.0", "2.1.0"):
        push_image(f"{image}:{tag}")
    private.push({
        "kust/kustomization.yaml": {"resources": ["web.yaml"], "images": [{"name": image, "newTag": "2.0.0"}]},
        "kust/web.yaml": deployment("kweb", image=f"{image}:0.0.1"),
        "chart/Chart.yaml": {"apiVersion": "v2", "name": "web", "version": "0.1.0"},
        "chart/values.yaml": {"web": {"image": {"repository": image, "tag": "2.0.0"}}},
        "chart/templates/web.yaml": yaml.safe_dump(deployment("hweb", image="IMAGE")).replace(
            "IMAGE", "{{ .Values.web.image.repository }}:{{ .Values.web.image.tag }}"),
    })
    kust = private.application("kust", path="kust", automated={}, annotations={
        LIST: f"svc={image}:2.x", PREFIX + "write-back-method": "git", PREFIX + "write-back-target": "kustomization"})
    chart = private.application("chart", path="chart", automated={}, annotations={
        LIST: f"svc={image}:2.x", PREFIX + "write-back-method": "git",
        PREFIX + "write-back-target": "helmvalues:values.yaml",
        PREFIX + "svc.helm.image-name": "web.image.repository", PREFIX + "svc.helm.image-tag": "web.image.tag"})
    rt = runtime(private, sealing[1])
    for name in ("kust", "chart"):
        private.reconcile(name, runtime=rt)

    results = tick(rt)

    assert results[kust].status == "updated" and results[chart].status == "updated", results
    kustomization = yaml.safe_load(remote_file(private, "kust/kustomization.yaml"))
    assert kustomization["images"] == [{"name": image, "newTag": "2.1.0"}]
    values = yaml.safe_load(remote_file(private, "chart/values.yaml"))
    assert values == {"web": {"image": {"repository": image, "tag": "2.1.0"}}}
    wait_images(private, f"{image}:2.1.0", name="kweb")
    wait_images(private, f"{image}:2.1.0", name="hweb")


def test_two_ticks_at_once_push_one_commit(private: GitOps, image_registry: Registry,
                                           sealing: tuple[KeyPair, Path]) -> None:
    image = f"{image_registry.host}/{private.namespace}/web"
    push_image(f"{image}:1.0.0")
    kustomize_app(private, f"{image}:1.0.0")
    app = private.application("web", annotations={LIST: f"web={image}:1.x", PREFIX + "write-back-method": "git"})
    private.reconcile("web", runtime=runtime(private, sealing[1]))
    push_image(f"{image}:1.2.0")
    before = len(remote_log(private))
    barrier, found = threading.Barrier(2), []

    def one() -> None:
        rt = runtime(private, sealing[1])
        barrier.wait()
        found.append(update.check(rt, app, dispatcher=_NoRefresh()).apps[0])

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert sorted(r.status for r in found) in (["skipped", "updated"], ["unchanged", "updated"]), found
    log = remote_log(private)
    assert len(log) == before + 1 and "to '1.2.0'" in log[0]


def test_a_push_that_loses_the_race_is_redone_on_the_new_head_never_forced(
        private: GitOps, sealing: tuple[KeyPair, Path]) -> None:
    private.push({"app/values.yaml": {"image": {"tag": "1"}}})
    rt = runtime(private, sealing[1])
    creds = rt.repo_credentials(private.repo.url)
    calls: list[str] = []

    def edit(read: Any) -> dict[str, str]:
        calls.append(read("app/values.yaml") or "")
        if len(calls) == 1:  # someone else pushes between our fetch and our push
            private.push({"other.txt": "a colleague's change\n"}, message="colleague")
        return {"app/values.yaml": "image:\n  tag: '2'\n"}

    sha = writeback.push(private.repo.url, creds, base="main", target="main", edit=edit, message="bump\n",
                         author=writeback.Author())

    assert len(calls) == 2 and sha == remote_head(private)
    subjects = [entry.split("\n")[1] for entry in remote_log(private)[:2]]
    assert subjects == ["bump", "colleague"]  # ours on top of theirs: nothing overwritten
    assert remote_file(private, "other.txt") == "a colleague's change"


# -- argocd write-back, strategies ---------------------------------------------------------------------------


def test_argocd_write_back_changes_the_cluster_with_no_commit(gitops: GitOps, functions: Functions,
                                                              image_registry: Registry) -> None:
    """Through the deployed shape: the `images` target and the api as functions-framework processes."""
    image = f"{image_registry.host}/{gitops.namespace}/web"
    push_image(f"{image}:3.0.0")
    kustomize_app(gitops, f"{image}:3.0.0")
    app = gitops.application("web", automated={}, annotations={LIST: f"web={image}:^3"})
    gitops.reconcile("web")
    push_image(f"{image}:3.4.0")
    head = remote_head(gitops)
    # The step's manifest cache is gone (a store lifecycle rule, or a CRD installed since: the served API
    # versions are part of its key): the updater renders as the step does, it does not read "not used".
    evicted = gitops.store.list(f"manifests/{app}/")
    assert evicted, "the step left no manifests to evict"
    for key in evicted:
        gitops.store.delete(key)

    answer = requests.post(functions.start("images").url, timeout=300)

    assert answer.status_code == 200, answer.text
    [result] = answer.json()["apps"]
    assert (result["app"], result["status"], result["commit"]) == (app, "updated", ""), result
    assert answer.json()["tags_list_calls"] == 1 and app in answer.json()["refreshed"]
    assert remote_head(gitops) == head
    wait_images(gitops, f"{image}:3.4.0")
    body = functions.api("GET", f"/apps/{app}").json()
    assert body["images"]["override"] == [f"{image}:3.4.0"] and body["syncStatus"] == "Synced"


def test_newest_build_and_digest_pick_what_they_should(gitops: GitOps, image_registry: Registry) -> None:
    build, follow = f"{image_registry.host}/{gitops.namespace}/build", f"{image_registry.host}/{gitops.namespace}/dig"
    push_image(f"{build}:a1", created="2024-01-01T00:00:00Z")
    push_image(f"{build}:b2", created="2024-03-01T00:00:00Z")
    push_image(f"{build}:c3", created="2024-02-01T00:00:00Z")
    push_image(f"{build}:d4", created="2024-04-01T00:00:00Z", platforms=("linux/arm64",), index=True)
    first = push_image(f"{follow}:stable", platforms=("linux/amd64", "linux/arm64"))
    web = deployment("web", image=f"{build}:a1")
    web["spec"]["template"]["spec"]["containers"].append({"name": "side", "image": f"{follow}:stable"})
    gitops.push({"app/kustomization.yaml": {"resources": ["web.yaml"]}, "app/web.yaml": web})
    app = gitops.application("web", automated={}, annotations={
        LIST: f"b={build}, d={follow}:stable", PREFIX + "b.update-strategy": "newest-build",
        PREFIX + "d.update-strategy": "digest", PREFIX + "d.platforms": "linux/arm64"})
    rt = gitops.runtime()
    gitops.reconcile("web", runtime=rt)

    result = tick(rt)[app]

    assert result.status == "updated", result
    assert {c.alias: c.new for c in result.changes} == {"b": "b2", "d": first}  # d4 has no linux/amd64 image
    wait_images(gitops, f"{build}:b2", f"{follow}@{first}")

    second = push_image(f"{follow}:stable", platforms=("linux/amd64", "linux/arm64"))  # the tag moves
    result = tick(rt)[app]
    assert [(c.alias, c.old, c.new) for c in result.changes] == [("d", first, second)]
    wait_images(gitops, f"{build}:b2", f"{follow}@{second}")


# -- registries that need credentials, or are down -------------------------------------------------------------


@pytest.mark.parametrize("auth", ["basic", "bearer"])
def test_a_registry_requiring_auth_works_with_a_sealed_pull_secret(
        auth: str, gitops: GitOps, image_registry_basic: Registry, image_registry_bearer: Registry,
        sealing: tuple[KeyPair, Path]) -> None:
    registry = image_registry_basic if auth == "basic" else image_registry_bearer
    image = f"{registry.host}/{gitops.namespace}/web"
    for tag in ("1.0.0", "1.3.0"):
        push_image(f"{image}:{tag}", env=registry.crane_env())
    kustomize_app(gitops, f"{image}:1.0.0")
    app = gitops.application("web", annotations={LIST: f"web={image}",
                                                 PREFIX + "web.pull-secret": "pullsecret:argocd/regcred"})
    rt = gitops.runtime(sealing_keys=str(sealing[1]))
    gitops.reconcile("web", runtime=rt)

    refused = tick(rt)[app]  # the Secret is not in the config source yet
    assert refused.status == "invalid" and "no Secret argocd/regcred" in refused.message

    secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
              "metadata": {"name": "regcred", "namespace": "argocd"},
              "stringData": {".dockerconfigjson": json.dumps(registry.docker_config())}}
    write_config(gitops, "regcred.yaml", seal_secret(secret, sealing[0].cert_pem))
    rt = gitops.runtime(sealing_keys=str(sealing[1]))
    result = tick(rt)[app]

    assert result.status == "updated" and result.changes[0].new == "1.3.0", result
    if registry.token_server is not None:
        assert registry.token_server.issued >= 1
    stored = json.dumps(images_state.load(gitops.store, app).to_json())
    assert registry.password not in stored


def test_a_registry_without_credentials_or_down_changes_nothing_and_says_so(
        gitops: GitOps, image_registry_basic: Registry) -> None:
    down = f"127.0.0.1:{free_port()}/{gitops.namespace}/web"
    locked = f"{image_registry_basic.host}/{gitops.namespace}/locked"
    push_image(f"{locked}:1.0.0", env=image_registry_basic.crane_env())
    web = deployment("web", image=f"{down}:1.0.0")
    web["spec"]["template"]["spec"]["containers"].append({"name": "locked", "image": f"{locked}:1.0.0"})
    gitops.push({"app/kustomization.yaml": {"resources": ["web.yaml"]}, "app/web.yaml": web})
    gone = gitops.application("gone", annotations={LIST: f"web={down}"})
    shut = gitops.application("shut", annotations={LIST: f"locked={locked}"})
    rt = gitops.runtime(api_token=TOKEN)
    for name in ("gone", "shut"):
        gitops.reconcile(name, runtime=rt)
    head = remote_head(gitops)

    results = tick(rt)

    assert results[gone].status == "unavailable" and "is unavailable" in results[gone].message
    assert results[shut].status == "unavailable" and "requires credentials" in results[shut].message
    assert remote_head(gitops) == head and images_state.render_override(gitops.store, gone) is None
    body = api.handle("GET", f"/api/v1/apps/{gone}", {"Authorization": f"Bearer {TOKEN}"}, b"", rt).body
    assert any(c["type"] == "ImageUpdaterError" and "left as they are" in c["message"] for c in body["conditions"])

    env = {"TIDECD_CONFIG": str(gitops.config_dir), "TIDECD_STORE": str(gitops.store.root),
           "KUBECONFIG": str(gitops.dev.kubeconfig), "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
    cli = subprocess.run([sys.executable, "-m", "tidecd.cli", "image", "check", gone], env=env, text=True,
                         capture_output=True, timeout=120, check=False)
    assert cli.returncode == 1 and "unavailable" in cli.stdout, cli.stderr[-1000:]


# -- rollback holds -------------------------------------------------------------------------------------------


def test_after_a_rollback_a_newer_tag_does_not_upgrade_until_unpinned(gitops: GitOps, image_registry: Registry) -> None:
    image = f"{image_registry.host}/{gitops.namespace}/web"
    push_image(f"{image}:1.0.0")
    kustomize_app(gitops, f"{image}:1.0.0")
    app = gitops.application("web", automated={}, annotations={LIST: f"web={image}:1.x"})
    rt = gitops.runtime(api_token=TOKEN)
    gitops.reconcile("web", runtime=rt)
    push_image(f"{image}:1.1.0")
    assert tick(rt)[app].status == "updated"
    wait_images(gitops, f"{image}:1.1.0")
    deadline = time.monotonic() + 60  # the sync's last step may still be reading health: a rollback waits for it
    while (op := app_state.load(gitops.store, app)[0].operation) is not None and op.running:
        assert time.monotonic() < deadline, op
        time.sleep(0.3)
    history = app_state.load(gitops.store, app)[0].history
    first = history[0].id

    auth = {"Authorization": f"Bearer {TOKEN}"}
    answer = api.handle("POST", f"/api/v1/apps/{app}/rollback", auth, json.dumps({"id": first}).encode(), rt)
    assert answer.status == 202, answer.body  # the rollback operation runs on; its steps are scheduled
    wait_images(gitops, f"{image}:1.0.0")  # back to the image of that deployment

    push_image(f"{image}:1.2.0")
    held = tick(rt)[app]
    assert held.status == "pinned" and held.message.startswith("pinned since ") and "by rollback" in held.message
    assert running_image(gitops) == f"{image}:1.0.0"
    got = api.handle("GET", f"/api/v1/apps/{app}", auth, b"", rt).body
    assert got["images"]["pinned"] == held.message

    env = {"TIDECD_CONFIG": str(gitops.config_dir), "TIDECD_STORE": str(gitops.store.root),
           "KUBECONFIG": str(gitops.dev.kubeconfig), "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
    cli = subprocess.run([sys.executable, "-m", "tidecd.cli", "image", "unpin", app], env=env, text=True,
                         capture_output=True, timeout=120, check=False)
    assert cli.returncode == 0 and "pin lifted" in cli.stdout, cli.stderr[-1000:]

    after = tick(rt)[app]
    assert after.status == "updated" and after.changes[0].new == "1.2.0", after
    gitops.reconcile("web", SyncRequest(), runtime=rt)  # rollback switched automated sync off: sync by hand
    wait_images(gitops, f"{image}:1.2.0")


def test_a_manual_sync_of_the_target_revision_lifts_the_pin(gitops: GitOps, image_registry: Registry) -> None:
    image = f"{image_registry.host}/{gitops.namespace}/web"
    push_image(f"{image}:1.0.0")
    kustomize_app(gitops, f"{image}:1.0.0")
    app = gitops.application("web", annotations={LIST: f"web={image}"})
    rt = gitops.runtime()
    gitops.reconcile("web", SyncRequest(), runtime=rt)
    gitops.reconcile("web", SyncRequest(revision=gitops.state("web").revision, rollback=True, history_id=1),
                     runtime=rt)
    push_image(f"{image}:1.0.1")
    assert tick(rt)[app].status == "pinned"

    gitops.reconcile("web", SyncRequest(), runtime=rt)

    assert images_state.load(gitops.store, app).pin is None
    assert tick(rt)[app].status == "updated"


class _NoRefresh:
    def dispatch(self, refreshes: Any) -> dict[str, str]:
        return {}

    def schedule(self, app: str, delay: float, reason: str) -> None:
        raise AssertionError("the image updater schedules no continuation")
