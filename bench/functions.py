"""Functions (issue 5): the deployed shape, end to end, plus what a poll tick and a cold start cost.

(a) webhook → Synced+Healthy: the webhook and api targets run as real `functions-framework` processes
    with the environment a deployment sets; a commit is pushed, a GitHub-signed push event is sent, and
    the api is polled until the app is Synced and Healthy at the new commit.
(b) poll tick: 1,000 apps on 50 repositories with nothing changed, after a warm first tick; it must make
    one ls-remote per repository (read from the git server's counters) and render nothing.
(c) cold start: import time of functions/main.py and of what each target imports on its first call
    (the imports inside the target, read from main.py), in fresh `python -X importtime` processes; the
    peer imports everything eagerly (all of tidecd and the heavy clients), as a design without lazy
    imports would.
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.fixtures import Installation, Repo, application, configmap, create_namespaces, deployment, write_app
from bench.harness import REPO_ROOT, Bench, Row, median, say, spread, timed
from tidecd.base.model import SyncStatus
from tidecd_dev.devcluster import free_port

GROUP = "functions"
RUNS = 5
APP, NAMESPACE = "fn-app", "bench-fn"
POLL_APPS, POLL_REPOS = 1000, 50
IMPORT_REPS = 5


def run(bench: Bench) -> list[Row]:
    rows: list[Row] = []
    for part, fn in (("webhook → synced", webhook_to_synced), ("cold start", cold_start), ("poll tick", poll_tick)):
        try:
            rows += fn(bench)
        except Exception as exc:  # report the part as failed, keep the others
            import traceback

            traceback.print_exc(file=sys.stderr)
            rows.append(Row(GROUP, f"{part}: FAILED", None, notes=f"{type(exc).__name__}: {str(exc)[:300]}"))
    return rows


# -- (a) webhook received → Synced and Healthy ---------------------------------------------------------


class Functions:
    """The webhook and api targets as functions-framework processes sharing one installation."""

    def __init__(self, bench: Bench, inst: Installation, *, ports: dict[str, int] | None = None,
                 env: dict[str, str] | None = None) -> None:
        """`ports`: a target's port given out before it listens (an audit webhook's URL); `env`: more settings."""
        self.secret, self.token = secrets.token_hex(16), secrets.token_hex(16)
        extra = env or {}
        env = {k: v for k, v in os.environ.items() if not k.startswith("TIDECD_")}
        env.update(TIDECD_CONFIG=str(inst.config_dir), TIDECD_STORE=str(inst.store_dir), KUBECONFIG=inst.kubeconfig,
                   TIDECD_WEBHOOK_SECRET=self.secret, TIDECD_API_TOKEN=self.token,
                   PYTHONPATH=str(REPO_ROOT / "shared"), **extra)
        framework = str(Path(sys.executable).parent / "functions-framework")
        self.urls: dict[str, str] = {}
        for target in ("webhook", "api"):
            port = (ports or {}).get(target) or free_port()
            bench.spawn([framework, "--target", target, "--source", "functions/main.py", "--host", "127.0.0.1",
                         "--port", str(port)], env=env, log=bench.root / f"function-{target}.log")
            self.urls[target] = f"http://127.0.0.1:{port}"
        for target, url in self.urls.items():
            _wait_serving(url, bench.root / f"function-{target}.log")

    def push_event(self, repo: Repo, before: str, after: str, files: list[str]) -> tuple[int, float]:
        """Send a signed GitHub push event; (HTTP status, seconds until the webhook answered)."""
        body = json.dumps({
            "ref": "refs/heads/main", "before": before, "after": after, "forced": False,
            "repository": {"name": repo.name, "full_name": f"bench/{repo.name}", "clone_url": repo.url,
                           "html_url": repo.url, "default_branch": "main"},
            "commits": [{"id": after, "message": "bench change", "added": [], "removed": [], "modified": files}],
            "pusher": {"name": "bench"},
        }).encode()
        signature = "sha256=" + hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
        headers = {"Content-Type": "application/json", "X-GitHub-Event": "push",
                   "X-GitHub-Delivery": str(uuid.uuid4()), "X-Hub-Signature-256": signature}
        start = time.perf_counter()
        status, _ = _http("POST", self.urls["webhook"] + "/", body, headers)
        return status, time.perf_counter() - start

    def app_status(self, name: str) -> dict[str, Any]:
        status, body = _http("GET", f"{self.urls['api']}/api/v1/apps/{name}", None,
                             {"Authorization": f"Bearer {self.token}"})
        if status != 200:
            raise RuntimeError(f"api GET /apps/{name}: HTTP {status}: {body[:300]!r}")
        return dict(json.loads(body))

    def wait_synced(self, name: str, sha: str, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            last = self.app_status(name)
            if last.get("revision") == sha and last.get("syncStatus") == "Synced" and last.get("health") == "Healthy":
                return
            time.sleep(0.1)
        raise TimeoutError(f"{name} not Synced+Healthy at {sha[:12]} after {timeout:.0f}s: sync="
                           f"{last.get('syncStatus')} health={last.get('health')} revision="
                           f"{str(last.get('revision'))[:12]} conditions={last.get('conditions')}")


def webhook_to_synced(bench: Bench) -> list[Row]:
    inst = Installation(bench.dir("functions/installation"), bench.kubeconfig)
    repo = Repo(bench.git, APP, bench.dir("functions/repo"))
    create_namespaces(bench.kubeconfig, [NAMESPACE])
    write_app(inst.config_dir, application(APP, repo.url, "app", NAMESPACE, automated=True))

    def change(value: str) -> str:
        repo.write("app/objects.yaml", [configmap("fn-config", value=value), deployment("fn-web")])
        return repo.commit_and_push(f"fn-config {value}")

    say("functions: starting the webhook and api targets")
    fns = Functions(bench, inst)
    before = change("v0")
    status, _ = fns.push_event(repo, "0" * 40, before, ["app/objects.yaml"])
    if status != 202:
        raise RuntimeError(f"webhook answered HTTP {status} to the first push (expected 202); see "
                           f"{bench.root}/function-webhook.log")
    fns.wait_synced(APP, before)  # the first sync (creates the Deployment) warms both instances: not timed
    totals, answers = [], []
    for i in range(RUNS):
        after = change(f"v{i + 1}")
        start = time.perf_counter()
        status, answered = fns.push_event(repo, before, after, ["app/objects.yaml"])
        if status != 202:
            raise RuntimeError(f"webhook answered HTTP {status} (expected 202)")
        fns.wait_synced(APP, after)
        totals.append(time.perf_counter() - start)
        answers.append(answered)
        before = after
    say(f"functions: webhook → Synced+Healthy {[round(t, 2) for t in totals]}")
    return [
        Row(GROUP, "webhook → app Synced+Healthy (1 object changed)", median(totals), None, "",
            f"functions-framework processes, api polled every 0.1s; {spread(totals)}"),
        Row(GROUP, "webhook answer (HTTP 202)", median(answers), None, "", f"same runs; {spread(answers)}"),
    ]


def _http(method: str, url: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers)  # noqa: S310 - local
    try:
        with urllib.request.urlopen(request, timeout=120) as resp:  # noqa: S310
            return int(resp.status), bytes(resp.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


SERVING_POLL = 0.005  # a cloud front end delivers as soon as the port listens; 0.1 s added up to 0.1 s per cold row


def _wait_serving(url: str, log: Path, timeout: float = 60.0) -> None:
    """Until the instance answers: a refused connection is retried every SERVING_POLL seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            _http("GET", url + "/healthz-bench", None, {})
            return
        except OSError:
            time.sleep(SERVING_POLL)
    raise TimeoutError(f"{url} not serving after {timeout:.0f}s: {log.read_text(errors='replace')[-800:]}")


# -- (b) a poll tick over 1,000 apps with nothing changed ----------------------------------------------


class _Counting:
    """A dispatcher that counts what it is handed and passes it on (or, with no inner one, drops it)."""

    def __init__(self, inner: Any = None) -> None:
        self.inner, self.refreshes = inner, 0

    def dispatch(self, refreshes: Sequence[Any]) -> dict[str, str]:
        self.refreshes += len(refreshes)
        return self.inner.dispatch(refreshes) if self.inner is not None else {}

    def schedule(self, app: str, delay: float, reason: str) -> None:
        if self.inner is not None:
            self.inner.schedule(app, delay, reason)


def poll_tick(bench: Bench) -> list[Row]:
    from tidecd import render
    from tidecd import source as git
    from tidecd.state import app as app_state
    from tidecd.triggers.dispatch import DirectDispatcher
    from tidecd.usecases.poll import poll
    from tidecd_dev.gitserver import LS_REMOTE

    inst = Installation(bench.dir("functions/poll"), bench.kubeconfig)
    template = Repo(bench.git, "poll-template", bench.dir("functions/poll-template"))
    template.write("app/config.yaml", [configmap("poll-config")])
    sha = template.commit_and_push("poll app")
    repos = [f"poll-{i:02d}" for i in range(POLL_REPOS)]
    for name in repos:
        bench.git.create_repo(name)
        template.push_to(bench.git.root / f"{name}.git")
    apps = [f"poll-app-{i:04d}" for i in range(POLL_APPS)]
    for i, name in enumerate(apps):
        write_app(inst.config_dir, application(name, bench.git.repo_url(repos[i % POLL_REPOS]), "app", "bench-poll"))
        app_state.save(inst.store, app_state.AppState(app=name, sync_status=SyncStatus.SYNCED, revision=sha))
    warm = _Counting()
    first = poll(inst.runtime(), warm, jitter_seconds=0)  # warm-up: every repo is seen for the first time
    say(f"functions: first poll tick {first.elapsed:.2f}s handed over {warm.refreshes} refreshes (not run)")

    renders: list[int] = []
    original_render = render.render

    def counted_render(*args: Any, **kwargs: Any) -> Any:
        renders.append(1)
        return original_render(*args, **kwargs)

    times, ls_remotes, dispatched, cached_before = [], [], [], len(inst.store.list("manifests/"))
    render.render = counted_render
    try:
        for _ in range(RUNS):
            bench.git.reset_counts()
            counting = _Counting(DirectDispatcher(inst.runtime))
            start = time.perf_counter()
            summary = poll(inst.runtime(), counting, jitter_seconds=0)
            times.append(time.perf_counter() - start)
            ls_remotes.append(sum(bench.git.requests(r, LS_REMOTE) for r in repos))
            dispatched.append(counting.refreshes)
            if summary.errors:
                raise RuntimeError(f"poll tick errors: {summary.errors[:3]}")
    finally:
        render.render = original_render
    new_manifests = len(inst.store.list("manifests/")) - cached_before
    config_load = median([timed(lambda: inst.runtime().config()) for _ in range(3)])
    say("functions: per-app ls-remote peer (1,000 calls)")
    urls = [bench.git.repo_url(repos[i % POLL_REPOS]) for i in range(POLL_APPS)]
    per_app = timed(lambda: _ls_remote_each(git.ls_remote, urls))
    return [
        Row(GROUP, f"poll tick, {POLL_APPS} apps / {POLL_REPOS} repos, nothing changed", median(times), per_app,
            "1 ls-remote per app",
            f"ls-remote per tick (git server): {ls_remotes}; refreshes: {dispatched}; renders: {len(renders)}; "
            f"new manifests/: {new_manifests}; {spread(times)}; of a tick, loading the {POLL_APPS} Application "
            f"files takes {config_load:.2f}s; peer: {POLL_APPS} ls-remotes, {_LS_REMOTE_WORKERS} at a time, once"),
    ]


_LS_REMOTE_WORKERS = 8


def _ls_remote_each(ls_remote: Callable[[str], dict[str, str]], urls: list[str]) -> None:
    with ThreadPoolExecutor(max_workers=_LS_REMOTE_WORKERS) as pool:
        list(pool.map(ls_remote, urls))


# -- (c) cold start: import time -------------------------------------------------------------------------

_MARK = "@@bench-imports"
_EAGER_CLIENTS = ("kubernetes.client", "kubernetes.config", "dulwich.client", "dulwich.repo", "github",
                  "google.cloud.storage", "google.cloud.pubsub_v1", "google.cloud.secretmanager",
                  "cryptography.hazmat.primitives.asymmetric.rsa", "structlog", "yaml", "rich", "typer")
_LAZY_KUBERNETES = ("from kubernetes import config", "from kubernetes.client.exceptions import ApiException")
_LAZY_PUBSUB = ("from google.cloud import pubsub_v1",)
_NOT_IN_FUNCTIONS = ("tidecd.cli",)  # the dev tooling is another package (tidecd_dev) and not walked


def target_imports(main_py: Path) -> dict[str, list[str]]:
    """Per function target, the import statements its body runs on the first call (and `_runtime`'s)."""
    tree = ast.parse(main_py.read_text())
    bodies = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}

    def imports(fn: ast.FunctionDef) -> list[str]:
        found = [ast.unparse(n) for n in ast.walk(fn) if isinstance(n, ast.Import | ast.ImportFrom)]
        for call in ast.walk(fn):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in bodies \
                    and call.func.id != fn.name:
                found += imports(bodies[call.func.id])
        return list(dict.fromkeys(found))

    return {name: imports(fn) for name, fn in bodies.items()
            if any("functions_framework" in ast.unparse(d) for d in fn.decorator_list)}


def eager_imports() -> list[str]:
    """Every tidecd module a function could reach, and the heavy clients: the no-lazy-imports baseline."""
    import importlib.util
    import pkgutil

    import tidecd

    modules = [m.name for m in pkgutil.walk_packages(tidecd.__path__, "tidecd.")
               if not m.name.startswith(_NOT_IN_FUNCTIONS)]
    modules += [m for m in _EAGER_CLIENTS if _importable(importlib.util, m)]
    return [f"import {m}" for m in modules]


def _importable(util: Any, name: str) -> bool:
    try:
        return util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def import_time(statements: list[str]) -> tuple[float, float]:
    """(seconds spent importing after interpreter start-up, process wall seconds) in a fresh interpreter."""
    code = "\n".join([f"import sys; sys.stderr.write('{_MARK}\\n'); sys.stderr.flush()", "import main", *statements])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "functions"), str(REPO_ROOT / "shared")])}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, check=False, timeout=120)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"import failed: {proc.stderr.strip()[-800:]}")
    return parse_importtime(proc.stderr.split(_MARK, 1)[-1]), wall


def parse_importtime(text: str) -> float:
    """Sum of the cumulative times of top-level imports in `-X importtime` output, in seconds."""
    total_us = 0
    for line in text.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|", 2)
        if not name[1:].startswith(" "):  # nested imports are indented by two spaces per level
            total_us += int(cumulative.strip())
    return total_us / 1e6


def _modules(statements: list[str]) -> list[str]:
    """`from tidecd import api as x` → `tidecd.usecases.api`: what the statements name, for the notes."""
    names: list[str] = []
    for node in ast.walk(ast.parse("\n".join(statements))):
        if isinstance(node, ast.ImportFrom):
            names += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return names


def cold_start(bench: Bench) -> list[Row]:
    per_target = target_imports(REPO_ROOT / "functions" / "main.py")
    cases = {"functions/main.py": [], **{f"target {t}": stmts for t, stmts in per_target.items()}}
    lazy = {  # imported inside tidecd on first use, not by the target itself: increments over a target
        "kubernetes client (first cluster call)": ("target reconcile", _LAZY_KUBERNETES),
        "Pub/Sub publisher (cloud fan-out)": ("target poll", _LAZY_PUBSUB),
    }
    for name, (base, extra) in lazy.items():
        cases[f"+ {name}"] = [*cases[base], *extra]
    cases["eager (everything)"] = eager_imports()
    imports: dict[str, list[float]] = {case: [] for case in cases}
    walls: dict[str, list[float]] = {case: [] for case in cases}
    say(f"functions: import times ({IMPORT_REPS} fresh interpreters per case)")
    for _ in range(IMPORT_REPS):  # cases interleaved, so noise hits all alike
        for case, statements in cases.items():
            seconds, wall = import_time(statements)
            imports[case].append(seconds)
            walls[case].append(wall)
    eager = median(imports["eager (everything)"])
    rows = []
    for case, statements in cases.items():
        if case.startswith("eager"):
            continue
        if case.startswith("+ "):
            base, extra = lazy[case[2:]]
            added = median(imports[case]) - median(imports[base])
            rows.append(Row(GROUP, f"cold start: {case}", added, None, "",
                            f"import time added to {base}: {', '.join(_modules(list(extra)))}"))
            continue
        modules = ", ".join(_modules(statements)) or "main.py and functions_framework only"
        rows.append(Row(GROUP, f"cold start: {case}", median(imports[case]), eager, "eager imports",
                        f"process wall {median(walls[case]):.2f}s; imports {modules}"))
    return rows
