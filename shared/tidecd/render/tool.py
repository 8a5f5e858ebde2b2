"""Running an external renderer (helm, kustomize): bounded time, a bare environment, a short error.

The child gets only PATH, a throwaway HOME and the variables the caller names, so no credential in the
function's environment reaches a chart's templates or a kustomize plugin, and no user-level config of
the machine changes a render. Errors quote the tool's stderr, trimmed, with temp paths made relative.

No network: what a render may read was checked before the tool runs (`render.confine`, helm's value
files), and the tool itself runs where network use fails. Where the kernel allows it (root, or user
namespaces) the child gets its own empty network namespace (`unshare --net`): not even loopback answers.
Everywhere, HTTP(S) proxies point at a closed loopback port (Go clients honour them for every host but
loopback) and git may use no protocol at all. `TIDECD_RENDER_SANDBOX=off` turns the namespace off.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from tidecd.errors import RenderError

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


@functools.cache
def _unshare_works(unshare: str) -> bool:
    try:
        done = subprocess.run([unshare, "--net", "--map-root-user", "true"], capture_output=True, timeout=10,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def sandbox_prefix() -> list[str]:
    """`unshare --net --map-root-user` where the kernel lets us (a network namespace of our own), else []."""
    if os.environ.get("TIDECD_RENDER_SANDBOX", "auto").strip().lower() in ("off", "0", "false", "no"):
        return []
    unshare = shutil.which("unshare")
    if unshare is None or not _unshare_works(unshare):
        return []
    return [unshare, "--net", "--map-root-user", "--"]


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
