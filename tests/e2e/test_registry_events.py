"""Registry push notifications end to end: the real OCI registry (tags pushed by crane), the real git server
(write-back over HTTP with sealed credentials), the real control plane, and the webhook as a
functions-framework process. A pushed tag, then the registry's notification (Harbor-shaped, and a GitHub
`package` event): the image updater commits it and the app is deployed at it within seconds, with no images
tick (the `images` function is never started). A notification with a bad proof is refused and triggers
nothing; one for a repository no app follows triggers nothing. A pushed helm chart's notification refreshes
the apps whose source is that OCI repository.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.test_chart_sources import chart_app, cm
from tests.e2e.test_images import LIST, kustomize_app, private, remote_head, remote_log, running_image
from tests.support.apps import GitOps
from tests.support.charts import Registry as ChartRegistry
from tests.support.charts import package, write_chart
from tests.support.functions import Function, Functions
from tidecd.base.model import SyncStatus
from tidecd.clients.secrets import KeyPair
from tidecd.images import state as images_state
from tidecd.images.annotations import PREFIX
from tidecd.state import app as app_state
from tidecd.usecases.registry_events import source_token
from tidecd_dev.imageregistry import Registry, push_image

pytestmark = pytest.mark.e2e

__all__ = ["private"]  # the fixture: an app repository behind basic auth, its credentials sealed in the config

WITHIN = 30.0  # seconds from the notification to the app Synced at the new image, on this 2-core machine


def harbor_payload(reference: str, tag: str) -> dict[str, Any]:
    """Harbor's default webhook payload for an `Artifact pushed` event."""
    host, _, rest = reference.partition("/")
    namespace, _, name = rest.rpartition("/")
    return {"type": "PUSH_ARTIFACT", "occur_at": int(time.time()), "operator": "robot$ci",
            "event_data": {"resources": [{"digest": "sha256:" + "0" * 64, "tag": tag,
                                          "resource_url": f"{reference}:{tag}"}],
                           "repository": {"date_created": int(time.time()), "name": name, "namespace": namespace,
                                          "repo_full_name": rest, "repo_type": "private"}}}


def github_package_payload(reference: str, tag: str) -> dict[str, Any]:
    """GitHub's `package` event of a container version published to a registry (GHCR's shape)."""
    namespace, _, name = reference.partition("/")[2].rpartition("/")
    digest = "sha256:" + "1" * 64
    return {"action": "published", "sender": {"login": "ci-bot", "type": "Bot"},
            "package": {"id": 1, "name": name, "namespace": namespace, "ecosystem": "CONTAINER",
                        "package_type": "CONTAINER", "owner": {"login": namespace},
                        "package_version": {"id": 2, "version": digest,
                                            "container_metadata": {"tag": {"name": tag, "digest": digest}},
                                            "package_url": f"{reference}:{tag}"},
                        "registry": {"url": f"https://{reference.partition('/')[0]}/{namespace}", "type": "CONTAINER"}}}


def notify_harbor(webhook: Function, payload: dict[str, Any], token: str) -> requests.Response:
    return requests.post(f"{webhook.url}/registry/harbor", data=json.dumps(payload).encode(), timeout=120,
                         headers={"Content-Type": "application/json", "Authorization": token,
                                  "User-Agent": "Harbor"})


def wait_synced_at(gitops: GitOps, app: str, image: str, commit: str, started: float) -> float:
    """Seconds from `started` until the Deployment runs `image` and the app is Synced at `commit`."""
    deadline = started + WITHIN
    while time.monotonic() < deadline:
        state = app_state.load(gitops.store, app)[0]
        if running_image(gitops) == image and state.revision == commit and state.sync_status is SyncStatus.SYNCED:
            return time.monotonic() - started
        time.sleep(0.2)
    state = app_state.load(gitops.store, app)[0]
    raise AssertionError(f"{app}: runs {running_image(gitops)}, {state.sync_status} at {state.revision[:12]}, "
                         f"not Synced at {image} ({commit[:12]}) within {WITHIN:g} s of the notification")


def test_a_pushed_tag_is_committed_and_deployed_within_seconds_of_the_notification_with_no_images_tick(
        private: GitOps, image_registry: Registry, sealing: tuple[KeyPair, Path], tmp_path: Path) -> None:
    image = f"{image_registry.host}/{private.namespace}/web"
    push_image(f"{image}:1.0.0")
    kustomize_app(private, f"{image}:1.0.0")
    app = private.application("web", automated={"prune": True}, annotations={
        LIST: f"web={image}:~1.0", PREFIX + "write-back-method": "git"})
    functions = Functions(private, tmp_path / "logs")
    (tmp_path / "logs").mkdir()
    functions.extra_env = {"TIDECD_SEALING_KEYS": str(sealing[1]), "TIDECD_GIT_COMMIT_USER": "Image Bot",
                           "TIDECD_GIT_COMMIT_EMAIL": "image-bot@tidecd.invalid"}
    try:
        private.reconcile("web", runtime=private.runtime(sealing_keys=str(sealing[1])))
        assert running_image(private) == f"{image}:1.0.0"
        webhook = functions.start("webhook")
        harbor = source_token(functions.secret, "harbor")

        # A wrong token, another source's token, no token: 401, nothing written, nothing refreshed.
        push_image(f"{image}:1.0.1")
        head, before = remote_head(private), app_state.load(private.store, app)[1]
        for token in ("Bearer " + uuid.uuid4().hex, source_token(functions.secret, "quay"), ""):
            refused = notify_harbor(webhook, harbor_payload(image, "1.0.1"), token)
            assert refused.status_code == 401, refused.text
            assert functions.secret not in refused.text and harbor not in refused.text
        forged = functions.deliver("package", github_package_payload(image, "1.0.1"), secret="not-the-secret")
        assert forged.status_code == 401, forged.text
        # A repository no app follows: answered, nothing triggered.
        push_image(f"{image_registry.host}/{private.namespace}/other:9.9.9")
        unwatched = notify_harbor(webhook, harbor_payload(f"{image_registry.host}/{private.namespace}/other", "9.9.9"),
                                  harbor)
        assert unwatched.status_code == 200 and "no app follows" in unwatched.json()["ignored"], unwatched.text
        time.sleep(1.0)  # anything wrongly handed over would have started by now
        assert remote_head(private) == head and running_image(private) == f"{image}:1.0.0"
        assert app_state.load(private.store, app)[1] == before, "the app's state was written: something reconciled"
        assert images_state.load(private.store, app).check == {}, "the image updater ran"

        # Harbor's notification of 1.0.1: committed to git by the image updater, then deployed.
        started = time.monotonic()
        answer = notify_harbor(webhook, harbor_payload(image, "1.0.1"), f"Bearer {harbor}")
        assert answer.status_code == 202, answer.text
        result = answer.json()["images"][app]
        assert result["status"] == "updated" and result["commit"], answer.text
        assert answer.json()["refreshed"] == [app]
        newest = remote_log(private)[0]
        assert newest.startswith(f"{result['commit']} Image Bot <image-bot@tidecd.invalid>")
        assert f"updates image {image} tag '1.0.0' to '1.0.1'" in newest
        took = wait_synced_at(private, app, f"{image}:1.0.1", result["commit"], started)

        # GHCR's way: a GitHub `package` event (HMAC-signed like every GitHub delivery) for 1.0.2.
        push_image(f"{image}:1.0.2")
        started = time.monotonic()
        answer = functions.deliver("package", github_package_payload(image, "1.0.2"))
        assert answer.status_code == 202, answer.text
        commit = answer.json()["images"][app]["commit"]
        assert f"updates image {image} tag '1.0.1' to '1.0.2'" in remote_log(private)[0]
        took_github = wait_synced_at(private, app, f"{image}:1.0.2", commit, started)

        # The same notification again: the tag is in git already, so nothing more is committed.
        again = functions.deliver("package", github_package_payload(image, "1.0.2"))
        assert again.status_code == 202 and again.json()["images"][app]["status"] == "unchanged", again.text
        assert remote_head(private) == commit
        assert "images" not in functions.running  # no images tick ran at any point
        print(f"notification → Synced at the new image: harbor {took:.1f} s, github package {took_github:.1f} s")
    finally:
        functions.stop()


def test_a_notification_of_a_pushed_chart_refreshes_the_helm_oci_apps_that_follow_it(
        gitops: GitOps, functions: Functions, oci_registry: ChartRegistry, tmp_path: Path) -> None:
    """A helm chart over OCI: the notification refreshes the app, which resolves its semver range anew and
    (automated) deploys the new version; an app of another chart in the same registry is left alone."""
    namespace, home = f"charts-{uuid.uuid4().hex[:6]}", tmp_path / "home"
    for chart, version in (("web", "1.0.0"), ("other", "1.0.0")):
        oci_registry.helm_push(package(write_chart(tmp_path / f"{chart}-{version}", chart, version), tmp_path / "out",
                                       home), namespace, home)
    app = chart_app(gitops, f"oci://{oci_registry.host}/{namespace}/web", "1.x", name="web", chart="", automated={})
    other = chart_app(gitops, f"{oci_registry.host}/{namespace}", "1.x", name="other", chart="other", automated={})
    for name in ("web", "other"):
        gitops.reconcile(name)
        assert gitops.state(name).revision == "1.0.0"
    oci_registry.helm_push(package(write_chart(tmp_path / "web-1.1.0", "web", "1.1.0"), tmp_path / "out", home),
                           namespace, home)
    webhook, token = functions.start("webhook"), source_token(functions.secret, "harbor")
    other_before = app_state.load(gitops.store, other)[1]

    started = time.monotonic()
    answer = notify_harbor(webhook, harbor_payload(f"{oci_registry.host}/{namespace}/web", "1.1.0"), token)

    assert answer.status_code == 202 and answer.json()["refreshed"] == [app], answer.text
    while time.monotonic() - started < WITHIN:
        state = gitops.state("web")
        if state.revision == "1.1.0" and state.sync_status is SyncStatus.SYNCED and cm(gitops, "web")["data"][
                "version"] == "1.1.0":
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"web is {gitops.state('web').sync_status} at {gitops.state('web').revision}, "
                             f"not Synced at 1.1.0 within {WITHIN:g} s")
    assert app_state.load(gitops.store, other)[1] == other_before, "the other chart's app was reconciled"
