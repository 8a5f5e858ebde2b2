"""Kubernetes API failures against the real API server: each maps to its class, with the server's words."""

from __future__ import annotations

import pytest

from tidecd.base.errors import PermanentError, TemporaryError, disposition
from tidecd.base.model import ResourceKey
from tidecd.clients.cluster import ApiInvalid, ApiNotFound, ApiTooLarge, KubeCluster
from tidecd_dev.devcluster import DevCluster


def configmap(namespace: str, name: str, data: dict[str, str]) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}


def test_a_30_mb_object_is_too_large_not_a_tls_failure(cluster: DevCluster, namespace: str) -> None:
    kube = KubeCluster.from_kubeconfig(str(cluster.kubeconfig))
    with pytest.raises(ApiTooLarge) as info:
        kube.apply(configmap(namespace, "huge", {"blob": "x" * (30 * 2**20)}))
    text = str(info.value)
    assert "too large" in text.lower() and "TLS" not in text, text
    assert isinstance(info.value, PermanentError) and not disposition(info.value).retry
    assert "xxxxxxxx" not in text  # no request body in the message


def test_an_immutable_service_cluster_ip_hints_replace(cluster: DevCluster, namespace: str) -> None:
    kube = KubeCluster.from_kubeconfig(str(cluster.kubeconfig))
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "front", "namespace": namespace},
               "spec": {"ports": [{"port": 80}]}}
    created = kube.apply(service)
    ip = created["spec"]["clusterIP"]
    moved = ".".join([*ip.split(".")[:3], str((int(ip.split(".")[3]) + 7) % 250 + 1)])
    with pytest.raises(ApiInvalid) as info:
        kube.apply({**service, "spec": {"ports": [{"port": 80}], "clusterIP": moved, "clusterIPs": [moved]}})
    assert "Replace=true" in str(info.value) and str(info.value).startswith(f"Service {namespace}/front: ")


def test_missing_objects_and_namespaces_are_permanent_not_found(cluster: DevCluster) -> None:
    kube = KubeCluster.from_kubeconfig(str(cluster.kubeconfig))
    assert kube.get(ResourceKey("", "ConfigMap", "no-such-namespace-x", "nope")) is None
    with pytest.raises(ApiNotFound) as info:
        kube.apply(configmap("no-such-namespace-x", "a", {"k": "v"}))
    assert 'namespaces "no-such-namespace-x" not found' in str(info.value)
    assert not isinstance(info.value, TemporaryError)
