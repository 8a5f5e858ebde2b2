"""tidecd.source against a real git smart-HTTP server (git http-backend), driven by the real git CLI."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.support.gitserver import AuthGitServer, GitRepo, run_git
from tidecd import source
from tidecd.base.errors import NotFound, SourceUnavailable
from tidecd.clients.store import MemoryStore
from tidecd.source import RepoCredentials, Snapshots
from tidecd_dev import gitserver
from tidecd_dev.devcluster import free_port
from tidecd_dev.gitserver import GitServer

pytestmark = pytest.mark.e2e


def _members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


# --- the server itself, through the git CLI ------------------------------------------------------------


def test_clone_push_and_fetch_through_the_server(git_repo: GitRepo, tmp_path: Path) -> None:
    git_repo.write("a.txt", "one\n")
    git_repo.write("big.bin", os.urandom(2_000_000).hex())  # > http.postBuffer: chunked + gzip bodies
    first = git_repo.commit("first")
    git_repo.push()
    assert run_git("ls-remote", git_repo.url, "refs/heads/main").split()[0] == first
    run_git("clone", "--quiet", "--depth=1", git_repo.url, str(tmp_path / "clone"))
    assert (tmp_path / "clone/a.txt").read_text() == "one\n"
    git_repo.write("a.txt", "two\n")
    second = git_repo.commit("second")
    git_repo.push()
    run_git("pull", "--quiet", "--ff-only", cwd=tmp_path / "clone")
    assert run_git("rev-parse", "HEAD", cwd=tmp_path / "clone") == second
    counts = git_repo.server.counts(git_repo.name)
    assert counts[gitserver.RECEIVE_PACK] >= 2 and counts[gitserver.UPLOAD_PACK] >= 2
    assert counts[gitserver.LS_REMOTE] >= 3


def test_basic_auth(git_server_auth: AuthGitServer, tmp_path: Path) -> None:
    url = git_server_auth.create_repo("private")
    with pytest.raises(AssertionError, match="(?i)authentication failed|could not read username"):
        run_git("ls-remote", url)
    wrong = url.replace("http://", "http://tidecd:wrong-password@")
    with pytest.raises(AssertionError, match="(?i)authentication failed"):
        run_git("ls-remote", wrong)
    wrong_user = git_server_auth.auth_url("private").replace("tidecd:", "other:")
    with pytest.raises(AssertionError, match="(?i)authentication failed"):
        run_git("ls-remote", wrong_user)
    repo = GitRepo(git_server_auth, "private", tmp_path / "work", clone_url=git_server_auth.auth_url("private"))
    repo.write("f", "x")
    sha = repo.commit()
    repo.push()
    assert run_git("ls-remote", git_server_auth.auth_url("private"), "HEAD").split()[0] == sha


def test_gzip_request_body_and_git_protocol_header(git_repo: GitRepo) -> None:
    """git gzips large upload-pack requests; protocol v2 is negotiated through the Git-Protocol header."""
    import gzip
    import urllib.request

    sha = git_repo.commit("c")
    git_repo.push()
    before = git_repo.server.requests(git_repo.name, gitserver.LS_REFS)
    body = b"0014command=ls-refs\n" + b"0001" + b"0009peel\n" + b"0000"
    request = urllib.request.Request(  # noqa: S310 (local server)
        f"{git_repo.url}/git-upload-pack",
        data=gzip.compress(body),
        headers={
            "Content-Type": "application/x-git-upload-pack-request",
            "Content-Encoding": "gzip",
            "Git-Protocol": "version=2",
        },
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (local server)
        answer = response.read()
    assert f"{sha} refs/heads/main".encode() in answer
    assert git_repo.server.requests(git_repo.name, gitserver.LS_REFS) == before + 1


def test_server_runs_as_a_module(tmp_path: Path) -> None:
    import subprocess
    import sys

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidecd_dev.gitserver", "--root", str(tmp_path), "--port", str(port),
         "--create", "demo"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"http://127.0.0.1:{port}/demo.git"
        gitserver.wait_until_serving(f"http://127.0.0.1:{port}/")
        assert source.ls_remote(f"http://127.0.0.1:{port}/demo.git") == {}  # empty repo: no refs yet
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# --- ls_remote and revisions ---------------------------------------------------------------------------


@pytest.fixture
def history(git_repo: GitRepo) -> dict[str, str]:
    """main: c1 (tag v1 annotated, tag light) → c2; branch dev: c3. Returns name → sha."""
    git_repo.write("app/config.yaml", "version: 1\n")
    c1 = git_repo.commit("c1")
    git_repo.tag("v1", annotated=True)
    git_repo.tag("light")
    git_repo.write("app/config.yaml", "version: 2\n")
    c2 = git_repo.commit("c2")
    git_repo.git("checkout", "--quiet", "-b", "dev")
    git_repo.write("dev.txt", "dev\n")
    c3 = git_repo.commit("c3")
    git_repo.git("checkout", "--quiet", "main")
    git_repo.push("main")
    git_repo.push("dev")
    git_repo.push("--tags")
    return {"c1": c1, "c2": c2, "c3": c3}


def test_ls_remote(git_repo: GitRepo, history: dict[str, str]) -> None:
    git_repo.server.reset_counts()
    refs = source.ls_remote(git_repo.url)
    assert refs["HEAD"] == refs["refs/heads/main"] == history["c2"]
    assert refs["refs/heads/dev"] == history["c3"]
    assert refs["refs/tags/v1^{}"] == history["c1"] != refs["refs/tags/v1"]  # annotated: tag object
    assert refs["refs/tags/light"] == history["c1"]
    assert git_repo.server.requests(git_repo.name, gitserver.LS_REMOTE) == 1


def test_resolve_every_revision_form(git_repo: GitRepo, history: dict[str, str]) -> None:
    refs = source.ls_remote(git_repo.url)
    url = git_repo.url
    c1, c2, c3 = history["c1"], history["c2"], history["c3"]
    cases = {
        "HEAD": c2,
        "": c2,
        "main": c2,
        "refs/heads/dev": c3,
        "dev": c3,
        "v1": c1,
        "light": c1,
        c1: c1,
        c2[:7]: c2,
        c1[:10]: c1,
    }
    for revision, expected in cases.items():
        assert source.resolve(url, revision, refs=refs) == expected, revision


def test_short_sha_that_is_no_ref_tip(git_repo: GitRepo) -> None:
    git_repo.write("f", "old\n")
    old = git_repo.commit("old")
    git_repo.write("f", "new\n")
    git_repo.commit("new")
    git_repo.push()
    refs = source.ls_remote(git_repo.url)
    assert source.resolve_revision(refs, old[:8]) == old[:8]  # left for the fetch
    assert source.resolve(git_repo.url, old[:8], refs=refs) == old
    snapshots = Snapshots(MemoryStore())
    snapshots.checkout(git_repo.url, old[:8], git_repo.workdir.parent / "out")
    assert (git_repo.workdir.parent / "out/f").read_text() == "old\n"
    keys = snapshots.store.list("snapshots/")  # cached under the full sha, with its checksum and commit info
    assert [k.rsplit("/", 1)[1] for k in keys] == [f"{old}.commit.json", f"{old}.tar.gz", f"{old}.tar.gz.sha256"]


def test_unknown_revision(git_repo: GitRepo, history: dict[str, str]) -> None:
    with pytest.raises(NotFound, match=rf"revision 'nope' not found in {git_repo.url}"):
        source.resolve(git_repo.url, "nope")
    with pytest.raises(NotFound, match="not found in"):
        source.fetch_snapshot(git_repo.url, "0123456789" * 4)
    with pytest.raises(NotFound, match="not found in"):
        source.resolve(git_repo.url, "0123456789abc")


def test_older_commit_by_full_sha_that_is_no_tip(git_repo: GitRepo, history: dict[str, str]) -> None:
    data = source.fetch_snapshot(git_repo.url, history["c1"])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = tar.extractfile("app/config.yaml")
        assert member is not None and member.read() == b"version: 1\n"


# --- snapshots -----------------------------------------------------------------------------------------


def test_snapshot_content_and_cache(git_repo: GitRepo, tmp_path: Path) -> None:
    git_repo.write("app/deploy.yaml", "kind: ConfigMap\n")
    git_repo.write("bin/run.sh", "#!/bin/sh\n", executable=True)
    git_repo.symlink("current", "app/deploy.yaml")
    git_repo.symlink("app/up", "..")
    sha = git_repo.commit("snapshot")
    git_repo.push()
    server = git_repo.server
    server.reset_counts()

    snapshots = Snapshots(MemoryStore())
    data = snapshots.get_or_fetch(git_repo.url, sha)
    assert server.requests(git_repo.name, gitserver.UPLOAD_PACK) == 1
    members = _members(data)
    assert sorted(members) == ["app/deploy.yaml", "app/up", "bin/run.sh", "current"]
    assert members["current"].issym() and members["current"].linkname == "app/deploy.yaml"
    assert members["bin/run.sh"].mode == 0o755 and members["app/deploy.yaml"].mode == 0o644

    server.reset_counts()
    assert snapshots.get_or_fetch(git_repo.url, sha) == data
    assert server.counts(git_repo.name) == {}, "a cached snapshot costs no request at all"

    assert source.fetch_snapshot(git_repo.url, sha) == data, "snapshots are deterministic"
    dest = tmp_path / "checkout"
    Snapshots.extract(data, dest)
    assert (dest / "current").is_symlink() and (dest / "current").read_text() == "kind: ConfigMap\n"
    assert (dest / "app/up/bin/run.sh").exists()
    assert os.access(dest / "bin/run.sh", os.X_OK)


def test_snapshot_of_deltified_and_whole_objects_has_every_byte(git_repo: GitRepo, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Blobs stored whole in the fetched pack are streamed out of the pack file; blobs the server sent as
    deltas (two near-identical files in one commit, and a file of an earlier pushed commit changed) are
    resolved by dulwich. Both come out byte for byte."""
    import random

    rng = random.Random(7)
    lines = [f"line {i} {rng.random()}\n" for i in range(20000)]
    git_repo.write("data/a.txt", "".join(lines))
    git_repo.commit("a")
    git_repo.push()
    lines[100] = "changed\n"
    git_repo.write("data/b.txt", "".join(lines))
    git_repo.write("data/a.txt", "".join(lines[:-1]))
    git_repo.write("data/empty.txt", "")
    sha = git_repo.commit("near copies")
    git_repo.push()
    bare = git_repo.server.root / f"{git_repo.name.removesuffix('.git')}.git"
    run_git("repack", "-a", "-d", "-f", "--depth=5", cwd=bare)  # the server's objects as deltas where it can
    from dulwich.object_store import DiskObjectStore

    resolved: list[bytes] = []
    original = DiskObjectStore.get_raw

    def spy(self: DiskObjectStore, name: Any) -> tuple[int, bytes]:
        found = original(self, name)
        if found[0] == 3:  # a blob resolved in memory: a delta
            resolved.append(found[1])
        return found

    monkeypatch.setattr(DiskObjectStore, "get_raw", spy)
    dest = tmp_path / "checkout"
    Snapshots(MemoryStore()).checkout(git_repo.url, sha, dest)
    wanted = {name: (git_repo.workdir / name).read_bytes() for name in ("data/a.txt", "data/b.txt")}
    assert 1 <= len(resolved) < 2 and resolved[0] in wanted.values(), "one of the two came as a delta"
    for name in ("data/a.txt", "data/b.txt", "data/empty.txt"):
        assert (dest / name).read_bytes() == (git_repo.workdir / name).read_bytes(), name


def test_snapshot_with_credentials(git_server_auth: AuthGitServer, tmp_path: Path) -> None:
    name = "snap-auth"
    repo = GitRepo(git_server_auth, name, tmp_path / "work", clone_url=git_server_auth.auth_url(name))
    repo.write("values.yaml", "replicas: 2\n")
    sha = repo.commit()
    repo.push()
    creds = RepoCredentials(username="tidecd", password=git_server_auth.password)
    assert source.resolve(repo.url, "main", creds) == sha
    data = Snapshots(MemoryStore()).get_or_fetch(repo.url, sha, creds)
    assert "values.yaml" in _members(data)


def test_wrong_or_missing_credentials_are_unavailable_without_the_password(
    git_server_auth: AuthGitServer,
) -> None:
    url = git_server_auth.create_repo("locked")
    bad = RepoCredentials(username="tidecd", password="not-the-password-xyz")
    for creds in (None, bad):
        with pytest.raises(SourceUnavailable, match=f"repository {url} is unavailable: authentication") as info:
            source.ls_remote(url, creds)
        assert "not-the-password-xyz" not in str(info.value)
        assert git_server_auth.password not in str(info.value)


def test_unreachable_repo(git_server: GitServer) -> None:
    url = f"http://tidecd:s3cret-pw@127.0.0.1:{free_port()}/gone.git"
    creds = RepoCredentials(username="tidecd", password="s3cret-pw")
    for call in (lambda: source.ls_remote(url, creds), lambda: source.fetch_snapshot(url, "a" * 40, creds)):
        with pytest.raises(SourceUnavailable, match=r"repository http://127\.0\.0\.1:\d+/gone\.git") as info:
            call()
        assert "s3cret-pw" not in str(info.value)


def test_missing_repo_is_unavailable(git_server: GitServer) -> None:
    with pytest.raises(SourceUnavailable, match="not found or not a git repository"):
        source.ls_remote(git_server.repo_url("does-not-exist"))


FAKE_SSH = """#!{python}
# Stands in for ssh (no sshd here): records its arguments, checks the key file, runs the git command locally.
import json, os, shlex, stat, subprocess, sys
args = sys.argv[1:]
key = args[args.index("-i") + 1]
record = {{"args": args, "key": open(key).read(), "key_mode": stat.S_IMODE(os.stat(key).st_mode)}}
open({log!r}, "w").write(json.dumps(record))
env = dict(os.environ)
for i, arg in enumerate(args):
    if arg == "-o" and args[i + 1].startswith("SetEnv GIT_PROTOCOL="):
        env["GIT_PROTOCOL"] = args[i + 1].split("=", 1)[1]
sys.exit(subprocess.run(shlex.split(args[-1]), env=env).returncode)
"""


def test_ssh_transport_with_private_key(git_repo: GitRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SSH path end to end except ssh itself: dulwich's subprocess vendor, key file, known_hosts."""
    import json
    import sys

    git_repo.write("over-ssh.yaml", "a: 1\n")
    sha = git_repo.commit("over ssh")
    git_repo.push()
    bin_dir, log = tmp_path / "bin", tmp_path / "ssh.json"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(FAKE_SSH.format(python=sys.executable, log=str(log)))
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    bare = git_repo.server.root / f"{git_repo.name}.git"
    creds = RepoCredentials(ssh_private_key="-----BEGIN OPENSSH PRIVATE KEY-----\nabc", known_hosts="h ssh-ed25519 A")

    refs = source.ls_remote(f"ssh://git@localhost{bare}", creds)
    assert refs["HEAD"] == sha
    record = json.loads(log.read_text())
    assert record["key"] == "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n" and record["key_mode"] == 0o600
    assert "StrictHostKeyChecking=yes" in record["args"] and "git@localhost" in record["args"]
    data = source.fetch_snapshot(f"git@localhost:{bare}", sha, creds)
    assert list(_members(data)) == ["over-ssh.yaml"]
    assert not Path(record["args"][record["args"].index("-i") + 1]).exists(), "the key file is removed"
