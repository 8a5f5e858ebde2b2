"""Snapshots as archives: a git tree written as a deterministic tar.gz, and an archive extracted with every
check, because a repository (or a tampered cache) must never write outside the checkout.

Both sides count the snapshot against `tidecd.base.limits` (files, path depth, uncompressed bytes) before
the bytes they guard are read. A big blob is streamed from the pack file into the tar, never held whole.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import shutil
import stat
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, BinaryIO

from tidecd.base import limits
from tidecd.base.errors import LimitExceeded, UnsafePathError

if TYPE_CHECKING:
    from dulwich.objects import ObjectID
    from dulwich.repo import BaseRepo

__all__ = ["SUBMODULE_MARKER", "extract", "tar_tree", "write_tar"]


SUBMODULE_MARKER = ".tidecd-submodule"  # in a snapshot, a submodule's directory holds only this: its commit


def tar_tree(repo: BaseRepo, tree_id: ObjectID) -> bytes:
    """A tar.gz of one tree: sorted members, mtime 0, owner root, so equal trees give equal bytes."""
    buffer = io.BytesIO()
    write_tar(repo, tree_id, buffer)
    return buffer.getvalue()


def write_tar(repo: BaseRepo, tree_id: ObjectID, out: BinaryIO) -> None:
    """`tar_tree` written to `out`. The tree is checked against the snapshot limits (files, path depth,
    uncompressed size) entry by entry, before each blob is read."""
    # lazy: cold start (dulwich only when a repository is reached: the runtime loads this module on every trigger)
    from dulwich.objects import Blob

    entries = sorted(repo.object_store.iter_tree_contents(tree_id), key=lambda e: e.path or b"")
    budget = _SnapshotBudget(limits.current())
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=6) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for entry in entries:
            if entry.path is None or entry.mode is None or entry.sha is None:
                continue
            if stat.S_ISDIR(entry.mode):
                continue
            name = os.fsdecode(entry.path)
            if (entry.mode & 0o170000) == 0o160000:  # a submodule: its commit, for `source.submodules`
                marker, commit = f"{name}/{SUBMODULE_MARKER}", bytes(entry.sha) + b"\n"
                budget.add(_check_name(marker), len(commit))
                info = tarfile.TarInfo(marker)
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                info.size, info.mode = len(commit), 0o644
                tar.addfile(info, io.BytesIO(commit))
                continue
            budget.add(_check_name(name), 0)
            with _open_blob(repo, entry.sha) as (type_num, size, content):
                if type_num != Blob.type_num:
                    raise UnsafePathError(f"tree entry {name!r} is not a blob")
                info = tarfile.TarInfo(name)
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                if stat.S_ISLNK(entry.mode):
                    target = content.read(min(size, 64 * 1024))
                    info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.fsdecode(target), 0o777
                    tar.addfile(info)
                else:
                    info.size, info.mode = size, 0o755 if entry.mode & 0o111 else 0o644
                    budget.add_bytes(name, info.size)  # before a byte of it is read
                    tar.addfile(info, content)


_STREAM_CHUNK = 256 * 1024
_FULL_TYPES = (1, 2, 3, 4)  # commit, tree, blob, tag stored whole in a pack (6, 7: deltas)


@contextlib.contextmanager
def _open_blob(repo: BaseRepo, sha: bytes) -> Iterator[tuple[int, int, BinaryIO]]:
    """(type number, size, a reader of the content) of one object. An object stored whole in a pack on
    disk is decompressed from the pack file as it is read (a big blob never sits in memory); a delta, or
    a loose object, is resolved in memory (one copy) as dulwich does."""
    # lazy: cold start (dulwich only when a repository is reached: the runtime loads this module on every trigger)
    from dulwich.object_store import DiskObjectStore

    store = repo.object_store
    if isinstance(store, DiskObjectStore):
        for pack in store.packs:
            try:
                offset = pack.index.object_offset(sha)  # type: ignore[arg-type]
            except KeyError:
                continue
            with open(pack._data_path, "rb") as raw:  # noqa: SLF001 - the pack file dulwich indexed
                raw.seek(offset)
                type_num, size = _pack_entry_header(raw)
                if type_num in _FULL_TYPES:
                    yield type_num, size, _InflatingReader(raw, size)  # type: ignore[misc]
                    return
            break
    type_num, data = store.get_raw(sha)  # type: ignore[arg-type]
    yield type_num, len(data), io.BytesIO(data)


def _pack_entry_header(raw: BinaryIO) -> tuple[int, int]:
    """A pack entry's type and uncompressed size (git's variable-length header)."""
    byte = raw.read(1)[0]
    type_num, size, shift = (byte >> 4) & 7, byte & 15, 4
    while byte & 0x80:
        byte = raw.read(1)[0]
        size |= (byte & 0x7F) << shift
        shift += 7
    return type_num, size


class _InflatingReader(io.RawIOBase):
    """The zlib stream at the file's position, inflated as it is read, at most `size` bytes."""

    def __init__(self, raw: BinaryIO, size: int) -> None:
        self.raw, self.left = raw, size
        self.inflate = zlib.decompressobj()
        self.pending = b""

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        want = self.left if n is None or n < 0 else min(n, self.left)
        out = bytearray()
        while len(out) < want:
            source = self.inflate.unconsumed_tail or self.raw.read(_STREAM_CHUNK)
            if not source:
                raise UnsafePathError("pack entry ends before its object does")
            out += self.inflate.decompress(source, want - len(out))
        self.left -= len(out)
        return bytes(out)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class _SnapshotBudget:
    """Counts files, path depth and bytes of one snapshot against `tidecd.base.limits` (LimitExceeded)."""

    def __init__(self, bound: limits.Limits) -> None:
        self.bound, self.files, self.bytes = bound, 0, 0

    def add(self, pure: PurePosixPath, size: int) -> None:
        self.files += 1
        if self.files > self.bound.files:
            raise limits.exceeded("snapshot: number of files", "files", self.bound.files)
        if len(pure.parts) > self.bound.path_depth:
            raise limits.exceeded(f"snapshot member {str(pure)[:200]!r}: {len(pure.parts)} path levels",
                                  "path_depth", self.bound.path_depth)
        self.add_bytes(str(pure), size)

    def add_bytes(self, name: str, size: int) -> None:
        self.bytes += size
        if self.bytes > self.bound.snapshot_bytes:
            raise limits.exceeded(f"snapshot: uncompressed size (at {name[:200]!r})", "snapshot_bytes",
                                  self.bound.snapshot_bytes, " bytes")


def _check_name(name: str) -> PurePosixPath:
    """A member name as a relative path without `..`; UnsafePathError naming the member otherwise."""
    pure = PurePosixPath(name)
    if pure.is_absolute() or name.startswith("/"):
        raise UnsafePathError(f"archive member {name!r} has an absolute path")
    if ".." in pure.parts:
        raise UnsafePathError(f"archive member {name!r} contains '..'")
    if "\x00" in name:
        raise UnsafePathError(f"archive member {name!r} contains a NUL byte")
    return pure


def _check_member(member: tarfile.TarInfo) -> PurePosixPath:
    pure = _check_name(member.name)
    if member.islnk():
        raise UnsafePathError(f"archive member {member.name!r} is a hard link")
    if member.issym():
        target = PurePosixPath(member.linkname)
        if target.is_absolute():
            raise UnsafePathError(f"archive member {member.name!r} links to absolute {member.linkname!r}")
        if os.path.normpath(pure.parent / target).startswith(".."):
            raise UnsafePathError(f"archive member {member.name!r} links outside the checkout")
    elif not (member.isreg() or member.isdir()):
        raise UnsafePathError(f"archive member {member.name!r} is a device, fifo or other special file")
    return pure


def extract(tar_bytes: bytes | Path, dest: Path) -> None:
    """Extract a snapshot into `dest` (created, must be empty), refusing any member that would leave it.

    Every member is checked before anything is written; files are written before any symlink exists,
    and the symlinks, created last, are then resolved on disk, so no chain of links can escape either.
    On refusal `dest` is removed.
    """
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise UnsafePathError(f"extraction target {dest} is not empty")
    try:
        source = {"name": str(tar_bytes)} if isinstance(tar_bytes, Path) else {"fileobj": io.BytesIO(tar_bytes)}
        with tarfile.open(mode="r:*", **source) as tar:
            budget = _SnapshotBudget(limits.current())
            members = []
            for member in tar:  # each member is checked as the archive is read, before it is written
                pure = _check_member(member)
                budget.add(pure, member.size if member.isreg() else 0)
                members.append((member, pure))
            names = [str(p) for _, p in members if str(p) != "."]
            if len(names) != len(set(names)):
                raise UnsafePathError("archive has duplicate members")
            root = dest.resolve()
            links = []
            for member, pure in members:
                if str(pure) == ".":
                    continue
                if member.issym():
                    links.append((member, pure))
                elif member.isdir():
                    _safe_target(root, pure, member.name).mkdir(parents=True, exist_ok=True)
                else:
                    _write_file(tar, member, _safe_target(root, pure, member.name))
            created = []
            for member, pure in links:
                target = _safe_target(root, pure, member.name)
                target.symlink_to(member.linkname)
                created.append((target, member.name))
            for target, name in created:  # after all links exist: a later link can redirect an earlier one
                _verify_link(root, target, name)
    except (UnsafePathError, LimitExceeded):
        shutil.rmtree(dest, ignore_errors=True)
        raise
    except (tarfile.TarError, OSError, EOFError) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise UnsafePathError(f"snapshot archive is unreadable or conflicting: {exc}") from exc


def _safe_target(root: Path, pure: PurePosixPath, name: str) -> Path:
    """`root / pure` whose parent, resolved on disk, is still inside root."""
    parent = (root / pure).parent
    parent.mkdir(parents=True, exist_ok=True)
    real_parent = parent.resolve()
    if real_parent != root and root not in real_parent.parents:
        raise UnsafePathError(f"archive member {name!r} would be written outside the checkout")
    return real_parent / pure.name


def _write_file(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    source = tar.extractfile(member)
    if source is None:
        raise UnsafePathError(f"archive member {member.name!r} has no content")
    with source, open(target, "xb") as out:
        shutil.copyfileobj(source, out)
    target.chmod(0o755 if member.mode & 0o111 else 0o644)


def _verify_link(root: Path, link: Path, name: str) -> None:
    real = Path(os.path.realpath(link))
    if real != root and root not in real.parents:
        raise UnsafePathError(f"archive member {name!r} links outside the checkout")
