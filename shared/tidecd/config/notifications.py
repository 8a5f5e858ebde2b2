"""`argocd-notifications-cm` and the sealed `argocd-notifications-secret`, read as Argo CD v3.6.1 reads them.

notifications-engine's `api.ParseConfig` reads the ConfigMap's keys:
- `trigger.NAME`: a YAML list of conditions (`when:` an expr condition, `send:` template names, `oncePer:`
  an expr whose value the condition fires once per, `description`);
- `template.NAME`: a YAML message (`message`, and per service `email`, `slack`, `teams`, `googlechat`,
  `pagerdutyv2`, `opsgenie`, `github`, `webhook.<service name>`, `gcppubsub` fields);
- `service.TYPE` or `service.TYPE.NAME`: a service's YAML settings, whose `$key` strings name keys of
  `argocd-notifications-secret` (resolved in memory when a notification is delivered, never here);
- `defaultTriggers` and `defaultTriggers.SERVICE`: the triggers of a subscription that names none;
- `context`: a mapping of strings every template sees as `.context`;
- `subscriptions`: YAML list of `{recipients: [service:recipient], triggers: [...], selector: "k=v"}`.

The secret is read only as a SealedSecret (its values are credentials); its sealed document is kept as it
is, and `tidecd.runtime` opens it in memory. A malformed key is a problem naming the file, the ConfigMap
and the key; the other keys are still read. Conditions and templates are not compiled here: Go's expr and
text/template run in the `gotemplate` helper when a notification is evaluated (`tidecd.notify.argo`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tidecd.config.cmreader import ConfigMapReader

CONFIG_MAP = "argocd-notifications-cm"
SECRET = "argocd-notifications-secret"  # noqa: S105 - a name: read as a SealedSecret only
# the service types tidecd delivers to (notifications-engine's names)
SERVICE_TYPES = ("slack", "teams", "teams-workflows", "googlechat", "email", "pagerdutyv2", "opsgenie", "github",
                 "webhook", "gcppubsub")
# notifications-engine's other service types: a key naming one is a problem, not a silent drop
OTHER_SERVICE_TYPES = ("awssqs", "mattermost", "rocketchat", "alertmanager", "pagerduty",
                       "newrelic", "grafana", "telegram", "webex", "pushover", "nats", "console")


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class Condition:
    """One condition of a trigger (notifications-engine's `triggers.Condition`)."""

    when: str
    send: tuple[str, ...] = ()
    once_per: str = ""
    description: str = ""


@dataclass(frozen=True)
class Service:
    """`service.TYPE[.NAME]`: the name subscriptions use, the type, and its settings as written (a YAML
    mapping whose `$key` strings are resolved against the opened secret at delivery)."""

    name: str
    type: str
    settings: Mapping[str, Any] = field(default_factory=_empty)
    key: str = ""


@dataclass(frozen=True)
class Subscription:
    """One entry of `subscriptions`: `service:recipient` strings, triggers (default: `defaultTriggers`),
    and a label selector over the Application's labels (parsed into matchLabels/matchExpressions)."""

    recipients: tuple[str, ...]
    triggers: tuple[str, ...] = ()
    selector: Mapping[str, Any] = field(default_factory=_empty)


@dataclass(frozen=True)
class NotificationsConfig:
    """What `argocd-notifications-cm` declares; `present` is False when the config source has none."""

    present: bool = False
    triggers: Mapping[str, tuple[Condition, ...]] = field(default_factory=_empty)
    templates: Mapping[str, Any] = field(default_factory=_empty)  # name → its YAML mapping
    services: Mapping[str, Service] = field(default_factory=_empty)
    default_triggers: tuple[str, ...] = ()
    service_default_triggers: Mapping[str, tuple[str, ...]] = field(default_factory=_empty)
    context: Mapping[str, str] = field(default_factory=_empty)
    subscriptions: tuple[Subscription, ...] = ()
    origin: str = ""
    sealed_secret: Mapping[str, Any] | None = None  # SealedSecret/argocd-notifications-secret as written
    secret_origin: str = ""


NO_NOTIFICATIONS = NotificationsConfig()

_SELECTOR_TERM = re.compile(r"^\s*(!?)\s*([A-Za-z0-9._/-]+)\s*(?:(==|=|!=)\s*([A-Za-z0-9._-]*)|\s+(in|notin)\s*"
                            r"\(([^)]*)\))?\s*$")


def parse_selector(text: str) -> dict[str, Any]:
    """A Kubernetes label selector string (`a=b,c!=d,e in (x,y),!f,g`) as matchLabels/matchExpressions;
    raises ValueError naming the term it cannot read."""
    labels: dict[str, str] = {}
    expressions: list[dict[str, Any]] = []
    for term in _split_terms(text):
        found = _SELECTOR_TERM.match(term)
        if not found or (found.group(1) and (found.group(3) or found.group(5))):
            raise ValueError(f"selector {text!r}: cannot read {term.strip()!r}")
        negated, key, op, value, set_op, values = found.groups()
        if op in ("=", "=="):
            labels[key] = value
        elif op == "!=":
            expressions.append({"key": key, "operator": "NotIn", "values": [value]})
        elif set_op:
            expressions.append({"key": key, "operator": "In" if set_op == "in" else "NotIn",
                                "values": [v.strip() for v in values.split(",") if v.strip()]})
        else:
            expressions.append({"key": key, "operator": "DoesNotExist" if negated else "Exists"})
    return {"matchLabels": labels, "matchExpressions": expressions}


def _split_terms(text: str) -> list[str]:
    terms, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return [t for t in terms if t.strip()]


def type_name(value: Any) -> str:
    # lazy: config.schema imports the model, whose ArgoSettings holds this module's NotificationsConfig
    from tidecd.config.schema import type_name as named

    return named(value)


def read(data: Mapping[str, Any], origin: str, problems: list[str]) -> NotificationsConfig:
    """The ConfigMap's `data`, read key by key; every problem names the file and the key."""
    reader = ConfigMapReader(origin, CONFIG_MAP, problems)
    triggers: dict[str, tuple[Condition, ...]] = {}
    templates: dict[str, Any] = {}
    services: dict[str, Service] = {}
    service_defaults: dict[str, tuple[str, ...]] = {}
    defaults: tuple[str, ...] = ()
    context: dict[str, str] = {}
    subscriptions: tuple[Subscription, ...] = ()
    for key, text in sorted(data.items()):
        if not isinstance(text, str):
            reader.error(str(key), f"expected a string, got {type_name(text)}")
            continue
        if key.startswith("trigger."):
            if (conditions := _trigger(reader, key, reader.yaml(key, text))) is not None:
                triggers[key.removeprefix("trigger.")] = conditions
        elif key.startswith("template."):
            if (template := _template(reader, key, reader.yaml(key, text))) is not None:
                templates[key.removeprefix("template.")] = template
        elif key.startswith("service."):
            if (service := _service(reader, key, reader.yaml(key, text))) is not None:
                services[service.name] = service
        elif key == "defaultTriggers" or key.startswith("defaultTriggers."):
            names = reader.strings(key, reader.yaml(key, text), "defaultTriggers")
            if names is not None and key == "defaultTriggers":
                defaults = names
            elif names is not None:
                service_defaults[key.removeprefix("defaultTriggers.")] = names
        elif key == "context":
            context = _context(reader, key, reader.yaml(key, text))
        elif key == "subscriptions":
            subscriptions = _subscriptions(reader, key, reader.yaml(key, text))
        else:
            reader.error(key, "not a key of argocd-notifications-cm (trigger.*, template.*, service.*, "
                              "defaultTriggers, context, subscriptions)")
    for name, conditions in sorted(triggers.items()):
        for i, condition in enumerate(conditions):
            for missing in (t for t in condition.send if t not in templates):
                reader.error(f"trigger.{name}", f"[{i}].send: template {missing!r} is not defined "
                                                f"(no template.{missing})")
    for name in (*defaults, *(n for names in service_defaults.values() for n in names)):
        if name not in triggers:
            reader.error("defaultTriggers", f"trigger {name!r} is not defined (no trigger.{name})")
    return NotificationsConfig(
        present=True, triggers=MappingProxyType(triggers), templates=MappingProxyType(templates),
        services=MappingProxyType(services), default_triggers=defaults,
        service_default_triggers=MappingProxyType(service_defaults), context=MappingProxyType(context),
        subscriptions=subscriptions, origin=origin)


def _trigger(reader: ConfigMapReader, key: str, doc: Any) -> tuple[Condition, ...] | None:
    if doc is None:
        return None
    if not isinstance(doc, list):
        reader.error(key, f"expected a list of conditions (when, send, oncePer), got {type_name(doc)}")
        return None
    out = []
    for i, item in enumerate(doc):
        if not isinstance(item, dict):
            reader.error(key, f"[{i}]: expected a mapping (when, send, oncePer), got {type_name(item)}")
            return None
        unknown = sorted(set(item) - {"when", "send", "oncePer", "description"})
        if unknown:
            reader.error(key, f"[{i}]: unknown field {unknown[0]!r} (expected when, send, oncePer, description)")
        texts = {f: item.get(f, "") for f in ("when", "oncePer", "description")}
        for name, value in texts.items():
            if not isinstance(value, str):
                reader.error(key, f"[{i}].{name}: expected a string, got {type_name(value)}")
                return None
        send = reader.strings(f"{key}[{i}]", item.get("send"), "send")
        if send is None:
            return None
        out.append(Condition(when=texts["when"], send=send, once_per=texts["oncePer"],
                             description=texts["description"]))
    return tuple(out)


def _template(reader: ConfigMapReader, key: str, doc: Any) -> Mapping[str, Any] | None:
    if doc is None:
        return None
    if not isinstance(doc, dict):
        reader.error(key, f"expected a mapping (message, and fields per service), got {type_name(doc)}")
        return None
    if not isinstance(doc.get("message", ""), str):
        reader.error(key, f"message: expected a string, got {type_name(doc['message'])}")
        return None
    return doc


def _service(reader: ConfigMapReader, key: str, doc: Any) -> Service | None:
    parts = key.split(".")
    if len(parts) not in (2, 3) or not all(parts):
        reader.error(key, "invalid service key; expected service.<type> or service.<type>.<name>")
        return None
    kind, name = parts[1], parts[-1]
    if kind in OTHER_SERVICE_TYPES:
        reader.error(key, f"service type {kind!r} is not implemented by tidecd (it delivers to "
                          f"{', '.join(SERVICE_TYPES)})")
        return None
    if kind not in SERVICE_TYPES:
        reader.error(key, f"unknown service type {kind!r}; expected one of {', '.join(SERVICE_TYPES)}")
        return None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        reader.error(key, f"expected a mapping of the service's settings, got {type_name(doc)}")
        return None
    return Service(name=name, type=kind, settings=MappingProxyType(doc), key=key)


def _context(reader: ConfigMapReader, key: str, doc: Any) -> dict[str, str]:
    if doc is None:
        return {}
    if not isinstance(doc, dict) or not all(isinstance(k, str) for k in doc):
        reader.error(key, f"expected a mapping of strings, got {type_name(doc)}")
        return {}
    return {k: "" if v is None else str(v) for k, v in doc.items()}


def _subscriptions(reader: ConfigMapReader, key: str, doc: Any) -> tuple[Subscription, ...]:
    if doc is None:
        return ()
    if not isinstance(doc, list):
        reader.error(key, f"expected a list of {{recipients, triggers, selector}}, got {type_name(doc)}")
        return ()
    out = []
    for i, item in enumerate(doc):
        where = f"{key}[{i}]"
        if not isinstance(item, dict):
            reader.error(where, f"expected a mapping, got {type_name(item)}")
            continue
        recipients = reader.strings(where, item.get("recipients"), "recipients")
        triggers = reader.strings(where, item.get("triggers"), "triggers")
        selector: dict[str, Any] = {}
        if isinstance(item.get("selector"), str):
            try:
                selector = parse_selector(item["selector"])
            except ValueError as exc:
                reader.error(where, str(exc))
                continue
        elif item.get("selector") is not None:
            reader.error(where, f"selector: expected a string such as \"team=web\", got "
                                f"{type_name(item['selector'])}")
            continue
        if recipients is not None and triggers is not None:
            out.append(Subscription(recipients=recipients, triggers=triggers, selector=MappingProxyType(selector)))
    return tuple(out)


def resolve_secrets(settings: Any, secret: Mapping[str, str], missing: Callable[[str], None]) -> Any:
    """The service settings with each `$key` in a string replaced by the secret's value (Argo CD's
    replaceStringSecret); a key the secret lacks stays as written and is reported by name (never a value)."""
    if isinstance(settings, Mapping):
        return {k: resolve_secrets(v, secret, missing) for k, v in settings.items()}
    if isinstance(settings, list):
        return [resolve_secrets(v, secret, missing) for v in settings]
    if not isinstance(settings, str):
        return settings

    def value(found: re.Match[str]) -> str:
        name = found.group(0)[1:]
        if name not in secret:
            missing(name)
            return found.group(0)
        return secret[name]

    return _SECRET_REF.sub(value, settings)


_SECRET_REF = re.compile(r"[$][\w-]+")
