"""Argo CD Notifications as Argo CD runs them: argocd-notifications-cm read, `when:` conditions in expr and
messages in Go's text/template (the gotemplate helper), each service against a local receiver speaking its
documented API, and Argo CD's notification catalog delivered through real reconcile steps."""

from __future__ import annotations

import dataclasses
import email
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakecluster import FakeCluster, FakeGit, application, fake_runtime
from tests.support.github_standin import GitHubStandIn
from tests.support.notifications_catalog import ARGOCD_URL, CATALOG_TRIGGERS, ONCE_PER, catalog_cm
from tests.support.receivers import OPSGENIE_KEY, PAGERDUTY_KEY, SLACK_TOKEN, Published, Receivers, SmtpReceiver
from tidecd.base.model import HealthStatus, SyncStatus
from tidecd.clients import github as gh
from tidecd.clients.notifiers import SendFailed
from tidecd.clients.secrets import KeyPair, seal_secret
from tidecd.clients.store import MemoryStore, read_json
from tidecd.config import argocd_cm
from tidecd.config.appset.gotemplate import TemplateError
from tidecd.config.appset.gotemplate import go as gotemplate_go
from tidecd.config.argocd_settings import ArgoSettings
from tidecd.config.model import AppProject, Config
from tidecd.config.notifications import NotificationsConfig
from tidecd.notify import argo, argoapp, controller, services
from tidecd.notify import deliver as notify
from tidecd.state.app import AppState, Operation, OperationPhase
from tidecd.triggers import dispatch


def _config(cm: dict[str, Any], problems: list[str] | None = None) -> NotificationsConfig:
    found: list[str] = [] if problems is None else problems
    settings = argocd_cm.read([(cm, "argocd/notifications.yaml")], found)
    assert problems is not None or found == [], found
    return settings.notifications


# --- reading argocd-notifications-cm ----------------------------------------------------------------------


def test_the_catalog_reads_without_a_problem() -> None:
    config = _config(catalog_cm({"service.slack": "token: $slack-token\n"}))
    assert sorted(config.triggers) == sorted(CATALOG_TRIGGERS)
    assert config.triggers["on-deployed"][0].once_per == ONCE_PER
    assert config.services["slack"].settings == {"token": "$slack-token"}
    assert config.context == {"argocdUrl": ARGOCD_URL}


def test_bad_keys_are_problems_naming_file_and_key() -> None:
    problems: list[str] = []
    config = _config({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argocd-notifications-cm"},
                      "data": {"trigger.on-x": "- when: 'true'\n  send: [missing]\n",
                               "trigger.broken": "when: true",
                               "service.mattermost": "apiURL: x",
                               "service.slack.a.b": "token: x",
                               "template.t": "message: [1]",
                               "subscriptions": "- recipients: [slack:x]\n  selector: 'a in b'\n",
                               "defaultTriggers": "[on-nothing]", "unknown": "x"}}, problems)
    text = "\n".join(problems)
    for expected in ("data.trigger.on-x: [0].send: template 'missing' is not defined",
                     "data.trigger.broken: expected a list of conditions",
                     "data.service.mattermost: service type 'mattermost' is not implemented by tidecd",
                     "data.service.slack.a.b: invalid service key",
                     "data.template.t: message: expected a string",
                     "data.subscriptions[0]: selector 'a in b': cannot read",
                     "data.defaultTriggers: trigger 'on-nothing' is not defined",
                     "data.unknown: not a key of argocd-notifications-cm"):
        assert expected in text, text
    assert all(p.startswith("argocd/notifications.yaml: ConfigMap/argocd-notifications-cm: ") for p in problems)
    assert sorted(config.triggers) == ["on-x"]


def test_destinations_from_annotations_defaults_and_global_subscriptions() -> None:
    config = _config({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argocd-notifications-cm"},
                      "data": {"trigger.a": "- when: 'true'\n", "trigger.b": "- when: 'true'\n",
                               "trigger.c": "- when: 'true'\n", "defaultTriggers": "[a]",
                               "defaultTriggers.teams": "[b, c]",
                               "subscriptions": "- recipients: [slack:ops, email:x@y]\n  triggers: [c]\n"
                                                "  selector: team=web,tier notin (db)\n"
                                                "- recipients: [slack:all]\n"}})
    errors: list[str] = []
    found = argo.destinations(config, {"team": "web"}, {
        "notifications.argoproj.io/subscribe.b.slack": "one; two",
        "notifications.argoproj.io/subscribe.teams": "",
        "notifications.argoproj.io/subscriptions": "- trigger: [a]\n  destinations:\n"
                                                   "  - service: webhook\n    recipients: [w]\n"}, errors)
    D = argo.Destination
    assert found == {"a": [D("slack", "all"), D("webhook", "w")], "b": [D("slack", "one"), D("slack", "two"),
                     D("teams", "")], "c": [D("slack", "ops"), D("email", "x@y"), D("teams", "")]}
    assert errors == []
    assert argo.destinations(config, {"team": "db"}, {}, errors) == {"a": [D("slack", "all")]}
    # the AppProject's subscription annotations join the app's (Argo CD's alterDestinations)
    assert argo.destinations(config, {"team": "db"}, {"notifications.argoproj.io/subscribe.a.slack": "x"}, errors,
                             {"notifications.argoproj.io/subscribe.a.slack": "x;proj"}) == {
        "a": [D("slack", "all"), D("slack", "x"), D("slack", "proj")]}


# --- conditions and messages in Go --------------------------------------------------------------------------


def _state(op: Operation | None = None, health: str = "Healthy", sync: str = "Synced") -> AppState:
    return AppState(app="web", sync_status=SyncStatus(sync), health=HealthStatus(health), revision="a" * 40,
                    operation=op, conditions=[{"type": "SyncError", "message": "boom", "at": "2026-01-01T10:00:00Z"}])


def _op(phase: OperationPhase, **kw: Any) -> Operation:
    return Operation(id="op1", revision="a" * 40, phase=phase, started_at="2026-01-01T10:00:00Z",
                     finished_at="2026-01-01T10:00:20Z" if phase is not OperationPhase.RUNNING else "", **kw)


def _evaluate(config: NotificationsConfig, state: AppState, since: str = "2026-01-01T10:00:30Z") -> dict[str, str]:
    obj = argoapp.application(application("web"), state, health_since=since)
    errors: list[str] = []
    results = argo.evaluate(config, sorted(CATALOG_TRIGGERS), argo.variables(obj, config.context, {}), errors)
    return {r.trigger: r.once_per for r in results if r.triggered}


def test_the_catalogs_conditions_in_expr() -> None:
    config = _config(catalog_cm({}))
    assert _evaluate(config, _state()) == {"on-created": "web"}
    assert _evaluate(config, _state(_op(OperationPhase.RUNNING))) == {"on-created": "web", "on-sync-running": "a" * 40}
    done = _evaluate(config, _state(_op(OperationPhase.SUCCEEDED)))
    assert done == {"on-created": "web", "on-sync-succeeded": "a" * 40, "on-deployed": "a" * 40}
    # healthy since before the sync started: deployed; healthy since a time during a long sync, over a
    # minute before it ended: not (the catalog's condition)
    long = dataclasses.replace(_op(OperationPhase.SUCCEEDED), finished_at="2026-01-01T10:05:00Z")
    assert "on-deployed" in _evaluate(config, _state(long), "2025-01-01T00:00:00Z")
    assert "on-deployed" not in _evaluate(config, _state(long), "2026-01-01T10:00:10Z")
    failed = _evaluate(config, _state(_op(OperationPhase.FAILED), health="Degraded", sync="Unknown"))
    assert set(failed) == {"on-created", "on-sync-failed", "on-health-degraded", "on-sync-status-unknown"}
    # no operation: oncePer's `?.` gives nil, printed as Go prints it
    assert _evaluate(config, _state(health="Degraded"))["on-health-degraded"] == "<nil>"


def test_a_broken_condition_is_an_error_and_not_triggered() -> None:
    config = _config({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argocd-notifications-cm"},
                      "data": {"trigger.t": "- when: time.Parse(app.metadata.name)\n",
                               "trigger.u": "- when: 'app.('\n"}})
    errors: list[str] = []
    results = argo.evaluate(config, ["t", "u", "nope"], argo.variables({"metadata": {"name": "x"}}, {}, {}), errors)
    assert [r.triggered for r in results] == [False, False]
    assert "trigger 'nope' is not configured" in errors[0]
    assert any("trigger 't' condition [0]" in e and 'parsing time "x"' in e for e in errors), errors
    assert any("trigger 'u' condition [0]" in e and "cannot compile" in e for e in errors), errors


def test_notified_state_fires_once_per_value_and_again_after_a_false() -> None:
    dest = argo.Destination("slack", "ops")
    notified = argo.Notified()
    plain = argo.Result("t", argo.condition_key(0, "x"), ("m",), True)
    assert argo.condition_key(0, "true") == "[0].X_5TO4MPCKAyY0ipFgr6_IraRNs"  # sha1("true") 5ffe533b..., base64url
    assert argo.due([plain], {"t": [dest]}, notified, 1) != []
    assert argo.due([plain], {"t": [dest]}, notified, 2) == []
    assert argo.due([dataclasses.replace(plain, triggered=False)], {"t": [dest]}, notified, 3) == []
    assert argo.due([plain], {"t": [dest]}, notified, 4) != []  # true again after a false: sent again
    once = dataclasses.replace(plain, once_per="rev1")
    assert [s.key for s in argo.due([once], {"t": [dest]}, notified, 5)] == [f"rev1:t:{plain.key}:slack:ops"]
    assert argo.due([dataclasses.replace(plain, triggered=False)], {"t": [dest]}, notified, 6) == []
    assert argo.due([once], {"t": [dest]}, notified, 7) == []  # once per rev1, whatever happened between


def test_messages_render_with_go_sprig_and_argo_cds_variables() -> None:
    config = _config(catalog_cm({}))
    obj = argoapp.application(application("web"), _state(_op(OperationPhase.SUCCEEDED)), health_since="x")
    dest = argo.Destination("slack", "#ops")
    [slack] = argo.render([(argo.merged(config, ["app-sync-succeeded"]), argo.variables(obj, config.context, {},
                                                                                          dest))])
    assert isinstance(slack, dict)
    assert slack["message"] == (":white_check_mark: Application web has been successfully synced at "
                                "2026-01-01T10:00:20Z.\nSync operation details are available at: "
                                f"{ARGOCD_URL}/applications/web?operation=true .\n")
    [attachment] = json.loads(slack["slack"]["attachments"])
    assert attachment["fields"] == [
        {"title": "Sync Status", "value": "Synced", "short": True},
        {"title": "Repository", "value": ":arrow_heading_up: https://git.example/repo.git", "short": True},
        {"title": "SyncError", "value": "boom", "short": True}]
    project = argoapp.project(AppProject(name="default", description="the team's apps"))
    [described] = argo.render([({"message": "{{ .appProject.spec.description }}"},
                                argo.variables(obj, {}, {}, dest, project))])
    assert described == {"message": "the team's apps"}
    commits = {"a" * 40: {"message": "Fix the web\n\nbody", "author": "Ann", "date": "2026-01-01T09:59:00Z"}}
    [meta, unknown] = argo.render([
        ({"message": "{{ with call .repo.GetCommitMetadata .app.status.sync.revision }}{{ .Author }}: {{ .Message }}"
                     " ({{ .Date.Format \"15:04\" }}){{ end }}"}, argo.variables(obj, {}, {}, dest, commits=commits)),
        ({"message": "{{ (call .repo.GetCommitMetadata \"0123\").Message }}"}, argo.variables(obj, {}, {}, dest))])
    assert meta == {"message": "Ann: Fix the web\n\nbody (09:59)"}
    assert "commit \"0123\" is not one tidecd has fetched" in str(unknown)
    odd = {"message": "{{ .context.notificationType }} {{ .recipient }} {{ call .strings.ToUpper .app.metadata.name }}"
                      " {{ call .repo.FullNameByRepoURL .app.spec.source.repoURL }} {{ .app.nothing }}",
           "bad": "{{ .app.metadata.name | nosuchfunction }}"}
    [fine, broken] = argo.render([({"message": odd["message"]}, argo.variables(obj, {}, {}, dest)),
                                  ({"x": {"y": odd["bad"]}}, argo.variables(obj, {}, {}, dest))])
    assert fine == {"message": "slack #ops WEB /repo <no value>"}  # Go's answer for a one-part path
    assert str(broken).startswith("x.y: ") and "nosuchfunction" in str(broken)


# --- services against local receivers ----------------------------------------------------------------------


def test_slack_posts_text_attachments_and_blocks(receivers: Receivers) -> None:
    settings = {"token": SLACK_TOKEN, "apiURL": receivers.url + "/slack/api/", "username": "argocd",
                "icon": ":rocket:"}
    note = {"message": "hello", "slack": {"attachments": '[{"title": "t", "color": "#18be52"}]',
                                          "blocks": '[{"type": "section", "text": {"type": "mrkdwn", "text": "*b*"}}]'}}
    assert services.send("slack", settings, note, argo.Destination("slack", "#deploys"), services.Wire())
    [posted] = receivers.to("/slack/api/chat.postMessage")
    form = posted.form()
    assert (form["channel"], form["text"], form["username"], form["icon_emoji"]) == ("#deploys", "hello", "argocd",
                                                                                    ":rocket:")
    assert json.loads(form["attachments"])[0]["color"] == "#18be52"
    assert json.loads(form["blocks"])[0]["text"]["text"] == "*b*"
    with pytest.raises(SendFailed, match="invalid_auth") as refused:
        services.send("slack", {**settings, "token": "wrong-secret-token"}, note,
                      argo.Destination("slack", "#x"), services.Wire())
    assert "wrong-secret-token" not in str(refused.value)


def test_slack_threads_by_grouping_key_and_updates_by_delivery_policy(receivers: Receivers) -> None:
    settings = {"token": SLACK_TOKEN, "apiURL": receivers.url + "/slack/api"}
    wire = services.Wire()

    def send(text: str, policy: str, key: str = "web") -> str:
        return services.send("slack", settings, {"message": text, "slack": {
            "groupingKey": key, "deliveryPolicy": policy, "notifyBroadcast": text == "broadcast"}},
            argo.Destination("slack", "#ops"), wire)

    assert send("first", "Post") == "posted to #ops"
    ts = wire.slack_threads["#ops"]["web"]
    assert send("broadcast", "Post") == "posted to #ops"
    assert send("both", "PostAndUpdate") == "posted to #ops, updated the thread of 'web'"
    assert send("only", "Update") == "updated the thread of 'web'"
    assert send("other", "Update", key="") == "posted to #ops"  # no grouping key: nothing to update
    calls = [(r.path.rsplit("/", 1)[1], r.form()) for r in receivers.to("/slack/api/")]
    assert [(m, f["text"], f.get("thread_ts"), f.get("ts"), f.get("reply_broadcast")) for m, f in calls] == [
        ("chat.postMessage", "first", None, None, None),
        ("chat.postMessage", "broadcast", ts, None, "true"),
        ("chat.postMessage", "both", ts, None, None),
        ("chat.update", "both", ts, ts, None),
        ("chat.update", "only", ts, ts, None),
        ("chat.postMessage", "other", None, None, None)]


def test_teams_googlechat_pagerduty_opsgenie_and_webhook(receivers: Receivers) -> None:
    wire = services.Wire()
    teams = {"recipientUrls": {"ops": receivers.url + "/teams/ops"}}
    services.send("teams", teams, {"message": "m", "teams": {"title": "T", "facts": '[{"name": "a", "value": "b"}]',
                                                              "themeColor": "#000080"}},
                  argo.Destination("teams", "ops"), wire)
    card = receivers.to("/teams/ops")[0].json()
    assert card == {"@type": "MessageCard", "context": "https://schema.org/extensions", "title": "T", "summary": "",
                    "text": "m", "themeColor": "#000080", "sections": [{"facts": [{"name": "a", "value": "b"}]}]}
    with pytest.raises(SendFailed, match="no teams webhook configured for recipient 'other'"):
        services.send("teams", teams, {"message": "m"}, argo.Destination("teams", "other"), wire)

    chat = {"webhooks": {"room": receivers.url + "/chat/room?key=secret-key"}}
    services.send("googlechat", chat, {"message": "plain"}, argo.Destination("googlechat", "room"), wire)
    services.send("googlechat", chat, {"message": "m", "googlechat": {
        "cardsV2": "- header:\n    title: Synced\n", "threadKey": "web"}}, argo.Destination("googlechat", "room"), wire)
    plain, card2 = receivers.to("/chat/room")
    assert plain.json() == {"text": "plain"}
    assert card2.json()["cardsV2"][0]["card"] == {"header": {"title": "Synced"}}
    assert card2.query["threadKey"] == ["web"] and card2.query["key"] == ["secret-key"]

    pagerduty = {"serviceKeys": {"svc": PAGERDUTY_KEY}, "apiURL": receivers.url + "/pagerduty"}
    services.send("pagerdutyv2", pagerduty, {"pagerdutyv2": {"summary": "web degraded", "severity": "critical",
                                                             "source": "web", "url": "https://x/web"}},
                  argo.Destination("pagerdutyv2", "svc"), wire)
    assert receivers.to("/pagerduty")[0].json() == {
        "routing_key": PAGERDUTY_KEY, "event_action": "trigger", "client": "ArgoCD", "client_url": "https://x/web",
        "payload": {"summary": "web degraded", "severity": "critical", "source": "web"}}
    with pytest.raises(SendFailed, match="answered 400"):
        services.send("pagerdutyv2", pagerduty, {"pagerdutyv2": {"summary": "s"}}, argo.Destination("p", "svc"), wire)

    opsgenie = {"apiKeys": {"team-a": OPSGENIE_KEY}, "apiUrl": receivers.url + "/opsgenie"}
    services.send("opsgenie", opsgenie, {"message": "web failed", "opsgenie": {
        "description": "d", "priority": "P1", "tags": ["a"], "details": {"k": "v"}}},
        argo.Destination("opsgenie", "team-a"), wire)
    alert = receivers.to("/opsgenie")[0].json()
    assert alert == {"message": "web failed", "description": "d", "priority": "P1", "tags": ["a"],
                     "details": {"k": "v"}, "responders": [{"type": "team", "id": "team-a"}], "source": "Argo CD"}

    hook = {"url": receivers.url + "/hook", "headers": [{"name": "Content-Type", "value": "application/json"}],
            "basicAuth": {"username": "u", "password": "p"}}
    services.send("webhook", hook, {"message": "m", "webhook": {"mine": {"method": "POST", "path": "/apps/web",
                                                                          "body": '{"app": "web"}'}}},
                  argo.Destination("mine", ""), wire)
    services.send("webhook", hook, {"message": "plain body"}, argo.Destination("other", ""), wire)
    posted, got = receivers.to("/hook")
    assert (posted.method, posted.path, posted.json()) == ("POST", "/hook/apps/web", {"app": "web"})
    assert posted.headers["Authorization"] == "Basic dTpw" and got.method == "GET" and got.body == b"plain body"


def test_teams_workflows_posts_an_adaptive_card(receivers: Receivers) -> None:
    settings = {"recipientUrls": {"ops": receivers.url + "/powerautomate/workflows/1/triggers/manual/paths/invoke",
                                  "bad": receivers.url.replace("127.0.0.1", "example.com") + "/x"}}
    note = {"message": "m", "teams-workflows": {
        "title": "Synced", "themeColor": "Good", "facts": '[{"name": "Sync Status", "value": "Synced"}]',
        "potentialAction": '[{"@type": "OpenUri", "name": "Open", "targets": [{"os": "default", "uri": "https://cd/web"}]}]'}}
    services.send("teams-workflows", settings, note, argo.Destination("teams-workflows", "ops"), services.Wire())
    [posted] = receivers.to("/powerautomate/")
    assert posted.json()["attachments"][0]["content"] == {
        "type": "AdaptiveCard", "version": "1.4",
        "body": [{"type": "TextBlock", "text": "Synced", "size": "Large", "weight": "Bolder", "wrap": True,
                  "color": "Good"},
                 {"type": "TextBlock", "text": "m", "wrap": True},
                 {"type": "FactSet", "facts": [{"title": "Sync Status", "value": "Synced"}]}],
        "actions": [{"type": "Action.OpenUrl", "title": "Open", "url": "https://cd/web"}]}
    custom = {"teams-workflows": {"adaptiveCard": '{"type": "AdaptiveCard", "version": "1.5", "body": []}'}}
    services.send("teams-workflows", settings, custom, argo.Destination("teams-workflows", "ops"), services.Wire())
    assert receivers.to("/powerautomate/")[1].json()["attachments"][0]["content"]["version"] == "1.5"
    with pytest.raises(SendFailed, match="not an https Microsoft Teams Workflows"):
        services.send("teams-workflows", settings, note, argo.Destination("teams-workflows", "bad"), services.Wire())


def test_errors_never_carry_a_url_path_or_key() -> None:
    secret_url = "http://127.0.0.1:9/services/T000/B000/secret-path-token"
    for kind, settings in (("teams", {"recipientUrls": {"r": secret_url}}),
                           ("googlechat", {"webhooks": {"r": secret_url}}),
                           ("webhook", {"url": secret_url}),
                           ("opsgenie", {"apiKeys": {"r": "genie-secret"}, "apiUrl": "http://127.0.0.1:9"})):
        with pytest.raises(SendFailed) as failed:
            services.send(kind, settings, {"message": "m", "opsgenie": {"description": "d"}},
                          argo.Destination(kind, "r"), services.Wire())
        assert "secret" not in str(failed.value) and "127.0.0.1:9" in str(failed.value), str(failed.value)


def test_email_over_smtp_with_a_login() -> None:
    smtp = SmtpReceiver("argocd", "mail-password")
    try:
        settings = {"host": "127.0.0.1", "port": smtp.port, "from": "argocd@example.com", "username": "argocd",
                    "password": "mail-password"}
        services.send("email", settings, {"message": "body text", "email": {"subject": "Synced"}},
                      argo.Destination("email", "a@example.com, b@example.com"), services.Wire())
        [mail] = smtp.mails
        parsed = email.message_from_string(mail.data)
        assert mail.recipients == ["a@example.com", "b@example.com"] and mail.sender == "argocd@example.com"
        assert parsed["Subject"] == "Synced" and str(parsed.get_payload()).strip() == "body text"
        with pytest.raises(SendFailed, match="answered 535") as refused:
            services.send("email", {**settings, "password": "wrong-password"}, {"message": "m"},
                          argo.Destination("email", "a@example.com"), services.Wire())
        assert "wrong-password" not in str(refused.value)
    finally:
        smtp.close()


def test_github_status_deployment_and_pull_request_comment(github_standin: GitHubStandIn) -> None:
    client = gh.GitHub(gh.PyGithubApi(gh.GitHubAuth(token="t", api_url=github_standin.base_url)))
    wire = services.Wire(github=lambda _settings: client, github_api_url=github_standin.base_url)
    sha = "b" * 40
    note = {"message": "synced", "github": {
        "repoURLPath": f"{github_standin.base_url}/octo/web.git", "revisionPath": sha,
        "status": {"state": "success", "label": "continuous-delivery/web", "targetURL": "https://cd/web"},
        "deployment": {"state": "success", "environment": "production", "environmentURL": "https://web"},
        "pullRequestComment": {"content": "Deployed", "commentTag": "web"}}}
    services.send("github", {}, note, argo.Destination("github", ""), wire)
    assert github_standin.status_states("octo/web", sha, "continuous-delivery/web") == ["success"]
    [deployment] = github_standin.deployments["octo/web"]
    assert deployment["environment"] == "production"
    [listed] = github_standin.calls_to("repos/list-pull-requests-associated-with-commit")
    assert listed.path.endswith(f"/commits/{sha}/pulls")
    number = 1347  # the pull request of the spec's example answer
    assert github_standin.comment_bodies("octo/web", number) == ["Deployed\n<!-- argocd-notifications web -->"]
    services.send("github", {}, note, argo.Destination("github", ""), wire)  # the tagged comment is updated
    assert github_standin.comment_bodies("octo/web", number) == ["Deployed\n<!-- argocd-notifications web -->"]


def test_a_github_service_with_a_github_app_authenticates_as_the_app(github_standin: GitHubStandIn) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption())
    fallback = gh.GitHub(gh.PyGithubApi(gh.GitHubAuth(token="installation-secret", api_url=github_standin.base_url)))
    clients = controller.github_for(fallback, github_standin.base_url, None)
    assert clients({}) is fallback  # no appID: the installation's github Secret
    wire = services.Wire(github=clients, github_api_url=github_standin.base_url)
    sha = "c" * 40
    note = {"message": "m", "github": {"repoURLPath": f"{github_standin.base_url}/octo/web.git", "revisionPath": sha,
                                       "status": {"state": "pending", "label": "cd/web"}}}
    services.send("github", {"appID": "12345", "installationID": "678", "privateKey": key.decode()}, note,
                  argo.Destination("github", ""), wire)
    [token] = github_standin.calls_to("apps/create-installation-access-token")
    assert token.path.endswith("/app/installations/678/access_tokens") and token.authorization.startswith("Bearer ")
    [status] = github_standin.calls_to("repos/create-commit-status")
    assert status.authorization.lower().startswith("token ") and "installation-secret" not in status.authorization


def test_pubsub_publishes_the_message_with_attributes() -> None:
    published = Published()
    services.send("gcppubsub", {"project": "p", "topic": "argocd"}, {"message": "m", "gcppubsub": {
        "attributes": {"app": "web"}}}, argo.Destination("gcppubsub", ""), services.Wire(publisher=published))
    assert published.messages == [("projects/p/topics/argocd", b"m", {"app": "web"})]


# --- the catalog through real reconcile steps ----------------------------------------------------------------

CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web"}, "data": {"k": "v1"}}
INVALID = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "bad"}, "spec": {"ports": [{"port": 99999}]}}


def _catalog_runtime(receivers: Receivers, smtp: SmtpReceiver, sealing: tuple[KeyPair, Path]) -> tuple[Any, FakeGit,
                                                                                                       MemoryStore]:
    pair, keys = sealing
    cluster, git, store = FakeCluster(), FakeGit(), MemoryStore()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    cm = catalog_cm({"service.slack": f"token: $slack-token\napiURL: {receivers.url}/slack/api/\n",
                     "service.teams": f"recipientUrls:\n  ops: {receivers.url}/teams/$teams-path\n",
                     "service.email": f"host: 127.0.0.1\nport: {smtp.port}\nfrom: argocd@example.com\n",
                     "defaultTriggers": "[on-sync-succeeded, on-sync-failed]"})
    secret = seal_secret({"apiVersion": "v1", "kind": "Secret", "metadata": {
        "name": "argocd-notifications-secret", "namespace": "argocd"},
        "stringData": {"slack-token": SLACK_TOKEN, "teams-path": "hook-secret"}}, pair.cert_pem)
    problems: list[str] = []
    settings = argocd_cm.read([(cm, "argocd-notifications-cm.yaml"), (secret, "secret.yaml")], problems)
    assert problems == []
    app = dataclasses.replace(application("web", automated=True), annotations=(
        ("notifications.argoproj.io/subscribe.on-created.slack", "#deploys"),
        ("notifications.argoproj.io/subscribe.on-sync-running.email", "dev@example.com"),
        ("notifications.argoproj.io/subscribe.on-sync-failed.email", "dev@example.com"),
        ("notifications.argoproj.io/subscribe.on-deployed.teams", "ops"),
        ("notifications.argoproj.io/subscribe.slack", "#deploys")))
    config = Config(applications={"web": app}, argo_settings=ArgoSettings(notifications=settings.notifications))
    runtime = fake_runtime(cluster, store, app, git, config=config)
    runtime.settings.sealing_keys = str(keys)
    return runtime, git, store


def test_the_catalog_sends_argo_cds_messages_through_reconcile_steps(
        receivers: Receivers, sealing: tuple[KeyPair, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    smtp = SmtpReceiver()
    try:
        runtime, git, store = _catalog_runtime(receivers, smtp, sealing)
        git.push([CONFIGMAP])
        for _ in range(4):
            if dispatch.reconcile_step(runtime, "web", budget=1.0).continue_after is None:
                break
        runs: list[str] = []
        real_run = gotemplate_go.run

        def counted(batch: Mapping[str, Any]) -> list[str | TemplateError]:
            runs.append(str(batch["mode"]))
            return real_run(batch)

        monkeypatch.setattr(gotemplate_go, "run", counted)
        dispatch.reconcile_step(runtime, "web", budget=1.0)  # a quiet step sends nothing more
        assert runs == []  # and evaluates nothing: the app as Argo CD shows it did not change
        slack = [(r.form()["channel"], r.form()["text"]) for r in receivers.to("/slack/")]
        assert slack[0] == ("#deploys", "Application web has been created.")
        assert slack[1][1].startswith(":white_check_mark: Application web has been successfully synced at ")
        assert slack[1][1].endswith(f"details are available at: {ARGOCD_URL}/applications/web?operation=true .\n")
        assert len(slack) == 2, slack
        [card] = [r.json() for r in receivers.to("/teams/hook-secret")]
        assert card["title"] == "New version of an application web is up and running."
        assert card["sections"][0]["facts"][0] == {"name": "Sync Status", "value": "Synced"}
        [mail] = smtp.mails  # on-sync-running: the sync ended within the step, and Argo CD would have seen it run
        assert email.message_from_string(mail.data)["Subject"] == "Start syncing application web."

        git.push([CONFIGMAP, INVALID])
        for _ in range(4):
            if dispatch.reconcile_step(runtime, "web", budget=1.0).continue_after is None:
                break
        assert {"expr", "notify"} <= set(runs)  # the next change is evaluated (so the count above counts)
        subjects = [email.message_from_string(m.data)["Subject"] for m in smtp.mails]
        assert subjects == ["Start syncing application web."] * 2 + ["Failed to sync application web."]
        failure = email.message_from_string(smtp.mails[2].data)
        assert "The sync operation of application web has failed at " in str(failure.get_payload())
        # the catalog puts the condition's message into Slack's JSON unescaped: its quotes break the JSON, and
        # the message is refused, as Argo CD refuses it ("failed to unmarshal attachments"), not retried
        assert len(receivers.to("/slack/")) == 2
        record = read_json(store, notify.record_key("web"))
        assert record is not None and record[0]["argo"]["pending"] == []
        results = [(e["trigger"], e["service"], e["result"]) for e in record[0]["log"]
                   if e["service"] != "github-status"]
        assert ("on-sync-failed", "slack", "failed") in results and ("on-sync-failed", "email", "sent") in results
        assert [r for r in results if r[2] != "sent"] == [("on-sync-failed", "slack", "failed")], results
        assert "hook-secret" not in json.dumps(record[0]["log"]) and SLACK_TOKEN not in json.dumps(record[0])
    finally:
        smtp.close()
