"""`tidecd app resources|manifests|logs` and `app diff --local`: why an app's object is as it is, without
kubectl. Each reads the api's resource routes (`tidecd.usecases.resources_api`), locally or with
`--server`, so both answer the same; Secret values are masked by the api before anything prints.

    tidecd app resources NAME                       the tree: the app's objects and the Pods under them
    tidecd app resources NAME --kind Pod --name P   one object: reason, containers, events, diff
    tidecd app manifests NAME [--source live|git] [--revision REV]
    tidecd app logs NAME [--kind K --name N] [--container C] [--tail N] [-f]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tidecd.cli import exits, textout  # the thin client's formatting: both print alike
from tidecd.cli.app import OUTPUT, SERVER, TOKEN, app, call_api, checked, emit, fail, print_table

GROUP = typer.Option("", "--group", help="The object's API group ('' for core kinds: Pod, Secret).")
KIND = typer.Option("", "--kind", help="The object's kind (Deployment, Pod, ...).")
NAMESPACE = typer.Option("", "--namespace", help="The object's namespace (default: any of the app's).")
NAME = typer.Option("", "--name", help="The object's name.")
MAX_LOCAL_FILES = 2000


def _resolved(app_name: str, group: str, kind: str, namespace: str, name: str, server: str,
              token: str) -> dict[str, str]:
    """The object named by kind and name (and group/namespace when given), found in the app's tree:
    one, or an error listing the candidates (`textout.resolved`)."""
    rows = checked(*call_api("GET", f"/apps/{app_name}/resources", server, token))["resources"]
    try:
        return textout.resolved(rows, app_name, group, kind, namespace, name)
    except exits.Failed as exc:
        fail(str(exc), code=exc.code)


@app.command("resources")
def resources(app_name: str = typer.Argument(..., metavar="NAME"), group: str = GROUP, kind: str = KIND,
              namespace: str = NAMESPACE, name: str = NAME, server: str = SERVER, token: str = TOKEN,
              output: str = OUTPUT) -> None:
    """The app's objects and what the cluster made from them (ReplicaSets, Pods); with --kind and --name,
    one object: why it is as it is (a Pod's reason, containers, restarts), its events and its diff."""
    if kind or name:
        if not (kind and name):
            fail("--kind and --name go together")
        query = _resolved(app_name, group, kind, namespace, name, server, token)
        emit(checked(*call_api("GET", f"/apps/{app_name}/resource", server, token, query=query)), output, _detail)
        return
    body = checked(*call_api("GET", f"/apps/{app_name}/resources", server, token))
    emit(body, output, _tree)


def _tree(body: dict[str, Any]) -> None:
    print_table(textout.TREE_COLUMNS, textout.tree_rows(body))


def _detail(body: dict[str, Any]) -> None:
    textout.print_detail(body, typer.echo, print_table)


@app.command("manifests")
def manifests(app_name: str = typer.Argument(..., metavar="NAME"),
              source: str = typer.Option("git", "--source", help="git (rendered, as a sync applies them) or live."),
              revision: str = typer.Option("", "--revision", help="Render this revision (default: the compared one)."),
              server: str = SERVER, token: str = TOKEN) -> None:
    """The app's manifests as YAML documents, Secret values masked (like `argocd app manifests`)."""
    query = {"source": source, "format": "yaml", **({"revision": revision} if revision else {})}
    body = checked(*call_api("GET", f"/apps/{app_name}/manifests", server, token, query=query))
    typer.echo(body["yaml"], nl=False)


@app.command("logs")
def logs(app_name: str = typer.Argument(..., metavar="NAME"), group: str = GROUP, kind: str = KIND,
         namespace: str = NAMESPACE, name: str = NAME,
         container: str = typer.Option("", "-c", "--container", help="Only this container."),
         tail: int = typer.Option(100, "--tail", help="Lines per container, 1 to 5000."),
         follow: bool = typer.Option(False, "-f", "--follow", help="Keep printing new lines (polls the api)."),
         timeout: float = typer.Option(600.0, "--timeout", help="Stop following after this many seconds."),
         server: str = SERVER, token: str = TOKEN) -> None:
    """Pods' logs: every pod of the app, the pods under --kind/--name (a Deployment's), or one Pod. Lines of
    several containers are led by POD/CONTAINER."""
    query: dict[str, str] = {"tail": str(tail), **({"container": container} if container else {})}
    if kind or name:
        if not (kind and name):
            fail("--kind and --name go together")
        query |= _resolved(app_name, group, kind, namespace, name, server, token)
    textout.print_logs(lambda q: checked(*call_api("GET", f"/apps/{app_name}/logs", server, token, query=q)), query,
                    follow=follow, timeout=timeout, echo=typer.echo)


def local_diff(app_name: str, directory: str, server: str, token: str, output: str) -> None:
    """`app diff NAME --local DIR`: DIR's files, rendered by the api as the app's source is, compared with
    live by the step's comparison; exit 1 when they differ."""
    from tidecd.base.model import ChangeSet  # lazy: cold start (only a diff prints change sets)

    root = Path(directory)
    if not root.is_dir():
        fail(f"--local {directory}: not a directory")
    files = {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8", errors="replace")
             for p in sorted(root.rglob("*")) if p.is_file() and ".git" not in p.relative_to(root).parts}
    if len(files) > MAX_LOCAL_FILES:
        fail(f"--local {directory}: {len(files)} files, at most {MAX_LOCAL_FILES}")
    body = checked(*call_api("POST", f"/apps/{app_name}/diff/local", server, token, {"files": files}))

    def text(b: dict[str, Any]) -> None:
        changed = [c for c in b["changes"] if c["action"] != "unchanged"]
        typer.echo("\n".join(ChangeSet.from_dicts(changed).lines(diffs=True)) or "no differences")
        for key in b["notOwned"]:
            typer.echo(f"{key}: live and owned by no app (a sync would take it over; not compared)")

    emit(body, output, text)
    if body["sync"] != "Synced":
        raise typer.Exit(1)


resolved = _resolved  # `tidecd app actions` names its object the same way
