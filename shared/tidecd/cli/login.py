"""`tidecd login` and `tidecd logout`: keep a token for an api server, as `argocd login` does.

`tidecd login --server URL --sso` logs in through the OIDC issuer the server's argocd-cm names
(`GET /api/v1/settings`): it listens on `http://localhost:PORT/auth/callback` (`--sso-port`, 8085 as
Argo CD's CLI), opens the browser at the issuer's authorization URL (code flow with PKCE, the client is
`cliClientID`, else `clientID`, and must accept that redirect: Dex's public clients do), exchanges the
code and checks the ID token (`tidecd.clients.oidc`, the one implementation the api uses too).
`tidecd login --server URL --token T` (or TIDECD_API_TOKEN) keeps a given token after one call proves it.

The token goes to the CLI's config file (TIDECD_CLI_CONFIG, else $XDG_CONFIG_HOME/tidecd/cli.json),
written 0600 in a 0700 directory. `tidecd app ... --server URL` uses it when no --token is given.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
import webbrowser
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import typer

from tidecd.base.errors import TidecdError
from tidecd.cli.thin import MAX_CONFIG, config_path

SSO_TIMEOUT = 300.0  # seconds the CLI waits for the browser to come back


def load() -> dict[str, Any]:
    path = config_path()
    if not path.is_file():
        return {"servers": {}}
    if path.stat().st_size > MAX_CONFIG:
        raise typer.BadParameter(f"{path}: larger than {MAX_CONFIG} bytes")
    try:
        doc = json.loads(path.read_text())
    except ValueError:
        raise typer.BadParameter(f"{path}: not JSON (delete it and log in again)") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("servers"), dict):
        raise typer.BadParameter(f"{path}: servers: expected a mapping (delete it and log in again)")
    return doc


def save(doc: dict[str, Any]) -> Path:
    """Write the config file readable by its owner only (0600), replacing it whole."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, json.dumps(doc, indent=1, sort_keys=True).encode())
    finally:
        os.close(fd)
    os.replace(temporary, path)
    return path


def saved_token(server: str) -> str:
    """The token `tidecd login` kept for this server ("" when none)."""
    entry = load()["servers"].get(server.rstrip("/"))
    token = entry.get("token") if isinstance(entry, dict) else None
    return token if isinstance(token, str) else ""


def _keep(server: str, token: str, subject: str, via: str) -> Path:
    doc = load()
    doc["servers"][server.rstrip("/")] = {"token": token, "subject": subject, "via": via}
    return save(doc)


class _Callback(BaseHTTPRequestHandler):
    """The one request the issuer sends the browser back with: `/auth/callback?code=...&state=...`."""

    server: _CallbackServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        parts = urlsplit(self.path)
        if parts.path != "/auth/callback":
            self.send_error(404)
            return
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        self.server.answer = query
        ok = "code" in query and not query.get("error")
        body = (b"<!doctype html><title>tidecd</title><p>Logged in: you may close this window.</p>" if ok else
                b"<!doctype html><title>tidecd</title><p>The login was refused: see the terminal.</p>")
        self.send_response(200 if ok else 400)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.server.done.set()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        return  # the query holds the code: never printed


class _CallbackServer(HTTPServer):
    def __init__(self, port: int) -> None:
        super().__init__(("127.0.0.1", port), _Callback)
        self.answer: dict[str, str] = {}
        self.done = threading.Event()


def _settings(server: str) -> dict[str, Any]:
    import requests  # lazy: cold start

    try:
        resp = requests.get(server.rstrip("/") + "/api/v1/settings", timeout=30)
        body = resp.json()
    except (requests.RequestException, ValueError) as exc:
        raise typer.BadParameter(f"cannot read {server}/api/v1/settings: {type(exc).__name__}") from None
    if resp.status_code != 200 or not isinstance(body, dict):
        raise typer.BadParameter(f"{server}/api/v1/settings answered {resp.status_code}")
    return body


def sso_login(server: str, port: int, open_browser: bool) -> tuple[str, str, tuple[str, ...]]:
    """(ID token, subject, groups) of a login through the server's OIDC issuer."""
    from tidecd.clients import oidc  # lazy: cold start (logins only)

    config = _settings(server).get("oidcConfig")
    if not isinstance(config, dict) or not config.get("issuer"):
        raise typer.BadParameter(f"{server} has no single sign-on configured (argocd-cm oidc.config)")
    issuer, client = str(config["issuer"]), str(config.get("cliClientID") or config.get("clientID") or "")
    scopes = tuple(str(s) for s in config.get("scopes") or ("openid", "profile", "email", "groups"))
    found = oidc.provider(issuer)
    listener = _CallbackServer(port)
    redirect = f"http://localhost:{listener.server_address[1]}/auth/callback"
    proof = oidc.Login(secrets.token_urlsafe(24), secrets.token_urlsafe(24), secrets.token_urlsafe(48))
    url = oidc.authorization_url(found, client, redirect, scopes, proof)
    thread = threading.Thread(target=listener.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    try:
        typer.echo(f"Opening the browser for single sign-on ({config.get('name') or issuer}):\n{url}", err=True)
        if open_browser:
            webbrowser.open(url)
        if not listener.done.wait(SSO_TIMEOUT):
            raise typer.BadParameter(f"no answer from the browser within {SSO_TIMEOUT:.0f} s")
    finally:
        listener.shutdown()
        listener.server_close()
    answer = listener.answer
    if answer.get("error"):
        raise typer.BadParameter(f"the identity provider refused the login: {answer['error'][:100]}")
    if not secrets.compare_digest(answer.get("state", ""), proof.state):
        raise typer.BadParameter("the browser came back with another login's state: try again")
    id_token = oidc.exchange(found, client, "", redirect, answer.get("code", ""), proof.verifier)
    audiences = tuple(a for a in (client, str(config.get("clientID") or "")) if a)
    person = oidc.principal(oidc.verify(issuer, id_token, audiences, nonce=proof.nonce))
    return id_token, person.subject, person.groups


def register(app: typer.Typer) -> None:
    @app.command("login")
    def login(server: str = typer.Option(..., "--server", envvar="TIDECD_SERVER", help="api URL."),
              sso: bool = typer.Option(False, "--sso", help="Log in through the server's OIDC issuer "
                                                            "(argocd-cm oidc.config), in a browser."),
              token: str = typer.Option("", "--token", envvar="TIDECD_API_TOKEN", help="Keep this token."),
              sso_port: int = typer.Option(8085, "--sso-port", help="Port of the localhost callback."),
              browser: bool = typer.Option(True, "--browser/--no-browser",
                                           help="Open the browser (else only print the URL).")) -> None:
        """Log in to an api server and keep its token in the CLI's config file (0600)."""
        from tidecd.cli.app import call_api  # lazy: cold start (as the other commands)
        from tidecd.cli.exits import EXIT_NOT_FOUND  # lazy: as above

        started = time.monotonic()
        try:
            if sso:
                kept, subject, groups = sso_login(server, sso_port, browser)
                via = "sso"
            elif token:
                status, body = call_api("GET", "/apps", server, token)
                if status != 200:
                    typer.echo(f"error: {server} refused the token ({status}): {body.get('message', '')}", err=True)
                    raise typer.Exit(EXIT_NOT_FOUND)
                kept, subject, groups, via = token, "", (), "token"
            else:
                raise typer.BadParameter("give --sso or --token (or TIDECD_API_TOKEN)")
        except TidecdError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(EXIT_NOT_FOUND) from None
        path = _keep(server, kept, subject, via)
        who = f" as {subject}" + (f" (groups: {', '.join(groups)})" if groups else "") if subject else ""
        typer.echo(f"Logged in to {server}{who} in {time.monotonic() - started:.1f} s; token kept in {path}")

    @app.command("logout")
    def logout(server: str = typer.Option(..., "--server", envvar="TIDECD_SERVER", help="api URL.")) -> None:
        """Forget the token kept for an api server."""
        doc = load()
        doc["servers"].pop(server.rstrip("/"), None)
        save(doc)
        typer.echo(f"Logged out of {server}")
