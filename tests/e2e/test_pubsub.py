"""PubSubDispatcher against the real Pub/Sub emulator: what is published is what the reconcile function
decodes, one message per app with the `app` attribute."""

from __future__ import annotations

import base64
import time
import uuid
from typing import Any

import pytest

from tidecd.triggers.dispatch import PubSubDispatcher, Refresh, decode_refresh

PROJECT = "tidecd-test"
pytestmark = pytest.mark.e2e


@pytest.fixture
def topic(pubsub_emulator: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A fresh topic with one pull subscription; (topic path, subscription path)."""
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub_emulator)
    from google.cloud import pubsub_v1

    suffix = uuid.uuid4().hex[:10]
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic_path = publisher.topic_path(PROJECT, f"refresh-{suffix}")
    sub_path = subscriber.subscription_path(PROJECT, f"reconcile-{suffix}")
    publisher.create_topic(name=topic_path)
    subscriber.create_subscription(name=sub_path, topic=topic_path)
    return topic_path, sub_path


def pull(sub_path: str, count: int, timeout: float = 30.0) -> list[Any]:
    """Pull (and ack) until `count` messages arrived."""
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        response = subscriber.pull(subscription=sub_path, max_messages=10, timeout=5)
        if response.received_messages:
            subscriber.acknowledge(subscription=sub_path,
                                   ack_ids=[m.ack_id for m in response.received_messages])
            got.extend(m.message for m in response.received_messages)
    assert len(got) == count, f"expected {count} messages, pulled {len(got)}"
    return got


def as_cloud_event_data(message: Any) -> dict[str, Any]:
    """The shape Eventarc hands a Pub/Sub-triggered function: message.data base64-encoded."""
    return {"message": {"data": base64.b64encode(message.data).decode(),
                        "attributes": dict(message.attributes), "messageId": message.message_id},
            "subscription": "projects/tidecd-test/subscriptions/reconcile"}


def test_each_refresh_is_one_message_the_reconcile_function_decodes(topic: tuple[str, str]) -> None:
    topic_path, sub_path = topic
    refreshes = [Refresh("guestbook", "webhook: push to main", "a" * 40),
                 Refresh("billing", "drift sweep")]

    failures = PubSubDispatcher(topic_path).dispatch(refreshes)

    assert failures == {}
    messages = pull(sub_path, 2)
    assert sorted(m.attributes["app"] for m in messages) == ["billing", "guestbook"]
    decoded = sorted((decode_refresh(as_cloud_event_data(m)) for m in messages), key=lambda r: r.app)
    assert decoded == sorted(refreshes, key=lambda r: r.app)


def test_bare_topic_name_uses_the_project_from_the_environment(
    topic: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    topic_path, sub_path = topic
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)

    assert PubSubDispatcher(topic_path.rsplit("/", 1)[1]).dispatch([Refresh("guestbook", "poll")]) == {}
    assert decode_refresh(as_cloud_event_data(pull(sub_path, 1)[0])).app == "guestbook"


def test_a_missing_topic_is_reported_per_app_not_raised(
    pubsub_emulator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub_emulator)
    dispatcher = PubSubDispatcher(f"projects/{PROJECT}/topics/absent-{uuid.uuid4().hex[:8]}", timeout=20)

    failures = dispatcher.dispatch([Refresh("guestbook", "poll"), Refresh("billing", "poll")])

    assert sorted(failures) == ["billing", "guestbook"]
    assert all("NotFound" in message for message in failures.values()), failures
