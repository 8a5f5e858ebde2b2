"""Unit tests of tidecd.source without a server: revisions, credentials, tarballs and safe extraction."""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import stat
import tarfile
from pathlib import Path
from typing import Any

import pytest
from dulwich.objects import Blob, ObjectID, Tree
from dulwich.repo import MemoryRepo

from tidecd import source
from tidecd.base.errors import ConfigError, NotFound, SecretError, SourceUnavailable, UnsafePathError
from tidecd.clients.store import MemoryStore
from tidecd.source import RefCache, RepoCredentials, Snapshots, credentials_for, extract, resolve_revision

SHA_MAIN = "a" * 40
SHA_DEV = "b" * 40
SHA_TAG_OBJ = "c" * 40
SHA_TAGGED = "d" * 40
SHA_LIGHT = "1234567" + "e" * 33

REFS = {
    "HEAD": SHA_MAIN,
    "refs/heads/main": SHA_MAIN,
    "refs/heads/dev": SHA_DEV,
    "refs/tags/v1": SHA_TAG_OBJ,
    "refs/tags/v1^{}": SHA_TAGGED,
    "refs/tags/light": SHA_LIGHT,
}


# --- resolve_revision ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("revision", "expected"),
    [
        ("HEAD", SHA_MAIN),
        ("", SHA_MAIN),
        ("  ", SHA_MAIN),
        ("main", SHA_MAIN),
        ("dev", SHA_DEV),
        ("refs/heads/dev", SHA_DEV),
        ("heads/dev", SHA_DEV),
        ("v1", SHA_TAGGED),  # annotated tag peeled to its commit
        ("refs/tags/v1", SHA_TAGGED),
        ("light", SHA_LIGHT),
        (SHA_DEV, SHA_DEV),
        (SHA_DEV.upper(), SHA_DEV),
        ("bbbbbbb", SHA_DEV),  # short sha of a tip expands from the refs
        ("1234567", SHA_LIGHT),
        ("0123456789abcdef", "0123456789abcdef"),  # not a tip: left for the fetch to expand
        ("f" * 40, "f" * 40),
    ],
)
def test_resolve_revision(revision: str, expected: str) -> None:
    assert resolve_revision(REFS, revision) == expected


def test_tag_wins_over_branch_of_the_same_name_as_in_git() -> None:
    refs = {"refs/heads/release": SHA_MAIN, "refs/tags/release": SHA_DEV}
    assert resolve_revision(refs, "release") == SHA_DEV


def test_short_sha_of_annotated_tag_object_is_not_taken_as_a_tip() -> None:
    # "ccccccc" is the tag object, not a commit: it must go through the fetch, which peels it
    assert resolve_revision(REFS, "ccccccc") == "ccccccc"


@pytest.mark.parametrize("revision", ["nope", "feature/x", "abc123", "zzzzzzzz"])
def test_unknown_revision_is_not_found(revision: str) -> None:
    with pytest.raises(NotFound, match=rf"revision '{revision}' not found in https://git.example/r"):
        resolve_revision(REFS, revision, "https://user:hunter2@git.example/r")


def test_unknown_revision_error_has_no_password() -> None:
    with pytest.raises(NotFound) as info:
        resolve_revision(REFS, "nope", "https://user:hunter2@git.example/r")
    assert "hunter2" not in str(info.value)


def test_changed_refs() -> None:
    old = {"refs/heads/main": SHA_MAIN, "refs/heads/gone": SHA_DEV}
    new = {"refs/heads/main": SHA_DEV, "refs/heads/new": SHA_DEV}
    assert source.changed_refs(old, new) == {"refs/heads/main", "refs/heads/gone", "refs/heads/new"}
    assert source.changed_refs(new, dict(new)) == set()


# --- URLs and keys ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "normalized"),
    [
        ("https://GitHub.com/Org/Repo.git", "https://github.com/org/repo"),
        ("https://github.com/org/repo/", "https://github.com/org/repo"),
        ("https://user:tok@github.com/org/repo", "https://github.com/org/repo"),
        ("git@github.com:org/repo.git", "ssh://git@github.com/org/repo"),
        ("ssh://git@github.com/org/repo.git", "ssh://git@github.com/org/repo"),
    ],
)
def test_credential_endpoint_keeps_scheme_and_user(url: str, normalized: str) -> None:
    assert source.credential_endpoint(url) == normalized


def test_ssh_secret_is_not_used_for_https_url() -> None:
    secret = _secret("repository", "ssh", url="git@github.com:org/app.git", sshPrivateKey="KEY")
    assert credentials_for("https://github.com/org/app", [secret]) is None
    assert credentials_for("ssh://git@github.com/org/app", [secret]) == RepoCredentials(ssh_private_key="KEY")


def test_cache_keys_agree_for_every_spelling_of_a_repo() -> None:
    keys = {Snapshots.key(u, "a" * 40) for u in ("https://github.com/Org/repo.git", "git@github.com:org/repo")}
    assert len(keys) == 1
    assert keys.pop().startswith("snapshots/github.com_org_repo-")
    assert RefCache.key("https://github.com/org/repo") != RefCache.key("https://github.com/org/repo2")


@pytest.mark.parametrize("url", ["file:///etc", "/srv/repo", "ext::sh%20-c%20touch", "host:path/x", "fd::17"])
def test_local_and_exotic_urls_are_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="only https, http, ssh and git URLs"):
        source.ls_remote(url)


# --- credentials --------------------------------------------------------------------------------------


def _secret(kind: str, name: str, **fields: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": {"argocd.argoproj.io/secret-type": kind}},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in fields.items()},
    }


def test_repo_creds_longest_prefix_wins() -> None:
    secrets = [
        _secret("repo-creds", "host", url="https://git.example.com", username="a", password="pa"),
        _secret("repo-creds", "org", url="https://git.example.com/org", username="b", password="pb"),
        _secret("repo-creds", "other", url="https://git.example.com/other", username="c", password="pc"),
    ]
    creds = credentials_for("https://git.example.com/org/app.git", secrets)
    assert creds == RepoCredentials(username="b", password="pb")
    assert credentials_for("https://git.example.com/team/x", secrets) == RepoCredentials("a", "pa")
    assert credentials_for("https://elsewhere.example.com/org/app", secrets) is None


def test_repo_creds_never_match_another_host() -> None:
    secrets = [_secret("repo-creds", "host", url="https://git.example.com", username="a", password="pa")]
    assert credentials_for("https://git.example.com.evil.net/org/app", secrets) is None


def test_repository_secret_exact_match_beats_template() -> None:
    secrets = [
        _secret("repo-creds", "org", url="https://git.example.com/org", username="t", password="pt"),
        _secret("repository", "app", url="https://git.example.com/org/app", username="r", password="pr"),
        _secret("repository", "other", url="https://git.example.com/org/other", username="x", password="px"),
    ]
    assert credentials_for("https://GIT.example.com/org/app.git/", secrets) == RepoCredentials("r", "pr")


def test_repository_secret_without_credentials_falls_back_to_template() -> None:
    secrets = [
        _secret("repository", "app", url="https://git.example.com/org/app"),
        _secret("repo-creds", "org", url="https://git.example.com/org", username="t", password="pt"),
    ]
    assert credentials_for("https://git.example.com/org/app", secrets) == RepoCredentials("t", "pt")


def test_credentials_from_string_data_ssh_and_insecure() -> None:
    secret = {
        "metadata": {"name": "ssh", "labels": {"argocd.argoproj.io/secret-type": "repository"}},
        "stringData": {"url": "git@github.com:org/app.git", "sshPrivateKey": "KEY", "insecure": "true"},
    }
    creds = credentials_for("ssh://git@github.com/org/app", [secret])
    assert creds == RepoCredentials(ssh_private_key="KEY", insecure_ignore_host_key=True)


def test_cluster_and_unlabelled_secrets_are_ignored() -> None:
    secrets: list[dict[str, Any]] = [
        _secret("cluster", "c", url="https://git.example.com/org/app", username="x", password="y"),
        {"metadata": {"name": "plain"}, "stringData": {"url": "https://git.example.com", "password": "z"}},
    ]
    assert credentials_for("https://git.example.com/org/app", secrets) is None


def test_bad_base64_names_the_secret_not_the_value() -> None:
    secret = _secret("repository", "broken", url="https://git.example.com/a")
    secret["data"]["password"] = "!!not-base64-s3cr3t!!"  # type: ignore[index]
    with pytest.raises(SecretError, match=r"Secret broken: data.password") as info:
        credentials_for("https://git.example.com/a", [secret])
    assert "s3cr3t" not in str(info.value)


def test_credentials_repr_masks_secrets() -> None:
    creds = RepoCredentials("bob", "hunter2", "-----BEGIN KEY-----", False, "github.com ssh-ed25519 AAAA")
    text = repr(creds) + str(creds) + f"{creds}"
    assert "hunter2" not in text and "BEGIN KEY" not in text
    assert "bob" in text and "'***'" in text


def test_ssh_command_checks_host_keys_unless_insecure(tmp_path: Path) -> None:
    strict = source.ssh_command(RepoCredentials(known_hosts="github.com ssh-ed25519 AAAA"), tmp_path)
    assert "StrictHostKeyChecking=yes" in strict and f"UserKnownHostsFile={tmp_path}/known_hosts" in strict
    assert (tmp_path / "known_hosts").read_text() == "github.com ssh-ed25519 AAAA\n"
    insecure = source.ssh_command(RepoCredentials(insecure_ignore_host_key=True), tmp_path)
    assert "StrictHostKeyChecking=no" in insecure and "BatchMode=yes" in insecure
    for bounded in (strict, insecure):  # a silent server ends the fetch, as the HTTP timeout does
        assert all(option in bounded for option in ("ConnectTimeout=60", "ServerAliveInterval=15",
                                                    "ServerAliveCountMax=4"))


def test_unavailable_message_scrubs_credentials() -> None:
    creds = RepoCredentials("bob", "hunter2")
    exc = OSError("connect to https://bob:hunter2@git.example.com/x failed, token hunter2")
    err = source.unavailable_error("https://bob:hunter2@git.example.com/x", exc, creds)
    assert isinstance(err, SourceUnavailable)
    assert "hunter2" not in str(err)
    assert "repository https://git.example.com/x is unavailable" in str(err)


# --- tarballs -----------------------------------------------------------------------------------------


def _memory_repo() -> tuple[MemoryRepo, bytes]:
    """A tree with a file, an executable, a nested file, a symlink and a submodule entry."""
    repo = MemoryRepo()
    store = repo.object_store
    blobs = {
        name: Blob.from_string(data)
        for name, data in {
            "readme": b"hello\n",
            "run": b"#!/bin/sh\necho hi\n",
            "deploy": b"kind: ConfigMap\n",
            "link": b"app/deploy.yaml",
        }.items()
    }
    for blob in blobs.values():
        store.add_object(blob)
    app = Tree()
    app.add(b"deploy.yaml", 0o100644, blobs["deploy"].id)
    store.add_object(app)
    root = Tree()
    root.add(b"README.md", 0o100644, blobs["readme"].id)
    root.add(b"run.sh", 0o100755, blobs["run"].id)
    root.add(b"app", stat.S_IFDIR, app.id)
    root.add(b"current", 0o120000, blobs["link"].id)
    root.add(b"vendor", 0o160000, ObjectID(b"f" * 40))  # submodule: its commit is kept, for source.submodules
    store.add_object(root)
    return repo, root.id


def test_tar_tree_is_deterministic_and_complete(tmp_path: Path) -> None:
    repo, tree = _memory_repo()
    data = source.tar_tree(repo, tree)  # type: ignore[arg-type]
    assert data == source.tar_tree(repo, tree)  # type: ignore[arg-type]
    assert gzip.decompress(data)  # a real gzip stream
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert sorted(members) == ["README.md", "app/deploy.yaml", "current", "run.sh", "vendor/.tidecd-submodule"]
    assert all(m.mtime == 0 and m.uid == 0 for m in members.values())
    assert members["current"].issym() and members["current"].linkname == "app/deploy.yaml"
    extract(data, tmp_path / "out")
    out = tmp_path / "out"
    assert (out / "README.md").read_text() == "hello\n"
    assert os.access(out / "run.sh", os.X_OK) and not os.access(out / "README.md", os.X_OK)
    assert (out / "current").is_symlink() and (out / "current").read_text() == "kind: ConfigMap\n"
    assert [p.name for p in (out / "vendor").iterdir()] == [".tidecd-submodule"]
    assert (out / "vendor" / ".tidecd-submodule").read_text() == "f" * 40 + "\n"


def _tarball(*members: tuple[str, str, str]) -> bytes:
    """Build a tar.gz from (type, name, content-or-linkname) without any safety filter."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for kind, name, value in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(value.encode())
                tar.addfile(info, io.BytesIO(value.encode()))
                continue
            info.type = {
                "sym": tarfile.SYMTYPE,
                "hard": tarfile.LNKTYPE,
                "dir": tarfile.DIRTYPE,
                "chr": tarfile.CHRTYPE,
                "fifo": tarfile.FIFOTYPE,
            }[kind]
            info.linkname = value
            tar.addfile(info)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([("file", "../x", "evil")], "'../x' contains '..'"),
        ([("file", "a/../../x", "evil")], "'a/../../x' contains '..'"),
        ([("file", "/etc/x", "evil")], "'/etc/x' has an absolute path"),
        ([("sym", "passwd", "/etc/passwd")], "'passwd' links to absolute '/etc/passwd'"),
        ([("sym", "up", "../../")], "'up' links outside"),
        ([("sym", "a/b/up", "../../..")], "'a/b/up' links outside"),
        ([("file", "target", "x"), ("hard", "hl", "target")], "'hl' is a hard link"),
        ([("hard", "hl", "/etc/passwd")], "'hl' is a hard link"),
        ([("chr", "dev", "")], "'dev' is a device"),
        ([("fifo", "pipe", "")], "'pipe' is a device, fifo"),
        ([("file", "a", "1"), ("file", "a", "2")], "duplicate"),
        # each link looks harmless alone; together "b" resolves to root/.. once "c" -> "." exists
        ([("sym", "b", "c/.."), ("sym", "c", ".")], "'b' links outside"),
        # a file written through a symlink that another member created
        ([("sym", "d", "."), ("sym", "d/e", "..")], "links outside"),
    ],
)
def test_unsafe_members_are_refused(tmp_path: Path, members: list[tuple[str, str, str]], message: str) -> None:
    dest = tmp_path / "dest"
    with pytest.raises(UnsafePathError, match=message.replace("(", r"\(")):
        extract(_tarball(*members), dest)
    assert not dest.exists(), "a refused extraction leaves nothing behind"
    assert not (tmp_path / "x").exists()


def test_symlinks_inside_the_checkout_are_kept(tmp_path: Path) -> None:
    data = _tarball(
        ("file", "a/b/f.yaml", "x: 1"),
        ("sym", "a/b/up", ".."),
        ("sym", "top", "a/b/f.yaml"),
        ("sym", "dangling", "missing/inside"),
    )
    extract(data, tmp_path / "out")
    assert (tmp_path / "out/top").read_text() == "x: 1"
    assert (tmp_path / "out/a/b/up").resolve() == (tmp_path / "out/a").resolve()


def test_extract_needs_an_empty_destination(tmp_path: Path) -> None:
    (tmp_path / "keep").write_text("mine")
    with pytest.raises(UnsafePathError, match="not empty"):
        extract(_tarball(("file", "a", "1")), tmp_path)
    assert (tmp_path / "keep").read_text() == "mine"


def test_corrupt_archive_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(UnsafePathError, match="unreadable"):
        extract(b"not a tarball at all", tmp_path / "out")


# --- store-backed caches ------------------------------------------------------------------------------


def test_snapshot_cache_is_read_before_any_fetch(tmp_path: Path) -> None:
    store = MemoryStore()
    url = "https://git.invalid/org/app.git"  # nothing listens: a fetch would raise SourceUnavailable
    sha = "ab" * 20
    store.write(Snapshots.key(url, sha), _tarball(("file", "f", "cached")))
    snapshots = Snapshots(store)
    Snapshots.extract(snapshots.get_or_fetch(url, sha.upper()), tmp_path / "out")
    assert (tmp_path / "out/f").read_text() == "cached"
    assert Snapshots.key(url, sha).startswith("snapshots/git.invalid_org_app-")


def test_ref_cache_round_trip() -> None:
    store = MemoryStore()
    cache = RefCache(store)
    assert cache.load("https://git.example.com/org/app") == {}
    cache.save("https://git.example.com/org/app.git", {"refs/heads/main": SHA_MAIN, "HEAD": SHA_MAIN})
    assert cache.load("https://GIT.example.com/org/app") == {"refs/heads/main": SHA_MAIN, "HEAD": SHA_MAIN}
    (key,) = store.list("state/repos/")
    assert json.loads(store.read(key).data)["url"] == "git.example.com/org/app"  # type: ignore[union-attr]


def test_whitespace_in_url_is_refused() -> None:
    with pytest.raises(ConfigError, match="contains whitespace"):
        source.ls_remote("https://git.example.com/a b")
