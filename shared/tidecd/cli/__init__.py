"""The `tidecd` command's entry: `main` starts the thin client (`thin`: `--server` commands it answers with
the standard library alone, in a fraction of the full CLI's start) and otherwise the full command (`root`:
typer, the local runtime, every group).

This package imports nothing at all, since the console script imports it before anything runs. Its `app` (the
root Typer app, as tests and tools use it) is loaded on first use.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tidecd.cli.root import app as app


def main() -> None:
    from tidecd.cli import thin  # lazy: the thin client is the only thing a `--server` call may load

    code = thin.run(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from tidecd.cli import root  # lazy: cold start (typer, rich and the runtime only for the full CLI)

    root.main()


def __getattr__(name: str) -> Any:
    """`tidecd.cli.app`: the root Typer app (loading the full CLI)."""
    if name == "app":
        from tidecd.cli import root  # lazy: cold start (the full CLI only when asked for)

        return root.app
    raise AttributeError(f"module 'tidecd.cli' has no attribute {name!r}")
