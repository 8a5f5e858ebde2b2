"""Deployment health, as `kubectl rollout status` and Argo CD judge a rollout."""

from __future__ import annotations

from tidecd.base.model import HealthResult, HealthStatus, Manifest
from tidecd.health._fields import condition, get, integer, name, quote, rollout

_WAIT = "Waiting for rollout to finish"


def check(obj: Manifest) -> HealthResult:
    if get(obj, "spec", "paused") is True:
        return HealthResult(HealthStatus.SUSPENDED, "Deployment is paused")
    if integer(obj, "metadata", "generation") > integer(obj, "status", "observedGeneration"):
        return HealthResult(HealthStatus.PROGRESSING,
                            f"{_WAIT}: observed deployment generation less than desired generation")
    progressing = condition(obj, "Progressing")
    if progressing is not None and progressing.get("reason") == "ProgressDeadlineExceeded":
        detail = progressing.get("message") or ""
        message = f"Deployment {quote(name(obj))} exceeded its progress deadline"
        return HealthResult(HealthStatus.DEGRADED, f"{message}: {detail}" if detail else message)
    desired = integer(obj, "spec", "replicas", default=1)
    replicas = integer(obj, "status", "replicas")
    updated = integer(obj, "status", "updatedReplicas")
    available = integer(obj, "status", "availableReplicas")
    return rollout(_WAIT, [
        (updated < desired, f"{updated} out of {desired} new replicas have been updated..."),
        (replicas > updated, f"{replicas - updated} old replicas are pending termination..."),
        (available < updated, f"{available} of {updated} updated replicas are available..."),
    ])
