"""Git sources: list refs, resolve a revision to a commit, snapshot that commit as a tarball.

Everything talks to git through dulwich (pure Python), so the functions need no git binary. A snapshot
is the tree of one commit fetched shallowly (depth 1) and packed as a deterministic tar.gz; it is cached
in the object store at `snapshots/<repo-key>/<sha>.tar.gz` and extracted with explicit checks, because
a repository (or a tampered cache) must never write outside the checkout. The last refs seen per repo
live at `state/repos/<repo-key>.json`, so one poll tick costs one `ls-remote` per repo.

HTTPS (basic auth, or a token as password) is tested against a real git server. SSH URLs use dulwich's
subprocess vendor, i.e. an `ssh` binary on PATH (BatchMode, host keys checked unless `insecure`), with
the private key in a 0600 temp file for the call; tested with a stand-in `ssh`, as there is no sshd here.
Only https, http, ssh, `user@host:path` and git:// URLs are accepted: never local paths or file://.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import shlex
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import urlsplit, urlunsplit

import structlog

from tidecd.base import limits
from tidecd.base.constants import LABEL_SECRET_TYPE, SECRET_TYPE_REPO_CREDS, SECRET_TYPE_REPOSITORY
from tidecd.base.errors import ConfigError, LimitExceeded, NotFound, SourceUnavailable, UnsafePathError
from tidecd.clients.secrets import text_fields
from tidecd.clients.store import ObjectStore, PreconditionFailed
from tidecd.config.load import normalize_repo_url, redact_repo_url, repo_key

if TYPE_CHECKING:
    from dulwich.client import GitClient
    from dulwich.objects import Commit, ObjectID
    from dulwich.refs import Ref
    from dulwich.repo import BaseRepo, MemoryRepo

log = structlog.get_logger("tidecd.source")
HTTP_TIMEOUT = 60.0
_HEX = re.compile(r"^[0-9a-f]+$")
_SCP_LIKE = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9][A-Za-z0-9.-]*:(?!//)[^:\s]")


# --- credentials -------------------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class RepoCredentials:
    """How to authenticate to one repository; `repr` never shows a secret."""

    username: str = ""
    password: str = ""
    ssh_private_key: str = ""
    insecure_ignore_host_key: bool = False
    known_hosts: str = ""
    force_http: bool = False  # `insecureOCIForceHttp: "true"`: an OCI registry over plain HTTP

    def __repr__(self) -> str:
        def mask(value: str) -> str:
            return "'***'" if value else "''"

        known = "'<set>'" if self.known_hosts else "''"
        return (
            f"RepoCredentials(username={self.username!r}, password={mask(self.password)}, "
            f"ssh_private_key={mask(self.ssh_private_key)}, "
            f"insecure_ignore_host_key={self.insecure_ignore_host_key}, "
            f"known_hosts={known})"
        )

    __str__ = __repr__

    @property
    def secrets(self) -> tuple[str, ...]:
        return tuple(s for s in (self.password, self.ssh_private_key) if s)


def credentials_for(repo_url: str, secrets: list[dict[str, Any]]) -> RepoCredentials | None:
    """Pick the credentials for `repo_url` from (unsealed) Argo CD repository Secrets.

    A `repository` Secret whose url equals the repo URL (after normalization) wins when it carries
    credentials; otherwise the `repo-creds` template with the longest matching URL prefix on the same
    host applies, as in Argo CD.
    """
    wanted = credential_endpoint(repo_url)
    exact: RepoCredentials | None = None
    best: tuple[int, RepoCredentials] | None = None
    for secret in secrets:
        kind = ((secret.get("metadata") or {}).get("labels") or {}).get(LABEL_SECRET_TYPE)
        if kind not in (SECRET_TYPE_REPOSITORY, SECRET_TYPE_REPO_CREDS):
            continue
        fields = _secret_fields(secret)
        url = credential_endpoint(fields.get("url", ""))
        if not url:
            continue
        creds = _credentials_from_fields(fields)
        if kind == SECRET_TYPE_REPOSITORY and url == wanted and _has_secret(creds):
            exact = exact or creds
        elif kind == SECRET_TYPE_REPO_CREDS and _prefix_matches(url, wanted) and (best is None or len(url) > best[0]):
            best = (len(url), creds)
    if exact is not None:
        return exact
    return best[1] if best else None


def _secret_fields(secret: dict[str, Any]) -> dict[str, str]:
    """The Secret's `data` (base64-decoded) overlaid with its `stringData`, as Kubernetes does."""
    return text_fields(secret, f"Secret {(secret.get('metadata') or {}).get('name', '?')}")


def _credentials_from_fields(fields: dict[str, str]) -> RepoCredentials:
    return RepoCredentials(
        username=fields.get("username", ""),
        password=fields.get("password", ""),
        ssh_private_key=fields.get("sshPrivateKey", ""),
        insecure_ignore_host_key=fields.get("insecure", "").strip().lower() == "true",
        force_http=fields.get("insecureOCIForceHttp", "").strip().lower() == "true",
    )


def _has_secret(creds: RepoCredentials) -> bool:
    return bool(creds.username or creds.password or creds.ssh_private_key)


def _prefix_matches(prefix: str, url: str) -> bool:
    """Argo CD's prefix match, but never across hosts (`https://git.x` must not match `git.x.evil`)."""
    return url.startswith(prefix) and _host(prefix) == _host(url)


# --- repository URLs ---------------------------------------------------------------------------------
# Object-store keys use config.repo_key (one key for every spelling of a repo). Credentials match on the
# endpoint instead, which keeps scheme and user: an SSH key Secret must not be picked for an https URL.


def credential_endpoint(url: str) -> str:
    """Lower-case, without http credentials, trailing `/` or `.git`; `git@h:p` as `ssh://git@h/p`."""
    url = url.strip()
    if _SCP_LIKE.match(url) and "://" not in url:
        user_host, _, path = url.partition(":")
        url = f"ssh://{user_host}/{path.lstrip('/')}"
    parts = urlsplit(url)
    if parts.scheme in ("http", "https") and "@" in parts.netloc:
        parts = parts._replace(netloc=parts.netloc.rpartition("@")[2])
    url = urlunsplit(parts).lower().rstrip("/")
    return url.removesuffix(".git")


def _host(endpoint: str) -> str:
    return urlsplit(endpoint).netloc.rpartition("@")[2]


def _check_scheme(repo_url: str) -> None:
    scheme = urlsplit(repo_url).scheme
    if any(c.isspace() for c in repo_url):
        raise ConfigError(f"repoURL {redact_repo_url(repo_url)!r} contains whitespace")
    if scheme in ("http", "https", "ssh", "git") or (_SCP_LIKE.match(repo_url) and "://" not in repo_url):
        return
    raise ConfigError(f"repoURL {redact_repo_url(repo_url)!r}: only https, http, ssh and git URLs are supported")


# --- the dulwich client ------------------------------------------------------------------------------


@contextlib.contextmanager
def git_client(repo_url: str, credentials: RepoCredentials | None) -> Iterator[tuple[GitClient, str]]:
    """A dulwich client for the URL; SSH key and known_hosts live in temp files for the call only."""
    from dulwich.client import default_urllib3_manager, get_transport_and_path

    _check_scheme(repo_url)
    creds = credentials or RepoCredentials()
    kwargs: dict[str, Any] = {}
    if urlsplit(repo_url).scheme in ("http", "https"):
        kwargs["pool_manager"] = default_urllib3_manager(
            None, timeout=HTTP_TIMEOUT, cert_reqs="CERT_NONE" if creds.insecure_ignore_host_key else None
        )
        if creds.username or creds.password:
            kwargs["username"] = creds.username or "git"
            kwargs["password"] = creds.password
        yield get_transport_and_path(repo_url, **kwargs)
        return
    with tempfile.TemporaryDirectory(prefix="tidecd-ssh-") as tmp:
        kwargs["ssh_command"] = ssh_command(creds, Path(tmp))
        if creds.ssh_private_key:
            key_file = Path(tmp) / "id"
            key_file.touch(mode=0o600)
            key_file.write_text(creds.ssh_private_key.rstrip("\n") + "\n")
            kwargs["key_filename"] = str(key_file)
        yield get_transport_and_path(repo_url, **kwargs)


def ssh_command(creds: RepoCredentials, tmp: Path) -> str:
    """The `ssh` command line: batch mode, and host keys checked unless the repo is marked insecure."""
    args = ["ssh", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes"]
    if creds.insecure_ignore_host_key:
        args += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    elif creds.known_hosts:
        known = tmp / "known_hosts"
        known.write_text(creds.known_hosts.rstrip("\n") + "\n")
        args += ["-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known}"]
    else:
        args += ["-o", "StrictHostKeyChecking=yes"]
    return shlex.join(args)


def transport_errors() -> tuple[type[BaseException], ...]:
    import urllib3.exceptions
    from dulwich.client import HTTPProxyUnauthorized, HTTPUnauthorized
    from dulwich.errors import GitProtocolError, NotGitRepository

    return (
        GitProtocolError,
        NotGitRepository,
        HTTPUnauthorized,
        HTTPProxyUnauthorized,
        urllib3.exceptions.HTTPError,
        OSError,
    )


def unavailable_error(repo_url: str, exc: BaseException, credentials: RepoCredentials | None) -> SourceUnavailable:
    """A SourceUnavailable naming the repo, with no credential in the text."""
    from dulwich.client import HTTPProxyUnauthorized, HTTPUnauthorized
    from dulwich.errors import NotGitRepository

    if isinstance(exc, HTTPUnauthorized | HTTPProxyUnauthorized):
        reason = "authentication failed (check the repository credentials)"
    elif isinstance(exc, NotGitRepository):
        reason = "not found or not a git repository"
    else:
        reason = _scrub(f"{type(exc).__name__}: {exc}", credentials)
    return SourceUnavailable(f"repository {redact_repo_url(repo_url)} is unavailable: {reason}", delay=30.0)


def _scrub(text: str, credentials: RepoCredentials | None) -> str:
    text = re.sub(r"://[^/@\s]+@", "://", text)
    for secret in credentials.secrets if credentials else ():
        text = text.replace(secret, "***")
    return text[:300]


# --- refs and revisions ------------------------------------------------------------------------------


def ls_remote(repo_url: str, credentials: RepoCredentials | None = None) -> dict[str, str]:
    """Ref name → sha of every ref of the remote, `HEAD` resolved through its symref."""
    with git_client(repo_url, credentials) as (client, path):
        try:
            result = client.get_refs(path.encode())
        except transport_errors() as exc:
            raise unavailable_error(repo_url, exc, credentials) from exc
    refs = {name.decode(): sha.decode() for name, sha in result.refs.items() if sha is not None}
    head_target = {k.decode(): v.decode() for k, v in result.symrefs.items()}.get("HEAD")
    if head_target is not None and head_target in refs:
        refs["HEAD"] = refs[head_target]
    return refs


def resolve_revision(refs: dict[str, str], target_revision: str, repo_url: str = "") -> str:
    """The commit sha `target_revision` names, in git's rev-parse order over the remote's refs.

    Accepts HEAD (or empty), a branch, a tag (annotated tags are peeled), a full ref name, a full sha,
    or a short sha (7+ hex). A short sha that is no ref tip is returned as given: `expand_sha` (or a
    fetch) turns it into the full sha.
    """
    rev = target_revision.strip() or "HEAD"
    for name in (rev, f"refs/{rev}", f"refs/tags/{rev}", f"refs/heads/{rev}", f"refs/remotes/{rev}"):
        if name in refs:
            return refs.get(f"{name}^{{}}", refs[name])
    lowered = rev.lower()
    if _HEX.match(lowered) and len(lowered) == 40:
        return lowered
    if _HEX.match(lowered) and len(lowered) >= 7:
        tips = {sha for name, sha in refs.items() if sha.startswith(lowered) and f"{name}^{{}}" not in refs}
        return tips.pop() if len(tips) == 1 else lowered
    raise NotFound(f"revision {target_revision!r} not found in {redact_repo_url(repo_url) or 'the repository'}")


def resolve(
    repo_url: str,
    target_revision: str,
    credentials: RepoCredentials | None = None,
    refs: dict[str, str] | None = None,
) -> str:
    """The full commit sha of `target_revision` (one ls-remote unless `refs` is given)."""
    if refs is None:
        refs = ls_remote(repo_url, credentials)
    return expand_sha(repo_url, resolve_revision(refs, target_revision, repo_url), credentials)


def expand_sha(repo_url: str, sha: str, credentials: RepoCredentials | None = None) -> str:
    """A full sha as is; a short one expanded by fetching the remote's history (rare, so costly)."""
    if len(sha) == 40:
        return sha
    with _fetched_commit(repo_url, sha, credentials) as (_repo, commit):
        return commit.id.decode()


def changed_refs(old: dict[str, str], new: dict[str, str]) -> set[str]:
    """Ref names added, removed or moved between two ls-remote results."""
    return {name for name in old.keys() | new.keys() if old.get(name) != new.get(name)}


# --- fetching and snapshots --------------------------------------------------------------------------


def fetch_snapshot(repo_url: str, sha: str, credentials: RepoCredentials | None = None) -> bytes:
    """The tree of commit `sha` as a deterministic tar.gz (files, exec bits, symlinks; no submodules)."""
    with tempfile.TemporaryDirectory(prefix="tidecd-snapshot-") as tmp:
        archive = Path(tmp) / "snapshot.tar.gz"
        fetch_snapshot_to(repo_url, sha, archive, credentials)
        return archive.read_bytes()


def fetch_snapshot_to(repo_url: str, sha: str, archive: Path,
                      credentials: RepoCredentials | None = None) -> dict[str, str]:
    """`fetch_snapshot` written to the file `archive` (the fetched pack and the tar both live on disk, so
    memory holds one blob at a time, never the repository or the archive); returns what the dashboard
    shows of the commit: subject, author, time (bounded)."""
    with _fetched_commit(repo_url, sha, credentials) as (repo, commit), archive.open("wb") as out:
        write_tar(repo, commit.tree, out)
        return commit_info(commit)


def commit_info(commit: Commit) -> dict[str, str]:
    import datetime

    message = commit.message.decode("utf-8", "replace").strip()
    author = commit.author.decode("utf-8", "replace").split("<", 1)[0].strip()
    when = datetime.datetime.fromtimestamp(commit.commit_time, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"subject": message.splitlines()[0][:200] if message else "", "message": message[:2000],
            "author": author[:100], "time": when}


def fetch_commit(repo_url: str, sha: str, credentials: RepoCredentials | None) -> tuple[MemoryRepo, Commit]:
    """Fetch one commit (depth 1 for a full sha; all history to expand a short one) into memory (for a
    small write-back; snapshots use `_fetched_commit`, on disk)."""
    from dulwich.repo import MemoryRepo

    repo = MemoryRepo()
    return repo, _fetch_into(repo, repo_url, sha, credentials)


@contextlib.contextmanager
def _fetched_commit(repo_url: str, sha: str, credentials: RepoCredentials | None) -> Iterator[tuple[BaseRepo, Commit]]:
    """`fetch_commit` into a bare repository in a temp directory (removed on exit): packs go to disk."""
    from dulwich.repo import Repo

    with tempfile.TemporaryDirectory(prefix="tidecd-fetch-") as tmp, Repo.init_bare(tmp) as repo:
        yield repo, _fetch_into(repo, repo_url, sha, credentials)


def _fetch_into(repo: BaseRepo, repo_url: str, sha: str, credentials: RepoCredentials | None) -> Commit:
    from dulwich.objects import Commit, ObjectID

    sha = sha.strip().lower()
    if not _HEX.match(sha) or not 7 <= len(sha) <= 40:
        raise NotFound(f"revision {sha!r} not found in {redact_repo_url(repo_url)}: not a commit sha")
    full = len(sha) == 40
    wanted = ObjectID(sha.encode())
    advertised: dict[Ref, ObjectID] = {}

    def wants(refs: Mapping[Ref, ObjectID], depth: int | None = None) -> list[ObjectID]:
        advertised.update(refs)
        if full:
            return [wanted]
        return sorted({v for k, v in refs.items() if k.startswith((b"refs/heads/", b"refs/tags/"))})

    with git_client(repo_url, credentials) as (client, path):
        _no_thin_pack(client)
        try:
            client.fetch(path.encode(), repo, determine_wants=wants, depth=1 if full else None)
        except transport_errors() as exc:
            if advertised and wanted not in advertised.values():
                # The server answered but refused the want: the commit is not in the repository.
                raise NotFound(f"revision {sha!r} not found in {redact_repo_url(repo_url)}") from exc
            raise unavailable_error(repo_url, exc, credentials) from exc
    if full:
        matches = [wanted] if wanted in repo.object_store else []
    else:
        matches = [m for m in repo.object_store.iter_prefix(wanted) if _peel(repo, m) is not None]
    if len(matches) != 1:
        detail = "is ambiguous" if matches else "not found"
        raise NotFound(f"revision {sha!r} {detail} in {redact_repo_url(repo_url)}")
    obj = _peel(repo, matches[0])
    if not isinstance(obj, Commit):
        raise NotFound(f"revision {sha!r} in {redact_repo_url(repo_url)} is not a commit")
    return obj


def _no_thin_pack(client: GitClient) -> None:
    """Ask for a plain pack, not a thin one. A shallow fetch with no local objects gets the same objects
    either way, but dulwich copies a thin pack through a stream reader that holds each object compressed
    and decompressed at once (2x a big blob in memory); a plain pack is written to disk as it arrives and
    indexed from the file, one decompressed object at a time."""
    from dulwich.protocol import CAPABILITY_THIN_PACK

    capabilities = getattr(client, "_fetch_capabilities", None)
    if isinstance(capabilities, set):
        capabilities.discard(CAPABILITY_THIN_PACK)


def _peel(repo: BaseRepo, object_id: ObjectID) -> Commit | None:
    """The commit an object id names (through annotated tags), or None for trees and blobs."""
    from dulwich.objects import Commit, Tag

    obj = repo.object_store[object_id]
    while isinstance(obj, Tag):
        obj = repo.object_store[obj.object[1]]
    return obj if isinstance(obj, Commit) else None


def tar_tree(repo: BaseRepo, tree_id: ObjectID) -> bytes:
    """A tar.gz of one tree: sorted members, mtime 0, owner root, so equal trees give equal bytes."""
    buffer = io.BytesIO()
    write_tar(repo, tree_id, buffer)
    return buffer.getvalue()


def write_tar(repo: BaseRepo, tree_id: ObjectID, out: BinaryIO) -> None:
    """`tar_tree` written to `out`. The tree is checked against the snapshot limits (files, path depth,
    uncompressed size) entry by entry, before each blob is read."""
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
            if stat.S_ISDIR(entry.mode) or (entry.mode & 0o170000) == 0o160000:
                continue  # submodules (gitlinks) are not part of the snapshot
            name = os.fsdecode(entry.path)
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
        import zlib

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


class Snapshots:
    """Repository snapshots cached in the object store; a commit is fetched at most once.

    Each snapshot is fetched, stored and read as a file (never whole in memory), with its SHA-256 in a
    `<key>.sha256` object beside it. A cached snapshot whose checksum does not match, or that cannot be
    extracted when it has no checksum yet, is taken as corrupt: it is fetched again and replaced.
    """

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    @staticmethod
    def key(repo_url: str, sha: str) -> str:
        return f"snapshots/{repo_key(repo_url)}/{sha}.tar.gz"

    @staticmethod
    def commit_key(repo_url: str, sha: str) -> str:
        return f"snapshots/{repo_key(repo_url)}/{sha}.commit.json"

    def commit(self, repo_url: str, sha: str) -> dict[str, str] | None:
        """What `commit_info` recorded when the snapshot of `sha` was fetched (None for older snapshots)."""
        blob = self.store.read(self.commit_key(repo_url, sha)) if _HEX.match(sha or "") else None
        if blob is None:
            return None
        try:
            data = json.loads(blob.data)
        except ValueError:
            return None
        return {k: str(v) for k, v in data.items()} if isinstance(data, dict) else None

    def get_or_fetch(self, repo_url: str, sha: str, credentials: RepoCredentials | None = None) -> bytes:
        with tempfile.TemporaryDirectory(prefix="tidecd-snapshot-") as tmp:
            return self._archive(repo_url, sha, Path(tmp), credentials, None)[0].read_bytes()

    @staticmethod
    def extract(tar_bytes: bytes | Path, dest: Path) -> None:
        extract(tar_bytes, dest)

    def checkout(self, repo_url: str, sha: str, dest: Path, credentials: RepoCredentials | None = None) -> None:
        """Snapshot of `sha` extracted into `dest` (a corrupt cached copy is fetched again)."""
        with tempfile.TemporaryDirectory(prefix="tidecd-snapshot-") as tmp:
            archive, extracted = self._archive(repo_url, sha, Path(tmp), credentials, dest)
            if not extracted:
                extract(archive, dest)

    def _archive(self, repo_url: str, sha: str, tmp: Path, credentials: RepoCredentials | None,
                 extract_into: Path | None) -> tuple[Path, bool]:
        """The snapshot as a file in `tmp`, from the store when intact, else fetched and stored; and
        whether it was extracted into `extract_into` already (a cached copy is, to prove it readable)."""
        from tidecd.clients.store import read_file

        sha = expand_sha(repo_url, sha.strip().lower(), credentials)
        key = self.key(repo_url, sha)
        archive = tmp / "snapshot.tar.gz"
        generation = read_file(self.store, key, archive)
        if generation is not None:
            problem = self._problem(key, archive, extract_into)
            if not problem:
                return archive, extract_into is not None
            log.warning("snapshot corrupt, fetching it again", key=key, problem=problem)
        self._fetch_and_store(repo_url, sha, key, archive, credentials, generation or 0)
        return archive, False

    def _problem(self, key: str, archive: Path, extract_into: Path | None) -> str:
        """Why the cached archive cannot be used ("" when it can, and is extracted if asked)."""
        recorded = self.store.read(key + ".sha256")
        if recorded is not None and recorded.data.decode(errors="replace").strip() != _sha256(archive):
            return "checksum mismatch"
        if extract_into is None:
            return ""
        try:
            extract(archive, extract_into)
        except (UnsafePathError, LimitExceeded) as exc:
            if recorded is None:  # no checksum to tell tampering from a real refusal: fetch to find out
                return f"unreadable ({exc})"
            raise
        return ""

    def _fetch_and_store(self, repo_url: str, sha: str, key: str, archive: Path,
                         credentials: RepoCredentials | None, generation: int) -> None:
        from tidecd.clients.store import write_file

        info = fetch_snapshot_to(repo_url, sha, archive, credentials)
        digest = _sha256(archive)
        with contextlib.suppress(PreconditionFailed):  # a racing caller stored the same immutable bytes
            self.store.write(self.commit_key(repo_url, sha), json.dumps(info).encode(), if_generation_match=0)
        with contextlib.suppress(PreconditionFailed):
            write_file(self.store, key, archive, if_generation_match=generation)
        self.store.write(key + ".sha256", digest.encode())


def _sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1024 * 1024), b""):
            digest.update(chunk)
    return digest.hexdigest()


class RefCache:
    """The last refs seen per repository (the poll function's memory), at `state/repos/<repo-key>.json`."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    @staticmethod
    def key(repo_url: str) -> str:
        return f"state/repos/{repo_key(repo_url)}.json"

    def load(self, repo_url: str) -> dict[str, str]:
        blob = self.store.read(self.key(repo_url))
        if blob is None:
            return {}
        refs = json.loads(blob.data).get("refs", {})
        return {str(k): str(v) for k, v in refs.items()}

    def save(self, repo_url: str, refs: dict[str, str]) -> None:
        doc = {"url": normalize_repo_url(repo_url), "refs": dict(sorted(refs.items()))}
        self.store.write(self.key(repo_url), json.dumps(doc, indent=1).encode())
