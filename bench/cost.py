"""The cost model (issue 30): a day of tidecd on Cloud Run derived from a scale run's measured counts, beside
always-on Argo CD and Flux at the memory they were measured to hold.

Pure: `Counts` are what one `bench.scale10k` run measured (its JSON, `Counts.from_run`); `derive` turns them
into a day's invocations, instance-seconds, store operations and Pub/Sub bytes and their price; `always_on`
prices a peer's controllers; `markdown` is the table docs/cost.md shows. `python -m bench.cost RUN.json ...`
prints that table for the runs given (tests/unit/test_bench_cost.py checks the arithmetic).

The model, per day, for N apps, T poll ticks and C changes per app:
- invocations = T (the poll) + T·N·s₀ (the drift sweep's no-op steps, s₀ steps per app) + C·N·s₁ (a change:
  s₁ steps per app, its sync and any health follow-up);
- instance-seconds = T·p + T·N·s₀·b₀ + C·N·b₁, with p the poll invocation's billed time, b₀ the billed time
  of a no-op step and b₁ a change's billed time per app (Cloud Run bills each invocation in 100 ms units);
- store operations (class A: writes and listings, a listing per 1,000 keys; class B: reads, and the
  generation read `GcsStore.delete` makes before a conditional delete, as a step's lease release and
  pending finish are; the delete itself is free) = T·(the poll's) + T·N·s₀·(a no-op step's) + C·N·(a change's);
- Pub/Sub: one message per step, each published and pushed once, each billed at least 1,000 bytes.

`sweeps` (per app per day, default one per tick) separates the drift sweep from the poll's ticks: with
argocd-cm's `timeout.reconciliation` the poll still ticks T times (its measured time and its own store
operations each tick, an upper bound for a tick that sweeps nothing) but only `sweeps` of them refresh each
app: a no-op step, its message and the poll's claim of `pending/<app>` (one read and one write,
`tidecd.triggers.pending.claim`) each.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DAY = 86_400.0
TICKS_PER_DAY = 480  # one poll tick every 3 minutes: infra/'s Cloud Scheduler default
CHANGES_PER_APP = 1.0  # commits reaching each app per day
BILLING_UNIT = 0.1  # seconds: Cloud Run rounds each instance's billable time up to 100 ms
PUBSUB_MIN_BYTES = 1000  # Pub/Sub bills each publish and each push at least 1,000 bytes
GIB = 2**30
CLAIM_A, CLAIM_B = 1, 1  # the poll's claim of pending/<app> for each refresh it hands over: a read and a write


@dataclass(frozen=True)
class Prices:
    """US tier-1 list prices (https://cloud.google.com/run/pricing, https://cloud.google.com/storage/pricing,
    https://cloud.google.com/pubsub/pricing), free tiers not subtracted."""

    vcpu_second: float = 0.000024  # Cloud Run, request-based billing
    gib_second: float = 0.0000025
    per_million_requests: float = 0.40
    always_on_vcpu_second: float = 0.000018  # Cloud Run, instance-based billing (always on)
    always_on_gib_second: float = 0.000002
    class_a_per_1000: float = 0.005  # GCS standard storage: writes, listings
    class_b_per_1000: float = 0.0004  # reads
    pubsub_per_tib: float = 40.0
    vcpu: float = 1.0  # tidecd's instance: 1 vCPU, 0.5 GiB (infra/)
    memory_gib: float = 0.5


PRICES = Prices()


@dataclass(frozen=True)
class Counts:
    """What one run measured at `apps` apps: a no-op tick (the poll and the drift sweep's steps) and a change
    (the first sync of the sampled apps)."""

    apps: int
    repos: int
    run: str  # where the counts come from (commit, time, load), for the table's inputs
    poll_billed: float  # seconds, the no-op tick's poll invocation
    poll_store_a: int
    poll_store_b: int
    noop_steps_per_app: float
    noop_billed: float  # seconds per no-op step
    noop_store_a: float  # per no-op step
    noop_store_b: float
    change_steps_per_app: float
    change_billed: float  # seconds per app, all its steps
    change_store_a: float  # per app
    change_store_b: float
    message_bytes: float  # mean payload of a refresh message
    simulated: str = ""  # what was not run for every app
    poll_deletes: int = 0  # deletes: free, but GcsStore reads the generation first (class B)
    noop_deletes: float = 0.0
    change_deletes: float = 0.0

    @classmethod
    def from_run(cls, doc: dict[str, Any]) -> Counts:
        """From a `bench.scale10k` run's JSON."""
        noop, cold = doc["noop"], doc["cold"]
        return cls(apps=int(doc["apps"]), repos=int(doc["repos"]), run=str(doc.get("run", "")),
                   poll_billed=billed(float(noop["poll"]["wall"])),
                   poll_store_a=int(noop["poll"]["store"]["A"]), poll_store_b=int(noop["poll"]["store"]["B"]),
                   noop_steps_per_app=float(noop["steps_per_app"]), noop_billed=float(noop["billed_per_step"]),
                   noop_store_a=float(noop["store_per_step"]["A"]), noop_store_b=float(noop["store_per_step"]["B"]),
                   change_steps_per_app=float(cold["steps_per_app"]), change_billed=float(cold["billed_per_app"]),
                   change_store_a=float(cold["store_per_app"]["A"]), change_store_b=float(cold["store_per_app"]["B"]),
                   message_bytes=float(noop["message_bytes"]), simulated=str(doc.get("simulated", "")),
                   poll_deletes=int(noop["poll"]["store"].get("deletes", 0)),
                   noop_deletes=float(noop["store_per_step"].get("deletes", 0)),
                   change_deletes=float(cold["store_per_app"].get("deletes", 0)))


def billed(seconds: float) -> float:
    """An invocation's billed seconds: rounded up to Cloud Run's 100 ms unit."""
    return math.ceil(round(seconds / BILLING_UNIT, 6)) * BILLING_UNIT


@dataclass(frozen=True)
class Day:
    """A day of tidecd: the counts and what each costs, in dollars."""

    invocations: float
    instance_seconds: float
    store_a: float
    store_b: float
    messages: float
    pubsub_bytes: float
    dollars: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.dollars.values())


def derive(c: Counts, *, ticks: int = TICKS_PER_DAY, changes: float = CHANGES_PER_APP, sweeps: int | None = None,
           prices: Prices = PRICES) -> Day:
    """A day at `ticks` poll ticks, `sweeps` drift sweeps per app (default: every tick) and `changes` changes
    per app, from the measured counts."""
    sweeps = ticks if sweeps is None else sweeps
    noop_steps, change_steps = sweeps * c.apps * c.noop_steps_per_app, changes * c.apps * c.change_steps_per_app
    invocations = ticks + noop_steps + change_steps
    seconds = ticks * c.poll_billed + noop_steps * c.noop_billed + changes * c.apps * c.change_billed
    poll_a, poll_b = max(0, c.poll_store_a - c.apps * CLAIM_A), max(0, c.poll_store_b - c.apps * CLAIM_B)
    store_a = ticks * poll_a + sweeps * c.apps * CLAIM_A + noop_steps * c.noop_store_a \
        + changes * c.apps * c.change_store_a
    store_b = ticks * (poll_b + c.poll_deletes) + sweeps * c.apps * CLAIM_B \
        + noop_steps * (c.noop_store_b + c.noop_deletes) + changes * c.apps * (c.change_store_b + c.change_deletes)
    messages = noop_steps + change_steps
    pubsub_bytes = 2 * messages * max(PUBSUB_MIN_BYTES, c.message_bytes)
    dollars = {
        "CPU": seconds * prices.vcpu * prices.vcpu_second,
        "memory": seconds * prices.memory_gib * prices.gib_second,
        "requests": invocations / 1e6 * prices.per_million_requests,
        "store class A": store_a / 1000 * prices.class_a_per_1000,
        "store class B": store_b / 1000 * prices.class_b_per_1000,
        "Pub/Sub": pubsub_bytes / 2**40 * prices.pubsub_per_tib,
    }
    return Day(invocations, seconds, store_a, store_b, messages, pubsub_bytes, dollars)


@dataclass(frozen=True)
class Peer:
    """A peer's controllers held resident: `mib` measured (`measured` says where), on the smallest always-on
    Cloud Run instance that holds it (instance-based billing needs at least 1 vCPU; 1 vCPU holds up to 4 GiB)."""

    tool: str
    mib: float
    measured: str
    vcpu: float = 1.0


def always_on(peer: Peer, prices: Prices = PRICES) -> float:
    """Dollars a day for `peer` resident all day."""
    return DAY * (peer.vcpu * prices.always_on_vcpu_second + peer.mib / 1024 * prices.always_on_gib_second)


# docs/testing.md, "Idle memory for the 1,000 apps": VmRSS 60 s after the last app, full `make bench-scale`
# at 1,000 apps / 50 repos, 09:57–10:21 UTC on main at d0b2a79. Not measured at 10,000 apps.
PEERS = (
    Peer("Argo CD v3.6.1", 1030, "1,030 MiB idle at 1,000 apps (application-controller 904, repo-server 110, "
         "redis 16; bench-scale at d0b2a79)"),
    Peer("Flux v1.9.6", 276, "276 MiB idle at 1,000 apps (source-controller 93, kustomize-controller 183; "
         "bench-scale at d0b2a79)"),
)


def _n(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.2f}".rstrip("0").rstrip(".")


def markdown(runs: list[Counts], *, ticks: int = TICKS_PER_DAY, changes: float = CHANGES_PER_APP,
             sweeps: int | None = None, prices: Prices = PRICES, peers: tuple[Peer, ...] = PEERS) -> str:
    """The cost table: one column per run, its inputs and a day's counts and dollars, then the peers."""
    days = [derive(c, ticks=ticks, changes=changes, sweeps=sweeps, prices=prices) for c in runs]
    swept = "" if sweeps is None else f", {sweeps} drift sweeps per app"
    head = "| per day, a tick every " + f"{DAY / ticks / 60:g} min{swept}, {changes:g} change per app | " + \
        " | ".join(f"{c.apps:,} apps / {c.repos} repos" for c in runs) + " |"
    lines = [head, "|---|" + "---|" * len(runs)]

    def row(name: str, values: list[str]) -> None:
        lines.append(f"| {name} | " + " | ".join(values) + " |")

    row("input: the poll's no-op tick, billed s; store writes+listings (A) / reads / conditional deletes", [
        f"{_n(c.poll_billed)} s; {c.poll_store_a} / {c.poll_store_b} / {c.poll_deletes}" for c in runs])
    row("input: no-op steps per app; billed s per step; store A / reads / deletes per step", [
        f"{c.noop_steps_per_app:.2f}; {c.noop_billed:.3f} s; {c.noop_store_a:.2f} / {c.noop_store_b:.2f} / "
        f"{c.noop_deletes:.2f}" for c in runs])
    row("input: a change: steps per app; billed s per app; store A / reads / deletes per app", [
        f"{c.change_steps_per_app:.2f}; {c.change_billed:.3f} s; {c.change_store_a:.2f} / {c.change_store_b:.2f} / "
        f"{c.change_deletes:.2f}" for c in runs])
    row("input: refresh message, bytes", [
        f"{c.message_bytes:.0f} (billed as {max(PUBSUB_MIN_BYTES, c.message_bytes):,.0f})" for c in runs])
    row("invocations", [_n(d.invocations) for d in days])
    row("instance-seconds", [_n(d.instance_seconds) for d in days])
    row("store operations, class A / B", [f"{_n(d.store_a)} / {_n(d.store_b)}" for d in days])
    row("Pub/Sub messages; bytes billed (publish + push)", [f"{_n(d.messages)}; {d.pubsub_bytes / GIB:,.1f} GiB"
                                                           for d in days])
    for item in days[0].dollars if days else []:
        row(f"$ {item}", [f"{d.dollars[item]:,.2f}" for d in days])
    row("**$ tidecd, a day**", [f"**{d.total:,.2f}**" for d in days])
    for peer in peers:
        row(f"$ {peer.tool} always on: {peer.mib:,.0f} MiB + {peer.vcpu:g} vCPU", [
            f"{always_on(peer, prices):,.2f}" + (" (memory measured at 1,000 apps: a floor)" if c.apps > 1000 else "")
            for c in runs])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])]
    if not paths:
        print("usage: python -m bench.cost RUN.json [RUN.json ...]  (bench.scale10k's --json)", file=sys.stderr)
        return 2
    runs = sorted((Counts.from_run(json.loads(p.read_text())) for p in paths), key=lambda c: c.apps)
    print(markdown(runs))
    print("\nWith argocd-cm timeout.reconciliation: 1h (24 drift sweeps per app a day):\n")
    print(markdown(runs, sweeps=24))
    for c in runs:
        print(f"\n{c.apps:,} apps: {c.run}; simulated: {c.simulated or 'nothing'}")
        print(json.dumps(asdict(derive(c)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
