"""Outages are waited out, not failed: the object store (fake-gcs-server behind a switchable proxy) answers
503, resets connections or hangs, and the webhook still answers within 1 s every time (503 with
Retry-After), the api within a few seconds (503 naming the store), and once the store is back a
redelivery is processed: no delivery is lost, none is handled twice.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest
from flask import Flask

from tests.support.flaky_proxy import FlakyProxy, Mode
from tests.support.gcs import PREFIX, FakeGcs
from tests.unit.test_webhook import fixture, github, make_runtime
from tidecd.clients.pubsub import Message, PublishFailed
from tidecd.clients.store import GcsStore, read_json
from tidecd.runtime import Runtime
from tidecd.triggers.dispatch import PubSubDispatcher
from tidecd.usecases import webhook

ROOT = Path(__file__).resolve().parents[2]
DELIVERY = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
REFRESHED = ["everything", "guestbook", "pinned"]  # the apps github-push-branch.json refreshes


class Topic:
    """A Publisher that records what reached the topic."""

    def __init__(self) -> None:
        self.apps: list[str] = []

    def publish(self, topic: str, messages: Sequence[Message], *, timeout: float = 0) -> list[PublishFailed | None]:
        self.apps.extend(json.loads(m.data)["app"] for m in messages)
        return [None] * len(messages)


@pytest.fixture
def proxy(fake_gcs: FakeGcs, monkeypatch: pytest.MonkeyPatch) -> Iterator[FlakyProxy]:
    target = urlsplit(fake_gcs.url)
    running = FlakyProxy(target.hostname or "127.0.0.1", target.port or 80)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", running.url)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def bucket(fake_gcs: FakeGcs, proxy: FlakyProxy) -> str:
    name = f"tidecd-outage-{time.time_ns()}"
    fake_gcs.create_bucket(name)  # straight to the emulator, never through the proxy
    return name


def _warm(runtime: Runtime) -> None:
    """A warm instance: google-cloud-storage imported and its client made (a cold start's cost, not the
    store's)."""
    runtime.store.list("warm/")


def _timed_deliveries(runtime: Runtime, topic: Topic, seconds: float) -> list[tuple[int, float, dict[str, Any]]]:
    """Deliver the push again and again for `seconds`: (status, answer time, body) of each."""
    body, answers = fixture("github-push-branch.json"), []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        started = time.monotonic()
        answer = webhook.handle(github(body, delivery=DELIVERY), body, runtime,
                                PubSubDispatcher("projects/p/topics/t", store=runtime.store, publisher=topic))
        answers.append((answer.status, time.monotonic() - started, answer.body))
    return answers


def _report(mode: str, answers: list[tuple[int, float, dict[str, Any]]]) -> None:
    times = [t for _, t, _ in answers]
    print(f"\nstore {mode}: {len(times)} deliveries, answer p50 {statistics.median(times) * 1000:.0f} ms, "
          f"max {max(times) * 1000:.0f} ms", file=sys.stderr)


@pytest.mark.parametrize("mode", ["503", "reset", "hang"])
def test_webhook_answers_503_within_1s_while_the_store_is_away_and_loses_no_delivery(
        tmp_path: Path, proxy: FlakyProxy, bucket: str, mode: Mode) -> None:
    runtime = make_runtime(tmp_path, store=GcsStore(bucket, PREFIX))
    topic = Topic()
    _warm(runtime)
    proxy.switch(mode)

    answers = _timed_deliveries(runtime, topic, 6.0)
    _report(mode, answers)

    assert len(answers) >= 5
    for status, took, body in answers:
        assert status == 503 and body["retry_after"] > 0, body
        assert took < 1.0, f"answered in {took:.2f}s"
    assert topic.apps == []  # nothing dispatched, nothing recorded as handled

    proxy.switch("pass")
    redelivered = _timed_deliveries(runtime, topic, 0.01)[0]
    assert redelivered[0] == 202 and sorted(topic.apps) == REFRESHED, redelivered
    record = read_json(runtime.store, f"deliveries/{DELIVERY}")
    assert record is not None and record[0]["state"] == "done"
    again = _timed_deliveries(runtime, topic, 0.01)[0]
    assert (again[0], again[2].get("duplicate")) == (200, True)
    assert sorted(topic.apps) == REFRESHED  # handed over once


def test_store_coming_back_in_the_middle_of_a_burst_of_redeliveries(
        tmp_path: Path, proxy: FlakyProxy, bucket: str) -> None:
    """Flapping: 503 and hangs alternate with short recoveries; every answer is quick, exactly one is 202."""
    runtime = make_runtime(tmp_path, store=GcsStore(bucket, PREFIX))
    topic, answers = Topic(), []
    _warm(runtime)
    for mode in ("503", "hang", "reset", "503", "pass"):
        proxy.switch(mode)
        answers += _timed_deliveries(runtime, topic, 1.5)
    _report("flapping", answers)

    assert max(t for _, t, _ in answers) < 1.0
    statuses = [s for s, _, _ in answers]
    assert statuses.count(202) == 1 and set(statuses) <= {202, 200, 503}
    assert all(s == 200 for s in statuses[statuses.index(202) + 1:])  # later ones are duplicates
    assert sorted(topic.apps) == REFRESHED


def _load_main() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tidecd_functions_main", ROOT / "functions" / "main.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_function_sends_retry_after_and_the_api_answers_503_in_seconds(
        tmp_path: Path, proxy: FlakyProxy, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = make_runtime(tmp_path)
    monkeypatch.setenv("TIDECD_CONFIG", runtime.settings.config)
    monkeypatch.setenv("TIDECD_STORE", f"gs://{bucket}/{PREFIX}")
    monkeypatch.setenv("TIDECD_WEBHOOK_SECRET", runtime.settings.webhook_secret)
    monkeypatch.setenv("TIDECD_API_TOKEN", "token")
    main, app, body = _load_main(), Flask(__name__), fixture("github-push-branch.json")
    _warm(Runtime.from_env())
    proxy.switch("hang")

    with app.test_request_context("/", method="POST", data=body, headers=github(body, delivery=DELIVERY)):
        started = time.monotonic()
        response = main.webhook(__import__("flask").request)
        took = time.monotonic() - started
    assert response.status_code == 503 and int(response.headers["Retry-After"]) > 0
    assert took < 1.0, f"webhook answered in {took:.2f}s"

    with app.test_request_context("/api/v1/apps/guestbook", method="GET",
                                  headers={"Authorization": "Bearer token"}):
        started = time.monotonic()
        response = main.api(__import__("flask").request)
        took = time.monotonic() - started
    print(f"\napi with the store hanging: {response.status_code} in {took * 1000:.0f} ms", file=sys.stderr)
    assert response.status_code == 503, response.get_data(as_text=True)
    assert "object store" in response.get_json()["message"]
    assert took < 5.0, f"api answered in {took:.2f}s"
