"""A project role's token, and a local account's (argocd-cm `accounts.NAME: apiKey`), drive the CLI from a
CI-like job through the api function served by functions-framework and the real control plane; revoking
the token (or taking the account's apiKey away) stops the next call; a sync the token may not do is refused
and in the audit log; the operation names the token in the history and the api.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.apps import GitOps, configmap
from tests.support.functions import Functions

pytestmark = pytest.mark.e2e
CLI = [sys.executable, "-m", "tidecd.cli"]
CI_SCRIPT = """\
#!/usr/bin/env bash
# what a CI job runs: the token comes from the CI system's secret store, never from the repository
set -euo pipefail
exec "$PYTHON" -m tidecd.cli app sync "$1" --server "$TIDECD_SERVER" --timeout 120
"""


def run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=240, env=env, stdin=subprocess.DEVNULL)


def test_a_project_token_syncs_from_ci_until_revoked(gitops: GitOps, functions: Functions, tmp_path: Path) -> None:
    gitops.push({"app/cm.yaml": configmap("ci-made")})
    project = f"ci-{gitops.namespace}"[:60]
    web, locked = gitops.real("web"), gitops.real("locked")
    gitops.project({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": project},
                    "spec": {"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"},
                                                                    {"name": "in-cluster", "namespace": "*"}],
                             "roles": [{"name": "deployer", "description": "CI", "policies": [
                                 f"p, proj:{project}:deployer, applications, get, {project}/*, allow",
                                 f"p, proj:{project}:deployer, applications, sync, {project}/web-*, allow"]}]}})
    gitops.application("web", project=project)
    gitops.application("locked", project=project, path="app")
    other = gitops.application("other")
    (gitops.config_dir / "argocd-rbac-cm.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argocd-rbac-cm"},
        "data": {"policy.csv": f"p, proj:{project}:deployer, applications, sync, {project}/locked-*, deny\n"}}))
    server = functions.start("api").url
    admin = ["--server", server, "--token", functions.token]

    made = run([*CLI, "proj", "role", "create-token", project, "deployer", "--id", "ci-1", "--token-only", *admin])
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.count(".") == 2 and token not in (functions.token,)
    listed = run([*CLI, "proj", "role", "list-tokens", project, "deployer", *admin])
    assert "ci-1" in listed.stdout and token not in listed.stdout

    script = tmp_path / "deploy.sh"
    script.write_text(CI_SCRIPT)
    env = {**functions.env(), "PYTHON": sys.executable, "TIDECD_SERVER": server, "TIDECD_API_TOKEN": token}
    env.pop("TIDECD_CONFIG"), env.pop("TIDECD_STORE")  # the CI job knows only the server and its token
    ci = run(["bash", str(script), web], env)
    assert ci.returncode == 0, ci.stdout + ci.stderr
    assert "Succeeded" in ci.stdout
    assert gitops.live("ConfigMap", "ci-made") is not None

    refused = run(["bash", str(script), locked], env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"permission denied: applications, sync, {project}/{locked}" in refused.stderr
    unseen = run(["bash", str(script), other], env)
    assert unseen.returncode == 2 and f"app '{other}' not found" in unseen.stderr

    by = f"proj:{project}:deployer (token ci-1)"
    status = functions.api("GET", f"/apps/{web}").json()
    assert status["operation"]["initiatedBy"] == by
    history = run([*CLI, "app", "history", web, *admin])
    assert by in history.stdout, history.stdout
    assert functions.api("GET", f"/apps/{web}/history").json()["history"][-1]["initiatedBy"] == by

    revoked = run([*CLI, "proj", "role", "delete-token", project, "deployer", "ci-1", *admin])
    assert revoked.returncode == 0, revoked.stderr
    after = run(["bash", str(script), web], env)
    assert after.returncode == 2 and "a valid bearer token is required" in after.stderr, after.stderr

    entries = functions.api("GET", "/audit?limit=500").json()["entries"]
    seen = [(e["subject"], e["action"], e["object"], e["allowed"], e.get("tokenId", "")) for e in entries]
    assert (f"proj:{project}:deployer", "sync", f"{project}/{web}", True, "ci-1") in seen
    assert (f"proj:{project}:deployer", "sync", f"{project}/{locked}", False, "ci-1") in seen
    assert ("admin", "create-token", project, True, "") in seen and ("admin", "delete-token", project, True, "") in seen
    shown = run([*CLI, "admin", "audit", "--limit", "500", *admin])
    assert shown.returncode == 0, shown.stderr
    refusal = next(line for line in shown.stdout.splitlines() if f"{project}/{locked}" in line)
    assert f"proj:{project}:deployer (token ci-1)" in refusal and " NO " in refusal, refusal
    assert run([*CLI, "admin", "audit", "--server", server, "--token", token]).returncode == 2  # revoked
    assert os.environ.get("TIDECD_API_TOKEN", "") != token


def _argocd_cm(gitops: GitOps, accounts: dict[str, str]) -> None:
    (gitops.config_dir / "argocd-cm.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argocd-cm"}, "data": accounts}))


def test_an_account_token_drives_the_cli_until_deleted_or_its_api_key_is_taken_away(
        gitops: GitOps, functions: Functions) -> None:
    gitops.push({"app/cm.yaml": configmap("account-made")})
    web, other = gitops.application("web"), gitops.application("other")
    _argocd_cm(gitops, {"accounts.ci": "apiKey", "accounts.viewer": "login"})
    (gitops.config_dir / "argocd-rbac-cm.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argocd-rbac-cm"},
        "data": {"policy.csv": "p, role:deployer, applications, get, */web-*, allow\n"
                               "p, role:deployer, applications, sync, */web-*, allow\n"
                               "g, ci, role:deployer\n"}}))
    server = functions.start("api").url
    admin = ["--server", server, "--token", functions.token]

    refused = run([*CLI, "account", "generate-token", "--account", "viewer", *admin])
    assert refused.returncode == 2 and "account 'viewer' does not have apiKey capability" in refused.stderr
    made = run([*CLI, "account", "generate-token", "--account", "ci", "--id", "ci-1", "--expires-in", "24h", *admin])
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.count(".") == 2
    env = {**functions.env(), "TIDECD_SERVER": server, "TIDECD_API_TOKEN": token}
    env.pop("TIDECD_CONFIG"), env.pop("TIDECD_STORE")  # the CI job knows only the server and its token

    listed = run([*CLI, "app", "list", "--server", server], env)
    assert listed.returncode == 0, listed.stderr
    assert web in listed.stdout and other not in listed.stdout
    synced = run([*CLI, "app", "sync", web, "--server", server, "--timeout", "120"], env)
    assert synced.returncode == 0 and "Succeeded" in synced.stdout, synced.stdout + synced.stderr
    assert gitops.live("ConfigMap", "account-made") is not None
    assert functions.api("GET", f"/apps/{web}").json()["operation"]["initiatedBy"] == "ci (token ci-1)"
    assert run([*CLI, "app", "sync", other, "--server", server], env).returncode == 2  # not visible to ci

    own = run([*CLI, "account", "generate-token", "--id", "ci-2", "--server", server], env)  # itself, no --account
    assert own.returncode == 0, own.stderr
    second = own.stdout.strip()
    shown = run([*CLI, "account", "get", "--account", "ci", *admin])
    assert shown.returncode == 0 and "ci-1" in shown.stdout and "ci-2" in shown.stdout and token not in shown.stdout
    assert "Capabilities:       apiKey" in shown.stdout

    deleted = run([*CLI, "account", "delete-token", "--account", "ci", "ci-1", *admin])
    assert deleted.returncode == 0, deleted.stderr
    after = run([*CLI, "app", "list", "--server", server], env)
    assert after.returncode == 2 and "a valid bearer token is required" in after.stderr, after.stderr
    env["TIDECD_API_TOKEN"] = second
    assert run([*CLI, "app", "list", "--server", server], env).returncode == 0

    _argocd_cm(gitops, {"accounts.ci": "login", "accounts.viewer": "login"})  # apiKey taken away in git
    gone = run([*CLI, "app", "list", "--server", server], env)
    assert gone.returncode == 2 and "a valid bearer token is required" in gone.stderr, gone.stderr
    again = run([*CLI, "account", "generate-token", "--account", "ci", *admin])
    assert again.returncode == 2 and "account 'ci' does not have apiKey capability" in again.stderr
    entries = functions.api("GET", "/audit?limit=500").json()["entries"]
    seen = [(e["subject"], e["action"], e["object"], e["allowed"], e.get("tokenId", "")) for e in entries]
    assert ("ci", "sync", f"default/{web}", True, "ci-1") in seen
    assert ("ci", "generate-token", "ci", True, "ci-1") in seen and ("admin", "delete-token", "ci", True, "") in seen
