"""Ingress health: Healthy once the ingress controller published an address (as Argo CD)."""

from __future__ import annotations

from tidecd.health._fields import items
from tidecd.model import HealthResult, HealthStatus, Manifest


def check(obj: Manifest) -> HealthResult:
    if items(obj, "status", "loadBalancer", "ingress"):
        return HealthResult(HealthStatus.HEALTHY)
    return HealthResult(HealthStatus.PROGRESSING, "Waiting for the ingress controller to publish an address")
