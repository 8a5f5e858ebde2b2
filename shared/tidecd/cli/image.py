"""`tidecd image ...`: run the image updater now (the same code as the `images` function), lift a pin.

Like `tidecd app`, it works locally or against a running api (`--server`); both go through `tidecd.usecases.api`.
"""

from __future__ import annotations

from typing import Any

import typer

from tidecd.cli.app import OUTPUT, SERVER, TOKEN, call_api, checked, emit, print_table

app = typer.Typer(no_args_is_help=True, help="The image updater: check registries for new tags, lift rollback pins.")


@app.command("check")
def check(name: str = typer.Argument("", metavar="[APP]", help="One app; every managed app when omitted."),
          server: str = SERVER, token: str = TOKEN, output: str = OUTPUT) -> None:
    """One image updater tick: new tags become commits (git) or overrides (argocd), then a refresh."""
    body = checked(*call_api("POST", "/images/check", server, token, {"app": name} if name else {}))

    def table(b: dict[str, Any]) -> None:
        print_table(["APP", "STATUS", "MESSAGE", "COMMIT"],
                    [[r["app"], r["status"], r["message"], r["commit"][:12]] for r in b["apps"]])
        typer.echo(f"\n{b['repositories']} repositories, {b['tagsListCalls']} tags-list calls, "
                   f"{len(b['refreshed'])} refreshed, {b['elapsed']}s")

    emit(body, output, table)
    if any(r["status"] in ("invalid", "unavailable", "error") for r in body["apps"]):
        raise typer.Exit(1)


@app.command("unpin")
def unpin(name: str, server: str = SERVER, token: str = TOKEN, output: str = OUTPUT) -> None:
    """Lift the hold a rollback put on the app's images: the next tick may update them again."""
    body = checked(*call_api("POST", f"/apps/{name}/images/unpin", server, token))
    emit(body, output, lambda b: typer.echo(f"{b['app']}: {b['message']}"))
