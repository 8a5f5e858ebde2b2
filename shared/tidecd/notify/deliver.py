"""Notifications in Argo CD Notifications' vocabulary, and the GitHub write-back of every operation.

Two halves, as the design card says (record stage → events → notify):

1. `tidecd.notify.events` is pure: what was notified and the new state in, the events due out.
2. `after_step(runtime, app, state, continue_after)` delivers at the edge, called by whoever ran the reconcile
   step (`triggers.dispatch`) with the state it recorded; the step itself knows no notifier. First the
   GitHub write-back (commit status `tidecd/<app>` pending → success/failure on the operation's revision,
   and optional Deployments; an operation that applied or refused a pull request's plan also updates that
   plan's check on the pull request's head, naming the operation: `plan_link`), then every subscription
   the Application's annotations declare:
       notifications.argoproj.io/subscribe.<trigger>.<service>: <recipient>[;<recipient>...]
   Services: `github` (a commit status on the event's revision; context = the recipient, default
   `tidecd/<app>/<trigger>`), `webhook` (JSON POST signed with HMAC SHA-256 in `X-Tidecd-Signature:
   sha256=<hex>`), `slack` (an incoming-webhook payload), `pubsub` (a message on a topic). Targets are
   named in a Secret labelled `argocd.argoproj.io/secret-type: notifications` (sealed in the config
   source): `webhook.<name>.url`, `webhook.<name>.secret`, `slack.<name>.url`, `pubsub.<name>.topic`; an
   empty recipient means the target named `default`; a pubsub recipient may also be a topic path
   (`projects/P/topics/T`).

What was notified, the deliveries still to retry and a log of recent deliveries live in the object store
at `notifications/<app>.json` (written under the app's lease). A failed delivery is retried on later
steps with backoff (`RETRY_DELAYS`), at most `MAX_ATTEMPTS` times, then recorded as given up. Nothing here
raises into a sync, and deliveries of one step stop after `DELIVERY_BUDGET` seconds (the rest wait for the
next step).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from tidecd.base.constants import (
    ANNOTATION_GITHUB_DEPLOYMENT,
    LABEL_SECRET_TYPE,
    NOTIFICATIONS_SUBSCRIBE_PREFIX,
    SECRET_TYPE_NOTIFICATIONS,
)
from tidecd.base.errors import SecretError, TemporaryError
from tidecd.clients import github as gh
from tidecd.clients import metrics
from tidecd.clients.pubsub import Message, Publisher, PublishFailed, PubSubPublisher, publish_one
from tidecd.clients.secrets import decode_value
from tidecd.clients.store import ObjectStore, read_json, write_json
from tidecd.notify import controller, services
from tidecd.notify.events import TRIGGERS, Event, Seen, events
from tidecd.state import plans
from tidecd.state.app import AppState

if TYPE_CHECKING:
    from tidecd.config.model import Application
    from tidecd.runtime import Runtime

log = structlog.get_logger("tidecd.notify.deliver")

SERVICES = ("github", "webhook", "slack", "pubsub")
RECORD_PREFIX = "notifications/"
MAX_ATTEMPTS = 5
RETRY_DELAYS = (10.0, 30.0, 90.0, 270.0)  # after attempt 1, 2, 3, 4
DELIVERY_BUDGET = 10.0
HTTP_TIMEOUT = 5.0
LOG_LIMIT = 50
SIGNATURE_HEADER = "X-Tidecd-Signature"


# --- subscriptions ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Subscription:
    trigger: str
    service: str
    recipient: str  # "" for the service's default target


def subscriptions(annotations: Mapping[str, str]) -> tuple[list[Subscription], list[str]]:
    """The Application's subscriptions and an error per malformed annotation (naming it)."""
    subs: list[Subscription] = []
    errors: list[str] = []
    for name, value in sorted(annotations.items()):
        if not name.startswith(NOTIFICATIONS_SUBSCRIBE_PREFIX):
            continue
        rest = name[len(NOTIFICATIONS_SUBSCRIBE_PREFIX):]
        trigger, _, service = rest.partition(".")
        if trigger not in TRIGGERS:
            errors.append(f"annotation {name}: unknown trigger {trigger!r}; expected one of {', '.join(TRIGGERS)}")
            continue
        if service not in SERVICES:
            errors.append(f"annotation {name}: unknown service {service!r}; expected one of {', '.join(SERVICES)}")
            continue
        recipients = [r.strip() for r in str(value).split(";") if r.strip()] or [""]
        subs.extend(Subscription(trigger, service, r) for r in recipients)
    return subs, errors


# --- delivery --------------------------------------------------------------------------------------------


class DeliveryFailed(TemporaryError):
    """One delivery did not go through (the message is safe to record: no URL, key or body); it is retried
    with backoff up to MAX_ATTEMPTS."""


@dataclass(frozen=True)
class Targets:
    """The notification targets of the installation (from the notifications Secret), values never logged."""

    fields: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Targets({len(self.fields)} fields)"

    def get(self, service: str, recipient: str, name: str) -> str:
        return self.fields.get(f"{service}.{recipient or 'default'}.{name}", "")


def targets_from_secrets(secrets: Iterable[Mapping[str, Any]]) -> Targets:
    found: dict[str, str] = {}
    for secret in secrets:  # as the config source holds them: any shape, so each level is checked
        metadata = secret.get("metadata") if isinstance(secret, Mapping) else None
        labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
        if not isinstance(labels, Mapping) or labels.get(LABEL_SECRET_TYPE) != SECRET_TYPE_NOTIFICATIONS:
            continue
        data, strings = secret.get("data"), secret.get("stringData")
        for key, value in (data.items() if isinstance(data, Mapping) else ()):
            try:
                found[str(key)] = decode_value(str(value), f"notifications secret: data.{key}").decode()
            except (SecretError, UnicodeDecodeError):
                log.warning("notifications secret field is not base64 text", field=key)
        found.update({str(k): str(v) for k, v in (strings.items() if isinstance(strings, Mapping) else ())})
    return Targets(found)


@dataclass
class Context:
    """What delivery needs from the installation (built from a Runtime, or directly in tests)."""

    targets: Targets
    github: gh.GitHub | None = None
    api_url: str = gh.DEFAULT_API_URL
    public_url: str = ""
    publisher: Publisher = field(default_factory=PubSubPublisher)
    post: Callable[..., Any] | None = None  # requests.post by default

    def app_url(self, app: str) -> str:
        return f"{self.public_url.rstrip('/')}/ui/apps/{app}" if self.public_url else ""


def payload(event: Event, app_url: str) -> dict[str, Any]:
    return {**event.to_json(), "url": app_url, "source": "tidecd"}


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def deliver(ctx: Context, app: Application, event: Event, sub: Subscription) -> str:
    """Send one notification; raises DeliveryFailed. Returns a short detail for the record."""
    body = json.dumps(payload(event, ctx.app_url(event.app)), sort_keys=True).encode()
    if sub.service == "webhook":
        url, key = ctx.targets.get("webhook", sub.recipient, "url"), ctx.targets.get("webhook", sub.recipient, "secret")
        if not url:
            raise DeliveryFailed(f"no webhook target {sub.recipient or 'default'!r} in the notifications Secret")
        headers = {"Content-Type": "application/json", "X-Tidecd-Event": event.trigger,
                   "X-Tidecd-Delivery": delivery_id(event, sub)}
        if key:
            headers[SIGNATURE_HEADER] = sign(key, body)
        _http(ctx, url, body, headers)
        return "posted"
    if sub.service == "slack":
        url = ctx.targets.get("slack", sub.recipient, "url")
        if not url:
            raise DeliveryFailed(f"no slack target {sub.recipient or 'default'!r} in the notifications Secret")
        _http(ctx, url, json.dumps(slack_message(event, ctx.app_url(event.app))).encode(),
              {"Content-Type": "application/json"})
        return "posted"
    if sub.service == "pubsub":
        topic = _topic(ctx, sub.recipient)
        try:
            publish_one(ctx.publisher, topic, Message(body, {"app": event.app, "trigger": event.trigger,
                                                             "delivery": delivery_id(event, sub)}),
                        timeout=HTTP_TIMEOUT * 2)
        except PublishFailed as exc:
            raise DeliveryFailed(f"pubsub publish to {topic} failed: {exc.kind}") from exc
        return f"published to {topic}"
    return _github_service(ctx, app, event, sub)


def _topic(ctx: Context, recipient: str) -> str:
    topic = ctx.targets.get("pubsub", recipient, "topic") or recipient
    if "/topics/" not in topic:
        project = os.environ.get("GOOGLE_CLOUD_PROJECT", "")
        if not topic or not project:
            raise DeliveryFailed(f"pubsub recipient {recipient!r}: name a topic (projects/P/topics/T) or a "
                                 "target in the notifications Secret")
        topic = f"projects/{project}/topics/{topic}"
    return topic


def _http(ctx: Context, url: str, body: bytes, headers: dict[str, str]) -> None:
    # lazy: cold start (requests only when a webhook notification is posted)
    import requests

    post = ctx.post or requests.post
    try:
        answer = post(url, data=body, headers=headers, timeout=HTTP_TIMEOUT)
    except requests.RequestException as exc:
        raise DeliveryFailed(f"target unreachable: {type(exc).__name__}") from exc
    if not 200 <= answer.status_code < 300:
        raise DeliveryFailed(f"target answered {answer.status_code}")


def slack_message(event: Event, app_url: str) -> dict[str, Any]:
    color = {"on-sync-succeeded": "#18be52", "on-deployed": "#18be52", "on-sync-running": "#0dadea"}.get(
        event.trigger, "#e96d76")
    title = f"{event.app}: {event.trigger.removeprefix('on-').replace('-', ' ')}"
    fields = [{"title": "Revision", "value": event.revision[:12], "short": True},
              {"title": "Sync", "value": event.sync_status, "short": True},
              {"title": "Health", "value": event.health, "short": True}]
    if event.initiated_by:
        fields.append({"title": "Initiated by", "value": event.initiated_by, "short": True})
    return {"text": f"{title}{f' ({app_url})' if app_url else ''}",
            "attachments": [{"color": color, "title": title, "title_link": app_url or None,
                             "text": gh.cut("\n".join(t for t in (event.cause, event.message) if t), 3000),
                             "fields": fields}]}


_STATUS_OF = {"on-sync-running": "pending", "on-sync-succeeded": "success", "on-deployed": "success",
              "on-sync-failed": "failure", "on-health-degraded": "failure", "on-sync-status-unknown": "error",
              "on-auto-rollback": "failure"}


def _github_service(ctx: Context, app: Application, event: Event, sub: Subscription) -> str:
    repo = gh.repo_of(app.source.repo_url, ctx.api_url)
    if ctx.github is None or repo is None or not event.revision:
        raise DeliveryFailed("github service: no github Secret, the repo is not on GitHub, or no revision")
    context = sub.recipient or f"tidecd/{event.app}/{event.trigger}"
    result = ctx.github.status(repo, event.revision, _STATUS_OF[event.trigger], context,
                               event.message or event.trigger, ctx.app_url(event.app))
    if result.result in ("error", "backoff"):
        raise DeliveryFailed(f"github: {result.result}: {result.detail}")
    return f"github {result.result}"


def delivery_id(event: Event, sub: Subscription) -> str:
    text = "\0".join((event.app, event.trigger, event.key, sub.service, sub.recipient))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


# --- GitHub write-back of operations (always on for apps on GitHub) --------------------------------------

_OP_STATUS = {"on-sync-running": ("pending", "in_progress"), "on-sync-succeeded": ("success", "success"),
              "on-sync-failed": ("failure", "failure")}


def write_back(ctx: Context, app: Application, event: Event, record: dict[str, Any]) -> list[gh.Delivery]:
    """Commit status `tidecd/<app>` and (with the annotation) a Deployment, for an operation event."""
    repo = gh.repo_of(app.source.repo_url, ctx.api_url)
    if ctx.github is None or repo is None or event.trigger not in _OP_STATUS or not event.revision:
        return []
    state, deployment_state = _OP_STATUS[event.trigger]
    phase = event.phase if event.trigger != "on-sync-running" else "Running"
    by = f" (by {event.initiated_by})" if event.initiated_by else ""
    description = f"{phase}{by}: {event.message}" if event.message else f"sync {phase.lower()}{by}"
    done = [ctx.github.status(repo, event.revision, state, f"tidecd/{event.app}", description,
                              ctx.app_url(event.app))]
    environment = app.annotation(ANNOTATION_GITHUB_DEPLOYMENT).strip()
    if environment:
        done.append(ctx.github.deployment(repo, event.revision, environment, deployment_state, description,
                                          ctx.app_url(event.app), ctx.app_url(event.app)))
        previous = record.get("deployed") if isinstance(record.get("deployed"), dict) else None
        if deployment_state == "success" and done[-1].ok:
            if previous and previous.get("sha") != event.revision and previous.get("environment") == environment:
                done.append(ctx.github.deployment(repo, str(previous["sha"]), environment, "inactive",
                                                  f"superseded by {event.revision[:12]}"))
            record["deployed"] = {"sha": event.revision, "environment": environment, "id": done[1].value}
    return done


def plan_link(ctx: Context, store: ObjectStore, event: Event) -> list[gh.Delivery]:
    """The end of an operation that applied (or refused) a plan, on that plan's check: the commit status the
    pull request's plan was posted under, on its head, now naming the operation and linking to the app."""
    if ctx.github is None or event.trigger not in ("on-sync-succeeded", "on-sync-failed"):
        return []
    found = plans.operation_plan(store, event.app, event.operation_id)
    if found is None:
        return []
    approved, refused = found
    owner, _, name = approved.repo.partition("/")
    if refused:
        state, text = "failure", f"not applied by {event.app} operation {event.operation_id}: {refused}"
    elif event.trigger == "on-sync-succeeded":
        state, text = "success", f"applied by {event.app} operation {event.operation_id} ({event.revision[:12]})"
    else:
        state, text = "failure", f"{event.app} operation {event.operation_id} failed applying it: {event.message}"
    return [ctx.github.status(gh.Repo(owner, name), approved.head_sha, state, approved.context or f"tidecd/{event.app}",
                              gh.cut(text, 140), ctx.app_url(event.app))]


# --- the edge: called once per reconcile step ------------------------------------------------------------


def record_key(app: str) -> str:
    return f"{RECORD_PREFIX}{app}.json"


def after_step(runtime: Runtime, app: str, state: AppState | None, continue_after: float | None, *,
               skipped: str = "", ctx: Context | None = None) -> float | None:
    """Deliver what a step's new state makes due; never raises, never blocks the sync beyond the budget.
    Called by whoever ran the step (`triggers.dispatch`), with the state it recorded, when it wants its
    next step, and why it did nothing (`skipped`). Returns `continue_after`, shortened when a failed
    delivery is due for a retry."""
    metrics.RECONCILES.labels(result="skipped" if skipped else
                              "continuing" if continue_after is not None else "done").inc()
    if state is None or skipped:
        return continue_after
    try:
        retry_in = notify_state(runtime, state, ctx=ctx)
    except Exception as exc:  # noqa: BLE001 - notifications never fail a sync
        log.warning("notifications failed", app=app, error=type(exc).__name__, detail=str(exc)[:200])
        return continue_after
    if retry_in is None:
        return continue_after
    return retry_in if continue_after is None else min(continue_after, retry_in)


def context_for(runtime: Runtime) -> Context:
    secrets = runtime.secrets()
    api_url = runtime.settings.github_api_url or gh.DEFAULT_API_URL
    return Context(targets=targets_from_secrets(secrets), github=gh.client_for(secrets, runtime.store, api_url),
                   api_url=api_url, public_url=runtime.settings.public_url)


def notify_state(runtime: Runtime, state: AppState, *, ctx: Context | None = None,
                 clock: Callable[[], float] = time.time) -> float | None:
    """Compute, deliver and record; returns seconds until the next retry is due (None: nothing pending)."""
    app = runtime.app(state.app)
    store = runtime.store
    found = read_json(store, record_key(state.app))
    record: dict[str, Any] = found[0] if found and isinstance(found[0], dict) else {}
    before = json.dumps(record, sort_keys=True, default=str)
    generation = found[1] if found else 0
    seen = Seen.from_json(record.get("seen"))
    due, new_seen = events(seen, state, _iso(clock()))
    argo_config = runtime.config().argo_settings.notifications
    # with argocd-notifications-cm, the subscription annotations are Argo CD's (tidecd.notify.controller)
    subs, errors = ([], []) if argo_config.present else subscriptions(dict(app.annotations))
    pending: list[dict[str, Any]] = [p for p in record.get("pending", []) if isinstance(p, dict)]
    if not due and not pending and new_seen == seen and not argo_config.present:
        return None
    ctx = ctx or context_for(runtime)
    deadline = time.monotonic() + DELIVERY_BUDGET
    history: list[dict[str, Any]] = [h for h in record.get("log", []) if isinstance(h, dict)]
    for error in errors:
        log.warning("notification subscription invalid", app=state.app, error=error)
    for event in due:
        if event.trigger in ("on-sync-running", "on-sync-succeeded", "on-sync-failed"):
            metrics.OPERATIONS.labels(phase="Running" if event.trigger == "on-sync-running" else event.phase).inc()
        if event.trigger in ("on-sync-succeeded", "on-sync-failed"):
            metrics.SYNCS.labels(result=event.phase).inc()
            metrics.bump_totals(store, {f"syncs_{event.phase.lower()}": 1}, app=state.app)
        for delivery in write_back(ctx, app, event, record) + plan_link(ctx, store, event):
            history.append({"id": "", "trigger": event.trigger, "service": "github-status", "recipient": "",
                            "result": delivery.result, "detail": delivery.detail or delivery.what, "attempts": 1,
                            "at": event.at})
        for sub in subs:
            if sub.trigger == event.trigger:
                pending.append({"event": event.to_json(), "service": sub.service, "recipient": sub.recipient,
                                "attempts": 0, "next_at": 0.0})
    still: list[dict[str, Any]] = []
    now = clock()
    for item in pending:
        if float(item.get("next_at", 0.0)) > now or time.monotonic() > deadline:
            still.append(item)
            continue
        event = Event.from_json(item.get("event") or {})
        sub = Subscription(event.trigger, str(item.get("service")), str(item.get("recipient", "")))
        attempts = int(item.get("attempts", 0)) + 1
        entry = {"id": delivery_id(event, sub), "trigger": event.trigger, "service": sub.service,
                 "recipient": sub.recipient, "attempts": attempts, "at": _iso(clock())}
        try:
            entry |= {"result": "sent", "detail": deliver(ctx, app, event, sub)}
        except DeliveryFailed as exc:
            gave_up = attempts >= MAX_ATTEMPTS
            entry |= {"result": "gave up" if gave_up else "failed", "detail": str(exc)}
            if not gave_up:
                delay = RETRY_DELAYS[min(attempts, len(RETRY_DELAYS)) - 1]
                still.append(item | {"attempts": attempts, "next_at": clock() + delay})
        except Exception as exc:  # noqa: BLE001 - a broken service never stops the others
            entry |= {"result": "failed", "detail": type(exc).__name__}
            still.append(item | {"attempts": attempts, "next_at": clock() + RETRY_DELAYS[0]})
        metrics.NOTIFICATIONS.labels(service=sub.service, trigger=event.trigger, result=entry["result"]).inc()
        log.info("notification delivery", app=state.app, trigger=event.trigger, service=sub.service,
                 result=entry["result"], attempts=attempts, detail=entry["detail"])
        history.append(entry)
    record |= {"seen": new_seen.to_json(), "pending": still, "log": history[-LOG_LIMIT:], "errors": errors}
    argo_retry = _argo(runtime, ctx, app, state, record, clock, deadline) if argo_config.present else None
    if json.dumps(record, sort_keys=True, default=str) != before:
        write_json(store, record_key(state.app), record, if_generation_match=generation)
    waits = [w for w in (argo_retry, *(max(0.5, float(p.get("next_at", 0.0)) - clock()) for p in still))
             if w is not None]
    return min(waits) if waits else None


def _argo(runtime: Runtime, ctx: Context, app: Application, state: AppState, record: dict[str, Any],
          clock: Callable[[], float], deadline: float) -> float | None:
    """Argo CD Notifications of argocd-notifications-cm (`tidecd.notify.controller`)."""
    wire = services.Wire(github=controller.github_for(ctx.github, ctx.api_url, runtime.store),
                         github_api_url=ctx.api_url, publisher=ctx.publisher)
    # lazy: cold start (the source package only when argocd-notifications-cm asks for commit metadata)
    from tidecd.source.git import Snapshots

    config = runtime.config()
    snapshots = Snapshots(runtime.store)
    return controller.run(config.argo_settings.notifications, app, state, record, secrets=runtime.notifications_secret,
                          wire=wire, clock=clock, deadline=deadline, project=config.projects.get(app.project),
                          commit=lambda sha: snapshots.commit(app.source.repo_url, sha))


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
