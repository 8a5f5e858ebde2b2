"""`tidecd app ...`: list, get, diff, sync, refresh, history, rollback.

Works locally (reading TIDECD_CONFIG, TIDECD_STORE and KUBECONFIG, as the functions do) or against a
running api with `--server URL` (token from `--token` or TIDECD_API_TOKEN). Both paths go through
`tidecd.api.handle`, so they answer the same JSON.
"""

from __future__ import annotations

import json
from typing import Any

import typer
import yaml

from tidecd.model import ChangeSet

app = typer.Typer(no_args_is_help=True, help="Applications: status, diff, sync, history, rollback.")

SERVER = typer.Option("", "--server", envvar="TIDECD_SERVER", help="api URL; empty means work locally.")
TOKEN = typer.Option("", "--token", envvar="TIDECD_API_TOKEN", help="api bearer token.")
OUTPUT = typer.Option("table", "-o", "--output", help="table, json or yaml.")


def _call(method: str, path: str, server: str, token: str, body: dict[str, Any] | None = None,
          query: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    data = json.dumps(body or {}).encode()
    if server:
        import requests

        try:
            resp = requests.request(method, server.rstrip("/") + "/api/v1" + path, data=data, params=query,
                                    headers={"Authorization": f"Bearer {token}",
                                             "Content-Type": "application/json"}, timeout=900)
        except requests.RequestException as exc:
            _fail(f"cannot reach {server}: {type(exc).__name__}")
        return resp.status_code, resp.json()
    from tidecd import api
    from tidecd.runtime import Runtime

    runtime = Runtime.from_env()
    runtime.settings.api_token = "local"  # noqa: S105 - local calls are the user's own process
    answer = api.handle(method, "/api/v1" + path, {"Authorization": "Bearer local"}, data, runtime, query=query)
    return answer.status, answer.body


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _checked(status: int, body: dict[str, Any]) -> dict[str, Any]:
    if status >= 400:
        _fail(str(body.get("message") or body), code=2 if status != 409 else 3)
    return body


def _emit(body: dict[str, Any], output: str, table: Any) -> None:
    if output == "json":
        typer.echo(json.dumps(body, indent=2))
    elif output == "yaml":
        typer.echo(yaml.safe_dump(body, sort_keys=False))
    elif output == "table":
        table(body)
    else:
        _fail(f"unknown output format {output!r} (table, json or yaml)")


def _print_table(headers: list[str], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(*headers, box=None, pad_edge=False, header_style="bold")
    for row in rows:
        table.add_row(*row)
    Console(width=200).print(table)


def _refreshed(name: str, server: str, token: str, cached: bool) -> dict[str, Any]:
    query = None if cached or server else {"refresh": "true"}
    return _checked(*_call("GET", f"/apps/{name}", server, token, query=query))


@app.command("list")
def list_apps(server: str = SERVER, token: str = TOKEN, output: str = OUTPUT,
              cached: bool = typer.Option(False, help="Show the stored status without refreshing.")) -> None:
    """Every application of the config source with its sync and health status."""
    body = _checked(*_call("GET", "/apps", server, token))
    if not cached and not server:
        for item in body["apps"]:
            if "error" not in item:  # an app the config sets aside has nothing to refresh
                _refreshed(item["name"], server, token, cached)
        body = _checked(*_call("GET", "/apps", server, token))

    def table(b: dict[str, Any]) -> None:
        _print_table(["NAME", "SYNC", "HEALTH", "REVISION"],
                     [[a["name"], a["sync"] if "error" not in a else "Invalid", a["health"], a["revision"][:12]]
                      for a in b["apps"]])
        for a in b["apps"]:
            if "error" in a:
                typer.echo(f"invalid: {a['name']}: {a['error']}", err=True)
        for problem in b.get("configProblems", []):
            typer.echo(f"config problem: {problem}", err=True)

    _emit(body, output, table)


@app.command("get")
def get(name: str, server: str = SERVER, token: str = TOKEN, output: str = OUTPUT,
        cached: bool = typer.Option(False, help="Show the stored status without refreshing.")) -> None:
    """One application: status, conditions, last operation and every resource."""
    body = _refreshed(name, server, token, cached)

    def table(b: dict[str, Any]) -> None:
        typer.echo(f"Name:       {b['app']}\nSync:       {b['syncStatus']}  (revision {b['revision'][:12]})\n"
                   f"Health:     {b['health']}" + (f"  ({b['healthMessage']})" if b.get("healthMessage") else ""))
        for cond in b.get("conditions", []):
            typer.echo(f"Condition:  {cond['type']}: {cond['message']}")
        if b.get("operation"):
            op = b["operation"]
            typer.echo(f"Operation:  {op['phase']}: {op['message']}")
        images = b.get("images") or {}
        if images.get("override"):
            typer.echo(f"Images:     {', '.join(images['override'])}  (image updater, argocd write-back)")
        if images.get("pinned"):
            typer.echo(f"Images:     {images['pinned']} (tidecd image unpin {b['app']})")
        elif images.get("check"):
            typer.echo(f"Images:     {images['check'].get('status')}: {images['check'].get('message')}")
        typer.echo("")
        _print_table(["KIND", "NAMESPACE", "NAME", "STATUS", "HEALTH", "MESSAGE"], [
            [(r["group"] + "/" if r["group"] else "") + r["kind"], r["namespace"], r["name"],
             r["status"] + (" (requires pruning)" if r.get("requiresPruning") else ""), r["health"],
             r.get("healthMessage") or ", ".join(r.get("changed") or [])] for r in b["resources"]])

    _emit(body, output, table)


@app.command("diff")
def diff(name: str, server: str = SERVER, token: str = TOKEN, output: str = OUTPUT,
         cached: bool = typer.Option(False, help="Use the stored comparison without refreshing.")) -> None:
    """What differs between git and the cluster; exit code 1 when out of sync (like `kubectl diff`)."""
    _refreshed(name, server, token, cached)
    body = _checked(*_call("GET", f"/apps/{name}/diff", server, token))

    def text(b: dict[str, Any]) -> None:
        typer.echo("\n".join(ChangeSet.from_dicts(b["changes"]).lines(diffs=True)))

    _emit(body, output, text)
    if body["sync"] != "Synced":
        raise typer.Exit(1)


def _print_changes(body: dict[str, Any]) -> None:
    for line in ChangeSet.from_dicts(body.get("changes", [])).lines():
        typer.echo(line)
    if "operation" in body:
        typer.echo(f"\n{body['operation']['phase']}: {body['operation']['message']}")
    for cond in body.get("conditions", []):
        typer.echo(f"{cond['type']}: {cond['message']}", err=True)
    typer.echo(f"sync: {body['sync']}  health: {body['health']}")


def _finish(body: dict[str, Any]) -> None:
    failed = body.get("operation", {}).get("phase") == "Failed" or bool(body.get("conditions"))
    if failed:
        raise typer.Exit(1)


@app.command("sync")
def sync(name: str, prune: bool = typer.Option(False, "--prune", help="Delete objects git no longer has."),
         dry_run: bool = typer.Option(False, "--dry-run", help="Report what would change; write nothing."),
         resource: list[str] = typer.Option([], "--resource", help="GROUP/KIND/NAME; repeatable."),  # noqa: B006
         server: str = SERVER, token: str = TOKEN, output: str = OUTPUT) -> None:
    """Sync an application now, printing one line per object."""
    payload: dict[str, Any] = {"prune": prune, "dryRun": dry_run}
    if resource:
        _refreshed(name, server, token, cached=False)
        payload["resources"] = resource
    body = _checked(*_call("POST", f"/apps/{name}/sync", server, token, payload))
    _emit(body, output, _print_changes)
    _finish(body)


@app.command("refresh")
def refresh(name: str, server: str = SERVER, token: str = TOKEN, output: str = OUTPUT) -> None:
    """One reconcile: refresh, then the automated sync or self-heal the app's policy asks for."""
    body = _checked(*_call("POST", f"/apps/{name}/refresh", server, token))
    _emit(body, output, _print_changes)
    _finish(body)


@app.command("history")
def history(name: str, server: str = SERVER, token: str = TOKEN, output: str = OUTPUT) -> None:
    """The last deployments (id, revision, time, result)."""
    body = _checked(*_call("GET", f"/apps/{name}/history", server, token))
    _emit(body, output, lambda b: _print_table(
        ["ID", "REVISION", "DEPLOYED AT", "RESULT"],
        [[str(h["id"]), h["revision"][:12], h["deployedAt"], h["result"]] for h in b["history"]]))


@app.command("rollback")
def rollback(name: str, history_id: int = typer.Argument(..., metavar="ID"),
             prune: bool = typer.Option(False, "--prune"),
             server: str = SERVER, token: str = TOKEN, output: str = OUTPUT) -> None:
    """Re-sync a revision from history; automated sync is switched off for the app until the next manual sync."""
    body = _checked(*_call("POST", f"/apps/{name}/rollback", server, token, {"id": history_id, "prune": prune}))
    _emit(body, output, _print_changes)
    _finish(body)
