"""Argo CD Notifications' services: a rendered notification and a destination, sent the way
notifications-engine's service of that type sends it, to the API its documentation names.

Each service's settings are `service.TYPE[.NAME]` of argocd-notifications-cm with the `$key` strings of the
sealed argocd-notifications-secret already put in. Every URL can be changed, for tests or a private
endpoint: Slack's `apiURL` and Opsgenie's `apiUrl` as in Argo CD; PagerDuty's `apiURL` is tidecd's own
(Argo CD always posts to events.pagerduty.com). Errors name the service and host, never a key or URL path.

| type | sends |
| --- | --- |
| slack | `chat.postMessage` (token): text, attachments, blocks, username, icon; the channel is the recipient |
| teams | a MessageCard to `recipientUrls[recipient]` (or `teams.template` as is); the answer must be `1` |
| teams-workflows | an Adaptive Card (`adaptiveCard`, or built from the MessageCard fields) to a Power Automate URL |
| googlechat | text, or `cardsV2`/`cards`, to `webhooks[recipient]`; `threadKey` as Argo CD adds it |
| email | SMTP (`host`, `port`, `from`, `username`, `password`, `html`) to the comma-separated recipients |
| pagerdutyv2 | Events API v2 `trigger` with `serviceKeys[recipient]` as routing key |
| opsgenie | Alert API `POST /v2/alerts` with `apiKeys[recipient]`, responder team = recipient |
| github | commit status, deployment (+status), pull request comment on the app's revision |
| webhook | `url` (+ `path`), `method` (GET by default), `headers`, `basicAuth`; body from `webhook.NAME.body` |
| gcppubsub | `message` on `projects/PROJECT/topics/(recipient or topic)`, with `gcppubsub.attributes` |
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

from tidecd.clients import github as gh
from tidecd.clients import notifiers
from tidecd.clients.notifiers import SendFailed
from tidecd.clients.pubsub import Message, Publisher, PublishFailed, PubSubPublisher, publish_one
from tidecd.notify.argo import Destination

SLACK_API = "https://slack.com/api/"
PAGERDUTY_API = "https://events.pagerduty.com"
OPSGENIE_API = "api.opsgenie.com"
COMMENT_TAG = "<!-- argocd-notifications {} -->"


@dataclass
class Wire:
    """How services are reached: the GitHub client for a service's settings, the Pub/Sub publisher."""

    github: Callable[[Mapping[str, Any]], gh.GitHub | None] = lambda _settings: None
    github_api_url: str = gh.DEFAULT_API_URL
    publisher: Publisher = field(default_factory=PubSubPublisher)
    # Slack's threads: recipient → groupingKey → the thread's ts, and "#channels" → recipient → channel id
    # (Argo CD keeps them in the controller's memory; tidecd in the app's notifications record)
    slack_threads: dict[str, Any] = field(default_factory=dict)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _section(notification: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = notification.get(name)
    return value if isinstance(value, Mapping) else {}


class BadMessage(SendFailed):
    """The rendered notification cannot be sent as it is (a field that must be JSON is not): sending it again
    would fail again, so it is not retried."""


def _json_field(service: str, name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise BadMessage(f"{service}: {name} is not JSON after rendering") from None


def _ok(service: str, url: str, answer: notifiers.Answer) -> None:
    if not 200 <= answer.status < 300:
        raise SendFailed(f"{service}: {notifiers.host_of(url)} answered {answer.status}")


def _keyed(service: str, settings: Mapping[str, Any], table: str, recipient: str, what: str) -> str:
    found = settings.get(table)
    value = found.get(recipient) if isinstance(found, Mapping) else None
    if not value:
        raise SendFailed(f"{service}: no {what} configured for recipient {recipient!r} ({table})")
    return str(value)


def slack(settings: Mapping[str, Any], n: Mapping[str, Any], dest: Destination, wire: Wire) -> str:
    token = _text(settings.get("token"))
    if not token:
        raise SendFailed("slack: no token in the service's settings")
    own = _section(n, "slack")
    form: dict[str, str] = {"channel": dest.recipient, "text": _text(n.get("message"))}
    username = _text(own.get("username")) or _text(settings.get("username"))
    if username:
        form["username"] = username
    icon = _text(own.get("icon")) or _text(settings.get("icon"))
    if icon.startswith(":") and icon.endswith(":") and len(icon) > 2:
        form["icon_emoji"] = icon
    elif icon.startswith(("http://", "https://")):
        form["icon_url"] = icon
    for name in ("attachments", "blocks"):
        if text := _text(own.get(name)).strip():
            form[name] = json.dumps(_json_field("slack", name, text))
    if settings.get("disableUnfurl") is True:
        form |= {"unfurl_links": "false", "unfurl_media": "false"}
    return _slack_threaded(_text(settings.get("apiURL")) or SLACK_API, token, form, own, dest.recipient,
                           wire.slack_threads)


def _slack_call(api: str, method: str, token: str, form: Mapping[str, str]) -> dict[str, Any]:
    url = api.rstrip("/") + "/" + method
    answer = notifiers.request("slack", "POST", url, urlencode(form).encode(),
                               {"Content-Type": "application/x-www-form-urlencoded",
                                "Authorization": f"Bearer {token}"})
    _ok("slack", url, answer)
    reply = json.loads(answer.text) if answer.text.strip().startswith("{") else {}
    if not reply.get("ok"):
        raise SendFailed(f"slack: {method} refused: {str(reply.get('error', 'no answer'))[:80]}")
    return dict(reply)


def _slack_threaded(api: str, token: str, form: dict[str, str], own: Mapping[str, Any], recipient: str,
                    threads: dict[str, Any]) -> str:
    """notifications-engine's threadedClient.SendMessage: `groupingKey` keeps a thread per recipient, and
    `deliveryPolicy` Post / PostAndUpdate / Update posts into it and updates its first message."""
    policy = str(own.get("deliveryPolicy") or "Post")
    policy = policy if policy in ("Post", "PostAndUpdate", "Update") else "Post"
    key = _text(own.get("groupingKey"))
    ts = str(threads.get(recipient, {}).get(key, "")) if key else ""
    channels: dict[str, str] = threads.setdefault("#channels", {})
    if ts:
        form["thread_ts"] = ts
    done = []
    if not ts or policy in ("Post", "PostAndUpdate"):
        posted = _slack_call(api, "chat.postMessage", token, form | (
            {"reply_broadcast": "true"} if own.get("notifyBroadcast") is True else {}))
        if key and not ts:
            threads.setdefault(recipient, {})[key] = str(posted.get("ts", ""))
        channels[recipient] = str(posted.get("channel") or recipient)
        done.append(f"posted to {recipient}")
    if ts and policy in ("Update", "PostAndUpdate"):
        _slack_call(api, "chat.update", token, form | {"channel": channels.get(recipient, recipient), "ts": ts,
                                                       "as_user": "true"})
        done.append(f"updated the thread of {key!r}")
    return ", ".join(done)


def teams_message(n: Mapping[str, Any]) -> bytes:
    own = _section(n, "teams")
    if own.get("template"):
        return _text(own["template"]).encode()
    message: dict[str, Any] = {"@type": "MessageCard", "context": "https://schema.org/extensions",
                               "title": _text(own.get("title")), "summary": _text(own.get("summary")),
                               "text": _text(own.get("text")) or _text(n.get("message"))}
    if own.get("themeColor"):
        message["themeColor"] = _text(own["themeColor"])
    sections: list[Any] = []
    if own.get("sections"):
        sections = list(_json_field("teams", "sections", _text(own["sections"])))
    if own.get("facts"):
        sections.append({"facts": _json_field("teams", "facts", _text(own["facts"]))})
    if own.get("potentialAction"):
        message["potentialAction"] = _json_field("teams", "potentialAction", _text(own["potentialAction"]))
    if sections:
        message["sections"] = sections
    return json.dumps(message).encode()


def teams(settings: Mapping[str, Any], n: Mapping[str, Any], dest: Destination, wire: Wire) -> str:
    url = _keyed("teams", settings, "recipientUrls", dest.recipient, "teams webhook")
    answer = notifiers.request("teams", "POST", url, teams_message(n), {"Content-Type": "application/json"})
    if answer.text.strip() != "1":
        raise SendFailed(f"teams: {notifiers.host_of(url)} answered {answer.status}, not the webhook's \"1\"")
    return f"posted to {dest.recipient}"


WORKFLOWS_URL = re.compile(r"(?i)(api\.(powerautomate|powerplatform)\.com|flow\.microsoft\.com|"
                           r"webhook\.office\.com/workflows|/powerautomate/)")
ADAPTIVE = "application/vnd.microsoft.card.adaptive"


def _facts(facts: Any) -> list[dict[str, str]]:
    out = []
    for fact in facts if isinstance(facts, list) else []:
        if isinstance(fact, Mapping) and isinstance(fact.get("name"), str):
            value = fact.get("value", "")
            out.append({"title": fact["name"], "value": value if isinstance(value, str) else _go_text(value)})
    return out


def _go_text(value: Any) -> str:
    """Go's %v of a JSON value, for the few places a service prints one."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def adaptive_card(n: Mapping[str, Any]) -> dict[str, Any]:
    """A MessageCard's fields as the Adaptive Card notifications-engine's teams-workflows builds from them."""
    own = _section(n, "teams-workflows")
    title, text = _text(own.get("title")), _text(own.get("text")) or _text(n.get("message"))
    body: list[dict[str, Any]] = []
    if title:
        body.append({"type": "TextBlock", "text": title, "size": "Large", "weight": "Bolder", "wrap": True,
                     **({"color": _text(own["themeColor"])} if own.get("themeColor") else {})})
    if text:
        body.append({"type": "TextBlock", "text": text, "wrap": True})
    sections = _json_field("teams-workflows", "sections", _text(own["sections"])) if own.get("sections") else []
    groups = [_json_field("teams-workflows", "facts", _text(own["facts"]))] if own.get("facts") else []
    groups += [section.get("facts") for section in sections if isinstance(section, Mapping)]
    body += [{"type": "FactSet", "facts": facts} for facts in map(_facts, groups) if facts]
    card: dict[str, Any] = {"type": "AdaptiveCard", "version": "1.4", "body": body}
    actions = _json_field("teams-workflows", "potentialAction", _text(own["potentialAction"])) \
        if own.get("potentialAction") else []
    opened = []
    for action in actions if isinstance(actions, list) else []:
        targets = action.get("targets") if isinstance(action, Mapping) else None
        uri = targets[0].get("uri") if isinstance(targets, list) and targets and isinstance(targets[0], Mapping) \
            else None
        if action.get("@type") == "OpenUri" and isinstance(uri, str) and uri:
            opened.append({"type": "Action.OpenUrl", **({"title": action["name"]} if isinstance(
                action.get("name"), str) and action["name"] else {}), "url": uri})
    if actions:
        card["actions"] = opened
    return card


def teams_workflows(settings: Mapping[str, Any], n: Mapping[str, Any], dest: Destination, wire: Wire) -> str:
    url = _keyed("teams-workflows", settings, "recipientUrls", dest.recipient, "teams-workflows webhook")
    parts = urlsplit(url)
    local = parts.hostname in ("localhost", "127.0.0.1") or (parts.hostname or "").startswith("127.")
    if (parts.scheme != "https" and not local) or not WORKFLOWS_URL.search(url):
        raise BadMessage(f"teams-workflows: the webhook URL of recipient {dest.recipient!r} is not an https "
                         "Microsoft Teams Workflows (Power Automate) URL")
    own = _section(n, "teams-workflows")
    content = _json_field("teams-workflows", "adaptiveCard", _text(own["adaptiveCard"]).strip()) \
        if own.get("adaptiveCard") else adaptive_card(n)
    message = {"type": "message", "attachments": [{"contentType": ADAPTIVE, "content": content}]}
    answer = notifiers.request("teams-workflows", "POST", url, json.dumps(message).encode(),
                               {"Content-Type": "application/json"})
    _ok("teams-workflows", url, answer)
    return f"posted to {dest.recipient}"


def googlechat(settings: Mapping[str, Any], n: Mapping[str, Any], dest: Destination, wire: Wire) -> str:
    # lazy: cold start (YAML only when a Google Chat card is sent)
    import yaml

    url = _keyed("googlechat", settings, "webhooks", dest.recipient, "Google chat webhook")
    own = _section(n, "googlechat")
    message: dict[str, Any] = {}
    if own.get("cardsV2"):
        cards = yaml.safe_load(_text(own["cardsV2"])) or []
        message["cardsV2"] = [{"cardId": str(uuid.uuid4()), "card": card} for card in cards]
    if own.get("cards"):
        message["cards"] = yaml.safe_load(_text(own["cards"]))
    if not message:
        message["text"] = _text(n.get("message"))
    if thread := _text(own.get("threadKey")):
        url += ("&" if "?" in url else "?") + urlencode({"threadKey": thread,
                                                         "messageReplyOption": "REPLY_MESSAGE_FALLBACK_TO_NEW_THREAD"})
    answer = notifiers.request("googlechat", "POST", url, json.dumps(message).encode(),
                               {"Content-Type": "application/json"})
    reply = json.loads(answer.text) if answer.text.strip().startswith("{") else {}
    if isinstance(reply.get("error"), Mapping):
        error = reply["error"]
        raise SendFailed(f"googlechat: error with message: code={error.get('code')} status={error.get('status')}")
    _ok("googlechat", url, answer)
    return f"posted to {dest.recipient}"


def email(settings: Mapping[str, Any], n: Mapping[str, Any], dest: Destination, wire: Wire) -> str:
    own = _section(n, "email")
    to = [t.strip() for t in dest.recipient.split(",")]
    try:
        port = int(settings.get("port") or 25)
    except (TypeError, ValueError):
        raise SendFailed("email: port is not a number") from None
    notifiers.send_mail(host=_text(settings.get("host")), port=port, sender=_text(settings.get("from")), to=to,
                        subject=_text(own.get("subject")), body=_text(own.get("body")) or _text(n.get("message")),
                        html=settings.get("html") is True, username=_text(settings.get("username")),
                        password=_text(settings.get("password")),
                        insecure_skip_verify=settings.get("insecure_skip_verify") is True)
    return f"mailed {len(to)} recipient(s)"


def pagerduty_event(routing_key: str, n: Mapping[str, Any]) -> dict[str, Any]:
    own = _section(n, "pagerdutyv2")
    payload = {"summary": _text(own.get("summary")), "severity": _text(own.get("severity")),
               "source": _text(own.get("source"))}
    payload |= {k: _text(own[k]) for k in ("component", "group", "class") if own.get(k)}
    event: dict[str, Any] = {"routing_key": routing_key, "event_action": "trigger", "payload": payload,
                             "client": "ArgoCD"}
    if own.get("dedupKey"):
        event["dedup_key"] = _text(own["dedupKey"])
    if own.get("url"):
        event["client_url"] = _text(own["url"])
    return event


def pagerdutyv2(settings: Mapping[str, Any], n: Mapping[str, Any], dest: Destination, wire: Wire) -> str:
    key = _keyed("pagerdutyv2", settings, "serviceKeys", dest.recipient, "API key")
    if not _section(n, "pagerdutyv2"):
        raise SendFailed("pagerdutyv2: no config found for pagerdutyv2 in the template")
    url = (_text(settings.get("apiURL")) or PAGERDUTY_API).rstrip("/") + "/v2/enqueue"
    answer = notifiers.request("pagerdutyv2", "POST", url, json.dumps(pagerduty_event(key, n)).encode(),
                               {"Content-Type": "application/json"})
    _ok("pagerdutyv2", url, answer)
    return "event triggered"


def opsgenie_alert(n: Mapping[str, Any], recipient: str) -> dict[str, Any]:
    own = _section(n, "opsgenie")
    if not _text(own.get("description")):
        raise SendFailed("opsgenie: opsgenie notification description is missing")
    alert: dict[str, Any] = {"message": _text(n.get("message")), "description": _text(own["description"]),
                             "responders": [{"type": "team", "id": recipient}], "source": "Argo CD"}
    alert |= {k: _text(own[k]) for k in ("priority", "alias", "note", "entity", "user") if own.get(k)}
    alert |= {k: [_text(v) for v in own[k]] for k in ("actions", "tags") if own.get(k)}
    if isinstance(own.get("details"), Mapping) and own["details"]:
        alert["details"] = {str(k): _text(v) for k, v in own["details"].items()}
    if isinstance(own.get("visibleTo"), list) and own["visibleTo"]:
        alert["visibleTo"] = [{k: _text(v) for k, v in r.items() if v} for r in own["visibleTo"]
                              if isinstance(r, Mapping)]
    return alert


def opsgenie(settings: Mapping[str, Any], n: Mapping[str, Any], dest: Destination, wire: Wire) -> str:
    key = _keyed("opsgenie", settings, "apiKeys", dest.recipient, "API key")
    base = _text(settings.get("apiUrl")) or OPSGENIE_API
    url = (base if "://" in base else f"https://{base}").rstrip("/") + "/v2/alerts"
    answer = notifiers.request("opsgenie", "POST", url, json.dumps(opsgenie_alert(n, dest.recipient)).encode(),
                               {"Content-Type": "application/json", "Authorization": f"GenieKey {key}"})
    _ok("opsgenie", url, answer)
    return "alert created"


def webhook(settings: Mapping[str, Any], n: Mapping[str, Any], dest: Destination, wire: Wire) -> str:
    url, method, body = _text(settings.get("url")), "GET", _text(n.get("message"))
    own = n.get("webhook", {}).get(dest.service) if isinstance(n.get("webhook"), Mapping) else None
    if isinstance(own, Mapping):
        body = _text(own.get("body"))
        method = _text(own.get("method")) or method
        if own.get("path"):
            url = url.rstrip("/") + "/" + _text(own["path"]).lstrip("/")
    headers = {_text(h.get("name")): _text(h.get("value")) for h in settings.get("headers") or []
               if isinstance(h, Mapping)}
    basic = settings.get("basicAuth")
    auth = (_text(basic.get("username")), _text(basic.get("password"))) if isinstance(basic, Mapping) else None
    answer = notifiers.request(f"webhook {dest.service}", method.upper(), url, body.encode(), headers, auth=auth,
                               verify=settings.get("insecureSkipVerify") is not True)
    _ok(f"webhook {dest.service}", url, answer)
    return f"{method.upper()} answered {answer.status}"


def gcppubsub(settings: Mapping[str, Any], n: Mapping[str, Any], dest: Destination, wire: Wire) -> str:
    topic = dest.recipient or _text(settings.get("topic"))
    project = _text(settings.get("project"))
    if not topic or not project:
        raise SendFailed("gcppubsub: the service needs a project and a topic (its own, or the recipient)")
    path = topic if topic.startswith("projects/") else f"projects/{project}/topics/{topic}"
    attributes = _section(n, "gcppubsub").get("attributes")
    try:
        publish_one(wire.publisher, path, Message(_text(n.get("message")).encode(), {
            str(k): _text(v) for k, v in (attributes.items() if isinstance(attributes, Mapping) else ())}))
    except PublishFailed as exc:
        raise SendFailed(f"gcppubsub: publish to {path} failed: {exc.kind}") from exc
    return f"published to {path}"


def github(settings: Mapping[str, Any], n: Mapping[str, Any], dest: Destination, wire: Wire) -> str:
    own = _section(n, "github")
    client = wire.github(settings)
    if not own:
        raise SendFailed("github: config is empty (no github field in the template)")
    repo = gh.repo_of(_text(own.get("repoURLPath")), wire.github_api_url)
    revision = _text(own.get("revisionPath"))
    if client is None or repo is None or not revision:
        raise SendFailed("github: no GitHub credentials, the repository is not on GitHub, or no revision")
    description = gh.cut(_text(n.get("message")), 140)
    done: list[gh.Delivery] = []
    if isinstance(status := own.get("status"), Mapping):
        done.append(client.status(repo, revision, _text(status.get("state")), _text(status.get("label")),
                                  description, _text(status.get("targetURL"))))
    if isinstance(deployment := own.get("deployment"), Mapping):
        done.append(client.deployment(repo, revision, _text(deployment.get("environment")),
                                      _text(deployment.get("state")), description,
                                      _text(deployment.get("environmentURL")), _text(deployment.get("logURL"))))
    if isinstance(comment := own.get("pullRequestComment"), Mapping):
        tag = _text(comment.get("commentTag"))
        marker = COMMENT_TAG.format(tag) if tag else gh.marker("notification", str(uuid.uuid4()))
        body = gh.cut(_text(comment.get("content")), 65536)
        pulls = client.commit_pulls(repo, revision)
        if pulls is None:
            raise SendFailed("github: the pull requests of the revision could not be listed")
        done += [client.comment(repo, number, marker, body if marker in body else f"{body}\n{marker}")
                 for number in pulls]
    failed = [d for d in done if d.result in ("error", "backoff", "rejected")]
    if failed:
        raise SendFailed(f"github: {failed[0].what}: {failed[0].result}: {failed[0].detail[:120]}")
    return ", ".join(d.what for d in done) or "nothing to do"


SENDERS: Mapping[str, Callable[[Mapping[str, Any], Mapping[str, Any], Destination, Wire], str]] = {
    "slack": slack, "teams": teams, "googlechat": googlechat, "email": email, "pagerdutyv2": pagerdutyv2,
    "opsgenie": opsgenie, "github": github, "webhook": webhook, "gcppubsub": gcppubsub,
    "teams-workflows": teams_workflows}


def send(kind: str, settings: Mapping[str, Any], notification: Mapping[str, Any], dest: Destination,
         wire: Wire) -> str:
    """Deliver one rendered notification; raises SendFailed (a message safe to log and record)."""
    sender = SENDERS.get(kind)
    if sender is None:
        raise SendFailed(f"service type {kind!r} is not implemented by tidecd")
    return sender(settings, notification, dest, wire)
