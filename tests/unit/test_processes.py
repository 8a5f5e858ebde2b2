"""Stopping a dev process session leaves nothing behind, even when its leader exited first."""

from __future__ import annotations

import subprocess
import time

from tidecd_dev.processes import _group_alive, stop_session


def test_a_session_whose_leader_exited_is_still_stopped() -> None:
    proc = subprocess.Popen(["sh", "-c", "sleep 300 & echo started"], stdout=subprocess.PIPE,
                            start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline() == b"started\n"
    proc.wait(10)  # the leader is gone; its sleep is still in the group
    proc.stdout.close()
    assert _group_alive(proc.pid)
    started = time.monotonic()
    stop_session(proc, grace=5)
    assert not _group_alive(proc.pid)
    assert time.monotonic() - started < 5  # SIGTERM was enough: not waited out to the SIGKILL


def test_a_running_session_is_stopped_and_reaped() -> None:
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    stop_session(proc, grace=5)
    assert proc.returncode is not None and not _group_alive(proc.pid)
