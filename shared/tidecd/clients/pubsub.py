"""Publishing to Pub/Sub: the one client behind the refresh fan-out (`triggers.dispatch`), the `pubsub`
notification service (`notify.deliver`) and preview jobs (`usecases.preview`).

Callers depend on the `Publisher` protocol, so tests pass a fake that records messages. `PubSubPublisher`
is google-cloud-pubsub: it talks to the emulator when `PUBSUB_EMULATOR_HOST` is set (the library reads that
variable itself). Every message of a call is handed to the client before any is awaited, so a fan-out of a
thousand refreshes is one round of batched requests, not a thousand sequential ones. A message that did
not go through is returned as a `PublishFailed` (a TemporaryError), never raised one by one: the caller
decides per message (the webhook answers 503, the poll keeps the refresh for its next tick).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tidecd.base.errors import TemporaryError

PUBLISH_TIMEOUT = 30.0  # seconds to wait for each message's acknowledgement by the service


@dataclass(frozen=True)
class Message:
    """One message: its body and its attributes (Pub/Sub attributes are strings)."""

    data: bytes
    attributes: Mapping[str, str] = field(default_factory=dict)


class PublishFailed(TemporaryError):
    """A message did not reach its topic. Only the client error's type and code are kept: the body and
    the client's message are never echoed, so nothing of the payload leaks into logs or answers."""

    def __init__(self, topic: str, kind: str, code: str = "") -> None:
        self.topic, self.kind, self.code = topic, kind, code
        super().__init__(f"publishing to {topic} failed: {kind} {code}".strip())


class Publisher(Protocol):
    def publish(self, topic: str, messages: Sequence[Message], *,
                timeout: float = PUBLISH_TIMEOUT) -> list[PublishFailed | None]:
        """Publish every message to `topic` (`projects/P/topics/T`); one entry per message, in order: None
        when it was published, else why not."""
        ...


class PubSubPublisher:
    """google-cloud-pubsub. The client is created on first use and kept: creating one costs a channel. A
    `client` given (anything with google's `publish(topic, data, **attributes) -> future`) is used instead."""

    def __init__(self, client: Any = None) -> None:
        self._client: Any = client  # google.cloud.pubsub_v1.PublisherClient (the library ships no types)

    def publish(self, topic: str, messages: Sequence[Message], *,
                timeout: float = PUBLISH_TIMEOUT) -> list[PublishFailed | None]:
        if not messages:
            return []
        if self._client is None:
            # lazy: cold start (google.cloud.pubsub only when a topic is set or a notification names one)
            from google.cloud import pubsub_v1

            try:
                self._client = pubsub_v1.PublisherClient()
            except Exception as exc:  # noqa: BLE001 - e.g. no default credentials: every message failed
                return [_failed(topic, exc) for _ in messages]
        client = self._client
        futures: list[Any] = []
        for message in messages:
            try:
                futures.append(client.publish(topic, message.data, **dict(message.attributes)))
            except Exception as exc:  # noqa: BLE001 - google's errors, translated
                futures.append(_failed(topic, exc))
        results: list[PublishFailed | None] = []
        for future in futures:
            if isinstance(future, PublishFailed):
                results.append(future)
                continue
            try:
                future.result(timeout=timeout)
            except Exception as exc:  # noqa: BLE001 - google's errors, translated
                results.append(_failed(topic, exc))
            else:
                results.append(None)
        return results


def publish_one(publisher: Publisher, topic: str, message: Message, *, timeout: float = PUBLISH_TIMEOUT) -> None:
    """Publish a single message; raises PublishFailed when it did not go through."""
    failure = publisher.publish(topic, [message], timeout=timeout)[0]
    if failure is not None:
        raise failure


def _failed(topic: str, exc: BaseException) -> PublishFailed:
    """The client's errors carry no secret, but keep only the type and the status code."""
    failed = PublishFailed(topic, type(exc).__name__, f"{getattr(exc, 'code', '')}")
    failed.__cause__ = exc  # raised later (publish_one): keep the chain for the traceback
    return failed
