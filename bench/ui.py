"""Dashboard (issue 15): the apps page with 1,000 apps, rendered server-side, under 300 ms and 200 KB.

A config source declares 1,000 Applications in 10 projects on 3 clusters; the local store holds a
realistic state for each (12 resources with diffs, an operation with its task results, 10 history
entries). Each request is measured the way the api function serves it: a fresh Runtime (the config
loaded from disk), every app's state read, the page filtered, paged and rendered. The peer is the api's
own JSON list of the same apps (`GET /api/v1/apps`) in the same process: the same data, without HTML.
No cluster is involved: the apps page reads only the object store.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import yaml

from bench.harness import Bench, Row, median, say, spread, timed
from tidecd import ui
from tidecd.base.model import Action, HealthStatus, SyncStatus
from tidecd.clients.store import LocalStore
from tidecd.runtime import Runtime, Settings
from tidecd.state import app as app_state
from tidecd.usecases import api

GROUP = "ui"
APPS = 1000
REPS = 9
TOKEN = secrets.token_hex(16)
TIME_LIMIT, SIZE_LIMIT = 0.300, 200 * 1024
SYNC = (SyncStatus.SYNCED, SyncStatus.SYNCED, SyncStatus.SYNCED, SyncStatus.OUT_OF_SYNC, SyncStatus.UNKNOWN)
HEALTH = (HealthStatus.HEALTHY, HealthStatus.HEALTHY, HealthStatus.PROGRESSING, HealthStatus.DEGRADED,
          HealthStatus.MISSING, HealthStatus.SUSPENDED)


def _application(i: int) -> dict[str, object]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": f"app-{i:04}-{'payments-service' if i % 7 == 0 else 'web'}"},
            "spec": {"project": f"team-{i % 10}",
                     "source": {"repoURL": f"https://github.com/example/repo-{i % 50}.git",
                                "targetRevision": "main", "path": f"deploy/app-{i:04}"},
                     "destination": {"name": ("in-cluster", "prod-eu", "prod-us")[i % 3],
                                     "namespace": f"ns-{i % 40}"}}}


def _state(name: str, i: int) -> app_state.AppState:
    current = app_state.AppState(app=name, sync_status=SYNC[i % len(SYNC)], health=HEALTH[i % len(HEALTH)],
                                 revision=f"{i:040x}",
                                 memo=app_state.StepMemo(reconciled_at="2026-12-01T10:00:00Z"))
    diff = "".join(f"-  key{j}: old-value-{j}\n+  key{j}: new-value-{j}\n" for j in range(8))
    current.resources = [
        app_state.ResourceStatus("apps" if k % 3 == 0 else "", ("Deployment", "Service", "ConfigMap")[k % 3],
                                 f"ns-{i % 40}", f"obj-{k}", SyncStatus.OUT_OF_SYNC if k == 0 else SyncStatus.SYNCED,
                                 HealthStatus.HEALTHY,
                                 changed=["data"] if k == 0 else [], diff=f"--- live\n+++ desired\n{diff}")
        for k in range(12)]
    current.operation = app_state.Operation(
        f"op-{i}", current.revision, app_state.OperationPhase.SUCCEEDED, "successfully synced (all tasks run)",
        "2026-12-01T09:59:00Z", "2026-12-01T09:59:07Z",
        request=app_state.OperationRequest(initiated_by="automated", automated=True),
        results=[app_state.TaskResult(r.key, "Sync", 0, False, Action.CONFIGURED, app_state.TaskPhase.SUCCEEDED)
                 for r in current.resources])
    for h in range(10):
        current.add_history(f"{i + h:040x}", "Succeeded", f"deploy/app-{i:04}", "main")
    return current


def _install(root: Path) -> Settings:
    config, store_dir = root / "config", root / "store"
    config.mkdir(parents=True)
    store = LocalStore(store_dir)
    apps = [_application(i) for i in range(APPS)]
    projects = [{"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": f"team-{t}"},
                 "spec": {"sourceRepos": ["https://github.com/example/*"],
                          "destinations": [{"name": "*", "namespace": "*"}]}} for t in range(10)]
    (config / "projects.yaml").write_text(yaml.safe_dump_all(projects))
    for start in range(0, APPS, 100):
        (config / f"apps-{start:04}.yaml").write_text(yaml.safe_dump_all(apps[start:start + 100]))
    for i, doc in enumerate(apps):
        app_state.save(store, _state(str(doc["metadata"]["name"]), i))  # type: ignore[index]
    return Settings(config=str(config), store=str(store_dir), api_token=TOKEN)


def run(bench: Bench) -> list[Row]:
    settings = _install(bench.dir("ui"))
    say(f"ui: {APPS} apps with states written; timing the apps page")
    headers = {"Authorization": f"Bearer {TOKEN}", "Host": "bench"}
    sizes: list[int] = []

    def page(query: dict[str, str]) -> None:
        runtime = Runtime(settings=settings, store=LocalStore(Path(settings.store)))
        answer = ui.handle(ui.Request("GET", "/ui/", headers, query), runtime)
        assert answer.status == 200 and b"data-app=" in answer.body, answer.status
        sizes.append(len(answer.body))

    def api_list() -> None:
        runtime = Runtime(settings=settings, store=LocalStore(Path(settings.store)))
        answer = api.handle("GET", "/api/v1/apps", headers, b"", runtime)
        assert answer.status == 200 and len(answer.body["apps"]) == APPS

    cold = []
    for _ in range(3):  # a cold instance: nothing parsed yet (the config, the states, the templates)
        _forget()
        cold.append(timed(lambda: page({})))
    first = [timed(lambda: page({})) for _ in range(REPS)]
    first_size = sizes[-1]
    filtered = [timed(lambda: page({"health": "Degraded", "q": "payments"})) for _ in range(REPS)]
    peer = [timed(api_list) for _ in range(REPS)]
    verdict = "PASS" if median(first) < TIME_LIMIT and first_size < SIZE_LIMIT else "FAIL"
    return [
        Row(GROUP, f"apps page, {APPS} apps, page 1, warm instance ({APPS} state reads + render) "
                   "vs the api's JSON list", median(first), median(peer), "GET /api/v1/apps",
            f"{first_size / 1024:.0f} KB; {verdict} (< 300 ms, < 200 KB); {spread(first)}"),
        Row(GROUP, "apps page, filtered by health + search", median(filtered), median(peer),
            "GET /api/v1/apps", f"{sizes[-1] / 1024:.0f} KB; {spread(filtered)}"),
        Row(GROUP, f"apps page, first request of a cold instance (parses the config and {APPS} states)",
            median(cold), None, "", spread(cold)),
    ]


def _forget() -> None:
    from tidecd import runtime
    from tidecd.ui import environment, views

    runtime.forget_config_directories()
    views._SUMMARIES.clear()
    environment.cache_clear()
