"""A real browser for the dashboard tests: Debian's chromium driven by Playwright for Python.

Playwright cannot download its own browsers here, so the fixture installs the Debian package when
/usr/bin/chromium is missing (apt-get update + install; CI runs as root). The browser starts once per
session on first use; each test opens its own context (cookies, viewport, colour scheme).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def ensure_chromium() -> Path:
    """Debian's chromium, installed with apt-get when missing (never a browser download)."""
    if CHROMIUM.exists():
        return CHROMIUM
    if shutil.which("apt-get") is None:
        pytest.fail("chromium is missing and apt-get is not available to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1500, check=False)
        if done.returncode != 0:
            pytest.fail(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
    if not CHROMIUM.exists():
        pytest.fail("apt-get installed chromium but /usr/bin/chromium is still missing")
    return CHROMIUM


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    executable = ensure_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(executable), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


def screenshot_dir(tmp_path: Path) -> Path:
    """Where the tests save screenshots: `TIDECD_SCREENSHOTS` (`make screenshots` points it at docs/),
    else the test's temp dir."""
    wanted = os.environ.get("TIDECD_SCREENSHOTS")
    target = Path(wanted) if wanted else tmp_path / "screenshots"
    target.mkdir(parents=True, exist_ok=True)
    return target
