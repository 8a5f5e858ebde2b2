"""Prometheus metrics of one function instance, served as text at `/metrics` by the api function.

Functions are stateless and scale out, so these counters cover **the instance that answers** since it
started (as a Prometheus client in any multi-process server does): a scrape of the api sees the api
instance's own counters plus what that instance ran (reconciles run in-process locally, and in the api's
own sync/refresh calls). For installation-wide totals across instances, `tidecd_store_*` gauges are
read from the aggregate counters kept in the object store (`metrics/totals/NN.json`, bumped once per
finished sync with a generation precondition; see `bump_totals`). Webhook deliveries are counted in
process only: a store write per delivery would contend at the rates GitHub delivers.

Names follow Prometheus conventions; the structured log lines carry the same fields (`event`, `result`,
`phase`, `service`, ...), so Cloud Logging can count the same things across instances.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import generate_latest

from tidecd.base.bearer import authorized
from tidecd.clients.store import ObjectStore, PreconditionFailed

REGISTRY = CollectorRegistry(auto_describe=True)
TOTALS_PREFIX = "metrics/totals/"
TOTALS_SHARDS = 32
LEGACY_TOTALS_KEY = "metrics/totals.json"  # the one object of before the shards, still counted
_DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

RECONCILES = Counter("tidecd_reconciles", "Reconcile steps run, by outcome", ["result"], registry=REGISTRY)
SYNCS = Counter("tidecd_syncs", "Sync operations finished, by result (Succeeded/Failed/Error)", ["result"],
                registry=REGISTRY)
OPERATIONS = Counter("tidecd_operation_transitions", "Operation phase transitions observed, by phase", ["phase"],
                     registry=REGISTRY)
WEBHOOKS = Counter("tidecd_webhook_deliveries", "Webhook deliveries answered, by event and result",
                   ["event", "result"], registry=REGISTRY)
NOTIFICATIONS = Counter("tidecd_notification_deliveries", "Notification deliveries, by service, trigger and result",
                        ["service", "trigger", "result"], registry=REGISTRY)
GITHUB_CALLS = Counter("tidecd_github_calls", "GitHub API write-backs, by kind and result", ["kind", "result"],
                       registry=REGISTRY)
DURATION = Histogram("tidecd_stage_duration_seconds", "Duration of render, dry-run and apply stages", ["stage"],
                     buckets=_DURATION_BUCKETS, registry=REGISTRY)


@contextmanager
def timed(stage: str) -> Iterator[None]:
    """Observe the duration of `stage` (render, dry_run, apply) into the stage histogram."""
    start = time.perf_counter()
    try:
        yield
    finally:
        DURATION.labels(stage=stage).observe(time.perf_counter() - start)


def totals_key(app: str) -> str:
    """The app's shard of the totals. One object for every app was written by each finished sync: 1,000
    apps syncing at once made ten writes a second to it, and GCS takes about one a second per object (the
    losers gave up after three tries and their counts were lost)."""
    return f"{TOTALS_PREFIX}{zlib.crc32(app.encode()) % TOTALS_SHARDS:02d}.json"


def bump_totals(store: ObjectStore, counts: Mapping[str, int], *, app: str, attempts: int = 3) -> None:
    """Add `counts` to the installation-wide totals in the store, in `app`'s shard (best effort: a lost race
    retries, then gives up; metrics must never fail the work they count)."""
    key = totals_key(app)
    for _ in range(attempts):
        try:
            blob = store.read(key)
            totals: dict[str, int] = json.loads(blob.data) if blob is not None else {}
            for name, value in counts.items():
                totals[name] = int(totals.get(name, 0)) + value
            store.write(key, json.dumps(totals, sort_keys=True).encode(),
                        if_generation_match=blob.generation if blob is not None else 0)
            return
        except PreconditionFailed:
            continue
        except Exception:  # noqa: BLE001 - an unavailable store or a broken file: skip this bump
            return


def read_totals(store: ObjectStore) -> dict[str, int]:
    """The totals of every shard (and of the one object of before them), summed."""
    totals: dict[str, int] = {}
    for key in [LEGACY_TOTALS_KEY, *store.list(TOTALS_PREFIX)]:
        blob = store.read(key)
        for name, value in (json.loads(blob.data) if blob is not None else {}).items():
            totals[name] = totals.get(name, 0) + int(value)
    return totals


class _StoreTotals:
    """Exposes the store's aggregate counters as `tidecd_store_<name>` gauges at scrape time."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def collect(self) -> Iterator[Any]:
        try:
            totals = read_totals(self.store)
        except Exception:  # noqa: BLE001 - a scrape never fails because of the store
            totals = {}
        for name, value in sorted(totals.items()):
            family = GaugeMetricFamily(f"tidecd_store_{name}", f"installation-wide total of {name} (all instances)")
            family.add_metric([], float(value))
            yield family


def count_webhook(headers: Mapping[str, str], status: int) -> None:
    """One webhook delivery answered: by forge event (`X-GitHub-Event` / `X-Gitlab-Event`) and HTTP status.
    In-process only: a store write per delivery would contend at the webhook's delivery rates."""
    lowered = {k.lower(): v for k, v in headers.items()}
    event = (lowered.get("x-github-event") or lowered.get("x-gitlab-event") or "none")[:40]
    result = "accepted" if status < 300 else "refused" if status < 500 else "failed"
    WEBHOOKS.labels(event=event, result=result).inc()


def handle(headers: Mapping[str, str], store: ObjectStore | None, token: str) -> tuple[int, bytes]:
    """GET /metrics on the api function, behind the api's bearer token (Prometheus: `authorization`)."""
    if not authorized(headers, token):
        return 401, b"a valid bearer token is required (Authorization: Bearer ...)\n"
    return 200, render(store)


def render(store: ObjectStore | None = None) -> bytes:
    """The Prometheus text exposition of this instance's metrics (plus the store's totals)."""
    if store is None:
        return generate_latest(REGISTRY)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StoreTotals(store))
    return generate_latest(REGISTRY) + generate_latest(registry)


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
