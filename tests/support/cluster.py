"""The real control plane: one per test session, a namespace per test.

`cluster` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (with a fake Node)
on first use and stops them at session end; missing binaries are built by scripts/tools.sh first.

Every namespace a test deletes must finish terminating: one held for good (an Argo CD Application's
`resources-finalizer.argocd.argoproj.io`, once no Argo CD watches it) keeps the namespace collector
retrying in the background, whose DELETEs count in the apiserver's cluster-wide request metrics
(tests/e2e/test_scale.py reads them). So the `namespace` fixture drops Argo CD's finalizers before it
deletes its namespace (no Argo CD controller ever watches a test's namespace), and the session's teardown
fails, naming the test, the namespace and what holds it, when any namespace is still Terminating.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tidecd.clients.cluster import ApiError, ApiTooManyRequests, KubeCluster
from tidecd_dev.devcluster import DevCluster
from tidecd_dev.tools import ensure

CONTROL_PLANE_TOOLS = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]
ARGOCD_KINDS = ("applications", "applicationsets", "appprojects")  # argoproj.io/v1alpha1, all namespaced
NAMESPACES_GONE_TIMEOUT = 120.0  # seconds the session's teardown waits for namespaces still terminating

created_by: dict[str, str] = {}  # namespace -> the test (node id) that created it, for the session check


def ensure_tools(names: list[str]) -> None:
    """Build any missing binary with the project's own script (never skip a test for a missing part)."""
    ensure(names)


def track_namespace(name: str, owner: str) -> None:
    """Name the test behind a namespace it creates, for the session's check of namespaces left Terminating."""
    created_by[name] = owner


def release_argocd_finalizers(kube: KubeCluster, namespace: str) -> list[str]:
    """Drop Argo CD's finalizers from every Application, ApplicationSet and AppProject in `namespace`, so
    that deleting them (or the namespace) needs no Argo CD; returns the objects changed. Other finalizers
    stay. Nothing to do where Argo CD's CRDs are not installed. A 429 "storage is (re)initializing" (a CRD
    installed seconds ago whose storage is not ready yet, seen for applicationsets when a test never touched
    them) is waited out, for 30 s at most."""
    released = []
    for plural in ARGOCD_KINDS:
        path = f"/apis/argoproj.io/v1alpha1/namespaces/{namespace}/{plural}"
        deadline = time.monotonic() + 30
        while True:
            try:
                items = kube.request("GET", path).get("items") or []
                break
            except ApiTooManyRequests:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
            except ApiError as exc:
                if exc.status == 404:
                    items = []
                    break
                raise
        for obj in items:
            meta = obj["metadata"]
            kept = [f for f in meta.get("finalizers") or [] if "argocd.argoproj.io" not in f]
            if kept == (meta.get("finalizers") or []):
                continue
            patch = [{"op": "replace", "path": "/metadata/finalizers", "value": kept}]
            try:
                kube.request("PATCH", f"{path}/{meta['name']}", body=patch, content_type="application/json-patch+json")
            except ApiError as exc:
                if exc.status != 404:
                    raise
                continue
            released.append(f"{plural}/{meta['name']}")
    return released


def terminating_namespaces(kube: KubeCluster) -> dict[str, str]:
    """{namespace: what holds it} of every namespace being deleted (its status conditions say what)."""
    held = {}
    for ns in kube.request("GET", "/api/v1/namespaces").get("items") or []:
        if not ns["metadata"].get("deletionTimestamp"):
            continue
        conditions = [f"{c.get('type')}: {c.get('message', '')}" for c in (ns.get("status") or {}).get("conditions")
                      or [] if c.get("status") == "True"]
        held[ns["metadata"]["name"]] = "; ".join(conditions) or "deletion in progress"
    return held


def wait_namespaces_gone(kube: KubeCluster, timeout: float) -> dict[str, str]:
    """Wait (at most `timeout`) until no namespace is Terminating; the ones left, with what holds them."""
    deadline = time.monotonic() + timeout
    while True:
        held = terminating_namespaces(kube)
        if not held or time.monotonic() > deadline:
            return held
        time.sleep(0.5)


def stuck_report(held: dict[str, str], waited: float) -> str:
    lines = [f"  {name} (created by {created_by.get(name, 'no test fixture')}): {why}"
             for name, why in sorted(held.items())]
    return (f"{len(held)} namespace(s) still Terminating {waited:.0f} s after the last test, so the namespace "
            "collector keeps retrying (and its DELETEs count in the apiserver's metrics):\n" + "\n".join(lines))


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    ensure_tools(CONTROL_PLANE_TOOLS)
    dev = DevCluster(workdir=tmp_path_factory.mktemp("cluster"), kwok=True)
    dev.start()
    held: dict[str, str] = {}
    try:
        yield dev
        held = wait_namespaces_gone(KubeCluster.from_kubeconfig(str(dev.kubeconfig)), NAMESPACES_GONE_TIMEOUT)
    finally:
        dev.stop()
    if held:
        pytest.fail(stuck_report(held, NAMESPACES_GONE_TIMEOUT))


@pytest.fixture()
def kubeconfig(cluster: DevCluster) -> str:
    return str(cluster.kubeconfig)


@pytest.fixture()
def api_client(cluster: DevCluster) -> object:
    from kubernetes import config

    return config.new_client_from_config(config_file=str(cluster.kubeconfig))  # type: ignore[no-untyped-call]


@pytest.fixture()
def namespace(api_client: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (without waiting; the session checks it went), Argo CD's
    finalizers on anything in it dropped first."""
    from kubernetes import client

    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})  # type: ignore[arg-type]
    track_namespace(name, request.node.nodeid)
    yield name
    release_argocd_finalizers(KubeCluster(api_client), name)
    core.delete_namespace(name)
