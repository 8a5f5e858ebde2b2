"""The audit use case: the kube-apiserver's audit webhook backend tells tidecd of every write, so drift is
noticed in seconds, and by whom, with nothing watching the cluster between events.

The backend POSTs batches of `audit.k8s.io/v1` `EventList` to the webhook function's `/audit` path, with
the bearer token of its kubeconfig (`TIDECD_AUDIT_TOKEN`, compared in constant time; no token configured
refuses every batch). The function bounds the body (`TIDECD_MAX_WEBHOOK_BYTES`, 413) before anything is
read; `parse` is pure and bounded (`MAX_EVENTS`), and a malformed batch is a 400 naming the field.

Of the events, only writes count: verb create, update, patch or delete, stage ResponseComplete, a response
below 400, a named object, and not the `status` subresource (a controller reporting status is no drift;
`scale` is, `kubectl scale` writes it). Ignored too are tidecd's own writes (its user agent and field
manager `tidecd`, and the users in `TIDECD_AUDIT_IGNORE_USERS`, its service accounts) and those of the
cluster's own controllers (`system:kube-controller-manager`, service accounts of `kube-system`), which
follow every rollout. Each remaining write is looked up in the resource index (`tidecd.state.index`,
written by the step when an app's inventory changes; one list call per namespace a batch touches); an
object no app manages causes nothing. The apps
found get the write in their audit record (the step names who drifted them from it) and a refresh,
coalesced as webhook deliveries are (`tidecd.triggers.pending`): a burst of events for one app costs one
reconcile, plus at most one more. With selfHeal the step then syncs (after Argo CD's self-heal rules and
the sync windows); without it the app reads OutOfSync. The poll stays the fallback for lost events.

On GKE, the Admin Activity audit log (always on) reaches the same handling through a Log Router sink, a
Pub/Sub topic and a push subscription to `/audit/gke`, one log entry per push, authenticated by the push's
OIDC token (`tidecd.clients.pushauth`); `parse_log_entry` reads an entry into the same `AuditEvent`.

A store that fails answers 503: the backend retries the batch with its backoff (Pub/Sub redelivers the
entry).
"""

from __future__ import annotations

import contextvars
import json
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import structlog

from tidecd.base import bearer
from tidecd.base.constants import AUDIT_GKE_PATH, AUDIT_PATH, FIELD_MANAGER
from tidecd.base.errors import PermanentError, TemporaryError, TidecdError
from tidecd.base.model import Response
from tidecd.clients.deadlines import budget, env_seconds
from tidecd.state import index
from tidecd.triggers.dispatch import Dispatcher, Refresh

if TYPE_CHECKING:
    from tidecd.runtime import Runtime

log = structlog.get_logger("tidecd.usecases.audit")

PATH = AUDIT_PATH
GKE_PATH = AUDIT_GKE_PATH
API_VERSION = "audit.k8s.io/v1"
MAX_EVENTS = 10_000  # events in one batch (the backend sends at most 400 by default)
MAX_TEXT = 1024  # characters kept of any one text field (a user agent, a name)
WRITE_VERBS = frozenset({"create", "update", "patch", "delete"})
COMPLETE = "ResponseComplete"
STORE_BUDGET = 10.0  # seconds the store calls of one batch may take together (TIDECD_AUDIT_STORE_BUDGET)
REMEMBER_THREADS = 8  # apps whose audit record one batch updates at once
RETRY_AFTER = 10
CONTROLLER_USERS = ("system:kube-controller-manager", "system:kube-scheduler")
CONTROLLER_ACCOUNTS = "system:serviceaccount:kube-system:"
CONTROLLER_AGENTS = ("kube-controller-manager/", "kube-scheduler/")


class BadBatch(PermanentError):
    """An audit batch that is not an `audit.k8s.io/v1` EventList (or a log entry GKE would not write): the
    message names the field. Sending it again cannot help: a 400 (a log entry is acknowledged)."""


@dataclass(frozen=True)
class AuditEvent:
    """What tidecd reads of one audit event (`audit.k8s.io/v1` Event, any level from Metadata up)."""

    audit_id: str
    stage: str
    verb: str
    user: str  # as the cluster authenticated it; "bob (impersonated by alice)" when alice acted as bob
    user_agent: str
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int  # responseStatus.code, 0 when the event has none
    at: str  # stageTimestamp (or requestReceivedTimestamp)
    field_manager: str  # the request's `fieldManager` query parameter

    def write(self) -> index.Write:
        return index.Write(self.group, self.resource, self.namespace, self.name, self.verb, self.user,
                           self.user_agent, self.at, self.audit_id)


# --- the pure parser -------------------------------------------------------------------------------------


def parse(body: bytes) -> tuple[AuditEvent, ...]:
    """The events of one batch; BadBatch naming the field when it is not an EventList."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise BadBatch(f"audit batch: not valid JSON ({getattr(exc, 'msg', type(exc).__name__)})") from None
    if not isinstance(doc, dict):
        raise BadBatch("audit batch: not a JSON object")
    if doc.get("kind") != "EventList" or doc.get("apiVersion") != API_VERSION:
        raise BadBatch(f"audit batch: expected kind EventList, apiVersion {API_VERSION} (got kind "
                       f"{_short(doc.get('kind'))}, apiVersion {_short(doc.get('apiVersion'))})")
    items = doc.get("items")
    if items is None:
        return ()
    if not isinstance(items, list):
        raise BadBatch("audit batch: field `items` must be a list")
    if len(items) > MAX_EVENTS:
        raise BadBatch(f"audit batch: {len(items)} events, more than {MAX_EVENTS:,} in one batch")
    return tuple(_event(item, f"audit batch: items[{i}]") for i, item in enumerate(items))


def _event(item: Any, where: str) -> AuditEvent:
    if not isinstance(item, dict):
        raise BadBatch(f"{where} must be an object")
    user = _object(item, "user", where)
    impersonated = _object(item, "impersonatedUser", where)
    ref = _object(item, "objectRef", where)
    status = _object(item, "responseStatus", where)
    code = status.get("code", 0)
    if isinstance(code, bool) or not isinstance(code, int):
        raise BadBatch(f"{where}.responseStatus.code must be a number")
    name = _text(user, "username", f"{where}.user")
    if impersonated:
        name = f"{_text(impersonated, 'username', f'{where}.impersonatedUser')} (impersonated by {name})"
    uri = _text(item, "requestURI", where)
    try:
        query = parse_qs(urlsplit(uri).query) if "?" in uri else {}
    except ValueError:  # an odd URI (urlsplit refuses a bad IPv6 host): no field manager read from it
        query = {}
    return AuditEvent(
        audit_id=_text(item, "auditID", where), stage=_text(item, "stage", where), verb=_text(item, "verb", where),
        user=name, user_agent=_text(item, "userAgent", where), group=_text(ref, "apiGroup", f"{where}.objectRef"),
        resource=_text(ref, "resource", f"{where}.objectRef"),
        subresource=_text(ref, "subresource", f"{where}.objectRef"),
        namespace=_text(ref, "namespace", f"{where}.objectRef"), name=_text(ref, "name", f"{where}.objectRef"),
        code=code, at=_text(item, "stageTimestamp", where) or _text(item, "requestReceivedTimestamp", where),
        field_manager=(query.get("fieldManager") or [""])[0][:MAX_TEXT])


def parse_log_entry(data: bytes) -> AuditEvent | None:
    """The event of one GKE Admin Activity audit log entry (Cloud Logging's `LogEntry` of a `k8s.io` call,
    as a Log Router sink publishes it); None for an entry of another service; BadBatch naming the field.

    `protoPayload.methodName` ends with the verb (`io.k8s.apps.v1.deployments.patch`), `resourceName` is
    `<group>/<version>/[namespaces/<ns>/]<resource>/<name>[/<subresource>]` (`core` for the core group),
    `status.code` 0 is success, `authenticationInfo.principalEmail` is who, and
    `requestMetadata.callerSuppliedUserAgent` with what. The Admin Activity log holds completed writes only."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise BadBatch(f"audit log entry: not valid JSON ({getattr(exc, 'msg', type(exc).__name__)})") from None
    if not isinstance(doc, dict):
        raise BadBatch("audit log entry: not a JSON object")
    payload = _object(doc, "protoPayload", "audit log entry:")
    if _text(payload, "serviceName", "audit log entry: protoPayload") != "k8s.io":
        return None
    method = _text(payload, "methodName", "audit log entry: protoPayload")
    resource_name = _text(payload, "resourceName", "audit log entry: protoPayload")
    parts = resource_name.split("/")
    if len(parts) < 4 or not method:
        raise BadBatch(f"audit log entry: protoPayload.resourceName {resource_name[:80]!r} is not "
                       "<group>/<version>/[namespaces/<ns>/]<resource>/<name>")
    rest = parts[2:]
    namespaced = len(rest) >= 4 and rest[0] == "namespaces"
    namespace, (resource, name, *sub) = (rest[1], rest[2:]) if namespaced else ("", rest)
    status = _object(payload, "status", "audit log entry: protoPayload")
    code = status.get("code", 0)
    if isinstance(code, bool) or not isinstance(code, int):
        raise BadBatch("audit log entry: protoPayload.status.code must be a number")
    who = _object(payload, "authenticationInfo", "audit log entry: protoPayload")
    request = _object(payload, "requestMetadata", "audit log entry: protoPayload")
    return AuditEvent(
        audit_id=_text(doc, "insertId", "audit log entry:"), stage=COMPLETE, verb=method.rsplit(".", 1)[-1],
        user=_text(who, "principalEmail", "audit log entry: protoPayload.authenticationInfo"),
        user_agent=_text(request, "callerSuppliedUserAgent", "audit log entry: protoPayload.requestMetadata"),
        group="" if parts[0] == "core" else parts[0], resource=resource, subresource="/".join(sub),
        namespace=namespace, name=name, code=200 if code == 0 else 500,
        at=_text(doc, "timestamp", "audit log entry:") or _text(doc, "receiveTimestamp", "audit log entry:"),
        field_manager="")


def _object(doc: Mapping[str, Any], field: str, where: str) -> Mapping[str, Any]:
    value = doc.get(field)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadBatch(f"{_named(where, field)} must be an object")
    return value


def _text(doc: Mapping[str, Any], field: str, where: str) -> str:
    value = doc.get(field)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadBatch(f"{_named(where, field)} must be a string")
    return value[:MAX_TEXT]


def _named(where: str, field: str) -> str:
    """`audit batch: items[3].objectRef.name`: what a BadBatch names (`where` ends in ":" at the top)."""
    return f"{where} {field}" if where.endswith(":") else f"{where}.{field}"


def _short(value: Any) -> str:
    return repr(value)[:60]


# --- which events count ----------------------------------------------------------------------------------


def ignored(event: AuditEvent, own_users: frozenset[str]) -> str:
    """Why the event is no drift of anyone's app ("" when it may be)."""
    if event.stage != COMPLETE:
        return "stage"
    if event.verb not in WRITE_VERBS:
        return "not a write"
    if not event.resource or not event.name:
        return "no object"
    if event.subresource == "status":
        return "status"
    if event.code >= 400:
        return "failed"
    agent = event.user_agent.split("/", 1)[0].strip()
    if agent == FIELD_MANAGER or event.field_manager == FIELD_MANAGER or event.user in own_users:
        return "tidecd"
    if event.user in CONTROLLER_USERS or event.user.startswith(CONTROLLER_ACCOUNTS) \
            or event.user_agent.startswith(CONTROLLER_AGENTS):
        return "controller"
    return ""


def own_users(setting: str) -> frozenset[str]:
    return frozenset(u.strip() for u in setting.split(",") if u.strip())


@dataclass(frozen=True)
class AuditSettings:
    """The audit webhook's settings, read from the environment at each batch (as `tidecd.base.limits`)."""

    token: str = ""  # TIDECD_AUDIT_TOKEN: the bearer token of the backend's kubeconfig ("": refuse all)
    own: frozenset[str] = frozenset()  # TIDECD_AUDIT_IGNORE_USERS: tidecd's own identities, comma-separated

    def __repr__(self) -> str:  # never print the token
        return f"AuditSettings(own={sorted(self.own)!r})"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AuditSettings:
        source = os.environ if env is None else env
        return cls(source.get("TIDECD_AUDIT_TOKEN", ""), own_users(source.get("TIDECD_AUDIT_IGNORE_USERS", "")))


# --- the use case ----------------------------------------------------------------------------------------


def handle(headers: Mapping[str, str], body: bytes, runtime: Runtime, dispatcher: Dispatcher, *,
           settings: AuditSettings | None = None) -> Response:
    """Answer one batch of the audit webhook backend; see the module docstring."""
    settings = settings if settings is not None else AuditSettings.from_env()
    if not bearer.authorized(headers, settings.token):
        given = {k.lower(): v for k, v in headers.items()}.get("authorization", "")
        log.info("audit batch refused", status=401, configured=bool(settings.token),  # never the token itself
                 authorization=given.partition(" ")[0].lower() or "absent")
        return Response(401, {"error": "unauthorized: the audit webhook's kubeconfig must carry the token in "
                                       "TIDECD_AUDIT_TOKEN"})
    try:
        events = parse(body)
    except BadBatch as exc:
        log.info("audit batch refused", status=400, reason=str(exc))
        return Response(400, {"error": str(exc)})
    return _answer(events, settings, runtime, dispatcher)


def _answer(events: Sequence[AuditEvent], settings: AuditSettings, runtime: Runtime,
            dispatcher: Dispatcher) -> Response:
    """The events' refreshes within the store budget; a 503 when the store (or Pub/Sub) is away: the
    backend retries the batch, Pub/Sub redelivers the entry."""
    try:
        with budget(env_seconds("TIDECD_AUDIT_STORE_BUDGET", STORE_BUDGET),
                    "the audit webhook's store budget (TIDECD_AUDIT_STORE_BUDGET)"):
            return _handle(events, settings.own, runtime, dispatcher)
    except TemporaryError as exc:
        log.warning("audit batch unavailable", error=f"{type(exc).__name__}: {exc}"[:300])
        return Response(503, {"error": f"temporarily unavailable, retry later: {exc}"[:300],
                              "retry_after": RETRY_AFTER})


def handle_push(headers: Mapping[str, str], body: bytes, runtime: Runtime, dispatcher: Dispatcher, *,
                settings: AuditSettings | None = None) -> Response:
    """One GKE audit log entry, pushed by the Log Router sink's Pub/Sub subscription to `GKE_PATH` with an
    OIDC token (`tidecd.clients.pushauth`, 401 otherwise). An entry that is no write of k8s.io, or that
    cannot be read, is acknowledged (200, "ignored"): redelivering it cannot help. A store that fails is a
    503, and Pub/Sub redelivers."""
    from tidecd.clients import pushauth  # lazy: cold start (JWT verification only for pushes)

    settings = settings if settings is not None else AuditSettings.from_env()
    try:
        pushauth.verify(headers, pushauth.PushIdentity.from_env())
        event = parse_log_entry(pushauth.message_data(body))
    except pushauth.PushRefused as exc:
        log.info("audit push refused", status=401, reason=str(exc))
        return Response(401, {"error": str(exc)})
    except TemporaryError as exc:  # Google's keys could not be fetched
        return Response(503, {"error": str(exc)[:300], "retry_after": RETRY_AFTER})
    except (pushauth.NotAnEnvelope, BadBatch) as exc:
        log.info("audit push ignored", reason=str(exc))
        return Response(200, {"ignored": str(exc)})
    if event is None:
        return Response(200, {"ignored": "not a log entry of k8s.io"})
    return _answer((event,), settings, runtime, dispatcher)


def _handle(events: Sequence[AuditEvent], users: frozenset[str], runtime: Runtime,
            dispatcher: Dispatcher) -> Response:
    skipped: dict[str, int] = {}
    writes: list[AuditEvent] = []
    for event in events:
        why = ignored(event, users)
        if why:
            skipped[why] = skipped.get(why, 0) + 1
        else:
            writes.append(event)
    indexed = {ns: index.namespace_owners(runtime.store, ns) for ns in sorted({e.namespace for e in writes})}
    by_app: dict[str, list[index.Write]] = {}
    unmanaged = 0
    for event in writes:
        apps_of = indexed[event.namespace].get(index.object_id(event.group, event.namespace, event.name), [])
        unmanaged += not apps_of
        for app in apps_of:
            by_app.setdefault(app, []).append(event.write())
    known = _known_apps(runtime)
    apps = sorted(a for a in by_app if known is None or a in known)
    with ThreadPoolExecutor(REMEMBER_THREADS) as pool:  # an object store answers in parallel; each task runs in
        done = [pool.submit(contextvars.copy_context().run, index.remember, runtime.store, app, by_app[app])
                for app in apps]  # a copy of this context, so the batch's store budget bounds it too
        for future in done:
            future.result()
    refreshes = [Refresh(app, f"audit: {_describe(by_app[app][-1])}"[:200]) for app in apps]
    failures = dispatcher.dispatch(refreshes) if refreshes else {}
    answer: dict[str, Any] = {"events": len(events), "writes": len(writes), "ignored": skipped,
                              "unmanaged": unmanaged, "refreshed": [a for a in apps if a not in failures]}
    log.info("audit batch", events=len(events), writes=len(writes), apps=apps, ignored=skipped)
    if failures:
        answer["failed"] = failures
        answer["retry_after"] = RETRY_AFTER
        return Response(503, answer)
    return Response(200, answer)


def _known_apps(runtime: Runtime) -> frozenset[str] | None:
    """The apps of the config (an index marker of an app since deleted refreshes nothing); None when the
    config cannot be read now (every owner is refreshed, and its step reports what is wrong)."""
    try:
        return frozenset(runtime.config().applications)
    except TidecdError:
        return None


def _describe(write: index.Write) -> str:
    where = f"{write.namespace}/{write.name}" if write.namespace else write.name
    return f"{write.verb} {write.resource} {where} by {write.user}"
