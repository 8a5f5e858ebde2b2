"""The cost model's arithmetic (bench/cost.py) and the store-operation counts it is fed (bench/stepprobe.py's
StoreCounter); the counts themselves come from `make bench-scale-10k`."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench import cost
from bench.stepprobe import StoreCounter

from tidecd.clients.store import LocalStore


def counts(apps: int = 1000, **changes: float) -> cost.Counts:
    base: dict[str, float] = {
        "poll_billed": 5.3, "poll_store_a": 2 + apps, "poll_store_b": 60 + apps, "noop_steps_per_app": 1.0,
        "noop_billed": 0.2, "noop_store_a": 2.0, "noop_store_b": 3.0, "change_steps_per_app": 1.0, "change_billed": 1.0,
        "change_store_a": 10.0, "change_store_b": 5.0, "message_bytes": 300.0}
    base.update(changes)
    return cost.Counts(apps=apps, repos=50, run="test", **base)  # type: ignore[arg-type]


@pytest.mark.parametrize(("seconds", "billed"), [(0.0, 0.0), (0.1, 0.1), (0.14, 0.2), (0.2, 0.2), (1.001, 1.1)])
def test_an_invocation_is_billed_in_100_ms_units(seconds: float, billed: float) -> None:
    assert cost.billed(seconds) == pytest.approx(billed)


def test_a_day_is_the_counts_times_the_ticks_and_changes() -> None:
    day = cost.derive(counts(), ticks=480, changes=1.0)
    assert day.invocations == 480 + 480 * 1000 + 1000
    assert day.instance_seconds == pytest.approx(480 * 5.3 + 480 * 1000 * 0.2 + 1000 * 1.0)
    # the poll's own operations (its measured ones less a claim of pending/<app> per app) every tick, the
    # claims once per app and sweep
    assert day.store_a == pytest.approx(480 * 2 + 480 * 1000 + 480_000 * 2 + 1000 * 10)
    assert day.store_b == pytest.approx(480 * 60 + 480 * 1000 + 480_000 * 3 + 1000 * 5)
    # a conditional delete is free but GcsStore reads the generation first: one class B each
    deleting = cost.derive(counts(noop_deletes=2.0, change_deletes=2.0, poll_deletes=1))
    assert deleting.store_b - day.store_b == pytest.approx(480 * 1 + 480_000 * 2 + 1000 * 2)
    assert deleting.store_a == day.store_a
    assert day.messages == 481_000
    assert day.pubsub_bytes == 2 * 481_000 * 1000  # each message billed at least 1,000 bytes, published and pushed
    assert day.dollars["CPU"] == pytest.approx(day.instance_seconds * 0.000024)
    assert day.dollars["memory"] == pytest.approx(day.instance_seconds * 0.5 * 0.0000025)
    assert day.dollars["requests"] == pytest.approx(day.invocations * 0.4e-6)
    assert day.dollars["store class A"] == pytest.approx(day.store_a * 0.005e-3)
    assert day.total == pytest.approx(sum(day.dollars.values()))


def test_steps_per_app_and_message_size_scale_what_they_should() -> None:
    one, two = cost.derive(counts()), cost.derive(counts(noop_steps_per_app=2.0))
    assert two.invocations - one.invocations == 480 * 1000
    assert two.instance_seconds - one.instance_seconds == pytest.approx(480 * 1000 * 0.2)
    big = cost.derive(counts(message_bytes=3000.0))
    assert big.pubsub_bytes == 3 * one.pubsub_bytes
    hourly = cost.derive(counts(), ticks=480, sweeps=24)  # argocd-cm timeout.reconciliation: 1h
    assert hourly.invocations == 480 + 24 * 1000 + 1000
    assert hourly.instance_seconds == pytest.approx(480 * 5.3 + 24 * 1000 * 0.2 + 1000 * 1.0)
    assert hourly.store_a == pytest.approx(480 * 2 + 24 * 1000 + 24_000 * 2 + 1000 * 10)


def test_counts_are_read_from_a_run_document() -> None:
    doc = {"apps": 10000, "repos": 200, "run": "tidecd abc", "simulated": "the steps of 9,500 apps",
           "noop": {"poll": {"wall": 12.34, "store": {"A": 12, "B": 205}}, "steps_per_app": 1.0,
                    "billed_per_step": 0.21, "store_per_step": {"A": 2.0, "B": 4.0, "deletes": 2.0},
                    "message_bytes": 310.5},
           "cold": {"steps_per_app": 1.02, "billed_per_app": 1.4, "store_per_app": {"A": 9.5, "B": 20.1}}}
    c = cost.Counts.from_run(doc)
    assert (c.apps, c.repos, c.poll_store_a, c.poll_store_b) == (10000, 200, 12, 205)
    assert c.poll_billed == pytest.approx(12.4)
    assert (c.noop_billed, c.noop_store_b, c.change_steps_per_app, c.change_store_a) == (0.21, 4.0, 1.02, 9.5)
    assert c.simulated == "the steps of 9,500 apps"
    assert (c.noop_deletes, c.change_deletes, c.poll_deletes) == (2.0, 0.0, 0)


def test_a_peer_always_on_costs_a_vcpu_and_its_measured_memory_all_day() -> None:
    argo = cost.Peer("Argo CD", 1024, "measured")
    assert cost.always_on(argo) == pytest.approx(86_400 * (0.000018 + 0.000002))
    table = cost.markdown([counts(), counts(apps=10000)], peers=(argo,))
    assert "| 1,000 apps / 50 repos | 10,000 apps / 50 repos |" in table
    assert "**$ tidecd, a day**" in table
    peer_row = next(line for line in table.splitlines() if line.startswith("| $ Argo CD"))
    assert peer_row.count("a floor") == 1  # the 10,000-app column: memory measured at 1,000 apps only


def test_store_operations_are_counted_as_gcs_bills_them(tmp_path: Path) -> None:
    class Counted(LocalStore):
        pass

    counter = StoreCounter()
    counter.install(Counted)
    store = Counted(tmp_path)
    for i in range(1001):
        store.write(f"state/apps/app-{i:04}.json", b"{}")
    store.read("state/apps/app-0000.json")
    store.read("state/apps/missing.json")
    store.delete("state/apps/app-0000.json")
    before = counter.snapshot()
    assert before == {"A": 1001, "B": 2, "deletes": 1}
    assert len(store.generations("state/apps/")) == 1000  # lists through `list`: counted once
    store.list("state/")
    store.list("nothing/")
    assert counter.since(before, counter.snapshot()) == {"A": 3, "B": 0, "deletes": 0}  # one page each
    for i in range(1001, 2002):
        store.write(f"state/apps/app-{i:04}.json", b"{}")
    before = counter.snapshot()
    store.list("state/apps/")  # 2,001 keys: three pages
    assert counter.since(before, counter.snapshot())["A"] == 3
