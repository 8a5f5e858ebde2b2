"""Live pages (issue 25): what one open dashboard page costs per minute, polling a cheap version every
second (`tidecd.ui.watch.POLL_SECONDS`), against what a server-sent events stream would hold.

The installation is the `ui` group's: 1,000 apps in 10 projects, each with a realistic stored state. An
open page asks `GET .../version?v=V` every second (60 requests a minute); while nothing changed the answer is
a 204 after one metadata listing of the app states. Each request is served as the api function serves it
(`ui.handle`, a fresh Runtime: the config's fingerprint checked, the caller's RBAC applied) on a warm
instance (the config and templates parsed already) and on a cold one (everything parsed again). Store
calls are counted by a wrapper over the local store: reads of a body, listings, and generation listings.

The peer is a server-sent events stream from the api function: it would hold its instance (billed time,
and one of the instance's concurrent requests) for the whole minute, 60 s per open page, and it would
still have to ask the store as often, since the steps that record changes run in other instances. Its
row is that held time; the polling row is the CPU time its 60 requests take.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from bench.harness import Bench, Row, median, say, spread
from bench.ui import TOKEN, _forget, _install
from tidecd import ui
from tidecd.clients.store import Blob, LocalStore
from tidecd.runtime import Runtime, Settings
from tidecd.ui.watch import POLL_SECONDS

GROUP = "live"
POLLS_PER_MINUTE = 60 // POLL_SECONDS
REPS = 30


class CountingStore(LocalStore):
    """The local store, counting each kind of call a poll makes."""

    def __init__(self, root: Path, counts: Counter[str]) -> None:
        super().__init__(root)
        self.counts = counts

    def read(self, key: str) -> Blob | None:
        self.counts["read"] += 1
        return super().read(key)

    def list(self, prefix: str) -> list[str]:
        self.counts["list"] += 1
        return super().list(prefix)

    def generations(self, prefix: str) -> dict[str, int]:
        self.counts["generations"] += 1
        self.counts["list"] -= 1  # its own listing is part of it
        return super().generations(prefix)


def run(bench: Bench) -> list[Row]:
    settings = _install(bench.dir("live"))
    headers = {"Authorization": f"Bearer {TOKEN}", "Host": "bench"}
    app = "app-0001-web"
    rows = []
    for label, path in (("apps list (1,000 apps)", "/ui/version"), ("app page", f"/ui/apps/{app}/version")):
        counts: Counter[str] = Counter()
        version = _version(settings, headers, path, counts)
        for temperature in ("warm", "cold"):
            cpu, wall = [], []
            counts.clear()
            for _ in range(REPS if temperature == "warm" else 5):
                if temperature == "cold":
                    _forget()
                runtime = Runtime(settings=settings, store=CountingStore(Path(settings.store), counts))
                started, clock = time.process_time(), time.perf_counter()
                answer = ui.handle(ui.Request("GET", path, headers, {"v": version}), runtime)
                cpu.append(time.process_time() - started)
                wall.append(time.perf_counter() - clock)
                assert answer.status == 204, (path, answer.status, answer.body[:300])
            per = {k: v / len(cpu) for k, v in counts.items() if v}
            calls = ", ".join(f"{v:g} {k}" for k, v in sorted(per.items()))
            say(f"live: {label}, {temperature}: {median(cpu) * 1000:.1f} ms CPU a poll; store calls a poll: {calls}")
            rows.append(Row(
                GROUP, f"{label}: one open page for a minute, CPU of {POLLS_PER_MINUTE} polls each on a {temperature} "
                       "instance vs an SSE stream's held instance", median(cpu) * POLLS_PER_MINUTE, 60.0,
                "SSE: instance held 60 s",
                f"{POLLS_PER_MINUTE} requests/min; per poll {median(wall) * 1000:.1f} ms wall, store calls "
                f"{calls}; {POLLS_PER_MINUTE * per.get('read', 0):g} body reads/min; CPU {spread(cpu)}"))
    return rows


def _version(settings: Settings, headers: dict[str, str], path: str, counts: Counter[str]) -> str:
    """The version a page was rendered at (a poll with none answers the page, which carries it)."""
    runtime = Runtime(settings=settings, store=CountingStore(Path(settings.store), counts))
    answer = ui.handle(ui.Request("GET", path, headers, {"v": ""}), runtime)
    etag = dict(answer.headers).get("ETag", "")
    assert answer.status == 200 and etag, (path, answer.status)
    return etag.strip('"')
