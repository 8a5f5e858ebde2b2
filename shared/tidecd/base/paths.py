"""Paths inside a repository checkout, refusing anything that would leave it.

Every user-supplied path (an app's `path`, a helm value file, a tar member, a symlink target) goes
through `inside`, so `..`, absolute paths and symlinks pointing outside the checkout are errors.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path, PurePosixPath

from tidecd.base.errors import UnsafePathError


def inside(root: Path, relative: str, *, what: str = "path") -> Path:
    """Resolve `relative` under `root`; raise UnsafePathError if it (or a symlink on the way) escapes."""
    pure = PurePosixPath(relative)
    if pure.is_absolute():
        raise UnsafePathError(f"{what} {relative!r} is absolute; it must be relative to the repository")
    root_resolved = root.resolve()
    candidate = (root_resolved / pure).resolve()
    if candidate != root_resolved and root_resolved not in candidate.parents:
        raise UnsafePathError(f"{what} {relative!r} leaves the repository checkout")
    return candidate


def check_tree(root: Path) -> None:
    """Refuse a checkout holding a symlink whose target lies outside it (symlinked directories are not
    entered: their target is checked like any other link's)."""
    root_resolved = root.resolve()
    pending = [str(root)]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_symlink():
                    target = Path(entry.path).resolve()
                    if target != root_resolved and root_resolved not in target.parents:
                        rel = Path(entry.path).relative_to(root)
                        raise UnsafePathError(f"symlink {rel} points outside the repository checkout")
                elif entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)


def copy_writable(source: Path, dest: Path, *, keep_links: bool = False) -> None:
    """`source` copied to `dest`, every directory and file of the copy writable by its owner (modes kept
    otherwise): a shared checkout's tree is read-only (`source.checkouts`), and a copy is edited, then
    removed. Links are followed, or with `keep_links` copied as links (for a tree checked again later)."""
    shutil.copytree(source, dest, symlinks=keep_links, copy_function=shutil.copy)
    for directory, dirnames, filenames in os.walk(dest):
        for name in (*dirnames, *filenames):
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) | stat.S_IWUSR)
    os.chmod(dest, stat.S_IMODE(os.lstat(dest).st_mode) | stat.S_IWUSR)
