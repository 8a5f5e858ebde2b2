"""The poll use case with an injected `ls_remote` (counting calls), a real Runtime over a temp config
directory, an in-memory store, and a dispatcher that records what it was handed."""

from __future__ import annotations

import base64
import json
import random
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidecd.base.errors import SourceUnavailable
from tidecd.clients.store import MemoryStore
from tidecd.config.load import Config, normalize_repo_url
from tidecd.runtime import Runtime, Settings
from tidecd.source import RefCache
from tidecd.state.app import state_key
from tidecd.triggers.dispatch import (
    HEAD_FRESH_SECONDS,
    BadRefreshMessage,
    DirectDispatcher,
    PubSubDispatcher,
    Refresh,
    decode_refresh,
    dispatcher_for,
)
from tidecd.usecases.poll import DRIFT_SWEEP, poll

REPO_A = "https://github.com/acme/apps.git"
REPO_B = "https://gitlab.example.com/platform/infra.git"
REPO_C = "https://git.example.org/team/c"
SHA = {n: f"{n:x}" * 40 for n in range(1, 10)}  # SHA[1] = "1111...", distinct 40-hex values


class FakeGit:
    """`ls_remote` stand-in: refs per normalized repo, every call recorded, some repos failing."""

    def __init__(self, refs: dict[str, dict[str, str]]) -> None:
        self.refs = {normalize_repo_url(url): dict(r) for url, r in refs.items()}
        self.calls: list[str] = []
        self.failing: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, repo_url: str, credentials: Any = None) -> dict[str, str]:
        with self._lock:
            self.calls.append(repo_url)
        if normalize_repo_url(repo_url) in self.failing:
            raise SourceUnavailable(f"repository {repo_url} is unavailable: connection refused")
        return dict(self.refs[normalize_repo_url(repo_url)])

    def move(self, url: str, ref: str, sha: str) -> None:
        self.refs[normalize_repo_url(url)][ref] = sha


class Recorder:
    def __init__(self, fail: Sequence[str] = (), clock: list[float] | None = None, cost: float = 0.0) -> None:
        self.refreshes: list[Refresh] = []
        self.scheduled: list[tuple[str, float, str]] = []
        self.fail, self.clock, self.cost = set(fail), clock, cost

    def dispatch(self, refreshes: Sequence[Refresh]) -> dict[str, str]:
        self.refreshes.extend(refreshes)
        if self.clock is not None:
            self.clock[0] += self.cost * len(refreshes)
        return {r.app: "publish failed" for r in refreshes if r.app in self.fail}

    def schedule(self, app: str, delay: float, reason: str) -> None:
        self.scheduled.append((app, delay, reason))

    def reasons(self) -> dict[str, str]:
        return {r.app: r.reason for r in self.refreshes}


def heads(main: str, tag: str = SHA[9]) -> dict[str, str]:
    return {"HEAD": main, "refs/heads/main": main, "refs/heads/dev": SHA[8], "refs/tags/v1": tag}


def application(name: str, repo: str, revision: str = "main", *, automated: bool = False,
                self_heal: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"project": "default",
                            "source": {"repoURL": repo, "path": f"apps/{name}", "targetRevision": revision},
                            "destination": {"server": "https://kubernetes.default.svc", "namespace": name}}
    if automated or self_heal:
        spec["syncPolicy"] = {"automated": {"selfHeal": self_heal}}
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": name},
            "spec": spec}


def make_runtime(tmp_path: Path, apps: list[dict[str, Any]]) -> Runtime:
    folder = tmp_path / "config"
    folder.mkdir(exist_ok=True)
    for app in apps:
        (folder / f"{app['metadata']['name']}.yaml").write_text(yaml.safe_dump(app))
    return Runtime(settings=Settings(config=str(folder)), store=MemoryStore())


def reconciled(runtime: Runtime, *names: str) -> None:
    """What a reconcile leaves behind: the app's state document."""
    for name in names:
        runtime.store.write(state_key(name), b'{"app": "%s"}' % name.encode())


def run(runtime: Runtime, git: FakeGit, sent: Recorder, **kwargs: Any) -> Any:
    return poll(runtime, sent, jitter_seconds=0, ls_remote=git, **kwargs)


# --- one ls-remote per repository ------------------------------------------------------------------------


def test_one_ls_remote_per_distinct_repo_however_many_apps_and_spellings(tmp_path: Path) -> None:
    spellings = [REPO_A, "https://github.com/acme/apps", "git@github.com:acme/apps.git",
                 "ssh://git@github.com/acme/apps", "https://GitHub.com/acme/apps/"]
    apps = [application(f"a{i}", spellings[i % len(spellings)]) for i in range(40)]
    apps += [application(f"b{i}", REPO_B, "v1") for i in range(25)]
    runtime = make_runtime(tmp_path, apps)
    git, sent = FakeGit({REPO_A: heads(SHA[1]), REPO_B: heads(SHA[2])}), Recorder()

    summary = run(runtime, git, sent)

    assert len(git.calls) == 2 and summary.ls_remote_calls == 2 and summary.repos_checked == 2
    assert {normalize_repo_url(u) for u in git.calls} == {"github.com/acme/apps", "gitlab.example.com/platform/infra"}
    assert len(summary.apps_refreshed) == 65  # a repository never seen before: every app refreshed once
    assert summary.errors == []


def test_config_source_repo_is_listed_once_with_the_apps_of_the_same_repo(tmp_path: Path) -> None:
    runtime = StubRuntime([application("a", REPO_A), application("b", REPO_B)],
                          config="https://github.com/acme/apps#main:config")
    git, sent = FakeGit({REPO_A: heads(SHA[1]), REPO_B: heads(SHA[2])}), Recorder()

    summary = run(runtime, git, sent)  # type: ignore[arg-type]

    assert summary.ls_remote_calls == 2

    runtime.config_spec = f"{REPO_C}#main:config"
    git.refs[normalize_repo_url(REPO_C)] = heads(SHA[3])
    assert run(runtime, git, Recorder()).ls_remote_calls == 3  # type: ignore[arg-type]


# --- what moved ------------------------------------------------------------------------------------------


def test_moved_head_refreshes_only_the_apps_tracking_it(tmp_path: Path) -> None:
    apps = [application("web", REPO_A, "main"), application("api", REPO_A, "HEAD"),
            application("stable", REPO_A, "v1"), application("dev", REPO_A, "dev"),
            application("infra", REPO_B, "main")]
    runtime = make_runtime(tmp_path, apps)
    git = FakeGit({REPO_A: heads(SHA[1]), REPO_B: heads(SHA[2])})
    run(runtime, git, Recorder())
    reconciled(runtime, "web", "api", "stable", "dev", "infra")

    git.move(REPO_A, "refs/heads/main", SHA[3])
    git.move(REPO_A, "HEAD", SHA[3])
    summary = run(runtime, git, sent := Recorder())

    assert summary.apps_refreshed == ["api", "web"]
    assert sent.reasons() == {"api": f"HEAD moved to {SHA[3][:12]}", "web": f"main moved to {SHA[3][:12]}"}
    assert {r.revision for r in sent.refreshes} == {SHA[3]}
    assert RefCache(runtime.store).load(REPO_A)["refs/heads/main"] == SHA[3]


def test_unchanged_heads_refresh_nothing(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, [application("web", REPO_A), application("infra", REPO_B, "v1")])
    git = FakeGit({REPO_A: heads(SHA[1]), REPO_B: heads(SHA[2])})
    assert run(runtime, git, Recorder()).apps_refreshed == ["infra", "web"]
    reconciled(runtime, "web", "infra")

    summary = run(runtime, git, sent := Recorder())

    assert sent.refreshes == [] and summary.apps_refreshed == [] and summary.errors == []
    assert summary.ls_remote_calls == 2


def test_a_new_app_on_a_known_repo_is_refreshed_once(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, [application("web", REPO_A)])
    git = FakeGit({REPO_A: heads(SHA[1])})
    run(runtime, git, Recorder())
    reconciled(runtime, "web")
    # the next call's Runtime reads the config anew: one more app on the same, unchanged repo
    store = runtime.store
    runtime = make_runtime(tmp_path, [application("web", REPO_A), application("new", REPO_A)])
    runtime.store = store

    summary = run(runtime, git, sent := Recorder())

    assert summary.apps_refreshed == ["new"] and sent.reasons() == {"new": "never reconciled"}


def test_a_revision_that_disappears_is_refreshed_so_reconcile_can_report_it(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, [application("stable", REPO_A, "v1")])
    git = FakeGit({REPO_A: heads(SHA[1])})
    run(runtime, git, Recorder())
    reconciled(runtime, "stable")

    del git.refs[normalize_repo_url(REPO_A)]["refs/tags/v1"]
    summary = run(runtime, git, sent := Recorder())

    assert summary.apps_refreshed == ["stable"] and sent.reasons() == {"stable": "v1 no longer resolves"}


# --- drift sweep -----------------------------------------------------------------------------------------


def test_drift_sweep_refreshes_automated_and_self_healing_apps_not_refreshed_already(tmp_path: Path) -> None:
    apps = [application("manual", REPO_A), application("auto", REPO_A, automated=True),
            application("heal", REPO_B, self_heal=True), application("moved", REPO_B, "dev", self_heal=True)]
    runtime = make_runtime(tmp_path, apps)
    git = FakeGit({REPO_A: heads(SHA[1]), REPO_B: heads(SHA[2])})
    run(runtime, git, Recorder())
    reconciled(runtime, "manual", "auto", "heal", "moved")

    git.move(REPO_B, "refs/heads/dev", SHA[4])
    summary = run(runtime, git, sent := Recorder())

    assert summary.apps_refreshed == ["moved"]
    assert summary.drift_checked == ["auto", "heal"]
    assert sent.reasons() == {"moved": f"dev moved to {SHA[4][:12]}", "auto": DRIFT_SWEEP, "heal": DRIFT_SWEEP}
    assert [r.app for r in sent.refreshes] == ["moved", "auto", "heal"]  # git changes first


# --- failures and the time bound -------------------------------------------------------------------------


def test_a_failing_repo_is_an_error_and_the_others_go_on(tmp_path: Path) -> None:
    apps = [application("web", REPO_A, self_heal=True), application("infra", REPO_B, self_heal=True),
            application("c", REPO_C)]
    runtime = make_runtime(tmp_path, apps)
    git = FakeGit({REPO_A: heads(SHA[1]), REPO_B: heads(SHA[2]), REPO_C: heads(SHA[3])})
    git.failing.add(normalize_repo_url(REPO_B))

    summary = run(runtime, git, sent := Recorder())

    assert summary.ls_remote_calls == 3
    assert summary.apps_refreshed == ["c", "web"]
    assert "infra" not in {r.app for r in sent.refreshes}  # not even by the drift sweep
    assert len(summary.errors) == 1 and "platform/infra" in summary.errors[0]
    assert RefCache(runtime.store).load(REPO_B) == {}
    assert RefCache(runtime.store).load(REPO_C) == heads(SHA[3])


def test_a_failed_dispatch_is_kept_pending_and_goes_first_next_tick(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, [application("web", REPO_A), application("infra", REPO_B)])
    git = FakeGit({REPO_A: heads(SHA[1]), REPO_B: heads(SHA[2])})
    run(runtime, git, Recorder())
    reconciled(runtime, "web", "infra")
    git.move(REPO_A, "refs/heads/main", SHA[5])
    git.move(REPO_B, "refs/heads/main", SHA[6])

    summary = run(runtime, git, Recorder(fail=["web"]))

    assert summary.apps_refreshed == ["infra"] and summary.errors == ["app web: publish failed"]
    assert RefCache(runtime.store).load(REPO_A)["refs/heads/main"] == SHA[5]
    assert run(runtime, git, again := Recorder()).apps_refreshed == ["web"]
    assert again.reasons() == {"web": f"main moved to {SHA[5][:12]}"}
    assert again.refreshes[0].revision == SHA[5]
    assert run(runtime, git, third := Recorder()).apps_refreshed == [] and third.refreshes == []


def test_dispatching_stops_when_the_time_budget_is_spent_and_reports_what_is_left(tmp_path: Path) -> None:
    apps = [application(f"a{i:02}", REPO_A) for i in range(10)] + [application("z", REPO_B, self_heal=True)]
    runtime = make_runtime(tmp_path, apps)
    git = FakeGit({REPO_A: heads(SHA[1]), REPO_B: heads(SHA[2])})
    clock = [1000.0]
    sent = Recorder(clock=clock, cost=1.0)  # each refresh costs one second of the fake clock

    summary = run(runtime, git, sent, max_seconds=5, batch_size=2, now=lambda: clock[0])

    # batches of two start at t=0, 2, 4; at t=6 the budget (5s) is spent; the repositories take turns
    assert [r.app for r in sent.refreshes] == ["a00", "z", "a01", "a02", "a03", "a04"]
    assert summary.left == ["a05", "a06", "a07", "a08", "a09"]
    assert any("time budget" in e for e in summary.errors)
    assert summary.apps_refreshed == ["a00", "a01", "a02", "a03", "a04", "z"]
    assert summary.elapsed == 6.0
    assert RefCache(runtime.store).load(REPO_A) == heads(SHA[1])

    # the next tick starts with what was left, so a tick that is always too short still progresses
    reconciled(runtime, "z", *(f"a{i:02}" for i in range(5)))
    summary = run(runtime, git, sent := Recorder(clock=clock, cost=1.0), max_seconds=5, batch_size=2,
                  now=lambda: clock[0])
    assert [r.app for r in sent.refreshes] == ["a05", "a06", "a07", "a08", "a09", "z"]  # z: its drift check
    assert summary.left == [] and summary.errors == []
    assert summary.drift_checked == ["z"]
    assert summary.apps_refreshed == ["a05", "a06", "a07", "a08", "a09"]


def test_the_apps_of_several_repositories_are_sent_one_of_each_in_turn(tmp_path: Path) -> None:
    """Sent repository after repository, the first apps of one repository ran on every instance at once and
    each fetched the same snapshot; in turns, the next app of a repository comes after its first step."""
    apps = ([application(f"a{i}", REPO_A) for i in range(3)] + [application(f"b{i}", REPO_B) for i in range(2)]
            + [application("c0", REPO_C)])
    runtime = make_runtime(tmp_path, apps)
    git = FakeGit({REPO_A: heads(SHA[1]), REPO_B: heads(SHA[2]), REPO_C: heads(SHA[3])})

    run(runtime, git, sent := Recorder())

    order = [r.app for r in sent.refreshes]
    assert sorted(order) == ["a0", "a1", "a2", "b0", "b1", "c0"]
    firsts = {order.index(a) for a in ("a0", "b0", "c0")}
    assert firsts == {0, 1, 2}, order  # each repository's first app before any repository's second
    assert order.index("a0") < order.index("a1") < order.index("a2") and order.index("b0") < order.index("b1")


def test_jitter_sleeps_a_random_time_within_the_bound(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, [application("web", REPO_A)])
    slept: list[float] = []

    poll(runtime, Recorder(), jitter_seconds=7, rng=random.Random(4), sleep=slept.append,
         ls_remote=FakeGit({REPO_A: heads(SHA[1])}))

    assert len(slept) == 1 and 0 < slept[0] <= 7
    assert slept[0] == random.Random(4).uniform(0, 7)


def test_a_broken_config_file_is_reported_and_the_other_apps_are_still_polled(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, [application("web", REPO_A)])
    (tmp_path / "config" / "broken.yaml").write_text("kind: Application\n")

    summary = run(runtime, FakeGit({REPO_A: {"refs/heads/main": "a" * 40}}), sent := Recorder())

    assert [r.app for r in sent.refreshes] == ["web"]
    assert "broken.yaml" in summary.errors[0] and "unsupported object" in summary.errors[0]


# --- config source in git --------------------------------------------------------------------------------


class StubRuntime:
    """Runtime-like: a git config source (loading it is Runtime's job, tested elsewhere)."""

    def __init__(self, apps: list[dict[str, Any]], config: str) -> None:
        from tidecd.config.load import _assemble, _parse_document

        errors: list[str] = []
        items = [_parse_document(a, "test", 1, errors) for a in apps]
        assert not errors, errors
        self._config: Config = _assemble([i for i in items if i is not None], errors)
        self.config_spec = config
        self.store = MemoryStore()
        self.config_heads: dict[str, str] = {}

    @property
    def settings(self) -> Settings:
        return Settings(config=self.config_spec)

    def config(self) -> Config:
        return self._config

    def repo_credentials(self, url: str) -> None:
        return None


def test_a_moved_config_source_refreshes_every_app(tmp_path: Path) -> None:
    apps = [application("web", REPO_A), application("infra", REPO_B, "v1")]
    runtime = StubRuntime(apps, config=f"{REPO_C}#main:config")
    git = FakeGit({REPO_A: heads(SHA[1]), REPO_B: heads(SHA[2]), REPO_C: heads(SHA[3])})
    run(runtime, git, Recorder())  # type: ignore[arg-type]
    for name in ("web", "infra"):
        runtime.store.write(state_key(name), b"{}")
    assert run(runtime, git, Recorder()).apps_refreshed == []  # type: ignore[arg-type]

    git.move(REPO_C, "refs/heads/main", SHA[7])
    summary = run(runtime, git, sent := Recorder())  # type: ignore[arg-type]

    assert summary.config_changed is True
    assert summary.apps_refreshed == ["infra", "web"]
    assert set(sent.reasons().values()) == {"config source changed"}


def test_each_refresh_carries_the_config_commits_the_poll_loaded(tmp_path: Path) -> None:
    """A step within HEAD_FRESH_SECONDS loads the config at them, without an ls-remote of its own."""
    apps = [application("web", REPO_A), application("infra", REPO_B, "v1")]
    runtime = StubRuntime(apps, config=f"{REPO_C}#main:config")
    runtime.config_heads = {f"{REPO_C}#main": SHA[3]}  # as Runtime's config load records it
    git = FakeGit({REPO_A: heads(SHA[1]), REPO_B: heads(SHA[2]), REPO_C: heads(SHA[3])})
    run(runtime, git, sent := Recorder())  # type: ignore[arg-type]

    assert sorted(r.app for r in sent.refreshes) == ["infra", "web"]
    for refresh in sent.refreshes:
        assert refresh.config_heads(refresh.config_at + 1) == {f"{REPO_C}#main": SHA[3]}
        assert refresh.config_heads(refresh.config_at + HEAD_FRESH_SECONDS + 1) == {}  # later: resolved again
        assert decode_refresh(event_data(refresh.to_json())) == refresh
    continuation = Refresh("web", "next", token="t", config=((f"{REPO_C}#main", SHA[3]),), config_at=1.0)
    assert continuation.config_heads(2.0) == {}


@pytest.mark.parametrize("spec", ["https://github.com/acme/apps#dev:config", "git@github.com:acme/apps.git#dev"])
def test_a_config_source_on_another_branch_of_an_app_repo(spec: str) -> None:
    runtime = StubRuntime([application("web", REPO_A)], config=spec)
    git = FakeGit({REPO_A: heads(SHA[1])})
    run(runtime, git, Recorder())  # type: ignore[arg-type]
    runtime.store.write(state_key("web"), b"{}")

    git.move(REPO_A, "refs/heads/dev", SHA[2])
    summary = run(runtime, git, Recorder())  # type: ignore[arg-type]

    assert summary.ls_remote_calls == 1
    assert summary.config_changed is True and summary.apps_refreshed == ["web"]


def test_pending_refreshes_wait_for_their_repo_and_vanish_with_their_app(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, [application("web", REPO_A), application("infra", REPO_B)])
    git = FakeGit({REPO_A: heads(SHA[1]), REPO_B: heads(SHA[2])})
    run(runtime, git, Recorder())
    reconciled(runtime, "web", "infra")
    runtime.store.write("state/poll-pending.json", json.dumps({"refreshes": [
        {"app": "web", "reason": "main moved to 111", "revision": SHA[1]},
        {"app": "infra", "reason": "main moved to 222", "revision": SHA[2]},
        {"app": "removed-app", "reason": "main moved to 222", "revision": SHA[2]}]}).encode())
    git.failing.add(normalize_repo_url(REPO_A))

    summary = run(runtime, git, sent := Recorder())

    assert sent.reasons() == {"infra": "main moved to 222"} and summary.apps_refreshed == ["infra"]
    left = json.loads(runtime.store.read("state/poll-pending.json").data)["refreshes"]  # type: ignore[union-attr]
    assert [e["app"] for e in left] == ["web"]

    git.failing.clear()
    assert run(runtime, git, Recorder()).apps_refreshed == ["web"]
    assert json.loads(runtime.store.read("state/poll-pending.json").data) == {"refreshes": []}  # type: ignore[union-attr]


# --- the dispatchers the use cases hand refreshes to -----------------------------------------------------


def test_direct_dispatcher_runs_the_real_reconcile_after_answering(tmp_path: Path) -> None:
    from tidecd.triggers.scheduler import LocalScheduler

    runtime = make_runtime(tmp_path, [application("web", REPO_A)])
    scheduler = LocalScheduler(workers=1)
    factory = lambda: Runtime(settings=runtime.settings, store=runtime.store)  # noqa: E731
    failures = DirectDispatcher(factory, store=runtime.store, scheduler=scheduler).dispatch(
        [Refresh("ghost", "webhook")])

    assert failures == {}
    assert scheduler.wait_idle(30)
    # the app is not in the config: the real reconcile records that in its state instead of raising
    state = json.loads(runtime.store.read(state_key("ghost")).data)  # type: ignore[union-attr]
    assert "not found" in json.dumps(state["conditions"])
    assert runtime.store.read("pending/ghost") is None  # the coalescing record is finished


def test_dispatcher_for_picks_pubsub_only_when_a_topic_is_set(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, [])
    assert isinstance(dispatcher_for(runtime), DirectDispatcher)

    runtime.settings.refresh_topic = "projects/acme-prod/topics/tidecd-refresh"
    chosen = dispatcher_for(runtime)
    assert isinstance(chosen, PubSubDispatcher) and chosen.topic == "projects/acme-prod/topics/tidecd-refresh"


def event_data(data: bytes, **attributes: str) -> dict[str, Any]:
    return {"message": {"data": base64.b64encode(data).decode(), "attributes": attributes,
                        "messageId": "1"}, "subscription": "projects/p/subscriptions/reconcile"}


def test_decode_refresh_round_trip_and_attribute_fallback() -> None:
    refresh = Refresh("web", "poll: main moved", SHA[1])

    assert decode_refresh(event_data(refresh.to_json(), app="web")) == refresh
    assert decode_refresh(event_data(b"", app="web")) == Refresh("web", "")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "no `message`"),
        ({"message": {"data": "%%%"}}, "not base64"),
        (event_data(b"not json"), "not JSON"),
        (event_data(b"[1]"), "not a JSON object"),
        (event_data(b'{"reason": "x"}'), "no app name"),
        (event_data(b'{"app": "web", "reason": 3}'), "must be strings"),
        (event_data(b'{"app": "web", "config": ["x"]}'), "config must map"),
        (event_data(b'{"app": "web", "config": {"https://git.example.com/c#main": "HEAD"}}'), "40 hex digits"),
        (event_data(b'{"app": "web", "configAt": "soon"}'), "configAt must be a number"),
    ],
)
def test_decode_refresh_refuses_bad_messages_permanently(data: dict[str, Any], message: str) -> None:
    with pytest.raises(BadRefreshMessage, match=message):
        decode_refresh(data)


def test_a_running_operation_whose_continuation_was_lost_is_resumed(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from tidecd.triggers import pending
    from tidecd.usecases import poll as poller

    runtime = make_runtime(tmp_path, [application("web", REPO_A), application("api", REPO_A)])
    git, sent = FakeGit({REPO_A: heads(SHA[1])}), Recorder()
    reconciled(runtime, "web", "api")
    run(runtime, git, sent)  # the repository is seen: nothing to refresh from now on
    sent.refreshes.clear()
    pending.record_continuation(runtime.store, "web", 5.0, "wave 1: waiting for Deployment/web/web", "t1",
                                now=lambda: 1000.0)
    pending.record_continuation(runtime.store, "gone", 5.0, "wave 0", "t3", now=lambda: 0.0)  # not in config
    monkeypatch.setattr(poller, "now_unix", lambda: 1000.0 + 5.0 + pending.OVERDUE_GRACE + 1)
    pending.record_continuation(runtime.store, "api", 5.0, "wave 0", "t2",
                                now=lambda: 1000.0 + pending.OVERDUE_GRACE)  # recent: still on its way

    summary = run(runtime, git, sent)

    assert summary.resumed == ["web"]
    assert sent.reasons() == {"web": "resume: continuation lost (wave 1: waiting for Deployment/web/web)"}


# --- argocd-cm timeout.reconciliation ---------------------------------------------------------------------


def argocd_cm(tmp_path: Path, **data: str) -> None:
    (tmp_path / "config" / "argocd-cm.yaml").write_text(yaml.safe_dump(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argocd-cm"}, "data": data}))


def test_timeout_reconciliation_spaces_the_drift_sweep_and_zero_turns_it_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tidecd.usecases import poll as poll_module

    clock = [1_800_000_000.0]
    monkeypatch.setattr(poll_module, "now_unix", lambda: clock[0])
    runtime = make_runtime(tmp_path, [application("auto", REPO_A, automated=True)])
    argocd_cm(tmp_path, **{"timeout.reconciliation": "10m"})
    git = FakeGit({REPO_A: heads(SHA[1])})
    run(runtime, git, Recorder())
    reconciled(runtime, "auto")
    assert run(runtime, git, Recorder()).drift_checked == ["auto"]  # never swept: due
    clock[0] += 180  # the next tick, 3 minutes later: not due yet
    runtime = Runtime(settings=runtime.settings, store=runtime.store)
    assert run(runtime, git, Recorder()).drift_checked == []
    clock[0] += 420  # 10 minutes after the sweep
    assert run(runtime, git, Recorder()).drift_checked == ["auto"]
    git.move(REPO_A, "refs/heads/main", SHA[3])  # a git change is found on the next tick regardless
    clock[0] += 60
    assert run(runtime, git, sent := Recorder()).apps_refreshed == ["auto"]
    assert sent.reasons()["auto"].startswith("main moved")
    argocd_cm(tmp_path, **{"timeout.reconciliation": "0s"})
    runtime = Runtime(settings=runtime.settings, store=runtime.store)
    clock[0] += 3600
    assert run(runtime, git, Recorder()).drift_checked == []
