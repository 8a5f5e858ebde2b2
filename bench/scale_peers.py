"""The scale scenario's peers (issue 17): the same apps, same repos, same control plane and same run as
tidecd's (bench/scale.py), through Flux's controllers and through Argo CD's.

- **Flux v1.9.6**: one GitRepository per repo and one Kustomization per app (`wait: true`, prune, interval
  1 h), source-controller `--concurrent=10` and kustomize-controller `--concurrent=20` as flux-benchmark ran
  them (https://github.com/fluxcd/flux-benchmark/blob/main/RESULTS.md: "source-controller (1CPU / 1Gi /
  concurrency 10)", "kustomize-controller (2CPU / 1Gi / concurrency 20)"); every other flag its default.
  Here no CPU limit: both controllers may use the machine's 2 cores.
- **Argo CD v3.6.1**: one Application per app, automated sync with prune; the controller's defaults
  (20 status and 10 operation processors, kubectl parallelism 20), `--app-resync 3600` so only the
  creation triggers; repo server and redis defaults.

Each tool is started and warmed untimed (one app of its own synced first), then the clock starts and all
its objects are created (4 requests in flight), which is its natural trigger: a Kustomization or an
Application reconciles when created. The clock stops when the last object reads done in its tool's own
word (Kustomization Ready=True at its generation; Application Synced + Healthy after a Succeeded sync),
seen through one watch stream. Measured as for tidecd: total, p50/p99 per app (from the clock's start),
peak RSS of every process (VmHWM), the resident set each holds idle (VmRSS `IDLE_SETTLE` s after the last
app, default 60 s), API calls per app (apiserver_request_total deltas, cluster-wide,
read 5 s after the last app is done), git requests per repo (the git server's counters). The tools run
one after another; the ingress stand-in publishes an address on every Ingress for each of them alike.

Names and namespaces are the tool's own (`flux-app-0007` into `flux-scale-r07`); at the end every
Kustomization, GitRepository and Application is deleted with its finalizers removed first (the
controllers are stopped by then), and the peers' namespaces are deleted, so nothing stays Terminating.
A peer that does not build or start gets a row saying why.

`python -m bench.scale_peers --apps 50 --repos 5` runs only the peers (for debugging); `make bench-scale`
runs them after tidecd (TIDECD_SCALE_PEERS=Flux,"Argo CD" picks; "none" skips them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import cpuuse
from bench.harness import Bench, Row, say
from tidecd_dev import peers, scale
from tidecd_dev import scale_peers as sp

if TYPE_CHECKING:
    from bench.scale import Measured

GROUP = "scale"
PEERS = ("Flux", "Argo CD")
_chosen = os.environ.get("TIDECD_SCALE_PEERS", ",".join(PEERS))
CHOSEN = [] if _chosen.strip().lower() == "none" else [p.strip() for p in _chosen.split(",") if p.strip() in PEERS]
TIMEOUT = float(os.environ.get("TIDECD_SCALE_PEER_TIMEOUT", "900"))
SETTLE = 5.0
# Seconds after the last app is done (and the API counters read) before the idle resident set is read.
IDLE_SETTLE = float(os.environ.get("TIDECD_SCALE_IDLE_SETTLE", "60"))
FLUX_SOURCE_CONCURRENT, FLUX_KUSTOMIZE_CONCURRENT = 10, 20  # flux-benchmark's RESULTS.md
FLUX_NS, ARGO_NS = "flux-scale", "argocd-scale"
BUILDS = {"Flux": ("source-controller", "kustomize-controller"), "Argo CD": ("argocd", "redis-server")}
DONE = {"Flux": "every Kustomization Ready=True (wait: true)",
        "Argo CD": "every Application Synced+Healthy after a Succeeded sync"}
SETTINGS = {
    "Flux": f"source-controller --concurrent={FLUX_SOURCE_CONCURRENT}, kustomize-controller "
            f"--concurrent={FLUX_KUSTOMIZE_CONCURRENT} (flux-benchmark's), other flags default, no CPU limit; "
            "interval 1h",
    "Argo CD": "controller defaults (status processors 20, operation processors 10, kubectl parallelism 20), "
               "--app-resync 3600; repo-server defaults",
}
LOGS = Path.home() / ".cache" / "tidecd" / "bench-scale-peers"  # each peer's logs of the last run
Progress = Callable[[str, int, int], None]
_BUILD_ERRORS: dict[str, str] = {}


@dataclass
class PeerMeasured:
    """One peer's run of the scenario."""

    tool: str
    apps: int
    repos: int
    total: float = float("nan")
    created: float = 0.0  # seconds from the clock's start until the last object was created
    per_app: list[float] = field(default_factory=list)
    per_app_own: list[float] = field(default_factory=list)  # from each object's own creation
    created_at: dict[str, float] = field(default_factory=dict)
    rss: dict[str, int] = field(default_factory=dict)  # process → VmHWM bytes
    idle_rss: dict[str, int] = field(default_factory=dict)  # process → VmRSS bytes, idle after every app is done
    api: scale.ApiCalls | None = None
    git_per_repo: dict[str, int] = field(default_factory=dict)
    load: str = ""  # load averages (1, 5, 15 min) when the last app was done
    phases: dict[str, float] = field(default_factory=dict)  # where the time went, by the tool's own status
    missed: list[str] = field(default_factory=list)
    broken: str = ""  # why there are no numbers
    cpu_use: cpuuse.CpuUse | None = None  # the machine's CPU from the clock's start until the last app was done

    def to_json(self) -> dict[str, Any]:
        doc = {k: v for k, v in self.__dict__.items()
               if k not in ("per_app", "per_app_own", "created_at", "api", "cpu_use")}
        doc["cpu_use"] = self.cpu_use.to_json() if self.cpu_use else None
        doc["p50"], doc["p99"] = scale.percentile(self.per_app, 50), scale.percentile(self.per_app, 99)
        doc["own_p50"] = scale.percentile(self.per_app_own, 50)
        doc["own_p99"] = scale.percentile(self.per_app_own, 99)
        doc["api"] = self.api.__dict__ if self.api else None
        return doc


def prepare() -> str:
    """Build the chosen peers on first use (before the network goes: a first build fetches modules), then
    put this process in a loopback-only network namespace, so Argo CD's hard-wired 0.0.0.0 listener is
    reachable from nowhere and its traffic needs no relay. Returns what it did, for the log."""
    prebuild()
    if not CHOSEN:
        return "scale peers: none chosen"
    from bench.__main__ import isolate

    return isolate()


def prebuild() -> dict[str, str]:
    """Build the chosen peers on first use (scripts/tools.sh, cached); per peer, why it did not build."""
    for name in CHOSEN:
        if name in _BUILD_ERRORS:
            continue
        try:
            for binary in BUILDS[name]:
                peers.ensure_built(binary)
        except Exception as exc:  # noqa: BLE001 - reported as the peer's row
            _BUILD_ERRORS[name] = f"did not build: {type(exc).__name__}: {str(exc)[:300]}"
    return dict(_BUILD_ERRORS)


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def ensure_repos(bench: Bench, scenario: scale.Scenario) -> dict[str, str]:
    """The scenario's repos (pushed by tidecd's side already, else here); {repo: clone URL}."""
    repos = scenario.repo_names()
    if not all((bench.git.root / f"{repo}.git").is_dir() for repo in repos):
        return scale.create_repos(bench.git, bench.dir("scale-peers/repos"), scenario)
    return {repo: bench.git.repo_url(repo) for repo in repos}


def _measure(bench: Bench, scenario: scale.Scenario, m: PeerMeasured, objects: list[list[sp.Obj]],
             readiness: sp.Readiness, watch_path: str, alive: Callable[[], None], progress: Progress) -> float:
    """The timed window: create `objects` (in order of the lists), wait for every name in `readiness`;
    returns when the clock started (unix seconds)."""
    dev = bench.cluster()
    api = sp.Api(dev)
    watch = sp.ObjectWatch(api, watch_path, readiness).start()
    try:
        bench.git.reset_counts()
        api_before = scale.api_requests(dev)
        cpu_before = cpuuse.snapshot()
        started = time.time()
        total = sum(len(batch) for batch in objects)
        count = [0]

        def created(obj: sp.Obj) -> None:
            m.created_at[obj["metadata"]["name"]] = time.time()
            count[0] += 1
            if count[0] % 25 == 0 or count[0] == total:
                progress(f"{m.tool}: objects created", count[0], total)

        for batch in objects:
            api.apply_all(batch, on_done=created)
        m.created = time.time() - started
        say(f"scale peers: {m.tool}: {total} objects created in {m.created:.1f}s")
        ok = readiness.wait(TIMEOUT, alive=alive,
                            progress=lambda n: progress(f"{m.tool}: {DONE[m.tool]}", n, len(readiness.names)))
        m.cpu_use = cpuuse.between(cpu_before, cpuuse.snapshot())
        m.load = load_average()
        m.per_app = [t - started for t in readiness.done.values()]
        m.per_app_own = [t - m.created_at[name] for name, t in readiness.done.items() if name in m.created_at]
        m.total = (max(readiness.done.values()) - started) if ok else float("nan")
        if not ok:
            m.missed = [f"{len(readiness.done)}/{len(readiness.names)} done after {TIMEOUT:.0f}s",
                        *readiness.stragglers()]
        time.sleep(SETTLE)
        m.api = scale.ApiCalls.between(api_before, scale.api_requests(dev))
        counts = scale.ls_remotes(bench.git, scenario.repo_names())
        kinds = sorted({k for c in counts.values() for k in c})
        m.git_per_repo = {k: int(statistics.median([c.get(k, 0) for c in counts.values()])) for k in kinds}
        if watch.errors:
            say(f"scale peers: {m.tool}: watch errors (retried): {watch.errors[:3]}")
        return started
    finally:
        watch.stop()


def run_flux(bench: Bench, scenario: scale.Scenario, urls: dict[str, str], progress: Progress) -> PeerMeasured:
    dev = bench.cluster()
    m = PeerMeasured("Flux", scenario.apps, scenario.repos)
    scale.create_namespaces(dev, [*(scenario.namespace(sp.FLUX_PREFIX, r) for r in scenario.repo_names()),
                                  "flux-warmup"])
    flux = peers.Flux(dev.kubeconfig, bench.dir("scale-peers/flux"), namespace=FLUX_NS,
                      concurrent=FLUX_SOURCE_CONCURRENT, kustomize_concurrent=FLUX_KUSTOMIZE_CONCURRENT)
    api = sp.Api(dev)
    try:
        progress("Flux: start + warm-up (untimed)", 0, 1)
        flux.__enter__()
        first = scenario.repo_names()[0]
        flux.git_repository("warmup", urls[first])
        flux.kustomization("warmup", "warmup", f"./apps/{scenario.app_names()[0]}", wait=True,
                           target_namespace="flux-warmup")
        flux.wait_ready("Kustomization", "warmup", timeout=300)
        progress("Flux: start + warm-up (untimed)", 1, 1)
        sources, kustomizations = sp.flux_objects(scenario, urls, FLUX_NS)
        readiness = sp.Readiness(frozenset(o["metadata"]["name"] for o in kustomizations), sp.kustomization_done,
                                 sp.kustomization_state)
        started = _measure(bench, scenario, m, [sources, kustomizations], readiness,
                           sp.KUSTOMIZATIONS.format(ns=FLUX_NS), flux.procs.check_alive, progress)
        listed = api.call("GET", sp.KUSTOMIZATIONS.format(ns=FLUX_NS)).get("items") or []
        m.phases = sp.flux_phases([k for k in listed if k["metadata"]["name"] in readiness.names], started)
        m.rss = flux.peak_rss()
        m.idle_rss = idle_rss(flux)
    finally:
        keep_logs(flux.workdir, "flux")
        flux.stop()
        for path in (sp.KUSTOMIZATIONS, sp.GITREPOSITORIES):
            _teardown(api, path.format(ns=FLUX_NS))
    return m


def run_argocd(bench: Bench, scenario: scale.Scenario, urls: dict[str, str], progress: Progress) -> PeerMeasured:
    dev = bench.cluster()
    m = PeerMeasured("Argo CD", scenario.apps, scenario.repos)
    scale.create_namespaces(dev, [*(scenario.namespace(sp.ARGO_PREFIX, r) for r in scenario.repo_names()),
                                  "argo-warmup"])
    argo = peers.ArgoCD(dev.kubeconfig, bench.dir("scale-peers/argocd"), reach=[bench.git.url], namespace=ARGO_NS)
    api = sp.Api(dev)
    try:
        progress("Argo CD: start + warm-up (untimed)", 0, 1)
        argo.__enter__()
        first = scenario.repo_names()[0]
        argo.apply_application("argo-warmup", urls[first], f"apps/{scenario.app_names()[0]}", "argo-warmup")
        argo.wait_status("argo-warmup", timeout=300)
        progress("Argo CD: start + warm-up (untimed)", 1, 1)
        apps = sp.argo_applications(scenario, urls, ARGO_NS)
        readiness = sp.Readiness(frozenset(o["metadata"]["name"] for o in apps), sp.application_done,
                                 sp.application_state)
        started = _measure(bench, scenario, m, [apps], readiness, sp.APPLICATIONS.format(ns=ARGO_NS),
                           argo.procs.check_alive, progress)
        m.rss = argo.peak_rss()
        m.idle_rss = idle_rss(argo)
        listed = api.call("GET", sp.APPLICATIONS.format(ns=ARGO_NS)).get("items") or []
        m.phases = sp.argo_phases([a for a in listed if a["metadata"]["name"] in readiness.names], started)
    finally:
        keep_logs(argo.workdir, "argocd")
        argo.stop()
        _teardown(api, sp.APPLICATIONS.format(ns=ARGO_NS))
    return m


def idle_rss(runner: peers.ArgoCD | peers.Flux) -> dict[str, int]:
    """What the peer holds resident between events: every process's VmRSS once it has had nothing to do
    for `IDLE_SETTLE` seconds after its last app was done (its watches and caches of every app remain)."""
    say(f"scale peers: {IDLE_SETTLE:.0f}s idle before reading the resident set")
    time.sleep(IDLE_SETTLE)
    runner.procs.check_alive()
    return runner.rss()


def keep_logs(workdir: Path, name: str) -> None:
    """Copy a peer's logs to ~/.cache/tidecd/bench-scale-peers/NAME/ (the run's temp dir is removed)."""
    import shutil

    target = LOGS / name
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True, exist_ok=True)
    for log in workdir.glob("*.log"):
        shutil.copy2(log, target / log.name)


def _teardown(api: sp.Api, path: str) -> None:
    try:
        deleted = sp.strip_and_delete(api, path)
        say(f"scale peers: deleted {deleted} objects of {path}")
    except Exception as exc:  # noqa: BLE001 - the CRD may never have been applied (the peer did not start)
        say(f"scale peers: teardown of {path}: {type(exc).__name__}: {str(exc)[:200]}")


RUNNERS: dict[str, Callable[[Bench, scale.Scenario, dict[str, str], Progress], PeerMeasured]] = {
    "Flux": run_flux, "Argo CD": run_argocd}


def run_peers(bench: Bench, scenario: scale.Scenario, progress: Progress) -> list[PeerMeasured]:
    """Every chosen peer on `scenario`, one after another; a peer that fails gets its reason."""
    if not CHOSEN:
        return []
    from tidecd_dev.ingresses import IngressStatusWriter

    dev = bench.cluster()
    urls = ensure_repos(bench, scenario)
    out = []
    with IngressStatusWriter(dev):
        for tool in CHOSEN:
            if tool in _BUILD_ERRORS:
                out.append(PeerMeasured(tool, scenario.apps, scenario.repos, broken=_BUILD_ERRORS[tool]))
                continue
            say(f"scale peers: {tool}: {scenario.apps} apps in {scenario.repos} repos")
            try:
                measured = RUNNERS[tool](bench, scenario, urls, progress)
            except Exception as exc:  # noqa: BLE001 - one peer failing must not hide the other's numbers
                traceback.print_exc(file=sys.stderr)
                measured = PeerMeasured(tool, scenario.apps, scenario.repos,
                                        broken=f"did not run: {type(exc).__name__}: {str(exc)[:400]}")
            say(f"scale peers: {tool}: {measured.to_json()}")
            out.append(measured)
    namespaces = [scenario.namespace(prefix, r) for prefix in (sp.FLUX_PREFIX, sp.ARGO_PREFIX)
                  for r in scenario.repo_names()]
    sp.delete_namespaces(sp.Api(dev), [*namespaces, "flux-warmup", "argo-warmup", FLUX_NS, ARGO_NS])
    return out


# -- rows ------------------------------------------------------------------------------------------------------


def _mib(values: dict[str, int] | list[int]) -> str:
    items = values.items() if isinstance(values, dict) else enumerate(values)
    return ", ".join(f"{k}: {v / 2**20:.0f} MiB" for k, v in items)


def _per_app(api: scale.ApiCalls | None, apps: int) -> str:
    if api is None:
        return "not read"
    return (f"{api.on_app_kinds / apps:.1f} on the app's 4 kinds ({api.writes_on_app_kinds / apps:.1f} writes, "
            f"{api.dry_runs / apps:.1f} dry-runs), {api.total / apps:.1f} in all")


def rows(tidecd: Measured | None, measured: list[PeerMeasured]) -> list[Row]:
    """The peers' rows, each against tidecd's figure of the same run (ratio = tidecd / peer)."""
    out: list[Row] = []
    t_total = tidecd.total if tidecd else None
    t_p50 = scale.percentile(tidecd.per_app, 50) if tidecd else None
    t_p99 = scale.percentile(tidecd.per_app, 99) if tidecd else None
    for m in measured:
        title = f"{m.apps} apps / {m.repos} repos from cold, vs {m.tool}"
        if m.broken:
            out.append(Row(GROUP, title, t_total, None, m.tool, f"{m.tool} {m.broken}"))
            continue
        total = None if m.total != m.total else m.total  # nan: not every app got done
        notes = (f"{m.tool}: {DONE[m.tool]}; objects created in {m.created:.1f}s of it; {SETTINGS[m.tool]}; "
                 f"load {m.load}")
        if m.missed:
            notes += "; NOT ALL DONE: " + "; ".join(m.missed)
        out.append(Row(GROUP, title, t_total, total, m.tool, notes))
        own = (f"; from each {m.tool} object's own creation: p50 {scale.percentile(m.per_app_own, 50):.1f}s, "
               f"p99 {scale.percentile(m.per_app_own, 99):.1f}s") if m.per_app_own else ""
        out.append(Row(GROUP, f"per app p50, vs {m.tool}", t_p50, scale.percentile(m.per_app, 50), m.tool,
                       f"from the clock's start (tidecd: the poll tick; peer: its first object created){own}"))
        phases = ", ".join(f"{k} {v:.1f}s" for k, v in m.phases.items())
        mine = ", ".join(f"{k} {v:.1f}s" for k, v in tidecd.phases.items()) if tidecd else ""
        out.append(Row(GROUP, f"per app p99, vs {m.tool}", t_p99, scale.percentile(m.per_app, 99), m.tool,
                       "; ".join(filter(None, [f"{m.tool}'s own status: {phases}" if phases else "",
                                               f"tidecd: {mine}" if mine else ""]))))
        tidecd_rss = f"tidecd instances {_mib(tidecd.peak_rss)}" if tidecd else ""
        out.append(Row(GROUP, f"peak RSS, vs {m.tool}", None, None, m.tool,
                       f"{m.tool} {_mib(m.rss)} (sum {sum(m.rss.values()) / 2**20:.0f} MiB); {tidecd_rss}"))
        held = (f"tidecd 0 MiB (no process between events; the store holds {tidecd.store_bytes / 2**20:.1f} MiB "
                f"for its {tidecd.apps} apps)") if tidecd else "tidecd 0 MiB (no process between events)"
        out.append(Row(GROUP, f"idle memory held for {m.apps} apps, vs {m.tool}", None, None, m.tool,
                       f"{m.tool} {_mib(m.idle_rss)} (sum {sum(m.idle_rss.values()) / 2**20:.0f} MiB; VmRSS "
                       f"{IDLE_SETTLE:.0f}s after its last app was done); {held}"))
        tidecd_api = f"; tidecd {_per_app(tidecd.api, tidecd.apps)}" if tidecd else ""
        out.append(Row(GROUP, f"API calls per app, vs {m.tool}", None, None, m.tool,
                       f"{m.tool} {_per_app(m.api, m.apps)}{tidecd_api}"))
        if m.cpu_use is not None:
            mine_cpu = tidecd.cpu_use if tidecd else None
            out.append(Row(GROUP, f"machine CPU until all done (CPU-s), vs {m.tool}",
                           mine_cpu.busy if mine_cpu else None, m.cpu_use.busy, m.tool,
                           f"{m.tool}: {m.cpu_use.text()}" + (f"; tidecd: {mine_cpu.text()}" if mine_cpu else "")))
        tidecd_git = f"; tidecd {tidecd.git_per_repo}" if tidecd else ""
        out.append(Row(GROUP, f"git requests per repo (median), vs {m.tool}", None, None, m.tool,
                       f"{m.tool} {m.git_per_repo}{tidecd_git}"))
    return out


def main(argv: list[str] | None = None) -> int:
    """Only the peers (debugging): `python -m bench.scale_peers --apps 50 --repos 5`."""
    import json
    import logging
    import signal
    import tempfile

    from bench.harness import print_plain, print_table, progress_bar
    from bench.scale import _on_sigterm
    from tidecd.base import logs

    parser = argparse.ArgumentParser(prog="python -m bench.scale_peers", description=main.__doc__)
    parser.add_argument("--apps", type=int, default=int(os.environ.get("TIDECD_SCALE_APPS", 1000)))
    parser.add_argument("--repos", type=int, default=int(os.environ.get("TIDECD_SCALE_REPOS", 50)))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plain", action="store_true")
    args = parser.parse_args(argv)
    logs.configure(logging.WARNING)
    signal.signal(signal.SIGTERM, _on_sigterm)
    say(prepare())
    scenario = scale.Scenario(args.apps, args.repos)
    bench = Bench(Path(tempfile.mkdtemp(prefix="tidecd-scale-peers-")))
    try:
        with progress_bar() as progress:
            measured = run_peers(bench, scenario, progress)
    finally:
        bench.close()
    if args.json:
        args.json.write_text(json.dumps([m.to_json() for m in measured], indent=1))
    (print_plain if args.plain else print_table)(rows(None, measured))
    return 0 if all(not m.broken and not m.missed for m in measured) else 1


if __name__ == "__main__":
    sys.exit(main())
