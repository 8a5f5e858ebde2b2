"""`tidecd proj role create-token|list-tokens|delete-token`: a project role's JWT tokens for CI.

As `argocd proj role ...`: create-token prints the token once (only this answer ever holds it), list-tokens
shows ids and times, delete-token revokes by id (or iat), and the next call with that token is refused.
Locally or against the api with `--server` (the caller needs `projects, update, PROJECT`), through the
same api use case either way (`tidecd.usecases.tokens`).
"""

from __future__ import annotations

import datetime
from typing import Any

import typer

from tidecd.cli.app import OUTPUT, SERVER, TOKEN, call_api, checked, emit, print_table

app = typer.Typer(no_args_is_help=True, help="Projects: their roles' tokens for CI.")
role = typer.Typer(no_args_is_help=True, help="A project role's JWT tokens (Argo CD's proj role).")
app.add_typer(role, name="role")


def when(seconds: int) -> str:
    """A token time as Argo CD prints it (UTC, RFC 3339); 0 (never expires) as "-"."""
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if seconds else "-"


@role.command("create-token")
def create_token(project: str, role_name: str = typer.Argument(..., metavar="ROLE"),
                 expires_in: float = typer.Option(0, "--expires-in", "-e", help="Seconds; 0: never expires."),
                 token_id: str = typer.Option("", "--id", "-i", help="The token's id (default: a random uuid)."),
                 token_only: bool = typer.Option(False, "--token-only", "-t", help="Print the token alone."),
                 server: str = SERVER, token: str = TOKEN, output: str = OUTPUT) -> None:
    """Issue a token of PROJECT's ROLE; it is printed once and never shown again."""
    body: dict[str, Any] = {"expiresIn": expires_in} | ({"id": token_id} if token_id else {})
    made = checked(*call_api("POST", f"/projects/{project}/roles/{role_name}/token", server, token, body))
    if token_only:
        typer.echo(made["token"])
        return
    emit(made, output, lambda b: typer.echo(f"Token id:   {b['id']}\nIssued at:  {when(b['iat'])}\n"
                                            f"Expires at: {when(b['exp'])}\nToken:      {b['token']}"))


@role.command("list-tokens")
def list_tokens(project: str, role_name: str = typer.Argument(..., metavar="ROLE"), server: str = SERVER,
                token: str = TOKEN, output: str = OUTPUT) -> None:
    """The valid tokens of PROJECT's ROLE (ids and times, never the tokens)."""
    found = checked(*call_api("GET", f"/projects/{project}/roles/{role_name}/tokens", server, token))
    emit(found, output, lambda b: print_table(["ID", "ISSUED AT", "EXPIRES AT"], [
        [t["id"], when(t["iat"]), when(t["exp"])] for t in b["tokens"]]))


@role.command("delete-token")
def delete_token(project: str, role_name: str = typer.Argument(..., metavar="ROLE"),
                 which: str = typer.Argument(..., metavar="ID-OR-IAT"), server: str = SERVER, token: str = TOKEN,
                 output: str = OUTPUT) -> None:
    """Revoke a token of PROJECT's ROLE: the next call made with it is refused."""
    gone = checked(*call_api("DELETE", f"/projects/{project}/roles/{role_name}/token/{which}", server, token))
    emit(gone, output, lambda b: typer.echo(f"token {b['revoked']['id']} revoked"))
