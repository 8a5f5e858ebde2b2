"""Running an external renderer (helm, kustomize): bounded time, a bare environment, a short error.

The child gets only PATH, a throwaway HOME and the variables the caller names, so no credential in the
function's environment reaches a chart's templates or a kustomize plugin, and no user-level config of
the machine changes a render. Errors quote the tool's stderr, trimmed, with temp paths made relative.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from tidecd.errors import RenderError

DEFAULT_TIMEOUT = 120.0
STDERR_LIMIT = 2000


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
        "GIT_TERMINAL_PROMPT": "0",  # a remote kustomize base must fail, never wait for a password
        **(env or {}),
    }
    try:
        done = subprocess.run(
            list(argv), cwd=cwd, env=child_env, capture_output=True, text=True, timeout=timeout, check=False
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
