"""tidecd's log lines follow the stderr of the moment they are written, not the one `configure` saw."""

from __future__ import annotations

import io
import json
import sys

import pytest
import structlog

from tidecd.base import logs


def test_lines_go_to_the_current_stderr_even_after_the_one_configured_is_closed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    saved = structlog.get_config()
    first, second = io.StringIO(), io.StringIO()
    try:
        monkeypatch.setattr(sys, "stderr", first)
        logs.configure()
        structlog.get_logger("t").info("before", n=1)
        first.close()  # as a test's capture or click's runner closes its stream
        monkeypatch.setattr(sys, "stderr", second)
        structlog.get_logger("t").info("after", n=2)
    finally:
        structlog.configure(**saved)
    [line] = second.getvalue().splitlines()
    assert json.loads(line)["event"] == "after" and json.loads(line)["n"] == 2
