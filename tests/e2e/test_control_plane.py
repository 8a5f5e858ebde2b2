"""The real local control plane: the kubernetes client, server-side apply, kwok progress, the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from kubernetes import client

from tidecd.clients.tools import cache_dir
from tidecd_dev.devcluster import DevCluster


def wait_for(predicate, timeout: float = 90.0, interval: float = 0.5):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def test_deployment_becomes_available_on_kwok(api_client: client.ApiClient, namespace: str) -> None:
    apps = client.AppsV1Api(api_client)
    labels = {"app": "web"}
    apps.create_namespaced_deployment(namespace, client.V1Deployment(
        api_version="apps/v1", kind="Deployment", metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1DeploymentSpec(
            replicas=2, selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(containers=[client.V1Container(name="web", image="nginx:1.27")])))))

    def available() -> bool:
        dep = apps.read_namespaced_deployment("web", namespace)
        return dep.status is not None and dep.status.available_replicas == 2

    wait_for(available)
    pods = client.CoreV1Api(api_client).list_namespaced_pod(namespace).items
    assert {p.spec.node_name if p.spec else None for p in pods} == {"kwok-node-0"}


def test_server_side_apply_twice_changes_nothing(api_client: object, namespace: str) -> None:
    from tidecd.clients.cluster import KubeCluster

    cluster = KubeCluster(api_client)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": namespace},
          "data": {"color": "blue"}}
    first = cluster.apply(cm)
    second = cluster.apply(cm)
    assert first["metadata"]["resourceVersion"] == second["metadata"]["resourceVersion"]
    assert [m["manager"] for m in second["metadata"]["managedFields"]] == ["tidecd"]
    changed = cluster.apply({**cm, "data": {"color": "green"}})
    assert changed["metadata"]["resourceVersion"] != second["metadata"]["resourceVersion"]


def test_server_reports_a_real_version(cluster: DevCluster) -> None:
    out = subprocess.run(["kubectl", "--kubeconfig", str(cluster.kubeconfig), "version", "-o", "json"],
                         check=True, capture_output=True, text=True).stdout
    assert '"gitVersion": "v1.34.4"' in out


def _processes_under(path: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(str(path) in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


def test_cli_cluster_up_and_down_leave_nothing_behind(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "TIDECD_BIN_DIR": str(cache_dir() / "bin")}
    tidecd = [sys.executable, "-m", "tidecd.cli"]
    up = subprocess.run([*tidecd, "dev", "cluster", "up", "--kwok", "--name", "cli"], env=env,
                        capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stderr
    assert up.stdout.startswith("export KUBECONFIG=")
    kubeconfig = up.stdout.strip().split("=", 1)[1]
    nodes = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "get", "nodes", "-o", "name"],
                           check=True, capture_output=True, text=True).stdout
    assert "node/kwok-node-0" in nodes
    workdir = tmp_path / "cache" / "tidecd" / "clusters" / "cli"
    assert len(_processes_under(workdir)) == 5
    down = subprocess.run([*tidecd, "dev", "cluster", "down", "--name", "cli"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert not workdir.exists()
    assert _processes_under(workdir) == []


@pytest.mark.parametrize("kind", ["etcd", "kube-apiserver"])
def test_session_cluster_processes_are_tracked(cluster: DevCluster, kind: str) -> None:
    assert psutil.Process(cluster.pids[kind]).is_running()
