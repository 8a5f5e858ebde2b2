"""Stopping the helper processes the dev tools start, each in a session of its own.

The control plane, git server, function instances and peer engines are all started with
`start_new_session=True`, so a signal to the process group also reaches what they spawned (helm, git,
redis...). One place says how they stop, so no test or benchmark leaves a process behind:
`stop_session` (one child), `stop_sessions` (several at once: all are asked first, then each is waited for)
and `stop_pid` (a process known by pid alone, such as a control plane that `tidecd_dev.cli` started in
another invocation).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


def stop_session(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM the process's session, SIGKILL it after `grace` seconds, and reap the process."""
    stop_sessions([proc], grace)


def stop_sessions(procs: Sequence[subprocess.Popen[bytes]], grace: float = 10.0) -> None:
    """SIGTERM every process's session at once, then SIGKILL the sessions still alive after `grace`
    seconds, and reap them all. A session whose leader has already exited is still signalled: what the
    leader spawned (a redis, a helm) may outlive it in the same process group."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        running = [proc for proc in procs if proc.poll() is None or _group_alive(proc.pid)]
        if not running:
            return
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
        deadline = time.monotonic() + grace
        for proc in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        while any(_group_alive(proc.pid) for proc in running) and time.monotonic() < deadline:
            time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    """Whether process group `pgid` has a member that is not a zombie (one nobody reaped would otherwise
    keep a stopped session "alive" for the whole grace period)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            _, fields = proc_stat(entry)
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # fields: state, ppid, pgrp, ...
            return True
    return False


def stop_pid(pid: int, grace: float = 10.0) -> None:
    """SIGTERM the session of process `pid` (not necessarily our child), SIGKILL it after `grace` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not alive(pid):
                return
            time.sleep(0.05)


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie child of ours is reaped and counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return _not_zombie(pid)


def _not_zombie(pid: int) -> bool:
    try:
        _, fields = proc_stat(Path(f"/proc/{pid}"))
    except OSError:
        return False
    return fields[0] != "Z"


def proc_stat(entry: Path) -> tuple[str, list[str]]:
    """A process's /proc/PID/stat: its command name, and the fields after it (state, ppid, pgrp, ...,
    utime and stime at [11:13], cutime and cstime at [13:15]). The name may hold spaces and parentheses,
    so it is cut at the first "(" and the last ")". OSError when the process is gone."""
    stat = (entry / "stat").read_text()
    return stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
