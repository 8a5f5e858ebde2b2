"""The full `tidecd` command (typer), loaded by `tidecd.cli.main` unless the thin client answers: apps (list,
get, diff, sync, history, rollback), secrets, `import` (from Argo CD), `login` (single sign-on or a token),
and the dev cluster.

`tidecd dev ...` lives in the dev tooling package (`tidecd_dev.cli`), which is not part of the product: it is
imported only when that command runs, so every other command starts without it, and a missing package
(a deployed function source) is one clear line.
"""

from __future__ import annotations

import importlib
import logging
import sys

import typer

from tidecd.cli.account import app as account_app
from tidecd.cli.actions import actions as app_actions
from tidecd.cli.admin import app as admin_app
from tidecd.cli.app import EXIT_CODES
from tidecd.cli.app import app as apps_app
from tidecd.cli.appset import app as appset_app
from tidecd.cli.create import SYNC_POLICIES
from tidecd.cli.image import app as image_app
from tidecd.cli.listing import list_apps
from tidecd.cli.login import register as register_login
from tidecd.cli.migrate import register as register_migrate
from tidecd.cli.proj import app as proj_app
from tidecd.cli.resources import resources as app_resources
from tidecd.cli.secrets import register as register_secrets

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help=f"GitOps continuous delivery, serverless.\n\n{EXIT_CODES}.")
app.add_typer(apps_app, name="app")
app.add_typer(appset_app, name="appset")
app.add_typer(image_app, name="image")
app.add_typer(admin_app, name="admin")
app.add_typer(proj_app, name="proj")
app.add_typer(account_app, name="account")
# listing, resources, actions and create register `app` commands on import
__all__ = ["SYNC_POLICIES", "app", "app_actions", "app_resources", "list_apps", "main"]
sys.modules["tidecd.cli"].app = app  # type: ignore[attr-defined]  # `from tidecd.cli import app`: the root

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
                                     help="Print the version and exit."),
         server: str = typer.Option("", "--server", help="api URL for every command that talks to one (as "
                                    "argocd --server); a command's own --server or TIDECD_SERVER wins."),
         token: str = typer.Option("", "--token", help="api bearer token, likewise.")) -> None:
    """GitOps continuous delivery, serverless."""
    if server or token:
        ctx.default_map = _defaults(ctx.command, {k: v for k, v in (("server", server), ("token", token)) if v})
    if ctx.obj == PROCESS:  # in-process callers (tests, tools) keep their own logging
        # lazy: cold start (structlog costs ~0.3 s; `--help` and `--version` never get here)
        from tidecd.base import logs

        logs.configure(logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING)


def _defaults(command: object, values: dict[str, str]) -> dict[str, object]:
    """click's default map giving `values` to every command below `command` that has such options."""
    found: dict[str, object] = {}
    for name, sub in (getattr(command, "commands", None) or {}).items():
        if getattr(sub, "commands", None):
            found[name] = _defaults(sub, values)
        else:
            names = {getattr(p, "name", "") for p in getattr(sub, "params", [])}
            found[name] = {k: v for k, v in values.items() if k in names}
    return found


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

    register_secrets(app)
    register_migrate(app)
    register_login(app)


def main() -> None:
    _register_optional()
    app(obj=PROCESS)
