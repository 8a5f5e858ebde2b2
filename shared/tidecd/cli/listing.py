"""`tidecd app list`: every application from its recorded state, like `argocd app list` (which reads the
controller's cache); `--refresh` compares each first (one reconcile each, so it costs what a sync check does).

The api's list answer carries each app's status, project, destination, labels and recorded conditions, so the
wide columns (PROJECT, CLUSTER, NAMESPACE, CONDITIONS), the `-p`/`-l` filters and the exit code need no call
per app, with `--server` or without (`cli.thin` answers the same way through `cli.textout`).
"""

from __future__ import annotations

from typing import Any

import typer

from tidecd.cli import exits
from tidecd.cli.app import (
    SERVER,
    TOKEN,
    app,
    call_api,
    checked,
    emit,
    fail,
    print_table,
)
from tidecd.cli.exits import EXIT_APP_ERROR
from tidecd.cli.textout import list_failing, list_notes, list_table, selected, selector

FORMATS = ("table", "wide", "json", "yaml", "name")


@app.command("list")
def list_apps(server: str = SERVER, token: str = TOKEN,
              output: str = typer.Option("table", "-o", "--output", help="table, wide, json, yaml or name."),
              refresh: bool = typer.Option(False, "--refresh",
                                           help="Compare every app first (one reconcile each); default: the "
                                                "recorded state."),
              cached: bool = typer.Option(False, "--cached", hidden=True, help="The default; kept for scripts."),
              projects: list[str] = typer.Option([], "-p", "--project",  # noqa: B006
                                                 help="Only apps of this project; repeatable."),
              selectors: list[str] = typer.Option([], "-l", "--selector",  # noqa: B006
                                                  help="Only apps labelled key=value; repeatable (all must match)."),
              ) -> None:
    """Every application with its sync and health status, as last recorded (exit 5 when one fails to
    compare)."""
    if output not in FORMATS:
        fail(f"unknown output format {output!r} ({', '.join(FORMATS)})")
    try:
        wanted = [selector(text) for text in selectors]
    except exits.Failed as exc:
        fail(str(exc), code=exc.code)
    body = checked(*call_api("GET", "/apps", server, token))
    if refresh and not cached:
        for item in body["apps"]:
            if "error" not in item:  # an app the config sets aside has nothing to refresh
                checked(*call_api("GET", f"/apps/{item['name']}", server, token, query={"refresh": "true"}))
        body = checked(*call_api("GET", "/apps", server, token))
    body = selected(body, projects, wanted)
    if output == "name":
        for item in body["apps"]:
            typer.echo(item["name"])
    else:
        emit(body, "table" if output == "wide" else output, lambda b: _table(b, wide=output == "wide"))
    if list_failing(body):
        raise typer.Exit(EXIT_APP_ERROR)


def _table(body: dict[str, Any], *, wide: bool) -> None:
    print_table(*list_table(body, wide=wide))
    for note in list_notes(body):
        typer.echo(note, err=True)
