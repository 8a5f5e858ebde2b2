"""Kustomize remote bases: the URL forms kustomize clones (`render.confine.parse_remote`), and the walk that
names them for the step to fetch within sourceRepos instead of refusing them (`render.remote_bases`)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from tidecd.base.errors import RenderError, UnsafePathError
from tidecd.render import remote_bases, rewrite_entries
from tidecd.render.confine import RemoteRef, confine, parse_remote


@pytest.mark.parametrize(("entry", "expected"), [
    ("https://github.com/org/repo//deploy/base?ref=v1", RemoteRef("https://github.com/org/repo", "deploy/base", "v1")),
    ("https://git.example.com/org/repo.git/deploy?ref=main",
     RemoteRef("https://git.example.com/org/repo.git", "deploy", "main")),
    ("https://git.example.com/org/repo.git", RemoteRef("https://git.example.com/org/repo.git", "", "")),
    ("git::https://git.example.com/org/repo.git//deploy?ref=0123abc",
     RemoteRef("https://git.example.com/org/repo.git", "deploy", "0123abc")),
    ("github.com/org/repo/deploy/base?ref=v2", RemoteRef("https://github.com/org/repo", "deploy/base", "v2")),
    ("github.com/org/repo", RemoteRef("https://github.com/org/repo", "", "")),
    ("git@github.com:org/repo.git/deploy?ref=v1", RemoteRef("git@github.com:org/repo.git", "deploy", "v1")),
    ("ssh://git@github.com/org/repo//deploy", RemoteRef("git@github.com:org/repo", "deploy", "")),
    ("ssh://git@git.example.com:2222/org/repo.git//deploy?ref=v1",
     RemoteRef("ssh://git@git.example.com:2222/org/repo.git", "deploy", "v1")),
    ("git@git.example.com:org/repo//a/b?version=v3", RemoteRef("git@git.example.com:org/repo", "a/b", "v3")),
    ("https://git.example.com/org/repo/deploy?ref=v1&version=v0", RemoteRef("https://git.example.com/org/repo",
                                                                            "deploy", "v1")),
    ("https://dev.azure.com/org/project/_git/repo/deploy?ref=main",
     RemoteRef("https://dev.azure.com/org/project/_git/repo", "deploy", "main")),
    ("http://127.0.0.1:8080/lib.git//base/?ref=v1&submodules=false",
     RemoteRef("http://127.0.0.1:8080/lib.git", "base", "v1", submodules=False)),
    ("https://git.example.com/org/repo//./x/../deploy", RemoteRef("https://git.example.com/org/repo", "deploy", "")),
])
def test_kustomize_remote_forms(entry: str, expected: RemoteRef) -> None:
    assert parse_remote(entry) == expected


@pytest.mark.parametrize("entry", ["../base", "base", "gitlab.com/org/repo", "example.com/org/repo/deploy",
                                   "cm.yaml"])
def test_local_paths_are_not_remote(entry: str) -> None:
    assert parse_remote(entry) is None


@pytest.mark.parametrize(("entry", "message"), [
    ("https://example.com/manifests/cm.yaml", "a remote file is not fetched"),
    ("http://127.0.0.1:8080/cm.yml", "a remote file is not fetched"),
    ("file:///srv/repo//base", "file:// repository is not fetched"),
    ("https://git.example.com/org/repo//../../etc", "leaves the remote repository"),
    ("https://git.example.com/", "needs a repository path"),
    ("https://git.example.com/org", "needs a repository path"),
])
def test_remote_forms_tidecd_does_not_fetch(entry: str, message: str) -> None:
    with pytest.raises(RenderError, match=message):
        parse_remote(entry)


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def test_remote_bases_are_named_with_their_kustomization_and_entry(tmp_path: Path) -> None:
    write(tmp_path, "app/kustomization.yaml", """
        resources: [../base, "https://git.example.com/org/lib//deploy?ref=v1"]
        components: ["git@git.example.com:org/comp.git"]
        """)
    write(tmp_path, "base/kustomization.yaml", "bases: ['github.com/org/repo/x?ref=v2']\n")
    found = sorted(remote_bases(tmp_path, tmp_path / "app"), key=lambda b: (b.file, b.field))
    assert [(b.file, b.field, b.index, b.remote.repo, b.remote.path, b.remote.ref) for b in found] == [
        ("app/kustomization.yaml", "components", 0, "git@git.example.com:org/comp.git", "", ""),
        ("app/kustomization.yaml", "resources", 1, "https://git.example.com/org/lib", "deploy", "v1"),
        ("base/kustomization.yaml", "bases", 0, "https://github.com/org/repo", "x", "v2"),
    ]
    assert found[1].where == ("kustomization app/kustomization.yaml: resources[1] "
                              "'https://git.example.com/org/lib//deploy?ref=v1'")
    with pytest.raises(RenderError, match=r"^kustomization app/kustomization.yaml: resources\[1\] .* is remote"):
        confine(tmp_path, tmp_path / "app")  # render without the step's fetch: still refused


def test_remote_urls_elsewhere_stay_refused(tmp_path: Path) -> None:
    write(tmp_path, "app/kustomization.yaml", "patches:\n  - path: https://git.example.com/org/lib//p.yaml\n")
    with pytest.raises(RenderError, match=r"patches\[0\].path .* is remote"):
        remote_bases(tmp_path, tmp_path / "app")
    write(tmp_path, "app/kustomization.yaml", "resources: ['https://example.com/cm.yaml']\n")
    with pytest.raises(RenderError, match=r"resources\[0\] 'https://example.com/cm.yaml' is remote: a remote file"):
        remote_bases(tmp_path, tmp_path / "app")
    write(tmp_path, "app/kustomization.yaml", "resources: [../../outside]\n")
    with pytest.raises(UnsafePathError, match="leaves the repository checkout"):
        remote_bases(tmp_path, tmp_path / "app")


def test_rewrite_entries_replaces_in_place_and_never_writes_through_a_link(tmp_path: Path) -> None:
    shared = write(tmp_path, "shared.yaml", "resources: [a, 'github.com/org/repo?ref=v1', c]\n")
    link = tmp_path / "app" / "kustomization.yaml"
    link.parent.mkdir()
    link.symlink_to(shared)
    rewrite_entries(link, [("resources", 1, "../.tidecd-remote/k/")])
    assert not link.is_symlink()
    assert yaml.safe_load(link.read_text()) == {"resources": ["a", "../.tidecd-remote/k/", "c"]}
    assert "github.com" in shared.read_text()
