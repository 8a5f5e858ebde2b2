"""Continuations as they run in the cloud: the real reconcile function under functions-framework, fed by
the Pub/Sub emulator through a push subscription with a retry policy, every invocation measured."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.functions import ROOT, Function
from tests.support.invocations import Proxy
from tidecd.clients.store import LocalStore
from tidecd.triggers.dispatch import PubSubDispatcher

pytestmark = [pytest.mark.e2e, pytest.mark.long_wait]  # minutes of hooks and waves: handed out first
PROJECT = "tidecd-test"


@dataclass
class CloudWiring:
    """A refresh topic pushed (through the measuring proxy) to a reconcile function, as infra/pubsub.tf
    wires it; `env` is what the functions see."""

    topic: str
    subscription: str
    proxy: Proxy
    store: LocalStore
    env: dict[str, str]
    function: Function

    def dispatcher(self) -> PubSubDispatcher:
        return PubSubDispatcher(self.topic, store=self.store)


def pubsub_clients(host: str) -> tuple[Any, Any]:
    from google.api_core.client_options import ClientOptions
    from google.cloud import pubsub_v1

    from tests.support.pubsub import anonymous_credentials

    options = ClientOptions(api_endpoint=host)
    return (pubsub_v1.PublisherClient(credentials=anonymous_credentials(), client_options=options),
            pubsub_v1.SubscriberClient(credentials=anonymous_credentials(), client_options=options))


def wire(pubsub_emulator: str, tmp: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
         deadline: float = 15.0) -> Iterator[CloudWiring]:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub_emulator)  # this process publishes too
    suffix = uuid.uuid4().hex[:10]
    topic = f"projects/{PROJECT}/topics/refresh-{suffix}"
    subscription = f"projects/{PROJECT}/subscriptions/reconcile-{suffix}"
    publisher, subscriber = pubsub_clients(pubsub_emulator)
    publisher.create_topic(name=topic)
    env = {**env, "PUBSUB_EMULATOR_HOST": pubsub_emulator, "TIDECD_REFRESH_TOPIC": topic}
    function = Function("reconcile", env, tmp, signature="cloudevent")
    measured = Proxy(function.url + "/", deadline=deadline)
    try:
        subscriber.create_subscription(request={
            "name": subscription, "topic": topic, "ack_deadline_seconds": 60,
            "push_config": {"push_endpoint": measured.url},
            "retry_policy": {"minimum_backoff": {"seconds": 1}, "maximum_backoff": {"seconds": 5}}})
        yield CloudWiring(topic, subscription, measured, LocalStore(Path(env["TIDECD_STORE"])), env, function)
    finally:
        try:
            subscriber.delete_subscription(subscription=subscription)
            publisher.delete_topic(topic=topic)
        finally:
            measured.stop()
            function.stop()


@pytest.fixture()
def bare_cloud(pubsub_emulator: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CloudWiring]:
    """No cluster: a config source without apps (a step of an unknown app records a condition)."""
    (tmp_path / "config").mkdir()
    env = {**os.environ, "TIDECD_CONFIG": str(tmp_path / "config"), "TIDECD_STORE": str(tmp_path / "store"),
           "PYTHONPATH": str(ROOT / "shared") + os.pathsep + str(ROOT)}
    yield from wire(pubsub_emulator, tmp_path, env, monkeypatch)


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def test_a_continuation_is_refused_while_early_and_runs_once_due(bare_cloud: CloudWiring) -> None:
    scheduled = time.time()
    bare_cloud.dispatcher().schedule("ghost", 4.0, "wave 1: waiting for healthy state of apps/Deployment/x/y")

    wait_for(lambda: bare_cloud.proxy.ran("ghost"), 60, "the continuation's step")
    invocations = list(bare_cloud.proxy.invocations)
    early = [i for i in invocations if not i.ran]
    [step] = bare_cloud.proxy.ran("ghost")
    print(f"\ncontinuation due after 4.0s: {len(early)} early deliveries refused (429), step ran after "
          f"{step.started - scheduled:.1f}s taking {step.seconds:.2f}s")
    assert early, "the emulator delivered the continuation only once it was due: the refusal path was not exercised"
    assert all(i.started < i.not_before for i in early)
    assert step.started >= step.not_before - 0.5 and step.status in (200, 204)
    assert bare_cloud.store.read("state/apps/ghost.json") is not None  # the real reconcile step ran
    assert bare_cloud.store.read("continuations/ghost") is None  # it asked for no further step


def test_refreshes_through_pubsub_are_coalesced(bare_cloud: CloudWiring) -> None:
    dispatcher = bare_cloud.dispatcher()
    for _ in range(20):
        assert dispatcher.dispatch([type_refresh("ghost", "a" * 40)]) == {}

    wait_for(lambda: bare_cloud.store.read("pending/ghost") is None, 60, "the refresh to finish")
    time.sleep(1)
    # Twenty refreshes, two steps: the first, and one re-run at its end because the deliveries named a
    # revision it did not reconcile (an app the config does not declare resolves none).
    ran = bare_cloud.proxy.ran("ghost")
    assert [i.reason for i in ran] == ["webhook: push", "again after: webhook: push"]


def type_refresh(app: str, revision: str) -> Any:
    from tidecd.triggers.dispatch import Refresh

    return Refresh(app, "webhook: push", revision)


# --- the acceptance: a slow hook and two slow waves, step by step through the real functions -------------

WAVE = "argocd.argoproj.io/sync-wave"
HOOK = "argocd.argoproj.io/hook"
DEADLINE = 15.0  # seconds any one reconcile invocation may take (the proxy answers 504 beyond it)
# A step's own budget (TIDECD_STEP_BUDGET): it bounds the step's work and health polls, not the cold start
# of a fresh function process nor the render, which on this shared 2-core machine take seconds more.
STEP_BUDGET = "5"


def slow(obj: dict[str, Any], **pod_notes: str) -> dict[str, Any]:
    import copy

    out = copy.deepcopy(obj)
    out["spec"]["template"].setdefault("metadata", {}).setdefault("annotations", {}).update(pod_notes)
    return out


@pytest.fixture()
def cloud(gitops: Any, functions: Any, pubsub_emulator: str, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[CloudWiring]:
    """The installation as the cloud runs it: api and reconcile functions, a Pub/Sub topic between them."""
    env = {**functions.env(), "TIDECD_STEP_BUDGET": STEP_BUDGET}
    for wiring in wire(pubsub_emulator, tmp_path, env, monkeypatch, deadline=DEADLINE):
        functions.extra_env = {"PUBSUB_EMULATOR_HOST": pubsub_emulator, "TIDECD_REFRESH_TOPIC": wiring.topic,
                               "TIDECD_STEP_BUDGET": STEP_BUDGET}
        yield wiring


def cli(functions: Any, *args: str, timeout: float = 600) -> Any:
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "tidecd.cli", "app", *args, "--server",
                           functions.start("api").url, "--token", functions.token],
                          capture_output=True, text=True, timeout=timeout)


def created_at(gitops: Any, kind: str, name: str, group: str = "") -> float:
    import datetime

    obj = gitops.live(kind, name, group)
    assert obj is not None, f"{kind}/{name} was never created"
    stamp = obj["metadata"]["creationTimestamp"]
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_hook_and_two_slow_waves_complete_in_short_invocations(gitops: Any, functions: Any,
                                                               cloud: CloudWiring) -> None:
    from tests.support.apps import configmap, deployment, job

    gitops.push({
        "app/migrate.yaml": slow(job("migrate", annotations={HOOK: "PreSync"}),
                                 **{"tidecd.test/complete-after": "90s"}),
        "app/api.yaml": slow(deployment("api", annotations={WAVE: "1"}), **{"tidecd.test/ready-after": "30s"}),
        "app/web.yaml": slow(deployment("web", annotations={WAVE: "2"}), **{"tidecd.test/ready-after": "30s"}),
        "app/done.yaml": configmap("done", annotations={WAVE: "3"}),
    })
    name = gitops.application()
    started = time.monotonic()
    synced = cli(functions, "sync", name)  # follows the operation, printing as it goes
    wall = time.monotonic() - started
    assert synced.returncode == 0, synced.stdout[-3000:] + synced.stderr[-3000:]

    op = gitops.state().operation
    assert op is not None and op.phase == "Succeeded", op
    ran = cloud.proxy.ran(name)
    over = cloud.proxy.over_deadline()
    billed = sum(i.seconds for i in cloud.proxy.invocations if i.app == name)
    print(f"\nhook 90 s + two waves of 30 s: wall {wall:.0f}s, {len(ran)} steps ran (+ "
          f"{len(cloud.proxy.invocations) - len(ran)} early continuations refused), longest "
          f"{max(i.seconds for i in ran):.1f}s, billed {billed:.1f} instance-seconds")
    assert not over, f"invocations over the {DEADLINE:g}s deadline: {over}"
    assert len(ran) >= 5, ran  # the operation went on across several invocations
    # The blocking engine's order: the PreSync hook, then each wave once the one before is healthy.
    job_at, api_at = created_at(gitops, "Job", "migrate", "batch"), created_at(gitops, "Deployment", "api", "apps")
    web_at, done_at = created_at(gitops, "Deployment", "web", "apps"), created_at(gitops, "ConfigMap", "done")
    assert api_at - job_at >= 85 and web_at - api_at >= 25 and done_at - web_at >= 25, \
        (job_at, api_at, web_at, done_at)
    # `app sync` printed the tasks as they happened and what the operation waited for.
    assert "[PreSync wave 0] batch/Job" in synced.stdout and "Deployment" in synced.stdout, synced.stdout
    assert "... " in synced.stdout and "Succeeded" in synced.stdout


def test_wait_and_terminate_a_running_operation(gitops: Any, functions: Any, cloud: CloudWiring) -> None:
    from tests.support.apps import configmap, job

    gitops.push({
        "app/migrate.yaml": slow(job("migrate", annotations={HOOK: "PreSync"}),
                                 **{"tidecd.test/complete-after": "120s"}),
        "app/after.yaml": configmap("after", annotations={WAVE: "1"}),
    })
    name = gitops.application()
    started = cli(functions, "sync", name, "--async", "-o", "json")
    assert started.returncode == 0, started.stderr
    operation_id = json.loads(started.stdout)["operationId"]
    busy = functions.api("POST", f"/apps/{name}/sync", {})
    assert busy.status_code == 409 and busy.json()["operationId"] == operation_id

    short = cli(functions, "wait", name, "--operation", "--timeout", "8", timeout=60)
    assert short.returncode == 1 and "timed out" in short.stderr, short.stdout + short.stderr
    got = cli(functions, "get", name, "--cached", timeout=60)
    assert "Operation:  Running" in got.stdout and "Waiting:" in got.stdout, got.stdout

    stopped = cli(functions, "terminate-op", name, timeout=60)
    assert stopped.returncode == 0 and "terminating" in stopped.stdout, stopped.stderr
    waited = cli(functions, "wait", name, "--operation", "--timeout", "60", timeout=120)
    assert waited.returncode == 1, waited.stdout + waited.stderr  # it ended, and not well
    op = gitops.state().operation
    assert op is not None and op.id == operation_id and op.phase == "Failed" and "terminat" in op.message, op
    assert gitops.live("ConfigMap", "after") is None  # nothing after the hook ran
    assert not cloud.proxy.over_deadline()
