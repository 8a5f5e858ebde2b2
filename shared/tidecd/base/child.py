"""Starting a child process within limits of time, memory and output: the parts every caller shares.

Renders (`tidecd.render.tool.run_child`) and cluster credential plugins (`tidecd.clients.credentials`)
start processes; both go through the trampoline below, so a hostile or broken program costs at most what
their limits allow. The limits are set by a tiny Python trampoline (`setrlimit`, then `exec` of the
program), not in a `preexec_fn`, which is unsafe in a process with threads (the functions serve requests
on threads).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

CANNOT_RUN = 127  # the trampoline's exit status when the program cannot be started, after this on stderr:
EXEC_FAILED = "tidecd-exec: "
# Run by a fresh interpreter (-S -E: no site, no PYTHON* variables; ~15 ms): the limits, then the program in
# its place. Python ignores SIGXFSZ and SIGPIPE and an ignored signal stays ignored across exec: a child
# past the output limit is to stop there, as any process would, so both are reset first.
LIMITED = """\
import os, resource, signal, sys
def cap(which, value):
    hard = resource.getrlimit(which)[1]
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(which, (value, hard))
cap(resource.RLIMIT_DATA, int(sys.argv[1]))
cap(resource.RLIMIT_FSIZE, int(sys.argv[2]))
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
try:
    os.execvp(sys.argv[3], sys.argv[3:])
except OSError as exc:
    print(f"tidecd-exec: cannot run {sys.argv[3]}: {exc.strerror}", file=sys.stderr)
    sys.exit(127)
"""


def limited(argv: Sequence[str], memory_bytes: int, output_bytes: int) -> list[str]:
    """The command line that runs `argv` under the trampoline: at most `memory_bytes` of data segment
    (RLIMIT_DATA) and `output_bytes` per file written, stdout included (RLIMIT_FSIZE)."""
    return [sys.executable, "-S", "-E", "-c", LIMITED, str(memory_bytes), str(output_bytes), *argv]


def exited(pid: int, seconds: float) -> bool:
    """Whether the child `pid` ended within `seconds`; it is left unreaped (a zombie), so that its process
    group can still be killed without any risk of the id naming another process."""
    end = time.monotonic() + seconds
    pause = 0.002
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        left = end - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.05)
    return True


def kill_group(pid: int) -> None:
    """Kill the child's whole process group (it was started with `process_group=0`)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def run(argv: Sequence[str], *, env: Mapping[str, str], memory_bytes: int, output_bytes: int, seconds: float,
        stdin: IO[bytes] | None, stdout: IO[bytes], stderr: IO[bytes], cwd: Path | None = None) -> tuple[bool, int]:
    """Run `argv` under the trampoline's limits in its own process group: (whether it ended within
    `seconds`, its exit status). Whatever happens, nothing of its group is left running (killed before the
    child is reaped, so its id cannot be another process's yet). OSError when it cannot be started."""
    process = subprocess.Popen(limited(argv, memory_bytes, output_bytes), cwd=cwd, env=dict(env),
                               stdin=stdin if stdin is not None else subprocess.DEVNULL, stdout=stdout,
                               stderr=stderr, process_group=0)
    try:
        ended = exited(process.pid, seconds)
    finally:
        kill_group(process.pid)
        returncode = process.wait()
    return ended, returncode
