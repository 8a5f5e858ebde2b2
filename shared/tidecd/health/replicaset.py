"""ReplicaSet health: the controller saw the spec and enough replicas are available."""

from __future__ import annotations

from tidecd.base.model import HealthResult, HealthStatus, Manifest
from tidecd.health._fields import condition, integer, is_true

_WAIT = "Waiting for rollout to finish"


def check(obj: Manifest) -> HealthResult:
    if integer(obj, "metadata", "generation") > integer(obj, "status", "observedGeneration"):
        return HealthResult(HealthStatus.PROGRESSING,
                            f"{_WAIT}: observed replica set generation less than desired generation")
    failure = condition(obj, "ReplicaFailure")
    if failure is not None and is_true(failure):
        return HealthResult(HealthStatus.DEGRADED, str(failure.get("message") or failure.get("reason") or ""))
    desired = integer(obj, "spec", "replicas", default=1)
    available = integer(obj, "status", "availableReplicas")
    if available < desired:
        return HealthResult(HealthStatus.PROGRESSING,
                            f"{_WAIT}: {available} out of {desired} new replicas are available...")
    return HealthResult(HealthStatus.HEALTHY)
