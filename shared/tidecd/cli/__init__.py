"""The `tidecd` command: apps (list, get, diff, sync, history, rollback), secrets, and the dev cluster."""

from __future__ import annotations

import typer

from tidecd.cli import app as apps
from tidecd.cli import dev

app = typer.Typer(no_args_is_help=True, add_completion=False, help="GitOps continuous delivery, serverless.")
app.add_typer(apps.app, name="app")
app.add_typer(dev.app, name="dev")


def _register_optional() -> None:
    """Command groups whose modules register themselves on the main app."""
    from tidecd.cli import secrets

    secrets.register(app)


def main() -> None:
    from tidecd import logs

    logs.configure()
    _register_optional()
    app()
