"""The dev tooling (tidecd_dev) stays out of the product: not imported by a CLI start, reachable as `tidecd dev`."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from tidecd.cli import app


def test_a_cli_start_imports_no_dev_module() -> None:
    probe = "import sys, tidecd.cli, tidecd.cli.app; print(sorted(m for m in sys.modules if 'tidecd_dev' in m))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_tidecd_dev_loads_the_dev_commands_when_called() -> None:
    result = CliRunner().invoke(app, ["dev", "cluster", "--help"])
    assert result.exit_code == 0, result.output
    assert "up" in result.output and "down" in result.output and "status" in result.output


def test_tidecd_dev_passes_the_exit_code_through() -> None:
    result = CliRunner().invoke(app, ["dev", "cluster", "status", "--name", "no-such-unit-test-cluster"])
    assert result.exit_code == 1
    assert "no cluster 'no-such-unit-test-cluster'" in result.output
