"""Rollback through git, the parts without a server: the revert record, the tree a revert commits, and the
image references a merged revert refuses. (The whole path, with git, GitHub and a cluster: tests/e2e/test_revert.)"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from dulwich.objects import Blob, Commit, ObjectID, Tree
from dulwich.repo import MemoryRepo

from tidecd.base.model import HealthStatus, ResourceKey
from tidecd.clients.registry import parse_image
from tidecd.clients.store import LocalStore, MemoryStore
from tidecd.images import state as images_state
from tidecd.images import writeback
from tidecd.notify.events import Seen, events
from tidecd.runtime import Runtime, Settings
from tidecd.state import app as app_state
from tidecd.state import autorollback as autorollback_state
from tidecd.state import revert as revert_state
from tidecd.state.app import AppState, HistoryEntry, Operation, OperationPhase, OperationRequest, TaskPhase, TaskResult
from tidecd.state.autorollback import AutoRollback
from tidecd.state.revert import Pull, Revert
from tidecd.step import autorollback
from tidecd.usecases import api, revert
from tidecd.usecases.images import refused_versions

RECORD = Revert(app="web", mode="pr", phase="open", repo="https://git.example/octo/web.git", base="main",
                commit="c" * 40, reverted="b" * 40, revision="a" * 40, history_id=3,
                expected=(("app", "d" * 40), ("values/web.yaml", "")), branch="tidecd/revert-web-aaaaaaaaaaaa",
                pull=Pull("octo/web", 7, "https://github.com/octo/web/pull/7"), opened_at="2026-12-02T09:00:00Z")


def test_the_record_reads_back_as_written_and_says_where_to_look(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    revert_state.save(store, RECORD, if_generation_match=0)
    loaded, generation = revert_state.load(store, "web")
    assert loaded == RECORD and generation > 0
    assert loaded.message() == "rolled back, waiting for the revert to merge: https://github.com/octo/web/pull/7"
    assert [r.app for r in revert_state.holding(store)] == ["web"]
    closed = dataclasses.replace(RECORD, phase="closed")
    assert "closed without merging" in closed.message() and closed.holding
    merged = dataclasses.replace(RECORD, phase="merged", settled_at="2026-12-02T10:00:00Z")
    revert_state.save(store, merged, if_generation_match=generation)
    assert revert_state.holding(store) == [] and not merged.holding
    assert merged.summary()["url"] == RECORD.pull.url and merged.summary()["pull"] == 7
    pushed = dataclasses.replace(RECORD, mode="push", branch="", pull=Pull())
    assert pushed.message() == f"rolled back, waiting for the revert to merge: {'c' * 12} on main"


def test_a_newer_field_is_ignored_and_an_unreadable_record_reads_as_none(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.write(revert_state.key("web"), b'{"app": "web", "future": 1}')
    assert revert_state.load(store, "web")[0] is None  # required fields missing: not a revert
    data = {**RECORD.to_json(), "future": {"x": 1}}
    assert Revert.from_json(data) == RECORD


def _tree(repo: MemoryRepo, files: dict[str, bytes]) -> bytes:
    root = Tree()
    folders: dict[str, Tree] = {}
    for path, data in sorted(files.items()):
        blob = Blob.from_string(data)
        repo.object_store.add_object(blob)
        folder, _, name = path.rpartition("/")
        target = folders.setdefault(folder, Tree()) if folder else root
        target.add(name.encode(), 0o100644, blob.id)
    for folder, tree in folders.items():
        repo.object_store.add_object(tree)
        root.add(folder.encode(), 0o040000, tree.id)
    repo.object_store.add_object(root)
    return bytes(root.id)


def _commit(repo: MemoryRepo, tree: bytes) -> Commit:
    commit = Commit()
    commit.tree, commit.parents = tree, []
    commit.author = commit.committer = b"T <t@example>"
    commit.author_time = commit.commit_time = commit.author_timezone = commit.commit_timezone = 0
    commit.message = b"x"
    repo.object_store.add_object(commit)
    return commit


def test_a_revert_restores_a_folder_and_removes_what_the_old_tree_did_not_have() -> None:
    repo = MemoryRepo()
    old = _tree(repo, {"app/web.yaml": b"image: 1.0.0\n", "other/x.yaml": b"old other\n"})
    head = _commit(repo, _tree(repo, {"app/web.yaml": b"image: 1.0.0\n", "app/.argocd-source-web.yaml": b"1.1.0\n",
                                      "other/x.yaml": b"new other\n", "values.yaml": b"tag: 1.1.0\n"}))
    wanted = {path: writeback.tree_entry(repo, old, path) for path in ("app", "values.yaml")}
    assert wanted["values.yaml"] is None and wanted["app"] is not None

    sha = writeback._commit(repo, head, wanted, "Revert", writeback.Author())

    made = repo.object_store[ObjectID(sha)]
    assert isinstance(made, Commit)
    tree = bytes(made.tree)
    assert writeback.tree_entry(repo, tree, "app") == wanted["app"]  # the app's folder as it was
    assert writeback.tree_entry(repo, tree, "values.yaml") is None  # removed: the old tree had none
    other = writeback.tree_entry(repo, tree, "other/x.yaml")
    assert other is not None and repo.object_store[ObjectID(other[1])].as_raw_string() == b"new other\n"
    assert writeback._commit(repo, made, wanted, "again", writeback.Author()) == b""  # no change


def test_a_merged_revert_refuses_what_it_took_out_and_a_persons_unpin_forgets_it(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    images_state.pin(store, "web", by="rollback", revision="a" * 40, deployed_at="2026-12-02T09:00:00Z")
    assert images_state.unpin(store, "web", refuse=["r.example/ns/web:1.1.0", "r.example/ns/api@sha256:" + "e" * 64])
    held = images_state.load(store, "web")
    assert held.pin is None and held.refused == ["r.example/ns/api@sha256:" + "e" * 64, "r.example/ns/web:1.1.0"]
    refused = refused_versions(held.refused)
    assert refused[parse_image("r.example/ns/web")] == {"1.1.0"}
    assert refused[parse_image("r.example/ns/api")] == {"sha256:" + "e" * 64}
    images_state.pin(store, "web", by="rollback", revision="a" * 40, deployed_at="2026-12-02T09:00:00Z")
    assert images_state.unpin(store, "web")  # `tidecd image unpin`: a person decides again
    assert images_state.load(store, "web").refused == []


# -- automatic rollback: the rule and the decisions (the step and the cluster: tests/e2e/test_revert) --------


def test_the_auto_rollback_annotation_reads_its_triggers_and_names_what_it_cannot_read() -> None:
    assert autorollback.parse("on-degraded=10m") == autorollback.Rule(600.0, False, "pr")
    assert autorollback.parse(" on-degraded=1h30m , on-postsync-failed, revert=none") == autorollback.Rule(
        5400.0, True, "")
    assert autorollback.parse("on-postsync-failed,revert=push").revert == "push"
    for bad, named in (("on-degraded=soon", "'soon'"), ("on-degraded=0s", "'0s'"), ("on-degraded=200h", "'200h'"),
                       ("revert=squash", "'revert=squash'"), ("revert=pr", "names no trigger"),
                       ("on-failure", "'on-failure'")):
        with pytest.raises(ValueError, match=re.escape(named)) as caught:
            autorollback.parse(bad)
        assert autorollback.ANNOTATION in str(caught.value)


def _state(health: str, phase: str = "Succeeded", revision: str = "b" * 40) -> AppState:
    state = AppState(app="web", revision=revision, health=HealthStatus(health))
    state.operation = Operation(id="op1", revision=revision, phase=OperationPhase(phase),
                                finished_at="2026-12-02T09:00:00Z")
    state.history = [HistoryEntry(1, "a" * 40, "2026-12-02T08:00:00Z", "Succeeded", operation_id="op0"),
                     HistoryEntry(2, "c" * 40, "2026-12-02T08:30:00Z", "Failed", operation_id="opx"),
                     HistoryEntry(3, revision, "2026-12-02T09:00:00Z", phase, operation_id="op1")]
    return state


def test_the_window_starts_when_the_revision_turns_degraded_and_only_then() -> None:
    rule = autorollback.parse("on-degraded=5s")
    empty = AutoRollback("web")
    progressing = autorollback._watched(rule, _state("Progressing"), empty, 100.0)
    assert progressing.watching == "b" * 40 and progressing.degraded_since == 0.0
    degraded = autorollback._watched(rule, _state("Degraded"), progressing, 100.0)
    assert degraded.degraded_since == 100.0
    assert autorollback._watched(rule, _state("Degraded"), degraded, 103.0) == degraded  # the first time is kept
    assert autorollback._due(rule, _state("Degraded"), degraded, 104.9) is None
    assert "Degraded for 5s" in (autorollback._due(rule, _state("Degraded"), degraded, 105.0) or "")
    recovered = autorollback._watched(rule, _state("Healthy"), degraded, 104.0)
    assert recovered.degraded_since == 0.0  # Healthy in between: the window starts over
    other = autorollback._watched(rule, _state("Degraded", revision="d" * 40), degraded, 106.0)
    assert other.watching == "d" * 40 and other.degraded_since == 106.0  # a new revision: a new window


def test_it_goes_back_to_the_newest_good_revision_and_a_failed_postsync_hook_counts_at_once() -> None:
    state = _state("Degraded")
    entry = autorollback._good_entry(state, "b" * 40)
    assert entry is not None and entry.id == 1  # entry 2 failed; entry 3 is the bad revision itself
    assert autorollback._good_entry(_state("Degraded", revision="a" * 40), "a" * 40) is None
    failed = _state("Healthy", phase="Failed")
    assert failed.operation is not None
    failed.operation.results = [TaskResult(ResourceKey("batch", "Job", "ns", "smoke"), "PostSync", hook=True,
                                           phase=TaskPhase.FAILED)]
    rule = autorollback.parse("on-postsync-failed")
    assert autorollback._due(rule, failed, AutoRollback("web"), 0.0) == "its PostSync hook failed"
    assert autorollback._due(autorollback.parse("on-degraded=1s"), failed, AutoRollback("web"), 0.0) is None


def test_an_automatic_rollback_is_notified_once_and_a_persons_is_not() -> None:
    state = _state("Healthy")
    assert state.operation is not None
    state.operation.request = OperationRequest(rollback=True, initiated_by="auto-rollback")
    fired, seen = events(Seen(), state)
    assert [e.trigger for e in fired if e.trigger == "on-auto-rollback"] == ["on-auto-rollback"]
    assert not [e for e in events(seen, state)[0] if e.trigger == "on-auto-rollback"]
    state.operation.request = OperationRequest(rollback=True, initiated_by="dashboard")
    assert not [e for e in events(Seen(), state)[0] if e.trigger == "on-auto-rollback"]


def _api_runtime(tmp_path: Path, annotation: str) -> Runtime:
    (tmp_path / "app.yaml").write_text(yaml.safe_dump({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "web", "annotations": {autorollback.ANNOTATION: annotation}},
        "spec": {"project": "default", "source": {"repoURL": "https://example.com/r.git", "path": "."},
                 "destination": {"name": "in-cluster", "namespace": "web"}}}))
    store = MemoryStore()
    app_state.save(store, AppState(app="web", revision="a" * 40))
    return Runtime(settings=Settings(config=str(tmp_path), api_token="t"), store=store)


def test_app_get_names_an_unreadable_auto_rollback_annotation_and_shows_the_last_automatic_rollback(
        tmp_path: Path) -> None:
    rt = _api_runtime(tmp_path, "on-degraded=soon")
    got = api.handle("GET", "/api/v1/apps/web", {"Authorization": "Bearer t"}, b"", rt).body
    assert {"type": "AutoRollbackError", "message": "annotation tidecd.io/auto-rollback: on-degraded='soon': "
            'expected a duration such as "10m" (at most 168h)'} in got["conditions"]
    assert "autoRollback" not in got

    rt = _api_runtime(tmp_path, "on-degraded=5m")
    autorollback_state.save(rt.store, AutoRollback("web", rolled_back="b" * 40, to_revision="a" * 40, at="t0",
                                                   reason="Degraded for 300s (window 300s)", revert="pr",
                                                   operation_id="op2"), if_generation_match=0)
    got = api.handle("GET", "/api/v1/apps/web", {"Authorization": "Bearer t"}, b"", rt).body
    assert got["autoRollback"] == {"revision": "b" * 40, "to": "a" * 40, "at": "t0", "operationId": "op2",
                                   "reason": "Degraded for 300s (window 300s)",
                                   "revert": "waiting for the rollback to end"}
    assert not [c for c in got.get("conditions", []) if c["type"] == "AutoRollbackError"]


def test_a_closed_pull_request_settles_only_its_own_revert(tmp_path: Path) -> None:
    rt = _api_runtime(tmp_path, "on-degraded=5m")
    revert_state.save(rt.store, RECORD, if_generation_match=0)
    closed = {"action": "closed", "pull_request": {"number": 7, "merged": False},
              "repository": {"full_name": "octo/web"}}
    no_dispatch = _NoDispatch()
    for other in ({**closed, "action": "edited"}, {**closed, "repository": {"full_name": "octo/other"}},
                  {**closed, "pull_request": {"number": 8, "merged": False}}):
        assert revert.on_pull_request(other, rt, no_dispatch) == {}
    assert revert_state.load(rt.store, "web")[0] == RECORD
    assert revert.on_pull_request(closed, rt, no_dispatch) == {"web": "closed"}
    record = revert_state.load(rt.store, "web")[0]
    assert record is not None and record.phase == "closed" and record.settled_at and record.holding
    assert revert.on_pull_request(closed, rt, no_dispatch) == {}  # a redelivery changes nothing


class _NoDispatch:
    def dispatch(self, refreshes: Any) -> dict[str, str]:
        raise AssertionError("a closed revert refreshes nothing")

    def schedule(self, app: str, delay: float, reason: str) -> None:
        raise AssertionError("a closed revert schedules nothing")


def test_a_revert_whose_app_a_person_synced_since_says_nothing_holds_it(tmp_path: Path) -> None:
    rt = _api_runtime(tmp_path, "on-degraded=5m")
    revert_state.save(rt.store, RECORD, if_generation_match=0)
    state = AppState(app="web", revision="a" * 40)
    state.operation = Operation(id="op3", revision="a" * 40, phase=OperationPhase.SUCCEEDED,
                                request=OperationRequest(rollback=True, initiated_by="dashboard"))
    app_state.save(rt.store, state)
    assert revert.summary(rt, "web")["message"].startswith("rolled back, waiting for the revert to merge")
    state.operation = Operation(id="op4", revision="b" * 40, phase=OperationPhase.SUCCEEDED,
                                request=OperationRequest(initiated_by="alice"))
    app_state.save(rt.store, state)
    assert revert.summary(rt, "web")["message"] == (
        "the revert https://github.com/octo/web/pull/7 is open, but the app was synced since (alice): nothing holds it")
