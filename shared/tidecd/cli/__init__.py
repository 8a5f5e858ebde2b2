"""The `tidecd` command: apps (list, get, diff, sync, history, rollback), secrets, `import` (from Argo CD),
`login` (single sign-on or a token), and the dev cluster.

`tidecd dev ...` lives in the dev tooling package (`tidecd_dev.cli`), which is not part of the product: it is
imported only when that command runs, so every other command starts without it, and a missing package
(a deployed function source) is one clear line.
"""

from __future__ import annotations

import importlib
import logging

import typer

from tidecd.cli import account, actions, admin, listing, login, migrate, proj, resources, secrets
from tidecd.cli import app as apps
from tidecd.cli import image as images

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help=f"GitOps continuous delivery, serverless.\n\n{apps.EXIT_CODES}.")
app.add_typer(apps.app, name="app")
app.add_typer(images.app, name="image")
app.add_typer(admin.app, name="admin")
app.add_typer(proj.app, name="proj")
app.add_typer(account.app, name="account")
__all__ = ["actions", "app", "listing", "main", "resources"]  # these register `app` commands on import

PROCESS = "tidecd process"  # main()'s context object: only the process entry sets the global log level


def _version(shown: bool) -> None:
    if shown:
        # lazy: cold start (only `--version` reads the installed metadata)
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"tidecd {version('tidecd')}")
        except PackageNotFoundError:
            typer.echo("tidecd (not installed: no package metadata)")
        raise typer.Exit()


@app.callback()
def root(ctx: typer.Context,
         verbose: int = typer.Option(0, "-v", "--verbose", count=True,
                                     help="Log lines on stderr: -v at INFO, -vv at DEBUG (default: warnings only)."),
         _shown: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                     help="Print the version and exit.")) -> None:
    """GitOps continuous delivery, serverless."""
    if ctx.obj == PROCESS:  # in-process callers (tests, tools) keep their own logging
        # lazy: cold start (structlog costs ~0.3 s; `--help` and `--version` never get here)
        from tidecd.base import logs

        logs.configure(logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING)

DEV_CLI = "tidecd_dev.cli"  # named, not imported: the product never depends on the dev tooling


@app.command("dev", add_help_option=False,
             context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def dev(ctx: typer.Context) -> None:
    """Local development helpers: `tidecd dev cluster up|down|status` (a real local control plane)."""
    try:
        module = importlib.import_module(DEV_CLI)
    except ModuleNotFoundError as exc:
        typer.echo(f"error: `tidecd dev` needs the dev tooling ({DEV_CLI}), which is installed from a checkout "
                   f"(`make venv`): {exc}", err=True)
        raise typer.Exit(2) from None
    module.app(args=ctx.args, prog_name=f"{ctx.find_root().info_name or 'tidecd'} dev")


def _register_optional() -> None:
    """Command groups whose modules register themselves on the main app."""

    secrets.register(app)
    migrate.register(app)
    login.register(app)


def main() -> None:
    _register_optional()
    app(obj=PROCESS)
