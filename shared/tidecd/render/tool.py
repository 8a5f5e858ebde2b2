"""Running an external renderer (helm, kustomize): bounded time, a bare environment, a short error.

The child gets only PATH, a throwaway HOME and the variables the caller names, so no credential in the
function's environment reaches a chart's templates or a kustomize plugin, and no user-level config of
the machine changes a render. Errors quote the tool's stderr, trimmed, with temp paths made relative.

No network: what a render may read was checked before the tool runs (`render.confine`, helm's value
files), and the tool itself runs where network use fails. Where the kernel allows it (root, or user
namespaces) the child gets its own empty network namespace (`unshare --net`): not even loopback answers.
Everywhere, HTTP(S) proxies point at a closed loopback port (Go clients honour them for every host but
loopback) and git may use no protocol at all. `TIDECD_RENDER_SANDBOX=off` turns the namespace off.

Where the namespace is not available (no `unshare`, or a kernel or container that allows no user
namespaces), a Go tool still reaches loopback directly (Go skips proxies for loopback) and any address a
tool is handed without a proxy: then the confinement check (`render.confine`, refusing remote resources,
bases, git URLs and helm repositories before the tool runs) is the only guard. `sandbox_status` says
which case holds, and the first render of a process logs it once (`render sandbox unavailable ...`).

Bounded: every child a render starts goes through `run_child`, which enforces three limits of
`tidecd.base.limits` on it, so a hostile chart, kustomization or jsonnet program costs at most what they
allow and is refused with a LimitExceeded naming the variable:

- time: one render (everything inside `rendering()`, over all the sources of a multi-source app) has
  `TIDECD_MAX_RENDER_SECONDS` in all. Each child gets what is left as its deadline and is killed with its
  whole process group when it passes it (a helm that kustomize started goes too); between files and
  runs the budget is checked again. Fetching sources is not counted (it has its own timeouts).
- memory: each child (and any process it starts: the limit is inherited) may allocate
  `TIDECD_MAX_RENDER_MEMORY_BYTES` of data segment (RLIMIT_DATA: heap and private writable maps). Unlike
  RLIMIT_AS it does not count the address space Go reserves but never touches, so helm and kustomize run
  normally under it, while an allocation past it fails ("out of memory", MemoryError, bad_alloc).
- output: each file a child writes, its stdout included, stops at `TIDECD_MAX_RENDER_OUTPUT_BYTES`
  (RLIMIT_FSIZE). Output and errors go to temporary files, never through pipes into this process.

The limits are set by a tiny Python trampoline (`setrlimit`, then `exec` of the tool), not in a
`preexec_fn`, which is unsafe in a process with threads (the functions serve requests on threads).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import structlog

from tidecd.base import child, limits
from tidecd.base.errors import LimitExceeded, RenderError

log = structlog.get_logger("tidecd.render")

STDERR_LIMIT = 2000
CLOSED_PROXY = "http://127.0.0.1:9"  # the discard port: nothing listens there
NO_NETWORK_ENV = {
    **{name: CLOSED_PROXY for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                                       "all_proxy")},
    "NO_PROXY": "", "no_proxy": "",
    "GIT_ALLOW_PROTOCOL": "none",  # git (kustomize's remote fetcher) may use no transport
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
}


@dataclass(frozen=True)
class SandboxStatus:
    """Whether renders get a network namespace of their own; `reason` says why not."""

    active: bool
    prefix: tuple[str, ...] = ()
    reason: str = ""

    @property
    def line(self) -> str:
        """The one line the first render of a process logs (and `tidecd` prints where it matters)."""
        if self.active:
            return "render sandbox: each helm/kustomize run gets its own network namespace (unshare --net)"
        return (f"render sandbox unavailable ({self.reason}): only the confinement check (remote resources, "
                "bases, git URLs and helm repositories refused before the tool runs) and closed proxies guard "
                "network access during render")


@functools.cache
def _unshare_problem(unshare: str) -> str:
    """"" when `unshare --net --map-root-user` works here, else what it said (first line)."""
    try:
        done = subprocess.run([unshare, "--net", "--map-root-user", "true"], capture_output=True, timeout=10,
                              check=False, text=True)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{unshare} cannot run: {type(exc).__name__}"
    if done.returncode == 0:
        return ""
    said = (done.stderr or done.stdout).strip().splitlines()
    return said[0][:200] if said else f"{unshare} exited {done.returncode}"


def sandbox_status() -> SandboxStatus:
    if os.environ.get("TIDECD_RENDER_SANDBOX", "auto").strip().lower() in ("off", "0", "false", "no"):
        return SandboxStatus(False, reason="TIDECD_RENDER_SANDBOX=off")
    unshare = shutil.which("unshare")
    if unshare is None:
        return SandboxStatus(False, reason="no unshare on PATH")
    problem = _unshare_problem(unshare)
    if problem:
        return SandboxStatus(False, reason=f"user namespaces not allowed: {problem}")
    return SandboxStatus(True, (unshare, "--net", "--map-root-user", "--"))


_reported: set[SandboxStatus] = set()
_report_lock = threading.Lock()


def report_sandbox() -> SandboxStatus:
    """The sandbox status, logged the first time each outcome is seen in this process (a warning when
    there is no namespace). Every render calls it first, so the line appears before any tool runs."""
    status = sandbox_status()
    with _report_lock:
        first = status not in _reported
        _reported.add(status)
    if first:
        (log.info if status.active else log.warning)(status.line, sandbox=status.active)
    return status


def forget_sandbox_status() -> None:
    """Probe `unshare` again and report the next outcome anew (a test that changes PATH or the kernel's
    answer; a process otherwise probes once)."""
    _unshare_problem.cache_clear()
    with _report_lock:
        _reported.clear()


def sandbox_prefix() -> list[str]:
    """`unshare --net --map-root-user` where the kernel lets us (a network namespace of our own), else []."""
    return list(report_sandbox().prefix)


def run(
    argv: Sequence[str],
    *,
    what: str,
    cwd: Path,
    home: Path,
    env: Mapping[str, str] | None = None,
    strip: Sequence[Path] = (),
) -> str:
    """stdout of `argv`, run in the sandbox within the render's limits (`run_child`); RenderError naming
    `what` (e.g. `kustomize build base`) when it fails, LimitExceeded when it passes a limit."""
    child_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        **(env or {}),
        **NO_NETWORK_ENV,
    }
    done = run_child([*sandbox_prefix(), *argv], what=what, cwd=cwd, env=child_env)
    if done.returncode != 0:
        message = trim(done.stderr or done.stdout, strip) or f"exit status {done.returncode}"
        raise RenderError(f"{what} failed: {message}")
    return done.stdout


# --- the limits of every render child ---------------------------------------------------------------------


@dataclass
class _Budget:
    """The seconds one render has spent, over all its `rendering()` sections."""

    limit: int
    spent: float = 0.0
    since: float | None = None  # monotonic start of the section running now

    def left(self) -> float:
        running = time.monotonic() - self.since if self.since is not None else 0.0
        return self.limit - self.spent - running


_BUDGET: ContextVar[_Budget | None] = ContextVar("tidecd_render_budget", default=None)


@contextlib.contextmanager
def one_render() -> Iterator[None]:
    """Everything inside is one render for `TIDECD_MAX_RENDER_SECONDS` (`render_cached` wraps its
    `render_fn` in it, so the sources of a multi-source app share one budget). Nested: the outer one holds."""
    if _BUDGET.get() is not None:
        yield
        return
    token = _BUDGET.set(_Budget(limits.render_limits().render_seconds))
    try:
        yield
    finally:
        _BUDGET.reset(token)


@contextlib.contextmanager
def rendering() -> Iterator[None]:
    """The render's clock runs inside (`render.render`: tool runs, files read, checks), and not while a
    source is fetched or checked out between two of them, which has its own timeouts."""
    with one_render():
        budget = _BUDGET.get()
        if budget is None or budget.since is not None:
            yield
            return
        budget.since = time.monotonic()
        try:
            yield
        finally:
            budget.spent += time.monotonic() - budget.since
            budget.since = None


def seconds_left(what: str) -> float:
    """Seconds the render may still take; LimitExceeded naming `what` once none are left. Outside a
    render (a tool run on its own) the whole limit."""
    budget = _BUDGET.get()
    if budget is None:
        return float(limits.render_limits().render_seconds)
    left = budget.left()
    if left <= 0:
        raise _over_time(what, budget.limit)
    return left


def _over_time(what: str, limit: int) -> LimitExceeded:
    return limits.exceeded(f"{what}: render time", "render_seconds", limit, " s")


@dataclass(frozen=True)
class Finished:
    """A child that ended within the limits: its exit status and output (errors: the last part only)."""

    returncode: int
    stdout: str
    stderr: str


CANNOT_RUN, _EXEC_FAILED, _LIMITED = child.CANNOT_RUN, child.EXEC_FAILED, child.LIMITED  # the one trampoline
# What a process says when an allocation failed: Go's runtime, Python, C++, jsonnet's VM, C (strerror).
_OUT_OF_MEMORY = ("out of memory", "MemoryError", "std::bad_alloc", "memory allocation error",
                  "Cannot allocate memory")
# A child (or a process it started) stopped by the output limit: killed by SIGXFSZ, as a shell reports it,
# or told EFBIG by a write.
_TOO_LARGE = (-signal.SIGXFSZ, 128 + signal.SIGXFSZ)
_FILE_TOO_LARGE = ("File size limit exceeded", "File too large", "file too large")
_ERROR_TAIL = 16 * 1024


def run_child(argv: Sequence[str], *, what: str, env: Mapping[str, str], cwd: Path | None = None,
              stdin: str = "") -> Finished:
    """Run `argv` within the render's limits (see the module docstring): the one way a render starts a
    process. LimitExceeded naming `what` and the variable when the child passes the render's deadline,
    dies of the memory limit or writes past the output limit (its process group is killed in every case);
    RenderError when it cannot be started. Any other exit status is the caller's to explain."""
    bound = limits.render_limits()
    deadline = seconds_left(what)
    with tempfile.TemporaryFile() as given, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        given.write(stdin.encode())
        given.seek(0)
        try:
            ended, returncode = child.run(argv, env=env, memory_bytes=bound.render_memory_bytes,
                                          output_bytes=bound.render_output_bytes + 1, seconds=deadline,
                                          stdin=given, stdout=out, stderr=err, cwd=cwd)
        except OSError as exc:
            raise RenderError(f"{what}: cannot run {argv[0]}: {exc.strerror}") from exc
        if not ended:
            budget = _BUDGET.get()
            raise _over_time(what, budget.limit if budget else bound.render_seconds)
        stderr = _tail(err)
        said = _head(err) + stderr  # Go says "out of memory" first, then a stack dump of every goroutine
        written = os.fstat(out.fileno()).st_size
        if written > bound.render_output_bytes or returncode in _TOO_LARGE or any(
                marker in said for marker in _FILE_TOO_LARGE):
            raise limits.exceeded(f"{what}: output", "render_output_bytes", bound.render_output_bytes, " bytes")
        if returncode != 0 and any(marker in said for marker in _OUT_OF_MEMORY):
            raise limits.exceeded(f"{what}: memory", "render_memory_bytes", bound.render_memory_bytes,
                                  " bytes")
        if returncode == CANNOT_RUN and stderr.startswith(_EXEC_FAILED):
            raise RenderError(f"{what}: {stderr.removeprefix(_EXEC_FAILED).strip()}")
        out.seek(0)
        return Finished(returncode, out.read().decode("utf-8", errors="replace"), stderr)


def _head(file: IO[bytes]) -> str:
    file.seek(0)
    return file.read(_ERROR_TAIL // 4).decode("utf-8", errors="replace")


def _tail(file: IO[bytes]) -> str:
    size = os.fstat(file.fileno()).st_size
    file.seek(max(0, size - _ERROR_TAIL))
    return file.read().decode("utf-8", errors="replace")


def trim(text: str, strip: Sequence[Path] = ()) -> str:
    """The useful end of a tool's error output, with temp directory prefixes removed."""
    for path in strip:
        text = text.replace(f"{path}/", "").replace(str(path), ".")
    text = text.strip()
    if len(text) > STDERR_LIMIT:
        text = "..." + text[-STDERR_LIMIT:]
    return text
