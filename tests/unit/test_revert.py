"""Rollback through git, the parts without a server: the revert record, the tree a revert commits, and the
image references a merged revert refuses. (The whole path, with git, GitHub and a cluster: tests/e2e/test_revert.)"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dulwich.objects import Blob, Commit, ObjectID, Tree
from dulwich.repo import MemoryRepo

from tidecd.clients.registry import parse_image
from tidecd.clients.store import LocalStore
from tidecd.images import state as images_state
from tidecd.images import writeback
from tidecd.state import revert as revert_state
from tidecd.state.revert import Pull, Revert
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
