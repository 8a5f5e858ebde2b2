"""Extracted snapshots kept by a warm instance: one read-only tree per (repository, commit), shared.

A render needs the repository's files on disk. Extracting a snapshot for every render (and removing it
after) was the largest cost of a cold reconcile step at 1,000 apps in 50 repos: each repository's tree
was written and deleted once per app. So a process keeps the trees it extracted, least recently used
first out, and every render of the same commit reads the same tree:

- A tree is extracted by `git.extract` with all of its checks (nothing may leave the checkout, the
  snapshot limits) into a fresh directory, then made read-only (every write bit taken off) and
  fingerprinted: every entry's path, type, mode, size and modification time.
- Each use compares the fingerprint first (one `lstat` per entry). A tree that changed (something wrote
  into it, as root may despite the modes) is set aside and extracted again, so a render never sees what
  another render left behind.
- `with cache.tree(...) as root:` holds the tree for the render; eviction removes only trees nobody
  holds, and two threads asking for the same commit at once extract it once.
- Bounded by `TIDECD_CHECKOUT_CACHE_BYTES` (default 64 MiB of file content; on Cloud Run /tmp is
  memory) and `TIDECD_CHECKOUT_CACHE_TREES` (256). A tree larger than the byte bound is used once and
  removed, as before; `TIDECD_CHECKOUT_CACHE_BYTES=0` turns the cache off.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import stat
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from tidecd.base.errors import ConfigError
from tidecd.config.load import normalize_repo_url
from tidecd.source import git

if TYPE_CHECKING:
    from tidecd.clients.store import ObjectStore
    from tidecd.source.git import RepoCredentials

__all__ = ["CheckoutCache", "shared", "tree"]

log = structlog.get_logger("tidecd.source.checkouts")
DEFAULT_BYTES = 64 * 1024 * 1024
DEFAULT_TREES = 256
_WRITE = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
_Key = tuple[str, str, str]  # (the store, normalized repository URL, commit sha)
Fingerprint = tuple[tuple[str, int, int, int], ...]  # (relative path, st_mode, size, mtime_ns) per entry


@dataclass
class _Tree:
    root: Path
    fingerprint: Fingerprint = ()
    size: int = 0
    holders: int = 0
    stale: bool = False  # set aside: removed when its last holder lets go
    ready: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class CheckoutCache:
    """Read-only extracted trees by (normalized repository URL, commit sha), bounded, thread-safe."""

    def __init__(self, *, max_bytes: int = DEFAULT_BYTES, max_trees: int = DEFAULT_TREES,
                 parent: Path | None = None) -> None:
        self.max_bytes, self.max_trees = max_bytes, max_trees
        self._parent = parent
        self._base: Path | None = None
        self._trees: OrderedDict[_Key, _Tree] = OrderedDict()
        self._lock = threading.Lock()
        self._serial = 0
        self.extracted = 0  # trees extracted (misses)
        self.reused = 0  # uses served by a tree already there (hits)

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0 and self.max_trees > 0

    @contextlib.contextmanager
    def tree(self, store: ObjectStore, repo_url: str, sha: str,
             credentials: RepoCredentials | None = None) -> Iterator[Path]:
        """The snapshot of `sha` as a read-only directory, held until the block ends. Raises what
        `Snapshots.checkout` raises (UnsafePathError, LimitExceeded, SourceUnavailable)."""

        sha = git.expand_sha(repo_url, sha.strip().lower(), credentials)
        if not self.enabled:
            with tempfile.TemporaryDirectory(prefix="tidecd-render-") as tmp:
                git.Snapshots(store).checkout(repo_url, sha, Path(tmp), credentials)
                yield Path(tmp)
            return
        key = (repr(store), normalize_repo_url(repo_url), sha)  # per store: its snapshot and commit records
        entry = self._acquire(key, store, repo_url, sha, credentials)
        try:
            yield entry.root
        finally:
            self._release(key, entry)

    # -- holding and letting go ---------------------------------------------------------------------

    def _acquire(self, key: _Key, store: ObjectStore, repo_url: str, sha: str,
                 credentials: RepoCredentials | None) -> _Tree:
        while True:
            with self._lock:
                entry = self._trees.get(key)
                if entry is None or entry.stale:
                    entry = self._new_entry(key)
                    owner = True
                else:
                    owner = False
                entry.holders += 1
                if not owner:
                    self._trees.move_to_end(key)
            if owner:
                self._fill(key, entry, store, repo_url, sha, credentials)
                return entry
            entry.ready.wait()
            if entry.error is None and _fingerprint(entry.root) == entry.fingerprint:
                with self._lock:
                    self.reused += 1
                return entry
            with self._lock:  # it failed for its extractor, or it changed: set aside, extract afresh
                if entry.error is None and not entry.stale:
                    log.warning("cached checkout changed since it was extracted; extracting it again",
                                repo=key[1], sha=sha[:12])
                self._set_aside(key, entry)
            self._release(key, entry)
            if entry.error is not None:
                raise entry.error

    def _new_entry(self, key: _Key) -> _Tree:
        if self._base is None:
            self._base = Path(tempfile.mkdtemp(prefix="tidecd-checkouts-", dir=self._parent))
            atexit.register(self.clear)
        self._serial += 1
        entry = _Tree(self._base / f"t{self._serial}")
        self._trees[key] = entry
        self._trees.move_to_end(key)
        return entry

    def _fill(self, key: _Key, entry: _Tree, store: ObjectStore, repo_url: str, sha: str,
              credentials: RepoCredentials | None) -> None:
        try:
            git.Snapshots(store).checkout(repo_url, sha, entry.root, credentials)
            entry.size = _seal(entry.root)
            entry.fingerprint = _fingerprint(entry.root)
        except BaseException as exc:
            entry.error = exc
            with self._lock:
                self._set_aside(key, entry)
            entry.ready.set()
            self._release(key, entry)
            raise
        with self._lock:
            self.extracted += 1
            if entry.size > self.max_bytes:
                self._set_aside(key, entry)  # too large to keep: this use only
            self._evict()
        entry.ready.set()

    def _release(self, key: _Key, entry: _Tree) -> None:
        with self._lock:
            entry.holders -= 1
            remove = entry.stale and entry.holders == 0
        if remove:
            _remove(entry.root)

    def _set_aside(self, key: _Key, entry: _Tree) -> None:
        """Under the lock: `entry` is no longer handed out; it goes once nobody holds it."""
        entry.stale = True
        if self._trees.get(key) is entry:
            del self._trees[key]

    def _evict(self) -> None:
        """Under the lock: drop the least recently used trees nobody holds until within the bounds."""
        total = sum(e.size for e in self._trees.values())
        for key in list(self._trees):
            if total <= self.max_bytes and len(self._trees) <= self.max_trees:
                return
            entry = self._trees[key]
            if entry.holders or not entry.ready.is_set():
                continue
            total -= entry.size
            self._set_aside(key, entry)
            _remove(entry.root)

    def clear(self) -> None:
        """Remove every tree nobody holds (and the base directory once empty): at exit, and in tests."""
        with self._lock:
            for key, entry in list(self._trees.items()):
                if not entry.holders:
                    self._set_aside(key, entry)
                    _remove(entry.root)
            base = self._base
            if base is not None and not self._trees:
                self._base = None
        if base is not None and self._base is None:
            _remove(base)

    def __len__(self) -> int:
        with self._lock:
            return len(self._trees)


def _seal(root: Path) -> int:
    """Take every write bit off the tree (symlinks are left alone); its file bytes."""
    size = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            path = os.path.join(dirpath, name)
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                continue
            size += info.st_size if stat.S_ISREG(info.st_mode) else 0
            os.chmod(path, stat.S_IMODE(info.st_mode) & ~_WRITE)
    os.chmod(root, stat.S_IMODE(os.lstat(root).st_mode) & ~_WRITE)
    return size


def _fingerprint(root: Path) -> Fingerprint:
    """(path, mode, size, mtime) of every entry below `root`, and of `root` itself, in walk order."""
    found: list[tuple[str, int, int, int]] = []
    try:
        info = os.lstat(root)
        found.append((".", info.st_mode, 0, info.st_mtime_ns))
        _scan(str(root), "", found)
    except OSError:
        return ()
    return tuple(found)


def _scan(directory: str, prefix: str, found: list[tuple[str, int, int, int]]) -> None:
    with os.scandir(directory) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            info = entry.stat(follow_symlinks=False)
            is_dir = stat.S_ISDIR(info.st_mode)
            found.append((prefix + entry.name, info.st_mode, 0 if is_dir else info.st_size, info.st_mtime_ns))
            if is_dir:
                _scan(entry.path, f"{prefix}{entry.name}/", found)


def _remove(path: Path) -> None:
    """Remove a sealed tree: its directories get the owner's write bit back first (needed when not root)."""
    if not os.path.lexists(path):
        return
    for dirpath, dirnames, _ in os.walk(path):
        with contextlib.suppress(OSError):
            os.chmod(dirpath, stat.S_IMODE(os.lstat(dirpath).st_mode) | stat.S_IWUSR | stat.S_IXUSR)
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
    shutil.rmtree(path, ignore_errors=True)


def _bound(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit():
        raise ConfigError(f"{name}={text!r}: expected a whole number (0 turns the checkout cache off)")
    return int(text)


_shared: CheckoutCache | None = None
_shared_lock = threading.Lock()


def shared() -> CheckoutCache:
    """The process's cache, bounded by TIDECD_CHECKOUT_CACHE_BYTES and TIDECD_CHECKOUT_CACHE_TREES (read
    when it is first used)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = CheckoutCache(max_bytes=_bound("TIDECD_CHECKOUT_CACHE_BYTES", DEFAULT_BYTES),
                                    max_trees=_bound("TIDECD_CHECKOUT_CACHE_TREES", DEFAULT_TREES))
        return _shared


def tree(store: ObjectStore, repo_url: str, sha: str,
         credentials: RepoCredentials | None = None) -> contextlib.AbstractContextManager[Path]:
    """`shared().tree(...)`: the read-only extracted snapshot of `sha`, held for the `with` block."""
    return shared().tree(store, repo_url, sha, credentials)
