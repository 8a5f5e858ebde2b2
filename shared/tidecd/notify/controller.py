"""Argo CD Notifications for one app after a step, when the config source holds `argocd-notifications-cm`:
the Argo CD view of the app (`argoapp`), its destinations, conditions and notified state (`argo`), and the
delivery of what is due (`services`). Called by `tidecd.notify.deliver.notify_state` with the app's
notifications record (`notifications/<app>.json`, written by the caller under the app's lease), whose `argo`
part this module owns:

    notified      Argo CD's notified state (state key → unix seconds)
    health        the last health seen, and `health_since`: when it changed (the app's lastTransitionTime)
    digest        what the last evaluation saw: an app, destinations and configuration unchanged since are
                  not evaluated again (no helper process on a quiet step)
    slack_threads the Slack threads of `groupingKey`s (Argo CD keeps them in its controller's memory)
    pending       notifications not delivered yet: the app as it was when they fired (so a retry sends
                  the same message), retried with `deliver.RETRY_DELAYS` backoff, `MAX_ATTEMPTS` times

Argo CD never retries a failed notification of a `oncePer` condition (and re-sends others only when the
condition is evaluated again); tidecd retries both a few times, as its other notifications.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import structlog

from tidecd.clients import github as gh
from tidecd.clients import metrics
from tidecd.clients.notifiers import SendFailed
from tidecd.config.appset.gotemplate import TemplateError
from tidecd.config.model import Application, AppProject
from tidecd.config.notifications import NotificationsConfig, resolve_secrets
from tidecd.notify import argo, argoapp, services
from tidecd.state.app import AppState, OperationPhase

log = structlog.get_logger("tidecd.notify.controller")

MAX_ATTEMPTS = 5
RETRY_DELAYS = (10.0, 30.0, 90.0, 270.0)


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def github_for(fallback: gh.GitHub | None, api_url: str, store: Any) -> Callable[[Mapping[str, Any]], gh.GitHub | None]:
    """The GitHub client of a `service.github`: its GitHub App (appID, installationID, privateKey,
    enterpriseBaseURL) as in Argo CD, else the installation's github Secret."""

    def client(settings: Mapping[str, Any]) -> gh.GitHub | None:
        app_id, installation = str(settings.get("appID") or ""), str(settings.get("installationID") or "")
        if app_id and installation.isdigit() and settings.get("privateKey"):
            url = str(settings.get("enterpriseBaseURL") or "").rstrip("/") or api_url
            auth = gh.GitHubAuth(app_id=app_id, installation_id=int(installation),
                                 private_key=str(settings["privateKey"]), api_url=url)
            return gh.GitHub(gh.PyGithubApi(auth), store)
        return fallback

    return client


def _running_view(app: Application, state: AppState, mine: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The app while its operation ran, when the notifications first see an operation that already ended: a
    step applies a small sync at once, where Argo CD's controller shows it Running for a while, and its
    notification controller sees (and notifies) that."""
    op = state.operation
    if op is None or op.id == mine.get("operation") or op.phase is OperationPhase.RUNNING or op.request.dry_run:
        return []
    running = replace(op, phase=OperationPhase.RUNNING, message="", finished_at="")
    return [argoapp.application(app, replace(state, operation=running),
                                health_since=str(mine.get("health_since", "")))]


def run(config: NotificationsConfig, app: Application, state: AppState, record: dict[str, Any], *,
        secrets: Callable[[], Mapping[str, str]], wire: services.Wire, clock: Callable[[], float],
        deadline: float, project: AppProject | None = None,
        commit: Callable[[str], Mapping[str, str] | None] = lambda _sha: None) -> float | None:
    """Evaluate, deliver, and update `record["argo"]`; returns seconds until a retry is due (None: none)."""
    mine: dict[str, Any] = record.setdefault("argo", {})
    now = clock()
    if mine.get("health") != state.health.value:
        mine["health"], mine["health_since"] = state.health.value, _iso(now)
    obj = argoapp.application(app, state, health_since=str(mine.get("health_since", "")))
    errors: list[str] = []
    found = argo.destinations(config, dict(app.labels), dict(app.annotations), errors,
                              dict(project.annotations) if project else None)
    proj = argoapp.project(project)
    pending: list[dict[str, Any]] = [p for p in mine.get("pending", []) if isinstance(p, dict)]
    steady = {**obj, "status": {k: v for k, v in obj["status"].items() if k != "reconciledAt"}}  # every step's
    seen = json.dumps([steady, {t: [[d.service, d.recipient] for d in ds] for t, ds in sorted(found.items())},
                       repr(config), proj], sort_keys=True, default=str)
    digest = hashlib.sha256(seen.encode()).hexdigest()[:32]
    opened: dict[str, str] | None = None

    def secret_values() -> dict[str, str]:
        nonlocal opened
        opened = dict(secrets()) if opened is None else opened
        return opened

    if found and digest != mine.get("digest"):
        notified = argo.Notified(mine.get("notified"))
        for view in (*_running_view(app, state, mine), obj):
            env = argo.variables(view, config.context, secret_values(), project=proj, commits=_commits(view, commit))
            results = argo.evaluate(config, sorted(found), env, errors)
            for send in argo.due(results, found, notified, int(now)):
                pending.append({"trigger": send.trigger, "key": send.key, "templates": list(send.templates),
                                "service": send.destination.service, "recipient": send.destination.recipient,
                                "app": view, "project": proj, "attempts": 0, "next_at": 0.0})
        mine["notified"] = notified.persisted()
    mine["digest"] = digest
    if state.operation is not None:
        mine["operation"] = state.operation.id
    history: list[dict[str, Any]] = [h for h in record.get("log", []) if isinstance(h, dict)]
    ready = [p for p in pending if float(p.get("next_at", 0.0)) <= now and time.monotonic() < deadline]
    still = [p for p in pending if p not in ready]
    if ready:
        wire.slack_threads = mine.setdefault("slack_threads", {})
        still += _deliver(config, ready, secret_values(), wire, clock, history, errors, commit)
    for error in errors:
        log.warning("notification problem", app=app.name, error=error[:300])
    record["log"] = history[-50:]
    record["argo_errors"] = errors
    mine["pending"] = still
    if not still:
        return None
    return max(0.5, min(float(p.get("next_at", 0.0)) for p in still) - clock())


def _commits(app: Mapping[str, Any], commit: Callable[[str], Mapping[str, str] | None]) -> dict[str, dict[str, str]]:
    """What tidecd recorded of the commits the app names (when it fetched their snapshots), in the shape
    repo.GetCommitMetadata answers: message, author (a name: tidecd keeps no e-mail), date."""
    out = {}
    for sha in argo.revisions(app):
        if (found := commit(sha)) is not None:
            out[sha] = {"message": found.get("message", ""), "author": found.get("author", ""),
                        "date": found.get("time", "")}
    return out


def _deliver(config: NotificationsConfig, ready: list[dict[str, Any]], secrets: Mapping[str, str],
             wire: services.Wire, clock: Callable[[], float], history: list[dict[str, Any]],
             errors: list[str], commit: Callable[[str], Mapping[str, str] | None]) -> list[dict[str, Any]]:
    """Render every ready notification in one batch, then send each; the ones to retry are returned."""
    messages = []
    for item in ready:
        dest = argo.Destination(str(item.get("service")), str(item.get("recipient", "")))
        messages.append((argo.merged(config, [str(t) for t in item.get("templates", [])]),
                         argo.variables(item.get("app") or {}, config.context, secrets, dest, item.get("project"),
                                        _commits(item.get("app") or {}, commit))))
    try:
        rendered = argo.render(messages)
    except TemplateError as exc:
        rendered = [exc] * len(messages)
    again: list[dict[str, Any]] = []
    for item, message in zip(ready, rendered, strict=True):
        dest = argo.Destination(str(item.get("service")), str(item.get("recipient", "")))
        attempts = int(item.get("attempts", 0)) + 1
        entry: dict[str, Any] = {"id": hashlib.sha256(str(item.get("key")).encode()).hexdigest()[:24],
                                 "trigger": item.get("trigger"), "service": dest.service,
                                 "recipient": dest.recipient, "attempts": attempts, "at": _iso(clock())}
        retry = False
        try:
            if isinstance(message, TemplateError):
                raise message
            service = config.services.get(dest.service)
            if service is None:
                raise SendFailed(f"notification service {dest.service!r} is not configured "
                                 f"(no service.{dest.service} in argocd-notifications-cm)")
            missing: list[str] = []
            settings = resolve_secrets(service.settings, secrets, missing.append)
            for key in missing:
                errors.append(f"{service.key}: ${key} is not a key of argocd-notifications-secret")
            entry |= {"result": "sent", "detail": services.send(service.type, settings, message, dest, wire)}
        except TemplateError as exc:
            entry |= {"result": "failed", "detail": f"template: {str(exc)[:300]}"}
        except services.BadMessage as exc:
            entry |= {"result": "failed", "detail": str(exc)}
        except SendFailed as exc:
            retry = attempts < MAX_ATTEMPTS
            entry |= {"result": "failed" if retry else "gave up", "detail": str(exc)}
        except Exception as exc:  # noqa: BLE001 - a broken service never stops the others
            retry = attempts < MAX_ATTEMPTS
            entry |= {"result": "failed" if retry else "gave up", "detail": type(exc).__name__}
        if retry:
            again.append(item | {"attempts": attempts,
                                 "next_at": clock() + RETRY_DELAYS[min(attempts, len(RETRY_DELAYS)) - 1]})
        metrics.NOTIFICATIONS.labels(service=dest.service, trigger=str(item.get("trigger")),
                                     result=entry["result"]).inc()
        log.info("notification delivery", trigger=item.get("trigger"), service=dest.service,
                 result=entry["result"], attempts=attempts, detail=entry["detail"])
        history.append(entry)
    return again
