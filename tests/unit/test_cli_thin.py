"""The thin client (`tidecd.cli.thin`): `tidecd --server URL app list` answered with the standard library,
printing and exiting as the full CLI does, against the real api use case served over HTTP in the test."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.localhttp import serve_api, stop
from tidecd.base.model import HealthStatus, SyncStatus
from tidecd.cli import exits, thin
from tidecd.clients.store import LocalStore
from tidecd.runtime import Settings
from tidecd.state import app as app_state

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "thin-t0ken-0123456789"
HEAVY = ("typer", "click", "rich", "requests", "urllib3", "yaml", "structlog", "pydantic", "kubernetes", "google",
         "dulwich", "github", "jinja2", "casbin", "tidecd.config", "tidecd.runtime", "tidecd.cli.root",
         "tidecd.cli.app")


@contextmanager
def _served(where: Path) -> Iterator[str]:
    """The api use case over HTTP: the example config, a store where one app fails to compare."""
    store = LocalStore(where / "store")
    broken = app_state.AppState(app="helm-guestbook", sync_status=SyncStatus.UNKNOWN, health=HealthStatus.UNKNOWN)
    broken.conditions = [{"type": "ComparisonError", "message": "cannot render"}]
    app_state.save(store, broken)
    synced = app_state.AppState(app="guestbook", sync_status=SyncStatus.SYNCED, health=HealthStatus.HEALTHY,
                                revision="ab" * 20)
    app_state.save(store, synced)
    settings = Settings(config=str(ROOT / "examples" / "config"), store=str(where / "store"), api_token=TOKEN)
    httpd = serve_api(settings)
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        stop(httpd)


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[str]:
    with _served(tmp_path) as url:
        yield url


def _tidecd(*args: str, full: bool = False, probe: bool = False,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`tidecd ARGS` in a fresh process (the console script's `main`); `full` forces the full CLI, `probe`
    prints the loaded modules on stderr at exit."""
    code = ("import atexit, json, sys; "
            "atexit.register(lambda: print('MODULES', json.dumps(sorted(sys.modules)), file=sys.stderr)); "
            if probe else "import sys; ")
    code += ("from tidecd.cli import root; sys.argv = ['tidecd', *sys.argv[1:]]; root.main()" if full else
             "from tidecd.cli import main; sys.argv = ['tidecd', *sys.argv[1:]]; main()")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TIDECD_")}, **(env or {})}
    env["PYTHONPATH"] = f"{ROOT / 'shared'}{os.pathsep}{ROOT}"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          env=env, check=False)


def test_a_server_app_list_loads_nothing_heavy(server: str) -> None:
    done = _tidecd("--server", server, "app", "list", "--token", TOKEN, probe=True)
    assert done.returncode == exits.EXIT_APP_ERROR, done.stderr  # helm-guestbook fails to compare
    assert "guestbook" in done.stdout
    loaded = set(json.loads(done.stderr.rsplit("MODULES ", 1)[1]))
    bare = subprocess.run([sys.executable, "-c", "import json, sys; print(json.dumps(sorted(sys.modules)))"],
                          capture_output=True, text=True, timeout=60, check=True)
    loaded -= set(json.loads(bare.stdout))  # what the interpreter loads by itself (namespace packages' .pth)
    heavy = sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert heavy == [], heavy


@pytest.mark.parametrize("output", ["table", "json", "name"])
def test_the_thin_client_prints_and_exits_as_the_full_cli(server: str, output: str) -> None:
    args = ("app", "list", "--server", server, "--token", TOKEN, "-o", output)
    thin_run, full_run = _tidecd(*args), _tidecd(*args, full=True)
    assert (thin_run.returncode, full_run.returncode) == (exits.EXIT_APP_ERROR, exits.EXIT_APP_ERROR)
    assert [line.rstrip() for line in thin_run.stdout.splitlines()] == \
        [line.rstrip() for line in full_run.stdout.splitlines()]
    assert "abababababab" in thin_run.stdout or output == "name"


def test_failures_exit_with_the_full_clis_codes(server: str) -> None:
    for args, code in ((("--token", "wrong"), exits.EXIT_NOT_FOUND),
                       (("--server", "http://127.0.0.1:9"), exits.EXIT_UNREACHABLE)):
        both = [_tidecd("app", "list", "--server", server, "--token", TOKEN, *args, full=full)
                for full in (False, True)]
        assert [b.returncode for b in both] == [code, code], [b.stderr for b in both]
        assert all(b.stderr.startswith("error: ") for b in both)


@pytest.mark.parametrize("args", [
    ("app", "list", "-o", "wide"), ("app", "list", "--refresh"), ("app", "list", "--refresh", "-o", "wide"),
    ("app", "list", "-o", "wide", "-p", "default"), ("app", "list", "-p", "nope", "-o", "json"),
    ("app", "list", "-l", "a=b", "--selector", "c=d"), ("app", "list", "-l", "nokey"),
    ("app", "manifests", "guestbook"), ("app", "manifests", "guestbook", "--source", "live"),
    ("app", "manifests", "guestbook", "--source", "nope"),
    ("app", "get", "guestbook", "--cached"), ("app", "get", "guestbook", "--cached", "-o", "json"),
    ("app", "get", "helm-guestbook", "--cached"), ("app", "get", "guestbook"), ("app", "get", "nope", "--cached"),
    ("app", "history", "guestbook"), ("app", "history", "guestbook", "-o", "json"), ("app", "history", "nope"),
    ("app", "diff", "guestbook", "--cached"), ("app", "diff", "guestbook", "-o", "json"),
    ("app", "refresh", "guestbook"), ("app", "refresh", "guestbook", "-o", "json"),
    ("app", "terminate-op", "guestbook"), ("app", "rollback", "guestbook", "1"),
    # a directory config source: the removal has no git to go to (a real delete: tests/e2e/test_app_deletion.py)
    ("app", "delete", "guestbook"), ("app", "delete", "guestbook", "--cascade", "sideways"), ("app", "delete", "nope"),
    ("app", "wait", "guestbook", "--health", "--timeout", "1"), ("app", "wait", "guestbook", "--operation"),
    # the api's own step fails to reach git here (a real sync: tests/e2e/test_cli_and_demo.py)
    ("app", "sync", "guestbook", "--dry-run", "--timeout", "60"),
    ("app", "sync", "guestbook", "--prune", "--force", "--replace", "--revision", "main", "-o", "json"),
    ("app", "sync", "guestbook", "--resource", "apps/Deployment/guestbook-ui"),
    ("app", "sync", "guestbook", "--apply-out-of-sync-only", "--async", "-o", "json"),
    ("app", "resources", "guestbook"), ("app", "resources", "guestbook", "-o", "json"), ("app", "resources", "nope"),
    # no cluster here: the same errors (pods and their logs: tests/e2e/test_explain.py)
    ("app", "logs", "guestbook", "--tail", "5", "-c", "web"), ("app", "resources", "guestbook", "--kind", "Pod",
                                                                "--name", "p"),
])
def test_each_command_prints_and_exits_as_the_full_cli(tmp_path: Path, args: tuple[str, ...]) -> None:
    both = []
    for full in (False, True):  # each against a store of its own: the same state before each
        with _served(tmp_path / str(full)) as server:
            both.append(_tidecd("--server", server, *args, "--token", TOKEN, full=full))
    assert both[0].returncode == both[1].returncode, [b.stderr for b in both]
    assert (_masked(both[0].stdout), both[0].stderr) == (_masked(both[1].stdout), both[1].stderr)
    assert both[0].stdout or both[0].stderr.startswith("error: ")


def _masked(text: str) -> str:
    """Without what differs between two runs: operation ids, times, and what a followed operation waited for
    (whether a poll comes before the step is a race)."""
    text = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("... "))
    text = re.sub(r"\b[0-9a-f]{16}\b", "ID", text)
    return re.sub(r"\d{4}-\d\d-\d\dT[0-9:.]+Z?|\d+\.\d+s\b", "TIME", text)


def test_async_starts_and_wait_follows_as_the_full_cli(tmp_path: Path) -> None:
    runs = []
    for full in (False, True):
        with _served(tmp_path / str(full)) as server:
            started = _tidecd("--server", server, "app", "sync", "guestbook", "--async", "--token", TOKEN,
                              full=full)
            waited = _tidecd("--server", server, "app", "wait", "guestbook", "--operation", "--timeout", "60",
                             "--token", TOKEN, full=full)
        runs.append([(r.returncode, _masked(r.stdout), r.stderr) for r in (started, waited)])
    assert runs[0] == runs[1]
    assert runs[0][0][1] == "operation ID started\n"
    assert runs[0][1][0] == 1 and "operation Failed" in runs[0][1][1]  # git is unreachable here


def test_a_token_kept_by_login_is_used(server: str, tmp_path: Path) -> None:
    config = tmp_path / "cli.json"
    config.write_text(json.dumps({"servers": {server: {"token": TOKEN, "subject": "me", "via": "token"}}}))
    env = {"TIDECD_CLI_CONFIG": str(config)}
    both = [_tidecd("--server", server, "app", "history", "guestbook", full=full, env=env, probe=not full)
            for full in (False, True)]
    assert [b.returncode for b in both] == [0, 0], [b.stderr for b in both]
    assert both[0].stdout == both[1].stdout and both[0].stdout.startswith("ID")
    assert "tidecd.cli.root" not in both[0].stderr  # answered by the thin client
    config.write_text("not json")  # the full CLI names the problem
    broken = _tidecd("--server", server, "app", "history", "guestbook", env=env)
    assert broken.returncode == 2 and "Invalid value" in broken.stderr, broken.stderr


def test_what_the_thin_client_leaves_to_the_full_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TIDECD_CLI_CONFIG", str(tmp_path / "none.json"))
    assert thin.parse(["--server", "http://x", "--token", "t", "app", "list", "-o", "json"]) == \
        thin.Call("list", (), "http://x", "t", "json")
    assert thin.parse(["app", "list", "--server=http://x", "--token=t", "-ojson", "--cached"]) is not None
    assert thin.parse(["app", "get", "web", "--server", "http://x", "--token", "t", "--cached"]) == \
        thin.Call("get", ("web",), "http://x", "t", "table", frozenset({"--cached"}))
    assert thin.parse(["app", "sync", "web", "--resource", "a", "--resource=b", "--dry-run", "--timeout", "5",
                       "--server", "http://x", "--token", "t"]) == \
        thin.Call("sync", ("web",), "http://x", "t", "table", frozenset({"--dry-run"}),
                  (("--resource", "a"), ("--resource", "b"), ("--timeout", "5")))
    for argv in (["app", "list", "--server", "http://x"],  # no token: none saved either
                 ["app", "list", "--token", "t"],  # no server: local
                 ["app", "list", "--server", "http://x", "--token", "t", "-o", "yaml"],
                 ["app", "list", "--server", "http://x", "--token", "t", "-p=default"],  # click: "=default"
                 ["app", "list", "--server", "http://x", "--token", "t", "-lteam=a"],  # glued: left to click
                 ["app", "get", "web", "--server", "http://x", "--token", "t", "-o", "yaml"],
                 ["app", "get", "Web/x", "--server", "http://x", "--token", "t"],  # not a name: the full CLI says
                 ["app", "get", "--server", "http://x", "--token", "t"],
                 ["app", "history", "web", "extra", "--server", "http://x", "--token", "t"],
                 ["app", "adopt", "web", "--server", "http://x", "--token", "t"],
                 ["app", "sync", "web", "--timeout", "soon", "--server", "http://x", "--token", "t"],
                 ["app", "sync", "web", "--revert", "pr", "--server", "http://x", "--token", "t"],
                 ["app", "rollback", "web", "one", "--server", "http://x", "--token", "t"],
                 ["app", "rollback", "web", "1", "--revert-pr", "--revert", "push", "--server", "http://x",
                  "--token", "t"],
                 ["app", "wait", "web", "-o", "table", "--server", "http://x", "--token", "t"],
                 ["app", "sync", "web", "-o", "yaml", "--server", "http://x", "--token", "t"],
                 ["app", "get", "web", "--server", "file:///x", "--token", "t"],
                 ["app", "get", "web", "-o=json", "--server", "http://x", "--token", "t"],  # click: "=json"
                 ["app", "logs", "web", "-c=web", "--server", "http://x", "--token", "t"],
                 ["app", "logs", "web", "--tail", "-1", "--server", "http://x", "--token", "t"],
                 ["app", "resources", "web", "--kind", "Pod", "--server", "http://x", "--token", "t"],  # no --name
                 ["app", "manifests", "web", "-o", "json", "--server", "http://x", "--token", "t"],
                 ["--help"], ["-v", "app", "list", "--server", "http://x", "--token", "t"]):
        assert thin.parse(argv) is None, argv


def test_the_full_cli_takes_server_and_token_before_the_command_too(server: str) -> None:
    wide = _tidecd("--server", server, "--token", TOKEN, "app", "list", "-o", "wide", full=True)
    assert wide.returncode == exits.EXIT_APP_ERROR, wide.stderr
    assert wide.stdout.split()[:8] == ["NAME", "SYNC", "HEALTH", "REVISION", "PROJECT", "CLUSTER", "NAMESPACE",
                                       "CONDITIONS"]
    history = _tidecd("--server", server, "--token", TOKEN, "app", "history", "guestbook", full=True)
    assert history.returncode == 0 and history.stdout.startswith("ID"), history.stderr
    refused = _tidecd("--server", server, "--token", "wrong", "app", "history", "guestbook", full=True)
    assert refused.returncode == exits.EXIT_NOT_FOUND and "bearer token" in refused.stderr
