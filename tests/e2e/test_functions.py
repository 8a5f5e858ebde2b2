"""The functions through real functions-framework processes, real git and the control plane."""

from __future__ import annotations

import concurrent.futures
import hmac
import statistics
import time

import pytest
import requests

from tests.support.apps import GitOps, configmap
from tests.support.functions import Functions, push_payload

ZERO = "0" * 40


def wait_synced(gitops: GitOps, name: str, revision: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = gitops.state(name)
        if state.revision == revision and state.sync_status == "Synced" and state.health == "Healthy":
            return
        time.sleep(0.3)
    state = gitops.state(name)
    raise AssertionError(f"{name}: {state.sync_status}/{state.health} at {state.revision[:12]}, "
                         f"conditions {state.conditions}")


def reconciled_at(gitops: GitOps, name: str) -> str:
    return gitops.state(name).memo.reconciled_at


def test_ping_signature_and_malformed_bodies(gitops: GitOps, functions: Functions) -> None:
    gitops.push({"app/cm.yaml": configmap("c")})
    gitops.application(automated={})
    assert functions.deliver("ping", {"zen": "Keep it simple.", "hook_id": 1}).status_code == 200
    sha = gitops.repo.head()
    payload = push_payload(gitops.repo.url, "refs/heads/main", ZERO, sha, ["app/cm.yaml"])
    bad = functions.deliver("push", payload, secret="not-the-secret")
    assert bad.status_code == 401
    unsigned = requests.post(functions.start("webhook").url, data=b"{}", timeout=30,
                             headers={"X-GitHub-Event": "push", "X-GitHub-Delivery": "x"})
    assert unsigned.status_code == 401
    assert gitops.store.list("state/apps/") == []  # nothing was refreshed
    assert gitops.live("ConfigMap", "c") is None
    signature = "sha256=" + hmac.new(functions.secret.encode(), b"{not json", "sha256").hexdigest()
    broken = requests.post(functions.start("webhook").url, data=b"{not json", timeout=30, headers={
        "X-GitHub-Event": "push", "X-GitHub-Delivery": "y", "X-Hub-Signature-256": signature})
    assert broken.status_code == 400
    assert functions.deliver("issues", {"action": "opened"}).status_code == 200


def test_push_refreshes_exactly_the_matching_apps(gitops: GitOps, functions: Functions) -> None:
    gitops.push({"one/cm.yaml": configmap("one"), "two/cm.yaml": configmap("two")})
    gitops.repo.tag("v1")
    gitops.repo.push("v1")
    for name, path, revision in (("main-one", "one", "main"), ("main-two", "two", "main"),
                                 ("tagged", "one", "v1")):
        gitops.application(name, path=path, automated={}, source={"targetRevision": revision},
                           annotations={"argocd.argoproj.io/manifest-generate-paths": "."})
    sha = gitops.repo.head()
    answer = functions.deliver("push", push_payload(gitops.repo.url, "refs/heads/main", ZERO, sha, ["one/cm.yaml"]))
    assert answer.status_code == 202, answer.text
    assert answer.json()["refreshed"] == [gitops.real("main-one")]
    wait_synced(gitops, "main-one", sha)
    assert gitops.store.list("state/apps/") == [f"state/apps/{gitops.real('main-one')}.json"]

    answer = functions.deliver("push", push_payload(gitops.repo.url, "refs/tags/v1", ZERO, sha, ["one/cm.yaml"]))
    assert answer.json()["refreshed"] == [gitops.real("tagged")]

    unrelated = functions.deliver("push", push_payload(gitops.repo.url, "refs/heads/main", sha, sha, ["docs/x.md"]))
    assert unrelated.status_code in (200, 202) and unrelated.json()["refreshed"] == []

    deleted = functions.deliver("push", push_payload(gitops.repo.url, "refs/heads/main", sha, ZERO, [], deleted=True))
    assert deleted.status_code == 200 and deleted.json().get("refreshed", []) == []

    other_repo = push_payload("http://127.0.0.1:1/elsewhere.git", "refs/heads/main", ZERO, sha, ["one/cm.yaml"])
    assert functions.deliver("push", other_repo).json()["refreshed"] == []


def test_twenty_concurrent_deliveries_lead_to_one_sync(gitops: GitOps, functions: Functions) -> None:
    gitops.push({"app/cm.yaml": configmap("c")})
    gitops.application(automated={})
    sha = gitops.repo.head()
    payload = push_payload(gitops.repo.url, "refs/heads/main", ZERO, sha, ["app/cm.yaml"])
    functions.start("webhook")
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda i: functions.deliver("push", payload, delivery=f"d-{i}"), range(20)))
    assert all(a.status_code in (200, 202) for a in answers), [a.text for a in answers]
    wait_synced(gitops, "app", sha)
    time.sleep(2)  # let any straggler finish
    assert len(gitops.state().history) == 1
    # A redelivery of the same delivery id is recognised.
    again = functions.deliver("push", payload, delivery="d-0")
    assert again.status_code == 200 and again.json().get("duplicate") is True


def test_poll_converges_without_any_webhook(gitops: GitOps, functions: Functions) -> None:
    gitops.push({"app/cm.yaml": configmap("c", {"v": "1"})})
    gitops.application(automated={})
    poll = functions.start("poll")
    first = requests.post(poll.url, timeout=300).json()
    assert first["apps_refreshed"] == [gitops.real("app")]
    sha = gitops.push({"app/cm.yaml": configmap("c", {"v": "2"})})
    second = requests.post(poll.url, timeout=300).json()
    assert second["apps_refreshed"] == [gitops.real("app")] and second["ls_remote_calls"] == 1
    wait_synced(gitops, "app", sha)
    assert gitops.live("ConfigMap", "c")["data"] == {"v": "2"}  # type: ignore[index]


def test_api_and_cli_over_http(gitops: GitOps, functions: Functions) -> None:
    import subprocess
    import sys

    gitops.push({"app/cm.yaml": configmap("c")})
    gitops.application()
    assert functions.api("GET", "/apps").json()["apps"][0]["name"] == gitops.real("app")
    assert requests.get(functions.start("api").url + "/api/v1/apps", timeout=30).status_code == 401
    name = gitops.real("app")
    refused = functions.api("POST", f"/apps/{name}/sync", {"prune": "false"})
    assert refused.status_code == 400 and "prune" in refused.json()["message"]
    reads = []  # the same function's answer to a state read, timed now: how slow the machine is right now
    for _ in range(5):
        began = time.monotonic()
        assert functions.api("GET", f"/apps/{name}").status_code == 200
        reads.append(time.monotonic() - began)
    started = time.monotonic()
    synced = functions.api("POST", f"/apps/{name}/sync", {"prune": True})
    answered = time.monotonic() - started
    assert synced.status_code == 202, synced.text
    # 1 s, or 10 state reads' time when the machine is so busy that a read alone takes over 0.1 s
    bound = max(1.0, 10 * statistics.median(reads))
    assert answered < bound, (f"the api took {answered:.2f}s (a state read {statistics.median(reads):.2f}s): "
                              "it ran the sync instead of starting it")
    cli = [sys.executable, "-m", "tidecd.cli", "app"]
    server = ["--server", functions.start("api").url, "--token", functions.token]
    waited = subprocess.run([*cli, "wait", name, "--operation", "--timeout", "120", *server],
                            capture_output=True, text=True, timeout=180)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    got = functions.api("GET", f"/apps/{name}").json()
    assert got["operation"]["id"] == synced.json()["operationId"] and got["operation"]["phase"] == "Succeeded"
    assert [r["action"] for r in got["operation"]["results"]] == ["created"]
    again = subprocess.run([*cli, "sync", name, *server], capture_output=True, text=True, timeout=180)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Succeeded" in again.stdout and "sync: Synced" in again.stdout
    history = subprocess.run([*cli, "history", name, *server], capture_output=True, text=True, timeout=60)
    assert history.returncode == 0, history.stderr
    assert "Succeeded" in history.stdout


def test_pubsub_fan_out_poll_publishes_and_reconcile_consumes(gitops: GitOps, functions: Functions,
                                                              pubsub_emulator: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """As in the cloud: poll publishes one message per app; a push subscription delivers it to the
    reconcile function (a CloudEvent target), which syncs the app."""

    from google.api_core.client_options import ClientOptions
    from google.cloud import pubsub_v1

    from tests.support.pubsub import anonymous_credentials
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub_emulator)
    topic = f"projects/tidecd-test/topics/refresh-{gitops.namespace}"
    subscription = f"projects/tidecd-test/subscriptions/reconcile-{gitops.namespace}"
    options = ClientOptions(api_endpoint=pubsub_emulator)
    publisher = pubsub_v1.PublisherClient(credentials=anonymous_credentials(), client_options=options)
    subscriber = pubsub_v1.SubscriberClient(credentials=anonymous_credentials(), client_options=options)
    publisher.create_topic(name=topic)
    functions.extra_env = {"PUBSUB_EMULATOR_HOST": pubsub_emulator, "TIDECD_REFRESH_TOPIC": topic}
    reconcile_fn = functions.start("reconcile", signature="cloudevent")
    subscriber.create_subscription(name=subscription, topic=topic,
                                   push_config={"push_endpoint": reconcile_fn.url + "/"}, ack_deadline_seconds=60)
    gitops.push({"app/cm.yaml": configmap("via-pubsub")})
    gitops.application(automated={})
    summary = requests.post(functions.start("poll").url, timeout=300).json()
    assert summary["apps_refreshed"] == [gitops.real("app")]
    wait_synced(gitops, "app", gitops.repo.head())
    assert gitops.live("ConfigMap", "via-pubsub") is not None
    subscriber.delete_subscription(subscription=subscription)
    publisher.delete_topic(topic=topic)
