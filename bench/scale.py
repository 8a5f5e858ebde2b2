"""Scale (issue 17): 1,000 apps in 50 repos from cold, through the real functions, then a no-op tick.

The apps are flux-benchmark's (a Deployment scaled to 0, a ServiceAccount, a Service and an Ingress each;
tidecd_dev.scale). The deployed shape runs on this machine: the poll target and N reconcile instances as
functions-framework processes (concurrency 1 each), fan-out through the Pub/Sub emulator's push
subscription. The clock starts when the poll tick is sent and stops when the last app's state reads
Synced and Healthy. An ingress-controller stand-in (tidecd_dev.ingresses) publishes an address on every
Ingress for the whole run, so Ingress health means the same for every tool.

`make bench-scale` runs only this (python -m bench.scale); `python -m bench scale` runs it in the table.
Sizes: TIDECD_SCALE_APPS (1000), TIDECD_SCALE_REPOS (50), TIDECD_SCALE_WORKERS (chosen from the cores).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import cpuuse, stepprobe
from bench.harness import Bench, Row, say
from tidecd_dev import scale
from tidecd_dev.gitserver import LS_REMOTE
from tidecd_dev.scale_peers import WAIT
from tidecd_dev.scale_peers import phases as scale_peers_phases

GROUP = "scale"
TARGET_SECONDS = 120.0
TARGET_STEPS_PER_APP = 1.5
TARGET_CPU_PER_STEP = 0.1  # seconds of CPU, mean over the cold run's steps
TIMEOUT = 900.0


def choose_workers(cpus: int | None = None) -> int:
    """Reconcile instances for this machine: a step waits on the API server and git about half its time,
    so two per core keep the cores busy without thrashing (4 on 2 cores)."""
    return max(2, min(16, 2 * (cpus or os.cpu_count() or 1)))


@dataclass
class Measured:
    """What one cold run and one no-op tick measured."""

    apps: int
    repos: int
    workers: int
    total: float = 0.0
    per_app: list[float] = field(default_factory=list)
    peak_rss: list[int] = field(default_factory=list)
    store_bytes: int = 0  # the store's files once every app is done: all tidecd keeps between events
    api: scale.ApiCalls | None = None
    git_per_repo: dict[str, int] = field(default_factory=dict)  # kind → median per repo
    invocations: dict[str, Any] = field(default_factory=dict)
    tick: dict[str, Any] = field(default_factory=dict)
    noop: dict[str, Any] = field(default_factory=dict)
    missed: list[str] = field(default_factory=list)
    load: dict[str, float] = field(default_factory=dict)  # 1-minute load average: at the tick, cold done, end
    bridge: dict[str, int] = field(default_factory=dict)  # the push bridge's counts (redeliveries acked)
    cpu: dict[str, dict[str, float]] = field(default_factory=dict)  # cold: per step kind, CPU s (bench/stepprobe)
    noop_cpu: dict[str, dict[str, float]] = field(default_factory=dict)  # the no-op tick's, likewise
    profile: dict[str, list[str]] = field(default_factory=dict)  # per step kind, the top functions (when profiled)
    phases: dict[str, float] = field(default_factory=dict)  # the wait before each app's first step, and the rest
    cpu_use: cpuuse.CpuUse | None = None  # the machine's CPU from the tick until the last app was done

    def to_json(self) -> dict[str, Any]:
        doc = {k: v for k, v in self.__dict__.items() if k not in ("per_app", "api", "cpu_use")}
        doc["p50"], doc["p99"] = scale.percentile(self.per_app, 50), scale.percentile(self.per_app, 99)
        doc["api"] = self.api.__dict__ if self.api else None
        doc["cpu_use"] = self.cpu_use.to_json() if self.cpu_use else None
        return doc


def invocation_summary(frontend: Any, since: int = 0) -> dict[str, Any]:
    calls = frontend.snapshot()[since:]
    ran = [c for c in calls if not c.refused_early]
    return {
        "invocations": len(calls), "steps": len(ran), "refused_early": len(calls) - len(ran),
        "continuations": sum(1 for c in ran if c.continuation),
        "instance_seconds": round(sum(c.seconds for c in calls), 2),
        "step_mean": round(statistics.mean([c.seconds for c in ran]), 3) if ran else 0.0,
        "step_p99": round(scale.percentile([c.seconds for c in ran], 99), 3) if ran else 0.0,
        "refusal_mean": round(statistics.mean([c.seconds for c in calls if c.refused_early]), 4)
        if len(calls) > len(ran) else 0.0,
        "failed": sum(1 for c in ran if c.status >= 400),
        "queued_max": round(max((c.queued for c in calls), default=0.0), 2),
    }


def quiesce(frontend: Any, store_root: Path, *, quiet: float = 8.0, timeout: float = 300.0) -> None:
    """Wait until no invocation ran for `quiet` seconds and no continuation is recorded."""
    deadline = time.monotonic() + timeout
    count, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now_count = len(frontend.snapshot())
        if now_count != count or frontend.busy():
            count, since = now_count, time.monotonic()
        pending = list((store_root / "continuations").glob("*")) if (store_root / "continuations").exists() else []
        if time.monotonic() - since >= quiet and not pending:
            return
        time.sleep(0.5)
    raise TimeoutError(f"the fleet did not go quiet within {timeout:.0f}s")


def run_tidecd(bench: Bench, scenario: scale.Scenario, workers: int,
               progress: Callable[[str, int, int], None]) -> Measured:
    dev = bench.cluster()
    work = bench.dir("scale")
    measured = Measured(scenario.apps, scenario.repos, workers)
    say(f"scale: {scenario.apps} apps in {scenario.repos} repos, {workers} reconcile instances")
    inst = scale.install(bench.git, dev, work, scenario)
    store = inst.store
    with ExitStack() as stack:
        emulator = stack.enter_context(bench_emulator(bench))
        probe = work / "steps"  # bench/stepprobe.py: each step's kind and CPU time (and profiles, when asked)
        env = {**inst.env, "TIDECD_BENCH_STEPS": str(probe),
               "TIDECD_BENCH_PROFILE": os.environ.get("TIDECD_BENCH_PROFILE", "")}
        fleet = scale.Fleet(work / "fleet", env, emulator.host, workers).start("scale-refresh")
        stack.callback(fleet.stop)
        assert fleet.frontend is not None
        apps = scenario.app_names()
        watch = scale.Watch(store, apps)
        bench.git.reset_counts()
        api_before = scale.api_requests(dev)
        cpu_before = cpuuse.snapshot()
        started = time.time()
        measured.load["tick"] = os.getloadavg()[0]
        progress("cold: poll tick", 0, 1)
        measured.tick = fleet.tick()
        progress("cold: poll tick", 1, 1)
        ok = watch.wait(TIMEOUT, progress=lambda n: progress("cold: Synced+Healthy", n, len(apps)))
        measured.cpu_use = cpuuse.between(cpu_before, cpuuse.snapshot())
        measured.total = (max(watch.done.values()) - started) if ok else float("nan")
        measured.per_app = [t - started for t in watch.done.values()]
        if not ok:
            measured.missed = watch.stragglers()
        quiesce(fleet.frontend, store)
        measured.api = scale.ApiCalls.between(api_before, scale.api_requests(dev))
        counts = scale.ls_remotes(bench.git, scenario.repo_names())
        kinds = sorted({k for c in counts.values() for k in c})
        measured.git_per_repo = {k: int(statistics.median([c.get(k, 0) for c in counts.values()])) for k in kinds}
        measured.invocations = invocation_summary(fleet.frontend)
        measured.phases = phases(fleet.frontend.snapshot(), watch.done, started, time.time() - time.monotonic())
        noop_started = time.time()
        measured.cpu = stepprobe.summary(stepprobe.read_steps(probe))
        measured.peak_rss = fleet.peak_rss()
        measured.store_bytes = sum(f.stat().st_size for f in store.rglob("*") if f.is_file())
        measured.load["cold_done"] = os.getloadavg()[0]
        measured.bridge = bridge_counts(fleet)
        say(f"scale: cold {measured.total:.1f}s; {measured.invocations}; bridge {measured.bridge}")

        progress("no-op tick", 0, 1)
        seen = len(fleet.frontend.snapshot())
        bench.git.reset_counts()
        api_before, store_before = scale.api_requests(dev), scale.store_snapshot(store)
        tick_started = time.monotonic()
        summary = fleet.tick()
        tick_answered = time.monotonic() - tick_started
        quiesce(fleet.frontend, store, quiet=5.0)
        fanout = time.monotonic() - tick_started - 5.0
        api = scale.ApiCalls.between(api_before, scale.api_requests(dev))
        writes = scale.store_writes(store_before, scale.store_snapshot(store))
        ls = sum(bench.git.requests(r, LS_REMOTE) for r in scenario.repo_names())
        measured.noop = {"ls_remote": ls, "tick_seconds": round(tick_answered, 2),
                         "fan_out_seconds": round(fanout, 1), "refreshed": len(summary.get("apps_refreshed", [])),
                         "drift_checked": len(summary.get("drift_checked", [])),
                         "cluster_writes": api.writes_on_app_kinds, "api_calls": api.on_app_kinds,
                         "store_writes": dict(writes), **invocation_summary(fleet.frontend, seen)}
        measured.noop_cpu = stepprobe.summary([s for s in stepprobe.read_steps(probe)
                                               if s.get("at", 0) >= noop_started])
        measured.profile = profiles(probe)
        measured.load["end"] = os.getloadavg()[0]
        progress("no-op tick", 1, 1)
        say(f"scale: no-op tick {measured.noop}")
    return measured


def phases(invocations: list[Any], done: dict[str, float], started: float, offset: float) -> dict[str, float]:
    """Where tidecd's time went, split as the peers' is (`tidecd_dev.scale_peers.phases`): the wait from the
    poll tick until an app's first step began (queued for an instance included), and from there until it
    read Synced and Healthy. `offset` turns the Frontend's monotonic times into unix ones."""
    first: dict[str, float] = {}
    for call in invocations:
        if not call.refused_early:
            first[call.app] = min(first.get(call.app, float("inf")), call.started + offset)
    return scale_peers_phases([(first.get(app), at) for app, at in done.items()], started)


def cpu_text(summary: dict[str, dict[str, float]]) -> str:
    """`kind: N steps, CPU mean/p99 s, wall mean s` for each step kind measured."""
    return "; ".join(f"{kind}: {v['steps']:.0f} steps, CPU {v['cpu_mean']:.3f}/{v['cpu_p99']:.3f}s mean/p99, "
                     f"wall {v['wall_mean']:.3f}s" for kind, v in summary.items() if kind != "all") or "not measured"


def profiles(folder: Path) -> dict[str, list[str]]:
    """Each step kind's top functions by cumulative time, when the run was profiled (TIDECD_BENCH_PROFILE=1)."""
    found = {kind: stepprobe.top(folder, kind) + ["-- by own time:"] + stepprobe.top(folder, kind, own=True)
             for kind in stepprobe.KINDS}
    for kind, lines in found.items():
        if len(lines) > 1:
            say(f"scale: profile of {kind} steps:\n  " + "\n  ".join(lines))
    return {k: v for k, v in found.items() if len(v) > 1}


def bridge_counts(fleet: scale.Fleet) -> dict[str, int]:
    """Messages the push bridge posted and acked, nacked for redelivery, and redeliveries of messages
    already answered (acked without posting: the emulator's at-least-once) or still being posted."""
    bridge = fleet.bridge
    if bridge is None:
        return {}
    return {"delivered": bridge.delivered, "nacked": bridge.redelivered, "duplicates_acked": bridge.duplicates,
            "duplicates_in_flight": bridge.duplicates_in_flight}


class bench_emulator:  # noqa: N801 - used as a context manager
    def __init__(self, bench: Bench) -> None:
        from tidecd_dev.ingresses import IngressStatusWriter
        from tidecd_dev.pubsub import PubSubEmulator

        self.emulator = PubSubEmulator(bench.root / "pubsub")
        self.ingresses = IngressStatusWriter(bench.cluster())

    def __enter__(self) -> Any:
        self.ingresses.start()
        return self.emulator.start()

    def __exit__(self, *_: object) -> None:
        self.emulator.stop()
        self.ingresses.stop()


def rows(m: Measured) -> list[Row]:
    mib = [r / 2**20 for r in m.peak_rss]
    noop, inv = m.noop, m.invocations
    over = f" (target ≤ {TARGET_SECONDS:.0f}s: missed by {m.total - TARGET_SECONDS:.0f}s)" \
        if m.total > TARGET_SECONDS else f" (target ≤ {TARGET_SECONDS:.0f}s: met)"
    api = m.api
    out = [
        Row(GROUP, f"{m.apps} apps / {m.repos} repos from cold → all Synced+Healthy", m.total, None, "",
            f"{m.workers} reconcile instances{over}; " + ("; ".join(m.missed) if m.missed else "")),
        Row(GROUP, "per app: p50", scale.percentile(m.per_app, 50), None, "", "from the poll tick sent"),
        Row(GROUP, "per app: p99", scale.percentile(m.per_app, 99), None, "", ""),
        Row(GROUP, "per app: wait before its first step, p50", m.phases.get(f"{WAIT} p50"), None, "",
            "; ".join(f"{k} {v:.1f}s" for k, v in m.phases.items()) + " (first step → Synced+Healthy: the sync)"),
        Row(GROUP, "peak RSS per reconcile instance", None, None, "",
            f"{max(mib, default=0):.0f} MiB max, {statistics.mean(mib) if mib else 0:.0f} MiB mean (VmHWM)"),
        Row(GROUP, "memory held between events", None, None, "",
            f"0 MiB resident (no process runs between events); the store: {m.store_bytes / 2**20:.1f} MiB for "
            f"{m.apps} apps"),
        Row(GROUP, "invocations (cold)", None, None, "",
            f"{inv.get('steps')} steps ({inv.get('continuations')} continuations) + {inv.get('refused_early')} "
            f"early continuations refused; {inv.get('instance_seconds')} instance-s; step mean "
            f"{inv.get('step_mean')}s, p99 {inv.get('step_p99')}s"),
        Row(GROUP, "steps per app (cold)", None, None, "",
            f"{(inv.get('steps') or 0) / max(1, m.apps):.2f} (target ≤ {TARGET_STEPS_PER_APP}); "
            f"{(inv.get('instance_seconds') or 0) / max(1, m.apps):.2f} instance-s per app; "
            f"push bridge {json.dumps(m.bridge)}"),
        Row(GROUP, "CPU per step (cold)", (m.cpu.get("all") or {}).get("cpu_mean"), None, "",
            f"target ≤ {TARGET_CPU_PER_STEP}s mean; by kind " + cpu_text(m.cpu)),
        Row(GROUP, "CPU per step (no-op tick)", (m.noop_cpu.get("all") or {}).get("cpu_mean"), None, "",
            cpu_text(m.noop_cpu)),
        Row(GROUP, "load average (1 min)", None, None, "",
            "; ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in m.load.items()) + f" on {os.cpu_count()} cores"),
    ]
    if m.cpu_use is not None:
        out.append(Row(GROUP, "machine CPU, tick → all Synced+Healthy (CPU-s)", m.cpu_use.busy, None, "",
                       m.cpu_use.text()))
    if api is not None:
        out.append(Row(GROUP, "API calls per app (cold)", None, None, "",
                       f"{api.on_app_kinds / m.apps:.1f} on the app's 4 kinds ({api.writes_on_app_kinds / m.apps:.1f} "
                       f"writes, {api.dry_runs / m.apps:.1f} dry-runs; by verb {api.by_verb}); all requests incl. "
                       f"controllers {api.total / m.apps:.1f}"))
    out += [
        Row(GROUP, "git requests per repo (cold, median)", None, None, "", json.dumps(m.git_per_repo)),
        Row(GROUP, f"no-op poll tick over {m.apps} apps: tick answered", noop.get("tick_seconds"), None, "",
            f"ls-remote {noop.get('ls_remote')} (target {m.repos}); cluster writes {noop.get('cluster_writes')} "
            f"(target 0); store writes {noop.get('store_writes')} (target 0 in state/); "
            f"{noop.get('drift_checked')} drift refreshes"),
        Row(GROUP, "no-op tick: fan-out until quiet", noop.get("fan_out_seconds"), None, "",
            f"{noop.get('steps')} steps, {noop.get('instance_seconds')} instance-s, "
            f"{(noop.get('api_calls') or 0) / m.apps:.1f} API calls per app"),
    ]
    return out


def run(bench: Bench) -> list[Row]:
    """The `python -m bench scale` group."""
    scenario = scale.Scenario(int(os.environ.get("TIDECD_SCALE_APPS", 1000)),
                              int(os.environ.get("TIDECD_SCALE_REPOS", 50)))
    workers = int(os.environ.get("TIDECD_SCALE_WORKERS", 0)) or choose_workers()
    measured = run_tidecd(bench, scenario, workers, lambda *_: None)
    from bench import scale_peers  # the same apps through Flux and Argo CD, same run (bench/scale_peers.py)

    return rows(measured) + scale_peers.rows(measured, scale_peers.run_peers(bench, scenario, lambda *_: None))


def _on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    import logging
    import tempfile

    from bench.harness import print_plain, print_table, progress_bar
    from tidecd.base import logs

    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.splitlines()[0])
    parser.add_argument("--apps", type=int, default=int(os.environ.get("TIDECD_SCALE_APPS", 1000)))
    parser.add_argument("--repos", type=int, default=int(os.environ.get("TIDECD_SCALE_REPOS", 50)))
    parser.add_argument("--workers", type=int, default=int(os.environ.get("TIDECD_SCALE_WORKERS", 0)))
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument("--plain", action="store_true")
    args = parser.parse_args(argv)
    logs.configure(logging.WARNING)
    signal.signal(signal.SIGTERM, _on_sigterm)  # `finally` then stops every process the run started
    scenario = scale.Scenario(args.apps, args.repos)
    workers = args.workers or choose_workers()
    from bench import scale_peers  # the same apps through Flux and Argo CD, same run (bench/scale_peers.py)

    say(scale_peers.prepare())  # builds the peers first if needed, then a loopback-only network namespace
    bench = Bench(Path(tempfile.mkdtemp(prefix="tidecd-scale-")))
    try:
        with progress_bar() as progress:
            measured = run_tidecd(bench, scenario, workers, progress)
            say(f"scale: tidecd measured {json.dumps(measured.to_json())}")  # kept if the peers' part is cut short
            peer_results = scale_peers.run_peers(bench, scenario, progress)
    finally:
        bench.close()
    if args.json:
        args.json.write_text(json.dumps({**measured.to_json(), "peers": [m.to_json() for m in peer_results]},
                                        indent=1))
    table = rows(measured) + scale_peers.rows(measured, peer_results)
    (print_plain if args.plain else print_table)(table)
    return 0 if not measured.missed else 1


if __name__ == "__main__":
    sys.exit(main())
