"""Kustomize remote bases, fetched by tidecd where kustomize would clone them, never by kustomize itself.

A `resources`, `bases` or `components` entry of a kustomization in kustomize's remote git forms
(`render.parse_remote`: `https://host/org/repo//sub?ref=v1`, `github.com/org/repo/sub`, `git@host:org/repo`,
...) names a repository, a ref and a directory in it. `compose` gives the tree to render: the checkout itself
when no kustomization reached from the source's path names one; else a private copy of it, where

- each repository must be one the app's project permits in `sourceRepos` (the check of every other fetch
  on the app's behalf: chart dependencies, kustomize `helmCharts`, submodules), else a RenderError naming the
  kustomization, the entry and the repository, and nothing is fetched;
- its ref resolves as kustomize's `git fetch <ref>` would (a tag, a branch or a sha; the default branch
  without `?ref=`), and the commit is a snapshot of tidecd's git source (that repository's credentials, the
  shared checkout cache, its submodules filled in unless `?submodules=false`, as kustomize clones them);
- the repository is copied to `.tidecd-remote/<key>/` of the copy and the entry rewritten to the relative
  directory, so kustomize builds with no network;
- the fetched repository is checked like the checkout (every path its kustomizations name stays inside it,
  `render.confine`), and its own remote bases follow the same rules, at most `MAX_DEPTH` deep and at most
  `MAX_REMOTES` repositories per render.

The rendered-manifest cache is keyed by the app's own revision, as Argo CD's is (which also expires after a
day and on a hard refresh): a remote base that follows a branch is fetched again when the app's revision (or
the app) changes, not when only the branch moves.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tidecd import render
from tidecd.base.errors import NotFound, RenderError, SourceUnavailable, UnsafePathError
from tidecd.base.paths import copy_writable, inside
from tidecd.config.load import ApplicationSource, normalize_repo_url, redact_repo_url
from tidecd.runtime import Runtime
from tidecd.source import checkouts, submodules
from tidecd.source.git import resolve

REMOTE_DIR = ".tidecd-remote"
MAX_DEPTH = 4
MAX_REMOTES = 32


@dataclass
class _Composition:
    runtime: Runtime
    permitted: Callable[[str], bool]
    composed: Path
    placed: dict[tuple[str, str], Path] = field(default_factory=dict)  # (repository, sha) → its copy
    visited: set[Path] = field(default_factory=set)  # remote directories whose bases were placed
    resolved: dict[tuple[str, str], str] = field(default_factory=dict)  # (repository, ref) → sha: one ls-remote
    # kustomization file → (field, index) → the local directory: written once every base is placed, so each
    # kustomization is checked as its repository has it (a rewritten entry points outside that repository)
    changes: dict[Path, dict[tuple[str, int], str]] = field(default_factory=dict)


def compose(runtime: Runtime, source: ApplicationSource, root: Path, into: Path,
            permitted: Callable[[str], bool]) -> Path:
    """The tree to render `source` from: `root`, or a copy under `into` with its remote bases in place."""
    app_dir = render.kustomize_app_dir(root, source)
    if app_dir is None:
        return root
    found = render.remote_bases(root, app_dir)
    if not found:
        return root
    if (root / REMOTE_DIR).exists() or (root / REMOTE_DIR).is_symlink():
        raise RenderError(f"{found[0].where}: the repository holds a {REMOTE_DIR} entry, where tidecd places "
                          "remote bases; rename it")
    composed = into / "tree"
    copy_writable(root, composed, keep_links=True)  # links are checked again by the render
    composed = composed.resolve()  # the directories placed are resolved: relative paths between them
    state = _Composition(runtime, permitted, composed)
    _place(state, composed, found, depth=0)
    for file, edits in state.changes.items():
        render.rewrite_entries(file, [(name, index, value) for (name, index), value in edits.items()])
    return composed


def _place(state: _Composition, tree: Path, found: list[render.RemoteBase], *, depth: int) -> None:
    """Fetch and place each base of `found` (named by kustomizations of `tree`); note the entries' rewrites."""
    for base in found:
        directory = _fetch(state, base, depth)
        file = tree / base.file
        state.changes.setdefault(file, {})[(base.field, base.index)] = \
            Path(os.path.relpath(directory, file.parent)).as_posix()


def _fetch(state: _Composition, base: render.RemoteBase, depth: int) -> Path:
    remote = base.remote
    shown = redact_repo_url(remote.repo)
    if not state.permitted(remote.repo):
        raise RenderError(f"{base.where}: repository {shown!r} is not permitted by the project's sourceRepos; "
                          "nothing was fetched")
    if depth >= MAX_DEPTH:
        raise RenderError(f"{base.where}: remote bases nested more than {MAX_DEPTH} deep")
    runtime = state.runtime
    credentials = runtime.repo_credentials(remote.repo)
    try:
        sha = state.resolved.get((remote.repo, remote.ref)) or resolve(remote.repo, remote.ref, credentials)
        state.resolved[(remote.repo, remote.ref)] = sha
    except NotFound as exc:
        raise RenderError(f"{base.where}: {exc}") from None
    except SourceUnavailable as exc:  # retried: the repository may come back
        raise SourceUnavailable(f"{base.where}: {exc}", delay=exc.delay) from None
    key = (normalize_repo_url(remote.repo), sha)
    dest = state.placed.get(key)
    if dest is None:
        if len(state.placed) >= MAX_REMOTES:
            raise RenderError(f"{base.where}: more than {MAX_REMOTES} remote repositories in one render")
        dest = state.composed / REMOTE_DIR / hashlib.sha256(repr(key).encode()).hexdigest()[:16]
        with contextlib.ExitStack() as held:
            try:
                if remote.submodules:
                    fetched = held.enter_context(submodules.tree(runtime.store, remote.repo, sha,
                                                                 runtime.repo_credentials, state.permitted))
                else:
                    fetched = held.enter_context(checkouts.tree(runtime.store, remote.repo, sha, credentials))
            except SourceUnavailable as exc:
                raise SourceUnavailable(f"{base.where}: {exc}", delay=exc.delay) from None
            copy_writable(fetched, dest, keep_links=True)
        state.placed[key] = dest
    at = f"{shown} at {sha[:12]}"
    try:
        directory = inside(dest, remote.path or ".", what=f"{base.where}: path")
    except UnsafePathError as exc:
        raise UnsafePathError(f"{exc} ({at})") from None
    if not render.is_kustomization(directory):
        raise RenderError(f"{base.where}: {remote.path or 'the root'} of {at} is not a directory with a "
                          "kustomization")
    if directory not in state.visited:
        state.visited.add(directory)
        try:
            nested = render.remote_bases(dest, directory)
            _place(state, dest, nested, depth=depth + 1)
        except (RenderError, UnsafePathError) as exc:
            raise type(exc)(f"{base.where} ({at}): {exc}") from None
    return directory
