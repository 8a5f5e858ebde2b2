"""Service health: only a LoadBalancer waits, for its external address."""

from __future__ import annotations

from tidecd.base.model import HealthResult, HealthStatus, Manifest
from tidecd.health._fields import items, text


def check(obj: Manifest) -> HealthResult:
    if text(obj, "spec", "type") != "LoadBalancer" or items(obj, "status", "loadBalancer", "ingress"):
        return HealthResult(HealthStatus.HEALTHY)
    return HealthResult(HealthStatus.PROGRESSING, "Waiting for the load balancer address")
