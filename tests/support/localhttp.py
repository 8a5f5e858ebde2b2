"""A small threaded HTTP server on 127.0.0.1 for tests that play a registry, a helm repository or any site:
each GET goes to one function, which writes the whole answer itself."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from tidecd.clients.store import LocalStore
from tidecd.runtime import Runtime, Settings
from tidecd.usecases import api


def serve_get(answer: Callable[[BaseHTTPRequestHandler], None]) -> ThreadingHTTPServer:
    """Start serving GETs with `answer`, quietly, on a free port; `stop` ends it."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            answer(self)

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
    """The api use case (`tidecd.usecases.api`) over HTTP for GETs, as the api function answers them: what a
    CLI test or bench talks to without starting functions-framework. `stop` ends it."""
    def answer(request: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(request.path)
        runtime = Runtime(settings=settings, store=LocalStore(Path(settings.store)))
        reply = api.handle("GET", parts.path, dict(request.headers), b"", runtime, query=dict(parse_qsl(parts.query)))
        body = json.dumps(reply.body).encode()
        request.send_response(reply.status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    return serve_get(answer)
