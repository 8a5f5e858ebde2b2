"""`tidecd admin rbac can|validate`: Argo CD's `argocd admin settings rbac` for a policy file, offline; and
`tidecd admin audit`: the audit log, a page at a time (locally or with `--server`).

`can ROLE/SUBJECT ACTION RESOURCE [OBJECT] --policy-file FILE` prints `Yes` (exit 0) or `No` (exit 1), as
Argo CD's does; FILE is a `policy.csv` or an `argocd-rbac-cm` ConfigMap (its `policy.default`,
`policy.matchMode` and `policy.*.csv` overlays read as Argo CD reads them). A policy that cannot be read
or a request `--strict` refuses is an error on stderr, exit 2 (Argo CD exits 1 there, as for `No`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tidecd.cli.app import OUTPUT, SERVER, TOKEN, call_api, checked, emit, fail, print_table

app = typer.Typer(no_args_is_help=True, help="Administration: check RBAC policies offline, read the audit log.")
rbac = typer.Typer(no_args_is_help=True, help="Validate and test RBAC configuration (argocd-rbac-cm).")
app.add_typer(rbac, name="rbac")
_TRUE, _FALSE = ("1", "t", "true", "TRUE", "True", "T"), ("0", "f", "false", "FALSE", "False", "F")


def _bool(text: str, flag: str) -> bool:
    """Go's `strconv.ParseBool`, as cobra reads `--strict=false`."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    fail(f"{flag}: {text!r} is not a boolean (true or false)")


def _load(policy_file: Path) -> object:
    from tidecd.config import rbac as policy  # lazy: cold start (casbin only for the rbac commands)

    try:
        text = policy_file.read_text(encoding="utf-8")
    except OSError as exc:
        fail(f"cannot read the policy file {policy_file}: {exc.strerror or exc}")
    if len(text.encode()) > policy.MAX_POLICY_BYTES:
        fail(f"{policy_file}: over {policy.MAX_POLICY_BYTES:,} bytes")
    try:
        return policy.from_file_text(text, str(policy_file))
    except policy.PolicyError as exc:
        fail(str(exc))


@rbac.command("can")
def can(subject: str = typer.Argument(..., metavar="ROLE/SUBJECT"),
        action: str = typer.Argument(..., metavar="ACTION"),
        resource: str = typer.Argument(..., metavar="RESOURCE"),
        obj: str = typer.Argument("", metavar="[OBJECT]"),
        policy_file: Path = typer.Option(..., "--policy-file", help="a policy.csv or argocd-rbac-cm YAML"),
        default_role: str = typer.Option("", "--default-role", help="the default role (else policy.default)"),
        use_builtin: str = typer.Option("true", "--use-builtin-policy", help="also use the builtin policy"),
        strict: str = typer.Option("true", "--strict", help="check resource and action names"),
        quiet: bool = typer.Option(False, "-q", "--quiet", help="print nothing; the exit code answers")) -> None:
    """Whether ROLE/SUBJECT may ACTION the RESOURCE (OBJECT): prints Yes (exit 0) or No (exit 1)."""
    from tidecd.config import rbac as policy  # lazy: cold start (casbin only for the rbac commands)

    config = _load(policy_file)
    assert isinstance(config, policy.RbacConfig)
    try:
        allowed = policy.can(config, subject, action, resource, obj, default_role=default_role,
                             use_builtin=_bool(use_builtin, "--use-builtin-policy"),
                             strict=_bool(strict, "--strict"))
    except policy.PolicyError as exc:
        fail(f"{policy_file}: {exc}")
    if not quiet:
        typer.echo("Yes" if allowed else "No")
    raise typer.Exit(0 if allowed else 1)


@rbac.command("validate")
def validate(policy_file: Path = typer.Option(..., "--policy-file", help="a policy.csv or argocd-rbac-cm YAML")) \
        -> None:
    """Whether the policy is one casbin (and so Argo CD) accepts."""
    from tidecd.config import rbac as policy  # lazy: cold start (casbin only for the rbac commands)

    config = _load(policy_file)
    assert isinstance(config, policy.RbacConfig)
    try:
        policy.validate(config.policy_csv)
    except policy.PolicyError as exc:
        typer.echo(f"Policy is invalid: {exc}")
        raise typer.Exit(1) from None
    typer.echo("Policy is valid.")


@app.command("audit")
def audit(after: str = typer.Option("", "--after", help="The `next` of the previous page."),
          limit: int = typer.Option(100, "--limit", help="Entries per page (at most 500)."),
          server: str = SERVER, token: str = TOKEN, output: str = OUTPUT) -> None:
    """The audit log, oldest first: who did what, and who was refused (needs `audit, get`: admins)."""
    query = {"limit": str(limit)} | ({"after": after} if after else {})
    body = checked(*call_api("GET", "/audit", server, token, query=query))

    def table(b: dict[str, Any]) -> None:
        print_table(["AT", "SUBJECT", "ACTION", "RESOURCE", "OBJECT", "ALLOWED", "DETAIL"], [
            [e["at"], e["subject"] + (f" (token {e['tokenId']})" if e.get("tokenId") else ""), e["action"],
             e["resource"], e["object"], "yes" if e["allowed"] else "NO", e.get("detail", "")]
            for e in b["entries"]])
        if b.get("next"):
            typer.echo(f"more: --after {b['next']}")

    emit(body, output, table)
