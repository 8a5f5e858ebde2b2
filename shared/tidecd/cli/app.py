"""`tidecd app ...`: list, get, diff, sync, refresh, history, rollback, wait, terminate-op, delete, adopt, release
(`resources`, `manifests`, `logs` and `diff --local` are in `tidecd.cli.resources`).

Works locally (reading TIDECD_CONFIG, TIDECD_STORE and KUBECONFIG, as the functions do) or against a
running api with `--server URL` (token from `--token`, TIDECD_API_TOKEN, or the one `tidecd login` kept for
that server). Both paths go through
`tidecd.usecases.api.handle`, so they answer the same JSON.

`sync` and `rollback` start an operation (the api answers 202 with its id) and, unless `--async`, follow
it to its end, printing each task as it changes (phase, wave, resource, action, health) and what the
operation waits for. With `--server` the CLI polls the api while the installation's own continuations
take the steps; locally there is no one else, so the CLI takes the steps itself, sleeping between them
as each step asks (the CLI may wait; a function never does).

Exit codes, so a script can tell what went wrong (`EXIT_*` below; `tidecd --help` lists them too):
0 done; 1 out of sync (`diff`), the operation failed or timed out; 2 no such app, or the request was
refused (a usage error is 2 as well); 3 an operation already runs; 4 cannot connect (the api, or what it
depends on answered 502/503/504, or what answers at --server is not the api); 5 the app is in error (it
fails to compare: sync or health Unknown with an `...Error` condition such as ComparisonError).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import typer
import yaml

from tidecd.base.errors import TidecdError
from tidecd.base.model import Action, ChangeSet
from tidecd.cli import exits, textout  # the thin client's formatting and exit codes: both print alike
from tidecd.cli.exits import (  # the thin client's: both print and exit alike
    EXIT_APP_ERROR,
    EXIT_CONFLICT,
    EXIT_NOT_FOUND,
    EXIT_UNREACHABLE,
    in_error,
)

if TYPE_CHECKING:
    from tidecd.runtime import Runtime

app = typer.Typer(no_args_is_help=True, help="Applications: status, diff, sync, history, rollback.")

SERVER = typer.Option("", "--server", envvar="TIDECD_SERVER", help="api URL; empty means work locally.")
TOKEN = typer.Option("", "--token", envvar="TIDECD_API_TOKEN", help="api bearer token.")
OUTPUT = typer.Option("table", "-o", "--output", help="table, json or yaml.")

EXIT_CODES = ("exit codes: 0 done; 1 out of sync, operation failed or timed out; 2 not found or refused; "
              "3 an operation already runs; 4 cannot connect; 5 the app is in error (fails to compare)")


def call_api(method: str, path: str, server: str, token: str, body: dict[str, Any] | None = None,
             query: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    data = json.dumps(body or {}).encode()
    if server:
        if not token:
            from tidecd.cli.login import saved_token  # lazy: cold start (only without --token)

            token = saved_token(server)
        # lazy: cold start (requests only when an HTTP call is made)
        import requests

        try:
            resp = requests.request(method, server.rstrip("/") + "/api/v1" + path, data=data, params=query,
                                    headers={"Authorization": f"Bearer {token}",
                                             "Content-Type": "application/json"}, timeout=900)
        except requests.RequestException as exc:
            fail(f"cannot reach {server}: {type(exc).__name__}", code=EXIT_UNREACHABLE)
        kind = resp.headers.get("Content-Type", "").split(";")[0].strip()
        try:  # the api answers JSON objects, labelled so; anything else is not the api (a proxy, a web site)
            answer = resp.json() if kind == "application/json" else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            fail(f"{server} did not answer as tidecd's api does (HTTP {resp.status_code}, "
                 f"{resp.headers.get('Content-Type', 'no content type')}): check --server", code=EXIT_UNREACHABLE)
        return resp.status_code, answer
    # lazy: cold start (a CLI call against --server never loads the local runtime)
    from tidecd.runtime import Runtime
    from tidecd.usecases import api

    runtime = Runtime.from_env()
    runtime.settings.api_token = "local"  # noqa: S105 - local calls are the user's own process
    # lazy: cold start (a CLI call against --server never loads the local runtime)
    from tidecd.triggers.dispatch import ManualDispatcher

    # Nothing goes to a background scheduler (it would die with this process): the CLI takes the steps.
    answer = api.handle(method, "/api/v1" + path, {"Authorization": "Bearer local"}, data, runtime, query=query,
                        dispatcher=ManualDispatcher())
    return answer.status, answer.body


def _local_step(name: str) -> tuple[float, ChangeSet]:
    """Locally, one reconcile step of `name` taken by this process: seconds until the next one is due, and
    what it changed."""
    # lazy: cold start (a CLI call against --server never loads the local runtime)
    from tidecd.runtime import Runtime
    from tidecd.triggers import dispatch

    outcome = dispatch.run_step(Runtime.from_env(), dispatch.Refresh(name, "cli"), dispatch.ManualDispatcher())
    if outcome.skipped or outcome.continue_after is None:
        return 1.0, outcome.changes
    return max(0.0, outcome.continue_after), outcome.changes


def fail(message: str, code: int = EXIT_NOT_FOUND) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def checked(status: int, body: dict[str, Any]) -> dict[str, Any]:
    """`body`, or the error it carries, exiting with the code that tells its kind (`EXIT_*`)."""
    if status >= 400:
        code = {409: EXIT_CONFLICT, 502: EXIT_UNREACHABLE, 503: EXIT_UNREACHABLE,
                504: EXIT_UNREACHABLE}.get(status, EXIT_NOT_FOUND)
        fail(str(body.get("message") or body), code=code)
    return body


def as_yaml(body: dict[str, Any]) -> str:
    """The answer as YAML, from its JSON form: a local call's answer holds str enums (SyncStatus...) that
    json writes as their text and yaml.safe_dump refuses, so local and `--server` calls print alike."""
    return yaml.safe_dump(json.loads(json.dumps(body)), sort_keys=False)


def emit(body: dict[str, Any], output: str, table: Any) -> None:
    if output == "json":
        typer.echo(json.dumps(body, indent=2))
    elif output == "yaml":
        typer.echo(as_yaml(body))
    elif output == "table":
        table(body)
    else:
        fail(f"unknown output format {output!r} (table, json or yaml)")


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    """A table as wide as the terminal (rich wraps cells to fit); into a pipe or file, where there is no
    width to fit, each row on one line so scripts can split it (`textout.table`, as the thin client prints)."""
    if not sys.stdout.isatty():
        textout.table(headers, rows, typer.echo)
        return
    from rich.console import Console  # lazy: cold start (rich only when a table is printed)
    from rich.table import Table  # lazy: cold start (rich only when a table is printed)

    table = Table(*headers, box=None, pad_edge=False, header_style="bold")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def _refreshed(name: str, server: str, token: str, cached: bool) -> dict[str, Any]:
    """The app's status after a fresh comparison (locally and through `--server` alike), unless `cached`."""
    query = None if cached else {"refresh": "true"}
    return checked(*call_api("GET", f"/apps/{name}", server, token, query=query))


@app.command("get")
def get(name: str, server: str = SERVER, token: str = TOKEN, output: str = OUTPUT,
        cached: bool = typer.Option(False, help="Show the stored status without refreshing.")) -> None:
    """One application: status, conditions, last operation and every resource (exit 5 when it fails to
    compare)."""
    body = _refreshed(name, server, token, cached)

    def table(b: dict[str, Any]) -> None:
        for line in textout.app_lines(b):
            typer.echo(line)
        print_table(textout.RESOURCE_COLUMNS, textout.resource_rows(b))

    emit(body, output, table)
    if in_error(str(body.get("syncStatus", "")), str(body.get("health", "")), body.get("conditions") or []):
        raise typer.Exit(EXIT_APP_ERROR)


@app.command("diff")
def diff(name: str, server: str = SERVER, token: str = TOKEN, output: str = OUTPUT,
         cached: bool = typer.Option(False, help="Use the stored comparison without refreshing."),
         local: str = typer.Option("", "--local", metavar="DIR",
                                   help="Compare this directory, rendered as the app's source is, with live.")) -> None:
    """What differs between git (or --local DIR) and the cluster; exit code 1 when out of sync (like
    `kubectl diff`)."""
    if local:
        from tidecd.cli.resources import local_diff  # lazy: it imports this module

        local_diff(name, local, server, token, output)
        return
    _refreshed(name, server, token, cached)
    body = checked(*call_api("GET", f"/apps/{name}/diff", server, token))

    emit(body, output, lambda b: typer.echo(textout.diff_text(b)))
    if body["sync"] != "Synced":
        raise typer.Exit(1)


def _print_changes(body: dict[str, Any]) -> None:
    for line, err in textout.change_lines(body):
        typer.echo(line, err=err)


@app.command("sync")
def sync(name: str, prune: bool = typer.Option(False, "--prune", help="Delete objects git no longer has."),
         dry_run: bool = typer.Option(False, "--dry-run", help="Report what would change; write nothing."),
         resource: list[str] = typer.Option([], "--resource", help="GROUP/KIND/NAME; repeatable."),  # noqa: B006
         revision: str = typer.Option("", "--revision", help="Sync this git revision, not the target."),
         replace: bool = typer.Option(False, "--replace", help="Replace objects (PUT) instead of applying."),
         force: bool = typer.Option(False, "--force", help="With --replace: delete and create a refused one."),
         out_of_sync_only: bool = typer.Option(False, "--apply-out-of-sync-only",
                                               help="Leave objects that compare Synced out of the sync."),
         run_async: bool = typer.Option(False, "--async", help="Start the operation and return at once."),
         timeout: float = typer.Option(0, "--timeout", help="Seconds to follow it; 0: until it ends."),
         server: str = SERVER, token: str = TOKEN, output: str = OUTPUT) -> None:
    """Start a sync and follow it to its end, printing each task as it happens (`--async`: return at once)."""
    payload: dict[str, Any] = {"prune": prune, "dryRun": dry_run}
    if revision:
        payload["revision"] = revision
    if replace or force or out_of_sync_only:
        payload["syncOptions"] = textout.sync_options(replace, force, out_of_sync_only)
    if resource:
        _refreshed(name, server, token, cached=False)
        payload["resources"] = resource
    started = checked(*call_api("POST", f"/apps/{name}/sync", server, token, payload))
    _started(name, started, run_async, timeout, server, token, output)


def _started(name: str, started: dict[str, Any], run_async: bool, timeout: float, server: str, token: str,
             output: str) -> None:
    operation_id = str(started.get("operationId", ""))
    if run_async:
        emit(started, output, lambda b: typer.echo(textout.started_line(b)))
        return
    body = _follow(name, operation_id, server, token, timeout, quiet=output != "table")
    if not server:
        # Locally no poll or webhook will compare the app again: record a fresh comparison with git now, so
        # `app list` (which reads recorded state) shows what an installation would, e.g. OutOfSync after a
        # rollback to an older revision.
        checked(*call_api("GET", f"/apps/{name}", server, token, query={"refresh": "true"}))
    if output != "table":
        emit(body, output, lambda b: None)
    op = body.get("operation") or {}
    if op.get("id") == operation_id and op.get("phase") != "Succeeded":
        raise typer.Exit(1)


def _follow(name: str, operation_id: str, server: str, token: str, timeout: float, *,
            quiet: bool = False) -> dict[str, Any]:
    """Until the operation `operation_id` (or the running one, when empty) has ended: the app's last status
    (`textout.follow`, as the thin client follows it). Locally this process takes the steps and prints each
    step's own change lines; with --server it polls every 2 s."""

    def local() -> tuple[float, list[tuple[str, str, str]]]:
        delay, changes = _local_step(name)
        return delay, [(str(e), str(e.key), e.action.value) for e in changes.entries]

    try:
        return textout.follow(lambda: checked(*call_api("GET", f"/apps/{name}", server, token)),
                           local if not server else (lambda: (2.0, [])), operation_id, timeout, quiet=quiet,
                           echo=typer.echo)
    except exits.Failed as exc:
        fail(str(exc), code=exc.code)


@app.command("refresh")
def refresh(name: str, server: str = SERVER, token: str = TOKEN, output: str = OUTPUT) -> None:
    """One reconcile: refresh, then the automated sync or self-heal the app's policy asks for."""
    body = checked(*call_api("POST", f"/apps/{name}/refresh", server, token))
    emit(body, output, _print_changes)
    if textout.refresh_failed(body):
        raise typer.Exit(1)


@app.command("history")
def history(name: str, server: str = SERVER, token: str = TOKEN, output: str = OUTPUT) -> None:
    """The last deployments (id, revision, time, result, who and what started them; * marks the deployed one)."""
    body = checked(*call_api("GET", f"/apps/{name}/history", server, token))
    emit(body, output, lambda b: print_table(textout.HISTORY_COLUMNS, textout.history_rows(b)))


@app.command("rollback")
def rollback(name: str, history_id: int = typer.Argument(..., metavar="ID"),
             prune: bool = typer.Option(False, "--prune"),
             run_async: bool = typer.Option(False, "--async", help="Start the operation and return at once."),
             timeout: float = typer.Option(0, "--timeout", help="Seconds to follow it; 0: until it ends."),
             revert: str = typer.Option("", "--revert", metavar="pr|push", help=(
                 "Revert git too: 'pr' opens a revert pull request, 'push' pushes the revert commit to the "
                 "app's branch (apps annotated tidecd.io/revert-push: allow). Automated sync and the image "
                 "updater hold until it merges.")),
             revert_pr: bool = typer.Option(False, "--revert-pr", help="The same as --revert pr."),
             server: str = SERVER, token: str = TOKEN, output: str = OUTPUT) -> None:
    """Re-sync a revision from history; automated sync is switched off for the app until the next manual sync
    (or, with --revert, until the revert merges)."""
    if revert_pr and revert not in ("", "pr"):
        typer.echo("error: --revert-pr and --revert push exclude each other", err=True)
        raise typer.Exit(2)
    payload: dict[str, Any] = {"id": history_id, "prune": prune}
    if revert or revert_pr:
        payload["revert"] = revert or "pr"
    started = checked(*call_api("POST", f"/apps/{name}/rollback", server, token, payload))
    if output == "table" and started.get("revert"):
        typer.echo(started["revert"]["message"])
    if started.get("revertError"):
        typer.echo(f"warning: {started['revertError']}", err=True)
    _started(name, started, run_async, timeout, server, token, output)


@app.command("wait")
def wait(name: str, sync_: bool = typer.Option(False, "--sync", help="Wait until Synced."),
         health: bool = typer.Option(False, "--health", help="Wait until Healthy."),
         operation: bool = typer.Option(False, "--operation", help="Wait until no operation runs."),
         timeout: float = typer.Option(0, "--timeout", help="Seconds to wait; 0: no limit. Exit 1 on timeout."),
         server: str = SERVER, token: str = TOKEN) -> None:
    """Wait for the app to be Synced, Healthy and/or done with its operation (all three without flags)."""
    if not (sync_ or health or operation):
        sync_ = health = operation = True
    try:
        code = textout.wait_until(
            name, lambda fresh: checked(*call_api("GET", f"/apps/{name}", server, token,
                                                  query={"refresh": "true"} if fresh else None)),
            (lambda: _local_step(name)[0]) if not server else None, (sync_, health, operation), timeout, typer.echo)
    except exits.Failed as exc:
        fail(str(exc), code=exc.code)
    if code:
        raise typer.Exit(code)


@app.command("terminate-op")
def terminate_op(name: str, server: str = SERVER, token: str = TOKEN, output: str = OUTPUT) -> None:
    """Stop the running operation: nothing more is applied, SyncFail hooks run, the phase becomes Failed."""
    body = checked(*call_api("DELETE", f"/apps/{name}/operation", server, token))
    if not server:
        _local_step(name)  # locally nobody else takes the step that stops it
    emit(body, output, lambda b: typer.echo(f"operation {b['operationId']} of {name}: terminating"))


@app.command("delete")
def delete(name: str, cascade: str = typer.Option(
               "foreground", "--cascade",
               help="foreground (default) or background: delete the app's objects (PreDelete hooks, objects wave "
                    "by wave, PostDelete hooks); orphan: leave them running."),
           server: str = SERVER, token: str = TOKEN, output: str = OUTPUT) -> None:
    """Delete the app: remove it from the config source (a commit), then its objects as --cascade says."""
    body = checked(*call_api("DELETE", f"/apps/{name}", server, token, query={"cascade": cascade}))
    emit(body, output, lambda b: typer.echo(textout.deleted_line(b)))
    if not server and body.get("cascade") != "orphan" and not body.get("pull"):
        _local_deletion(name)  # locally nobody else takes the steps of the deletion


def _local_deletion(name: str, timeout: float = 600.0) -> None:
    """Locally, the deletion's steps taken by this process until the app has left the config."""
    import time  # lazy: only a local delete waits

    from tidecd.runtime import Runtime  # lazy: cold start (a CLI call against --server never loads the runtime)

    deadline = time.monotonic() + timeout
    while name in Runtime.from_env().config().applications:
        if time.monotonic() > deadline:
            fail(f"app {name}: its deletion still runs after {timeout:.0f} s", code=1)
        delay, _ = _local_step(name)
        time.sleep(min(delay, 2.0))
    typer.echo(f"application {name}: deleted")


ARGOCD_NAMESPACE = typer.Option("argocd", "--argocd-namespace", help="Argo CD's own namespace (argocd-cm).")


def _moved(outcome: Any, output: str, what: str) -> None:
    body = {"app": outcome.app, "argocd": f"{outcome.argo.namespace}/{outcome.argo.name}",
            "dryRun": outcome.dry_run, "changes": [c.to_dict() for c in outcome.changes], "next": outcome.steps}

    def table(b: dict[str, Any]) -> None:
        typer.echo("\n".join(ChangeSet(outcome.changes).lines()) or "nothing to move")
        if outcome.dry_run:
            typer.echo(f"\ndry run: nothing was changed; without --dry-run, {what}")
        else:
            typer.echo("\nnext, on the Argo CD side:")
        for step in b["next"]:
            typer.echo(f"  {step}")

    emit(body, output, table)
    if any(c.action is Action.FAILED for c in outcome.changes):
        raise typer.Exit(1)


@app.command("adopt")
def adopt(name: str, dry_run: bool = typer.Option(False, "--dry-run", help="Show what would change, change nothing."),
          source: str = typer.Option("", "--from", help="The Argo CD Application ([namespace/]name); default NAME."),
          argocd_namespace: str = ARGOCD_NAMESPACE, output: str = OUTPUT) -> None:
    """Take an app over from Argo CD in place: same objects (uids), tidecd's marks and field ownership.

    Checks that the live objects are exactly those the Argo CD Application tracks, and that tidecd's apply
    would change nothing but the marks; refuses otherwise, naming each object. Then prints the step that
    makes Argo CD let go without deleting anything (finalizer off, then delete the Application)."""
    # lazy: cold start (a CLI call against --server never loads the local runtime)
    from tidecd.usecases.adoption import adopt_app

    try:
        outcome = adopt_app(_local_runtime(), name, dry_run=dry_run, argocd_namespace=argocd_namespace, source=source)
    except TidecdError as exc:
        fail(str(exc))
    _moved(outcome, output, "these objects become tidecd's")


@app.command("release")
def release(name: str, dry_run: bool = typer.Option(False, "--dry-run", help="Show what would change, change nothing."),
            target: str = typer.Option("", "--to", help="The Argo CD Application ([namespace/]name); default NAME."),
            argocd_namespace: str = ARGOCD_NAMESPACE, output: str = OUTPUT) -> None:
    """Hand an app back to Argo CD in place (rolling a migration back): Argo CD's marks, as its argocd-cm
    says it writes them, and its field manager; tidecd's marks removed. Uids stay."""
    # lazy: cold start (a CLI call against --server never loads the local runtime)
    from tidecd.usecases.adoption import release_app

    try:
        outcome = release_app(_local_runtime(), name, dry_run=dry_run, argocd_namespace=argocd_namespace,
                              target=target)
    except TidecdError as exc:
        fail(str(exc))
    _moved(outcome, output, "these objects become Argo CD's")


def _local_runtime() -> Runtime:
    # lazy: cold start (a CLI call against --server never loads the local runtime)
    from tidecd.runtime import Runtime

    return Runtime.from_env()
