"""`tidecd app list`: every application from its recorded state, like `argocd app list` (which reads the
controller's cache); `--refresh` compares each first (one reconcile each, so it costs what a sync check does).

The api's list answer carries name, status and revision; the wide columns (PROJECT, CLUSTER, NAMESPACE,
CONDITIONS) and the `-p`/`-l` filters need each Application's spec and labels. Locally the CLI reads them from
the config source itself; with `--server` the api's answer does not carry them (yet), so CONDITIONS comes from
one GET per app and the spec columns stay empty, and `-p`/`-l` are refused rather than silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import typer

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
from tidecd.cli.exits import EXIT_APP_ERROR, EXIT_NOT_FOUND, in_error
from tidecd.cli.textout import list_notes, list_table

FORMATS = ("table", "wide", "json", "yaml", "name")


@dataclass(frozen=True)
class Spec:
    """What the list reads from an Application beside its status: where it deploys and how it is labelled."""

    project: str = ""
    cluster: str = ""  # destination name, else its server URL
    namespace: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    conditions: tuple[str, ...] = ()  # the recorded conditions' types
    failing: bool = False  # fails to compare (`in_error`)


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
    wanted = [_selector(text) for text in selectors]
    if server and (projects or wanted):
        fail("-p and -l need the Applications' specs, which the api's list answer does not carry: run without "
             "--server (with TIDECD_CONFIG) to filter")
    body = checked(*call_api("GET", "/apps", server, token))
    if refresh and not cached:
        for item in body["apps"]:
            if "error" not in item:  # an app the config sets aside has nothing to refresh
                checked(*call_api("GET", f"/apps/{item['name']}", server, token, query={"refresh": "true"}))
        body = checked(*call_api("GET", "/apps", server, token))
    specs = _specs(body["apps"], server, token, every=output == "wide")
    body = body | {"apps": [a for a in body["apps"] if _selected(specs.get(a["name"], Spec()), projects, wanted)]}
    if output == "name":
        for item in body["apps"]:
            typer.echo(item["name"])
    else:
        emit(body, "table" if output == "wide" else output,
             lambda b: _table(b, specs, wide=output == "wide"))
    if any(specs.get(a["name"], Spec()).failing for a in body["apps"]):
        raise typer.Exit(EXIT_APP_ERROR)


def _selector(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        fail(f"-l {text!r}: expected key=value", code=EXIT_NOT_FOUND)
    return key.strip(), value.strip()


def _selected(spec: Spec, projects: list[str], wanted: list[tuple[str, str]]) -> bool:
    labels = dict(spec.labels)
    return (not projects or spec.project in projects) and all(labels.get(k) == v for k, v in wanted)


def _specs(items: list[dict[str, Any]], server: str, token: str, *, every: bool) -> dict[str, Spec]:
    """Each listed app's spec and recorded conditions. With `--server`, one cached GET per app whose
    status is Unknown (only those can be failing), or per app for the wide table's CONDITIONS column."""
    if not server:
        return _local_specs()
    specs: dict[str, Spec] = {}
    for item in items:
        if "error" in item or not (every or "Unknown" in (item["sync"], item["health"])):
            continue
        got = checked(*call_api("GET", f"/apps/{item['name']}", server, token))
        conditions = got.get("conditions") or []
        specs[item["name"]] = Spec(conditions=tuple(str(c.get("type", "")) for c in conditions),
                                   failing=in_error(str(got.get("syncStatus", "")), str(got.get("health", "")),
                                                    conditions))
    return specs


def _local_specs() -> dict[str, Spec]:
    """Locally: the Applications as the config source declares them, and their recorded conditions."""
    # lazy: cold start (a CLI call against --server never loads the local runtime)
    from tidecd.runtime import Runtime
    from tidecd.state import app as app_state

    runtime = Runtime.from_env()
    specs: dict[str, Spec] = {}
    for name, application in runtime.config().applications.items():
        state = app_state.load(runtime.store, name)[0]
        dest = application.destination
        specs[name] = Spec(project=application.project, cluster=dest.name or dest.server,
                           namespace=dest.namespace, labels=application.labels,
                           conditions=tuple(str(c.get("type", "")) for c in state.conditions),
                           failing=in_error(state.sync_status.value, state.health.value, state.conditions))
    return specs


def _table(body: dict[str, Any], specs: dict[str, Spec], *, wide: bool) -> None:
    cells = {name: [spec.project, spec.cluster, spec.namespace, ", ".join(spec.conditions)]
             for name, spec in specs.items()}
    print_table(*list_table(body, cells if wide else None))
    for note in list_notes(body):
        typer.echo(note, err=True)
