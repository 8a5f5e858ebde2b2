"""The scale scenario's code path, small: 20 flux-benchmark apps in 4 repos from cold through the real
functions (poll target → Pub/Sub emulator → 2 reconcile instances), then a no-op tick.

`make bench-scale` runs the same path with 1,000 apps in 50 repos and times it; this test checks that the
path works and keeps the no-op promises: one ls-remote per repository, no write to the cluster and none to
the apps' or repositories' state (leases and refresh records are the only store writes).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.support.cluster import wait_namespaces_gone
from tidecd.clients.cluster import KubeCluster
from tidecd.clients.store import LocalStore
from tidecd_dev import scale
from tidecd_dev.devcluster import DevCluster
from tidecd_dev.gitserver import LS_REMOTE, GitServer
from tidecd_dev.ingresses import IngressStatusWriter

pytestmark = pytest.mark.e2e


def wait_quiet(fleet: scale.Fleet, quiet: float = 4.0, timeout: float = 120.0) -> None:
    import time

    assert fleet.frontend is not None
    deadline, count, since = time.monotonic() + timeout, -1, time.monotonic()
    while time.monotonic() < deadline:
        now = len(fleet.frontend.snapshot())
        if now != count or fleet.frontend.busy():
            count, since = now, time.monotonic()
        elif time.monotonic() - since > quiet:
            return
        time.sleep(0.3)
    raise AssertionError(f"the fleet kept working for {timeout:.0f}s")


def test_twenty_apps_in_four_repos_from_cold_then_a_noop_tick(
        cluster: DevCluster, git_server: GitServer, pubsub_emulator: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    scenario = scale.Scenario(apps=20, repos=4, name=f"scale-{tag}")
    prefix = f"s{tag}"
    inst = scale.install(git_server, cluster, tmp_path, scenario, prefix)
    with IngressStatusWriter(cluster, namespace_prefix=prefix) as ingresses:
        fleet = scale.Fleet(tmp_path / "fleet", inst.env, pubsub_emulator, workers=2).start(f"refresh-{tag}")
        try:
            assert fleet.frontend is not None
            watch = scale.Watch(inst.store, inst.apps)
            summary = fleet.tick()
            assert summary["ls_remote_calls"] == 4 and len(summary["apps_refreshed"]) == 20, summary
            assert watch.wait(240), f"not Synced+Healthy: {watch.stragglers()}"
            wait_quiet(fleet)
            cold = fleet.frontend.snapshot()
            assert {c.app for c in cold if c.status < 300} == set(inst.apps)
            assert not [c for c in cold if c.status >= 500], [c for c in cold if c.status >= 500]
            assert ingresses.published >= 20 and not ingresses.errors

            state = LocalStore(inst.store).read("state/apps/app-0007.json")
            assert state is not None and b'"Healthy"' in state.data
            status, body = scale._kube(cluster, "GET", f"/apis/apps/v1/namespaces/"
                                       f"{scenario.namespace(prefix, scenario.repo_names()[3])}/deployments/app-0007")
            assert status == 200 and b'"replicas":0' in body

            # earlier tests' namespace cleanup is not this tick's: the request counters are cluster-wide
            held = wait_namespaces_gone(KubeCluster.from_kubeconfig(str(cluster.kubeconfig)), 120)
            assert not held, f"namespaces of earlier tests still terminating: {held}"
            git_server.reset_counts()
            before, stored = scale.api_requests(cluster), scale.store_snapshot(inst.store)
            noop = fleet.tick()
            wait_quiet(fleet)
            calls = scale.ApiCalls.between(before, scale.api_requests(cluster))
            writes = scale.store_writes(stored, scale.store_snapshot(inst.store))
            ls_remote = sum(git_server.requests(r, LS_REMOTE) for r in scenario.repo_names())
            steps = [c for c in fleet.frontend.snapshot()[len(cold):] if not c.refused_early]
            deployments_after = 0
            for repo in scenario.repo_names():
                status, body = scale._kube(cluster, "GET", f"/apis/apps/v1/namespaces/"
                                           f"{scenario.namespace(prefix, repo)}/deployments")
                assert status == 200
                deployments_after += len(json.loads(body)["items"])
        finally:
            fleet.stop()
    assert len(noop["drift_checked"]) == 20 and not noop["apps_refreshed"], noop
    assert len(steps) == 20 and all(c.status < 300 for c in steps)
    assert calls.writes_on_app_kinds == 0, calls  # no namespace is left held by a finalizer (tests/support/cluster.py)
    assert deployments_after == 20, f"{deployments_after} of the 20 Deployments left after the no-op tick"
    assert ls_remote == 4, f"{ls_remote} ls-remote calls for 4 repositories"
    assert "state" not in writes, writes
