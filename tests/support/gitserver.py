"""Git server fixtures: a real smart-HTTP server (git http-backend) per session, a fresh repo per test.

`git_server` serves without auth, `git_server_auth` requires basic auth (user `tidecd`, a random
password in `.password`); both count requests per repo (see `tidecd_dev.gitserver`). `git_repo` is a new
bare repo on `git_server` plus a working clone driven by the real git CLI (tests may use git; the library
must not), so tests write, commit, tag and push like a user would.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml

from tidecd_dev.gitserver import GitServer

USERNAME = "tidecd"


def _require_git() -> None:
    if shutil.which("git") is None:
        pytest.fail("the git CLI is needed for the git server fixtures (apt-get install git)")


class AuthGitServer(GitServer):
    """A GitServer with basic auth that knows its own credentials (for tests only)."""

    username = USERNAME
    password = ""

    def auth_url(self, name: str) -> str:
        """The repo URL with the credentials inside, as the git CLI wants them."""
        return self.repo_url(name).replace("http://", f"http://{USERNAME}:{quote(self.password)}@", 1)


@pytest.fixture(scope="session")
def git_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitServer]:
    _require_git()
    server = GitServer(tmp_path_factory.mktemp("git-root")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def git_server_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthGitServer]:
    _require_git()
    password = secrets.token_urlsafe(16)
    server = AuthGitServer(tmp_path_factory.mktemp("git-root-auth"), username=USERNAME, password=password)
    server.password = password
    server.start()
    yield server
    server.stop()


def run_git(*args: str, cwd: Path | None = None) -> str:
    """Run the git CLI with a clean, non-interactive environment; fail the test with git's stderr."""
    env = {
        **os.environ,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z",
    }
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout.strip()


class GitRepo:
    """A bare repo on the server and a working clone; `write`, `commit`, `tag`, `push` as a user does."""

    def __init__(self, server: GitServer, name: str, workdir: Path, clone_url: str | None = None) -> None:
        self.server = server
        self.name = name
        self.url = server.create_repo(name)
        self.workdir = workdir
        run_git("clone", "--quiet", clone_url or self.url, str(workdir))
        for key, value in (
            ("user.name", "Tidecd Test"),
            ("user.email", "test@tidecd.invalid"),
            ("commit.gpgsign", "false"),
            ("init.defaultBranch", "main"),
        ):
            self.git("config", key, value)
        self.git("checkout", "--quiet", "-B", "main")

    def git(self, *args: str) -> str:
        return run_git(*args, cwd=self.workdir)

    def write(self, path: str, text: str, *, executable: bool = False) -> Path:
        target = self.workdir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(0o755 if executable else 0o644)
        return target

    def remove(self, path: str) -> None:
        self.git("rm", "-r", "--quiet", path)

    def write_files(self, files: Mapping[str, Any]) -> None:
        """Each path's content: text as it is, a dict or list of dicts as YAML documents, None removes it."""
        for path, content in files.items():
            if content is None:
                self.remove(path)
            elif isinstance(content, str):
                self.write(path, content)
            else:
                self.write(path, yaml.safe_dump_all(content if isinstance(content, list) else [content]))

    def symlink(self, path: str, target: str) -> None:
        link = self.workdir / path
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)

    def commit(self, message: str = "change") -> str:
        self.git("add", "--all")
        self.git("commit", "--quiet", "--allow-empty", "-m", message)
        return self.head()

    def head(self) -> str:
        return self.git("rev-parse", "HEAD")

    def tag(self, name: str, *, annotated: bool = False) -> None:
        if annotated:
            self.git("tag", "-a", name, "-m", f"tag {name}")
        else:
            self.git("tag", name)

    def push(self, ref: str = "main") -> None:
        self.git("push", "--quiet", "--force", "origin", ref)


@pytest.fixture
def git_repo(git_server: GitServer, tmp_path: Path) -> GitRepo:
    return GitRepo(git_server, f"repo-{uuid.uuid4().hex[:10]}", tmp_path / "work")
