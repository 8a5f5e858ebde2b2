"""AppProject syncWindows: loading (checked as Argo CD checks them), Argo CD's precedence rules, and their
enforcement on automated and manual syncs in the reconcile step (fake cluster, fake clock)."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakecluster import FakeCluster, FakeGit, application, fake_runtime
from tidecd.base.clock import FakeClock
from tidecd.base.errors import SyncWindowClosed, disposition
from tidecd.clients.store import MemoryStore
from tidecd.config.load import AppProject, Destination, load_config
from tidecd.config.model import DEFAULT_PROJECT, SyncWindow
from tidecd.project import windows as syncwindows
from tidecd.state.app import OperationPhase
from tidecd.state.app import load as load_state
from tidecd.step.reconcile import reconcile
from tidecd.usecases.commands import SyncRequest, start_operation

UTC = datetime.UTC
# Tue 2026-12-01 14:30 UTC
NOW = datetime.datetime(2026, 12, 1, 14, 30, tzinfo=UTC)
DEST = Destination(server="https://kubernetes.default.svc", namespace="web")


def window(kind: str, schedule: str = "0 14 * * *", hours: float = 1, **fields: Any) -> SyncWindow:
    fields.setdefault("applications", ("*",))
    return SyncWindow(kind=kind, schedule=schedule, duration_seconds=hours * 3600, **fields)


def project(*windows: SyncWindow) -> AppProject:
    return dataclasses.replace(DEFAULT_PROJECT, sync_windows=windows)


def verdict(*windows: SyncWindow, manual: bool = False, now: datetime.datetime = NOW) -> syncwindows.Verdict:
    return syncwindows.can_sync(project(*windows), "guestbook", DEST, manual=manual, now=now)


def test_active_is_from_each_schedule_fire_for_its_duration_in_its_time_zone() -> None:
    daily_14 = window("allow", "0 14 * * *", 1)
    assert syncwindows.active(daily_14, NOW)
    assert not syncwindows.active(daily_14, NOW + datetime.timedelta(minutes=31))
    assert not syncwindows.active(daily_14, NOW - datetime.timedelta(minutes=31))
    # 15:00 in Berlin is 14:00 UTC in December
    berlin = window("allow", "0 15 * * *", 1, time_zone="Europe/Berlin")
    assert syncwindows.active(berlin, NOW)
    assert not syncwindows.active(dataclasses.replace(berlin, time_zone="America/New_York"), NOW)
    overnight = window("deny", "0 22 * * *", 10)  # 22:00 → 08:00 the next day
    assert syncwindows.active(overnight, datetime.datetime(2026, 12, 2, 7, 59, tzinfo=UTC))
    assert not syncwindows.active(overnight, datetime.datetime(2026, 12, 2, 8, 1, tzinfo=UTC))


def test_no_window_allows_and_deny_wins_over_allow() -> None:
    assert verdict().allowed
    assert verdict(window("allow")).allowed
    blocked = verdict(window("allow"), window("deny", "0 12 * * *", 4))
    assert not blocked.allowed
    assert "automated sync blocked by the active deny window deny:0 12 * * *:4h of project 'default'" in blocked.message
    assert verdict(window("deny", "0 3 * * *", 1)).allowed  # an inactive deny window blocks nothing


def test_outside_every_allow_window_syncs_are_blocked() -> None:
    night = window("allow", "0 2 * * *", 1)
    found = verdict(night)
    assert not found.allowed and "outside every allow window" in found.message and "allow:0 2 * * *:1h" in found.message
    assert verdict(night, window("allow")).allowed  # another allow window is active


def test_manual_sync_rules() -> None:
    deny = window("deny", "0 14 * * *", 1, manual_sync=True)
    assert verdict(deny, manual=True).allowed
    assert not verdict(deny).allowed  # automated stays blocked
    assert not verdict(deny, window("deny", "0 13 * * *", 2), manual=True).allowed  # every active deny must allow it
    night = window("allow", "0 2 * * *", 1)
    assert not verdict(night, manual=True).allowed
    assert verdict(night, dataclasses.replace(night, manual_sync=True), manual=True).allowed  # any inactive allow


def test_which_apps_a_window_applies_to() -> None:
    named = window("deny", applications=("guest*",))
    assert syncwindows.matches(named, "guestbook", DEST) and not syncwindows.matches(named, "billing", DEST)
    by_namespace = window("deny", applications=(), namespaces=("we?",))
    assert syncwindows.matches(by_namespace, "x", DEST)
    by_cluster = window("deny", applications=(), clusters=("in-cluster",))
    assert syncwindows.matches(by_cluster, "x", Destination(name="in-cluster", namespace="a"))
    assert not syncwindows.matches(by_cluster, "x", DEST)
    either = window("deny", applications=("billing",), namespaces=("web",))
    assert syncwindows.matches(either, "guestbook", DEST)
    assert not syncwindows.matches(dataclasses.replace(either, and_operator=True), "guestbook", DEST)
    assert not syncwindows.matches(window("deny", applications=()), "guestbook", DEST)  # selects nothing


PROJECT = """apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata: {name: team}
spec:
  sourceRepos: ['*']
  destinations: [{server: '*', namespace: '*'}]
  syncWindows:
"""


def test_sync_windows_load_and_bad_ones_name_the_field(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(PROJECT + """  - kind: deny
    schedule: '0 22 * * *'
    duration: 1h
    applications: ['*-prod']
    namespaces: [web]
    clusters: [in-cluster]
    manualSync: true
    timeZone: Europe/Berlin
    andOperator: true
    description: no deploys at night
""")
    windows = load_config(tmp_path).projects["team"].sync_windows
    assert windows == (SyncWindow(kind="deny", schedule="0 22 * * *", duration_seconds=3600.0,
                                  applications=("*-prod",), namespaces=("web",), clusters=("in-cluster",),
                                  manual_sync=True, time_zone="Europe/Berlin", and_operator=True),)
    (tmp_path / "p.yaml").write_text(PROJECT + """  - {kind: maybe, schedule: '0 22 * *', duration: soon,
     timeZone: Mars/Olympus}
""")
    config = load_config(tmp_path, strict=False)
    assert "team" not in config.projects
    with pytest.raises(Exception) as found:
        load_config(tmp_path)
    message = str(found.value)
    assert "spec.syncWindows[0].kind: 'maybe': expected allow or deny" in message
    assert "spec.syncWindows[0].schedule: '0 22 * *': expected a cron schedule of five fields" in message
    assert "spec.syncWindows[0].duration: 'soon' is not a duration" in message
    assert "spec.syncWindows[0].timeZone: 'Mars/Olympus' is not a known time zone" in message


# -- enforcement in the reconcile step ------------------------------------------------------------------

def configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


def setup(monkeypatch: pytest.MonkeyPatch, *windows: SyncWindow, **policy: Any) -> tuple[Any, FakeCluster, FakeClock]:
    cluster, store, git = FakeCluster(), MemoryStore(), FakeGit()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    git.push([configmap("a")])
    runtime = fake_runtime(cluster, store, application(**policy), git)
    runtime.config().projects["default"] = project(*windows)
    return runtime, cluster, FakeClock(NOW.timestamp())


def test_a_blocked_automated_sync_is_a_condition_and_starts_when_the_window_opens(
        monkeypatch: pytest.MonkeyPatch) -> None:
    runtime, cluster, clock = setup(monkeypatch, window("allow", "0 16 * * *", 1), automated=True)
    outcome = reconcile(runtime, "app", clock=clock)
    assert outcome.state is not None and outcome.state.operation is None
    assert [c["type"] for c in outcome.state.conditions] == [syncwindows.CONDITION]
    assert "outside every allow window" in outcome.state.conditions[0]["message"]
    assert cluster.created("ConfigMap") == []
    again = reconcile(runtime, "app", clock=clock)  # the next poll, still closed: no error loop, no write
    assert again.state is not None and again.state.operation is None and cluster.writes == 0
    clock.advance(91 * 60)  # 16:01: the allow window is open
    opened = reconcile(runtime, "app", clock=clock)
    assert opened.state is not None and opened.state.operation is not None
    assert opened.state.operation.phase is OperationPhase.SUCCEEDED
    assert cluster.created("ConfigMap") == ["a"]
    assert syncwindows.CONDITION not in [c["type"] for c in opened.state.conditions]


def test_a_manual_sync_in_a_deny_window_is_refused_unless_manual_sync_is_allowed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    deny = window("deny", "0 * * * *", 1)
    runtime, cluster, clock = setup(monkeypatch, deny)
    with pytest.raises(SyncWindowClosed, match=r"manual sync blocked by the active deny window deny:0 \* \* \* \*:1h"):
        start_operation(runtime, "app", SyncRequest(initiated_by="cli"))
    assert disposition(SyncWindowClosed("x")).status == 409
    assert load_state(runtime.store, "app")[0].operation is None
    runtime.config().projects["default"] = project(dataclasses.replace(deny, manual_sync=True))
    start_operation(runtime, "app", SyncRequest(initiated_by="cli"))
    reconcile(runtime, "app", clock=clock)
    assert cluster.created("ConfigMap") == ["a"]
