"""What the 1,000-app scenario (bench/scale.py) showed costly, fixed and held here:

- each reconcile step did its own ls-remote: the poll now hands the head it resolved along (fresh for
  `HEAD_FRESH_SECONDS`, and later while the repository's recorded heads still resolve to it), so a tick
  costs one ls-remote per repository, not one per app, however long its fan-out takes;
- a no-op step rewrote the app's state (only `reconciled_at` changed), and the poll rewrote every
  repository's unchanged heads: neither writes now.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakecluster import CountingStore, FakeCluster, FakeGit, application, fake_runtime
from tests.unit.test_poll import REPO_A, REPO_B, SHA, Recorder, heads, make_runtime
from tests.unit.test_poll import FakeGit as FakeLsRemote
from tests.unit.test_poll import application as app_doc
from tidecd.base.clock import FakeClock
from tidecd.base.model import HealthStatus
from tidecd.state import app as app_state
from tidecd.step.reconcile import reconcile
from tidecd.triggers.dispatch import HEAD_FRESH_SECONDS, BadRefreshMessage, Refresh, decode_refresh
from tidecd.usecases.poll import DRIFT_SWEEP, poll


def configmap(name: str, value: str = "v") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": value}}


@pytest.fixture()
def setup(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeCluster, CountingStore, FakeGit, Any]]:
    cluster, store, git = FakeCluster(), CountingStore(), FakeGit()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    yield cluster, store, git, fake_runtime(cluster, store, application(automated=True), git)


def test_a_noop_step_of_a_settled_app_writes_no_state(setup: Any) -> None:
    cluster, store, git, runtime = setup
    git.push([configmap("settings")])
    clock = FakeClock()
    reconcile(runtime, "app", clock=clock)  # the automated sync
    state, generation = app_state.load(store, "app")
    assert state.sync_status == "Synced" and state.health == "Healthy" and generation

    store.writes.clear()
    clock.advance(30)
    outcome = reconcile(runtime, "app", clock=clock)

    assert outcome.state is not None and outcome.state.sync_status == "Synced"
    assert [k for k in store.writes if k.startswith("state/")] == []
    assert app_state.load(store, "app")[1] == generation

    git.push([configmap("settings", "changed")])  # something to record: written again
    reconcile(runtime, "app", clock=clock)
    assert "state/apps/app.json" in store.writes and app_state.load(store, "app")[0].revision == git.head


def test_a_step_given_the_polls_head_renders_it_without_resolving(setup: Any) -> None:
    cluster, store, git, runtime = setup
    first = git.push([configmap("settings", "one")])
    git.push([configmap("settings", "two")])  # the remote's head now

    reconcile(runtime, "app", clock=FakeClock(), head=first)
    assert app_state.load(store, "app")[0].revision == first

    reconcile(runtime, "app", clock=FakeClock(), head="abc1234")  # not a full sha: resolved as usual
    assert app_state.load(store, "app")[0].revision == git.head


def test_a_refresh_head_is_used_only_while_fresh_and_never_by_a_continuation() -> None:
    sha = "a" * 40
    fresh = Refresh("web", DRIFT_SWEEP, sha, resolved_at=1000.0)
    assert fresh.head(1000.0 + HEAD_FRESH_SECONDS - 1) == sha
    assert fresh.head(1000.0 + HEAD_FRESH_SECONDS + 1) == ""  # a late redelivery resolves again
    assert Refresh("web", "webhook: push", sha).head(1000.0) == ""  # no resolved_at: not a head
    assert Refresh("web", "continue", sha, token="t", resolved_at=1000.0).head(1000.0) == ""

    event = {"message": {"data": base64.b64encode(fresh.to_json()).decode(), "attributes": fresh.attributes()}}
    assert decode_refresh(event) == fresh
    bad = {"message": {"data": base64.b64encode(b'{"app": "web", "resolvedAt": "soon"}').decode()}}
    with pytest.raises(BadRefreshMessage, match="resolvedAt"):
        decode_refresh(bad)


def test_a_noop_tick_hands_each_app_its_head_and_saves_no_unchanged_heads(tmp_path: Path) -> None:
    apps = [app_doc(f"a{i}", REPO_A, automated=True) for i in range(6)]
    apps += [app_doc(f"b{i}", REPO_B, "v1", automated=True) for i in range(4)]
    runtime = make_runtime(tmp_path, apps)
    store = CountingStore()
    runtime.store = store
    git = FakeLsRemote({REPO_A: heads(SHA[1]), REPO_B: heads(SHA[2])})
    poll(runtime, Recorder(), jitter_seconds=0, ls_remote=git)  # first seen: heads saved
    assert sum(k.startswith("state/repos/") for k in store.writes) == 2
    for doc in apps:
        app_state.save(store, app_state.AppState(app=doc["metadata"]["name"]))

    store.writes.clear()
    sent = Recorder()
    summary = poll(runtime, sent, jitter_seconds=0, ls_remote=git)

    assert summary.ls_remote_calls == 2 and len(summary.drift_checked) == 10
    assert [k for k in store.writes if k.startswith("state/")] == []
    by_app = {r.app: r for r in sent.refreshes}
    assert by_app["a3"].revision == SHA[1] and by_app["b2"].revision == SHA[9]  # the tag v1 resolves to SHA[9]
    assert all(r.resolved_at > 0 and r.head(r.resolved_at) == r.revision for r in sent.refreshes)

    git.move(REPO_A, "refs/heads/main", SHA[3])
    store.writes.clear()
    poll(runtime, Recorder(), jitter_seconds=0, ls_remote=git)
    assert len([k for k in store.writes if k.startswith("state/repos/")]) == 1  # only the moved repository


# -- a warm instance: the config directory by stat, the API clients kept ----------------------------------


def test_the_config_fingerprint_reads_only_recently_modified_files(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from tidecd import runtime as rt

    app = tmp_path / "app.yaml"
    app.write_text("name: one\n")
    fresh = rt.fingerprint(tmp_path)
    app.write_text("name: two\n")  # same size, maybe the same mtime: a racy file is hashed
    assert rt.fingerprint(tmp_path) != fresh

    os.utime(app, (1_000_000_000, 1_000_000_000))  # an old file: its stat is enough
    old = rt.fingerprint(tmp_path)

    def no_reading(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an old file was read")

    monkeypatch.setattr(rt, "open", no_reading, raising=False)
    assert rt.fingerprint(tmp_path) == old
    os.utime(app, (1_000_000_100, 1_000_000_100))  # touched: another stamp
    assert rt.fingerprint(tmp_path) != old


def test_the_config_fingerprint_sees_every_folder_and_link(tmp_path: Path) -> None:
    import os

    from tidecd import runtime as rt

    (tmp_path / "team" / "apps").mkdir(parents=True)
    deep = tmp_path / "team" / "apps" / "web.yaml"
    deep.write_text("name: web\n")
    os.utime(deep, (1_000_000_000, 1_000_000_000))
    before = rt.fingerprint(tmp_path)
    assert rt.fingerprint(tmp_path) == before
    deep.write_text("name: web, longer\n")
    os.utime(deep, (1_000_000_000, 1_000_000_000))  # same mtime, another size
    changed = rt.fingerprint(tmp_path)
    assert changed != before
    (tmp_path / "team" / "new").mkdir()  # a new (empty) folder
    assert rt.fingerprint(tmp_path) != changed
    grown = rt.fingerprint(tmp_path)
    (tmp_path / "link.yaml").symlink_to("team/apps/web.yaml")
    linked = rt.fingerprint(tmp_path)
    assert linked != grown
    (tmp_path / "link.yaml").unlink()
    (tmp_path / "link.yaml").symlink_to("team/new")
    assert rt.fingerprint(tmp_path) != linked  # where a link points is part of it
    assert rt.fingerprint(tmp_path / "missing") == rt.fingerprint(tmp_path / "missing-too")


def _kubeconfig(path: Path, token: str) -> None:
    import yaml

    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))


def test_api_clients_are_kept_per_kubeconfig_and_per_cluster_secret(tmp_path: Path) -> None:
    import json
    import os

    from tidecd.clients.cluster import KubeCluster, client_for_secret

    config = tmp_path / "kubeconfig"
    _kubeconfig(config, "first")
    one, two = KubeCluster.from_kubeconfig(str(config)), KubeCluster.from_kubeconfig(str(config))
    assert one.api is two.api and one is not two  # one connection pool; write counters stay apart
    _kubeconfig(config, "second-token")
    os.utime(config, ns=(os.stat(config).st_mtime_ns + 1_000_000, os.stat(config).st_mtime_ns + 1_000_000))
    assert KubeCluster.from_kubeconfig(str(config)).api is not one.api  # a changed file: a new client

    def secret(token: str) -> dict[str, Any]:
        return {"metadata": {"name": "prod"}, "stringData": {
            "server": "https://prod.example:6443", "config": json.dumps({"bearerToken": token})}}

    assert client_for_secret(secret("a")) is client_for_secret(secret("a"))
    assert client_for_secret(secret("a")) is not client_for_secret(secret("b"))  # a rotated token


def test_an_older_head_is_used_while_the_last_ticks_record_still_resolves_to_it(setup: Any) -> None:
    """A no-op tick of 1,000 apps fans out for longer than HEAD_FRESH_SECONDS: the later steps still use the
    poll's head (no ls-remote of their own) while `state/repos/` says no later tick saw another."""
    from tidecd.source import RefCache
    from tidecd.triggers.dispatch import HEAD_CONFIRMED_SECONDS, confirmed_head

    _cluster, store, _git, runtime = setup
    url, sha, newer = "https://git.example/repo.git", "a" * 40, "b" * 40
    late = Refresh("app", DRIFT_SWEEP, sha, resolved_at=1000.0)
    now = 1000.0 + HEAD_FRESH_SECONDS + 30
    assert late.head(now) == "" and confirmed_head(runtime, late, now) == "", "no record of the repo: resolve"
    RefCache(store).save(url, {"refs/heads/main": sha, "HEAD": sha})
    assert confirmed_head(runtime, late, now) == sha
    assert confirmed_head(runtime, late, 1000.0 + HEAD_CONFIRMED_SECONDS + 1) == "", "too old even so"
    assert confirmed_head(runtime, Refresh("app", "continue", sha, token="t", resolved_at=1000.0), now) == ""
    assert confirmed_head(runtime, Refresh("app", "webhook: push", sha), now) == "", "not a poll's head"
    RefCache(store).save(url, {"refs/heads/main": newer, "HEAD": newer})  # a later tick saw a newer commit
    assert confirmed_head(runtime, late, now) == ""


def test_a_health_follow_up_renders_the_commit_its_sync_deployed_without_resolving(setup: Any) -> None:
    """Half the steps of a cold start are health follow-ups: they take the synced commit from the state
    instead of an ls-remote. Anything else (no continuation, a settled app, a failed operation) resolves."""
    from tidecd.triggers.dispatch import followed_head

    cluster, store, git, runtime = setup
    web = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
           "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}
    deployed = git.push([web])
    follow_up = Refresh("app", "continue: automated sync", not_before=1.0, token="t1")
    assert followed_head(runtime, follow_up) == "", "no operation yet"

    outcome = reconcile(runtime, "app", clock=FakeClock())  # the automated sync; no controller runs here
    state = outcome.state
    assert state is not None and state.operation is not None and state.operation.phase == "Succeeded"
    assert state.health == "Progressing" and outcome.continue_after is not None

    assert followed_head(runtime, follow_up) == deployed
    assert followed_head(runtime, Refresh("app", "webhook: push")) == "", "not a continuation: resolve"
    git.push([web, configmap("new")])  # a newer commit is the webhook's or the poll's to find
    assert followed_head(runtime, follow_up) == deployed
    state.health = HealthStatus.HEALTHY
    app_state.save(store, state, if_generation_match=app_state.load(store, "app")[1])
    assert followed_head(runtime, follow_up) == "", "settled: the next step is a sweep, which resolves"
