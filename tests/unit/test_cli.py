"""The `tidecd` command as a person uses it: quiet logs, `--version`, exit codes that say what went wrong,
`app list` from recorded state with wide columns and filters, tables that fit, one line per change; and the
api's root sending a browser to the dashboard."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml
from typer.testing import CliRunner

from tidecd.base.model import Action, ChangeEntry, ChangeSet, HealthStatus, ResourceKey, SyncStatus
from tidecd.cli import app as cli_root
from tidecd.clients.store import LocalStore
from tidecd.state import app as app_state

ROOT = Path(__file__).resolve().parents[2]


def application(name: str, *, project: str = "default", labels: str = "{}", namespace: str = "x") -> str:
    # file:// is refused before any network: a comparison that fails at once (ComparisonError)
    return (f"apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: {name}\n  labels: {labels}\n"
            f"spec:\n  project: {project}\n  source: {{repoURL: 'file:///nonexistent/{name}.git', path: app}}\n"
            f"  destination: {{server: 'https://kubernetes.default.svc', namespace: {namespace}}}\n")


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config with two apps (web in project shop, labelled team=a; db in default) and a store where web is
    recorded Synced and Healthy."""
    config = tmp_path / "config"
    config.mkdir()
    (config / "web.yaml").write_text(application("web", project="shop", labels="{team: a}", namespace="shop"))
    (config / "db.yaml").write_text(application("db", labels="{team: b}"))
    (config / "shop.yaml").write_text("apiVersion: argoproj.io/v1alpha1\nkind: AppProject\nmetadata: {name: shop}\n"
                                      "spec:\n  sourceRepos: ['*']\n  destinations: [{server: '*', namespace: '*'}]\n")
    store = tmp_path / "store"
    monkeypatch.setenv("TIDECD_CONFIG", str(config))
    monkeypatch.setenv("TIDECD_STORE", str(store))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    app_state.save(LocalStore(store), app_state.AppState("web", sync_status=SyncStatus.SYNCED,
                                                         health=HealthStatus.HEALTHY, revision="a" * 40))
    return tmp_path


def run(*args: str) -> Any:
    return CliRunner().invoke(cli_root, list(args))


def test_version_is_the_installed_package_version() -> None:
    result = run("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"tidecd {version('tidecd')}"


def test_the_full_clis_start_loads_no_config_rbac_or_runtime() -> None:
    """`tidecd --version` and `--help` import every command group: none may load the config schema (and
    casbin with it), the runtime or the api client before a command needs them."""
    code = ("import sys; sys.argv = ['tidecd', '--version']; from tidecd.cli import root\n"
            "try:\n    root.main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith(('tidecd.config', 'casbin', 'tidecd.runtime', "
            "'requests', 'structlog', 'jinja2', 'kubernetes'))))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          check=True)
    assert done.stdout.splitlines()[-1] == "[]", done.stdout


def test_logs_are_warnings_only_unless_verbose(local: Path) -> None:
    """In the process entry (main), a reconcile's INFO lines stay off stderr; `-v` brings them back."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tidecd.cli", *args], env=env, capture_output=True,
                              text=True, timeout=120)

    quiet = cli("app", "get", "db")
    levels = [json.loads(line)["level"] for line in quiet.stderr.splitlines() if line.startswith("{")]
    assert levels and set(levels) <= {"warning", "error"}, quiet.stderr
    assert quiet.stdout.startswith("Name:       db")  # the table, nothing above it
    loud = cli("-v", "app", "get", "db")
    assert '"level": "info"' in loud.stderr and '"event": "reconciled"' in loud.stderr


def test_exit_codes_tell_not_found_cannot_connect_and_app_in_error_apart(local: Path) -> None:
    missing = run("app", "get", "nope")
    assert missing.exit_code == 2 and "nope" in missing.stderr
    unreachable = run("app", "list", "--server", "http://127.0.0.1:9", "--token", "t")
    assert unreachable.exit_code == 4 and "cannot reach" in unreachable.stderr
    failing = run("app", "get", "db")  # refreshes: the comparison fails
    assert failing.exit_code == 5 and "ComparisonError" in failing.stdout
    listed = run("app", "list")
    assert listed.exit_code == 5 and "db" in listed.stdout
    fine = run("app", "list", "-p", "shop")  # only the healthy app: exit 0
    assert fine.exit_code == 0, fine.output
    root_help = " ".join(run("--help").stdout.replace("│", " ").split())
    assert "2 not found" in root_help and "4 cannot connect" in root_help and "5 the app is in error" in root_help


def test_app_list_reads_recorded_state_unless_refresh(local: Path) -> None:
    """web is recorded Synced; its repo is unreachable, so a refresh would make it Unknown."""
    listed = run("app", "list")
    assert ["web", "Synced", "Healthy", "a" * 12] in [line.split() for line in listed.stdout.splitlines()]
    assert ["db", "Unknown", "Unknown"] in [line.split() for line in listed.stdout.splitlines()]
    assert not app_state.load(LocalStore(Path(os.environ["TIDECD_STORE"])), "db")[0].conditions  # nothing reconciled
    refreshed = run("app", "list", "--refresh")
    assert refreshed.exit_code == 5
    # (in-process, structlog is not configured: its default prints the reconcile's lines on stdout too)
    assert ["web", "Unknown"] in [line.split()[:2] for line in refreshed.stdout.splitlines()], \
        refreshed.stdout


def test_app_list_wide_name_and_filters(local: Path) -> None:
    run("app", "get", "db")  # records db's ComparisonError
    wide = run("app", "list", "-o", "wide")
    rows = [line.split() for line in wide.stdout.splitlines()]
    assert rows[0] == ["NAME", "SYNC", "HEALTH", "REVISION", "PROJECT", "CLUSTER", "NAMESPACE", "CONDITIONS", "OWNER"]
    assert ["db", "Unknown", "Unknown", "default", "https://kubernetes.default.svc", "x", "ComparisonError"] in rows
    assert ["web", "Synced", "Healthy", "a" * 12, "shop", "https://kubernetes.default.svc", "shop"] in rows
    assert run("app", "list", "-o", "name").stdout.split() == ["db", "web"]
    assert run("app", "list", "-o", "name", "-p", "shop").stdout.split() == ["web"]
    assert run("app", "list", "-o", "name", "-l", "team=b").stdout.split() == ["db"]
    assert run("app", "list", "-o", "name", "-l", "team=a", "-p", "default").stdout.split() == []
    as_yaml = run("app", "list", "-o", "yaml")  # a local answer holds enums: printed as their text
    assert as_yaml.exit_code == 5, as_yaml.output
    assert [(a["name"], a["sync"]) for a in yaml.safe_load(as_yaml.stdout)["apps"]] == [("db", "Unknown"),
                                                                                       ("web", "Synced")]
    got = run("app", "get", "web", "--cached", "-o", "yaml")
    assert got.exit_code == 0 and yaml.safe_load(got.stdout)["health"] == "Healthy", got.output
    as_json = json.loads(run("app", "list", "-o", "json", "-l", "team=a").stdout)
    assert [a["name"] for a in as_json["apps"]] == ["web"]
    bad = run("app", "list", "-l", "team")
    assert bad.exit_code == 2 and "key=value" in bad.stderr
    web = next(a for a in as_json["apps"] if a["name"] == "web")
    assert web["project"] == "shop" and web["destination"]["namespace"] == "shop" and web["labels"] == {"team": "a"}


def test_a_table_fits_the_terminal_and_a_pipe_keeps_rows_whole(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    print_table = importlib.import_module("tidecd.cli.app").print_table
    rows = [["x" * 30, "y" * 30, "z" * 30]]
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setenv("COLUMNS", "50")
    print_table(["A", "B", "C"], rows)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)  # a terminal gets bold headers
    assert max(len(line) for line in plain.splitlines()) <= 50
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False, raising=False)
    print_table(["A", "B", "C"], rows)
    assert len(capsys.readouterr().out.splitlines()) == 2  # header and one whole row


def test_a_local_sync_prints_each_change_once(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Locally the CLI takes the steps: the step's change line and the operation's task result are the same
    change, printed once; the task's later health is a new line."""
    apps = importlib.import_module("tidecd.cli.app")  # the module; the package's `app` is the Typer app
    key = ResourceKey("", "ConfigMap", "ns", "a")
    steps = iter([ChangeSet([ChangeEntry(key, Action.CREATED)]), ChangeSet()])
    result = {"key": key.to_dict(), "resource": str(key), "syncPhase": "Sync", "wave": 0, "action": "created",
              "phase": "Succeeded", "message": ""}
    answers = iter([("Running", ""), ("Succeeded", "Healthy")])

    def status(*_: Any, **__: Any) -> tuple[int, dict[str, Any]]:
        phase, health = next(answers)
        return 200, {"syncStatus": "Synced", "health": health or "Progressing",
                     "resources": [{**key.to_dict(), "health": health}],
                     "operation": {"id": "op1", "phase": phase, "results": [result]}}

    monkeypatch.setattr(apps, "_local_step", lambda name: (0.0, next(steps)))
    monkeypatch.setattr(apps, "call_api", status)
    monkeypatch.setattr("tidecd.cli.textout.time.sleep", lambda s: None)  # the follow loop is textout.follow
    apps._follow("web", "op1", "", "", 0)
    text = capsys.readouterr().out
    lines = [line for line in text.splitlines() if "ConfigMap ns/a" in line]
    assert lines == ["ConfigMap ns/a created", "  [Sync wave 0] ConfigMap ns/a created, Succeeded, Healthy"], text


@pytest.fixture
def api_function() -> Any:
    """functions/main.py's api entry point; its import configures logging, which is put back afterwards."""
    saved = structlog.get_config()
    sys.path.insert(0, str(ROOT))
    try:
        main = importlib.import_module("functions.main")  # by name: mypy knows the file as `main`
    finally:
        sys.path.remove(str(ROOT))
    yield main.api
    structlog.configure(**saved)


def test_the_api_root_sends_a_browser_to_the_dashboard(api_function: Any, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import flask

    monkeypatch.setenv("TIDECD_CONFIG", str(tmp_path))
    monkeypatch.setenv("TIDECD_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("TIDECD_API_TOKEN", "secret")
    web = flask.Flask("probe")
    browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
    with web.test_request_context("/", headers={"Accept": browser}):
        answer = api_function(flask.request)
    assert answer.status_code in (302, 303) and answer.headers["Location"] == "/ui/"
    for accept in ("*/*", "application/json", ""):
        with web.test_request_context("/", headers={"Accept": accept} if accept else {}):
            answer = api_function(flask.request)
        assert answer.status_code == 401 and answer.get_json()["error"] == "unauthorized"
