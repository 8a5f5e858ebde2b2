"""Fetch a pinned npm package once into the tidecd cache (`~/.cache/tidecd/npm/<name>-<version>/`).

Used for data that GitHub publishes on npm: its OpenAPI description (`@octokit/openapi`) and its webhook
payload examples (`@octokit/webhooks-examples`). `npm pack` downloads the tarball through the ordinary npm
client; it is unpacked next to it and reused by every later run. Nothing is committed to the repository.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

from tidecd.clients.tools import cache_dir

OPENAPI_PACKAGE = ("@octokit/openapi", "23.0.2")
WEBHOOKS_EXAMPLES_PACKAGE = ("@octokit/webhooks-examples", "7.6.1")


def npm_package(name: str, version: str) -> Path:
    """The unpacked `package/` folder of `name@version`, fetched with `npm pack` on first use."""
    base = cache_dir() / "npm"
    base.mkdir(parents=True, exist_ok=True)
    target = base / f"{name.lstrip('@').replace('/', '-')}-{version}"
    if (target / "package.json").is_file():
        return target
    with (base / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "package.json").is_file():
            return target
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail(f"npm is not installed: it fetches {name}@{version} (apt-get install npm)")
        with tempfile.TemporaryDirectory(dir=base) as tmp:
            done = subprocess.run([npm, "pack", f"{name}@{version}", "--silent"], cwd=tmp, capture_output=True,
                                  text=True, timeout=600, check=False)
            tarballs = list(Path(tmp).glob("*.tgz"))
            if done.returncode != 0 or not tarballs:
                pytest.fail(f"npm pack {name}@{version} failed ({done.returncode}): {done.stderr[-2000:]}")
            unpacked = Path(tmp) / "unpacked"
            with tarfile.open(tarballs[0]) as tar:
                tar.extractall(unpacked, filter="data")
            (unpacked / "package").rename(target)
    return target
