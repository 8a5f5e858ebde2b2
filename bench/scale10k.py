"""10,000 apps on 200 repos (issue 30): the counts the cost model (bench/cost.py) is derived from.

What runs for real, as deployed (the poll target and N reconcile instances as functions-framework processes,
fan-out through the Pub/Sub emulator, the bench's push bridge and Cloud Run-like front end of bench/scale.py):
- the apps' 200 repos on the local git server and a git config source of all N Applications;
- a cold poll tick over the N apps (the config loaded without its cache and the cache written, one
  ls-remote per repo, N refreshes published), then a no-op tick (the config from the cache, 201
  ls-remotes, the store's listings and reads, the drift sweep's N refreshes published and pulled);
- the config load in fresh interpreters, without and with the config cache (bench/coldstart.py's);
- the reconcile steps of a sample of the apps (the first `SAMPLE`, 2–3 per repo): their first sync
  against the real API server and their drift-sweep no-op step.

What is simulated, because two shared cores cannot hold 40,000 objects nor run 10,000 steps a tick: the
steps of the apps outside the sample. Their refresh messages are published by the poll and pulled from the
emulator like the others, counted (messages, bytes) and acked without a step (`PushBridge.only`); their
state documents are copies of a sampled app's, renamed, written before the no-op tick, so the poll lists
and reads a full store. The cost model charges each of them the sample's measured steps.

Every call's store operations are counted inside the function processes (bench/stepprobe.py's
StoreCounter: class A writes and listings per 1,000 keys, class B reads). Sizes from the environment so it
runs small while developing: TIDECD_SCALE10K_APPS (10000), TIDECD_SCALE10K_REPOS (200),
TIDECD_SCALE10K_SAMPLE (500), TIDECD_SCALE_WORKERS (2 per core). `make bench-scale-10k` runs it and prints
the cost table; `--json` keeps the counts for `python -m bench.cost`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import coldstart, cost, stepprobe
from bench.fixtures import Repo
from bench.harness import Bench, say
from bench.scale import bench_emulator, choose_workers, invocation_summary, quiesce
from tidecd_dev import scale
from tidecd_dev.gitserver import LS_REMOTE

TIMEOUT = 900.0
CACHE = Path.home() / ".cache" / "tidecd" / "bench-scale10k"


@dataclass
class Run:
    """One run's counts (the JSON `bench.cost.Counts.from_run` reads)."""

    apps: int
    repos: int
    sample: int
    workers: int
    run: str = ""
    simulated: str = ""
    load: dict[str, list[float]] = field(default_factory=dict)  # load averages (1/5/15 min) by phase
    setup_seconds: float = 0.0
    cold: dict[str, Any] = field(default_factory=dict)
    noop: dict[str, Any] = field(default_factory=dict)
    config_load: dict[str, Any] = field(default_factory=dict)
    poll_peak_rss_mib: float = 0.0
    store_bytes: int = 0

    def mark(self, phase: str) -> None:
        self.load[phase] = [round(x, 2) for x in os.getloadavg()]


def simulated(apps: int, sample: int) -> str:
    if sample >= apps:
        return ""
    return (f"the reconcile steps of the {apps - sample:,} apps outside the sample of {sample:,}: their "
            f"refresh messages were published and pulled through the emulator and counted, then acked "
            f"without a step; their state documents are a sampled app's, renamed; their objects "
            f"({4 * (apps - sample):,}) were never in the cluster. Costed as the sample's measured steps.")


def commit_of(root: Path) -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                          check=False)
    return proc.stdout.strip() or "unknown"


def config_in_git(bench: Bench, folder: Path, name: str) -> str:
    """The Applications `scale.install` wrote to `folder`, committed as a git config source; its spec."""
    repo = Repo(bench.git, name, folder)
    repo.commit_and_push(f"{len(list(folder.glob('*.yaml')))} Applications")
    return f"{repo.url}#main:"


def seed_states(store: Path, model: str, apps: list[str]) -> int:
    """Each of `apps` gets `model`'s state document with the name changed (names have one width: app-0007),
    and its refresh claim (`pending/<app>`) of the cold tick is released as its step would have: else the
    next tick coalesces its refresh and publishes nothing. Returns how many were written."""
    from tidecd.clients.store import LocalStore
    from tidecd.state.app import state_key
    from tidecd.triggers import pending

    local = LocalStore(store)
    blob = local.read(state_key(model))
    if blob is None:
        raise RuntimeError(f"no state for the sampled app {model}: its first sync did not record one")
    text = blob.data.decode()
    for app in apps:
        local.write(state_key(app), text.replace(model, app).encode())
        pending.release(local, app)
    return len(apps)


def steps_between(folder: Path, since: float, until: float = float("inf")) -> list[dict[str, Any]]:
    return [s for s in stepprobe.read_steps(folder) if since <= float(s.get("at", 0)) < until]


def store_total(lines: list[dict[str, Any]]) -> dict[str, int]:
    total = {"A": 0, "B": 0, "deletes": 0}
    for line in lines:
        for k, v in (line.get("store") or {}).items():
            total[k] = total.get(k, 0) + int(v)
    return total


def billed_total(calls: list[Any]) -> float:
    return round(sum(cost.billed(c.seconds) for c in calls), 2)


def wait_pulled(fleet: scale.Fleet, before: int, expected: int, timeout: float = TIMEOUT,
                stalled: float = 20.0) -> int:
    """Until the bridge has seen `expected` new messages, or none came for `stalled` seconds (a refresh
    coalesced by `pending/` is never published), or `timeout`; how many it saw."""
    assert fleet.bridge is not None
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while fleet.bridge.messages - before < expected and time.monotonic() < deadline:
        if fleet.bridge.messages != last:
            last, since = fleet.bridge.messages, time.monotonic()
        elif time.monotonic() - since > stalled:
            break
        time.sleep(0.5)
    return fleet.bridge.messages - before


def config_loads(source: str, store: Path, apps: int, runs: int) -> dict[str, Any]:
    """`Runtime.config()` in fresh interpreters (bench/coldstart.py's child): from the cache the poll wrote,
    then without it (moved aside, then put back). CPU and wall seconds, medians."""
    cache = store / "config-cache"
    found: dict[str, list[dict[str, float]]] = {"cached": [], "without the cache": []}
    for _ in range(runs):
        found["cached"].append(coldstart.cold_load(source, store, apps=apps))
    aside = store.parent / "config-cache-aside"
    shutil.move(cache, aside)
    try:
        for _ in range(runs):
            found["without the cache"].append(coldstart.cold_load(source, store, "before", apps=apps))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        shutil.move(aside, cache)
    size = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
    return {case: {"cpu": round(statistics.median(r["cpu"] for r in rs), 3),
                   "wall": round(statistics.median(r["wall"] for r in rs), 3), "runs": len(rs)}
            for case, rs in found.items()} | {"cache_bytes": size}


def measure(bench: Bench, scenario: scale.Scenario, sample_size: int, workers: int, runs: int = 2) -> Run:
    dev = bench.cluster()
    work = bench.dir("scale10k")
    sample_size = min(sample_size, scenario.apps)
    m = Run(scenario.apps, scenario.repos, sample_size, workers, simulated=simulated(scenario.apps, sample_size))
    m.mark("start")
    say(f"scale10k: {scenario.apps} apps in {scenario.repos} repos, {sample_size} sampled, {workers} instances")
    began = time.monotonic()
    inst = scale.install(bench.git, dev, work, scenario)
    source = config_in_git(bench, inst.config, f"{scenario.name}-config")
    m.setup_seconds = round(time.monotonic() - began, 1)
    say(f"scale10k: repos, config source and namespaces in {m.setup_seconds}s")
    probe = work / "probe"
    env = {**inst.env, "TIDECD_CONFIG": source, "TIDECD_BENCH_STEPS": str(probe)}
    apps, sample = scenario.app_names(), scenario.app_names()[:sample_size]
    with bench_emulator(bench) as emulator:
        fleet = scale.Fleet(work / "fleet", env, emulator.host, workers).start(f"{scenario.name}-refresh")
        try:
            assert fleet.frontend is not None and fleet.bridge is not None and fleet.poller is not None
            fleet.bridge.only = frozenset(sample)
            # the cold tick: every app new; the sample's steps run, the rest are counted
            m.mark("cold tick")
            cold_at = time.time()
            summary, answered, published = timed_tick(fleet)
            watch = scale.Watch(inst.store, sample)
            ok = watch.wait(TIMEOUT)
            pulled = wait_pulled(fleet, 0, published)
            quiesce(fleet.frontend, inst.store)
            m.mark("cold done")
            calls = fleet.frontend.snapshot()
            steps = steps_between(probe, cold_at)
            polls = stepprobe.read_steps(probe, "poll")
            m.cold = {"tick_seconds": round(answered, 2), "poll": polls[-1] if polls else {},
                      "published": published, "pulled": pulled, "withheld": fleet.bridge.withheld,
                      "errors": summary.get("errors", [])[:5], "left": len(summary.get("left", [])),
                      "sample_done": len(watch.done), "missed": [] if ok else watch.stragglers(),
                      "seconds_to_sample_done": round(max(watch.done.values(), default=cold_at) - cold_at, 1),
                      **invocation_summary(fleet.frontend), "billed": billed_total(calls),
                      "steps_per_app": round(len(steps) / sample_size, 3),
                      "billed_per_app": round(billed_total(calls) / sample_size, 3),
                      "store": store_total(steps),
                      "store_per_app": {k: round(v / sample_size, 2) for k, v in store_total(steps).items()},
                      "cpu": stepprobe.summary(steps)}
            say(f"scale10k: cold tick {m.cold}")
            if not ok:
                raise RuntimeError(f"the sample was not Synced+Healthy in {TIMEOUT:.0f}s: {watch.stragglers()}")
            seeded = seed_states(inst.store, sample[0], apps[sample_size:])
            say(f"scale10k: {seeded} state documents seeded from {sample[0]}'s")
            m.noop = noop_tick(bench, fleet, scenario, inst.store, probe, sample_size, m)
            say(f"scale10k: no-op tick {m.noop}")
            m.poll_peak_rss_mib = round(fleet.poller.peak_rss() / 2**20, 1)
        finally:
            fleet.stop()
    m.store_bytes = sum(f.stat().st_size for f in inst.store.rglob("*") if f.is_file())
    m.config_load = config_loads(source, inst.store, scenario.apps, runs)
    say(f"scale10k: config load {m.config_load}")
    m.mark("end")
    return m


def timed_tick(fleet: scale.Fleet) -> tuple[dict[str, Any], float, int]:
    """One poll tick: its summary, the seconds until it answered, and how many refresh messages it published."""
    started = time.monotonic()
    summary = fleet.tick(timeout=TIMEOUT)
    answered = time.monotonic() - started
    return summary, answered, len(summary.get("apps_refreshed", [])) + len(summary.get("drift_checked", []))


def noop_tick(bench: Bench, fleet: scale.Fleet, scenario: scale.Scenario, store: Path, probe: Path,
              sample_size: int, m: Run) -> dict[str, Any]:
    """One tick with nothing changed: the poll, the drift sweep's messages, the sample's no-op steps."""
    assert fleet.frontend is not None and fleet.bridge is not None
    bench.git.reset_counts()
    seen, bridged, withheld, sent = (len(fleet.frontend.snapshot()), fleet.bridge.messages, fleet.bridge.withheld,
                                     fleet.bridge.bytes)
    before = scale.store_snapshot(store)
    m.mark("no-op tick")
    at = time.time()
    started = time.monotonic()
    summary, answered, published = timed_tick(fleet)
    pulled = wait_pulled(fleet, bridged, published)
    quiesce(fleet.frontend, store, quiet=5.0)
    fan_out = time.monotonic() - started - 5.0
    m.mark("no-op done")
    calls = fleet.frontend.snapshot()[seen:]
    steps = steps_between(probe, at)
    polls = [p for p in stepprobe.read_steps(probe, "poll") if float(p.get("at", 0)) >= at]
    ls = sum(bench.git.requests(r, LS_REMOTE) for r in scenario.repo_names())
    ls_config = bench.git.requests(f"{scenario.name}-config", LS_REMOTE)
    return {"tick_seconds": round(answered, 2), "fan_out_seconds": round(fan_out, 1),
            "poll": polls[-1] if polls else {}, "ls_remote": ls, "ls_remote_config": ls_config,
            "refreshed": len(summary.get("apps_refreshed", [])), "drift_checked": len(summary.get("drift_checked", [])),
            "errors": summary.get("errors", [])[:5], "left": len(summary.get("left", [])),
            "published": published, "pulled": pulled, "withheld": fleet.bridge.withheld - withheld,
            "message_bytes": round((fleet.bridge.bytes - sent) / max(1, pulled), 1),
            **invocation_summary(fleet.frontend, seen), "billed": billed_total(calls),
            "steps_per_app": round(len(steps) / sample_size, 3),
            "billed_per_step": round(billed_total(calls) / max(1, len(calls)), 4),
            "store": store_total(steps),
            "store_per_step": {k: round(v / max(1, len(steps)), 3) for k, v in store_total(steps).items()},
            "store_objects_changed": dict(scale.store_writes(before, scale.store_snapshot(store))),
            "cpu": stepprobe.summary(steps)}


def report(m: Run) -> str:
    c, n = m.cold, m.noop
    poll = n.get("poll") or {}
    lines = [
        f"{m.apps:,} apps / {m.repos} repos, {m.sample:,} sampled, {m.workers} reconcile instances ({m.run})",
        "load average (1/5/15 min) by phase: " + "; ".join(f"{k} {'/'.join(map(str, v))}" for k, v in m.load.items()),
        f"cold tick: poll answered in {c.get('tick_seconds')}s ({(c.get('poll') or {}).get('cpu')}s CPU, store "
        f"{(c.get('poll') or {}).get('store')}); {c.get('published')} published, {c.get('pulled')} pulled, "
        f"{c.get('withheld')} withheld; sample Synced+Healthy after {c.get('seconds_to_sample_done')}s; "
        f"{c.get('steps_per_app')} steps per app, {c.get('billed_per_app')} billed s per app, store per app "
        f"{c.get('store_per_app')}",
        f"no-op tick: poll answered in {n.get('tick_seconds')}s ({poll.get('cpu')}s CPU, store {poll.get('store')}); "
        f"{n.get('ls_remote')} ls-remote of the app repos, {n.get('ls_remote_config')} of the config source; "
        f"{n.get('published')} published, {n.get('pulled')} pulled, "
        f"{n.get('message_bytes')} bytes each; fan-out until quiet {n.get('fan_out_seconds')}s",
        f"no-op steps (sample): {n.get('steps')} steps, {n.get('steps_per_app')} per app, "
        f"{n.get('instance_seconds')} instance-s, {n.get('billed_per_step')} billed s per step, store per step "
        f"{n.get('store_per_step')}; store objects changed {n.get('store_objects_changed')}",
        f"config load, fresh interpreter: {m.config_load}",
        f"poll instance peak RSS {m.poll_peak_rss_mib} MiB; store {m.store_bytes / 2**20:.1f} MiB",
        f"simulated: {m.simulated or 'nothing'}",
    ]
    return "\n".join(lines)


def _on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    import logging

    from tidecd.base import logs

    parser = argparse.ArgumentParser(prog="python -m bench.scale10k", description=__doc__.splitlines()[0])
    parser.add_argument("--apps", type=int, default=int(os.environ.get("TIDECD_SCALE10K_APPS", 10000)))
    parser.add_argument("--repos", type=int, default=int(os.environ.get("TIDECD_SCALE10K_REPOS", 200)))
    parser.add_argument("--sample", type=int, default=int(os.environ.get("TIDECD_SCALE10K_SAMPLE", 500)))
    parser.add_argument("--workers", type=int, default=int(os.environ.get("TIDECD_SCALE_WORKERS", 0)))
    parser.add_argument("--json", type=Path, help="where the counts go (default ~/.cache/tidecd/bench-scale10k/)")
    args = parser.parse_args(argv)
    logs.configure(logging.WARNING)
    signal.signal(signal.SIGTERM, _on_sigterm)  # `finally` then stops every process the run started
    scenario = scale.Scenario(args.apps, args.repos, name="s10k")
    commit = commit_of(Path(__file__).resolve().parents[1])  # at the start: the code the functions run
    bench = Bench(Path(tempfile.mkdtemp(prefix="tidecd-scale10k-")))
    try:
        m = measure(bench, scenario, args.sample, args.workers or choose_workers())
    finally:
        bench.close()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    m.run = f"tidecd {commit}, {when}, load {'/'.join(map(str, m.load['end']))}"
    doc = m.__dict__
    target = args.json or CACHE / f"scale10k-{m.apps}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(doc, indent=1))
    print(report(m))
    print()
    print(cost.markdown([cost.Counts.from_run(doc)]))
    print(f"\ncounts kept in {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
