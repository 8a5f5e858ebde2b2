"""Argo CD Notifications' controller loop for one Application, as notifications-engine v0.5 runs it.

1. **Destinations** (`destinations`): the global `subscriptions` of argocd-notifications-cm whose selector
   matches the app's labels, then the app's annotations `notifications.argoproj.io/subscribe.TRIGGER.SERVICE`
   (`subscribe.SERVICE` takes `defaultTriggers.SERVICE`, else `defaultTriggers`) and
   `notifications.argoproj.io/subscriptions` (YAML), de-duplicated per trigger.
2. **Conditions** (`evaluate`): each trigger's conditions in expr, one batch through the `gotemplate` helper;
   a condition that fails to evaluate is not triggered (Argo CD logs it), and `oncePer` is evaluated only for
   a triggered one, its value printed with Go's `%v`.
3. **State** (`Notified`): Argo CD's `notified.notifications.argoproj.io` map, kept in tidecd's store instead of
   an annotation: the key `[ONCEPER:]TRIGGER:[i].SHA1(when):SERVICE:RECIPIENT` → unix time; a condition that
   is no longer triggered forgets its key (not a oncePer one), so it fires again the next time it is; at
   most 100 keys (the oldest go).
4. **Messages** (`render`): the templates a condition sends, merged in order, every string rendered with Go's
   text/template and Sprig (one batch), seeing `.app`, `.context` (with `notificationType`), `.secrets`,
   `.appProject`, `.serviceType`, `.recipient` and the `time`, `strings` and `repo` helpers.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from tidecd.config.appset.generators import selector_matches
from tidecd.config.appset.gotemplate import TemplateError
from tidecd.config.appset.gotemplate import go as helper
from tidecd.config.notifications import NotificationsConfig

ANNOTATION_PREFIX = "notifications.argoproj.io/subscribe."
ANNOTATION_SUBSCRIPTIONS = "notifications.argoproj.io/subscriptions"
HISTORY_MAX = 100  # notifications-engine's notifiedHistoryMaxSize


@dataclass(frozen=True)
class Destination:
    service: str  # a service name of argocd-notifications-cm
    recipient: str


@dataclass(frozen=True)
class Send:
    """A notification due: the trigger, the state key that records it, its templates and destination."""

    trigger: str
    key: str
    templates: tuple[str, ...]
    destination: Destination


Destinations = dict[str, list[Destination]]


def _add(found: Destinations, triggers: Iterable[str], service: str, recipients: Iterable[str]) -> None:
    for trigger in triggers:
        for recipient in recipients:
            found.setdefault(trigger, []).append(Destination(service, recipient))


def _recipients(value: str) -> list[str]:
    return [r.strip() for r in value.split(";") if r.strip()]


def destinations(config: NotificationsConfig, labels: Mapping[str, str], annotations: Mapping[str, str],
                 errors: list[str], project_annotations: Mapping[str, str] | None = None) -> Destinations:
    """Who is subscribed to which trigger (notifications-engine's getDestinations, then Argo CD's
    alterDestinations: the AppProject's subscription annotations), de-duplicated."""
    found: Destinations = {}
    for sub in config.subscriptions:
        if not selector_matches(sub.selector, labels):
            continue
        for trigger in sub.triggers or config.default_triggers:
            for recipient in sub.recipients:
                service, _, to = recipient.partition(":")
                _add(found, (trigger,), service, (to,))
    _annotated(config, annotations, found, errors)
    _annotated(config, project_annotations or {}, found, errors)
    return {t: list(dict.fromkeys(d)) for t, d in found.items()}


def _annotated(config: NotificationsConfig, annotations: Mapping[str, str], found: Destinations,
               errors: list[str]) -> None:
    for name, value in sorted(annotations.items()):
        if name.startswith(ANNOTATION_PREFIX):
            trigger, dot, service = name[len(ANNOTATION_PREFIX):].partition(".")
            if not dot:
                trigger, service = "", trigger
            recipients = _recipients(value) if value else [""]
            triggers = [trigger] if trigger else list(config.service_default_triggers.get(
                service, config.default_triggers))
            _add(found, triggers, service, recipients)
        elif name == ANNOTATION_SUBSCRIPTIONS:
            _yaml_subscriptions(config, value, found, errors)


def _yaml_subscriptions(config: NotificationsConfig, value: str, found: Destinations, errors: list[str]) -> None:
    try:
        doc = yaml.safe_load(value) if value else None
    except yaml.YAMLError:
        errors.append(f"annotation {ANNOTATION_SUBSCRIPTIONS}: not YAML")
        return
    if not isinstance(doc, list):
        errors.append(f"annotation {ANNOTATION_SUBSCRIPTIONS}: expected a list of {{trigger, destinations}}")
        return
    for item in doc:
        if not isinstance(item, dict):
            continue
        triggers = [str(t) for t in item.get("trigger") or []]
        for dest in item.get("destinations") or []:
            if isinstance(dest, dict):
                service = str(dest.get("service", ""))
                _add(found, triggers or list(config.service_default_triggers.get(service, config.default_triggers)),
                     service, [str(r) for r in dest.get("recipients") or []])


def condition_key(index: int, when: str) -> str:
    """`[i].` and the unpadded URL-safe base64 of SHA-1(when): triggers.service's ConditionResult.Key."""
    digest = hashlib.sha1(when.encode(), usedforsecurity=False).digest()
    return f"[{index}].{base64.urlsafe_b64encode(digest).decode().rstrip('=')}"


def state_key(trigger: str, key: str, once_per: str, dest: Destination) -> str:
    base = f"{trigger}:{key}:{dest.service}:{dest.recipient}"
    return f"{once_per}:{base}" if once_per else base


@dataclass(frozen=True)
class Result:
    """One condition's outcome (notifications-engine's ConditionResult)."""

    trigger: str
    key: str
    templates: tuple[str, ...]
    triggered: bool
    once_per: str = ""


def evaluate(config: NotificationsConfig, triggers: Sequence[str], env: Mapping[str, Any],
             errors: list[str]) -> list[Result]:
    """Every condition of `triggers` in one helper batch; an unknown trigger or a failed condition is an error
    (and not triggered), as Argo CD logs it. Raises TemplateError when the helper cannot run."""
    items: list[dict[str, Any]] = []
    where: list[tuple[str, int]] = []
    for trigger in triggers:
        if trigger not in config.triggers:
            errors.append(f"trigger {trigger!r} is not configured in argocd-notifications-cm")
            continue
        for i, condition in enumerate(config.triggers[trigger]):
            items.append({"expr": condition.when, "kind": "bool", "params": 0})
            items.append({"expr": condition.once_per or "''", "kind": "string", "params": 0})
            where.append((trigger, i))
    if not items:
        return []
    answers = helper.run({"mode": "expr", "params": [dict(env)], "items": items, "maxOutput": 64 * 1024})
    out = []
    for n, (trigger, i) in enumerate(where):
        condition = config.triggers[trigger][i]
        when, once = answers[2 * n], answers[2 * n + 1]
        if isinstance(when, TemplateError):
            errors.append(f"trigger {trigger!r} condition [{i}]: {when}")
        triggered = when == "true"
        once_per = ""
        if triggered and condition.once_per:
            if isinstance(once, TemplateError):
                errors.append(f"trigger {trigger!r} condition [{i}] oncePer: {once}")
            else:
                once_per = once
        out.append(Result(trigger, condition_key(i, condition.when), condition.send, triggered, once_per))
    return out


class Notified:
    """The notified state: state key → unix seconds (notifications-engine's NotificationsState)."""

    def __init__(self, items: Mapping[str, Any] | None = None) -> None:
        self.items: dict[str, int] = {str(k): int(v) for k, v in (items or {}).items() if isinstance(v, int | float)}

    def set(self, result: Result, dest: Destination, notified: bool, now: int) -> bool:
        """SetAlreadyNotified: whether the state changed (True for a notification to send)."""
        key = state_key(result.trigger, result.key, result.once_per, dest)
        if (key in self.items) == notified:
            return False
        if notified:
            self.items[key] = now
        elif result.once_per:
            return False
        else:
            del self.items[key]
        return True

    def persisted(self) -> dict[str, int]:
        keep = sorted(self.items, key=lambda k: self.items[k])[-HISTORY_MAX:]
        return {k: self.items[k] for k in sorted(keep)}


def due(results: Sequence[Result], found: Destinations, notified: Notified, now: int) -> list[Send]:
    """The notifications to send now, updating `notified` (the controller's processResourceWithAPI)."""
    out = []
    for result in results:
        for dest in found.get(result.trigger, []):
            if notified.set(result, dest, result.triggered, now) and result.triggered:
                out.append(Send(result.trigger, state_key(result.trigger, result.key, result.once_per, dest),
                                result.templates, dest))
    return out


def merged(config: NotificationsConfig, templates: Sequence[str]) -> dict[str, Any]:
    """The templates a condition sends, in order, later fields over earlier ones (FormatNotification)."""
    out: dict[str, Any] = {}
    for name in templates:
        for field, value in (config.templates.get(name) or {}).items():
            if isinstance(value, Mapping) and isinstance(out.get(field), dict):
                out[field] = {**out[field], **value}
            else:
                out[field] = value
    if isinstance(out.get("github"), dict):  # the GitHub service's defaults (notifications-engine)
        out["github"] = {"repoURLPath": "{{.app.spec.source.repoURL}}",
                         "revisionPath": "{{.app.status.operationState.syncResult.revision}}", **out["github"]}
    return out


COMMITS = "__tidecdCommits"  # the helper's parameter behind repo.GetCommitMetadata (never a variable itself)


def revisions(app: Mapping[str, Any]) -> list[str]:
    """The commits an app object names (its sync status, its operation's result), for GetCommitMetadata."""
    def part(parent: Mapping[str, Any], name: str) -> Mapping[str, Any]:
        found = parent.get(name)
        return found if isinstance(found, Mapping) else {}

    status = part(app, "status")
    sync, result = part(status, "sync"), part(part(status, "operationState"), "syncResult")
    found = [sync.get("revision"), *(sync.get("revisions") or []), result.get("revision"),
             *(result.get("revisions") or [])]
    return list(dict.fromkeys(str(r) for r in found if r))


def variables(app: Mapping[str, Any], context: Mapping[str, str], secrets: Mapping[str, str],
              dest: Destination | None = None, project: Mapping[str, Any] | None = None,
              commits: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, Any]:
    """What conditions (dest None) and templates see, as Argo CD's initGetVars and api.Send build it;
    `commits` (sha → message, author, date) answer `repo.GetCommitMetadata`."""
    out: dict[str, Any] = {"app": app, "context": {"notificationType": dest.service if dest else "", **context},
                           "secrets": dict(secrets), "appProject": dict(project or {}),
                           COMMITS: {k: dict(v) for k, v in (commits or {}).items()}}
    if dest is not None:
        out |= {"serviceType": dest.service, "recipient": dest.recipient}
    return out


def _leaves(value: Any, path: tuple[Any, ...], out: list[tuple[tuple[Any, ...], str]]) -> None:
    if isinstance(value, str):
        out.append((path, value))
    elif isinstance(value, Mapping):
        for k, v in value.items():
            _leaves(v, (*path, k), out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _leaves(v, (*path, i), out)


def _placed(value: Any, path: tuple[Any, ...], text: str) -> None:
    for part in path[:-1]:
        value = value[part]
    value[path[-1]] = text


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def render(messages: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> list[dict[str, Any] | TemplateError]:
    """Each (merged template, variables) with every string rendered, one helper batch for all; a message
    whose template fails is that TemplateError. Raises TemplateError when the helper cannot run."""
    items: list[dict[str, Any]] = []
    spots: list[list[tuple[tuple[Any, ...], int]]] = []
    for n, (template, _) in enumerate(messages):
        leaves: list[tuple[tuple[Any, ...], str]] = []
        _leaves(template, (), leaves)
        spots.append([])
        for path, text in leaves:
            spots[-1].append((path, len(items)))
            items.append({"template": text, "params": n})
    answers = helper.run({"mode": "notify", "params": [dict(v) for _, v in messages], "items": items}) if items else []
    out: list[dict[str, Any] | TemplateError] = []
    for (template, _), places in zip(messages, spots, strict=True):
        rendered = _copy(template)
        failed = next(((path, answers[i]) for path, i in places if isinstance(answers[i], TemplateError)), None)
        if failed is not None:
            out.append(TemplateError(f"{'.'.join(str(p) for p in failed[0])}: {failed[1]}"))
            continue
        for path, i in places:
            _placed(rendered, path, str(answers[i]))
        out.append(rendered)
    return out
