"""Object store: the only memory tidecd's stateless functions share.

One small interface (`ObjectStore`), backends for a local directory (the default) and GCS. Racing writers
use generation preconditions: `if_generation_match=0` means "only if absent", `n` means "only if
unchanged since I read generation n"; a mismatch raises PreconditionFailed.

On top of it: JSON documents with optimistic read-modify-write (`update_json`), and leases (`leases/<name>`)
that keep two calls from reconciling the same app at once. `open_store()` picks the backend from
`TIDECD_STORE` (a directory, or `gs://bucket/prefix`).

Errors: PreconditionFailed (lost a race), InvalidKey (a key that could escape the store's root),
StoreUnavailable (backend unreachable or failing: retry later), Contended (a document kept changing
under `update_json`: retry later).

Deadlines: every GCS request waits at most `TIDECD_STORE_TIMEOUT` seconds, and a failing call is retried
with backoff (google-cloud-storage's own Retry) for at most `TIDECD_STORE_RETRY_DEADLINE` seconds; writes
and deletes only when they carry a generation precondition (the library's conditional policy: a replayed
unconditional write could undo a newer one). A caller that must answer quickly (the webhook, the api)
also sets a `budget`: the seconds all store calls in its context may take together
(`tidecd.clients.deadlines`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tidecd.base.errors import ConfigError, LeaseHeld, PermanentError, TemporaryError, UnsafePathError
from tidecd.clients.deadlines import CallOptions, Deadlines, call_options, current_budget

if TYPE_CHECKING:
    from google.cloud import storage


class PreconditionFailed(TemporaryError):
    """The object changed (or exists, or is gone) since the caller read it: re-read and decide again."""

    def __init__(self, message: str, delay: float = 1.0) -> None:
        super().__init__(message, delay)


class InvalidKey(UnsafePathError):
    """A key that is empty, absolute, has `.`/`..`/empty segments, or clashes with another key's folder."""


class StoreUnavailable(TemporaryError):
    """The backend could not be reached or failed; the call may succeed later."""


class Contended(TemporaryError):
    """A document kept changing under `update_json`; other writers are busy, try again later."""


@dataclass(frozen=True)
class Blob:
    data: bytes
    generation: int


class ObjectStore(Protocol):
    def read(self, key: str) -> Blob | None: ...

    def write(self, key: str, data: bytes, *, if_generation_match: int | None = None) -> int: ...

    def delete(self, key: str, *, if_generation_match: int | None = None) -> None: ...

    def list(self, prefix: str) -> list[str]: ...


class MemoryStore:
    """In-process store for unit tests of the pure parts."""

    def __init__(self) -> None:
        self._blobs: dict[str, Blob] = {}
        self._lock = threading.Lock()
        self._generation = 0

    def read(self, key: str) -> Blob | None:
        return self._blobs.get(key)

    def write(self, key: str, data: bytes, *, if_generation_match: int | None = None) -> int:
        with self._lock:
            _check_precondition(key, self._blobs.get(key), if_generation_match)
            self._generation += 1
            self._blobs[key] = Blob(data, self._generation)
            return self._generation

    def delete(self, key: str, *, if_generation_match: int | None = None) -> None:
        with self._lock:
            _check_precondition(key, self._blobs.get(key), if_generation_match)
            self._blobs.pop(key, None)

    def list(self, prefix: str) -> list[str]:
        return sorted(k for k in self._blobs if k.startswith(prefix))


def _check_precondition(key: str, current: Blob | None, if_generation_match: int | None) -> None:
    _check_generation(key, current.generation if current else 0, if_generation_match)


def check_key(key: str) -> list[str]:
    """The key's segments; refuses keys that could leave the store's root or mean two things."""
    segments = key.split("/")
    if not key or any(seg in ("", ".", "..") for seg in segments) or "\x00" in key:
        raise InvalidKey(f"object key {key!r}: must be relative, without empty, '.' or '..' segments")
    if segments[0] == _META:
        raise InvalidKey(f"object key {key!r}: {_META!r} is reserved for the store's own files")
    return segments


# --- local directory -------------------------------------------------------------------------------------

_META = ".meta"  # <root>/.meta/lock and <root>/.meta/tmp/: never an object
_HEADER = b"tidecd-object gen="
_HEADER_LEN = len(_HEADER) + 20 + 1  # fixed width, so the generation can be patched in place


class LocalStore:
    """Objects as files under `root`, each starting with a one-line header holding its generation.

    A write goes to a temp file first and is renamed over the object (`os.replace`), so readers never see
    a torn object and need no lock. The precondition check, the generation and the rename happen under an
    exclusive `flock` on `<root>/.meta/lock`, which serializes writers across threads and processes.
    Generations are microsecond timestamps (at least the previous one plus 1), like GCS's, so a deleted
    and recreated object does not reuse a generation a stale reader still holds. Files are not fsynced:
    a crashed process never leaves a torn object, but power-loss durability is the cloud backend's job.
    A key cannot be both an object and a folder of other objects here (`a` and `a/b`): InvalidKey.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def read(self, key: str) -> Blob | None:
        path = self._path(key)
        try:
            raw = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError as exc:
            raise StoreUnavailable(f"{path}: cannot read ({exc.strerror})") from exc
        return Blob(raw[_HEADER_LEN:], _parse_header(path, raw[:_HEADER_LEN]))

    def write(self, key: str, data: bytes, *, if_generation_match: int | None = None) -> int:
        path = self._path(key)
        try:
            fd, tmp = self._temp_file(data)
        except OSError as exc:
            raise StoreUnavailable(f"{path}: cannot write ({exc.strerror})") from exc
        return self._commit(key, path, fd, tmp, if_generation_match)

    def _commit(self, key: str, path: Path, fd: int, tmp: str, if_generation_match: int | None) -> int:
        """Rename the temp file `tmp` (open as `fd`, header first) over the object, under the lock."""
        try:
            with self._locked():
                current = _local_generation(path)
                _check_generation(key, current, if_generation_match)
                generation = max(time.time_ns() // 1000, current + 1)
                os.pwrite(fd, _header(generation), 0)
                self._make_parent(key, path)
                try:
                    os.replace(tmp, path)
                except IsADirectoryError as exc:
                    raise InvalidKey(f"object key {key!r}: is a folder of other objects") from exc
            return generation
        except OSError as exc:
            raise StoreUnavailable(f"{path}: cannot write ({exc.strerror})") from exc
        finally:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def read_file(self, key: str, dest: Path) -> int | None:
        """Copy the object into `dest` in chunks (no whole copy in memory); its generation, None if absent."""
        path = self._path(key)
        try:
            with path.open("rb") as src:
                generation = _parse_header(path, src.read(_HEADER_LEN))
                with dest.open("wb") as out:
                    shutil.copyfileobj(src, out, 1024 * 1024)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError as exc:
            raise StoreUnavailable(f"{path}: cannot read ({exc.strerror})") from exc
        return generation

    def write_file(self, key: str, source: Path, *, if_generation_match: int | None = None) -> int:
        """`write` with the content streamed from the file `source`."""
        path = self._path(key)
        try:
            (self.root / _META / "tmp").mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root / _META / "tmp", prefix=f"{os.getpid()}-")
            with os.fdopen(os.dup(fd), "wb") as out, source.open("rb") as src:
                out.write(_header(0))
                shutil.copyfileobj(src, out, 1024 * 1024)
        except OSError as exc:
            raise StoreUnavailable(f"{path}: cannot write ({exc.strerror})") from exc
        return self._commit(key, path, fd, tmp, if_generation_match)

    def delete(self, key: str, *, if_generation_match: int | None = None) -> None:
        path = self._path(key)
        try:
            with self._locked():
                current = _local_generation(path)
                _check_generation(key, current, if_generation_match)
                if current:
                    path.unlink()
                    self._prune_empty_dirs(path.parent)
        except OSError as exc:
            raise StoreUnavailable(f"{path}: cannot delete ({exc.strerror})") from exc

    def list(self, prefix: str) -> list[str]:
        folder, _, start = prefix.rpartition("/")
        base = self.root.joinpath(*check_key(folder)) if folder else self.root
        keys: list[str] = []
        for dirpath, dirnames, filenames in os.walk(base):
            rel = Path(dirpath).relative_to(self.root).parts
            if Path(dirpath) == base:  # only the last, partial segment of the prefix filters names
                dirnames[:] = [d for d in dirnames if d.startswith(start) and (rel or d != _META)]
            keys.extend("/".join((*rel, name)) for name in filenames)
        return sorted(k for k in keys if k.startswith(prefix))

    def generations(self, prefix: str) -> dict[str, int]:
        """Each object's generation from its header line alone, never its body."""
        found = {key: _local_generation(os.path.join(self.root, key)) for key in self.list(prefix)}  # listed: safe
        return {key: generation for key, generation in found.items() if generation}

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        meta = self.root / _META
        (meta / "tmp").mkdir(parents=True, exist_ok=True)
        fd = os.open(meta / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the flock

    def _temp_file(self, data: bytes) -> tuple[int, str]:
        (self.root / _META / "tmp").mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root / _META / "tmp", prefix=f"{os.getpid()}-")
        try:
            with os.fdopen(os.dup(fd), "wb") as out:
                out.write(_header(0))
                out.write(data)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        return fd, tmp

    def _make_parent(self, key: str, path: Path) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as exc:
            raise InvalidKey(f"object key {key!r}: a folder in it is already an object") from exc

    def _prune_empty_dirs(self, folder: Path) -> None:
        while folder != self.root and self.root in folder.parents:
            try:
                folder.rmdir()
            except OSError:
                return
            folder = folder.parent


def _header(generation: int) -> bytes:
    return _HEADER + b"%020d\n" % generation


def _parse_header(path: Path | str, header: bytes) -> int:
    if len(header) != _HEADER_LEN or not header.startswith(_HEADER) or not header.endswith(b"\n"):
        raise PermanentError(f"{path}: not a tidecd object (missing generation header)")
    try:
        return int(header[len(_HEADER) : -1])
    except ValueError:
        raise PermanentError(f"{path}: not a tidecd object (bad generation header)") from None


def _local_generation(path: Path | str) -> int:
    """Generation of the object at `path`, 0 when absent."""
    try:
        with open(path, "rb") as f:
            return _parse_header(path, f.read(_HEADER_LEN))
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return 0


def _check_generation(key: str, actual: int, if_generation_match: int | None) -> None:
    if if_generation_match is not None and actual != if_generation_match:
        raise PreconditionFailed(f"{key}: generation is {actual}, expected {if_generation_match}")


# --- Google Cloud Storage --------------------------------------------------------------------------------


class GcsStore:
    """Objects in a GCS bucket under `prefix`; preconditions are GCS's own `if_generation_match`.

    The client is created on first use (import cost stays off the cold start of calls that never touch
    GCS) and again after a fork. With `STORAGE_EMULATOR_HOST` set it talks to fake-gcs-server,
    anonymously, as project "test". Every call has a deadline (`Deadlines`, and the context's `budget`).
    """

    def __init__(self, bucket: str, prefix: str = "", deadlines: Deadlines | None = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.deadlines = deadlines or Deadlines.from_env()
        self._client: Any = None
        self._client_pid = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"GcsStore('gs://{self.bucket}/{self.prefix}')"

    def read(self, key: str) -> Blob | None:
        # lazy: cold start (google.cloud only when GCS or Pub/Sub is used)
        from google.api_core.exceptions import NotFound

        blob = self._blob(key)
        with self._call(key) as opts:
            try:
                data = blob.download_as_bytes(timeout=opts.timeout, retry=opts.retry)
            except NotFound:
                return None
            if blob.generation is None:  # the media response had no x-goog-generation header
                blob.reload(timeout=opts.timeout, retry=opts.retry)
        return Blob(data, int(blob.generation))

    def write(self, key: str, data: bytes, *, if_generation_match: int | None = None) -> int:
        blob = self._blob(key)
        content_type = "application/json" if key.endswith(".json") else "application/octet-stream"
        with self._call(key) as opts:
            blob.upload_from_string(data, content_type=content_type, if_generation_match=if_generation_match,
                                    timeout=opts.timeout, retry=opts.conditional_retry)
        return int(blob.generation)

    def read_file(self, key: str, dest: Path) -> int | None:
        """Download the object into `dest` (streamed to disk); its generation, None if absent."""
        # lazy: cold start (google.cloud only when GCS or Pub/Sub is used)
        from google.api_core.exceptions import NotFound

        blob = self._blob(key)
        with self._call(key) as opts:
            try:
                blob.download_to_filename(str(dest), timeout=opts.timeout, retry=opts.retry)
            except NotFound:
                dest.unlink(missing_ok=True)
                return None
            if blob.generation is None:
                blob.reload(timeout=opts.timeout, retry=opts.retry)
        return int(blob.generation)

    def write_file(self, key: str, source: Path, *, if_generation_match: int | None = None) -> int:
        blob = self._blob(key)
        with self._call(key) as opts:
            blob.upload_from_filename(str(source), content_type="application/octet-stream",
                                      if_generation_match=if_generation_match, timeout=opts.timeout,
                                      retry=opts.conditional_retry)
        return int(blob.generation)

    def delete(self, key: str, *, if_generation_match: int | None = None) -> None:
        # lazy: cold start (google.cloud only when GCS or Pub/Sub is used)
        from google.api_core.exceptions import NotFound

        blob = self._blob(key)
        with self._call(key) as opts:
            if if_generation_match is not None:
                # fake-gcs-server (v1.55, fsouza/fake-gcs-server#1282) ignores ifGenerationMatch on delete;
                # this early check makes a stale delete fail there too. GCS itself enforces it atomically.
                current = blob.bucket.get_blob(blob.name, timeout=opts.timeout, retry=opts.retry)
                _check_generation(key, int(current.generation) if current else 0, if_generation_match)
            try:
                blob.bucket.delete_blob(blob.name, if_generation_match=if_generation_match, timeout=opts.timeout,
                                        retry=opts.conditional_retry)
            except NotFound:
                _check_generation(key, 0, if_generation_match)

    def list(self, prefix: str) -> list[str]:
        return sorted(self.generations(prefix))

    def generations(self, prefix: str) -> dict[str, int]:
        """One listing of names and generations only (no body, no other metadata)."""
        full, strip = (f"{self.prefix}/{prefix}", len(self.prefix) + 1) if self.prefix else (prefix, 0)
        with self._call(prefix + "*") as opts:
            return {b.name[strip:]: int(b.generation) for b in self._client_now().list_blobs(
                self.bucket, prefix=full, fields="items(name,generation),nextPageToken", timeout=opts.timeout,
                retry=opts.retry)}

    def _blob(self, key: str) -> storage.Blob:
        check_key(key)
        name = f"{self.prefix}/{key}" if self.prefix else key
        return self._client_now().bucket(self.bucket).blob(name)

    def _client_now(self) -> storage.Client:
        with self._lock:
            if self._client is None or self._client_pid != os.getpid():
                self._client = _gcs_client()
                self._client_pid = os.getpid()
            return self._client

    @contextlib.contextmanager
    def _call(self, key: str) -> Iterator[CallOptions]:
        """One store call: its deadlines (within the context's budget, which it is charged), and the
        client's exceptions translated; messages name the object, never echo a response body."""
        # lazy: cold start (google.cloud only when GCS or Pub/Sub is used)
        from google.api_core import exceptions as api
        from google.auth.exceptions import GoogleAuthError
        from google.cloud.storage.exceptions import DataCorruption, InvalidResponse

        where = f"gs://{self.bucket}/{self.prefix + '/' if self.prefix else ''}{key}"
        spending = current_budget()
        left = spending.left() if spending is not None else None
        if spending is not None and left is not None and left <= 0:
            raise StoreUnavailable(spending.exhausted(), delay=spending.seconds)
        started, failed = time.monotonic(), True
        try:
            yield call_options(self.deadlines, left)
            failed = False
        except api.PreconditionFailed as exc:
            failed = False
            raise PreconditionFailed(f"{where}: generation precondition failed") from exc
        except api.RetryError as exc:
            cause = type(exc.cause).__name__ if exc.cause is not None else "no answer"
            raise StoreUnavailable(f"{where}: GCS kept failing ({cause}) until the call's deadline") from exc
        except api.GoogleAPICallError as exc:
            raise StoreUnavailable(f"{where}: GCS answered {exc.code} {type(exc).__name__}") from exc
        except (api.GoogleAPIError, GoogleAuthError, DataCorruption, InvalidResponse, OSError) as exc:
            raise StoreUnavailable(f"{where}: GCS unreachable ({type(exc).__name__})") from exc
        finally:
            if spending is not None:
                spending.charge(time.monotonic() - started, failed=failed)


def _gcs_client() -> storage.Client:
    # lazy: cold start (google.cloud only when GCS or Pub/Sub is used)
    from google.cloud import storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        # lazy: cold start (google.cloud only when GCS or Pub/Sub is used)
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project="test", credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    return storage.Client()


def open_store(url: str | None = None) -> ObjectStore:
    """The store named by `url`, else `$TIDECD_STORE`, else `./.tidecd`: `gs://bucket/prefix` or a folder."""
    url = url or os.environ.get("TIDECD_STORE") or "./.tidecd"
    if url.startswith("gs://"):
        bucket, _, prefix = url.removeprefix("gs://").partition("/")
        if not bucket:
            raise ConfigError(f"TIDECD_STORE {url!r}: no bucket name after gs://")
        return GcsStore(bucket, prefix)
    return LocalStore(Path(url).expanduser())


# --- large objects as files ------------------------------------------------------------------------------


def read_file(store: ObjectStore, key: str, dest: Path) -> int | None:
    """The object copied into the file `dest`, streamed where the backend can (local, GCS); its generation,
    or None when absent. Other stores (fakes) go through memory."""
    method = getattr(store, "read_file", None)
    if method is not None:
        generation = method(key, dest)
        return None if generation is None else int(generation)
    blob = store.read(key)
    if blob is None:
        return None
    dest.write_bytes(blob.data)
    return blob.generation


def write_file(store: ObjectStore, key: str, source: Path, *, if_generation_match: int | None = None) -> int:
    """`store.write` with the content of the file `source`, streamed where the backend can."""
    method = getattr(store, "write_file", None)
    if method is not None:
        return int(method(key, source, if_generation_match=if_generation_match))
    return store.write(key, source.read_bytes(), if_generation_match=if_generation_match)


# --- JSON documents --------------------------------------------------------------------------------------


def read_json(store: ObjectStore, key: str) -> tuple[Any, int] | None:
    """The parsed document and its generation, or None when absent."""
    blob = store.read(key)
    if blob is None:
        return None
    try:
        return json.loads(blob.data), blob.generation
    except ValueError:
        raise PermanentError(f"{key}: not valid JSON") from None


def write_json(store: ObjectStore, key: str, value: Any, *, if_generation_match: int | None = None) -> int:
    """Write `value` as JSON (sorted keys, so equal values are equal bytes); returns the new generation."""
    data = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return store.write(key, data, if_generation_match=if_generation_match)


def update_json(store: ObjectStore, key: str, fn: Callable[[Any], Any], *, retries: int = 20) -> tuple[Any, int]:
    """Read-modify-write: `fn(current or None)` gives the new value, written only if nobody wrote between.

    On a lost race it re-reads and calls `fn` again (so `fn` must be pure), up to `retries` times, with
    jittered backoff. A result equal to the current value writes nothing (a no-op update costs no write).
    Returns the value now stored and its generation (0 when absent and left absent).
    """
    for attempt in range(retries + 1):
        found = read_json(store, key)
        current, generation = found if found is not None else (None, 0)
        new = fn(current)
        if new == current:
            return current, generation
        try:
            return new, write_json(store, key, new, if_generation_match=generation)
        except PreconditionFailed:
            time.sleep(random.uniform(0, min(0.2, 0.002 * 2**attempt)))  # noqa: S311 (jitter, not crypto)
    raise Contended(f"{key}: changed by other writers {retries + 1} times in a row")


# --- leases ----------------------------------------------------------------------------------------------

LEASES = "leases/"
LEASE_TTL = 60.0  # seconds; a holder that dies (SIGKILL) blocks its app at most this long


@dataclass(frozen=True)
class Lease:
    """Who holds `leases/<name>` and until when (unix seconds)."""

    holder: str
    expires_at: float

    def live(self, now: float) -> bool:
        return now < self.expires_at


def read_lease(store: ObjectStore, name: str) -> Lease | None:
    return _current_lease(store, name)[0]


def acquire_lease(store: ObjectStore, name: str, holder: str, ttl_seconds: float, now: float | None = None) -> bool:
    """Take the lease if it is free or expired (or already ours: then extend it); False if someone has it.

    The write carries the generation we read (0: absent), so of two racing callers exactly one wins.
    """
    now = time.time() if now is None else now
    current, generation = _current_lease(store, name)
    if current is not None and current.live(now) and current.holder != holder:
        return False
    return _write_lease(store, name, Lease(holder, now + ttl_seconds), generation)


def renew_lease(store: ObjectStore, name: str, holder: str, ttl_seconds: float, now: float | None = None) -> bool:
    """Extend our lease; False if it is gone or someone else took it over."""
    now = time.time() if now is None else now
    for _ in range(3):  # a lost precondition race with our own other renewal is not a takeover: look again
        current, generation = _current_lease(store, name)
        if current is None or current.holder != holder:
            return False
        if _write_lease(store, name, Lease(holder, now + ttl_seconds), generation):
            return True
    return False


def release_lease(store: ObjectStore, name: str, holder: str) -> bool:
    """Delete the lease if we hold it; someone else's lease is left alone (False)."""
    current, generation = _current_lease(store, name)
    if current is None or current.holder != holder:
        return False
    try:
        store.delete(LEASES + name, if_generation_match=generation)
    except PreconditionFailed:
        return False
    return True


@contextlib.contextmanager
def hold_lease(
    store: ObjectStore, name: str, holder: str, ttl_seconds: float, now: float | None = None
) -> Iterator[None]:
    """Run the block under the lease, or raise LeaseHeld; the lease is released afterwards."""
    if not acquire_lease(store, name, holder, ttl_seconds, now):
        other = read_lease(store, name)
        who = f"held by {other.holder!r} until {other.expires_at:.0f}" if other else "just taken"
        raise LeaseHeld(f"lease {name!r} is {who}")
    try:
        yield
    finally:
        with contextlib.suppress(StoreUnavailable):  # it expires anyway; keep the block's own error
            release_lease(store, name, holder)


class LeaseKeeper:
    """Renews a lease we hold every `ttl / 3` seconds on a daemon thread while a step works.

    `lost` turns true when a renewal finds the lease taken over (it had expired: the step ran too long
    or stalled); the step's own state writes are still safe, since they carry generation preconditions.
    `close()` stops renewing and releases the lease."""

    def __init__(self, store: ObjectStore, name: str, holder: str, ttl_seconds: float = LEASE_TTL, *,
                 clock: Callable[[], float] = time.time, interval: float | None = None,
                 acquired_at: float | None = None) -> None:
        self.store, self.name, self.holder, self.ttl = store, name, holder, ttl_seconds
        self.clock = clock
        self.interval = ttl_seconds / 3 if interval is None else interval
        self.lost = False
        self.renewals = 0
        self._renewed_at = acquired_at  # `clock()` when our last acquire or renewal was sent (None: unknown)
        self._renewing = threading.Lock()  # the step's fence and the thread renew; one at a time
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{name}", daemon=True)

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def renew(self) -> bool:
        """Renew now; False (and `lost`) when someone else holds the lease."""
        try:
            with self._renewing:
                sent = self.clock()
                ok = renew_lease(self.store, self.name, self.holder, self.ttl, sent)
                if ok:
                    self._renewed_at = sent
        except StoreUnavailable:
            return True  # try again at the next interval; the lease is still ours until it expires
        if ok:
            self.renewals += 1
        else:
            self.lost = True
        return ok

    def fence(self) -> bool:
        """Before acting: True when the lease is surely still ours. Acquired or renewed by us less than
        `interval` (ttl / 3) ago, it is, with no store call: nobody may take a lease before it expires, a
        whole `ttl` after that write. Otherwise (a step that stalled, or a clock that jumped back) renew now:
        False, and `lost`, when it was taken over. A step's several fences so cost one lease write, not one
        each."""
        with self._renewing:
            last = self._renewed_at
        if not self.lost and last is not None and 0 <= self.clock() - last < min(self.interval, self.ttl / 3):
            return True
        return not self.lost and self.renew()

    def close(self, *, release: bool = True) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if release and not self.lost:
            with contextlib.suppress(StoreUnavailable):
                release_lease(self.store, self.name, self.holder)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if not self.renew():
                return


def _current_lease(store: ObjectStore, name: str) -> tuple[Lease | None, int]:
    """The lease and its generation; an unreadable lease counts as expired so it cannot block forever."""
    blob = store.read(LEASES + name)
    if blob is None:
        return None, 0
    try:
        doc = json.loads(blob.data)
        return Lease(str(doc["holder"]), float(doc["expires_at"])), blob.generation
    except (ValueError, TypeError, KeyError):
        return Lease("", 0.0), blob.generation


def _write_lease(store: ObjectStore, name: str, lease: Lease, generation: int) -> bool:
    try:
        write_json(
            store,
            LEASES + name,
            {"holder": lease.holder, "expires_at": lease.expires_at},
            if_generation_match=generation,
        )
    except PreconditionFailed:
        return False
    return True
