"""The server version keys the discovery cache: asked once per shared client, not once per invocation."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from tidecd.clients import cluster
from tidecd.clients.cluster import KubeCluster


class FakeApi:
    """Just enough of kubernetes.client.ApiClient for KubeCluster.request; counts calls per path."""

    def __init__(self, version: str = "v1.34.4") -> None:
        self.configuration = SimpleNamespace(host="https://fake.invalid")
        self.version = version
        self.calls: list[str] = []

    def param_serialize(self, *, method: str, resource_path: str, **_: Any) -> tuple[Any, ...]:
        return (method, resource_path, {}, None, None)

    def call_api(self, method: str, path: str, headers: Any, **_: Any) -> Any:
        self.calls.append(path)
        body = {"gitVersion": self.version} if path == "/version" else {"kind": "APIGroupDiscoveryList",
                                                                        "items": []}
        data = json.dumps(body).encode()
        return SimpleNamespace(status=200, reason="OK", headers={}, read=lambda: data)


def test_one_version_call_per_shared_client_within_the_ttl(monkeypatch: Any) -> None:
    api, other = FakeApi(), FakeApi("v1.35.0")
    for _ in range(5):  # five invocations, each with its own KubeCluster on the shared client
        KubeCluster(api).resources()
    assert api.calls.count("/version") == 1 and api.calls.count("/apis") == 1
    KubeCluster(other).resources()
    assert other.calls.count("/version") == 1, "another client asks for itself"
    monkeypatch.setattr(cluster, "VERSION_TTL", 0.0)
    KubeCluster(api).resources()
    assert api.calls.count("/version") == 2, "after the TTL the version is asked again"


def test_capabilities_come_from_the_cached_discovery_and_are_asked_again_after_their_ttl(monkeypatch: Any) -> None:
    api = FakeApi("v1.34.4")
    api.configuration.host = "https://capabilities.invalid"  # its own entry in the process's discovery cache
    KubeCluster(api).resources()
    for _ in range(5):  # every step of every app: nothing more is asked
        assert KubeCluster(api).capabilities() == ("v1.34.4", ())
    assert api.calls.count("/apis") == 1
    monkeypatch.setattr(cluster, "SERVED_TTL", 0.0)
    KubeCluster(api).capabilities()
    assert api.calls.count("/apis") == 2, "a CRD installed since shows once the served versions are this old"


def test_served_api_versions_are_every_listable_version_with_and_without_its_kind() -> None:
    doc = {"items": [
        {"metadata": {"name": ""}, "versions": [{"version": "v1", "resources": [
            {"resource": "pods", "responseKind": {"kind": "Pod"}, "verbs": ["get", "list", "watch", "create"]},
            {"resource": "bindings", "responseKind": {"kind": "Binding"}, "verbs": ["create"]}]}]},
        {"metadata": {"name": "autoscaling"}, "versions": [  # not only the preferred version
            {"version": "v2", "resources": [{"resource": "horizontalpodautoscalers",
                                             "responseKind": {"kind": "HorizontalPodAutoscaler"},
                                             "verbs": ["list", "watch"]}]},
            {"version": "v1", "resources": [{"resource": "horizontalpodautoscalers",
                                             "responseKind": {"kind": "HorizontalPodAutoscaler"},
                                             "verbs": ["list", "watch"]}]}]},
        {"metadata": {"name": "authentication.k8s.io"}, "versions": [{"version": "v1", "resources": [
            {"resource": "tokenreviews", "responseKind": {"kind": "TokenReview"}, "verbs": ["create"]}]}]},
    ]}
    assert sorted(cluster.served_api_versions(doc)) == [
        "autoscaling/v1", "autoscaling/v1/HorizontalPodAutoscaler", "autoscaling/v2",
        "autoscaling/v2/HorizontalPodAutoscaler", "v1", "v1/Pod"]  # as gitops-engine: list and watch, any version
