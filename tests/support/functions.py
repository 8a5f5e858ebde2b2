"""The functions as they run: real functions-framework processes on loopback ports."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.apps import GitOps
from tidecd_dev.devcluster import free_port
from tidecd_dev.processes import stop_session

ROOT = Path(__file__).resolve().parents[2]


class Function:
    """One functions-framework process serving one target."""

    def __init__(self, target: str, env: dict[str, str], logdir: Path, signature: str = "http", port: int = 0) -> None:
        self.port = port or free_port()  # a fixed port: a URL given out before it started (an audit backend's)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = logdir / f"{target}-{self.port}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "functions_framework", "--target", target, "--signature-type", signature,
                 "--source", str(ROOT / "functions" / "main.py"), "--host", "127.0.0.1", "--port", str(self.port)],
                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # a TCP connect: any request would run the function itself
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{target} exited: {self.log.read_text()[-2000:]}") from None
                time.sleep(0.2)
        self.stop()  # never leave a half-started process behind
        raise RuntimeError(f"{target} did not start: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        stop_session(self.proc)


class Functions:
    """Starts targets on demand for one test and sends them signed GitHub deliveries."""

    def __init__(self, gitops: GitOps, tmp: Path) -> None:
        self.gitops, self.tmp = gitops, tmp
        self.secret, self.token = secrets.token_hex(16), secrets.token_hex(16)
        self.running: dict[str, Function] = {}
        self.extra_env: dict[str, str] = {}

    def env(self) -> dict[str, str]:
        return {**os.environ, "TIDECD_CONFIG": str(self.gitops.config_dir),
                "TIDECD_STORE": str(self.gitops.store.root), "TIDECD_WEBHOOK_SECRET": self.secret,
                "TIDECD_API_TOKEN": self.token, "KUBECONFIG": str(self.gitops.dev.kubeconfig),
                "PYTHONPATH": str(ROOT / "shared") + os.pathsep + str(ROOT), **self.extra_env}

    def start(self, target: str, signature: str = "http", port: int = 0) -> Function:
        if target not in self.running:
            self.running[target] = Function(target, self.env(), self.tmp, signature, port)
        return self.running[target]

    def deliver(self, event: str, payload: dict[str, Any], *, delivery: str | None = None,
                secret: str | None = None) -> requests.Response:
        body = json.dumps(payload).encode()
        key = (self.secret if secret is None else secret).encode()
        signature = "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()
        return requests.post(self.start("webhook").url, data=body, timeout=120, headers={
            "Content-Type": "application/json", "X-GitHub-Event": event, "X-Hub-Signature-256": signature,
            "X-GitHub-Delivery": delivery or secrets.token_hex(8), "User-Agent": "GitHub-Hookshot/abc"})

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> requests.Response:
        return requests.request(method, self.start("api").url + "/api/v1" + path, json=body or {}, timeout=600,
                                headers={"Authorization": f"Bearer {self.token}"})

    def stop(self) -> None:
        for function in self.running.values():
            function.stop()


@pytest.fixture()
def functions(gitops: GitOps, tmp_path: Path) -> Iterator[Functions]:
    running = Functions(gitops, tmp_path)
    try:
        yield running
    finally:
        running.stop()


def push_payload(repo_url: str, ref: str, before: str, after: str, files: list[str], *,
                 deleted: bool = False) -> dict[str, Any]:
    """A push event shaped like GitHub's (the fields tidecd reads, with their real neighbours)."""
    name = repo_url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
    return {
        "ref": ref, "before": before, "after": after, "created": before == "0" * 40, "deleted": deleted,
        "forced": False, "base_ref": None, "compare": f"{repo_url}/compare/{before[:12]}...{after[:12]}",
        "commits": [] if deleted else [{
            "id": after, "tree_id": "0" * 40, "distinct": True, "message": "change",
            "timestamp": "2026-11-29T10:00:00Z", "url": f"{repo_url}/commit/{after}",
            "author": {"name": "Dev", "email": "dev@example.com", "username": "dev"},
            "committer": {"name": "Dev", "email": "dev@example.com", "username": "dev"},
            "added": [], "removed": [], "modified": files}],
        "head_commit": None,
        "repository": {"id": 1, "name": name, "full_name": f"tidecd/{name}", "private": False,
                       "html_url": repo_url.removesuffix(".git"), "clone_url": repo_url,
                       "git_url": repo_url.replace("http://", "git://"), "ssh_url": f"git@127.0.0.1:tidecd/{name}.git",
                       "default_branch": "main", "master_branch": "main"},
        "pusher": {"name": "dev", "email": "dev@example.com"},
        "sender": {"login": "dev", "id": 2, "type": "User"},
    }
