"""The real control plane: one per test session, a namespace per test.

`cluster` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (with a fake Node)
on first use and stops them at session end; missing binaries are built by scripts/tools.sh first.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tidecd_dev.devcluster import DevCluster
from tidecd_dev.tools import ensure

CONTROL_PLANE_TOOLS = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]


def ensure_tools(names: list[str]) -> None:
    """Build any missing binary with the project's own script (never skip a test for a missing part)."""
    ensure(names)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    ensure_tools(CONTROL_PLANE_TOOLS)
    dev = DevCluster(workdir=tmp_path_factory.mktemp("cluster"), kwok=True)
    dev.start()
    try:
        yield dev
    finally:
        dev.stop()


@pytest.fixture()
def kubeconfig(cluster: DevCluster) -> str:
    return str(cluster.kubeconfig)


@pytest.fixture()
def api_client(cluster: DevCluster) -> object:
    from kubernetes import config

    return config.new_client_from_config(config_file=str(cluster.kubeconfig))  # type: ignore[no-untyped-call]


@pytest.fixture()
def namespace(api_client: object) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (without waiting)."""
    from kubernetes import client

    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})  # type: ignore[arg-type]
    yield name
    core.delete_namespace(name)
