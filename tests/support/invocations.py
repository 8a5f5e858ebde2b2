"""A measuring proxy in front of a function: every invocation's start, duration and status, with a deadline.

Pub/Sub (the emulator) pushes to the proxy, the proxy forwards to the functions-framework process and
records what happened. An invocation that takes longer than `deadline` seconds is answered 504 (as Cloud
Run's request timeout would end it) and recorded as over the deadline, so a test can fail on it.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import requests

from tidecd_dev.devcluster import free_port


@dataclass(frozen=True)
class Invocation:
    started: float  # unix seconds
    seconds: float
    status: int
    app: str
    not_before: float
    reason: str

    @property
    def ran(self) -> bool:
        """A step ran (not a refusal of an early continuation)."""
        return self.status != 429


class Proxy:
    def __init__(self, target: str, deadline: float = 15.0) -> None:
        self.target, self.deadline = target, deadline
        self.invocations: list[Invocation] = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                status = proxy.forward(body, headers)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def forward(self, body: bytes, headers: dict[str, str]) -> int:
        app, not_before, reason = _describe(body)
        started, clock = time.time(), time.monotonic()
        try:
            status = requests.post(self.target, data=body, headers=headers, timeout=self.deadline).status_code
        except requests.Timeout:
            status = 504
        except requests.RequestException:
            status = 502
        with self.lock:
            self.invocations.append(Invocation(started, time.monotonic() - clock, status, app, not_before, reason))
        return status

    def ran(self, app: str | None = None) -> list[Invocation]:
        """The steps that ran, in the order they started (`invocations` is in the order they ended: a step
        that hands a refresh over before it answers can end after the step it started)."""
        with self.lock:
            return sorted((i for i in self.invocations if i.ran and (app is None or i.app == app)),
                          key=lambda i: i.started)

    def over_deadline(self) -> list[Invocation]:
        with self.lock:
            return [i for i in self.invocations if i.seconds > self.deadline or i.status == 504]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _describe(body: bytes) -> tuple[str, float, str]:
    try:
        message = json.loads(body)["message"]
        doc = json.loads(base64.b64decode(message.get("data") or b"") or b"{}")
        return str(doc.get("app", "")), float(doc.get("notBefore", 0)), str(doc.get("reason", ""))
    except (ValueError, KeyError, TypeError):
        return "", 0.0, ""


def proxy(target: str, deadline: float = 15.0) -> Iterator[Proxy]:
    running = Proxy(target, deadline)
    try:
        yield running
    finally:
        running.stop()
