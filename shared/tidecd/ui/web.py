"""Flask (functions-framework) adapter for the dashboard: one call from the api entry point."""

from __future__ import annotations

import flask

from tidecd.runtime import Runtime
from tidecd.ui import Request, handle

MAX_FORM = 64 * 1024


def respond(request: flask.Request, runtime: Runtime) -> flask.Response:
    """Serve one `/ui/...` request given Flask's request object; returns a Flask response."""
    form: dict[str, str] = {}
    if request.method == "POST" and (request.content_length or 0) <= MAX_FORM:
        form = {k: v for k, v in request.form.items()}
    page = handle(Request(request.method, request.path, dict(request.headers), dict(request.args), form,
                          request.scheme), runtime)
    response = flask.Response(page.body if request.method != "HEAD" else b"", status=page.status,
                        content_type=page.content_type)
    for name, value in page.headers:
        response.headers.add(name, value)
    return response
