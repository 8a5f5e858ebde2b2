"""Explain why (issue 25): a failing pod's reason, events and log lines, in the dashboard (Debian's chromium
via Playwright, against the real api function) and in the CLI (`--server`, and locally), read from the
session's real control plane; a Secret's value never appears.

What is simulated, and how: kwok runs no containers, so the pod's failure is written as the kubelet writes
it, a status patch (`pods/status`: the container waiting in CrashLoopBackOff after 5 restarts, its last
run terminated with Error, exit code 1) and a kubelet-style BackOff Event; the log lines are kwok's
ClusterLogs file (`DevCluster.pod_log`), which kwok's kubelet endpoint serves and the API server proxies
as `pods/log`, the same path a real kubelet's logs take.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.e2e.test_ui import dashboard, log_in, wait_for
from tests.support.apps import GitOps, deployment
from tests.support.browser import screenshot_dir
from tests.support.functions import Functions
from tidecd.base.model import ResourceKey

SECRET_VALUE = "s3cr3t-value-xyz"
PANIC = "panic: cannot connect to postgres:5432: connection refused"


def _now(offset: float = 0.0) -> str:
    return (datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=offset)).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")


def crash(gitops: GitOps, pod: dict[str, Any]) -> None:
    """The pod as the kubelet leaves a crash-looping container: its status and a BackOff Event."""
    name, ns = pod["metadata"]["name"], pod["metadata"]["namespace"]
    image = pod["spec"]["containers"][0]["image"]
    status = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}],
                         "containerStatuses": [{
                             "name": "web", "image": image, "imageID": "", "ready": False, "started": False,
                             "restartCount": 5,
                             "state": {"waiting": {"reason": "CrashLoopBackOff",
                                                   "message": f"back-off 2m40s restarting failed container=web "
                                                              f"pod={name}"}},
                             "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": _now(-3),
                                                          "finishedAt": _now(-1)}}}]}}
    gitops.kube.request("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status", body=status,
                        content_type="application/merge-patch+json")
    gitops.kube.request("POST", f"/api/v1/namespaces/{ns}/events", body={
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{name}.backoff", "namespace": ns},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": name,
                           "uid": pod["metadata"]["uid"]},
        "type": "Warning", "reason": "BackOff", "count": 5, "firstTimestamp": _now(-60)[:19] + "Z",
        "lastTimestamp": _now()[:19] + "Z", "source": {"component": "kubelet", "host": "kwok-node-0"},
        "message": "Back-off restarting failed container web in pod " + name})
    gitops.dev.pod_log.write_text(f"{_now(-2)} stdout F starting web 1.2.3\n{_now(-1)} stderr F {PANIC}\n")


def tidecd(gitops: GitOps, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TIDECD_CONFIG": str(gitops.config_dir), "TIDECD_STORE": str(gitops.store.root),
           "KUBECONFIG": str(gitops.dev.kubeconfig)}
    return subprocess.run([sys.executable, "-m", "tidecd.cli", *args], env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_a_failing_pods_reason_and_logs_are_shown(browser: Any, gitops: GitOps, functions: Functions,
                                                  tmp_path: Path) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
              "stringData": {"password": SECRET_VALUE}}
    gitops.push({"app/web.yaml": [deployment("web", image="registry.example/web:1.2.3"), secret]})
    app = gitops.application()
    gitops.sync()

    def scheduled() -> dict[str, Any] | None:
        pods = [p for p in gitops.kube.list("", "Pod", namespace=gitops.namespace)
                if p["metadata"]["name"].startswith("web-") and (p.get("status") or {}).get("podIP")]
        return pods[0] if pods else None

    pod = wait_for(scheduled, 90, "kwok to run the Deployment's pod")
    pod_name = pod["metadata"]["name"]
    crash(gitops, pod)
    live = gitops.kube.get(ResourceKey("", "Pod", gitops.namespace, pod_name))
    assert live is not None and live["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == \
        "CrashLoopBackOff"  # kwok left the kubelet's status as written

    # The dashboard: the tree's pod opens its details; the reason, last termination, event and log lines.
    base = dashboard(functions)
    shots = screenshot_dir(tmp_path)
    page = log_in(browser, base, functions.token)
    page.goto(f"{base}apps/{app}")
    page.click(f"[data-resource='Pod/{pod_name}'] a[data-open]")
    page.wait_for_selector("[data-resource-detail]")
    assert page.locator("[data-reason]").inner_text() == "CrashLoopBackOff"
    row = page.locator("[data-container=web]")
    assert "CrashLoopBackOff" in row.locator("[data-state]").inner_text()
    assert row.locator("[data-restarts]").inner_text() == "5"
    assert "Error (exit code 1)" in row.locator("[data-last]").inner_text()
    assert "registry.example/web:1.2.3" in row.inner_text()
    assert "Back-off restarting failed container web" in page.locator("[data-event=BackOff]").inner_text()
    stream = page.locator(f"[data-stream='{pod_name}/web']")
    assert PANIC in stream.inner_text() and "starting web 1.2.3" in stream.inner_text()
    page.screenshot(path=str(shots / "resource-pod.png"), full_page=True)
    # following: a new line appears without a reload (htmx polls the logs panel)
    page.click("[data-follow]")
    page.wait_for_selector("[data-following]")
    with gitops.dev.pod_log.open("a") as log:
        log.write(f"{_now()} stdout F retrying in 5s\n")
    wait_for(lambda: "retrying in 5s" in page.locator("[data-logs]").inner_text(), 30, "the followed line")

    # The graph (parent → child): its pod node opens the same details.
    page.goto(f"{base}apps/{app}")
    page.click("[data-graph-link]")
    page.wait_for_selector("svg.graph")
    page.screenshot(path=str(shots / "graph.png"), full_page=True)
    page.click(f"[data-node='Pod/{pod_name}']")
    page.wait_for_selector("[data-resource-detail]")
    assert page.locator("[data-reason]").inner_text() == "CrashLoopBackOff"

    # The Secret: masked on its page and in the app page, never its value.
    page.goto(f"{base}apps/{app}")
    assert SECRET_VALUE not in page.content()
    page.click("[data-resource='Secret/creds'] a[data-open]")
    page.wait_for_selector("[data-resource-detail]")
    assert "++++++++" in page.locator("[data-live]").inner_text()
    assert SECRET_VALUE not in page.content()
    page.context.close()

    # The CLI through the api (--server), and locally: the same reason and lines.
    server = ["--server", base.removesuffix("/ui/"), "--token", functions.token]
    logs = tidecd(gitops, "app", "logs", app, "--kind", "Deployment", "--name", "web", "--tail", "10", *server)
    assert logs.returncode == 0, logs.stderr
    assert PANIC in logs.stdout and "starting web 1.2.3" in logs.stdout
    env = {**os.environ, "TIDECD_CONFIG": str(gitops.config_dir), "TIDECD_STORE": str(gitops.store.root),
           "KUBECONFIG": str(gitops.dev.kubeconfig)}
    with subprocess.Popen([sys.executable, "-m", "tidecd.cli", "app", "logs", app, "--kind", "Pod", "--name",
                           pod_name, "-f", "--timeout", "12", *server], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as follower:
        time.sleep(6)
        with gitops.dev.pod_log.open("a") as log:
            log.write(f"{_now()} stdout F connected after all\n")
        out, err = follower.communicate(timeout=60)
    assert follower.returncode == 0, err
    assert out.count(PANIC) == 1 and out.count("connected after all") == 1, out  # each line once, new ones too
    described = tidecd(gitops, "app", "resources", app, "--kind", "Pod", "--name", pod_name, *server)
    assert described.returncode == 0, described.stderr
    assert "reason: CrashLoopBackOff" in described.stdout and "BackOff" in described.stdout
    tree = tidecd(gitops, "app", "resources", app)
    assert tree.returncode == 0 and pod_name in tree.stdout and "CrashLoopBackOff" in tree.stdout, tree.stdout
    thin_tree = tidecd(gitops, "app", "resources", app, *server)  # the thin client: the same table
    assert (thin_tree.returncode, thin_tree.stdout) == (0, tree.stdout), thin_tree.stderr
    every = tidecd(gitops, "app", "logs", app, "--tail", "10", *server)  # every pod, through the thin client
    assert every.returncode == 0 and PANIC in every.stdout, every.stderr
    for source in ("live", "git"):
        shown = tidecd(gitops, "app", "manifests", app, "--source", source, *server)
        assert shown.returncode == 0 and "++++++++" in shown.stdout, shown.stderr
        assert SECRET_VALUE not in shown.stdout + shown.stderr

    # diff --local: the same directory is in sync (exit 0); a changed image is the step's diff (exit 1).
    local = tmp_path / "local"
    local.mkdir()
    (local / "web.yaml").write_text((gitops.repo.workdir / "app" / "web.yaml").read_text())
    same = tidecd(gitops, "app", "diff", app, "--local", str(local), *server)
    assert same.returncode == 0, same.stdout + same.stderr
    (local / "web.yaml").write_text((local / "web.yaml").read_text().replace("web:1.2.3", "web:1.2.4"))
    started = time.monotonic()
    changed = tidecd(gitops, "app", "diff", app, "--local", str(local))
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert "+      - image: registry.example/web:1.2.4" in changed.stdout, changed.stdout
    assert SECRET_VALUE not in changed.stdout + logs.stdout + logs.stderr
    assert time.monotonic() - started < 60
