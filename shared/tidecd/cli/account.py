"""`tidecd account list|get|generate-token|delete-token`: local accounts and their API keys, as `argocd account`.

generate-token prints the token alone, once (only that answer ever holds it); get shows an account's tokens
(id, issued, expires), never their values; delete-token revokes one, and the next call made with it is
refused. Without `--account` the command acts on the caller's own account (the api's `session/userinfo`),
as Argo CD's does. Locally or against the api with `--server`, through the same api use case either way
(`tidecd.usecases.accounts`): the account itself may, anyone else needs `accounts, get|update, NAME`.
"""

from __future__ import annotations

from typing import Any

import typer

from tidecd.cli.app import OUTPUT, SERVER, TOKEN, call_api, checked, emit, fail, print_table
from tidecd.cli.proj import when

app = typer.Typer(no_args_is_help=True, help="Local accounts and their API keys (Argo CD's account).")
ACCOUNT = typer.Option("", "--account", "-a", help="Account name (default: the current account).")


def _name(account: str, server: str, token: str) -> str:
    """`--account`, or the caller's own account name (Argo CD's `session/userinfo`)."""
    if account:
        return account
    return str(checked(*call_api("GET", "/session/userinfo", server, token))["username"])


@app.command("generate-token")
def generate_token(account: str = ACCOUNT,
                   expires_in: str = typer.Option("0s", "--expires-in", "-e",
                                                  help="Duration before the token expires (24h, 90m; 0s: never)."),
                   token_id: str = typer.Option("", "--id", help="The token's id (default: a random uuid)."),
                   server: str = SERVER, token: str = TOKEN) -> None:
    """Issue an API key of an account with the apiKey capability; it is printed once and never shown again."""
    from tidecd.config.schema import parse_duration  # lazy: cold start (the config schema loads casbin)

    seconds = parse_duration(expires_in)
    if seconds is None or seconds < 0:
        fail(f"--expires-in: expected a duration such as 24h or 0s, got {expires_in[:40]!r}")
    name = _name(account, server, token)
    body: dict[str, Any] = {"expiresIn": seconds} | ({"id": token_id} if token_id else {})
    typer.echo(checked(*call_api("POST", f"/account/{name}/token", server, token, body))["token"])


@app.command("list")
def list_accounts(server: str = SERVER, token: str = TOKEN, output: str = OUTPUT) -> None:
    """The local accounts you may see: name, enabled, capabilities."""
    found = checked(*call_api("GET", "/account", server, token))
    emit(found, output, lambda b: print_table(["NAME", "ENABLED", "CAPABILITIES"], [
        [a["name"], str(a["enabled"]).lower(), ", ".join(a["capabilities"])] for a in b["items"]]))


def _show(body: dict[str, Any]) -> None:
    typer.echo(f"Name:               {body['name']}\nEnabled:            {str(body['enabled']).lower()}\n"
               f"Capabilities:       {', '.join(body['capabilities'])}\n\nTokens:")
    if not body["tokens"]:
        typer.echo("NONE")
        return
    print_table(["ID", "ISSUED AT", "EXPIRING AT"], [[t["id"], when(t["iat"]), when(t["exp"])] for t in body["tokens"]])


@app.command("get")
def get(account: str = ACCOUNT, server: str = SERVER, token: str = TOKEN, output: str = OUTPUT) -> None:
    """One account: enabled, capabilities and its tokens (ids and times, never the tokens)."""
    name = _name(account, server, token)
    emit(checked(*call_api("GET", f"/account/{name}", server, token)), output, _show)


@app.command("delete-token")
def delete_token(which: str = typer.Argument(..., metavar="ID"), account: str = ACCOUNT, server: str = SERVER,
                 token: str = TOKEN, output: str = OUTPUT) -> None:
    """Revoke a token of an account: the next call made with it is refused."""
    name = _name(account, server, token)
    gone = checked(*call_api("DELETE", f"/account/{name}/token/{which}", server, token))
    emit(gone, output, lambda b: typer.echo(f"token {b['revoked']['id']} of account {b['account']} revoked"))
