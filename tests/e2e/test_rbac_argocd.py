"""The same RBAC questions to Argo CD's own binary (v3.6.1, `argocd admin settings rbac can --policy-file`,
offline) and to `tidecd admin rbac can`: the answers must be equal, case by case (tests/support/rbac_cases.py).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.rbac_cases import CASES, tidecd_can, write_policies
from tidecd_dev.peers import ensure_built

pytestmark = pytest.mark.e2e
# `--policy-file` needs no cluster, but the command builds a client first: a kubeconfig that is never dialled.
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: offline, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: offline, user: {token: offline}}]
contexts: [{name: offline, context: {cluster: offline, user: offline}}]
current-context: offline
"""


def test_argocd_and_tidecd_answer_alike(tmp_path: Path) -> None:
    argocd = ensure_built("argocd")
    policies = write_policies(tmp_path)
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "kubeconfig"), "HOME": str(tmp_path)}
    differences = []
    for name, args, expected in CASES:
        proc = subprocess.run([str(argocd), "admin", "settings", "rbac", "can", *args, "--policy-file",
                               str(policies / name)], capture_output=True, text=True, env=env,
                              stdin=subprocess.DEVNULL, timeout=60, check=False)
        out = proc.stdout.strip()
        argo = True if (proc.returncode, out) == (0, "Yes") else False if (proc.returncode, out) == (1, "No") else None
        ours = tidecd_can(policies, name, args)
        if argo != ours or argo is not expected:
            differences.append(f"{name} {' '.join(args)}: argocd {argo} ({proc.stderr.strip()[-120:]}), "
                               f"tidecd {ours}, table {expected}")
    assert not differences, "\n".join(differences)
    assert len(CASES) >= 80
