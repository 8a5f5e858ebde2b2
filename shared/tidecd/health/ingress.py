"""Ingress health: Healthy once the ingress controller published an address (as Argo CD)."""

from __future__ import annotations

from tidecd.base.model import HealthResult, HealthStatus, Manifest
from tidecd.health._fields import items


def check(obj: Manifest) -> HealthResult:
    if items(obj, "status", "loadBalancer", "ingress"):
        return HealthResult(HealthStatus.HEALTHY)
    return HealthResult(HealthStatus.PROGRESSING, "Waiting for the ingress controller to publish an address")
