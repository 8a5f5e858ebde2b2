"""Cold start (issue 30): what a fresh webhook instance imports before it answers a no-op push.

A fresh interpreter loads functions/main.py as functions-framework does (`create_app`) and answers one
signed GitHub push of the commit the app is already Synced at (the bench's no-op: `current`, no step). The
modules it loaded are then checked against the ones only other deliveries, targets or later stages need:
each was measured as a cold-start cost (`python -m bench coldstart`, docs/testing.md) and made lazy. A
module-level import added back on this path fails here, whatever the machine's speed (no timing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tidecd.base.model import SyncStatus
from tidecd.clients.store import LocalStore
from tidecd.state import app as app_state

ROOT = Path(__file__).resolve().parents[2]
SHA = "c0ffee" + "0" * 34
SECRET = "cold-start-secret"
REPO = "https://git.example.com/team/cold.git"

# Not needed to answer a push that finds its app current; each with the reason it was made lazy.
NOT_ON_THE_NO_OP = {
    "kubernetes": "the cluster client: only a step that reaches a cluster",
    "tidecd.clients.cluster": "ditto (Runtime._connect imports it)",
    "google.cloud.storage": "the GCS client: only with a gs:// store",
    "google.cloud.pubsub_v1": "the Pub/Sub client: only with a topic configured",
    "grpc": "ditto (google.cloud.functions is functions-framework's own)",
    "dulwich": "git: only a step, or a git config source without its cache",
    "tidecd.source": "the source stage: only a step, a registry event or a revert",
    "tidecd.render": "the render stage: only a step",
    "casbin": "RBAC decisions: the api and the dashboard (tidecd.config.rbac imports it on first decision)",
    "rich": "structlog's console tracebacks: the functions log JSON (functions/main.py hides it)",
    "requests": "the registry client: only a registry event (tidecd.usecases.registry_events)",
    "tidecd.usecases.revert": "rollbacks: only a pull_request delivery",
    "tidecd.usecases.deletion": "only a push to the config source",
    "tidecd.usecases.appsets": "only when the config has ApplicationSets",
    "tidecd.config.appset.generators": "ditto (tidecd.config.appset.model imports them to parse one)",
    "tidecd.config.appset.gotemplate": "ditto",
    "tidecd.usecases.audit": "only the /audit routes",
    "tidecd.usecases.preview": "only pull_request and issue_comment deliveries",
    "jsonschema": "the api's request bodies",
    "cryptography": "sealed secrets: none in this config",
}

_CHILD = """
import hashlib, hmac, json, os, sys
import functions_framework
app = functions_framework.create_app(target="webhook", source=os.path.join(sys.argv[1], "functions", "main.py"))
body = sys.stdin.buffer.read()
signature = "sha256=" + hmac.new(os.environ["TIDECD_WEBHOOK_SECRET"].encode(), body, hashlib.sha256).hexdigest()
answer = app.test_client().post("/", data=body, headers={
    "Content-Type": "application/json", "X-GitHub-Event": "push", "X-GitHub-Delivery": "cold-1",
    "X-Hub-Signature-256": signature})
print(json.dumps({"status": answer.status_code, "body": answer.get_json(), "modules": sorted(sys.modules)}))
"""


def _push() -> bytes:
    return json.dumps({
        "ref": "refs/heads/main", "before": SHA, "after": SHA, "forced": False,
        "repository": {"name": "cold", "full_name": "team/cold", "clone_url": REPO, "html_url": REPO,
                       "default_branch": "main"},
        "commits": [{"id": SHA, "message": "m", "added": [], "removed": [], "modified": ["a.yaml"]}],
        "pusher": {"name": "p"}}).encode()


def _answer_cold(tmp_path: Path) -> dict[str, object]:
    config, store = tmp_path / "config", tmp_path / "store"
    config.mkdir()
    (config / "cold.yaml").write_text(yaml.safe_dump({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "cold"},
        "spec": {"project": "default", "source": {"repoURL": REPO, "path": ".", "targetRevision": "main"},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": "cold"},
                 "syncPolicy": {"automated": {}}}}))
    app_state.save(LocalStore(store), app_state.AppState(app="cold", sync_status=SyncStatus.SYNCED, revision=SHA))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TIDECD_")},
           "TIDECD_CONFIG": str(config), "TIDECD_STORE": str(store), "TIDECD_WEBHOOK_SECRET": SECRET,
           "PYTHONPATH": str(ROOT / "shared")}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(ROOT)], input=_push(), capture_output=True,
                          timeout=120, env=env, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    result: dict[str, object] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    return _answer_cold(tmp_path_factory.mktemp("coldstart"))


def test_a_cold_webhook_answers_the_no_op_from_the_apps_state(cold: dict[str, object]) -> None:
    assert cold["status"] == 200, cold["body"]
    assert cold["body"]["current"] == ["cold"], cold["body"]  # type: ignore[index]


@pytest.mark.parametrize("heavy", sorted(NOT_ON_THE_NO_OP))
def test_a_cold_webhook_imports_only_what_the_no_op_needs(cold: dict[str, object], heavy: str) -> None:
    loaded = [m for m in cold["modules"] if m == heavy or m.startswith(heavy + ".")]  # type: ignore[attr-defined]
    assert loaded == [], f"{heavy} ({NOT_ON_THE_NO_OP[heavy]}) was imported: {loaded[:5]}"


def test_the_guard_can_fail(cold: dict[str, object]) -> None:
    """The probe sees what the path does import: the config reader, the store, the app's state."""
    for needed in ("tidecd.config.load", "tidecd.clients.store", "tidecd.state.app", "structlog", "flask"):
        assert needed in cold["modules"], needed  # type: ignore[operator]


def test_structlog_logs_as_before_without_rich(tmp_path: Path) -> None:
    """rich hidden while structlog loads: the functions' JSON lines are as they were (the JSON renderer never
    used rich), and rich is importable again afterwards."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import main, structlog\n"
            "try:\n    raise ValueError('boom')\nexcept ValueError:\n"
            "    structlog.get_logger('t').exception('failed')\n"
            "import rich; print('rich importable later', 'rich' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "shared")}
    done = subprocess.run([sys.executable, "-c", code, str(ROOT / "functions")], capture_output=True, text=True,
                          timeout=60, env=env, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    line = json.loads(next(line for line in done.stderr.splitlines() if '"failed"' in line))
    assert line["event"] == "failed" and line["level"] == "error" and line["exc_info"] is True, line
    assert "rich importable later True" in done.stdout


def test_a_cold_reconcile_call_imports_the_preview_use_case_only_for_a_preview_job(tmp_path: Path) -> None:
    """A reconcile message is told apart from a preview job by `dispatch.preview_job`; a refresh (here a
    malformed one, acknowledged as bad) does not load tidecd.usecases.preview (GitHub, plans, forks)."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import main\n"
            "from cloudevents.http import CloudEvent\n"
            "event = CloudEvent({'type': 'google.cloud.pubsub.topic.v1.messagePublished', 'source': 'test'},\n"
            "                   {'message': {'data': 'bm90IGpzb24=', 'attributes': {'app': 'x'}}})\n"
            "main.reconcile(event)\n"
            "print(json.dumps(sorted(sys.modules)))")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TIDECD_")}, "PYTHONPATH": str(ROOT / "shared"),
           "TIDECD_CONFIG": str(tmp_path), "TIDECD_STORE": str(tmp_path / "store")}
    done = subprocess.run([sys.executable, "-c", code, str(ROOT / "functions")], capture_output=True, text=True,
                          timeout=60, env=env, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert "tidecd.triggers.dispatch" in loaded  # the guard sees the path it checks
    assert "tidecd.usecases.preview" not in loaded
