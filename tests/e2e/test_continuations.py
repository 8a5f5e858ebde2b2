"""Continuations as they run in the cloud: the real reconcile function under functions-framework, fed by
the Pub/Sub emulator through a push subscription with a retry policy, every invocation measured."""

from __future__ import annotations

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
from tidecd.dispatch import PubSubDispatcher
from tidecd.store import LocalStore

pytestmark = pytest.mark.e2e
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
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import pubsub_v1

    options = ClientOptions(api_endpoint=host)
    return (pubsub_v1.PublisherClient(credentials=AnonymousCredentials(), client_options=options),
            pubsub_v1.SubscriberClient(credentials=AnonymousCredentials(), client_options=options))


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
    from tidecd.dispatch import Refresh

    return Refresh(app, "webhook: push", revision)
