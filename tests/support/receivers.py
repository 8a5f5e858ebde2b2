"""Local receivers that speak notification services' documented APIs, for tests: one HTTP server that
answers each path as the service it stands for (Slack's `chat.postMessage`, a Teams webhook, a Google Chat
webhook, PagerDuty's Events API v2, Opsgenie's Alert API, a plain webhook), and a small SMTP server.

Each checks what the real service checks first (the Slack token, the Opsgenie `GenieKey`, PagerDuty's
routing key and required payload fields, JSON bodies) and records what it accepted.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import socketserver
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tidecd.clients.pubsub import PUBLISH_TIMEOUT, Message, PublishFailed

SLACK_TOKEN = "xoxb-test-token"  # noqa: S105 - a test value
OPSGENIE_KEY = "opsgenie-key"
PAGERDUTY_KEY = "pagerduty-routing-key"


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def form(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(self.body.decode()).items()}


@dataclass
class Receivers:
    """Every service on one local server: `url` + /slack/api/, /teams/NAME, /chat/NAME, /pagerduty,
    /opsgenie, /hook/..."""

    url: str = ""
    requests: list[Request] = field(default_factory=list)
    fail: dict[str, int] = field(default_factory=dict)  # path prefix → answer 503 this many times

    def to(self, prefix: str) -> list[Request]:
        return [r for r in self.requests if r.path.startswith(prefix)]

    def answer(self, r: Request) -> tuple[int, str]:
        for prefix, left in self.fail.items():
            if r.path.startswith(prefix) and left > 0:
                self.fail[prefix] = left - 1
                return 503, "unavailable"
        if r.path.startswith("/slack/api/chat.postMessage"):
            if r.headers.get("Authorization") != f"Bearer {SLACK_TOKEN}":
                return 200, json.dumps({"ok": False, "error": "invalid_auth"})
            form = r.form()
            for name in ("attachments", "blocks"):
                if name in form:
                    json.loads(form[name])  # must be JSON arrays
            if not form.get("channel"):
                return 200, json.dumps({"ok": False, "error": "channel_not_found"})
            return 200, json.dumps({"ok": True, "channel": form["channel"], "ts": f"{len(self.requests)}.0001"})
        if r.path.startswith("/slack/api/chat.update"):
            form = r.form()
            if r.headers.get("Authorization") != f"Bearer {SLACK_TOKEN}" or not form.get("ts"):
                return 200, json.dumps({"ok": False, "error": "message_not_found"})
            return 200, json.dumps({"ok": True, "channel": form["channel"], "ts": form["ts"]})
        if r.path.startswith("/teams/"):
            card = r.json()
            assert card.get("@type") == "MessageCard" or "type" in card, card
            return 200, "1"
        if r.path.startswith("/powerautomate/"):
            message = r.json()
            [attachment] = message["attachments"]
            if message.get("type") != "message" or attachment.get("contentType") != \
                    "application/vnd.microsoft.card.adaptive" or attachment["content"].get("type") != "AdaptiveCard":
                return 400, json.dumps({"error": {"code": "InvalidRequestContent"}})
            return 202, ""
        if r.path.startswith("/chat/"):
            message = r.json()
            if not message.get("text") and not message.get("cardsV2") and not message.get("cards"):
                return 400, json.dumps({"error": {"code": 400, "message": "empty", "status": "INVALID_ARGUMENT"}})
            return 200, json.dumps({"name": "spaces/x/messages/y", **message})
        if r.path == "/pagerduty/v2/enqueue":
            event = r.json()
            payload = event.get("payload") or {}
            if event.get("routing_key") != PAGERDUTY_KEY or not all(payload.get(k) for k in
                                                                     ("summary", "severity", "source")):
                return 400, json.dumps({"status": "invalid event", "message": "Event object is invalid"})
            return 202, json.dumps({"status": "success", "message": "Event processed", "dedup_key": "k"})
        if r.path == "/opsgenie/v2/alerts":
            if r.headers.get("Authorization") != f"GenieKey {OPSGENIE_KEY}":
                return 401, json.dumps({"message": "Could not authenticate"})
            if not r.json().get("message"):
                return 422, json.dumps({"message": "Request body is not processable"})
            return 202, json.dumps({"result": "Request will be processed", "requestId": "r"})
        if r.path.startswith("/hook"):
            return 200, "ok"
        return 404, "no such receiver"


@pytest.fixture
def receivers() -> Iterator[Receivers]:
    state = Receivers()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            return

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            request = Request(self.command, parts.path, parse_qs(parts.query), dict(self.headers), body)
            status, text = state.answer(request)
            if status < 300:
                state.requests.append(request)
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = _serve  # noqa: N815

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield state
    server.shutdown()
    server.server_close()


class Published:
    """A Pub/Sub publisher that keeps what it is given: (topic, data, attributes)."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes, dict[str, str]]] = []

    def publish(self, topic: str, messages: Sequence[Message], *,
                timeout: float = PUBLISH_TIMEOUT) -> list[PublishFailed | None]:
        self.messages.extend((topic, m.data, dict(m.attributes)) for m in messages)
        return [None] * len(messages)


@dataclass
class Mail:
    sender: str
    recipients: list[str]
    data: str


class SmtpReceiver:
    """An SMTP server (RFC 5321: EHLO/HELO, AUTH PLAIN, MAIL, RCPT, DATA, QUIT) that keeps each message."""

    def __init__(self, username: str = "", password: str = "") -> None:
        self.mails: list[Mail] = []
        self.logins: list[str] = []
        receiver = self

        class Handler(socketserver.StreamRequestHandler):
            def say(self, line: str) -> None:
                self.wfile.write(f"{line}\r\n".encode())

            def handle(self) -> None:
                self.say("220 localhost ESMTP test")
                sender, recipients = "", []
                while line := self.rfile.readline().decode().rstrip("\r\n"):
                    verb = line.split(" ", 1)[0].upper()
                    if verb == "EHLO":
                        self.say("250-localhost")
                        self.say("250 AUTH PLAIN")
                    elif verb == "HELO":
                        self.say("250 localhost")
                    elif verb == "AUTH":
                        # lazy: base64 only for the AUTH test
                        import base64

                        _, user, secret = base64.b64decode(line.split()[-1]).decode().split("\0")
                        ok = (user, secret) == (username, password)
                        receiver.logins.append(user)
                        self.say("235 ok" if ok else "535 authentication failed")
                    elif verb == "MAIL":
                        if username and not receiver.logins:
                            self.say("530 authentication required")
                            continue
                        sender = line.split(":", 1)[1].strip().strip("<>").split(">")[0]
                        self.say("250 ok")
                    elif verb == "RCPT":
                        recipients.append(line.split(":", 1)[1].strip().strip("<>"))
                        self.say("250 ok")
                    elif verb == "DATA":
                        self.say("354 go on")
                        lines = []
                        while (data := self.rfile.readline().decode()) not in (".\r\n", ""):
                            lines.append(data[1:] if data.startswith("..") else data)
                        receiver.mails.append(Mail(sender, recipients, "".join(lines)))
                        sender, recipients = "", []
                        self.say("250 queued")
                    elif verb == "QUIT":
                        self.say("221 bye")
                        return
                    else:
                        self.say("250 ok" if verb in ("RSET", "NOOP") else "502 not implemented")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class SignedWebhook:
    """A user's webhook endpoint: a POST must carry X-Tidecd-Signature, the HMAC-SHA256 of its raw body with
    the shared `key` (401 otherwise, counted in `bad`), on every path or only on `signed_path` (a Slack
    stand-in beside it signs nothing); an empty key checks nothing. `fail` answers that many 503s first.
    Each accepted POST is kept as (path, headers, JSON body)."""

    def __init__(self, key: str, signed_path: str | None = None) -> None:
        self.messages: list[tuple[str, dict[str, str], Any]] = []
        self.key, self.bad, self.fail = key, 0, 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                expected = "sha256=" + hmac.new(receiver.key.encode(), body, hashlib.sha256).hexdigest()
                given = self.headers.get("X-Tidecd-Signature", "")
                checked = bool(receiver.key) and signed_path in (None, self.path)
                status = 200
                if checked and not hmac.compare_digest(expected, given):
                    receiver.bad += 1
                    status = 401
                elif receiver.fail > 0:
                    receiver.fail -= 1
                    status = 503
                else:
                    receiver.messages.append((self.path, dict(self.headers), json.loads(body)))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def bodies(self, path: str) -> list[Any]:
        return [body for p, _, body in self.messages if p == path]

    def triggers(self, path: str) -> list[str]:
        return [body.get("trigger", body.get("text", "")) for body in self.bodies(path)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
