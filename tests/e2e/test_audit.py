"""Issue 27's acceptance on a control plane that sends its audit events to tidecd: the kube-apiserver's own
audit webhook backend (batch mode) posts to the real webhook function (functions-framework, local mode: the
in-process scheduler runs the steps), on a port chosen before the API server started.

A second person, `alice@example.com` (a static token user of the dev control plane), makes the changes;
tidecd's own steps run in the test process or in the webhook function, as `tidecd` (its user agent)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.apps import GitOps, configmap, deployment
from tests.support.cluster import CONTROL_PLANE_TOOLS, ensure_tools, release_argocd_finalizers
from tests.support.functions import Functions
from tidecd.base.model import SyncStatus
from tidecd.clients.cluster import KubeCluster
from tidecd_dev.devcluster import USER, DevCluster, free_port

REPAIR_WITHIN = 30.0  # seconds from alice's change to its repair (batches leave the API server after 1 s)
QUIET_FOR = 8.0  # seconds with no new reconcile that show there is no loop


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevCluster, int]]:
    """A control plane of this module whose audit backend posts to 127.0.0.1:<port>/audit."""
    ensure_tools(CONTROL_PLANE_TOOLS)
    port = free_port()
    dev = DevCluster(workdir=tmp_path_factory.mktemp("audited"), kwok=True,
                     audit_webhook=f"http://127.0.0.1:{port}/audit")
    dev.start()
    try:
        yield dev, port
    finally:
        dev.stop()


@pytest.fixture()
def setup(audited: tuple[DevCluster, int], git_repo: Any, tmp_path: Path) -> Iterator[tuple[GitOps, Functions]]:
    dev, port = audited
    kube = KubeCluster.from_kubeconfig(str(dev.kubeconfig))
    namespace = f"a-{uuid.uuid4().hex[:10]}"
    kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    gitops = GitOps(git_repo, namespace, dev, tmp_path)
    functions = Functions(gitops, tmp_path)
    functions.extra_env = {"TIDECD_AUDIT_TOKEN": dev.audit_token, "TIDECD_MAX_WEBHOOK_BYTES": str(512 * 1024)}
    functions.start("webhook", port=port)
    try:
        yield gitops, functions
    finally:
        functions.stop()
        release_argocd_finalizers(kube, namespace)
        kube.request("DELETE", f"/api/v1/namespaces/{namespace}")


def as_alice(gitops: GitOps, *args: str) -> None:
    subprocess.run(["kubectl", "--kubeconfig", str(gitops.dev.user_kubeconfig), "-n", gitops.namespace, *args],
                   check=True, capture_output=True, timeout=60)


def log_events(functions: Functions, event: str, app: str = "") -> list[dict[str, Any]]:
    """The webhook process's JSON log lines of `event` (for `app` when given)."""
    found = []
    for line in functions.running["webhook"].log.read_text(errors="replace").splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("event") == event and (not app or doc.get("app") == app):
            found.append(doc)
    return found


def wait_for(what: str, check: Callable[[], bool], timeout: float) -> float:
    began = time.monotonic()
    while not check():
        assert time.monotonic() - began < timeout, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.25)
    return time.monotonic() - began


def test_alices_scale_of_a_self_healed_deployment_is_restored_in_seconds_and_named(
        setup: tuple[GitOps, Functions]) -> None:
    gitops, functions = setup
    gitops.push({"app/web.yaml": deployment("web", replicas=1), "app/cm.yaml": configmap("settings")})
    app = gitops.application(automated={"prune": True, "selfHeal": True})
    gitops.settle()  # synced by tidecd (its own writes: ignored) and indexed

    as_alice(gitops, "scale", "deployment/web", "--replicas=4")

    def repaired() -> bool:
        live, drift = gitops.live("Deployment", "web", "apps") or {}, gitops.state().automation.drift
        return live.get("spec", {}).get("replicas") == 1 and drift is not None and bool(drift.restored)

    took = wait_for("the repair", repaired, REPAIR_WITHIN)

    state = gitops.state()
    drift = state.automation.drift
    assert drift is not None and drift.user == USER and drift.user_agent.startswith("kubectl"), drift
    said = drift.describe()
    assert said.startswith(f"Deployment {gitops.namespace}/web: spec.replicas changed by {USER} via kubectl at "), said
    (condition,) = [c for c in state.conditions if c["type"] == "DriftDetected"]
    assert condition["message"].startswith(said + "; restored at"), condition
    assert state.history[-1].cause == said + "; restored"
    assert state.operation is not None and state.operation.request.self_heal_attempts == 1
    print(f"\nalice's scale restored {took:.1f} s after kubectl returned: {said}")

    # tidecd's own repair (and the controller's rollout) start no loop: the count of reconciles stops
    steps = len(log_events(functions, "reconciled", app))
    assert 1 <= steps <= 8, steps  # the refresh (plus one coalesced re-run and health follow-ups at most)
    time.sleep(QUIET_FOR)
    settled = len(log_events(functions, "reconciled", app))
    time.sleep(QUIET_FOR)
    assert len(log_events(functions, "reconciled", app)) == settled, "reconciles go on with no change"


def test_without_self_heal_the_app_goes_out_of_sync_at_once_and_nothing_syncs(
        setup: tuple[GitOps, Functions]) -> None:
    """Argo CD's automated sync without `selfHeal` does not undo a live change of the revision it synced:
    the event makes the app read OutOfSync (naming alice) within seconds, and no operation follows."""
    gitops, functions = setup
    gitops.push({"app/web.yaml": deployment("web", replicas=1)})
    app = gitops.application(automated={"prune": True})
    gitops.settle()
    before = gitops.state()
    assert before.sync_status is SyncStatus.SYNCED and before.operation is not None

    as_alice(gitops, "scale", "deployment/web", "--replicas=4")
    took = wait_for("OutOfSync", lambda: gitops.state().sync_status is SyncStatus.OUT_OF_SYNC, REPAIR_WITHIN)

    state = gitops.state()
    drift = state.automation.drift
    assert drift is not None and drift.user == USER and not drift.restored, drift
    (condition,) = [c for c in state.conditions if c["type"] == "DriftDetected"]
    assert condition["message"] == drift.describe(), condition  # no "; restored"
    print(f"\nalice's scale read OutOfSync {took:.1f} s after kubectl returned: {drift.describe()}")
    time.sleep(QUIET_FOR)  # a sync, had one been started, would have run by now
    after = gitops.state()
    assert after.sync_status is SyncStatus.OUT_OF_SYNC
    assert after.operation is not None and after.operation.id == before.operation.id  # no new operation
    assert len(after.history) == len(before.history)
    assert (gitops.live("Deployment", "web", "apps") or {}).get("spec", {}).get("replicas") == 4  # not undone
    assert log_events(functions, "automated sync", app) == []


def test_a_change_to_an_object_no_app_manages_causes_no_reconcile(setup: tuple[GitOps, Functions]) -> None:
    gitops, functions = setup
    gitops.push({"app/cm.yaml": configmap("managed")})
    app = gitops.application(automated={"selfHeal": True})
    gitops.reconcile()

    as_alice(gitops, "create", "configmap", "unmanaged", "--from-literal=k=v")
    as_alice(gitops, "label", "configmap/unmanaged", "team=web")
    wait_for("the batch with alice's writes", lambda: any(
        b.get("writes", 0) >= 1 for b in log_events(functions, "audit batch")), REPAIR_WITHIN)
    time.sleep(3.0)  # a later batch would still be on its way

    assert log_events(functions, "reconciled", app) == []
    assert not any(b.get("apps") for b in log_events(functions, "audit batch"))
    # the positive control: alice's change to the managed object does reach the app
    as_alice(gitops, "label", "configmap/managed", "team=web")
    wait_for("the refresh", lambda: bool(log_events(functions, "reconciled", app)), REPAIR_WITHIN)


def test_an_unauthenticated_or_oversized_batch_is_refused(setup: tuple[GitOps, Functions]) -> None:
    gitops, functions = setup
    url = functions.running["webhook"].url + "/audit"
    body = json.dumps({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": []}).encode()
    token = gitops.dev.audit_token

    assert requests.post(url, data=body, timeout=30).status_code == 401
    wrong = requests.post(url, data=body, timeout=30, headers={"Authorization": "Bearer " + "x" * len(token)})
    assert wrong.status_code == 401 and token not in wrong.text
    assert requests.post(url, data=body, timeout=30, headers={"Authorization": f"Bearer {token}"}).status_code == 200
    big = b" " * (600 * 1024) + body
    refused = requests.post(url, data=big, timeout=30, headers={"Authorization": f"Bearer {token}"})
    assert refused.status_code == 413 and "TIDECD_MAX_WEBHOOK_BYTES" in refused.text
