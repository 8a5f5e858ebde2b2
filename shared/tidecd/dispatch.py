"""Refresh fan-out: how the webhook and poll use cases hand "refresh app X" to the reconcile function.

In the cloud each refresh is one Pub/Sub message (attribute `app`, JSON body), so every app reconciles in
its own function call, retried by Pub/Sub; locally (`TIDECD_REFRESH_TOPIC` unset) the refreshes run in
this process on a small thread pool. Both sides implement one method, `dispatch`, which is also the test
seam: a fake dispatcher records what it was given.

A dispatcher never raises for one refresh that failed: it returns the failures by app, so the caller can
decide (the webhook answers 503, the poll keeps that repo's heads unsaved so the next tick retries).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from tidecd.errors import ConfigError, PermanentError

if TYPE_CHECKING:
    from tidecd.runtime import Runtime

log = structlog.get_logger("tidecd.dispatch")

PUBLISH_TIMEOUT = 30.0
ALREADY_RUNNING = "already running"


class BadRefreshMessage(PermanentError):
    """A refresh message that cannot be decoded: redelivering it will not help."""


@dataclass(frozen=True)
class Refresh:
    """Reconcile `app` because of `reason`; `revision` is the commit that triggered it, for the logs."""

    app: str
    reason: str
    revision: str = ""

    def to_json(self) -> bytes:
        return json.dumps({"app": self.app, "reason": self.reason, "revision": self.revision},
                          sort_keys=True).encode()


class Dispatcher(Protocol):
    def dispatch(self, refreshes: Sequence[Refresh]) -> dict[str, str]:
        """Hand every refresh over; returns a short error message per app that could not be handed over."""
        ...


# --- locally: call reconcile in this process -------------------------------------------------------------


class DirectDispatcher:
    """Runs `reconcile` for each refresh on a bounded thread pool and returns when all are done.

    Each refresh gets its own Runtime from `runtime_factory` (a Runtime caches config and cluster clients
    and is not shared across threads). A refresh that finds the app's lease held waits for it, up to
    `lease_wait` seconds, and runs again: the call holding the lease may have resolved the revision before
    the push that caused this refresh, so skipping would lose the push until the next poll.
    """

    def __init__(self, runtime_factory: Callable[[], Runtime], *, max_workers: int = 4,
                 lease_wait: float = 60.0, sleep: Callable[[float], None] = time.sleep) -> None:
        self.runtime_factory = runtime_factory
        self.max_workers = max_workers
        self.lease_wait = lease_wait
        self.sleep = sleep

    def dispatch(self, refreshes: Sequence[Refresh]) -> dict[str, str]:
        if not refreshes:
            return {}
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(refreshes)),
                                thread_name_prefix="tidecd-refresh") as pool:
            results = list(pool.map(self._run, refreshes))
        return {r.app: error for r, error in zip(refreshes, results, strict=True) if error}

    def _run(self, refresh: Refresh) -> str:
        """"" when reconciled, else why not (the message of a failed call, never a traceback)."""
        from tidecd.reconcile import reconcile

        waited, delay = 0.0, 0.5
        try:
            while True:
                outcome = reconcile(self.runtime_factory(), refresh.app, reason=refresh.reason)
                if outcome.skipped != ALREADY_RUNNING:
                    self._continue(refresh, outcome.continue_after)
                    return ""
                if waited >= self.lease_wait:
                    return f"still {ALREADY_RUNNING} after {self.lease_wait:.0f}s"
                pause = min(delay, self.lease_wait - waited)
                self.sleep(pause)
                waited, delay = waited + pause, min(delay * 2, 5.0)
        except Exception as exc:  # one app's failure must not stop the others
            log.warning("refresh failed", app=refresh.app, reason=refresh.reason, error=type(exc).__name__)
            return f"{type(exc).__name__}: {exc}"[:300]


    def _continue(self, refresh: Refresh, after: float | None, limit: float = 600.0) -> None:
        """Interim local continuation: run the operation's next steps here until nothing is pending."""
        from tidecd.reconcile import reconcile

        spent = 0.0
        while after is not None and spent < limit:
            pause = min(max(after, 0.0), 1.0)
            self.sleep(pause)
            spent += pause + 0.01
            outcome = reconcile(self.runtime_factory(), refresh.app, reason=f"{refresh.reason} (continued)")
            after = outcome.continue_after


# --- in the cloud: one Pub/Sub message per app -----------------------------------------------------------


class PubSubDispatcher:
    """Publishes one message per refresh to `topic` (`projects/P/topics/T`, or `T` with the project from
    `GOOGLE_CLOUD_PROJECT`). The client is created on first use; it talks to the emulator when
    `PUBSUB_EMULATOR_HOST` is set (google-cloud-pubsub reads that variable itself)."""

    def __init__(self, topic: str, *, timeout: float = PUBLISH_TIMEOUT) -> None:
        self.topic = topic_path(topic)
        self.timeout = timeout
        self._client: Any = None

    def __repr__(self) -> str:
        return f"PubSubDispatcher({self.topic!r})"

    def dispatch(self, refreshes: Sequence[Refresh]) -> dict[str, str]:
        if not refreshes:
            return {}
        client = self._publisher()
        futures = [(r, client.publish(self.topic, r.to_json(), app=r.app)) for r in refreshes]
        failures: dict[str, str] = {}
        for refresh, future in futures:
            try:
                future.result(timeout=self.timeout)
            except Exception as exc:  # the client's errors carry no secret, but keep only the type and code
                code = getattr(exc, "code", "")
                failures[refresh.app] = f"publishing to {self.topic} failed: {type(exc).__name__} {code}".strip()
        if failures:
            log.warning("refresh publish failed", topic=self.topic, apps=sorted(failures))
        return failures

    def _publisher(self) -> Any:
        if self._client is None:
            from google.cloud import pubsub_v1

            self._client = pubsub_v1.PublisherClient()
        return self._client


def topic_path(topic: str) -> str:
    """`projects/P/topics/T` as given; a bare `T` completed with `$GOOGLE_CLOUD_PROJECT`."""
    topic = topic.strip()
    parts = topic.split("/")
    if len(parts) == 4 and parts[0] == "projects" and parts[2] == "topics" and all(parts):
        return topic
    project = os.environ.get("GOOGLE_CLOUD_PROJECT", "")
    if "/" not in topic and topic and project:
        return f"projects/{project}/topics/{topic}"
    raise ConfigError(f"TIDECD_REFRESH_TOPIC {topic!r}: expected projects/PROJECT/topics/TOPIC (or a topic "
                      "name with GOOGLE_CLOUD_PROJECT set)")


def decode_refresh(cloud_event_data: Mapping[str, Any]) -> Refresh:
    """The Refresh inside a Pub/Sub CloudEvent's data (`{"message": {"data": <base64 JSON>, ...}}`)."""
    message = cloud_event_data.get("message") if isinstance(cloud_event_data, Mapping) else None
    if not isinstance(message, Mapping):
        raise BadRefreshMessage("refresh message: no `message` object in the event data")
    attributes = message.get("attributes") or {}
    try:
        raw = base64.b64decode(str(message.get("data") or ""), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadRefreshMessage("refresh message: message.data is not base64") from exc
    return decode_message(raw, attributes if isinstance(attributes, Mapping) else {})


def decode_message(data: bytes, attributes: Mapping[str, str]) -> Refresh:
    """A Refresh from a message's raw bytes; an empty body falls back to the `app` attribute."""
    doc: Any = {}
    if data:
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise BadRefreshMessage("refresh message: data is not JSON") from exc
        if not isinstance(doc, dict):
            raise BadRefreshMessage("refresh message: data is not a JSON object")
    app = doc.get("app") or attributes.get("app")
    if not isinstance(app, str) or not app:
        raise BadRefreshMessage("refresh message: no app name (data.app or attribute app)")
    reason, revision = doc.get("reason", ""), doc.get("revision", "")
    if not isinstance(reason, str) or not isinstance(revision, str):
        raise BadRefreshMessage(f"refresh message for {app!r}: reason and revision must be strings")
    return Refresh(app=app, reason=reason, revision=revision)


def dispatcher_for(runtime: Runtime) -> Dispatcher:
    """Pub/Sub when `TIDECD_REFRESH_TOPIC` is set, else direct calls sharing this runtime's settings/store."""
    if runtime.settings.refresh_topic:
        return PubSubDispatcher(runtime.settings.refresh_topic)
    from tidecd.runtime import Runtime

    settings, store = runtime.settings, runtime.store
    return DirectDispatcher(lambda: Runtime(settings=settings, store=store))
