"""Git submodules as git maps them (issue 23): `.gitmodules` read, relative URLs resolved against the
repository's own URL. Fetching and filling them in runs against the real git server in
tests/e2e/test_helm_from_cluster.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidecd.base.errors import RenderError
from tidecd.source.submodules import modules, resolve_url


def test_gitmodules_are_read_in_order(tmp_path: Path) -> None:
    assert modules(tmp_path) == []
    (tmp_path / ".gitmodules").write_text(
        '[submodule "lib"]\n\tpath = vendor/lib\n\turl = ../lib.git\n'
        '[submodule "charts"]\n\tpath = charts\n\turl = https://git.example.com/org/charts.git\n')
    assert modules(tmp_path) == [("vendor/lib", "../lib.git"), ("charts", "https://git.example.com/org/charts.git")]
    (tmp_path / ".gitmodules").write_text('[submodule "lib"\n\tpath = x\n')
    with pytest.raises(RenderError, match=r"^\.gitmodules: cannot be read as git config"):
        modules(tmp_path)


@pytest.mark.parametrize(("url", "expected"), [
    ("../lib.git", "https://git.example.com/org/lib.git"),
    ("../../other/lib", "https://git.example.com/other/lib"),
    ("./sub", "https://git.example.com/org/apps.git/sub"),
    ("https://elsewhere.example.com/x.git", "https://elsewhere.example.com/x.git"),
    ("git@github.com:org/x.git", "git@github.com:org/x.git"),
])
def test_relative_urls_resolve_against_the_repository_as_git_resolves_them(url: str, expected: str) -> None:
    assert resolve_url("https://git.example.com/org/apps.git", url) == expected
