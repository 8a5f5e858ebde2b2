"""The `tidecd` command working locally, and `make demo`'s program end to end."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psutil

from tests.support.apps import GitOps, configmap

ROOT = Path(__file__).resolve().parents[2]


def tidecd(gitops: GitOps, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TIDECD_CONFIG": str(gitops.config_dir), "TIDECD_STORE": str(gitops.store.root),
           "KUBECONFIG": str(gitops.dev.kubeconfig)}
    return subprocess.run([sys.executable, "-m", "tidecd.cli", *args], env=env, capture_output=True, text=True,
                          timeout=300)


def test_cli_diff_sync_history_rollback(gitops: GitOps) -> None:
    gitops.push({"app/a.yaml": configmap("a", {"v": "1"}), "app/b.yaml": configmap("b")})
    app = gitops.application()
    diff = tidecd(gitops, "app", "diff", app)
    assert diff.returncode == 1 and "ConfigMap" in diff.stdout
    partial = tidecd(gitops, "app", "sync", app, "--resource", "/ConfigMap/a")
    assert partial.returncode == 0, partial.stderr
    assert f"ConfigMap {gitops.namespace}/a created" in partial.stdout and "/b" not in partial.stdout
    synced = tidecd(gitops, "app", "sync", app)
    assert synced.returncode == 0 and f"ConfigMap {gitops.namespace}/b created" in synced.stdout
    assert tidecd(gitops, "app", "diff", app).returncode == 0
    gitops.push({"app/a.yaml": configmap("a", {"v": "2"})})
    dry = tidecd(gitops, "app", "sync", app, "--dry-run")
    assert f"ConfigMap {gitops.namespace}/a configured: dry run" in dry.stdout
    assert gitops.live("ConfigMap", "a")["data"] == {"v": "1"}  # type: ignore[index]
    assert tidecd(gitops, "app", "sync", app).returncode == 0
    history = tidecd(gitops, "app", "history", app, "-o", "json")
    import json

    entries = json.loads(history.stdout)["history"]
    assert [e["result"] for e in entries] == ["Succeeded", "Succeeded", "Succeeded"]
    back = tidecd(gitops, "app", "rollback", app, str(entries[0]["id"]))
    assert back.returncode == 0, back.stderr
    assert gitops.live("ConfigMap", "a")["data"] == {"v": "1"}  # type: ignore[index]
    # Like Argo CD: after a rollback the app runs an older revision than git's, and auto-sync is off.
    listed = tidecd(gitops, "app", "list")
    assert app in listed.stdout and "OutOfSync" in listed.stdout
    missing = tidecd(gitops, "app", "get", "nope")
    assert missing.returncode == 2 and "nope" in missing.stderr and "Traceback" not in missing.stderr


def test_demo_runs_end_to_end_and_leaves_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    demo = subprocess.run([sys.executable, "-m", "tidecd_dev.demo", "--exit"], env=env, capture_output=True,
                          text=True, timeout=600, cwd=ROOT)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "kwok-node-0   Ready" in demo.stdout
    assert "guestbook is Synced and Healthy" in demo.stdout
    # the push waits for the first deployment, its story is read from the history, and the dashboard is named
    out = demo.stdout
    assert out.index("first deployment done: every app is Synced and Healthy") < out.index("pushed ")
    pushed = re.search(r"pushed ([0-9a-f]{12}) ", out)
    assert pushed and re.search(rf"recorded: history #2 Succeeded at revision {pushed[1]}, deployed 20", out), out
    assert re.search(r"the dashboard: http://127\.0\.0\.1:\d+/ui/", out)
    # alice's kubectl scale, undone through the API server's audit webhook backend, and named
    assert "restored to 3 replicas" in demo.stdout
    assert "DriftDetected: Deployment guestbook/frontend: spec.replicas changed by alice@example.com via kubectl" \
        in demo.stdout
    for name in ("guestbook", "helm-guestbook", "kustomize-guestbook"):
        assert any(line.split()[:3] == [name, "Synced", "Healthy"] for line in demo.stdout.splitlines())
    assert list(tmp_path.iterdir()) == []
    leftovers = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    assert leftovers == []
