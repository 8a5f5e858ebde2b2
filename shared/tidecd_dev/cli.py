"""`tidecd dev cluster up|down|status`: a local control plane, used like `kind create cluster`."""

from __future__ import annotations

import typer

from tidecd_dev.devcluster import DevCluster, default_workdir

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Local development helpers.")
cluster_app = typer.Typer(no_args_is_help=True, help="A real local control plane (etcd + kube-apiserver).")
app.add_typer(cluster_app, name="cluster")


@cluster_app.command("up")
def up(
    name: str = typer.Option("dev", help="Cluster name (one directory per name)."),
    kwok: bool = typer.Option(False, "--kwok", help="Also run controller-manager, scheduler and kwok."),
    audit_webhook: str = typer.Option("", "--audit-webhook", metavar="URL", help=(
        "Send the API server's audit events (writes, Metadata level, batches of at most 1 s) to this URL, "
        "e.g. http://127.0.0.1:8080/audit (tidecd's webhook function); prints the TIDECD_AUDIT_TOKEN it sends.")),
) -> None:
    """Start the control plane in the background and print the KUBECONFIG to use."""
    existing = _recorded(name)
    if existing is not None:
        if existing.is_running() and existing.audit_webhook == audit_webhook:
            _exports(existing)
            return
        existing.stop()
    if audit_webhook and not audit_webhook.startswith(("http://", "https://")):
        typer.echo(f"error: --audit-webhook {audit_webhook!r}: expected an http(s) URL", err=True)
        raise typer.Exit(2)
    _ensure_tools(kwok)
    cluster = DevCluster(workdir=default_workdir(name), kwok=kwok, audit_webhook=audit_webhook)
    try:
        cluster.start()
    except Exception as exc:
        typer.echo(f"error: control plane did not start: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"# control plane {name!r} is up at {cluster.server}; stop it with `tidecd dev cluster down`",
               err=True)
    if audit_webhook:
        typer.echo(f"# audit events go to {audit_webhook}; act as someone else with "
                   f"KUBECONFIG={cluster.user_kubeconfig}", err=True)
    _exports(cluster)


def _exports(cluster: DevCluster) -> None:
    typer.echo(f"export KUBECONFIG={cluster.kubeconfig}")
    if cluster.audit_webhook:
        typer.echo(f"export TIDECD_AUDIT_TOKEN={cluster.audit_token}")


@cluster_app.command("down")
def down(name: str = typer.Option("dev", help="Cluster name.")) -> None:
    """Stop every process of the named cluster and remove its files."""
    _required(name, absent=f"no cluster {name!r} is running", code=0).stop()
    typer.echo(f"cluster {name!r} stopped")


@cluster_app.command("status")
def status(name: str = typer.Option("dev", help="Cluster name.")) -> None:
    """Whether the named cluster runs, with its server and KUBECONFIG; exit 1 when there is none."""
    cluster = _required(name, absent=f"no cluster {name!r}", code=1)
    state = "running" if cluster.is_running() else "stopped (run `down` to clean up)"
    typer.echo(f"{name}: {state}, {cluster.server}, KUBECONFIG={cluster.kubeconfig}")


def _recorded(name: str) -> DevCluster | None:
    """The cluster `up` recorded under this name, running or not; None when there is none."""
    workdir = default_workdir(name)
    return DevCluster.load(workdir) if (workdir / "state.json").exists() else None


def _required(name: str, *, absent: str, code: int) -> DevCluster:
    """The recorded cluster, or the `absent` line and an exit with `code`."""
    cluster = _recorded(name)
    if cluster is None:
        typer.echo(absent)
        raise typer.Exit(code)
    return cluster


def _ensure_tools(kwok: bool) -> None:
    from tidecd_dev.tools import ensure

    ensure(["etcd", "kube-apiserver"] + (["kube-controller-manager", "kube-scheduler", "kwok"] if kwok else []))
