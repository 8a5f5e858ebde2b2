"""Cloud Function entry points: parse the trigger, call the library, shape the answer. Nothing else.

    webhook    HTTP        GitHub/GitLab push events → refresh the affected apps; registry pushes → images;
                           /audit: the kube-apiserver's audit batches (/audit/gke: GKE's audit log entries by
                           Pub/Sub) → refresh the apps drifted, naming who
    poll       HTTP        Cloud Scheduler every three minutes → changed repos + drift sweep
    images     HTTP        Cloud Scheduler every two minutes → new image tags become commits / overrides
    reconcile  CloudEvent  one Pub/Sub message per app → one reconcile step; schedules the next one
    api        HTTP        status, diff, history; sync, refresh, rollback (bearer token); /ui/ dashboard

Heavy modules are imported inside the functions, so a cold start pays only for what it uses.
"""

from __future__ import annotations

import json
import sys
from typing import Any

if "structlog" not in sys.modules and "rich" not in sys.modules:
    # structlog imports rich when it is installed (it is: the CLI's), for console tracebacks these functions
    # never print (they log JSON lines). Hidden while structlog loads, rich costs a cold start nothing; a None
    # in sys.modules makes `import rich` raise the ImportError structlog expects. (tests/unit/test_coldstart.py)
    sys.modules["rich"] = None  # type: ignore[assignment]
    try:
        import structlog
    finally:
        del sys.modules["rich"]

import functions_framework
import structlog
from flask import Request, Response

from tidecd.base import logs

logs.configure()


def _json(status: int, body: dict[str, Any]) -> Response:
    return Response(json.dumps(body, indent=1), status=status, mimetype="application/json")


def _body(request: Request, limit: int) -> bytes | None:
    """The body, streamed and stopped at `limit` bytes whatever the transfer encoding (chunked too);
    None when it is larger. A declared Content-Length over the limit is refused before reading."""
    from werkzeug.exceptions import RequestEntityTooLarge

    request.max_content_length = limit + 1  # werkzeug stops there without error: one byte over tells
    try:
        body = request.get_data(cache=False)
    except RequestEntityTooLarge:  # a declared Content-Length over the limit: nothing was read
        return None
    return body if len(body) <= limit else None


def _too_large(limit: int, variable: str) -> Response:
    """A streamed answer: after a plain one, functions-framework would read (and keep) the rest of the body."""
    text = json.dumps({"error": "too_large", "message": f"body over {limit:,} bytes ({variable})"}, indent=1)
    return Response(iter([text]), status=413, mimetype="application/json")


def _runtime() -> Any:
    from tidecd.runtime import Runtime

    return Runtime.from_env()


@functions_framework.http
def webhook(request: Request) -> Response:
    from tidecd.base import limits
    from tidecd.base.constants import AUDIT_GKE_PATH, AUDIT_PATH
    from tidecd.clients import metrics
    from tidecd.triggers import dispatch
    from tidecd.usecases import webhook as hooks

    limit = limits.current().webhook_bytes
    body = _body(request, limit)
    if body is None:
        return _too_large(limit, "TIDECD_MAX_WEBHOOK_BYTES")
    runtime = _runtime()
    if request.path.rstrip("/") in (AUDIT_PATH, AUDIT_GKE_PATH):
        from tidecd.usecases import audit  # lazy: cold start (a push delivery does not load the audit use case)

        if request.path.rstrip("/") == AUDIT_PATH:  # the kube-apiserver's audit webhook backend (EventList batches)
            answer = audit.handle(dict(request.headers), body, runtime, dispatch.dispatcher_for(runtime))
        else:  # GKE's audit log entries, pushed by Pub/Sub
            answer = audit.handle_push(dict(request.headers), body, runtime, dispatch.dispatcher_for(runtime))
    else:
        answer = hooks.handle(dict(request.headers), body, runtime, dispatch.dispatcher_for(runtime),
                              path=request.full_path)
        metrics.count_webhook(dict(request.headers), answer.status)
    response = _json(answer.status, answer.body)
    if answer.status == 503:  # the store (or Pub/Sub) is away: GitHub (or the audit backend) redelivers
        response.headers["Retry-After"] = str(answer.body.get("retry_after", hooks.RETRY_AFTER))
    return response


@functions_framework.http
def poll(request: Request) -> Response:
    from dataclasses import asdict

    from tidecd.triggers import dispatch
    from tidecd.usecases import poll as poller

    runtime = _runtime()
    summary = poller.poll(runtime, dispatch.dispatcher_for(runtime), jitter_seconds=runtime.settings.poll_jitter)
    return _json(200, asdict(summary))


@functions_framework.http
def images(request: Request) -> Response:
    from tidecd.triggers import dispatch
    from tidecd.usecases.images import check

    runtime = _runtime()
    summary = check(runtime, dispatcher=dispatch.dispatcher_for(runtime))
    return _json(200, summary.to_json())


@functions_framework.cloud_event
def reconcile(cloud_event: Any) -> None:
    from flask import abort

    from tidecd.base.errors import LeaseHeld, disposition
    from tidecd.triggers import dispatch

    try:
        if (job := dispatch.preview_job(cloud_event.data)) is not None:  # a pull-request preview job
            from tidecd.usecases import preview  # lazy: cold start (a refresh does not load the preview use case)

            preview.run_job(_runtime(), job)
            return
        refresh = dispatch.decode_refresh(cloud_event.data)
        dispatch.check_due(refresh)
        runtime = _runtime()
        outcome = dispatch.run_step(runtime, refresh, dispatch.dispatcher_for(runtime))
    except dispatch.NotYet as early:
        # A continuation ahead of its time: 429 is a nack, so Pub/Sub redelivers it after the retry policy's
        # backoff (werkzeug answers it without logging a traceback).
        abort(429, description=str(early))
    except Exception as exc:
        if disposition(exc).retry:
            raise  # Temporary (or a bug): fail the call so Pub/Sub redelivers it, with its backoff
        return  # a bad message or config: recorded where it can be; retrying cannot help, so acknowledge it
    if outcome.skipped:
        # Another call holds the app's lease: fail so Pub/Sub redelivers and this push is not lost.
        raise LeaseHeld(f"{refresh.app}: {outcome.skipped}")


API_STORE_BUDGET = 3.0  # seconds of failing store calls one api answer may wait (TIDECD_API_STORE_BUDGET)


@functions_framework.http
def api(request: Request) -> Response:
    """A store that fails or hangs costs an answer at most the api's store budget, then it is a 503."""
    from tidecd.clients.deadlines import budget, env_seconds

    with budget(env_seconds("TIDECD_API_STORE_BUDGET", API_STORE_BUDGET),
                "the api's store budget (TIDECD_API_STORE_BUDGET)", failed_only=True):
        return _api(request)


def _api(request: Request) -> Response:
    from tidecd.base import limits
    from tidecd.usecases import api as use_case

    limit = limits.current().api_bytes
    if request.path == "/metrics":  # Prometheus text (tidecd.clients.metrics)
        from tidecd.clients import metrics

        runtime = _runtime()
        status, text = metrics.handle(dict(request.headers), runtime.store, runtime.settings.api_token)
        return Response(text, status=status, mimetype="text/plain", content_type=metrics.CONTENT_TYPE)
    if request.path == "/ui" or request.path.startswith("/ui/"):  # the dashboard (tidecd.ui)
        from tidecd.ui import web

        request.max_content_length = limit  # it reads its own (form) body: werkzeug refuses more
        return web.respond(request, _runtime())
    if request.path == "/" and request.method == "GET" and "text/html" in request.headers.get("Accept", ""):
        return Response(status=303, headers={"Location": "/ui/"})  # a browser: the dashboard; others get JSON
    body = _body(request, limit)
    if body is None:
        return _too_large(limit, "TIDECD_MAX_API_BYTES")
    try:
        runtime = _runtime()
    except Exception as exc:  # noqa: BLE001 - a bad TIDECD_* setting: a JSON answer, no detail before auth
        structlog.get_logger("tidecd.usecases.api").error("api misconfigured", error=f"{type(exc).__name__}: {exc}")
        answer = use_case.error(503, "unavailable", "the api is misconfigured; see the function's log")
    else:
        answer = use_case.handle(request.method, request.path, dict(request.headers), body, runtime,
                                 query=dict(request.args))
    return _json(answer.status, answer.body)
