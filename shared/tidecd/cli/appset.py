"""`tidecd appset generate FILE|NAME`, `appset list`, `appset get NAME`: what ApplicationSets generate.

`generate` prints the Applications an ApplicationSet generates now and how they differ from what is
recorded (added, changed with the Application's diff, removed, kept as they are by `applicationsSync`),
as Argo CD's `argocd appset generate`. FILE (a path, or `-` for stdin) is sent whole to the api, which reads
it with the config loader and evaluates it as the ApplicationSet refresh does; NAME is an ApplicationSet of
the config source. Nothing is written either way. Locally or with `--server`, through the same api use case
(`tidecd.usecases.appset_views`). Exit 5 when the ApplicationSet has errors (a generator failed, an app was
set aside).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
import yaml

from tidecd.cli.app import SERVER, TOKEN, as_yaml, call_api, checked, fail, print_table
from tidecd.cli.exits import EXIT_APP_ERROR

app = typer.Typer(no_args_is_help=True, help="ApplicationSets: what they generate, now and as recorded.")
FORMATS = ("table", "wide", "json", "yaml", "name")
OUTPUT = typer.Option("table", "-o", "--output", help="table, wide, json, yaml or name.")


def _format(output: str) -> None:
    if output not in FORMATS:
        fail(f"unknown output format {output!r} ({', '.join(FORMATS)})")


def _print(body: dict[str, Any], output: str) -> None:
    if output == "json":
        typer.echo(json.dumps(body, indent=2))
    else:
        typer.echo(as_yaml(body))


def _change(name: str, diff: dict[str, Any]) -> str:
    for kind in ("added", "removed", "kept", "unchanged"):
        if name in diff[kind]:
            return kind
    return "changed" if name in diff["changed"] else ""


@app.command("generate")
def generate(target: str = typer.Argument(..., metavar="FILE|NAME",
                                          help="An ApplicationSet manifest (a path, or - for stdin), or the name "
                                               "of one in the config source."),
             server: str = SERVER, token: str = TOKEN, output: str = OUTPUT) -> None:
    """The Applications an ApplicationSet generates now, and their diff against what is recorded."""
    _format(output)
    path = Path(target)
    if target == "-" or path.is_file():
        try:
            text = sys.stdin.read() if target == "-" else path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"{target}: cannot read: {exc}")
        body = checked(*call_api("POST", "/applicationsets/generate", server, token,
                                 {"manifest": text, "file": "stdin" if target == "-" else target}))
    elif "/" in target or target.endswith((".yaml", ".yml", ".json")):
        fail(f"{target}: no such file")
    else:
        body = checked(*call_api("GET", f"/applicationsets/{target}/generate", server, token))
    diff = body["diff"]
    if output == "name":
        for item in body["applications"]:
            typer.echo(item["name"])
    elif output in ("json", "yaml"):
        apps = [yaml.safe_load(item.pop("manifest")) | {"generator": item["generator"]}
                for item in body["applications"]]
        _print({**body, "applications": apps}, output)
    else:
        wide = output == "wide"
        rows = []
        for item in body["applications"]:
            source = f"{item['repoURL']} {item['path']}@{item['targetRevision'] or 'HEAD'}"
            row = [item["name"], item["project"], item["destination"], item["namespace"], source,
                   _change(item["name"], diff)]
            rows.append(row + ([item["generator"]] if wide else []))
        for name in diff["removed"]:
            rows.append([name, "", "", "", "", "removed"] + ([""] if wide else []))
        print_table(["NAME", "PROJECT", "CLUSTER", "NAMESPACE", "SOURCE", "CHANGE"] + (["GENERATOR"] if wide else []),
                    rows)
        typer.echo(f"\n{body['applicationSet']} ({body['origin']}, applicationsSync: {body['applicationsSync']}): "
                   f"{len(diff['added'])} to add, {len(diff['changed'])} to change, {len(diff['removed'])} to "
                   f"remove, {len(diff['kept'])} kept as they are, {len(diff['unchanged'])} unchanged")
        for name, text in sorted(diff["changed"].items()):
            typer.echo(f"\nchanged app {name}:\n{text}")
    for problem in body["errors"]:
        typer.echo(f"error: {problem}", err=True)
    if body["failed"] or body["errors"]:
        raise typer.Exit(EXIT_APP_ERROR)


@app.command("list")
def list_appsets(server: str = SERVER, token: str = TOKEN, output: str = OUTPUT) -> None:
    """Every ApplicationSet with the apps it generated (as recorded) and its errors."""
    _format(output)
    body = checked(*call_api("GET", "/applicationsets", server, token))
    if output == "name":
        for item in body["applicationSets"]:
            typer.echo(item["name"])
    elif output in ("json", "yaml"):
        _print(body, output)
    else:
        rows = [[a["name"], str(len(a["apps"])), a["applicationsSync"], str(len(a["errors"])),
                 *([", ".join(x["name"] for x in a["apps"]), a["origin"]] if output == "wide" else [])]
                for a in body["applicationSets"]]
        print_table(["NAME", "APPS", "POLICY", "ERRORS", *(["GENERATED", "ORIGIN"] if output == "wide" else [])],
                    rows)


@app.command("get")
def get_appset(name: str, server: str = SERVER, token: str = TOKEN, output: str = OUTPUT) -> None:
    """One ApplicationSet: the apps it generated (their sync and health, as recorded) and its errors."""
    _format(output)
    body = checked(*call_api("GET", f"/applicationsets/{name}", server, token))
    if output == "name":
        for item in body["apps"]:
            typer.echo(item["name"])
        return
    if output in ("json", "yaml"):
        _print(body, output)
        return
    typer.echo(f"Name:     {body['name']}\nOrigin:   {body['origin']}\nPolicy:   {body['applicationsSync']}\n")
    print_table(["NAME", "SYNC", "HEALTH", *(["GENERATOR"] if output == "wide" else [])],
                [[a["name"] + (" (deleting)" if a["deleting"] else ""), a["sync"], a["health"],
                  *([a["generator"]] if output == "wide" else [])] for a in body["apps"]])
    for item in body.get("invalidApps", []):
        typer.echo(f"invalid: {item['name']}: {item['error']}", err=True)
    for problem in body["errors"]:
        typer.echo(f"error: {problem}", err=True)
    if body["errors"] or body.get("failed"):
        raise typer.Exit(EXIT_APP_ERROR)
