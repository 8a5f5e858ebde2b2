"""`tidecd app create` and `tidecd app set`: `argocd app create`'s flags, written to git through the api's
`POST /apps` and `PUT /apps/NAME` (`tidecd.usecases.app_write`), locally or with `--server`. Nothing is
created in the store: the Application is a commit in the config source, authored by the caller.

    tidecd app create web --repo https://github.com/org/web.git --path deploy \\
        --dest-server https://kubernetes.default.svc --dest-namespace web --sync-policy automated
"""

from __future__ import annotations

from collections.abc import Callable

import typer

from tidecd.cli.app import OUTPUT, SERVER, TOKEN, app, call_api, checked, emit, fail

SYNC_POLICIES = ("none", "manual", "automated", "auto", "automatic")  # `argocd app create --sync-policy`


def _manifest(name: str, repo: str, path: str, chart: str, revision: str, project: str, dest_server: str,
              dest_namespace: str, sync_policy: str, auto_prune: bool, self_heal: bool,
              sync_option: list[str]) -> dict[str, object]:
    # lazy: cold start (the use case's manifest builder only for these two commands)
    from tidecd.usecases.app_write import AppForm, manifest

    if sync_policy not in SYNC_POLICIES:
        fail(f"--sync-policy {sync_policy!r}: one of {', '.join(SYNC_POLICIES)}")
    unknown = [o for o in sync_option if o != "CreateNamespace=true"]
    if unknown:
        fail(f"--sync-option {unknown[0]!r}: only CreateNamespace=true is offered here; edit the manifest in git "
             "for the others")
    return manifest(AppForm(name=name, repo_url=repo, project=project, target_revision=revision, path=path,
                            chart=chart, server=dest_server, namespace=dest_namespace,
                            automated=sync_policy in ("automated", "auto", "automatic"), prune=auto_prune,
                            self_heal=self_heal, create_namespace=bool(sync_option)))


REPO = typer.Option(..., "--repo", help="Repository URL of the app's source.")
PATH = typer.Option("", "--path", help="Path in the repository (a git source).")
CHART = typer.Option("", "--helm-chart", help="Chart name (a Helm repository source).")
REVISION = typer.Option("HEAD", "--revision", help="targetRevision.")
PROJECT = typer.Option("default", "--project", help="AppProject.")
DEST_SERVER = typer.Option("https://kubernetes.default.svc", "--dest-server", help="Destination cluster URL.")
DEST_NAMESPACE = typer.Option("", "--dest-namespace", help="Destination namespace.")
SYNC_POLICY = typer.Option("none", "--sync-policy", help="none or automated.")
AUTO_PRUNE = typer.Option(False, "--auto-prune", help="With automated sync: prune.")
SELF_HEAL = typer.Option(False, "--self-heal", help="With automated sync: self heal.")
SYNC_OPTION = typer.Option([], "--sync-option", help="CreateNamespace=true.")


def _written(kind: str) -> Callable[..., None]:
    """The command `app create` (kind "create") or `app set` (kind "set"): same flags, POST or PUT."""
    def command(name: str, repo: str = REPO, path: str = PATH, helm_chart: str = CHART, revision: str = REVISION,
                project: str = PROJECT, dest_server: str = DEST_SERVER, dest_namespace: str = DEST_NAMESPACE,
                sync_policy: str = SYNC_POLICY, auto_prune: bool = AUTO_PRUNE, self_heal: bool = SELF_HEAL,
                sync_option: list[str] = SYNC_OPTION, server: str = SERVER, token: str = TOKEN,  # noqa: B008
                output: str = OUTPUT) -> None:
        doc = _manifest(name, repo, path, helm_chart, revision, project, dest_server, dest_namespace, sync_policy,
                        auto_prune, self_heal, sync_option)
        method, route = ("POST", "/apps") if kind == "create" else ("PUT", f"/apps/{name}")
        body = checked(*call_api(method, route, server, token, doc))
        emit(body, output, lambda b: typer.echo(
            f"application {b['app']}: committed {b['commit'][:12]} to {b['file']} on {b['branch']}"
            + (f"; pull request {b['pull']}" if b.get("pull") else "")))
    command.__doc__ = ("Create an app: commit its Application to the config source." if kind == "create" else
                       "Change an app's spec: commit its Application to the file that defines it.")
    return command


app.command("create")(_written("create"))
app.command("set")(_written("set"))
