"""Object store contract, run against every backend (the GCS run is in tests/e2e/test_store_gcs.py).

Each `check_*` function is one clause of the contract; `CONTRACTS` lists them so the e2e module runs the
very same clauses against fake-gcs-server. Below them: what only the local backend promises (key checks,
file layout, multi-process safety) and `open_store`.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tidecd.base.errors import ConfigError, LeaseHeld, PermanentError
from tidecd.clients.store import (
    GcsStore,
    InvalidKey,
    LocalStore,
    MemoryStore,
    ObjectStore,
    PreconditionFailed,
    acquire_lease,
    hold_lease,
    open_store,
    read_json,
    read_lease,
    release_lease,
    renew_lease,
    update_json,
    write_json,
)

T0 = 1_700_000_000.0


def _increment(value: Any) -> int:
    return (value or 0) + 1


def _run_threads(n: int, target: Callable[[int], None]) -> None:
    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "worker threads hung"


# --- the contract ----------------------------------------------------------------------------------------


def check_read_write(store: ObjectStore) -> None:
    assert store.read("state/apps/a.json") is None
    data = bytes(range(256))
    g1 = store.write("state/apps/a.json", data)
    assert g1 > 0
    assert store.read("state/apps/a.json") == _blob(data, g1)
    g2 = store.write("state/apps/a.json", b"second")
    assert g2 != g1
    assert store.read("state/apps/a.json") == _blob(b"second", g2)
    store.write("empty", b"")
    blob = store.read("empty")
    assert blob is not None and blob.data == b""


def check_list_sorted_by_prefix(store: ObjectStore) -> None:
    for key in ["b/2", "a/2", "a/10", "ab", "a/1", "c", "a/x/deep"]:
        store.write(key, key.encode())
    assert store.list("a/") == ["a/1", "a/10", "a/2", "a/x/deep"]
    assert store.list("a") == ["a/1", "a/10", "a/2", "a/x/deep", "ab"]
    assert store.list("a/1") == ["a/1", "a/10"]
    assert store.list("") == ["a/1", "a/10", "a/2", "a/x/deep", "ab", "b/2", "c"]
    assert store.list("zz") == []
    assert store.list("nothing/here/") == []


def check_delete(store: ObjectStore) -> None:
    store.write("deliveries/1", b"x")
    store.write("deliveries/2", b"y")
    store.delete("deliveries/1")
    assert store.read("deliveries/1") is None
    assert store.list("deliveries/") == ["deliveries/2"]
    store.delete("deliveries/1")  # already gone: nothing to do
    store.delete("never/written")
    assert store.list("deliveries/") == ["deliveries/2"]


def check_create_only(store: ObjectStore) -> None:
    gen = store.write("leases/x", b"first", if_generation_match=0)
    with pytest.raises(PreconditionFailed):
        store.write("leases/x", b"second", if_generation_match=0)
    assert store.read("leases/x") == _blob(b"first", gen)


def check_stale_generation(store: ObjectStore) -> None:
    g1 = store.write("k", b"1")
    g2 = store.write("k", b"2", if_generation_match=g1)
    with pytest.raises(PreconditionFailed):
        store.write("k", b"stale", if_generation_match=g1)
    with pytest.raises(PreconditionFailed):
        store.delete("k", if_generation_match=g1)
    assert store.read("k") == _blob(b"2", g2)
    store.delete("k", if_generation_match=g2)
    assert store.read("k") is None
    with pytest.raises(PreconditionFailed):
        store.write("absent", b"x", if_generation_match=12345)


def check_recreated_object_gets_new_generation(store: ObjectStore) -> None:
    g1 = store.write("k", b"1")
    store.delete("k")
    g2 = store.write("k", b"again", if_generation_match=0)
    assert g2 != g1
    with pytest.raises(PreconditionFailed):  # a reader of the old object must not overwrite the new one
        store.write("k", b"stale", if_generation_match=g1)


def check_json_documents(store: ObjectStore) -> None:
    assert read_json(store, "state/repos/r.json") is None
    value = {"heads": {"main": "abc"}, "note": "ünïcode ✓", "n": [1, 2.5, None, True]}
    gen = write_json(store, "state/repos/r.json", value)
    assert read_json(store, "state/repos/r.json") == (value, gen)
    with pytest.raises(PreconditionFailed):
        write_json(store, "state/repos/r.json", {}, if_generation_match=0)
    store.write("broken.json", b"{not json")
    with pytest.raises(PermanentError, match="broken.json"):
        read_json(store, "broken.json")


def check_update_json_noop_writes_nothing(store: ObjectStore) -> None:
    assert update_json(store, "doc.json", lambda v: v) == (None, 0)
    assert store.read("doc.json") is None
    value, gen = update_json(store, "doc.json", lambda v: {"a": 1})
    assert (value, gen) == ({"a": 1}, read_json(store, "doc.json")[1])  # type: ignore[index]
    assert update_json(store, "doc.json", lambda v: dict(v)) == ({"a": 1}, gen)


def check_update_json_under_thread_contention(store: ObjectStore) -> None:
    def worker(_: int) -> None:
        for _ in range(10):
            update_json(store, "counter.json", _increment, retries=1000)

    _run_threads(6, worker)
    assert read_json(store, "counter.json")[0] == 60  # type: ignore[index]


def check_lease_lifecycle(store: ObjectStore) -> None:
    assert read_lease(store, "app") is None
    assert acquire_lease(store, "app", "call-1", 60, now=T0)
    assert not acquire_lease(store, "app", "call-2", 60, now=T0 + 1)  # live: refused
    lease = read_lease(store, "app")
    assert lease is not None and lease.holder == "call-1" and lease.expires_at == T0 + 60
    assert acquire_lease(store, "app", "call-1", 60, now=T0 + 30)  # ours: extended
    assert read_lease(store, "app").expires_at == T0 + 90  # type: ignore[union-attr]
    assert renew_lease(store, "app", "call-1", 120, now=T0 + 40)
    assert not renew_lease(store, "app", "call-2", 120, now=T0 + 40)
    assert read_lease(store, "app").expires_at == T0 + 160  # type: ignore[union-attr]
    assert not release_lease(store, "app", "call-2")  # not the holder: ignored
    assert read_lease(store, "app").holder == "call-1"  # type: ignore[union-attr]
    assert release_lease(store, "app", "call-1")
    assert read_lease(store, "app") is None
    assert store.list("leases/") == []
    assert not renew_lease(store, "app", "call-1", 60, now=T0 + 50)


def check_expired_lease_taken_over(store: ObjectStore) -> None:
    assert acquire_lease(store, "app", "old", 10, now=T0)
    assert not acquire_lease(store, "app", "new", 10, now=T0 + 9.9)
    assert acquire_lease(store, "app", "new", 10, now=T0 + 10)
    assert read_lease(store, "app").holder == "new"  # type: ignore[union-attr]
    assert not renew_lease(store, "app", "old", 10, now=T0 + 11)  # the old holder lost it
    assert not release_lease(store, "app", "old")
    assert read_lease(store, "app").holder == "new"  # type: ignore[union-attr]
    store.write("leases/garbled", b"\x00not json")
    assert acquire_lease(store, "garbled", "fresh", 10, now=T0)  # an unreadable lease cannot block forever


def check_lease_race_has_one_winner(store: ObjectStore) -> None:
    barrier = threading.Barrier(6)
    winners: list[int] = []

    def contender(i: int) -> None:
        barrier.wait()
        if acquire_lease(store, "race", f"call-{i}", 60):
            winners.append(i)

    _run_threads(6, contender)
    assert len(winners) == 1
    assert read_lease(store, "race").holder == f"call-{winners[0]}"  # type: ignore[union-attr]


def check_hold_lease(store: ObjectStore) -> None:
    with hold_lease(store, "app", "me", 60):
        assert read_lease(store, "app").holder == "me"  # type: ignore[union-attr]
        with pytest.raises(LeaseHeld, match="'app' is held by 'me'"), hold_lease(store, "app", "other", 60):
            pass
    assert read_lease(store, "app") is None


def check_files_stream(store: ObjectStore) -> None:
    """read_file/write_file (snapshots): the same objects, generations and preconditions as read/write."""
    import tempfile

    from tidecd.clients.store import read_file, write_file

    with tempfile.TemporaryDirectory() as tmp:
        source, dest = Path(tmp) / "in", Path(tmp) / "out"
        source.write_bytes(bytes(range(256)) * 5000)
        generation = write_file(store, "snapshots/r/a.tar.gz", source, if_generation_match=0)
        blob = store.read("snapshots/r/a.tar.gz")
        assert blob is not None and blob.generation == generation and blob.data == source.read_bytes()
        assert read_file(store, "snapshots/r/a.tar.gz", dest) == generation
        assert dest.read_bytes() == source.read_bytes()
        with pytest.raises(PreconditionFailed):
            write_file(store, "snapshots/r/a.tar.gz", source, if_generation_match=0)
        assert read_file(store, "snapshots/r/missing.tar.gz", Path(tmp) / "none") is None


CONTRACTS: list[Callable[[ObjectStore], None]] = [
    check_files_stream,
    check_read_write,
    check_list_sorted_by_prefix,
    check_delete,
    check_create_only,
    check_stale_generation,
    check_recreated_object_gets_new_generation,
    check_json_documents,
    check_update_json_noop_writes_nothing,
    check_update_json_under_thread_contention,
    check_lease_lifecycle,
    check_expired_lease_taken_over,
    check_lease_race_has_one_winner,
    check_hold_lease,
]


def _blob(data: bytes, generation: int) -> Any:
    from tidecd.clients.store import Blob

    return Blob(data, generation)


@pytest.fixture(params=["memory", "local"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    return MemoryStore() if request.param == "memory" else LocalStore(tmp_path / "store")


@pytest.mark.parametrize("contract", CONTRACTS, ids=lambda f: f.__name__.removeprefix("check_"))
def test_contract(store: ObjectStore, contract: Callable[[ObjectStore], None]) -> None:
    contract(store)


# --- local backend only ----------------------------------------------------------------------------------

BAD_KEYS = ["", "/abs", "a//b", "a/", "../x", "a/../b", "./a", "a/.", ".meta/lock", "nul\x00byte"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_local_refuses_unsafe_keys(local_store: LocalStore, key: str) -> None:
    with pytest.raises(InvalidKey):
        local_store.write(key, b"x")
    with pytest.raises(InvalidKey):
        local_store.read(key)
    with pytest.raises(InvalidKey):
        local_store.delete(key)
    assert not (local_store.root.parent / "x").exists()


def test_local_refuses_unsafe_list_prefix(local_store: LocalStore) -> None:
    with pytest.raises(InvalidKey):
        local_store.list("../")


def test_local_files_carry_generation_header(local_store: LocalStore) -> None:
    gen = local_store.write("state/apps/guestbook.json", b'{"a":1}')
    raw = (local_store.root / "state" / "apps" / "guestbook.json").read_bytes()
    assert raw == b"tidecd-object gen=%020d\n" % gen + b'{"a":1}'
    assert [p.name for p in (local_store.root / ".meta" / "tmp").iterdir()] == []
    assert local_store.list("") == ["state/apps/guestbook.json"]  # the lock and temp folder are no objects


def test_local_object_and_folder_cannot_share_a_name(local_store: LocalStore) -> None:
    local_store.write("a", b"object")
    with pytest.raises(InvalidKey, match="'a/b'"):
        local_store.write("a/b", b"x")
    local_store.write("c/d", b"x")
    with pytest.raises(InvalidKey, match="'c'"):
        local_store.write("c", b"x")
    assert local_store.read("a/b") is None
    assert local_store.read("c") is None
    assert [p.name for p in (local_store.root / ".meta" / "tmp").iterdir()] == []


def test_local_delete_prunes_empty_folders(local_store: LocalStore) -> None:
    local_store.write("snapshots/repo/abc.tar.gz", b"x")
    local_store.write("snapshots/other", b"y")
    local_store.delete("snapshots/repo/abc.tar.gz")
    assert not (local_store.root / "snapshots" / "repo").exists()
    assert (local_store.root / "snapshots").is_dir()
    local_store.delete("snapshots/other")
    assert sorted(p.name for p in local_store.root.iterdir()) == [".meta"]


def test_local_rejects_foreign_files(local_store: LocalStore) -> None:
    local_store.root.mkdir(parents=True)
    (local_store.root / "hand-made.json").write_bytes(b"{}")
    with pytest.raises(PermanentError, match="hand-made.json: not a tidecd object"):
        local_store.read("hand-made.json")


def test_local_failed_precondition_leaves_no_temp_file(local_store: LocalStore) -> None:
    local_store.write("k", b"1")
    with pytest.raises(PreconditionFailed):
        local_store.write("k", b"2", if_generation_match=0)
    assert list((local_store.root / ".meta" / "tmp").iterdir()) == []


def test_local_store_on_missing_root_reads_empty(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "nowhere")
    assert store.read("a") is None
    assert store.list("") == []
    store.delete("a")
    assert not (tmp_path / "nowhere").exists() or store.list("") == []


def _increment_in_process(root: str, times: int, go: Any) -> None:
    go.wait()
    store = LocalStore(Path(root))
    for _ in range(times):
        update_json(store, "counter.json", _increment, retries=10_000)


def _lease_in_process(root: str, holder: str, go: Any, won: Any) -> None:
    go.wait()
    if acquire_lease(LocalStore(Path(root)), "app", holder, 60):
        won.put(holder)


def test_local_update_json_is_exact_across_processes(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    procs = [ctx.Process(target=_increment_in_process, args=(str(tmp_path), 25, go)) for _ in range(8)]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * 8
    assert read_json(LocalStore(tmp_path), "counter.json")[0] == 200  # type: ignore[index]


def test_local_lease_across_processes_has_one_winner(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    go, won = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_lease_in_process, args=(str(tmp_path), f"p{i}", go, won)) for i in range(6)]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * 6
    winners = []
    while not won.empty():
        winners.append(won.get(timeout=5))
    assert len(winners) == 1
    assert read_lease(LocalStore(tmp_path), "app").holder == winners[0]  # type: ignore[union-attr]


# --- open_store ------------------------------------------------------------------------------------------


def test_open_store_picks_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gcs = open_store("gs://my-bucket/tidecd/prod")
    assert isinstance(gcs, GcsStore) and (gcs.bucket, gcs.prefix) == ("my-bucket", "tidecd/prod")
    bare = open_store("gs://my-bucket")
    assert isinstance(bare, GcsStore) and (bare.bucket, bare.prefix) == ("my-bucket", "")
    local = open_store(str(tmp_path / "s"))
    assert isinstance(local, LocalStore) and local.root == tmp_path / "s"
    monkeypatch.setenv("TIDECD_STORE", str(tmp_path / "env"))
    assert open_store().root == tmp_path / "env"  # type: ignore[attr-defined]
    monkeypatch.delenv("TIDECD_STORE")
    monkeypatch.chdir(tmp_path)
    default = open_store()
    assert isinstance(default, LocalStore) and default.root == Path(".tidecd")
    with pytest.raises(ConfigError, match="no bucket"):
        open_store("gs:///prefix")
