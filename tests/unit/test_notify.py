"""Notifications: the pure event function, subscriptions, and delivery through a real reconcile step
(in-memory cluster) to the GitHub stand-in, a local HMAC-checking HTTP receiver and a recording publisher."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.fakecluster import FakeCluster, FakeGit, application, fake_runtime
from tests.support.github_standin import GitHubStandIn
from tests.support.receivers import Published, SignedWebhook
from tidecd.base.model import HealthStatus, SyncStatus
from tidecd.clients import metrics
from tidecd.clients.store import MemoryStore, read_json
from tidecd.notify import deliver as notify
from tidecd.notify import events as notify_events
from tidecd.state.app import AppState, Operation, OperationPhase, OperationRequest
from tidecd.triggers import dispatch

HMAC_KEY = "webhook-hmac-key"


def _state(op: Operation | None = None, health: str = "Healthy", sync: str = "Synced") -> AppState:
    return AppState(app="web", sync_status=SyncStatus(sync), health=HealthStatus(health), revision="a" * 40,
                    operation=op)


def _op(ident: str = "op1", phase: OperationPhase = OperationPhase.RUNNING, **kw: Any) -> Operation:
    return Operation(id=ident, revision="a" * 40, phase=phase, **kw)


def _triggers(events: list[notify_events.Event]) -> list[str]:
    return [e.trigger for e in events]


def test_each_trigger_fires_once_per_operation() -> None:
    seen = notify_events.Seen()
    due, seen = notify_events.events(seen, _state(_op()))
    assert _triggers(due) == ["on-sync-running"]
    assert notify_events.events(seen, _state(_op()))[0] == []  # the next reconcile of the same operation
    due, seen = notify_events.events(seen, _state(_op(phase=OperationPhase.SUCCEEDED)))
    assert _triggers(due) == ["on-sync-succeeded", "on-deployed"]
    assert notify_events.events(seen, _state(_op(phase=OperationPhase.SUCCEEDED)))[0] == []
    due, seen = notify_events.events(seen, _state(_op("op2", OperationPhase.FAILED, message="boom")))
    assert _triggers(due) == ["on-sync-running", "on-sync-failed"]
    assert due[1].message == "boom" and due[1].operation_id == "op2"


def test_events_name_who_started_the_operation() -> None:
    op = _op(phase=OperationPhase.SUCCEEDED, request=OperationRequest(initiated_by="alice@example.com"))
    due = notify_events.events(notify_events.Seen(), _state(op))[0]
    assert {e.initiated_by for e in due} == {"alice@example.com"}
    assert notify.payload(due[0], "")["initiated_by"] == "alice@example.com"
    fields = notify.slack_message(due[0], "")["attachments"][0]["fields"]
    assert {"title": "Initiated by", "value": "alice@example.com", "short": True} in fields


def test_deployed_waits_for_health_and_fires_once_per_revision() -> None:
    done = _op(phase=OperationPhase.SUCCEEDED)
    due, seen = notify_events.events(notify_events.Seen(), _state(done, health="Progressing"))
    assert _triggers(due) == ["on-sync-running", "on-sync-succeeded"]
    due, seen = notify_events.events(seen, _state(done, health="Healthy"))
    assert _triggers(due) == ["on-deployed"]
    again = _op("op2", OperationPhase.SUCCEEDED)  # same revision synced again
    assert _triggers(notify_events.events(seen, _state(again))[0]) == ["on-sync-running", "on-sync-succeeded"]


def test_transitions_fire_on_change_only() -> None:
    due, seen = notify_events.events(notify_events.Seen(), _state(health="Degraded", sync="Unknown"))
    assert _triggers(due) == ["on-health-degraded", "on-sync-status-unknown"]
    assert notify_events.events(seen, _state(health="Degraded", sync="Unknown"))[0] == []
    _, seen = notify_events.events(seen, _state(health="Healthy", sync="Synced"))
    assert _triggers(notify_events.events(seen, _state(health="Degraded"))[0]) == ["on-health-degraded"]


def test_dry_run_operations_notify_nothing() -> None:
    done = _state(_op(phase=OperationPhase.SUCCEEDED, request=OperationRequest(dry_run=True)))
    assert notify_events.events(notify_events.Seen(), done)[0] == []


def test_subscriptions_parse_and_name_bad_annotations() -> None:
    subs, errors = notify.subscriptions({
        "notifications.argoproj.io/subscribe.on-sync-succeeded.slack": "ops; dev",
        "notifications.argoproj.io/subscribe.on-deployed.webhook": "",
        "notifications.argoproj.io/subscribe.on-sync-done.slack": "x",
        "notifications.argoproj.io/subscribe.on-deployed.email": "x",
        "other/annotation": "x"})
    assert subs == [notify.Subscription("on-deployed", "webhook", ""),
                    notify.Subscription("on-sync-succeeded", "slack", "ops"),
                    notify.Subscription("on-sync-succeeded", "slack", "dev")]
    assert len(errors) == 2
    assert "subscribe.on-sync-done.slack: unknown trigger 'on-sync-done'" in errors[1]
    assert "subscribe.on-deployed.email: unknown service 'email'" in errors[0]


# --- delivery through a real reconcile step ----------------------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[SignedWebhook]:
    server = SignedWebhook(HMAC_KEY)
    yield server
    server.close()


CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web"}, "data": {"k": "v1"}}
INVALID = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "bad"},
           "spec": {"ports": [{"port": 99999}]}}


def _setup(monkeypatch: pytest.MonkeyPatch, standin: GitHubStandIn, receiver: SignedWebhook, *,
           annotations: dict[str, str] | None = None) -> tuple[Any, FakeGit, MemoryStore, Published]:
    cluster, git, store = FakeCluster(), FakeGit(), MemoryStore()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    app = application("web", automated=True)
    app = dataclasses.replace(app, source=dataclasses.replace(app.source, repo_url=f"{standin.base_url}/octo/web.git"),
                              annotations=tuple((annotations or {
                                  "notifications.argoproj.io/subscribe.on-sync-running.webhook": "hooks",
                                  "notifications.argoproj.io/subscribe.on-sync-succeeded.webhook": "hooks",
                                  "notifications.argoproj.io/subscribe.on-sync-failed.webhook": "hooks",
                                  "notifications.argoproj.io/subscribe.on-deployed.slack": "",
                                  "notifications.argoproj.io/subscribe.on-deployed.pubsub": "projects/p/topics/t",
                                  "notifications.argoproj.io/subscribe.on-sync-succeeded.github": "",
                                  "tidecd.io/github-deployment": "production"}).items()))
    runtime = fake_runtime(cluster, store, app, git, secrets=[
        {"kind": "Secret", "metadata": {"name": "gh", "labels": {"argocd.argoproj.io/secret-type": "github"}},
         "stringData": {"token": "gh-token"}},
        {"kind": "Secret", "metadata": {"name": "n", "labels": {"argocd.argoproj.io/secret-type": "notifications"}},
         "stringData": {"webhook.hooks.url": receiver.url + "/hook", "webhook.hooks.secret": HMAC_KEY,
                        "slack.default.url": receiver.url + "/slack"}}])
    runtime.settings.github_api_url, runtime.settings.public_url = standin.base_url, "https://cd.example"
    published = Published()
    real_context = notify.context_for

    def context_for(rt: Any) -> notify.Context:
        return dataclasses.replace(real_context(rt), publisher=published)

    monkeypatch.setattr(notify, "context_for", context_for)
    return runtime, git, store, published


def _steps(runtime: Any, n: int = 6) -> None:
    for _ in range(n):
        outcome = dispatch.reconcile_step(runtime, "web", budget=1.0)
        if outcome.continue_after is None:
            return


def test_an_automated_sync_posts_statuses_and_each_subscription_once(
        monkeypatch: pytest.MonkeyPatch, github_standin: GitHubStandIn, receiver: SignedWebhook) -> None:
    runtime, git, store, published = _setup(monkeypatch, github_standin, receiver)
    receiver.key = ""  # slack does not sign; the webhook target's signature is checked below
    sha = git.push([CONFIGMAP])
    before = metrics.NOTIFICATIONS.labels(service="webhook", trigger="on-sync-succeeded", result="sent")._value.get()
    syncs = metrics.SYNCS.labels(result="Succeeded")._value.get()
    reconciles = metrics.RECONCILES.labels(result="done")._value.get()
    _steps(runtime)
    _steps(runtime)  # more reconciles of the same state notify nothing more
    assert metrics.SYNCS.labels(result="Succeeded")._value.get() == syncs + 1
    assert metrics.RECONCILES.labels(result="done")._value.get() >= reconciles + 2
    assert github_standin.status_states("octo/web", sha, "tidecd/web") == ["pending", "success"]
    [status] = [s for s in github_standin.statuses[("octo/web", sha)] if s["context"] == "tidecd/web"][:1]
    assert status["target_url"] == "https://cd.example/ui/apps/web"
    assert "(by automated)" in status["description"], status  # who started it: the app's own policy
    assert github_standin.status_states("octo/web", sha, "tidecd/web/on-sync-succeeded") == ["success"]
    [deployment] = github_standin.deployments["octo/web"]
    states = [s["state"] for s in github_standin.deployment_statuses[("octo/web", deployment["id"])]]
    assert states == ["in_progress", "success"] and deployment["environment"] == "production"
    hooks = [(m[2]["trigger"], m[1]["X-Tidecd-Signature"]) for m in receiver.messages if m[0] == "/hook"]
    assert [t for t, _ in hooks] == ["on-sync-running", "on-sync-succeeded"]
    slack = receiver.bodies("/slack")
    assert len(slack) == 1 and "web: deployed" in slack[0]["text"]
    assert [(t, json.loads(d)["trigger"]) for t, d, _ in published.messages] == [("projects/p/topics/t", "on-deployed")]
    after = metrics.NOTIFICATIONS.labels(service="webhook", trigger="on-sync-succeeded", result="sent")._value.get()
    assert after == before + 1
    record = read_json(store, notify.record_key("web"))
    assert record is not None and record[0]["pending"] == []

    # a new revision supersedes the deployment: the old one goes inactive
    sha2 = git.push([{**CONFIGMAP, "data": {"k": "v2"}}])
    _steps(runtime)
    assert github_standin.status_states("octo/web", sha2, "tidecd/web") == ["pending", "success"]
    old = [s["state"] for s in github_standin.deployment_statuses[("octo/web", deployment["id"])]]
    assert old == ["in_progress", "success", "inactive"]


def test_a_failing_sync_ends_in_failure(monkeypatch: pytest.MonkeyPatch, github_standin: GitHubStandIn,
                                        receiver: SignedWebhook) -> None:
    runtime, git, _, _ = _setup(monkeypatch, github_standin, receiver)
    sha = git.push([CONFIGMAP, INVALID])
    _steps(runtime)
    assert github_standin.status_states("octo/web", sha, "tidecd/web") == ["pending", "failure"]
    assert receiver.triggers("/hook") == ["on-sync-running", "on-sync-failed"]
    assert receiver.bad == 0


def test_failed_delivery_is_retried_with_backoff_then_given_up(
        monkeypatch: pytest.MonkeyPatch, github_standin: GitHubStandIn, receiver: SignedWebhook) -> None:
    runtime, git, store, _ = _setup(monkeypatch, github_standin, receiver, annotations={
        "notifications.argoproj.io/subscribe.on-sync-succeeded.webhook": "hooks"})
    git.push([CONFIGMAP])
    receiver.fail = 2
    outcome = dispatch.reconcile_step(runtime, "web", budget=1.0)
    assert outcome.state is not None and outcome.state.operation is not None
    assert outcome.state.operation.phase is OperationPhase.SUCCEEDED  # the sync did not wait for the target
    assert outcome.continue_after is not None and 0 < outcome.continue_after <= notify.RETRY_DELAYS[0]
    record = read_json(store, notify.record_key("web"))
    assert record is not None and record[0]["pending"][0]["attempts"] == 1
    clock = [1e10]
    for _ in range(2):
        clock[0] += 1000
        notify.notify_state(runtime, outcome.state, clock=lambda: clock[0])
    assert [m[2]["trigger"] for m in receiver.messages] == ["on-sync-succeeded"]
    log = read_json(store, notify.record_key("web"))
    assert log is not None
    assert [e["result"] for e in log[0]["log"] if e["service"] == "webhook"] == ["failed", "failed", "sent"]

    receiver.fail = 100
    runtime2, git2, store2, _ = _setup(monkeypatch, github_standin, receiver, annotations={
        "notifications.argoproj.io/subscribe.on-sync-succeeded.webhook": "hooks"})
    git2.push([CONFIGMAP])
    state = dispatch.reconcile_step(runtime2, "web", budget=1.0).state
    assert state is not None
    for _ in range(notify.MAX_ATTEMPTS + 2):
        clock[0] += 1000
        notify.notify_state(runtime2, state, clock=lambda: clock[0])
    final = read_json(store2, notify.record_key("web"))
    assert final is not None and final[0]["pending"] == []
    results = [e["result"] for e in final[0]["log"] if e["service"] == "webhook"]
    assert results == ["failed"] * (notify.MAX_ATTEMPTS - 1) + ["gave up"]


def test_github_down_never_fails_the_sync(monkeypatch: pytest.MonkeyPatch, github_standin: GitHubStandIn,
                                          receiver: SignedWebhook) -> None:
    runtime, git, _, _ = _setup(monkeypatch, github_standin, receiver)
    runtime.settings.github_api_url = "http://127.0.0.1:9"  # nothing listens
    git.push([CONFIGMAP])
    _steps(runtime)
    state = dispatch.reconcile_step(runtime, "web", budget=1.0).state
    assert state is not None and state.operation is not None
    assert state.operation.phase is OperationPhase.SUCCEEDED and state.sync_status is SyncStatus.SYNCED
