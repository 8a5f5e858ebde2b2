"""The api use case: status, diffs and history of apps; sync, refresh and rollback on request.

Operations never run inside an api call: `POST .../sync` and `.../rollback` record a Running operation
(`start_operation`), schedule its first step and answer 202 with its id (409 with the running one's id
when one runs); `DELETE .../operation` marks it Terminating (Argo CD's terminate-op). Callers follow it
with `GET /apps/NAME`, whose `operation` says its phase, wave and what it waits for (`step`).

HTTP-shaped but framework-free (the function entry point adapts Flask's request). Every call needs the
bearer token; with no token configured every call is refused. Errors are `{"error": ..., "message": ...}`.
"""

from __future__ import annotations

import contextvars
import functools
import json
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from tidecd.base import limits
from tidecd.base.errors import LimitExceeded, NotFound, OperationInProgress, PermanentError, TidecdError, disposition
from tidecd.base.model import ChangeEntry, ChangeSet, HealthStatus, ResourceKey, Response, SyncStatus
from tidecd.base.principal import ADMIN, Principal
from tidecd.config.model import Application
from tidecd.diff import change_of
from tidecd.images import state as images_state
from tidecd.runtime import Runtime
from tidecd.state import app as app_state
from tidecd.state import auditlog
from tidecd.step.reconcile import Outcome
from tidecd.triggers import dispatch
from tidecd.triggers.dispatch import Dispatcher, Refresh, dispatcher_for, reconcile_step, run_step
from tidecd.usecases import authz, tokens
from tidecd.usecases.commands import (
    SyncRequest,
    open_revert,
    rollback_request,
    start_operation,
    terminate_operation,
)
from tidecd.usecases.revert import automatic as automatic_rollback
from tidecd.usecases.revert import summary as revert_summary

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

PREFIX = "/api/v1"
# Where started operations' steps go: `dispatch.dispatcher_for(runtime)`, unless the caller of `handle`
# hands one in (the local CLI hands in one that schedules nothing, and drives the steps itself).
_DISPATCHER: contextvars.ContextVar[Dispatcher | None] = contextvars.ContextVar("tidecd_api_dispatcher",
                                                                                 default=None)
# Who is asking, for the handler of this call (set by `handle` after authentication).
_PRINCIPAL: contextvars.ContextVar[Principal] = contextvars.ContextVar("tidecd_api_principal", default=ADMIN)
log = structlog.get_logger("tidecd.usecases.api")


def error(status: int, code: str, message: str) -> Response:
    return Response(status, {"error": code, "message": message})


def failure(exc: BaseException) -> Response:
    """The JSON answer of an exception, by `errors.disposition`; outside the tree (a bug) the message is not
    echoed, only the type (it could hold anything), and it is logged."""
    verdict = disposition(exc)
    if not isinstance(exc, TidecdError):
        log.error("api failure", error=type(exc).__name__, exc_info=exc)
        return error(verdict.status, verdict.code, f"internal error ({type(exc).__name__}); see the function's log")
    answer = error(verdict.status, verdict.code, str(exc))
    if verdict.delay is not None:
        answer.body["retryAfter"] = round(verdict.delay)
    return answer


Handler = Callable[[Runtime, str, dict[str, Any], Mapping[str, str]], Response]
_ROUTES: list[tuple[str, re.Pattern[str], Handler, str]] = []
OPENAPI = Path(__file__).with_name("openapi.json")  # every answer's shape; served at /api/v1/openapi.json


def route(method: str, pattern: str, *, body: str = "") -> Callable[[Handler], Handler]:
    """Register a handler; `body` names the OpenAPI schema its request body must match."""
    def register(fn: Handler) -> Handler:
        _ROUTES.append((method, re.compile(f"^{PREFIX}{pattern}$"), fn, body))
        return fn
    return register


def handle(method: str, path: str, headers: Mapping[str, str], body: bytes, runtime: Runtime,
           query: Mapping[str, str] | None = None, dispatcher: Dispatcher | None = None) -> Response:
    """Route one call. Every answer is JSON with camelCase keys (`camel`), errors `{"error", "message"}`."""
    path = path.rstrip("/") or "/"
    if method == "GET" and path == f"{PREFIX}/openapi.json":  # the contract itself needs no token
        return Response(200, openapi())
    if method == "GET" and path == f"{PREFIX}/settings":  # what `tidecd login` needs first: no token
        return failure_or(login_settings, runtime)
    principal = authz.authenticate(runtime, headers)
    if principal is None:
        return error(401, "unauthorized", "a valid bearer token is required (Authorization: Bearer ...)")
    try:
        payload = json.loads(body) if body.strip() else {}
        limits.check_depth(payload, "the request body")
    except ValueError:
        return error(400, "bad_request", "the request body is not valid JSON")
    except (RecursionError, LimitExceeded):
        return error(400, "bad_request", f"the request body is nested deeper than {limits.current().depth} "
                                         "levels (TIDECD_MAX_DEPTH)")
    if not isinstance(payload, dict):
        return error(400, "bad_request", "the request body must be a JSON object")
    for route_method, pattern, fn, schema in _ROUTES:
        match = pattern.match(path)
        if match and route_method == method:
            try:
                if schema:
                    check_body(payload, schema)
                token, who = _DISPATCHER.set(dispatcher), _PRINCIPAL.set(principal)
                try:
                    answer = fn(runtime, match.groupdict().get("name", ""), payload, query or {})
                finally:
                    _DISPATCHER.reset(token)
                    _PRINCIPAL.reset(who)
            except Exception as exc:  # noqa: BLE001 - every failure is answered as JSON, by the one table
                return failure(exc)
            return Response(answer.status, camel(answer.body))
    if any(pattern.match(path) for _, pattern, _, _ in _ROUTES):  # another method's path (GET and POST /apps)
        return error(405, "method_not_allowed", f"{method} is not allowed on {path}")
    return error(404, "not_found", f"no such endpoint: {path}")


def failure_or(fn: Callable[[Runtime], Response], runtime: Runtime) -> Response:
    try:
        return fn(runtime)
    except Exception as exc:  # noqa: BLE001 - answered as JSON by the one table
        return failure(exc)


def login_settings(runtime: Runtime) -> Response:
    """Argo CD's `/api/v1/settings`, the part a login needs: nothing secret (no client secret)."""
    sso = runtime.config().argo_settings.sso
    body: dict[str, Any] = {"url": sso.url}
    if sso.oidc is not None:
        body["oidcConfig"] = {"name": sso.oidc.name, "issuer": sso.oidc.issuer, "clientID": sso.oidc.client_id,
                              "cliClientID": sso.oidc.cli_client_id, "scopes": list(sso.oidc.requested_scopes)}
    return Response(200, body)


def camel(value: Any) -> Any:
    """Keys of every mapping in `value` as camelCase (`sync_status` → `syncStatus`), like Argo CD's API;
    the state documents keep their snake_case on disk. Keys that are data, not field names, have no `_`."""
    if isinstance(value, dict):
        return {_camel_key(k) if isinstance(k, str) else k: camel(v) for k, v in value.items()}
    if isinstance(value, list):
        return [camel(v) for v in value]
    return value


def _camel_key(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@functools.cache
def openapi() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(OPENAPI.read_text())
    return loaded


@functools.cache
def _body_validator(schema: str) -> Validator:
    # lazy: cold start (jsonschema, ~100 ms: only a request with a body is validated)
    from jsonschema import Draft202012Validator

    return Draft202012Validator({"$ref": f"#/components/schemas/{schema}", "components": openapi()["components"]})


def check_body(payload: dict[str, Any], schema: str) -> None:
    """A PermanentError naming the first field of `payload` that breaks the OpenAPI schema `schema`."""
    problems = sorted(_body_validator(schema).iter_errors(payload), key=lambda e: [str(p) for p in e.path])
    if problems:
        first = problems[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first.path).lstrip(".") or "body"
        raise PermanentError(f"request body: {where}: {first.message[:200]}")


def principal() -> Principal:
    """Who asks, in the handler of the current call."""
    return _PRINCIPAL.get()


def _state(runtime: Runtime, name: str) -> app_state.AppState:
    authz.app_for(runtime, principal(), name)  # NotFound for an app not declared, or not visible to the caller
    return app_state.load(runtime.store, name)[0]


@route("GET", "/apps")
def list_apps(runtime: Runtime, _: str, __: dict[str, Any], ___: Mapping[str, str]) -> Response:
    apps = []
    config = runtime.config()
    everything = authz.allowed(config, principal(), "applications", "get", "*/*")
    for name in authz.visible(config, principal(), sorted(config.applications)):
        current = app_state.load(runtime.store, name)[0]
        item = {"name": name, "sync": current.sync_status, "health": current.health,
                "revision": current.revision, "revisions": current.revisions,
                "reconciledAt": current.memo.reconciled_at, "conditions": current.conditions}
        apps.append(item | _placement(config.applications[name]) | _lineage(config, name))
    for name, problem in sorted(config.invalid.items() if everything else ()):  # no project known: admins only
        apps.append({"name": name, "sync": "Unknown", "health": "Unknown", "revision": "", "revisions": [],
                     "reconciledAt": "", "error": problem})
    body: dict[str, Any] = {"apps": apps}
    if config.problems:
        body["configProblems"] = list(config.problems)
    return Response(200, body)


def _placement(application: Application) -> dict[str, Any]:
    """Where an app deploys and how it is labelled: `app list`'s PROJECT, CLUSTER and NAMESPACE columns and its
    `-p`/`-l` filters, with no GET per app (`argocd app list` shows them from the same listing)."""
    dest = application.destination
    return {"project": application.project, "labels": dict(application.labels),
            "destination": {"server": dest.server, "name": dest.name, "namespace": dest.namespace}}


def _lineage(config: Any, name: str) -> dict[str, Any]:
    """Where a generated app comes from (its owner: `ApplicationSet/<name>` or `Application/<parent>`, and
    the generator or manifests), whether it is being deleted, and an app of apps' children."""
    out: dict[str, Any] = {}
    owner = config.owners.get(name)
    if owner:
        out["owner"] = owner
        out["origin"] = config.applications[name].origin if name in config.applications else ""
        if name in config.deleting:
            out["deleting"] = True
    children = sorted(n for n, o in config.owners.items() if o == f"Application/{name}")
    if children:
        out["children"] = children
    return out


@route("GET", "/apps/(?P<name>[^/]+)")
def get_app(runtime: Runtime, name: str, _: dict[str, Any], query: Mapping[str, str]) -> Response:
    if query.get("refresh") in ("true", "1"):
        authz.app_for(runtime, principal(), name)  # NotFound first: an unknown app gets no state and no lease
        reconcile_step(runtime, name, automate=False, reason="api refresh")
    body = _state(runtime, name).summary() | _lineage(runtime.config(), name)
    reverting = revert_summary(runtime, name)
    if reverting:
        body["revert"] = reverting
    if name in runtime.config().applications:
        done, problem = automatic_rollback(runtime, runtime.config().applications[name])
        if done:
            body["autoRollback"] = done
        if problem:
            body["conditions"] = [*body.get("conditions", []), {"type": "AutoRollbackError", "message": problem}]
    held = images_state.summary(runtime.store, name)
    if held:
        body["images"] = held
        if held["check"].get("status") in ("invalid", "unavailable", "error"):
            body["conditions"] = [*body.get("conditions", []), {
                "type": "ImageUpdaterError", "message": held["check"].get("message", ""),
                "at": held["check"].get("at", "")}]
    return Response(200, body)


@route("POST", "/images/check", body="ImagesCheckRequest")
def check_images(runtime: Runtime, _: str, payload: dict[str, Any], __: Mapping[str, str]) -> Response:
    """One image updater tick (every managed app, or `{"app": NAME}`), the same code the function runs."""
    # lazy: cold start (the image updater imports requests: only /images/check needs it)
    from tidecd.usecases.images import check

    app = payload.get("app")
    if app is not None and not isinstance(app, str):
        raise PermanentError("field app must be an application name")
    obj = authz.app_object(authz.app_for(runtime, principal(), app, "update")) if app else "*/*"
    if not app:
        authz.require(runtime, principal(), "applications", "update", obj)
    authz.done(runtime, principal(), "applications", "update", obj, "image updater check")
    return Response(200, check(runtime, app or None, dispatcher=dispatch.dispatcher_for(runtime)).to_json())


@route("POST", "/apps/(?P<name>[^/]+)/images/unpin")
def unpin_images(runtime: Runtime, name: str, _: dict[str, Any], __: Mapping[str, str]) -> Response:
    app = authz.app_for(runtime, principal(), name, "update")
    lifted = images_state.unpin(runtime.store, name)
    authz.done(runtime, principal(), "applications", "update", authz.app_object(app), "images unpin")
    return Response(200, {"app": name, "unpinned": lifted,
                          "message": "pin lifted" if lifted else "the app was not pinned"})


@route("GET", "/apps/(?P<name>[^/]+)/diff")
def get_diff(runtime: Runtime, name: str, _: dict[str, Any], __: Mapping[str, str]) -> Response:
    """The stored comparison as a change set: an entry per object that is not in sync, with its diff."""
    current = _state(runtime, name)
    changes = ChangeSet([stored_change(r) for r in current.resources if r.status is not SyncStatus.SYNCED])
    return Response(200, {"app": name, "sync": current.sync_status, "changes": changes.to_dicts()})


def stored_change(res: app_state.ResourceStatus) -> ChangeEntry:
    """A stored resource status in the change-set vocabulary (what a sync would do to it)."""
    return change_of(res.key, res.status, res.changed, res.diff, requires_pruning=res.requires_pruning,
                     missing=res.health is HealthStatus.MISSING)


@route("GET", "/apps/(?P<name>[^/]+)/history")
def get_history(runtime: Runtime, name: str, _: dict[str, Any], __: Mapping[str, str]) -> Response:
    return Response(200, {"app": name, "history": app_state.AppState.to_json(_state(runtime, name))["history"]})


@route("POST", "/apps/(?P<name>[^/]+)/refresh")
def refresh(runtime: Runtime, name: str, _: dict[str, Any], __: Mapping[str, str]) -> Response:
    """One bounded reconcile step now; an operation it starts goes on in scheduled steps."""
    authz.app_for(runtime, principal(), name)  # Argo CD: a refresh is a `get`
    outcome = run_step(runtime, Refresh(name, "api refresh"), _dispatcher(runtime))
    if outcome.skipped:
        return Response(409, {"error": "conflict", "message": f"app {name!r}: {outcome.skipped}"})
    return Response(200, _summary(name, outcome.state, outcome.changes))


@route("POST", "/apps/(?P<name>[^/]+)/sync", body="SyncRequest")
def sync(runtime: Runtime, name: str, payload: dict[str, Any], _: Mapping[str, str]) -> Response:
    resources = payload.get("resources")
    authz.app_for(runtime, principal(), name)  # visible first: resources are looked up in its state
    request = SyncRequest(
        prune=bool(payload.get("prune", False)), dry_run=bool(payload.get("dryRun", False)),
        resources=select_resources(runtime, name, resources) if resources else None, initiated_by=principal().username,
        revision=str(payload.get("revision") or ""), sync_options=tuple(payload.get("syncOptions") or ()),
    )
    return _started(runtime, name, request, "api sync")


@route("POST", "/apps/(?P<name>[^/]+)/rollback", body="RollbackRequest")
def rollback(runtime: Runtime, name: str, payload: dict[str, Any], _: Mapping[str, str]) -> Response:
    wanted = payload.get("id")
    if not isinstance(wanted, int):
        raise PermanentError("field id (an integer history id) is required")
    authz.app_for(runtime, principal(), name)  # visible first: its history is read (start_operation: `sync`)
    request = rollback_request(runtime, name, wanted, prune=bool(payload.get("prune", False)),
                               revert=str(payload.get("revert") or ""), initiated_by=principal().username)
    return _started(runtime, name, request, f"rollback to {wanted}")


@route("DELETE", "/apps/(?P<name>[^/]+)/operation")
def terminate(runtime: Runtime, name: str, _: dict[str, Any], __: Mapping[str, str]) -> Response:
    """Argo CD's terminate-op: the next step stops the running operation (its SyncFail hooks run)."""
    operation_id = terminate_operation(runtime, name, by=principal())
    body: dict[str, Any] = {"app": name, "operationId": operation_id, "phase": "Terminating"}
    problem = _schedule(runtime, name, "terminate operation")
    if problem:
        body["warning"] = problem
    return Response(200, body)


def _started(runtime: Runtime, name: str, request: SyncRequest, reason: str) -> Response:
    """Record the operation, schedule its first step, answer 202 (409 with the running id when one runs)."""
    runtime.app(name)
    try:
        operation_id = start_operation(runtime, name, request, by=principal())
    except OperationInProgress as exc:
        return Response(409, {"error": "conflict", "message": str(exc), "operationId": exc.operation_id})
    body: dict[str, Any] = {"app": name, "operationId": operation_id}
    problem = _schedule(runtime, name, reason)
    if problem:
        body["warning"] = problem
    op = app_state.load(runtime.store, name)[0].operation
    if op is not None and op.id == operation_id:
        body["operation"] = op.to_json()
    opened, trouble = open_revert(runtime, name, request)
    if opened:
        body["revert"] = opened
    if trouble:
        body["revertError"] = trouble
    return Response(202, body)


@route("GET", "/audit")
def audit_log(runtime: Runtime, _: str, __: dict[str, Any], query: Mapping[str, str]) -> Response:
    """The audit log, oldest first, a page at a time (`?after=NEXT&limit=N`): admins only (`audit, get`)."""
    authz.require(runtime, principal(), authz.AUDIT, "get", "*")
    limit = query.get("limit", "100")
    if not limit.isdigit():
        raise PermanentError("query limit must be a number of entries (at most 500)")
    entries, following = auditlog.page(runtime.store, after=query.get("after", ""), limit=int(limit))
    return Response(200, {"entries": entries, "next": following})


_ROLE = "/projects/(?P<name>[A-Za-z0-9._-]+/roles/[A-Za-z0-9._-]+)"


@route("POST", f"{_ROLE}/token", body="TokenRequest")
def create_token(runtime: Runtime, name: str, payload: dict[str, Any], _: Mapping[str, str]) -> Response:
    """A project role's JWT for CI (Argo CD's `proj role create-token`): shown once, in this answer only."""
    project, role = name.split("/roles/")
    authz.require(runtime, principal(), "projects", "update", project)
    token, record = tokens.create(runtime, tokens.role(runtime, project, role),
                                  expires_in=float(payload.get("expiresIn", 0)), token_id=str(payload.get("id", "")))
    authz.done(runtime, principal(), "projects", "create-token", project, f"role {role}, token {record['id']}")
    return Response(201, {"project": project, "role": role, "token": token, **record})


@route("GET", f"{_ROLE}/tokens")
def list_tokens(runtime: Runtime, name: str, _: dict[str, Any], __: Mapping[str, str]) -> Response:
    project, role = name.split("/roles/")
    authz.require(runtime, principal(), "projects", "get", project)
    found = tokens.listed(runtime, tokens.role(runtime, project, role))
    return Response(200, {"project": project, "role": role, "tokens": found})


@route("DELETE", "/projects/(?P<name>[A-Za-z0-9._-]+/roles/[A-Za-z0-9._-]+/token/[A-Za-z0-9._-]+)")
def delete_token(runtime: Runtime, name: str, _: dict[str, Any], __: Mapping[str, str]) -> Response:
    """Revoke a token by its id (or iat): the next call with it is refused."""
    project, rest = name.split("/roles/")
    role, token_id = rest.split("/token/")
    authz.require(runtime, principal(), "projects", "update", project)
    record = tokens.revoke(runtime, tokens.role(runtime, project, role), token_id)
    authz.done(runtime, principal(), "projects", "delete-token", project, f"role {role}, token {record['id']}")
    return Response(200, {"project": project, "role": role, "revoked": record})


def chosen_dispatcher() -> Dispatcher | None:
    """The dispatcher the caller of `handle` handed in, if any (routes in other modules pass it on)."""
    return _DISPATCHER.get()


def _dispatcher(runtime: Runtime) -> Dispatcher:
    chosen = _DISPATCHER.get()
    return chosen if chosen is not None else dispatcher_for(runtime)


def _schedule(runtime: Runtime, name: str, reason: str) -> str:
    """Hand the operation's next step over now: "" or why it could not be (the poll then resumes it)."""
    try:
        _dispatcher(runtime).schedule(name, 0.0, reason)
    except TidecdError as exc:
        log.warning("first step not scheduled", app=name, error=str(exc))
        return f"the next step could not be scheduled ({exc}); the poll resumes the operation within minutes"
    return ""


def _summary(name: str, current: app_state.AppState | None, changes: ChangeSet) -> dict[str, Any]:
    body: dict[str, Any] = {"app": name, "sync": current.sync_status if current else "Unknown",
                            "health": current.health if current else "Unknown", "changes": changes.to_dicts()}
    if current and current.operation:
        body["operation"] = {"phase": current.operation.phase, "message": current.operation.message,
                             "id": current.operation.id}
    if current and current.conditions:
        body["conditions"] = current.conditions
    return body


def drive(runtime: Runtime, name: str, reason: str, operation_id: str = "", *,
          limit: float = 900.0) -> tuple[Outcome, ChangeSet, bool]:
    """Step the app until its operation (`operation_id`, or one an automated step starts) has finished;
    the last outcome, every change made, and whether an operation ran.

    Interim, until the api answers 202 and callers follow the operation: the loop lives here, never in
    the sync path; each `reconcile` call is one bounded step."""
    before = app_state.load(runtime.store, name)[0].operation
    before_id = before.id if before else ""
    changes, deadline = ChangeSet(), time.monotonic() + limit
    while True:
        outcome = reconcile_step(runtime, name, reason=reason)
        changes.entries.extend(outcome.changes.entries)
        op = outcome.state.operation if outcome.state else None
        ran = op is not None and (op.id == operation_id or (not operation_id and op.id != before_id))
        if outcome.skipped and not operation_id:
            return outcome, changes, ran
        running = op is not None and op.running and (op.id == operation_id or not operation_id)
        if not running or time.monotonic() > deadline:
            return outcome, changes, ran
        if outcome.skipped:
            time.sleep(0.5)


def parse_resource(text: str) -> tuple[str, str, str]:
    """`GROUP/KIND/NAME` (GROUP may be empty: `/ConfigMap/x`) as Argo CD's --resource takes it."""
    parts = text.split("/")
    if len(parts) != 3 or not parts[1] or not parts[2]:
        raise PermanentError(f"resource {text!r} must be GROUP/KIND/NAME (GROUP empty for core kinds)")
    return parts[0], parts[1], parts[2]


def select_resources(runtime: Runtime, name: str, texts: list[str]) -> frozenset[ResourceKey]:
    """The app's resources named by `GROUP/KIND/NAME`; an unknown one is an error naming it."""
    known = [r.key for r in _state(runtime, name).resources]
    chosen = set()
    for text in texts:
        group, kind, res_name = parse_resource(text)
        matches = [k for k in known if (k.group, k.kind, k.name) == (group, kind, res_name)]
        if not matches:
            raise NotFound(f"app {name!r} has no resource {text!r} (refresh the app first)")
        chosen.update(matches)
    return frozenset(chosen)


from tidecd.usecases import accounts, actions_api, app_write_api, appset_views, resources_api  # noqa: E402,F401 - register their routes, which use `route`
