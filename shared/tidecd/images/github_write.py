"""Git write-back through GitHub's API (PyGithub, the contents API) instead of a git push.

Chosen per app with the annotation `tidecd.io/image-write-back: github-api` (next to
`argocd-image-updater.argoproj.io/write-back-method: git`), for repositories on GitHub when the config
source holds a `secret-type: github` Secret (see `tidecd.clients.github`). The same edit as a push makes (one
file) becomes one commit by `PUT /repos/{o}/{r}/contents/{path}` carrying the blob sha it replaces, so
GitHub refuses it (409) when someone changed the file meanwhile; the edit is then made again on the new
content. When `git-branch` names a target branch other than the base, the branch is created from the
base when missing and a pull request base ← target is opened (once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tidecd.base.errors import TemporaryError
from tidecd.clients.github import GitHubAuth, PyGithubApi, Repo, ensure_pull, translated_errors

if TYPE_CHECKING:
    from github import Github

ANNOTATION = "tidecd.io/image-write-back"
GITHUB_API = "github-api"
ATTEMPTS = 4


class ContentsConflict(TemporaryError):
    """The file changed between our read and our write."""


def push(auth: GitHubAuth, repo: Repo, *, base: str, target: str,
         edit: Callable[[Callable[[str], str | None]], dict[str, str]], message: str, author: tuple[str, str],
         ) -> tuple[str, int]:
    """(commit sha, pull request number or 0); ('', 0) when the edit changes nothing."""
    with translated_errors():  # GitHub's other errors → RateLimited / Rejected / Unavailable
        return _push(_client(auth).get_repo(repo.full_name), repo, base, target, edit, message, author)


def _push(gh_repo: Any, repo: Repo, base: str, target: str,
          edit: Callable[[Callable[[str], str | None]], dict[str, str]], message: str,
          author: tuple[str, str]) -> tuple[str, int]:
    # lazy: cold start (PyGithub only when GitHub is called)
    import github
    from github import InputGitAuthor

    if target != base:
        _ensure_branch(gh_repo, base, target)
    committer = InputGitAuthor(author[0], author[1])
    blobs: dict[str, str] = {}  # path → the blob sha we read, which the write must replace

    def read(path: str) -> str | None:
        try:
            found = gh_repo.get_contents(path, ref=target)
        except github.GithubException as exc:
            if exc.status == 404:
                return None
            raise
        if isinstance(found, list):
            raise TemporaryError(f"{path} is a directory in {repo.full_name}")
        blobs[path] = found.sha
        return bytes(found.decoded_content).decode("utf-8")

    for _attempt in range(ATTEMPTS):
        blobs.clear()
        files = edit(read)
        if not files:
            return "", 0
        sha = ""
        try:
            for path, text in sorted(files.items()):
                if path in blobs:
                    result = gh_repo.update_file(path, message, text, blobs[path], branch=target,
                                                 committer=committer, author=committer)
                else:
                    result = gh_repo.create_file(path, message, text, branch=target, committer=committer,
                                                 author=committer)
                sha = str(result["commit"].sha)
        except github.GithubException as exc:
            if exc.status in (409, 422):
                continue  # the file changed under us (its blob sha no longer matches): read it again
            raise
        return sha, _ensure_pull(gh_repo, repo, base, target, message) if target != base else 0
    raise ContentsConflict(f"{repo.full_name}: the file kept changing under the write-back ({ATTEMPTS} tries)")


def _client(auth: GitHubAuth) -> Github:
    return PyGithubApi(auth).api


def _ensure_branch(gh_repo: Any, base: str, target: str) -> None:
    # lazy: cold start (PyGithub only when GitHub is called)
    import github

    try:
        gh_repo.get_branch(target)
        return
    except github.GithubException as exc:
        if exc.status != 404:
            raise
    head = gh_repo.get_branch(base).commit.sha
    gh_repo.create_git_ref(f"refs/heads/{target}", head)


def _ensure_pull(gh_repo: Any, repo: Repo, base: str, target: str, message: str) -> int:
    title, _, body = message.partition("\n")
    return ensure_pull(gh_repo, repo, base=base, head=target, title=title, body=body.strip())[0]
