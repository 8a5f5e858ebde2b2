"""The one Pub/Sub publisher: every message handed over before any is awaited, failures returned per
message as PublishFailed with the error's type and code only, never its text."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from tidecd.base.errors import TemporaryError
from tidecd.clients.pubsub import Message, PublishFailed, PubSubPublisher, publish_one

TOPIC = "projects/p/topics/t"


class NotFound(Exception):
    code = 404


class FakeClient:
    """google's PublisherClient shape: publish returns a future. The futures settle only once `settle_after`
    messages were handed over, so a publisher awaiting them one by one would time out. `fail` maps a body to
    the error its future gets; the body `refused` is refused outright."""

    def __init__(self, settle_after: int, fail: dict[bytes, Exception] | None = None) -> None:
        self.settle_after, self.fail = settle_after, fail or {}
        self.sent: list[tuple[str, bytes, dict[str, str]]] = []
        self.pending: list[tuple[bytes, Future[str]]] = []

    def publish(self, topic: str, data: bytes, **attributes: str) -> Future[str]:
        if data == b"refused":
            raise ValueError("secret body in the message")
        self.sent.append((topic, data, attributes))
        future: Future[str] = Future()
        self.pending.append((data, future))
        if len(self.pending) == self.settle_after:
            for body, waiting in self.pending:
                if body in self.fail:
                    waiting.set_exception(self.fail[body])
                else:
                    waiting.set_result("id")
        return future


def test_every_message_is_sent_before_any_is_awaited_and_failures_come_back_in_order() -> None:
    client = FakeClient(3, {b"b": NotFound("topic secret-ish detail")})
    results = PubSubPublisher(client).publish(TOPIC, [Message(b"a", {"app": "a"}), Message(b"b"), Message(b"c")],
                                              timeout=1)

    assert [r is None for r in results] == [True, False, True]
    failed = results[1]
    assert isinstance(failed, PublishFailed) and isinstance(failed, TemporaryError)
    assert str(failed) == f"publishing to {TOPIC} failed: NotFound 404"
    assert "secret" not in str(failed)
    assert client.sent[0] == (TOPIC, b"a", {"app": "a"})


def test_a_message_the_client_refuses_outright_is_a_failure_not_an_exception() -> None:
    results = PubSubPublisher(FakeClient(1)).publish(TOPIC, [Message(b"refused")], timeout=1)

    assert len(results) == 1 and isinstance(results[0], PublishFailed)
    assert results[0].kind == "ValueError" and "secret" not in str(results[0])


def test_publish_one_raises_the_failure_with_its_cause() -> None:
    publisher = PubSubPublisher(FakeClient(1, {b"x": NotFound()}))

    with pytest.raises(PublishFailed) as caught:
        publish_one(publisher, TOPIC, Message(b"x"), timeout=1)
    assert isinstance(caught.value.__cause__, NotFound)
    assert publisher.publish(TOPIC, []) == []
