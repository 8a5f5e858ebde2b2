"""A front end for N function instances, as Cloud Run's is: concurrency 1 per instance, requests queue
until an instance is free, and every invocation is recorded (app, queued, run time, status, instance).

Pub/Sub (the emulator) pushes to `Frontend.url`; each request goes to the first idle backend (a
functions-framework process started with one worker and one thread). The recorded run time is the
instance's time on the request, the figure a bill counts; the queueing time is kept apart.
"""

from __future__ import annotations

import base64
import contextlib
import json
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tidecd_dev.devcluster import free_port


@dataclass(frozen=True)
class Invocation:
    app: str
    started: float  # time.monotonic() when an instance took it
    queued: float  # seconds it waited for a free instance
    seconds: float  # seconds the instance spent on it
    status: int
    backend: int  # index of the instance
    continuation: bool

    @property
    def refused_early(self) -> bool:
        return self.status == 429


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def handle_error(self, request: object, client_address: object) -> None:
        """A pusher that hung up (the run ending) is not worth a traceback."""


class Frontend:
    def __init__(self, backends: Sequence[str], *, timeout: float = 300.0) -> None:
        self.backends = list(backends)
        self.timeout = timeout
        self.invocations: list[Invocation] = []
        self._lock = threading.Lock()
        self._idle: queue.Queue[int] = queue.Queue()
        for i in range(len(self.backends)):
            self._idle.put(i)
        self.in_flight = 0
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "content-length", "connection")}
                status, payload = front.forward(body, headers)
                self.send_response(status)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                return

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self._server = _Server(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="frontend", daemon=True)
        self._thread.start()

    def forward(self, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        app, continuation = describe(body)
        arrived = time.monotonic()
        backend = self._idle.get()
        started = time.monotonic()
        with self._lock:
            self.in_flight += 1
        request = urllib.request.Request(self.backends[backend], data=body, headers=headers,  # noqa: S310
                                         method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:  # noqa: S310 (loopback)
                status, payload = int(resp.status), bytes(resp.read())
        except urllib.error.HTTPError as exc:
            status, payload = int(exc.code), exc.read()
        except OSError:
            status, payload = 502, b"backend unreachable\n"
        finally:
            self._idle.put(backend)
        ended = time.monotonic()
        with self._lock:
            self.in_flight -= 1
            self.invocations.append(Invocation(app, started, started - arrived, ended - started, status, backend,
                                               continuation))
        return status, payload

    def snapshot(self) -> list[Invocation]:
        with self._lock:
            return list(self.invocations)

    def busy(self) -> int:
        with self._lock:
            return self.in_flight

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def describe(body: bytes) -> tuple[str, bool]:
    """(app, is a continuation) of a Pub/Sub push body; ("", False) when it is not one."""
    try:
        message = json.loads(body)["message"]
        doc = json.loads(base64.b64decode(message.get("data") or b"") or b"{}")
        return str(doc.get("app", "")), bool(doc.get("token"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return "", False


def _app_of(data: bytes) -> str:
    try:
        return str(json.loads(data or b"{}").get("app", ""))
    except (ValueError, AttributeError):
        return ""


class PushBridge:
    """Delivers a pull subscription's messages to `endpoint` in Pub/Sub's push format, as Cloud Pub/Sub's
    push delivery would.

    The emulator's own push delivery keeps at most two requests outstanding whatever the endpoint's
    capacity (measured: 200 messages to an endpoint answering in 0.5 s took 50.8 s, never more than 2 at
    once), while Cloud Pub/Sub's push raises its outstanding messages as the endpoint acks. So the bench
    pulls (StreamingPull, at most `outstanding` messages at once) and posts each message itself: a 2xx
    answer acks it; any other answer (429 from an early continuation, 5xx) nacks it after the retry
    policy's backoff (`min_backoff` doubling up to `max_backoff` per message), so it is redelivered.

    Every first-seen message is counted (`messages`, `bytes` of its data and attributes). With `only` set,
    a message for any other app is acked without posting (`withheld`): the 10,000-app scenario
    (bench/scale10k.py) runs the steps of a sample of apps and counts the rest of the fan-out.
    """

    def __init__(self, subscription: str, endpoint: str, *, outstanding: int = 64, min_backoff: float = 1.0,
                 max_backoff: float = 10.0) -> None:
        self.subscription, self.endpoint = subscription, endpoint
        self.outstanding, self.min_backoff, self.max_backoff = outstanding, min_backoff, max_backoff
        self.delivered = 0
        self.redelivered = 0
        self._attempts: dict[str, int] = {}
        self._done: set[str] = set()  # message ids answered 2xx: a redelivery of one is acked, not posted
        self._in_flight: set[str] = set()
        self.duplicates = 0  # redeliveries of a message already answered 2xx (acked again, not posted)
        self.duplicates_in_flight = 0  # redeliveries of a message still being posted (nacked after a second)
        self.messages = 0
        self.bytes = 0
        self.withheld = 0
        self.only: frozenset[str] | None = None
        self._lock = threading.Lock()
        self._future: Any = None
        self._subscriber: Any = None

    def start(self) -> PushBridge:
        from concurrent.futures import ThreadPoolExecutor

        from google.cloud import pubsub_v1
        from google.cloud.pubsub_v1.subscriber.scheduler import ThreadScheduler

        self._subscriber = pubsub_v1.SubscriberClient()
        flow = pubsub_v1.types.FlowControl(max_messages=self.outstanding)
        scheduler = ThreadScheduler(ThreadPoolExecutor(max_workers=self.outstanding, thread_name_prefix="push"))
        self._future = self._subscriber.subscribe(self.subscription, self._deliver, flow_control=flow,
                                                  scheduler=scheduler)
        return self

    def _deliver(self, message: Any) -> None:
        with self._lock:
            done, running = message.message_id in self._done, message.message_id in self._in_flight
            if done:
                self.duplicates += 1
            elif running:
                self.duplicates_in_flight += 1
            else:
                self._in_flight.add(message.message_id)
                self.messages += 1
                self.bytes += len(message.data) + sum(len(k) + len(v) for k, v in message.attributes.items())
        if not done and not running and self.only is not None and _app_of(message.data) not in self.only:
            with self._lock:
                self.withheld += 1
                self._done.add(message.message_id)
                self._in_flight.discard(message.message_id)
            message.ack()
            return
        if done:  # the emulator redelivers messages it already got an ack for: Pub/Sub's at-least-once
            message.ack()
            return
        if running:
            time.sleep(1.0)
            message.nack()
            return
        try:
            self._post(message)
        finally:
            with self._lock:
                self._in_flight.discard(message.message_id)

    def _post(self, message: Any) -> None:
        body = json.dumps({
            "message": {"data": base64.b64encode(message.data).decode(), "attributes": dict(message.attributes),
                        "messageId": message.message_id, "publishTime": message.publish_time.isoformat()},
            "subscription": self.subscription}).encode()
        request = urllib.request.Request(self.endpoint, data=body, method="POST",  # noqa: S310 (loopback)
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=600) as resp:  # noqa: S310
                ok = 200 <= resp.status < 300
        except (urllib.error.HTTPError, OSError):
            ok = False
        with self._lock:
            attempts = self._attempts.pop(message.message_id, 0) if ok else \
                self._attempts.get(message.message_id, 0) + 1
            if not ok:
                self._attempts[message.message_id] = attempts
                self.redelivered += 1
            else:
                self.delivered += 1
                self._done.add(message.message_id)
        if ok:
            message.ack()
            return
        time.sleep(min(self.max_backoff, self.min_backoff * 2 ** (attempts - 1)))
        message.nack()

    def stop(self) -> None:
        if self._future is not None:
            self._future.cancel()
            with contextlib.suppress(Exception):  # cancelled: the stream ends with an error by design
                self._future.result(timeout=30)
        if self._subscriber is not None:
            self._subscriber.close()
