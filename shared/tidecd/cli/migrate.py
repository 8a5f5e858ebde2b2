"""`tidecd import`: read a running Argo CD (read verbs only) and write a config source directory.

Exit codes: 0 everything converted; 1 the output was written but some objects could not be converted (the
report names each); 2 nothing was written (no kubeconfig, Argo CD not found, output not empty, no
certificate).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tidecd.base.errors import TidecdError
from tidecd.cli.secrets import KEYS_ENV

if TYPE_CHECKING:
    from tidecd.base.model import Manifest
    from tidecd.clients.cluster import KubeCluster


def import_argocd(
    out: Path = typer.Option(..., "--out", "-o", help="Directory to write the config source into."),
    namespace: str = typer.Option("argocd", "--namespace", "-n", help="The namespace Argo CD runs in."),
    kubeconfig: str | None = typer.Option(None, "--kubeconfig", envvar="KUBECONFIG",
                                          help="Kubeconfig of the cluster Argo CD runs in."),
    context: str | None = typer.Option(None, "--context", help="Kubeconfig context (default: current)."),
    cert: Path | None = typer.Option(
        None, "--cert", help=f"Sealing certificate (PEM). Default: the active one in ${KEYS_ENV}."),
    force: bool = typer.Option(False, "--force", help="Write into a directory that is not empty."),
    adopt: bool = typer.Option(False, "--adopt", help="Annotate every Application tidecd.io/adopt-from-argocd, "
                               "so tidecd takes its objects over once Argo CD's automated sync of it is off."),
) -> None:
    """Import Argo CD's Applications, AppProjects, repository and cluster Secrets (sealed) into a config
    source directory, with a report of what tidecd will not honour. Argo CD is only read, never changed."""
    # lazy: cold start (every CLI call registers this command; only `tidecd import` loads the migration)
    from tidecd.clients import secrets
    from tidecd.clients.cluster import KubeCluster
    from tidecd.usecases import migrate

    try:
        if cert is not None:
            cert_pem = cert.read_bytes()
        elif os.environ.get(KEYS_ENV):
            cert_pem = secrets.active_certificate(os.environ[KEYS_ENV])
        else:
            raise migrate.MigrationError(f"no sealing certificate: pass --cert FILE or set {KEYS_ENV}")
        secrets.public_key_from_cert(cert_pem)  # an expired or broken certificate stops it before any read
        reader = _ReadOnly(KubeCluster.from_kubeconfig(kubeconfig or None, context=context))
        objects = migrate.read_argocd(reader, namespace)
        plan = migrate.plan_import(objects, cert_pem, namespace=namespace, adopt=adopt)
        report = migrate.write_import(plan, out, force=force)
    except (TidecdError, OSError) as exc:
        text = str(exc) if isinstance(exc, TidecdError) else f"{exc.strerror or 'I/O error'}: {exc.filename}"
        typer.echo(f"error: {text.splitlines()[0] if text else 'failed'}", err=True)
        raise typer.Exit(2) from None
    typer.echo(report.read_text(), nl=False)
    typer.echo(f"\nwrote {out} (report: {report})")
    if plan.errors:
        raise typer.Exit(1)


class _ReadOnly:
    """Only `list` reaches the cluster: the import cannot write even by mistake."""

    def __init__(self, cluster: KubeCluster) -> None:
        self._cluster = cluster

    def list(self, group: str, kind: str, *, namespace: str = "", label_selector: str = "") -> list[Manifest]:
        return self._cluster.list(group, kind, namespace=namespace, label_selector=label_selector)


def register(app: typer.Typer) -> None:
    app.command("import")(import_argocd)
