"""Chart archives and OCI layers read as streams, their expanded size counted against one bound.

A chart archive of 3 MB can expand to 3 GiB: gzip's ratio is about 1,000 to 1. The size a tar header
declares bounds only the member's data, not its pax and long-name headers or what lies between members, so
the bound is kept on the decompressed stream itself: every byte tarfile reads is counted, and reading stops
with `LimitExceeded` (naming `TIDECD_MAX_ARCHIVE_BYTES` and its setting) as soon as the total passes it, long
before the archive is through. Archives are read in tarfile's stream mode (no seeking back, so nothing is
decompressed twice) and a member's content is only ever copied through (to a file, or into another
archive), never read whole, except a file asked for by name, which is bounded by `TIDECD_MAX_FILE_BYTES`.

`Budget` is shared when one thing is made of several archives (an artifact's layers, a chart and the
dependencies added to it): the bound is on the whole.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO

from tidecd.base import limits

# What a damaged or hostile stream raises while it is decompressed and read as tar.
UNREADABLE = (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError, ValueError)


class Budget:
    """Expanded bytes read so far for `what`, against `limits.<field>` (read once, when made)."""

    def __init__(self, what: str, field: str = "archive_bytes") -> None:
        self.what, self.field = what, field
        self.limit: int = getattr(limits.current(), field)
        self.used = 0

    def add(self, size: int) -> None:
        self.used += size
        if self.used > self.limit:
            raise limits.exceeded(f"{self.what}: expanded size", self.field, self.limit, " bytes")


class _Counted(io.RawIOBase):
    """A decompressed stream whose every byte read is charged to a `Budget`."""

    def __init__(self, raw: IO[bytes], budget: Budget) -> None:
        self.raw, self.budget = raw, budget

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.raw.read(len(buffer))
        self.budget.add(len(data))
        buffer[: len(data)] = data
        return len(data)


def _decompressed(raw: BinaryIO) -> IO[bytes]:
    head = raw.read(6)
    raw.seek(0)
    if head.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]  # typeshed: a BufferedIOBase, not IO
    if head.startswith(b"BZh"):
        return bz2.BZ2File(raw)
    if head.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(raw)
    return raw


@contextlib.contextmanager
def open_tar(archive: bytes | Path, budget: Budget) -> Iterator[tarfile.TarFile]:
    """The archive (tar, or tar compressed with gzip, bzip2 or xz) as a stream-mode TarFile: members in
    order, each one's content readable (`extractfile`) only while it is the current one."""
    with contextlib.ExitStack() as stack:
        raw: BinaryIO = (stack.enter_context(archive.open("rb")) if isinstance(archive, Path)
                         else io.BytesIO(archive))
        stream = io.BufferedReader(_Counted(_decompressed(raw), budget), 1024 * 1024)
        yield stack.enter_context(tarfile.open(fileobj=stream, mode="r|"))


def read_member(tar: tarfile.TarFile, member: tarfile.TarInfo, what: str) -> bytes:
    """The content of one (small) member, refused past `TIDECD_MAX_FILE_BYTES` before it is read."""
    bound = limits.current().file_bytes
    if member.size > bound:
        raise limits.exceeded(f"{what} is {member.size:,} bytes", "file_bytes", bound, " bytes")
    source = tar.extractfile(member)
    return source.read() if source is not None else b""


def scan(archive: bytes | Path, budget: Budget) -> list[str]:
    """The member names, the whole archive read once against the budget (nothing kept but the names)."""
    with open_tar(archive, budget) as tar:
        return [member.name for member in tar]
