"""The warm instance's checkout cache (`tidecd.source.checkouts`): one read-only tree per commit, checked
like any extraction, bounded, and never handed out once something changed it."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import threading
from pathlib import Path

import pytest

from tidecd.base.errors import UnsafePathError
from tidecd.clients.store import MemoryStore
from tidecd.source import Snapshots
from tidecd.source.checkouts import CheckoutCache

URL = "https://git.invalid/org/app.git"  # nothing listens: a fetch would raise SourceUnavailable


def _tarball(files: dict[str, str], *, escape: bool = False) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
        if escape:
            link = tarfile.TarInfo("apps/out")
            link.type, link.linkname = tarfile.SYMTYPE, "../../../etc"
            tar.addfile(link)
    return buffer.getvalue()


def _store(*commits: tuple[str, dict[str, str]]) -> MemoryStore:
    store = MemoryStore()
    for sha, files in commits:
        store.write(Snapshots.key(URL, sha), _tarball(files))
    return store


def test_a_commit_is_extracted_once_and_read_only(tmp_path: Path) -> None:
    sha = "ab" * 20
    store = _store((sha, {"apps/a/cm.yaml": "a: 1\n", "apps/b/cm.yaml": "b: 2\n"}))
    cache = CheckoutCache(parent=tmp_path)
    with cache.tree(store, URL, sha) as first:
        assert (first / "apps/a/cm.yaml").read_text() == "a: 1\n"
        assert not os.stat(first / "apps/a/cm.yaml").st_mode & 0o222
        assert not os.stat(first / "apps").st_mode & 0o222
    store.delete(Snapshots.key(URL, sha))  # a second use must not need the snapshot at all
    with cache.tree(store, URL, sha.upper()) as second:
        assert second == first and (second / "apps/b/cm.yaml").read_text() == "b: 2\n"
    assert (cache.extracted, cache.reused) == (1, 1)
    cache.clear()
    assert not first.exists() and not list(tmp_path.iterdir())


def test_a_tree_that_changed_is_extracted_again(tmp_path: Path) -> None:
    sha = "cd" * 20
    store = _store((sha, {"apps/a/cm.yaml": "a: 1\n"}))
    cache = CheckoutCache(parent=tmp_path)
    with cache.tree(store, URL, sha) as root:
        target = root / "apps/a/cm.yaml"
        target.chmod(0o644)
        target.write_text("tampered: true\n")  # as a tool running as root could, whatever the modes
    with cache.tree(store, URL, sha) as again:
        assert again != root and (again / "apps/a/cm.yaml").read_text() == "a: 1\n"
    assert not root.exists(), "the changed tree is removed once nobody holds it"
    assert cache.extracted == 2


def test_the_extraction_checks_still_apply_and_nothing_is_kept(tmp_path: Path) -> None:
    sha = "ef" * 20
    store, archive = MemoryStore(), _tarball({"apps/a/cm.yaml": "a: 1\n"}, escape=True)
    store.write(Snapshots.key(URL, sha), archive)
    store.write(Snapshots.key(URL, sha) + ".sha256", hashlib.sha256(archive).hexdigest().encode())  # not corrupt
    cache = CheckoutCache(parent=tmp_path)
    with pytest.raises(UnsafePathError, match="links outside the checkout"), cache.tree(store, URL, sha):
        pass
    assert len(cache) == 0
    cache.clear()
    assert not list(tmp_path.iterdir())


def test_least_recently_used_trees_go_first_but_never_one_in_use(tmp_path: Path) -> None:
    shas = [f"{i:02d}" * 20 for i in range(1, 5)]
    store = _store(*((sha, {f"f{i}.yaml": "x" * 100}) for i, sha in enumerate(shas)))
    cache = CheckoutCache(parent=tmp_path, max_trees=2)
    with cache.tree(store, URL, shas[0]) as held:
        with cache.tree(store, URL, shas[1]):
            pass
        with cache.tree(store, URL, shas[2]):
            pass
        with cache.tree(store, URL, shas[3]):
            pass
        assert held.exists(), "a tree in use is never removed"
    assert len(cache) == 2  # the held one and the newest
    with cache.tree(store, URL, shas[3]):
        pass
    with cache.tree(store, URL, shas[0]):
        pass
    assert (cache.extracted, cache.reused) == (4, 2)


def test_a_tree_over_the_byte_bound_is_used_once(tmp_path: Path) -> None:
    sha = "12" * 20
    store = _store((sha, {"big.yaml": "x" * 5000}))
    cache = CheckoutCache(parent=tmp_path, max_bytes=1000)
    with cache.tree(store, URL, sha) as root:
        assert (root / "big.yaml").stat().st_size == 5000
    assert not root.exists() and len(cache) == 0


def test_concurrent_users_of_one_commit_share_one_extraction(tmp_path: Path) -> None:
    sha = "34" * 20
    store = _store((sha, {f"apps/a{i}/cm.yaml": f"i: {i}\n" for i in range(50)}))
    cache = CheckoutCache(parent=tmp_path)
    roots: list[Path] = []
    errors: list[BaseException] = []

    def use() -> None:
        try:
            with cache.tree(store, URL, sha) as root:
                roots.append(root)
                assert (root / "apps/a7/cm.yaml").read_text() == "i: 7\n"
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(roots)) == 1 and cache.extracted == 1 and cache.reused == 7


def test_off_extracts_into_a_temporary_directory_each_time(tmp_path: Path) -> None:
    sha = "56" * 20
    store = _store((sha, {"cm.yaml": "a: 1\n"}))
    cache = CheckoutCache(parent=tmp_path, max_bytes=0)
    with cache.tree(store, URL, sha) as root:
        assert (root / "cm.yaml").read_text() == "a: 1\n"
    assert not root.exists() and not list(tmp_path.iterdir())
