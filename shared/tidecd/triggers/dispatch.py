"""Refreshes and continuations: how reconcile steps are triggered, coalesced and scheduled.

Two kinds of message reach the reconcile step, both a `Refresh`:
- a **refresh** ("something may have changed": a webhook, the poll, the api). Refreshes of one app are
  coalesced by `tidecd.triggers.pending`: the first one claims `pending/<app>` and is handed over; while it is on
  its way or running, later ones only mark the record "again" (with their revision). The run that
  consumed it asks `pending.finish` and, when a mark names a revision it did not see, hands one more
  refresh over.
- a **continuation** ("the operation asked for its next step in N seconds"): `schedule(app, delay, reason)`,
  called after every step whose `Outcome.continue_after` is not None. It carries `not_before` (unix
  seconds) and a `token` naming its chain: `continuations/<app>` records the newest chain, a step of an
  older chain runs but schedules nothing more, so an app never has two chains of steps going.

In the cloud each is one Pub/Sub message to the refresh topic (attribute `app`, and `notBefore` for a
continuation), pushed to the reconcile function. Pub/Sub has no delivery delay: the reconcile function
refuses a continuation that arrives early with HTTP 429 (`NotYet`), which Pub/Sub counts as a nack and
redelivers after the subscription's retry-policy backoff, until it is due (infra/pubsub.tf sets the
backoff; docs/running-locally.md "Continuations and coalescing" explains the trade-off). Locally
(`TIDECD_REFRESH_TOPIC` unset) both go to the process's `LocalScheduler`. Either way the step itself is
`run_step`: the same code path.

A dispatcher never raises for one refresh that failed: `dispatch` returns the failures by app, so the
caller can decide (the webhook answers 503, the poll keeps the refresh for its next tick).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from tidecd.base.errors import ConfigError, PermanentError, TemporaryError, TidecdError
from tidecd.base.model import HealthStatus
from tidecd.clients.pubsub import PUBLISH_TIMEOUT, Message, Publisher, PubSubPublisher
from tidecd.runtime import Runtime
from tidecd.triggers import pending

if TYPE_CHECKING:
    from tidecd.clients.store import ObjectStore
    from tidecd.step.reconcile import Outcome
    from tidecd.triggers.scheduler import LocalScheduler

log = structlog.get_logger("tidecd.triggers.dispatch")

LEASE_RETRY = 2.0  # locally: a step that found the app's lease held runs again this much later
EARLY_SLACK = 0.5  # a continuation this close to its time runs now
# A poll's resolved head is used this long. Ticks are minutes apart, so two fresh heads of different ticks
# never meet; a redelivery later than this resolves again.
HEAD_FRESH_SECONDS = 60.0
COMMIT = re.compile("[0-9a-f]{40}")  # a config source's commit in a refresh message
MAX_CONFIG_SOURCES = 64  # the main config source and the teams' (a bound on a hostile message)
# Older than that (the fan-out of a 1,000-app tick outlasts a minute), a poll's head is still used while the
# latest tick's record of its repository (`state/repos/`) resolves the app's targetRevision to it: no later
# tick saw anything else. Bounded, so a stopped scheduler cannot keep an old head in use.
HEAD_CONFIRMED_SECONDS = 900.0


class BadRefreshMessage(PermanentError):
    """A refresh message that cannot be decoded: redelivering it will not help."""


class NotYet(TemporaryError):
    """A continuation delivered before its `not_before`: refuse it, Pub/Sub redelivers it after a backoff."""


@dataclass(frozen=True)
class Refresh:
    """Reconcile `app` because of `reason`; `revision` is the commit that triggered it (coalescing, logs).

    With a `token` it is a continuation of the app's operation, due at `not_before` (unix seconds). With
    `resolved_at` (unix seconds), `revision` is the head the poll's ls-remote resolved the app's
    targetRevision to at that time: a step within `HEAD_FRESH_SECONDS` of it renders that commit without an
    ls-remote of its own (one ls-remote per repository per tick, not one per app). `config` likewise: the
    commit of each git config source (`runtime.config_head_key`) the poll loaded at `config_at`."""

    app: str
    reason: str
    revision: str = ""
    not_before: float = 0.0
    token: str = ""
    resolved_at: float = 0.0
    config: tuple[tuple[str, str], ...] = ()
    config_at: float = 0.0

    def head(self, now: float) -> str:
        """The commit to render without resolving again, "" when this refresh carries none still fresh."""
        fresh = bool(self.resolved_at) and 0 <= now - self.resolved_at <= HEAD_FRESH_SECONDS
        return self.revision if fresh and not self.token else ""

    def config_heads(self, now: float) -> dict[str, str]:
        """The config sources' commits to load without an ls-remote, {} when this refresh carries none still
        fresh. Every step ls-remoted the config repository: a no-op tick of 1,000 apps made 1,002 requests to
        the config host, where one (the poll's) said the same."""
        fresh = bool(self.config_at) and 0 <= now - self.config_at <= HEAD_FRESH_SECONDS
        return dict(self.config) if fresh and not self.token else {}

    @property
    def continuation(self) -> bool:
        return bool(self.token)

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {"app": self.app, "reason": self.reason, "revision": self.revision}
        if self.token:
            doc |= {"notBefore": self.not_before, "token": self.token}
        if self.resolved_at:
            doc["resolvedAt"] = self.resolved_at
        if self.config_at:
            doc |= {"config": dict(self.config), "configAt": self.config_at}
        return json.dumps(doc, sort_keys=True).encode()

    def attributes(self) -> dict[str, str]:
        extra = {"notBefore": f"{self.not_before:.3f}"} if self.token else {}
        return {"app": self.app, **extra}


def continuation(app: str, delay: float, reason: str, *, now: Callable[[], float] = time.time) -> Refresh:
    return Refresh(app, reason, not_before=now() + max(0.0, delay), token=uuid.uuid4().hex[:16])


class Dispatcher(Protocol):
    def dispatch(self, refreshes: Sequence[Refresh]) -> dict[str, str]:
        """Hand every refresh over (coalesced); a short error message per app that could not be handed over."""
        ...

    def schedule(self, app: str, delay: float, reason: str) -> None:
        """Run the next step of `app` in `delay` seconds; raises TemporaryError when it cannot be handed over."""
        ...


def _coalesced(store: ObjectStore | None, refreshes: Sequence[Refresh],
               send: Callable[[list[Refresh]], dict[str, str]]) -> dict[str, str]:
    """Claim `pending/<app>` for each refresh and `send` only the claimed ones; a failed send gives the
    claim back, so the redelivery (or the next poll) claims it anew."""
    if store is None:
        return send(list(refreshes))
    claimed, failures = [], {}
    for refresh in refreshes:
        try:
            if pending.claim(store, refresh.app, refresh.revision):
                claimed.append(refresh)
            else:
                log.info("refresh coalesced", app=refresh.app, reason=refresh.reason)
        except TidecdError as exc:
            failures[refresh.app] = f"cannot record the refresh: {exc}"[:300]
    sent = send(claimed) if claimed else {}
    for app in sent:
        pending.release(store, app)
    return failures | sent


class Handover(ABC):
    """What both dispatchers share, written once: refreshes are coalesced through `pending/`, a
    continuation is recorded as the app's newest chain, and either is handed over by `send` (the local
    scheduler or Pub/Sub), so the two differ only in how a refresh leaves the process."""

    store: ObjectStore | None

    def dispatch(self, refreshes: Sequence[Refresh]) -> dict[str, str]:
        return _coalesced(self.store, refreshes, self.send)

    def schedule(self, app: str, delay: float, reason: str) -> None:
        refresh = continuation(app, delay, reason)
        if self.store is not None:
            pending.record_continuation(self.store, app, delay, reason, refresh.token)
        failures = self.send([refresh])
        if failures:
            raise TemporaryError(failures[app])

    @abstractmethod
    def send(self, refreshes: Sequence[Refresh]) -> dict[str, str]:
        """Hand every refresh over as it is (no coalescing); the failures by app."""


# --- locally: the in-process scheduler -------------------------------------------------------------------


class DirectDispatcher(Handover):
    """Hands refreshes and continuations to the process's `LocalScheduler` and returns at once.

    Each job gets its own Runtime from `runtime_factory` (a Runtime caches config and cluster clients and
    is not shared across threads); a job whose step found the app's lease held runs again `LEASE_RETRY`
    seconds later.
    """

    def __init__(self, runtime_factory: Callable[[], Runtime], *, store: ObjectStore | None = None,
                 scheduler: LocalScheduler | None = None) -> None:
        self.runtime_factory = runtime_factory
        self.store = store
        self._scheduler = scheduler

    @property
    def scheduler(self) -> LocalScheduler:
        if self._scheduler is None:
            # lazy: cold start (the local scheduler and its threads: a cloud instance dispatches through Pub/Sub)
            from tidecd.triggers import scheduler

            self._scheduler = scheduler.shared()
        return self._scheduler

    def send(self, refreshes: Sequence[Refresh]) -> dict[str, str]:
        """Submit every refresh to the scheduler, which cannot refuse one: no failures."""
        for refresh in refreshes:
            self._submit(refresh)
        return {}

    def _submit(self, refresh: Refresh) -> None:
        delay = max(0.0, refresh.not_before - time.time()) if refresh.continuation else 0.0
        self.scheduler.submit(f"{refresh.app}\0{refresh.token}", delay, lambda: self._job(refresh))

    def _job(self, refresh: Refresh) -> float | None:
        try:
            outcome = run_step(self.runtime_factory(), refresh, self)
        except Exception as exc:  # one app's failure must not stop the others
            log.warning("step failed", app=refresh.app, reason=refresh.reason,
                        error=f"{type(exc).__name__}: {exc}"[:300])
            return None
        return LEASE_RETRY if outcome.skipped else None


# --- in the cloud: one Pub/Sub message per refresh or continuation ---------------------------------------


class PubSubDispatcher(Handover):
    """Publishes one message per refresh to `topic` (`projects/P/topics/T`, or `T` with the project from
    `GOOGLE_CLOUD_PROJECT`) through `publisher` (`tidecd.clients.pubsub`; google-cloud-pubsub by default).
    With a `store`, refreshes are coalesced and continuations recorded (`tidecd.triggers.pending`)."""

    def __init__(self, topic: str, *, store: ObjectStore | None = None, timeout: float = PUBLISH_TIMEOUT,
                 publisher: Publisher | None = None) -> None:
        self.topic = topic_path(topic)
        self.store = store
        self.timeout = timeout
        self.publisher = publisher or PubSubPublisher()

    def __repr__(self) -> str:
        return f"PubSubDispatcher({self.topic!r})"

    def send(self, refreshes: Sequence[Refresh]) -> dict[str, str]:
        """One message per refresh, as it is (no coalescing); the failures by app."""
        if not refreshes:
            return {}
        results = self.publisher.publish(self.topic, [Message(r.to_json(), r.attributes()) for r in refreshes],
                                         timeout=self.timeout)
        failures = {r.app: str(failed) for r, failed in zip(refreshes, results, strict=True) if failed is not None}
        if failures:
            log.warning("refresh publish failed", topic=self.topic, apps=sorted(failures))
        return failures


def topic_path(topic: str) -> str:
    """`projects/P/topics/T` as given; a bare `T` completed with `$GOOGLE_CLOUD_PROJECT`."""
    topic = topic.strip()
    parts = topic.split("/")
    if len(parts) == 4 and parts[0] == "projects" and parts[2] == "topics" and all(parts):
        return topic
    project = os.environ.get("GOOGLE_CLOUD_PROJECT", "")
    if "/" not in topic and topic and project:
        return f"projects/{project}/topics/{topic}"
    raise ConfigError(f"TIDECD_REFRESH_TOPIC {topic!r}: expected projects/PROJECT/topics/TOPIC (or a topic "
                      "name with GOOGLE_CLOUD_PROJECT set)")


def preview_job(cloud_event_data: Mapping[str, Any]) -> dict[str, Any] | None:
    """The pull-request preview job inside a Pub/Sub CloudEvent (attribute kind=preview, published by
    `tidecd.usecases.preview`), or None for a refresh: here, so a reconcile call tells them apart without
    importing the preview use case."""
    message = cloud_event_data.get("message") if isinstance(cloud_event_data, Mapping) else None
    attributes = message.get("attributes") if isinstance(message, Mapping) else None
    if not isinstance(message, Mapping) or not isinstance(attributes, Mapping) or attributes.get("kind") != "preview":
        return None
    try:
        job = json.loads(base64.b64decode(str(message.get("data") or "")))
    except (ValueError, RecursionError):  # RecursionError: JSON nested deeper than the parser goes
        return None
    keys = ("app", "owner", "repo", "number", "head_sha")
    return job if isinstance(job, dict) and all(k in job for k in keys) else None


def decode_refresh(cloud_event_data: Mapping[str, Any]) -> Refresh:
    """The Refresh inside a Pub/Sub CloudEvent's data (`{"message": {"data": <base64 JSON>, ...}}`)."""
    message = cloud_event_data.get("message") if isinstance(cloud_event_data, Mapping) else None
    if not isinstance(message, Mapping):
        raise BadRefreshMessage("refresh message: no `message` object in the event data")
    attributes = message.get("attributes") or {}
    try:
        raw = base64.b64decode(str(message.get("data") or ""), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadRefreshMessage("refresh message: message.data is not base64") from exc
    return decode_message(raw, attributes if isinstance(attributes, Mapping) else {})


def decode_message(data: bytes, attributes: Mapping[str, str]) -> Refresh:
    """A Refresh from a message's raw bytes; an empty body falls back to the `app` attribute."""
    doc: Any = {}
    if data:
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
            raise BadRefreshMessage("refresh message: data is not JSON") from exc
        if not isinstance(doc, dict):
            raise BadRefreshMessage("refresh message: data is not a JSON object")
    app = doc.get("app") or attributes.get("app")
    if not isinstance(app, str) or not app:
        raise BadRefreshMessage("refresh message: no app name (data.app or attribute app)")
    reason, revision, token = doc.get("reason", ""), doc.get("revision", ""), doc.get("token", "")
    if not isinstance(reason, str) or not isinstance(revision, str) or not isinstance(token, str):
        raise BadRefreshMessage(f"refresh message for {app!r}: reason, revision and token must be strings")
    not_before = doc.get("notBefore", attributes.get("notBefore", 0))
    try:
        due = float(not_before) if not isinstance(not_before, bool) else None
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer past a float's range
        due = None
    if due is None or due != due or due in (float("inf"), float("-inf")):  # NaN, or never (ever) due
        raise BadRefreshMessage(f"refresh message for {app!r}: notBefore must be a number of unix seconds")
    resolved_at, config_at = doc.get("resolvedAt", 0), doc.get("configAt", 0)
    for name, when in (("resolvedAt", resolved_at), ("configAt", config_at)):
        if isinstance(when, bool) or not isinstance(when, int | float) or when != when:
            raise BadRefreshMessage(f"refresh message for {app!r}: {name} must be a number of unix seconds")
    config = doc.get("config", {})
    if not isinstance(config, dict) or len(config) > MAX_CONFIG_SOURCES or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= 2048 and COMMIT.fullmatch(v)
            for k, v in config.items()):
        raise BadRefreshMessage(f"refresh message for {app!r}: config must map at most {MAX_CONFIG_SOURCES} "
                                "config sources to their commits (40 hex digits)")
    return Refresh(app=app, reason=reason, revision=revision, not_before=due, token=token,
                   resolved_at=float(resolved_at), config=tuple(sorted(config.items())), config_at=float(config_at))


# --- one step, the same in every mode --------------------------------------------------------------------


def check_due(refresh: Refresh, *, now: Callable[[], float] = time.time) -> None:
    """Raise NotYet for a continuation that arrived before its time (the cloud entry point's first check)."""
    early = refresh.not_before - now()
    if refresh.continuation and early > EARLY_SLACK:
        raise NotYet(f"{refresh.app}: continuation due in {early:.1f}s", delay=early)


def run_step(runtime: Runtime, refresh: Refresh, dispatcher: Dispatcher) -> Outcome:
    """One reconcile step for `refresh`, then what it leads to: a refresh's coalescing record is finished
    (one more refresh handed over when it was marked for another revision) and the next step is scheduled
    when the outcome asks for one. A skipped step (the app's lease is held) changes nothing: the caller
    retries it (Pub/Sub redelivers, the local scheduler runs it again)."""
    started = time.monotonic()
    now = time.time()
    runtime.config_heads.update(refresh.config_heads(now))  # before anything loads the config
    head = refresh.head(now) or confirmed_head(runtime, refresh, now) or followed_head(runtime, refresh)
    outcome = reconcile_step(runtime, refresh.app, reason=refresh.reason, budget=runtime.settings.step_budget,
                             head=head)
    log.info("step", app=refresh.app, reason=refresh.reason, continuation=refresh.continuation,
             skipped=outcome.skipped, seconds=round(time.monotonic() - started, 3),
             continue_after=outcome.continue_after)
    if outcome.skipped:
        return outcome
    _continue(runtime.store, dispatcher, refresh, outcome.continue_after)
    if outcome.refresh:  # apps this step created or changed (an app of apps' children)
        failures = dispatcher.dispatch([Refresh(app, f"changed by {refresh.app}") for app in outcome.refresh])
        for app, message in sorted(failures.items()):
            log.warning("child refresh not handed over (the poll will)", app=app, error=message)
    if not refresh.continuation:
        reconciled = outcome.state.revision if outcome.state is not None else ""
        if pending.finish(runtime.store, refresh.app, reconciled):
            again = replace(refresh, reason=f"again after: {refresh.reason}"[:200], revision="", resolved_at=0.0,
                            config=(), config_at=0.0)
            failures = dispatcher_publish(dispatcher, again)
            if failures:
                pending.release(runtime.store, refresh.app)
    return outcome


def reconcile_step(runtime: Runtime, name: str, *, reason: str = "", budget: float = 10.0, automate: bool = True,
                   head: str = "") -> Outcome:
    """One reconcile step (`tidecd.step.reconcile`), then who hears of it: the step knows neither the
    notifier nor the image updater, so every caller that runs one (this dispatcher, the api, the dashboard)
    comes here. The image updater records which override an ended operation deployed (a rollback later
    restores it); `notify.deliver` delivers what the new state makes due, and a failed delivery due for a
    retry shortens `continue_after`."""
    # lazy: cold start (the step, notify and the image updater: a webhook or poll call runs no step)
    from tidecd.images import state as images_state
    from tidecd.notify import deliver
    from tidecd.step.reconcile import reconcile

    outcome = reconcile(runtime, name, reason=reason, budget=budget, automate=automate, head=head)
    if outcome.deployed:
        images_state.on_deployed(runtime.store, name, outcome.deployed)
    after = deliver.after_step(runtime, name, outcome.state, outcome.continue_after, skipped=outcome.skipped)
    return outcome if after == outcome.continue_after else replace(outcome, continue_after=after)


def confirmed_head(runtime: Runtime, refresh: Refresh, now: float) -> str:
    """The poll's head of a refresh past `HEAD_FRESH_SECONDS` (up to `HEAD_CONFIRMED_SECONDS`) when the
    repository's last recorded heads still resolve the app's targetRevision to it, else "": an ls-remote
    now would tell the step only what the poll already did (one store read instead, and a no-op tick of
    1,000 apps costs one ls-remote per repository however long its fan-out takes)."""
    age = now - refresh.resolved_at
    if refresh.token or not refresh.resolved_at or len(refresh.revision) != 40 or not 0 <= age <= \
            HEAD_CONFIRMED_SECONDS:
        return ""
    # lazy: cold start (git and chart sources: a webhook or poll call that only publishes refreshes never loads them)
    from tidecd import source as git
    from tidecd.source import charts

    try:
        app = runtime.app(refresh.app)
        if app.sources or charts.kind_of(app.source) != charts.GIT:
            return ""
        refs = git.RefCache(runtime.store).load(app.source.repo_url)
        seen = git.resolve_revision(refs, app.source.target_revision, app.source.repo_url) if refs else ""
    except (TidecdError, ValueError, AttributeError):
        return ""  # the step resolves it itself, and reports what is wrong
    return refresh.revision if seen == refresh.revision else ""


def followed_head(runtime: Runtime, refresh: Refresh) -> str:
    """The commit a health follow-up renders: the one its sync just deployed, with no ls-remote. A
    continuation after a Succeeded operation whose app still reads Progressing only reads health again
    (half the steps of a cold start); a newer commit comes through its own refresh (webhook or poll),
    which resolves it. Any other continuation resolves as usual ("")."""
    if not refresh.continuation:
        return ""
    # lazy: cold start (chart sources, app state: a webhook or poll call that only publishes refreshes needs neither)
    from tidecd.source import charts
    from tidecd.state import app as app_state
    from tidecd.state.app import OperationPhase

    try:
        state = app_state.load(runtime.store, refresh.app)[0]
        op = state.operation
        if (op is None or op.phase is not OperationPhase.SUCCEEDED or state.health is not HealthStatus.PROGRESSING
                or len(state.revision) != 40):
            return ""
        app = runtime.app(refresh.app)
        if app.sources or charts.kind_of(app.source) != charts.GIT:
            return ""
    except (TidecdError, ValueError, AttributeError):
        return ""  # the step resolves it itself, and reports what is wrong
    return state.revision


def dispatcher_publish(dispatcher: Dispatcher, refresh: Refresh) -> dict[str, str]:
    """Hand `refresh` over without claiming (its caller holds the app's `pending/` record)."""
    if isinstance(dispatcher, Handover):
        return dispatcher.send([refresh])
    return dispatcher.dispatch([refresh])


def _continue(store: ObjectStore, dispatcher: Dispatcher, refresh: Refresh, after: float | None) -> None:
    """Schedule the next step when asked for, keeping one chain of continuations per app."""
    recorded = pending.continuation(store, refresh.app)
    if after is None:
        if recorded is not None:
            pending.clear_continuation(store, refresh.app)
        return
    now = time.time()
    if refresh.continuation:
        if recorded is not None and recorded.token != refresh.token:
            log.info("continuation superseded", app=refresh.app, token=refresh.token)
            return  # a newer chain exists: this one ends here
    elif recorded is not None and now <= recorded.due <= now + after + 1.0:
        return  # the live chain's next step comes soon enough
    dispatcher.schedule(refresh.app, after, f"continue: {refresh.reason}"[:200] if not refresh.continuation
                        else refresh.reason)


def dispatcher_for(runtime: Runtime) -> Dispatcher:
    """Pub/Sub when `TIDECD_REFRESH_TOPIC` is set, else the local scheduler sharing this runtime's settings
    and store."""
    if runtime.settings.refresh_topic:
        return PubSubDispatcher(runtime.settings.refresh_topic, store=runtime.store)
    settings, store = runtime.settings, runtime.store
    return DirectDispatcher(lambda: Runtime(settings=settings, store=store), store=store)


class ManualDispatcher:
    """Hands nothing over: its caller runs the steps itself (the local CLI, which may wait; tests). It
    records what it was asked for."""

    def __init__(self) -> None:
        self.refreshes: list[Refresh] = []
        self.scheduled: list[tuple[str, float, str]] = []

    def dispatch(self, refreshes: Sequence[Refresh]) -> dict[str, str]:
        self.refreshes.extend(refreshes)
        return {}

    def schedule(self, app: str, delay: float, reason: str) -> None:
        self.scheduled.append((app, delay, reason))
