"""The GitHub stand-in with repository contents: branches, files, refs and pull requests as state.

`GitHubReposStandIn` extends `tests.support.github_standin.GitHubStandIn` (every request is still checked
against GitHub's OpenAPI description) with stateful answers for the calls a contents-API write-back makes:
get-branch, git/create-ref, get-content (404 for a missing file), create-or-update-file-contents (409 when
the blob sha is not the file's current one, as GitHub answers), pulls list/create. Each branch is a dict
of path → text; a commit is a new sha on that branch.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.github_standin import GitHubStandIn, Spec


def _blob_sha(text: str) -> str:
    data = text.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324 (git's blob id)


@dataclass
class GitHubReposStandIn(GitHubStandIn):
    branches: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)  # (repo, branch) → files
    heads: dict[tuple[str, str], str] = field(default_factory=dict)
    commits: list[dict[str, Any]] = field(default_factory=list)  # every commit made through the api
    pulls: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    _shas: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def seed(self, repo: str, branch: str, files: dict[str, str]) -> None:
        self.branches[(repo, branch)] = dict(files)
        self.heads[(repo, branch)] = self._new_sha()

    def _new_sha(self) -> str:
        return f"{next(self._shas):040x}"

    def _answer(self, op: Any, params: dict[str, str], query: dict[str, list[str]],
                body: Any) -> tuple[int, Any]:
        handler = getattr(self, "_repo_" + op.operation_id.replace("/", "_").replace("-", "_"), None)
        if handler is None:
            return super()._answer(op, params, query, body)
        status, example = self.example(op)
        repo = f"{params.get('owner', '')}/{params.get('repo', '')}"
        with self._lock:
            answer: tuple[int, Any] = handler(status, example, repo, params, query, body or {})
            return answer

    # -- handlers: (status, body) ---------------------------------------------------------------------------

    def _repo_repos_get_branch(self, status: int, example: Any, repo: str, params: dict[str, str], query: Any,
                               body: Any) -> tuple[int, Any]:
        branch = params["branch"]
        if (repo, branch) not in self.heads:
            return 404, {"message": "Branch not found", "documentation_url": "https://docs.github.com/rest"}
        sha = self.heads[(repo, branch)]
        commit = dict(example["commit"]) | {"sha": sha, "url": f"{self._repo_url(repo)}/commits/{sha}"}
        return status, example | {"name": branch, "commit": commit}

    def _repo_git_create_ref(self, status: int, example: Any, repo: str, params: dict[str, str], query: Any,
                             body: dict[str, Any]) -> tuple[int, Any]:
        branch = str(body["ref"]).removeprefix("refs/heads/")
        source = next((b for (r, b), sha in self.heads.items() if r == repo and sha == body["sha"]), None)
        if source is None or (repo, branch) in self.heads:
            return 422, {"message": "Reference already exists" if source else "Object does not exist"}
        self.branches[(repo, branch)] = dict(self.branches[(repo, source)])
        self.heads[(repo, branch)] = body["sha"]
        return status, example | {"ref": body["ref"], "object": {"type": "commit", "sha": body["sha"],
                                                                  "url": f"{self._repo_url(repo)}/git/commits"}}

    def _repo_repos_get_content(self, status: int, example: Any, repo: str, params: dict[str, str],
                                query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        branch = (query.get("ref") or ["main"])[-1]
        files = self.branches.get((repo, branch), {})
        path = params["path"]
        if path not in files:
            return 404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}
        text = files[path]
        return status, self._file(repo, path, text)

    def _file(self, repo: str, path: str, text: str) -> dict[str, Any]:
        sha = _blob_sha(text)
        url = f"{self._repo_url(repo)}/contents/{path}"
        return {"type": "file", "encoding": "base64", "size": len(text.encode()), "name": path.rsplit("/", 1)[-1],
                "path": path, "content": base64.b64encode(text.encode()).decode(), "sha": sha, "url": url,
                "git_url": f"{self._repo_url(repo)}/git/blobs/{sha}",
                "html_url": f"https://github.com/{repo}/blob/main/{path}", "download_url": None,
                "_links": {"self": url, "git": f"{self._repo_url(repo)}/git/blobs/{sha}",
                           "html": f"https://github.com/{repo}/blob/main/{path}"}}

    def _repo_repos_create_or_update_file_contents(self, status: int, example: Any, repo: str,
                                                   params: dict[str, str], query: Any,
                                                   body: dict[str, Any]) -> tuple[int, Any]:
        branch, path = body.get("branch", "main"), params["path"]
        files = self.branches.setdefault((repo, branch), {})
        current = _blob_sha(files[path]) if path in files else None
        if body.get("sha") != current:
            return 409, {"message": f"{path} does not match {body.get('sha')}",
                         "documentation_url": "https://docs.github.com/rest"}
        text = base64.b64decode(body["content"]).decode()
        files[path] = text
        sha = self._new_sha()
        self.heads[(repo, branch)] = sha
        commit = dict(example["commit"]) | {"sha": sha, "message": body["message"],
                                            "url": f"{self._repo_url(repo)}/git/commits/{sha}"}
        self.commits.append({"repo": repo, "branch": branch, "path": path, "sha": sha, "message": body["message"],
                             "committer": body.get("committer"), "text": text})
        return (201 if current is None else 200), {"content": self._file(repo, path, text), "commit": commit}

    def _repo_pulls_list(self, status: int, example: Any, repo: str, params: dict[str, str],
                         query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        head = (query.get("head") or [""])[-1].split(":")[-1]
        return status, [p for p in self.pulls.get(repo, []) if not head or p["head"]["ref"] == head]

    def _repo_pulls_create(self, status: int, example: Any, repo: str, params: dict[str, str], query: Any,
                           body: dict[str, Any]) -> tuple[int, Any]:
        number = len(self.pulls.get(repo, [])) + 1
        pull = example | {"number": number, "title": body["title"], "body": body.get("body"), "state": "open",
                          "head": example["head"] | {"ref": body["head"]},
                          "base": example["base"] | {"ref": body["base"]},
                          "url": f"{self._repo_url(repo)}/pulls/{number}",
                          "html_url": f"https://github.com/{repo}/pull/{number}"}
        self.pulls.setdefault(repo, []).append(pull)
        return status, pull


@pytest.fixture
def github_repos(github_spec: Spec) -> Iterator[GitHubReposStandIn]:
    standin = GitHubReposStandIn(github_spec)
    standin.start()
    try:
        yield standin
    finally:
        standin.stop()
    standin.assert_clean()
