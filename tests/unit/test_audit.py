"""The audit webhook: the pure EventList parser, which events count, and the whole path from an audit
batch to a repaired app that names who drifted it (a real step over `FakeCluster`, a real store, the real
coalescing of `tidecd.triggers.pending`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakecluster import FakeCluster, FakeGit, application, fake_runtime
from tests.unit.test_registry_events import Google, envelope
from tests.unit.test_registry_events import google as google_keys  # noqa: F401 - their fixture, here google_keys
from tests.unit.test_webhook import Recorder
from tidecd.base.clock import FakeClock, unix
from tidecd.base.model import ResourceKey, SyncStatus
from tidecd.clients.store import LocalStore, MemoryStore
from tidecd.config.load import Config
from tidecd.runtime import Runtime, Settings
from tidecd.state import app as app_state
from tidecd.state import index
from tidecd.state.app import OperationPhase
from tidecd.step.reconcile import reconcile
from tidecd.sync import decide as decide
from tidecd.triggers import pending
from tidecd.triggers.dispatch import Handover, Refresh
from tidecd.usecases import audit

TOKEN = "audit-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDECD_AUDIT_TOKEN", TOKEN)
    monkeypatch.delenv("TIDECD_AUDIT_IGNORE_USERS", raising=False)


DEPLOY = ResourceKey("apps", "Deployment", "ns", "web")
AT = "2023-11-14T22:13:00.123456Z"  # a minute before FakeClock's now


def event(name: str = "web", *, verb: str = "patch", user: str = "alice@example.com", resource: str = "deployments",
          group: str = "apps", namespace: str = "ns", agent: str = "kubectl/v1.34.4 (linux/amd64) kubernetes/abc",
          subresource: str = "", code: int = 200, stage: str = "ResponseComplete", uri: str = "",
          audit_id: str = "", at: str = AT) -> dict[str, Any]:
    ref: dict[str, Any] = {"resource": resource, "namespace": namespace, "name": name, "apiGroup": group,
                           "apiVersion": "v1"}
    if subresource:
        ref["subresource"] = subresource
    return {"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
            "auditID": audit_id or f"id-{name}-{verb}-{user}", "stage": stage,
            "requestURI": uri or f"/apis/{group}/v1/namespaces/{namespace}/{resource}/{name}",
            "verb": verb, "user": {"username": user, "groups": ["system:authenticated"]},
            "sourceIPs": ["127.0.0.1"], "userAgent": agent, "objectRef": ref,
            "responseStatus": {"metadata": {}, "code": code}, "requestReceivedTimestamp": at, "stageTimestamp": at}


def batch(*events: dict[str, Any]) -> bytes:
    return json.dumps({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "metadata": {},
                       "items": list(events)}).encode()


# --- the parser ------------------------------------------------------------------------------------------


def test_an_event_list_parses_into_frozen_events() -> None:
    body = batch(event(), event("db", verb="delete", user="system:serviceaccount:ci:deployer",
                                uri="/apis/apps/v1/namespaces/ns/deployments/db?fieldManager=kubectl-edit"))
    first, second = audit.parse(body)
    assert (first.verb, first.user, first.group, first.resource, first.namespace, first.name, first.code) == \
        ("patch", "alice@example.com", "apps", "deployments", "ns", "web", 200)
    assert first.at == AT and second.field_manager == "kubectl-edit" and second.verb == "delete"
    with pytest.raises(AttributeError):
        first.user = "mallory"  # type: ignore[misc]


def test_an_impersonated_write_names_both_people() -> None:
    raw = event()
    raw["impersonatedUser"] = {"username": "bob@example.com"}
    (parsed,) = audit.parse(batch(raw))
    assert parsed.user == "bob@example.com (impersonated by alice@example.com)"


@pytest.mark.parametrize(("body", "named"), [
    (b"{not json", "not valid JSON"),
    (b"[]", "not a JSON object"),
    (json.dumps({"kind": "Event", "apiVersion": "audit.k8s.io/v1"}).encode(), "expected kind EventList"),
    (json.dumps({"kind": "EventList", "apiVersion": "audit.k8s.io/v1beta1"}).encode(), "audit.k8s.io/v1beta1"),
    (json.dumps({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": {}}).encode(), "`items`"),
    (batch(event(), "x"), "items[1] must be an object"),  # type: ignore[arg-type]
    (batch(event(), {**event(), "objectRef": {"name": 3}}), "items[1].objectRef.name must be a string"),
    (batch({**event(), "responseStatus": {"code": "200"}}), "items[0].responseStatus.code must be a number"),
    (batch({**event(), "user": "alice"}), "items[0].user must be an object"),
    (b"[" * 100_000, "not valid JSON"),  # deep nesting: a clear error, not a RecursionError
])
def test_a_malformed_batch_is_refused_naming_the_field(body: bytes, named: str) -> None:
    with pytest.raises(audit.BadBatch, match=None) as raised:
        audit.parse(body)
    assert named in str(raised.value)


def test_a_batch_is_bounded() -> None:
    with pytest.raises(audit.BadBatch, match="more than 10,000"):
        audit.parse(batch(*[event()] * (audit.MAX_EVENTS + 1)))
    (parsed,) = audit.parse(batch({**event(), "userAgent": "x" * 100_000}))
    assert len(parsed.user_agent) == audit.MAX_TEXT


@pytest.mark.parametrize(("raw", "why"), [
    (event(), ""),
    (event(subresource="scale"), ""),  # kubectl scale: a drift
    (event(verb="create"), ""),
    (event(verb="get"), "not a write"),
    (event(stage="ResponseStarted"), "stage"),
    (event(subresource="status"), "status"),
    (event(code=409), "failed"),
    (event(name=""), "no object"),
    (event(agent="tidecd"), "tidecd"),
    (event(uri="/apis/apps/v1/namespaces/ns/deployments/web?fieldManager=tidecd&force=true"), "tidecd"),
    (event(user="tidecd@proj.iam.gserviceaccount.com"), "tidecd"),
    (event(user="system:serviceaccount:kube-system:deployment-controller"), "controller"),
    (event(user="admin", agent="kube-controller-manager/v1.34.4 (linux/amd64) kubernetes/x/deployment-controller"),
     "controller"),
])
def test_only_other_peoples_completed_writes_count(raw: dict[str, Any], why: str) -> None:
    (parsed,) = audit.parse(batch(raw))
    assert audit.ignored(parsed, audit.own_users(" tidecd@proj.iam.gserviceaccount.com ,")) == why


# --- the whole path: index, batch, refresh, step -------------------------------------------------------


def deployment(replicas: int) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx:1"}]}}}}


def synced(self_heal: bool) -> tuple[FakeCluster, MemoryStore, Runtime]:
    cluster, store, git = FakeCluster(), MemoryStore(), FakeGit()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    git.push([deployment(1)])
    runtime = fake_runtime(cluster, store, application(automated=True, self_heal=self_heal), git)
    reconcile(runtime, "app", clock=FakeClock())
    return cluster, store, runtime


def scale_by_hand(cluster: FakeCluster, replicas: int) -> None:
    live = cluster.objects[DEPLOY]
    cluster.objects[DEPLOY] = {**live, "spec": {**live["spec"], "replicas": replicas},
                               "metadata": {**live["metadata"], "resourceVersion": "999"}}


def test_the_step_indexes_its_inventory_and_keeps_the_index_to_it() -> None:
    cluster, store, runtime = synced(self_heal=True)
    assert index.owners(store, "apps", "ns", "web") == ["app"]
    state, _ = app_state.load(store, "app")
    assert state.memo.indexed == index.digest([DEPLOY])
    writes = len(store.list(index.INDEX))
    reconcile(runtime, "app", clock=FakeClock())  # nothing changed: nothing written to the index
    assert len(store.list(index.INDEX)) == writes == 1
    index.update(store, "app", [], [DEPLOY])
    assert index.owners(store, "apps", "ns", "web") == []


def test_a_drift_is_refreshed_restored_and_named_with_who_did_it() -> None:
    cluster, store, runtime = synced(self_heal=True)
    scale_by_hand(cluster, 5)
    recorder = Recorder()

    answer = audit.handle(AUTH, batch(event(subresource="scale")), runtime, recorder)

    assert answer.status == 200 and answer.body["refreshed"] == ["app"], answer.body
    assert [r.app for r in recorder.refreshes] == ["app"] and "alice@example.com" in recorder.refreshes[0].reason
    reconcile(runtime, "app", clock=FakeClock())
    assert cluster.objects[DEPLOY]["spec"]["replicas"] == 1  # restored
    state, _ = app_state.load(store, "app")
    assert state.sync_status is SyncStatus.SYNCED and state.automation.drift is not None
    said = "Deployment ns/web: spec.replicas changed by alice@example.com via kubectl at 22:13:00"
    assert state.automation.drift.describe() == said and state.automation.drift.restored
    last = state.history[-1]
    op = state.operation
    assert op is not None and op.phase is OperationPhase.SUCCEEDED and op.request.cause == said
    assert op.only_keys() == frozenset({DEPLOY})  # as Argo CD's self-heal: a selective sync of what drifted
    assert last.cause == said + "; restored"
    (kept,) = [c for c in state.conditions if c["type"] == "DriftDetected"]  # named for an hour after
    assert kept["message"] == f"{said}; restored at 22:13:20" and kept["at"] == state.automation.drift.restored
    from tidecd.notify.events import Seen, events

    fired, _ = events(Seen(), state)
    assert {e.trigger: e.cause for e in fired}["on-sync-succeeded"] == said + "; restored"


def test_the_restored_drift_stops_showing_after_its_hour_also_on_the_no_op_fast_path() -> None:
    """The quiet path keeps the last comparison's conditions; the drift's must still end with its hour."""
    cluster, store, runtime = synced(self_heal=True)
    scale_by_hand(cluster, 5)
    audit.handle(AUTH, batch(event(subresource="scale")), runtime, Recorder())
    clock = FakeClock()
    reconcile(runtime, "app", clock=clock)  # the repair
    cluster.ready(DEPLOY)  # rolled out: the app settles Healthy, so a no-op may take the fast path
    reconcile(runtime, "app", clock=clock)  # a full comparison of the repaired objects: the quiet record
    state, _ = app_state.load(store, "app")
    assert state.automation.drift is not None and state.automation.drift.restored
    assert [c["type"] for c in state.conditions].count("DriftDetected") == 1

    clock.advance(1800)
    reconcile(runtime, "app", clock=clock)
    state, _ = app_state.load(store, "app")
    assert [c["type"] for c in state.conditions].count("DriftDetected") == 1  # within its hour: still named
    clock.advance(1801 + 20)
    _, before = app_state.load(store, "app")
    outcome = reconcile(runtime, "app", clock=clock)
    state, after = app_state.load(store, "app")
    assert outcome.unchanged, "the no-op fast path was not taken: this test would not test it"
    assert "DriftDetected" not in [c["type"] for c in state.conditions], state.conditions
    assert state.sync_status is SyncStatus.SYNCED and state.automation.drift is not None  # the record stays
    assert after > before
    reconcile(runtime, "app", clock=clock)  # and then a no-op writes nothing again
    assert app_state.load(store, "app")[1] == after


def test_without_self_heal_the_app_reads_out_of_sync_at_once_naming_who() -> None:
    cluster, store, runtime = synced(self_heal=False)
    scale_by_hand(cluster, 4)
    audit.handle(AUTH, batch(event()), runtime, Recorder())
    reconcile(runtime, "app", clock=FakeClock())
    state, _ = app_state.load(store, "app")
    assert cluster.objects[DEPLOY]["spec"]["replicas"] == 4  # not repaired
    assert state.sync_status is SyncStatus.OUT_OF_SYNC
    (condition,) = [c for c in state.conditions if c["type"] == "DriftDetected"]
    assert condition["message"] == "Deployment ns/web: spec.replicas changed by alice@example.com via kubectl at " \
                                   "22:13:00"


def test_an_old_write_names_no_drift() -> None:
    cluster, store, runtime = synced(self_heal=False)
    scale_by_hand(cluster, 4)
    audit.handle(AUTH, batch(event(at="2023-11-14T10:00:00Z")), runtime, Recorder())  # 12 hours before
    reconcile(runtime, "app", clock=FakeClock())
    state, _ = app_state.load(store, "app")
    assert state.sync_status is SyncStatus.OUT_OF_SYNC and state.automation.drift is None
    assert not [c for c in state.conditions if c["type"] == "DriftDetected"]


def test_unmanaged_objects_own_writes_and_status_cause_nothing() -> None:
    _, store, runtime = synced(self_heal=True)
    recorder = Recorder()
    answer = audit.handle(AUTH, batch(event("other"), event(namespace="elsewhere"), event(agent="tidecd"),
                                      event(subresource="status"), event(resource="configmaps", group="")),
                          runtime, recorder)
    assert answer.status == 200 and recorder.refreshes == []
    assert answer.body["ignored"] == {"tidecd": 1, "status": 1} and answer.body["unmanaged"] == 3
    assert store.list(index.AUDIT) == []


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}])
def test_an_unauthenticated_batch_is_refused(headers: dict[str, str]) -> None:
    _, store, runtime = synced(self_heal=True)
    recorder = Recorder()
    answer = audit.handle(headers, batch(event()), runtime, recorder)
    assert answer.status == 401 and recorder.refreshes == [] and TOKEN not in json.dumps(answer.body)


def test_no_configured_token_refuses_every_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, runtime = synced(self_heal=True)
    monkeypatch.setenv("TIDECD_AUDIT_TOKEN", "")
    assert audit.handle({"Authorization": "Bearer "}, batch(event()), runtime, Recorder()).status == 401
    assert "s3cret" not in repr(audit.AuditSettings.from_env({"TIDECD_AUDIT_TOKEN": "s3cret"}))


def test_a_malformed_batch_is_a_400() -> None:
    _, _, runtime = synced(self_heal=True)
    answer = audit.handle(AUTH, batch({**event(), "verb": 7}), runtime, Recorder())
    assert answer.status == 400 and "items[0].verb must be a string" in answer.body["error"]


class Counting(Handover):
    """The real coalescing (`pending/` claims) with a hand-over that only counts: each send is a reconcile."""

    def __init__(self, store: LocalStore) -> None:
        self.store = store
        self.sent: list[str] = []

    def send(self, refreshes: Sequence[Refresh]) -> dict[str, str]:
        self.sent.extend(r.app for r in refreshes)
        return {}


def test_a_burst_of_1000_events_for_50_apps_costs_about_50_reconciles(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    apps = [f"app-{i:02}" for i in range(50)]
    for app in apps:
        index.update(store, app, [ResourceKey("apps", "Deployment", app, "web")], [])
    config = Config(applications={a: application(a, namespace=a) for a in apps})
    runtime = Runtime.of(Settings(config="fake", store=str(tmp_path / "store")), store, config=config)
    dispatcher = Counting(store)
    events = [event(namespace=apps[i % 50], user=f"user{i}", audit_id=f"a{i}") for i in range(1000)]

    for start in range(0, 1000, 100):  # ten batches, as the backend sends them while the runs are under way
        answer = audit.handle(AUTH, batch(*events[start:start + 100]), runtime, dispatcher)
        assert answer.status == 200
        if start == 500:  # half of the runs finish midway: each is asked for at most one more run
            for app in apps[:25]:
                if pending.finish(store, app, ""):
                    dispatcher.sent.append(app)

    assert sorted(set(dispatcher.sent)) == apps
    assert len(dispatcher.sent) <= 75, len(dispatcher.sent)  # 50 runs, and one more for those that finished
    assert len(index.writes(store, "app-07")) == 20  # every write of its objects was kept for the step


def test_repeated_drift_is_repaired_after_argo_cds_self_heal_backoff() -> None:
    """The first repair of a revision at once, the next 2 s after the previous one ended, then 6 s ..."""
    cluster, store, runtime = synced(self_heal=True)

    class RollsOut(FakeClock):  # the deployment controller: a repaired Deployment is rolled out at once
        def pause(self, seconds: float) -> None:
            super().pause(seconds)
            cluster.ready(DEPLOY)

    clock = RollsOut()
    attempts = []
    for delay in (0.0, 2.0, 6.0):
        scale_by_hand(cluster, 7)
        outcome = reconcile(runtime, "app", clock=clock)
        if delay:
            assert cluster.objects[DEPLOY]["spec"]["replicas"] == 7  # held back by the backoff
            # counted from the previous operation's end (the step that ended it read health a moment longer)
            ended = unix(outcome.state.operation.finished_at) if outcome.state and outcome.state.operation else 0.0
            assert outcome.continue_after == pytest.approx(ended + delay - clock.now()), outcome
            clock.advance(delay)
            reconcile(runtime, "app", clock=clock)
        assert cluster.objects[DEPLOY]["spec"]["replicas"] == 1
        state, _ = app_state.load(store, "app")
        assert state.operation is not None
        attempts.append(state.operation.request.self_heal_attempts)
    assert attempts == [1, 2, 3]
    assert decide.self_heal_delay(10) == 300.0


def test_an_object_the_app_no_longer_manages_leaves_the_index() -> None:
    cluster, store, git = FakeCluster(), MemoryStore(), FakeGit()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    settings = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"k": "v"}}
    git.push([deployment(1), settings])
    runtime = fake_runtime(cluster, store, application(automated=True, prune=True), git)
    reconcile(runtime, "app", clock=FakeClock())
    assert index.owners(store, "apps", "ns", "web") == index.owners(store, "", "ns", "settings") == ["app"]
    git.push([settings])  # the Deployment leaves git: pruned, and out of the index
    reconcile(runtime, "app", clock=FakeClock())
    assert DEPLOY not in cluster.objects
    assert index.owners(store, "apps", "ns", "web") == [] and index.owners(store, "", "ns", "settings") == ["app"]


# --- GKE: audit log entries pushed by the Log Router sink's subscription --------------------------------


def log_entry(method: str = "io.k8s.apps.v1.deployments.patch",
              resource: str = "apps/v1/namespaces/ns/deployments/web", *, who: str = "alice@example.com",
              agent: str = "kubectl/v1.32.0 (linux/amd64) kubernetes/a1b2c3d", code: int = 0,
              service: str = "k8s.io") -> dict[str, Any]:
    """A GKE Admin Activity audit entry as the sink publishes it (the fields tidecd reads and neighbours)."""
    return {"insertId": "abc123", "logName": "projects/acme/logs/cloudaudit.googleapis.com%2Factivity",
            "timestamp": AT, "severity": "NOTICE",
            "resource": {"type": "k8s_cluster", "labels": {"project_id": "acme", "location": "us-central1",
                                                           "cluster_name": "prod-1"}},
            "protoPayload": {"@type": "type.googleapis.com/google.cloud.audit.AuditLog", "serviceName": service,
                             "methodName": method, "resourceName": resource,
                             "authenticationInfo": {"principalEmail": who},
                             "requestMetadata": {"callerIp": "203.0.113.10", "callerSuppliedUserAgent": agent},
                             "status": {"code": code} if code else {}}}


@pytest.mark.parametrize(("entry", "expected"), [
    (log_entry(), ("patch", "apps", "deployments", "", "ns", "web", 200)),
    (log_entry("io.k8s.apps.v1.deployments.scale.patch", "apps/v1/namespaces/ns/deployments/web/scale"),
     ("patch", "apps", "deployments", "scale", "ns", "web", 200)),
    (log_entry("io.k8s.core.v1.configmaps.delete", "core/v1/namespaces/ns/configmaps/settings"),
     ("delete", "", "configmaps", "", "ns", "settings", 200)),
    (log_entry("io.k8s.core.v1.namespaces.create", "core/v1/namespaces/team"),
     ("create", "", "namespaces", "", "", "team", 200)),
    (log_entry("io.k8s.rbac.authorization.v1.clusterroles.update", "rbac.authorization.k8s.io/v1/clusterroles/x",
               code=7), ("update", "rbac.authorization.k8s.io", "clusterroles", "", "", "x", 500)),
])
def test_a_gke_audit_log_entry_reads_as_the_same_event(entry: dict[str, Any], expected: tuple[Any, ...]) -> None:
    parsed = audit.parse_log_entry(json.dumps(entry).encode())
    assert parsed is not None and parsed.user == "alice@example.com" and parsed.user_agent.startswith("kubectl/")
    assert (parsed.verb, parsed.group, parsed.resource, parsed.subresource, parsed.namespace, parsed.name,
            parsed.code) == expected
    assert parsed.at == AT and parsed.stage == "ResponseComplete"


def test_a_gke_entry_of_another_service_is_none_and_a_malformed_one_names_the_field() -> None:
    assert audit.parse_log_entry(json.dumps(log_entry(service="compute.googleapis.com")).encode()) is None
    with pytest.raises(audit.BadBatch, match="resourceName"):
        audit.parse_log_entry(json.dumps(log_entry(resource="apps/v1")).encode())
    with pytest.raises(audit.BadBatch, match="protoPayload.status.code must be a number"):
        entry = log_entry()
        entry["protoPayload"]["status"] = {"code": "7"}
        audit.parse_log_entry(json.dumps(entry).encode())


def test_a_pushed_gke_entry_with_a_valid_oidc_token_repairs_and_names_the_drift(
        google_keys: Google) -> None:  # noqa: F811 - the fixture imported above
    google = google_keys
    cluster, store, runtime = synced(self_heal=True)
    scale_by_hand(cluster, 6)
    recorder = Recorder()
    body = envelope(log_entry("io.k8s.apps.v1.deployments.scale.patch",
                              "apps/v1/namespaces/ns/deployments/web/scale"))

    refused = audit.handle_push({"Authorization": f"Bearer {google.token(aud='another')}"}, body, runtime, recorder)
    assert refused.status == 401 and recorder.refreshes == []
    answer = audit.handle_push({"Authorization": f"Bearer {google.token()}"}, body, runtime, recorder)

    assert answer.status == 200 and answer.body["refreshed"] == ["app"], answer.body
    reconcile(runtime, "app", clock=FakeClock())
    state, _ = app_state.load(store, "app")
    assert cluster.objects[DEPLOY]["spec"]["replicas"] == 1
    assert state.automation.drift is not None and state.automation.drift.user == "alice@example.com"
    ignored = audit.handle_push({"Authorization": f"Bearer {google.token()}"}, b'{"message": {}}', runtime, recorder)
    assert ignored.status == 200 and "message.data" in ignored.body["ignored"]


def test_an_unreadable_audit_record_is_started_again() -> None:
    store = MemoryStore()
    store.write(index.AUDIT + "app.json", b"{not json")
    assert index.writes(store, "app") == []
    index.remember(store, "app", [audit.parse(batch(event()))[0].write()])
    assert [w.user for w in index.writes(store, "app")] == ["alice@example.com"]
