"""The real Pub/Sub emulator (Google Cloud CLI component `pubsub-emulator`) as a process, for the bench.

`PubSubEmulator(workdir).start()` runs `cloud-pubsub-emulator --host=127.0.0.1 --port=PORT` in its own
session, waits until it answers and `stop()` ends its process group (the launcher is a shell script that
starts a JVM). `clients()` gives a publisher and subscriber bound to it with anonymous credentials.
tests/support/pubsub.py is the pytest fixture of the same emulator.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tidecd_dev.devcluster import free_port
from tidecd_dev.processes import stop_session

STARTUP_TIMEOUT = 120.0  # a cold JVM on a busy 2-core machine


class EmulatorMissing(RuntimeError):
    """gcloud, its pubsub-emulator component or java is not installed."""


def launcher() -> Path:
    """The launcher inside the Cloud SDK; EmulatorMissing names what to install."""
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        raise EmulatorMissing("gcloud is not installed: the Pub/Sub emulator comes with the Google Cloud CLI "
                              "(component pubsub-emulator)")
    info = subprocess.run([gcloud, "info", "--format=value(installation.sdk_root)"],
                          capture_output=True, text=True, check=False, timeout=120)
    found = Path(info.stdout.strip()) / "platform" / "pubsub-emulator" / "bin" / "cloud-pubsub-emulator"
    if info.returncode != 0 or not info.stdout.strip() or not found.is_file():
        raise EmulatorMissing(f"Pub/Sub emulator launcher not found at {found}; install the gcloud component "
                              "pubsub-emulator")
    if shutil.which("java") is None:
        raise EmulatorMissing("java is not installed: the Pub/Sub emulator needs a JRE")
    return found


class PubSubEmulator:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        """The value for PUBSUB_EMULATOR_HOST."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> PubSubEmulator:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        log_path = self.workdir / "emulator.log"
        with log_path.open("wb") as log:
            self._proc = subprocess.Popen([str(launcher()), "--host=127.0.0.1", f"--port={self.port}"],
                                          stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"Pub/Sub emulator exited {self._proc.returncode}: "
                                   f"{log_path.read_text(errors='replace')[-1500:]}")
            try:
                with urllib.request.urlopen(f"http://{self.host}/", timeout=1) as resp:  # noqa: S310 (loopback)
                    if resp.status == 200:
                        return self
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"Pub/Sub emulator did not answer on {self.host} within {STARTUP_TIMEOUT:.0f}s")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_session(proc, grace=15.0)  # the launcher and its JVM share the emulator's session

    def __enter__(self) -> PubSubEmulator:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def clients(self) -> tuple[Any, Any]:
        """(PublisherClient, SubscriberClient) talking to this emulator."""
        return emulator_clients(self.host)


def emulator_clients(host: str) -> tuple[Any, Any]:
    """(PublisherClient, SubscriberClient) on the emulator at `host`: the client libraries choose an
    insecure channel only from PUBSUB_EMULATOR_HOST, so it is set for this process."""
    from google.cloud import pubsub_v1

    os.environ["PUBSUB_EMULATOR_HOST"] = host
    return pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
