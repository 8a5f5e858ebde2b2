"""The real `kubeseal`, run offline, for the tests that check tidecd against it.

kubeseal seals with `--cert` and opens with `--recovery-unseal` without a cluster, but it still reads a
kubeconfig, so every run gets a dummy one pointing at a closed port.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.cluster import ensure_tools
from tidecd.clients.tools import MissingTool, binary

DUMMY_KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: none, user: {}}]
contexts: [{name: none, context: {cluster: none, user: none, namespace: default}}]
current-context: none
"""


def kubeseal_binary() -> str:
    """kubeseal, built by scripts/tools.sh when missing; a clear test failure when it cannot be."""
    try:
        ensure_tools(["kubeseal"])
        return binary("kubeseal")
    except (MissingTool, subprocess.CalledProcessError) as exc:
        pytest.fail(f"kubeseal is needed and could not be built (`bash scripts/tools.sh kubeseal`): {exc}")


def run_kubeseal(kubeseal: str, workdir: Path, args: list[str], stdin: str) -> subprocess.CompletedProcess[str]:
    """`kubeseal ARGS` with `stdin`, its dummy kubeconfig written into `workdir`; the caller checks the result."""
    kubeconfig = workdir / "kubeseal-kubeconfig"
    kubeconfig.write_text(DUMMY_KUBECONFIG)
    return subprocess.run(
        [kubeseal, *args], input=stdin, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
    )
