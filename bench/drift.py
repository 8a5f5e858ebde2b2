"""Drift (issue 27): the time from someone's change of a self-healed app's object to its repair.

tidecd with audit events: a control plane of this group's own whose API server sends its audit events to
the webhook function (the audit webhook backend in batch mode, at most 200 ms per batch, `tidecd dev cluster
up --audit-webhook`), the webhook and api targets as functions-framework processes (locally, the webhook's
in-process scheduler runs the step). A second person, alice@example.com (a static token user), scales the
app's Deployment with `kubectl scale`; the time is from kubectl's return until the live object is back.

Each run starts from a fresh revision (a commit and its sync before it), so each repair is the revision's
first: Argo CD's self-heal backoff (2 s, 6 s, 18 s ... between repairs of one revision) would otherwise be
what is measured. Without audit events the repair waits for the next poll tick (three minutes, plus up to
`TIDECD_POLL_JITTER`).

Then the same change, by the same person, on the same control plane, to the peers' own copies of the app
(their own namespace and repository), each with the settings a user gets (the drivers of
`tidecd_dev.peers`, as `bench peers` and `bench-scale` run them):

- Argo CD v3.6.1 with `selfHeal`: every controller flag its default (`--app-resync` 120 s and its 60 s
  jitter, no `--self-heal-timeout-seconds`, so the self-heal backoff: 2 s, x3, at most 300 s). It sees the
  change through its watch of the cluster (its informer cache), refreshes the app and syncs what drifted.
  Each run is a fresh revision too (a commit, then its refresh annotation, as its webhook does).
- Flux v1.9.6: GitRepository and Kustomization at `interval: 1m` (what `flux bootstrap` writes for the
  source; it writes 10m for the Kustomization, which would wait ten times as long). kustomize-controller
  corrects drift only when its interval comes around, so each change is made at a random point of the
  interval (after a wait drawn from 0 to 60 s, untimed): the median is then about half an interval.

Every tool's change waits `SETTLE` s after its sync ended (Argo CD's first self-heal waits 2 s after the
last operation). A peer that does not build or start gets a row saying why.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
import traceback
from collections.abc import Callable

from bench.fixtures import Installation, Repo, application, configmap, create_namespaces, deployment, write_app
from bench.functions import Functions
from bench.harness import Bench, Row, median, say, spread
from tidecd.base.model import ResourceKey
from tidecd.clients.cluster import KubeCluster
from tidecd_dev import peers
from tidecd_dev.devcluster import USER, DevCluster, free_port

GROUP = "drift"
RUNS = 5
FLUX_RUNS = int(os.environ.get("TIDECD_BENCH_DRIFT_FLUX_RUNS", "3"))  # each about a minute
APP, NAMESPACE = "drift-app", "bench-drift"
REPAIR_TIMEOUT = 60.0
SETTLE = 3.0  # seconds from a sync's end to the change: past Argo CD's first self-heal backoff (2 s)
FLUX_INTERVAL = 60  # seconds: the GitRepository's and the Kustomization's interval
ARGO_SETTINGS = ("selfHeal, automated prune; controller defaults: --app-resync 120 (+ jitter 60), self-heal "
                 "backoff 2 s ×3 ≤ 300 s; repo-server and redis defaults; drift seen through its watch")
FLUX_SETTINGS = (f"GitRepository and Kustomization interval {FLUX_INTERVAL // 60}m (prune), controller defaults; "
                 "drift corrected at the Kustomization's interval; each change at a random point of it")
BUILDS = {"Argo CD": ("argocd", "redis-server"), "Flux": ("source-controller", "kustomize-controller")}
_BUILD_ERRORS: dict[str, str] = {}


def prebuild() -> dict[str, str]:
    """Build the peers on first use (scripts/tools.sh, cached), before the bench leaves the host's network."""
    for name, binaries in BUILDS.items():
        try:
            for binary in binaries:
                peers.ensure_built(binary)
        except Exception as exc:  # noqa: BLE001 - reported as the peer's row
            _BUILD_ERRORS[name] = f"did not build: {type(exc).__name__}: {str(exc)[:300]}"
    return dict(_BUILD_ERRORS)


def run(bench: Bench) -> list[Row]:
    port = free_port()  # the webhook's, named in the API server's audit webhook kubeconfig before it listens
    dev = DevCluster(workdir=bench.dir("drift/cluster"), kwok=True, audit_webhook=f"http://127.0.0.1:{port}/audit")
    say("drift: starting a control plane whose audit events go to the webhook function")
    try:
        dev.start()
        return _measure(bench, dev, port)
    finally:
        dev.stop()


def _measure(bench: Bench, dev: DevCluster, port: int) -> list[Row]:
    load = [os.getloadavg()]
    times = _tidecd(bench, dev, port)
    ours = median(times)
    rows = [Row(GROUP, "kubectl scale → restored (audit webhook, selfHeal)", ours, None, "",
                f"the revision's first repair, by {USER}; {spread(times)}; without audit events: the next "
                "poll tick (≤ 3 min + jitter)")]
    for name, measure, settings in (("Argo CD", _argocd, ARGO_SETTINGS), ("Flux", _flux, FLUX_SETTINGS)):
        label = f"kubectl scale → restored, vs {name}"
        if name in _BUILD_ERRORS:
            rows.append(Row(GROUP, label, ours, None, name, f"{name} {_BUILD_ERRORS[name]}"))
            continue
        if name == "Flux" and FLUX_RUNS < 1:
            rows.append(Row(GROUP, label, ours, None, name, "Flux not run: TIDECD_BENCH_DRIFT_FLUX_RUNS=0"))
            continue
        try:
            theirs = measure(bench, dev)
        except Exception as exc:  # noqa: BLE001 - one peer's failure leaves the others' numbers
            traceback.print_exc(file=sys.stderr)
            rows.append(Row(GROUP, label, ours, None, name, f"{name} failed: {type(exc).__name__}: {str(exc)[:300]}"))
            continue
        load.append(os.getloadavg())
        say(f"drift: {name}: kubectl scale → restored {[round(t, 2) for t in theirs]}")
        rows.append(Row(GROUP, label, ours, median(theirs), name,
                        f"{name}: {settings}; {spread(theirs)}; tidecd {spread(times)}; load average (1/5/15 min) "
                        + ", then ".join("/".join(f"{x:.1f}" for x in one) for one in (load[0], load[-1]))))
    return rows


def _scale_as_alice(dev: DevCluster, namespace: str) -> None:
    subprocess.run(["kubectl", "--kubeconfig", str(dev.user_kubeconfig), "-n", namespace, "scale",
                    "deployment/web", "--replicas=3"], check=True, capture_output=True, timeout=60)


def _until_restored(kube: KubeCluster, namespace: str, timeout: float, what: str) -> float:
    """Seconds from now until the Deployment `web` in `namespace` is back at 1 replica."""
    web = ResourceKey("apps", "Deployment", namespace, "web")
    start = time.perf_counter()
    while int(((kube.get(web) or {}).get("spec") or {}).get("replicas", -1)) != 1:
        if time.perf_counter() - start > timeout:
            raise TimeoutError(f"{what}: the Deployment was not restored within {timeout:.0f}s")
        time.sleep(0.05)
    return time.perf_counter() - start


def _wait(what: str, check: Callable[[], bool], timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.1)


def _argocd(bench: Bench, dev: DevCluster) -> list[float]:
    """Argo CD with selfHeal: each run a fresh revision synced (its refresh annotation), then the change."""
    namespace = f"{NAMESPACE}-argo"
    create_namespaces(str(dev.kubeconfig), [namespace])
    repo = Repo(bench.git, "drift-argo", bench.dir("drift/repo-argo"))
    kube = KubeCluster.from_kubeconfig(str(dev.kubeconfig))
    # --app-resync 120 and no --self-heal-timeout-seconds: the flags' defaults (the driver names both)
    argo = peers.ArgoCD(dev.kubeconfig, bench.dir("drift/argocd"), reach=[bench.git.url], namespace="argocd-drift",
                        app_resync=120, self_heal_timeout=0)
    name = "drift-argo"
    say("drift: starting Argo CD (untimed)")
    with argo:
        times = []
        for i in range(RUNS):
            repo.write("app/objects.yaml", [configmap("settings", value=f"v{i}"), deployment("web")])
            sha = repo.commit_and_push(f"settings v{i}")
            if i == 0:
                argo.apply_application(name, repo.url, "app", namespace, prune=True, self_heal=True)
            else:
                argo.refresh(name)

            def synced(sha: str = sha) -> bool:
                st = argo.status(name)
                return ((st.sync, st.revision, st.operation_phase, st.operation_revision)
                        == ("Synced", sha, "Succeeded", sha))

            _wait(f"Argo CD synced at {sha[:8]}", synced)
            time.sleep(SETTLE)
            _scale_as_alice(dev, namespace)
            times.append(_until_restored(kube, namespace, REPAIR_TIMEOUT, f"Argo CD run {i + 1}"))
        return times


def _flux(bench: Bench, dev: DevCluster) -> list[float]:
    """Flux at interval 1m: the change at a random point of the interval, the repair at its next tick."""
    namespace = f"{NAMESPACE}-flux"
    create_namespaces(str(dev.kubeconfig), [namespace])
    repo = Repo(bench.git, "drift-flux", bench.dir("drift/repo-flux"))
    repo.write("app/objects.yaml", [configmap("settings"), deployment("web")])
    sha = repo.commit_and_push("settings")
    kube = KubeCluster.from_kubeconfig(str(dev.kubeconfig))
    flux = peers.Flux(dev.kubeconfig, bench.dir("drift/flux"), namespace="flux-drift")
    name, interval = "drift-flux", f"{FLUX_INTERVAL // 60}m"
    say("drift: starting Flux (untimed)")
    with flux:
        flux.git_repository(name, repo.url, interval=interval)
        flux.kustomization(name, name, "./app", interval=interval, target_namespace=namespace)
        flux.wait_ready("Kustomization", name, sha=sha)
        times = []
        draw = random.Random(27)  # the same phases in every run of the bench
        for i in range(FLUX_RUNS):
            time.sleep(max(SETTLE, draw.uniform(0, FLUX_INTERVAL)))
            _scale_as_alice(dev, namespace)
            times.append(_until_restored(kube, namespace, 2 * FLUX_INTERVAL + 30, f"Flux run {i + 1}"))
        return times


def _tidecd(bench: Bench, dev: DevCluster, port: int) -> list[float]:
    inst = Installation(bench.dir("drift/installation"), str(dev.kubeconfig))
    repo = Repo(bench.git, APP, bench.dir("drift/repo"))
    create_namespaces(inst.kubeconfig, [NAMESPACE])
    app = application(APP, repo.url, "app", NAMESPACE, automated=True)
    app["spec"]["syncPolicy"]["automated"]["selfHeal"] = True
    write_app(inst.config_dir, app)
    fns = Functions(bench, inst, ports={"webhook": port}, env={"TIDECD_AUDIT_TOKEN": dev.audit_token})
    kube = KubeCluster.from_kubeconfig(inst.kubeconfig)
    before = "0" * 40
    times = []
    for i in range(RUNS):
        repo.write("app/objects.yaml", [configmap("settings", value=f"v{i}"), deployment("web")])
        after = repo.commit_and_push(f"settings v{i}")
        status, _ = fns.push_event(repo, before, after, ["app/objects.yaml"])
        if status != 202:
            raise RuntimeError(f"webhook answered HTTP {status} to the push (expected 202)")
        fns.wait_synced(APP, after)  # a fresh revision: this repair is its first (no self-heal backoff)
        before = after
        time.sleep(SETTLE)
        _scale_as_alice(dev, NAMESPACE)
        times.append(_until_restored(kube, NAMESPACE, REPAIR_TIMEOUT,
                                     f"tidecd run {i + 1} (see {bench.root}/function-webhook.log)"))
    drift = fns.app_status(APP).get("drift") or {}
    if drift.get("user") != USER:
        raise RuntimeError(f"the repaired drift names {drift.get('user')!r}, not {USER}")
    say(f"drift: tidecd: kubectl scale → restored {[round(t, 2) for t in times]}")
    return times
