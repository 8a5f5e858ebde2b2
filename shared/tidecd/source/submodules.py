"""Git submodules, fetched as Argo CD fetches them (`git submodule update --init --recursive`), by tidecd.

A snapshot keeps each gitlink of its tree as the one file of the submodule's directory,
`<path>/.tidecd-submodule`, holding the commit (`source.archive.write_tar`). `tree` gives a commit's
checkout with every submodule that `.gitmodules` maps filled in: its URL (a relative one resolved against
the repository's, as git resolves it) must be one the app's project permits in `sourceRepos`, and its
commit is fetched as a snapshot of that repository like any other (with that repository's credentials),
then copied into a private copy of the tree; submodules of submodules the same way, at most
`MAX_DEPTH` deep. A repository without `.gitmodules` costs nothing more than its shared tree. A submodule
that cannot be filled in is an error naming `.gitmodules`, the path and the URL, never an empty directory.
A `.gitmodules` entry with no gitlink at its path is skipped, as git skips it (so is every submodule of a
snapshot stored before snapshots kept them: such a commit renders as it did).
"""

from __future__ import annotations

import contextlib
import posixpath
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urljoin

from tidecd.base.errors import RenderError, UnsafePathError
from tidecd.base.paths import copy_writable, inside
from tidecd.clients.store import ObjectStore
from tidecd.config.load import redact_repo_url
from tidecd.source import checkouts
from tidecd.source.archive import SUBMODULE_MARKER

if TYPE_CHECKING:
    from tidecd.source.gitremote import RepoCredentials

MAX_DEPTH = 4
Credentials = Callable[[str], "RepoCredentials | None"]


def modules(root: Path, where: str = ".gitmodules") -> list[tuple[str, str]]:
    """(path, url) of each submodule `.gitmodules` maps, in its order; [] without the file."""
    # lazy: cold start (dulwich's config reader, only for a repository with submodules)
    from dulwich.config import ConfigFile, parse_submodules

    path = root / ".gitmodules"
    if not path.is_file() or path.is_symlink():
        return []
    try:
        found = parse_submodules(ConfigFile.from_path(str(path)))
    except (ValueError, UnicodeDecodeError, KeyError) as exc:
        raise RenderError(f"{where}: cannot be read as git config ({type(exc).__name__})") from None
    return [(p.decode(), u.decode()) for p, u, _ in found]


def resolve_url(repo_url: str, url: str) -> str:
    """A submodule URL as git resolves it: `./x` and `../x` against the repository's own URL."""
    if not url.startswith(("./", "../")):
        return url
    return urljoin(repo_url.rstrip("/") + "/", url)


@contextlib.contextmanager
def tree(store: ObjectStore, repo_url: str, sha: str, credentials: Credentials,
         permitted: Callable[[str], bool], *, depth: int = 0, where: str = ".gitmodules") -> Iterator[Path]:
    """The checkout of `sha` with its submodules (see the module's docstring), held for the `with` block."""
    with checkouts.tree(store, repo_url, sha, credentials(repo_url)) as root:
        found = modules(root, where)
        if not found:
            yield root
            return
        with tempfile.TemporaryDirectory(prefix="tidecd-submodules-") as tmp:
            composed = Path(tmp) / "tree"
            copy_writable(root, composed, keep_links=True)  # links are checked again by the render
            for path, url in found:
                _fill(store, composed, repo_url, path, url, credentials, permitted, depth=depth, where=where)
            yield composed


def _fill(store: ObjectStore, composed: Path, repo_url: str, path: str, url: str, credentials: Credentials,
          permitted: Callable[[str], bool], *, depth: int, where: str) -> None:
    full = resolve_url(repo_url, url)
    what = f"{where}: submodule {path!r} ({redact_repo_url(full)})"
    try:
        target = inside(composed, path, what=what)
    except UnsafePathError as exc:
        raise RenderError(str(exc)) from None
    marker = target / SUBMODULE_MARKER
    if not marker.is_file():
        return  # no gitlink there (a stale entry): git leaves it alone too
    if not permitted(full):
        raise RenderError(f"{what}: the URL is not permitted by the project's sourceRepos; nothing was fetched")
    if depth >= MAX_DEPTH:
        raise RenderError(f"{what}: submodules nested more than {MAX_DEPTH} deep")
    commit = marker.read_text(encoding="ascii", errors="replace").strip()
    nested = posixpath.join(posixpath.dirname(where), path, ".gitmodules")
    with tree(store, full, commit, credentials, permitted, depth=depth + 1, where=nested) as sub:
        shutil.rmtree(target)
        copy_writable(sub, target, keep_links=True)
