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
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from tidecd.base.errors import RenderError

log = structlog.get_logger("tidecd.render")

DEFAULT_TIMEOUT = 120.0
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
    timeout: float = DEFAULT_TIMEOUT,
    strip: Sequence[Path] = (),
) -> str:
    """stdout of `argv`; RenderError naming `what` (e.g. `kustomize build base`) on failure or timeout."""
    child_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        **(env or {}),
        **NO_NETWORK_ENV,
    }
    try:
        done = subprocess.run(
            [*sandbox_prefix(), *argv], cwd=cwd, env=child_env, capture_output=True, text=True,
            timeout=timeout, check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise RenderError(f"{what}: timed out after {timeout:g}s") from exc
    except OSError as exc:
        raise RenderError(f"{what}: cannot run {argv[0]}: {exc.strerror}") from exc
    if done.returncode != 0:
        message = trim(done.stderr or done.stdout, strip) or f"exit status {done.returncode}"
        raise RenderError(f"{what} failed: {message}")
    return done.stdout


def trim(text: str, strip: Sequence[Path] = ()) -> str:
    """The useful end of a tool's error output, with temp directory prefixes removed."""
    for path in strip:
        text = text.replace(f"{path}/", "").replace(str(path), ".")
    text = text.strip()
    if len(text) > STDERR_LIMIT:
        text = "..." + text[-STDERR_LIMIT:]
    return text
