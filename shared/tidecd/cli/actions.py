"""`tidecd app actions list|run`: Argo CD's resource actions (restart, scale, delete) on one object of an
app, through the api's action routes (`tidecd.usecases.actions_api`), locally or with `--server`.

    tidecd app actions list NAME --kind Deployment --name web
    tidecd app actions run NAME restart --kind Deployment --name web
    tidecd app actions run NAME scale --kind Deployment --name web --param replicas=3
"""

from __future__ import annotations

from typing import Any

import typer

from tidecd.cli.app import OUTPUT, SERVER, TOKEN, app, call_api, checked, emit, fail, print_table
from tidecd.cli.resources import GROUP, KIND, NAME, NAMESPACE, resolved

actions = typer.Typer(help="Resource actions (restart, scale, delete) on one object of an app.",
                      no_args_is_help=True)
app.add_typer(actions, name="actions")


def _target(app_name: str, group: str, kind: str, namespace: str, name: str, server: str,
            token: str) -> dict[str, str]:
    if not kind or not name:
        fail("--kind and --name name the object (with --group/--namespace when several match)")
    return resolved(app_name, group, kind, namespace, name, server, token)


@actions.command("list")
def list_actions(app_name: str = typer.Argument(..., metavar="NAME"), group: str = GROUP, kind: str = KIND,
                 namespace: str = NAMESPACE, name: str = NAME, server: str = SERVER, token: str = TOKEN,
                 output: str = OUTPUT) -> None:
    """The actions the object offers now."""
    query = _target(app_name, group, kind, namespace, name, server, token)
    body = checked(*call_api("GET", f"/apps/{app_name}/resource/actions", server, token, query=query))

    def table(b: dict[str, Any]) -> None:
        print_table(["ACTION", "PARAMS", "DISABLED"],
                    [[a["name"], ",".join(a["params"]), a.get("reason") or ("yes" if a["disabled"] else "")]
                     for a in b["actions"]])
    emit(body, output, table)


@actions.command("run")
def run_action(app_name: str = typer.Argument(..., metavar="NAME"),
               action: str = typer.Argument(..., metavar="ACTION"), group: str = GROUP, kind: str = KIND,
               namespace: str = NAMESPACE, name: str = NAME,
               param: list[str] = typer.Option([], "--param", help="NAME=VALUE (scale: replicas=3); repeatable."),  # noqa: B006
               server: str = SERVER, token: str = TOKEN, output: str = OUTPUT) -> None:
    """Run ACTION on the object now."""
    params = {}
    for item in param:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"--param {item!r}: give NAME=VALUE")
        params[key] = value
    query = _target(app_name, group, kind, namespace, name, server, token)
    body = checked(*call_api("POST", f"/apps/{app_name}/resource/actions/{action}", server, token,
                             {"params": params}, query=query))
    emit(body, output, lambda b: typer.echo(f"{b['resource']}: {b['message']}"))
