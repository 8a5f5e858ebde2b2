"""GCS emulator fixtures: the real fake-gcs-server, one per session, a fresh bucket per test.

`fake_gcs` (session) builds fake-gcs-server when missing, starts it with `-backend memory` on a free port
and stops it (by pid) at the end; `gcs_store` points the google-cloud-storage client at it via
`STORAGE_EMULATOR_HOST` and returns a `GcsStore` on a new bucket; `local_store` is the local backend in a
temp folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.support.cluster import ensure_tools
from tidecd.clients.store import GcsStore, LocalStore
from tidecd.clients.tools import binary
from tidecd_dev.devcluster import free_port

PREFIX = "tidecd/test"  # a non-empty object prefix, so every test also covers prefix handling


@dataclass(frozen=True)
class FakeGcs:
    url: str  # e.g. http://127.0.0.1:4443, the value for STORAGE_EMULATOR_HOST
    pid: int

    def create_bucket(self, name: str) -> None:
        resp = requests.post(f"{self.url}/storage/v1/b", params={"project": "test"}, json={"name": name}, timeout=10)
        assert resp.status_code == 200, f"creating bucket {name}: HTTP {resp.status_code} {resp.text[:200]}"


@pytest.fixture(scope="session")
def fake_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGcs]:
    ensure_tools(["fake-gcs-server"])
    exe = binary("fake-gcs-server")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("fake-gcs") / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                exe,
                "-scheme",
                "http",
                "-host",
                "127.0.0.1",
                "-port",
                str(port),
                "-backend",
                "memory",
                "-public-host",
                f"127.0.0.1:{port}",
                "-external-url",
                url,
                "-log-level",
                "warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_until_up(url, proc, log_path)
        yield FakeGcs(url=url, pid=proc.pid)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()


def _wait_until_up(url: str, proc: subprocess.Popen[bytes], log_path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"fake-gcs-server exited with {proc.returncode}:\n{log_path.read_text()[-2000:]}")
        try:
            if requests.get(f"{url}/storage/v1/b", params={"project": "test"}, timeout=1).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.05)
    pytest.fail(f"fake-gcs-server did not answer on {url} within {timeout:.0f}s:\n{log_path.read_text()[-2000:]}")


@pytest.fixture
def gcs_store(fake_gcs: FakeGcs, monkeypatch: pytest.MonkeyPatch) -> GcsStore:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    bucket = f"tidecd-{uuid.uuid4().hex[:12]}"
    fake_gcs.create_bucket(bucket)
    return GcsStore(bucket, PREFIX)


@pytest.fixture
def local_store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "store")
