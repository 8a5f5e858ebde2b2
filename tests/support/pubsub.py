"""Pub/Sub emulator fixture: the real emulator shipped with the Google Cloud CLI, one per session.

`pubsub_emulator` (session) starts `cloud-pubsub-emulator --host=127.0.0.1 --port=PORT` on first use,
waits until it answers, yields `host:port` (the value for `PUBSUB_EMULATOR_HOST`) and kills its process
group at the end (the launcher is a shell script that starts a JVM). Topic and subscription names need
at least 3 characters.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from google.auth.credentials import Credentials

from tidecd_dev.devcluster import free_port
from tidecd_dev.processes import stop_session

STARTUP_TIMEOUT = 120.0  # a cold JVM on a busy 2-core machine


def emulator_launcher() -> Path:
    """The launcher inside the Cloud SDK; a clear failure when gcloud or the component is missing."""
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        pytest.fail("gcloud is not installed: the Pub/Sub emulator comes with the Google Cloud CLI "
                    "(component pubsub-emulator)")
    info = subprocess.run([gcloud, "info", "--format=value(installation.sdk_root)"],
                          capture_output=True, text=True, check=False, timeout=120)
    root = info.stdout.strip()
    launcher = Path(root) / "platform" / "pubsub-emulator" / "bin" / "cloud-pubsub-emulator"
    if info.returncode != 0 or not root or not launcher.is_file():
        pytest.fail(f"Pub/Sub emulator launcher not found at {launcher} (gcloud info exited "
                    f"{info.returncode}); install the gcloud component pubsub-emulator")
    if shutil.which("java") is None:
        pytest.fail("java is not installed: the Pub/Sub emulator needs a JRE")
    return launcher


@pytest.fixture(scope="session")
def pubsub_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    launcher = emulator_launcher()
    port = free_port()
    host = f"127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("pubsub-emulator") / "emulator.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([str(launcher), "--host=127.0.0.1", f"--port={port}"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_until_up(host, proc, log_path)
        yield host
    finally:
        stop_session(proc, grace=15.0)


def _wait_until_up(host: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"Pub/Sub emulator exited with {proc.returncode}:\n{log_path.read_text()[-2000:]}")
        try:
            if requests.get(f"http://{host}/", timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    stop_session(proc, grace=15.0)
    pytest.fail(f"Pub/Sub emulator did not answer on {host} within {STARTUP_TIMEOUT:.0f}s:\n"
                f"{log_path.read_text()[-2000:]}")


def anonymous_credentials() -> Credentials:
    """Credentials for the emulator, which checks none (google-auth leaves this constructor unannotated)."""
    from google.auth.credentials import AnonymousCredentials

    return AnonymousCredentials()  # type: ignore[no-untyped-call]
