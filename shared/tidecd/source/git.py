"""Git sources: list refs, resolve a revision to a commit, snapshot that commit as a tarball.

Everything talks to git through dulwich (pure Python), so the functions need no git binary. A snapshot
is the tree of one commit fetched shallowly (depth 1) and packed as a deterministic tar.gz; it is cached
in the object store at `snapshots/<repo-key>/<sha>.tar.gz` and extracted with explicit checks, because
a repository (or a tampered cache) must never write outside the checkout. The last refs seen per repo
live at `state/repos/<repo-key>.json`, so one poll tick costs one `ls-remote` per repo.

Reaching the remote (credentials, the dulwich client, transport errors) is `tidecd.source.gitremote`; the
archive format (a deterministic tar of a tree, checked extraction) is `tidecd.source.archive`.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import re
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from tidecd.base.errors import LimitExceeded, NotFound, UnsafePathError
from tidecd.clients.store import ObjectStore, PreconditionFailed, read_file, write_file
from tidecd.config.load import normalize_repo_url, redact_repo_url, repo_key
from tidecd.source.archive import extract, write_tar
from tidecd.source.gitremote import RepoCredentials as RepoCredentials  # where the stages import it from
from tidecd.source.gitremote import git_client, transport_errors, unavailable_error

if TYPE_CHECKING:
    from dulwich.client import GitClient
    from dulwich.objects import Commit, ObjectID
    from dulwich.refs import Ref
    from dulwich.repo import BaseRepo, MemoryRepo

log = structlog.get_logger("tidecd.source")
_HEX = re.compile(r"^[0-9a-f]+$")


# --- refs and revisions ------------------------------------------------------------------------------


def ls_remote(repo_url: str, credentials: RepoCredentials | None = None) -> dict[str, str]:
    """Ref name → sha of every ref of the remote, `HEAD` resolved through its symref."""
    with git_client(repo_url, credentials) as (client, path):
        try:
            result = client.get_refs(path.encode())
        except transport_errors() as exc:
            raise unavailable_error(repo_url, exc, credentials) from exc
    try:  # what dulwich parsed may be anything a server sent (a page's line with a tab is a dumb "ref")
        refs = {name.decode(): sha.decode("ascii") for name, sha in result.refs.items() if sha is not None}
        head_target = {k.decode(): v.decode() for k, v in result.symrefs.items()}.get("HEAD")
    except UnicodeDecodeError as exc:
        raise unavailable_error(repo_url, exc, credentials) from None
    if any(not _HEX.match(sha) or len(sha) not in (40, 64) for sha in refs.values()):
        raise unavailable_error(repo_url, ValueError("a ref's object id is not hexadecimal"), credentials)
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
    message = commit.message.decode("utf-8", "replace").strip()
    author = commit.author.decode("utf-8", "replace").split("<", 1)[0].strip()
    when = datetime.datetime.fromtimestamp(commit.commit_time, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"subject": message.splitlines()[0][:200] if message else "", "message": message[:2000],
            "author": author[:100], "time": when}


def fetch_commit(repo_url: str, sha: str, credentials: RepoCredentials | None) -> tuple[MemoryRepo, Commit]:
    """Fetch one commit (depth 1 for a full sha; all history to expand a short one) into memory (for a
    small write-back; snapshots use `_fetched_commit`, on disk)."""
    # lazy: cold start (dulwich only when a repository is reached: the runtime loads this module on every trigger)
    from dulwich.repo import MemoryRepo

    repo = MemoryRepo()
    return repo, _fetch_into(repo, repo_url, sha, credentials)


@contextlib.contextmanager
def _fetched_commit(repo_url: str, sha: str, credentials: RepoCredentials | None) -> Iterator[tuple[BaseRepo, Commit]]:
    """`fetch_commit` into a bare repository in a temp directory (removed on exit): packs go to disk."""
    # lazy: cold start (dulwich only when a repository is reached: the runtime loads this module on every trigger)
    from dulwich.repo import Repo

    with tempfile.TemporaryDirectory(prefix="tidecd-fetch-") as tmp, Repo.init_bare(tmp) as repo:
        yield repo, _fetch_into(repo, repo_url, sha, credentials)


def _fetch_into(repo: BaseRepo, repo_url: str, sha: str, credentials: RepoCredentials | None) -> Commit:
    # lazy: cold start (dulwich only when a repository is reached: the runtime loads this module on every trigger)
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
    # lazy: cold start (dulwich only when a repository is reached: the runtime loads this module on every trigger)
    from dulwich.protocol import CAPABILITY_THIN_PACK

    capabilities = getattr(client, "_fetch_capabilities", None)
    if isinstance(capabilities, set):
        capabilities.discard(CAPABILITY_THIN_PACK)


def _peel(repo: BaseRepo, object_id: ObjectID) -> Commit | None:
    """The commit an object id names (through annotated tags), or None for trees and blobs."""
    # lazy: cold start (dulwich only when a repository is reached: the runtime loads this module on every trigger)
    from dulwich.objects import Commit, Tag

    obj = repo.object_store[object_id]
    while isinstance(obj, Tag):
        obj = repo.object_store[obj.object[1]]
    return obj if isinstance(obj, Commit) else None


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
        info = fetch_snapshot_to(repo_url, sha, archive, credentials)
        digest = _sha256(archive)
        with contextlib.suppress(PreconditionFailed):  # a racing caller stored the same immutable bytes
            self.store.write(self.commit_key(repo_url, sha), json.dumps(info).encode(), if_generation_match=0)
        with contextlib.suppress(PreconditionFailed):
            write_file(self.store, key, archive, if_generation_match=generation)
        self.store.write(key + ".sha256", digest.encode())


def _sha256(path: Path) -> str:
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
