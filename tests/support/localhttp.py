"""A small threaded HTTP server on 127.0.0.1 for tests that play a registry, a helm repository or any site:
each GET goes to one function, which writes the whole answer itself."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from tidecd.clients.store import LocalStore
from tidecd.runtime import Runtime, Settings
from tidecd.triggers import dispatch
from tidecd.usecases import api


def serve_get(answer: Callable[[BaseHTTPRequestHandler], None], *, every_method: bool = False) -> ThreadingHTTPServer:
    """Start serving GETs (and POST, PUT, PATCH, DELETE when `every_method`) with `answer`, quietly, on a free
    port; `stop` ends it."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            answer(self)

        def do_OTHER(self) -> None:  # noqa: N802
            if every_method:
                answer(self)
            else:
                self.send_error(501)

        do_POST = do_PUT = do_PATCH = do_DELETE = do_OTHER  # noqa: N815

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return httpd


def stop(httpd: ThreadingHTTPServer | None) -> None:
    assert httpd is not None
    httpd.shutdown()
    httpd.server_close()


def serve_api(settings: Settings) -> ThreadingHTTPServer:
    """The api use case (`tidecd.usecases.api`) over HTTP, as the api function answers it: what a CLI test or
    bench talks to without starting functions-framework. The steps it hands over (an operation's
    continuations) run in threads of this process (`Steps`), as the installation's step function takes them.
    `stop` ends it."""
    steps = Steps(settings)

    def answer(request: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(request.path)
        runtime = Runtime(settings=settings, store=LocalStore(Path(settings.store)))
        sent = request.rfile.read(min(int(request.headers.get("Content-Length") or 0), 1 << 20))
        reply = api.handle(request.command, parts.path, dict(request.headers), sent, runtime,
                           query=dict(parse_qsl(parts.query)), dispatcher=steps)
        body = json.dumps(reply.body).encode()
        request.send_response(reply.status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    return serve_get(answer, every_method=True)


class Steps:
    """A dispatcher that takes each step it is handed in a thread of this process, at most 1 s after it is
    due (the step function's role in an installation), so an operation started over `serve_api` ends."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def dispatch(self, refreshes: Sequence[dispatch.Refresh]) -> dict[str, str]:
        for refresh in refreshes:
            self.schedule(refresh.app, 0.0, refresh.reason)
        return {}

    def schedule(self, app: str, delay: float, reason: str) -> None:
        timer = threading.Timer(min(max(delay, 0.0), 1.0), self._step, (app, reason))
        timer.daemon = True
        timer.start()

    def _step(self, app: str, reason: str) -> None:
        runtime = Runtime(settings=self.settings, store=LocalStore(Path(self.settings.store)))
        dispatch.run_step(runtime, dispatch.continuation(app, 0.0, reason), self)
