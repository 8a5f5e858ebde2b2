"""Drift (issue 27): the time from someone's change of a self-healed app's object to its repair.

tidecd with audit events: a control plane of this group's own whose API server sends its audit events to
the webhook function (the audit webhook backend in batch mode, at most 1 s per batch, `tidecd dev cluster
up --audit-webhook`), the webhook and api targets as functions-framework processes (locally, the webhook's
in-process scheduler runs the step). A second person, alice@example.com (a static token user), scales the
app's Deployment with `kubectl scale`; the time is from kubectl's return until the live object is back.

Each run starts from a fresh revision (a commit and its sync before it), so each repair is the revision's
first: Argo CD's self-heal backoff (2 s, 6 s, 18 s ... between repairs of one revision) would otherwise be
what is measured. Without audit events the repair waits for the next poll tick (three minutes, plus up to
`TIDECD_POLL_JITTER`). Argo CD's and Flux's times for the same change are not measured here yet.
"""

from __future__ import annotations

import subprocess
import time

from bench.fixtures import Installation, Repo, application, configmap, create_namespaces, deployment, write_app
from bench.functions import Functions
from bench.harness import Bench, Row, median, say, spread
from tidecd.base.model import ResourceKey
from tidecd.clients.cluster import KubeCluster
from tidecd_dev.devcluster import USER, DevCluster, free_port

GROUP = "drift"
RUNS = 5
APP, NAMESPACE = "drift-app", "bench-drift"
REPAIR_TIMEOUT = 60.0


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
    inst = Installation(bench.dir("drift/installation"), str(dev.kubeconfig))
    repo = Repo(bench.git, APP, bench.dir("drift/repo"))
    create_namespaces(inst.kubeconfig, [NAMESPACE])
    app = application(APP, repo.url, "app", NAMESPACE, automated=True)
    app["spec"]["syncPolicy"]["automated"]["selfHeal"] = True
    write_app(inst.config_dir, app)
    fns = Functions(bench, inst, ports={"webhook": port}, env={"TIDECD_AUDIT_TOKEN": dev.audit_token})
    kube = KubeCluster.from_kubeconfig(inst.kubeconfig)
    web = ResourceKey("apps", "Deployment", NAMESPACE, "web")

    def replicas() -> int:
        live = kube.get(web) or {}
        return int((live.get("spec") or {}).get("replicas", -1))

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
        subprocess.run(["kubectl", "--kubeconfig", str(dev.user_kubeconfig), "-n", NAMESPACE, "scale",
                        "deployment/web", "--replicas=3"], check=True, capture_output=True, timeout=60)
        start = time.perf_counter()
        while replicas() != 1:
            if time.perf_counter() - start > REPAIR_TIMEOUT:
                raise TimeoutError(f"the Deployment was not restored within {REPAIR_TIMEOUT:.0f}s; see "
                                   f"{bench.root}/function-webhook.log")
            time.sleep(0.05)
        times.append(time.perf_counter() - start)
    drift = fns.app_status(APP).get("drift") or {}
    if drift.get("user") != USER:
        raise RuntimeError(f"the repaired drift names {drift.get('user')!r}, not {USER}")
    say(f"drift: kubectl scale → restored {[round(t, 2) for t in times]}")
    return [Row(GROUP, "kubectl scale → restored (audit webhook, selfHeal)", median(times), None, "",
                f"the revision's first repair, by {USER}; {spread(times)}; without audit events: the next "
                "poll tick (≤ 3 min + jitter)")]
