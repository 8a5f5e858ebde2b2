"""A small threaded HTTP server on 127.0.0.1 for tests that play a registry, a helm repository or any site:
each GET goes to one function, which writes the whole answer itself."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


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
