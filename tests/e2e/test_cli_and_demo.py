"""The `tidecd` command working locally, and `make demo`'s program end to end."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
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
    assert re.search(r"log in: http://127\.0\.0\.1:\d+/ui/login#token=[0-9a-f]{32} ", out), out
    # alice's kubectl scale, undone through the API server's audit webhook backend, and named
    assert "restored to 3 replicas" in demo.stdout
    assert "DriftDetected: Deployment guestbook/frontend: spec.replicas changed by alice@example.com via kubectl" \
        in demo.stdout
    for name in ("guestbook", "helm-guestbook", "kustomize-guestbook"):
        assert any(line.split()[:3] == [name, "Synced", "Healthy"] for line in demo.stdout.splitlines())
    assert list(tmp_path.iterdir()) == []
    leftovers = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    assert leftovers == []


def test_the_readmes_examples_server_serves_the_examples_and_stops(tmp_path: Path) -> None:
    """README "Using it locally": `eval "$(python -m tidecd_dev.examples)"` leaves a git server holding
    examples/apps and sets TIDECD_CONFIG to examples/config pointed at it; `--stop` ends it."""
    where = tmp_path / "examples"
    up = subprocess.run([sys.executable, "-m", "tidecd_dev.examples", "--dir", str(where)], capture_output=True,
                        text=True, timeout=60, cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    assert up.stdout == f"export TIDECD_CONFIG={where / 'config'}\n"
    pid = int((where / "server.pid").read_text())
    try:
        url = (where / "ready").read_text()
        config = (where / "config" / "guestbook.yaml").read_text()
        assert f"repoURL: {url}\n" in config and "git.tidecd.local" not in config
        assert "git.tidecd.local" not in (where / "config" / "project.yaml").read_text()
        heads = subprocess.run(["git", "ls-remote", url, "refs/heads/main"], capture_output=True, text=True,
                               timeout=30, check=True).stdout
        tree = subprocess.run(["git", "ls-tree", "-r", "--name-only", heads.split()[0]], capture_output=True,
                              text=True, cwd=where / "checkout", check=True).stdout.split()
        assert "apps/guestbook/frontend.yaml" in tree
    finally:
        down = subprocess.run([sys.executable, "-m", "tidecd_dev.examples", "--dir", str(where), "--stop"],
                              capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert down.returncode == 0 and "stopped" in down.stderr
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the examples' git server outlived --stop"
        time.sleep(0.1)


def _cheat_sheet() -> str:
    """The code block of the README's "Using it locally", as a person copies it."""
    section = (ROOT / "README.md").read_text().split("\n## Using it locally", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"^```\n(.*?)^```$", section, re.S | re.M)
    assert found, "the README's 'Using it locally' has no code block"
    return found[1]


def test_the_readmes_cheat_sheet_runs_as_written(tmp_path: Path) -> None:
    """README "Using it locally", copied as written into bash at a checkout's root: every line exits 0 (a
    failing line stops the script), and what it prints is what its comments promise. The checkout is this one
    (its `examples/`, the venv running the tests); the dev cluster lives under a cache dir of its own."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "examples").symlink_to(ROOT / "examples")
    (checkout / ".venv").symlink_to(Path(sys.prefix))
    from tidecd.base import tools

    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDECD_") and k != "KUBECONFIG"}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), TIDECD_BIN_DIR=str(tools.cache_dir() / "bin"),
               PYTHONPATH=str(ROOT / "shared"))
    script = "set -eo pipefail\n" + "\n".join(f"echo '=== {n}'\n{line}" for n, line in
                                               enumerate(_cheat_sheet().splitlines()) if not line.startswith(" "))
    try:
        done = subprocess.run(["bash", "-c", script], cwd=checkout, env=env, capture_output=True, text=True,
                              timeout=900, stdin=subprocess.DEVNULL)
    finally:  # also when a line failed before the block's own last two
        subprocess.run(["bash", "-c", ". .venv/bin/activate; tidecd dev cluster down; "
                        "python -m tidecd_dev.examples --stop"], cwd=checkout, env=env, capture_output=True,
                       timeout=120, check=False)
    said = done.stdout + done.stderr
    assert done.returncode == 0, f"a line of the cheat-sheet failed (exit {done.returncode}):\n{said[-4000:]}"
    rows = [line.split() for line in done.stdout.splitlines()]
    listed = rows.index(["NAME", "SYNC", "HEALTH", "REVISION", "OWNER"])  # the first deployment, as recorded
    assert [row[:3] for row in rows[listed + 1:listed + 4]] == [
        ["guestbook", "Synced", "Healthy"], ["helm-guestbook", "Synced", "Healthy"],
        ["kustomize-guestbook", "Synced", "Healthy"]], said
    assert ["NAME", "SYNC", "HEALTH", "REVISION", "PROJECT", "CLUSTER", "NAMESPACE", "CONDITIONS", "OWNER"] in rows
    assert "Name:       guestbook" in done.stdout and "no differences" in done.stdout  # get; diff --local
    assert "kind: Deployment" in done.stdout  # manifests --source live
    assert "stopped" in done.stderr + done.stdout  # the examples' server, by the block's last line
