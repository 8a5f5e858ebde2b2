"""/metrics: Prometheus text that prometheus_client's parser reads, with counters that move."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tidecd.clients import metrics
from tidecd.clients.store import LocalStore, MemoryStore


def _samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text.decode()) for s in family.samples}


def test_counters_and_histograms_parse_and_move() -> None:
    store = MemoryStore()
    before = _samples(metrics.render(store))
    metrics.count_webhook({"X-GitHub-Event": "push"}, 202)
    metrics.count_webhook({"X-GitHub-Event": "push"}, 401)
    with metrics.timed("render"):
        pass
    metrics.bump_totals(store, {"syncs_succeeded": 2}, app="one")
    metrics.bump_totals(store, {"syncs_succeeded": 1}, app="two")
    after = _samples(metrics.render(store))

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("tidecd_webhook_deliveries_total", event="push", result="accepted") == 1
    assert delta("tidecd_webhook_deliveries_total", event="push", result="refused") == 1
    assert delta("tidecd_stage_duration_seconds_count", stage="render") == 1
    assert after[("tidecd_store_syncs_succeeded", ())] == 3


def test_metrics_need_the_api_token() -> None:
    assert metrics.handle({}, None, "tok")[0] == 401
    assert metrics.handle({"Authorization": "Bearer nope"}, None, "tok")[0] == 401
    assert metrics.handle({}, None, "")[0] == 401
    status, text = metrics.handle({"Authorization": "Bearer tok"}, None, "tok")
    assert status == 200 and b"# HELP tidecd_reconciles" in text


def test_no_metric_names_an_app() -> None:
    """Issue 26: a user who may not see an app does not find it in metrics. /metrics is per installation
    (behind the api token), and no series carries an app, project or resource: every label is one of
    these, so a scrape tells nobody which apps exist. A new label naming an app must filter by RBAC first."""
    labels = {label for collector in metrics.REGISTRY._collector_to_names  # noqa: SLF001 - the registered ones
              for label in getattr(collector, "_labelnames", ())}
    assert labels <= {"result", "phase", "event", "service", "trigger", "kind", "stage"}, labels


def test_syncs_finishing_at_once_are_all_counted(tmp_path: Path) -> None:
    """64 apps' syncs finishing at once, 8 at a time, on the local store (a real generation precondition):
    each bump lands in its app's shard, so none gives up after its three tries and every sync counts. One
    object for all lost counts here, and on GCS (about one write a second per object) far more."""
    store = LocalStore(tmp_path)
    apps = [f"app-{i:03d}" for i in range(64)]
    start = threading.Barrier(8)

    def finish(names: list[str]) -> None:
        start.wait()
        for name in names:
            metrics.bump_totals(store, {"syncs_succeeded": 1}, app=name)

    threads = [threading.Thread(target=finish, args=(apps[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert metrics.read_totals(store) == {"syncs_succeeded": 64}
    assert len(store.list(metrics.TOTALS_PREFIX)) >= 16


def test_the_totals_of_before_the_shards_still_count() -> None:
    store = MemoryStore()
    store.write(metrics.LEGACY_TOTALS_KEY, json.dumps({"syncs_failed": 5, "syncs_succeeded": 7}).encode())
    metrics.bump_totals(store, {"syncs_succeeded": 1}, app="guestbook")
    assert metrics.read_totals(store) == {"syncs_failed": 5, "syncs_succeeded": 8}
