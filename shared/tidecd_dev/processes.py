"""Stopping the helper processes the dev tools start, each in a session of its own.

The control plane, git server, function instances and peer engines are all started with
`start_new_session=True`, so a signal to the process group also reaches what they spawned (helm, git,
redis...). One place says how they stop, so no test or benchmark leaves a process behind.
"""

from __future__ import annotations

import os
import signal
import subprocess


def stop_session(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM the process's session, SIGKILL it after `grace` seconds, and reap the process."""
    if proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            proc.wait(timeout=grace)
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue
