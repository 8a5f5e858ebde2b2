"""DaemonSet health: every scheduled node runs an updated, available pod."""

from __future__ import annotations

from tidecd.base.model import HealthResult, HealthStatus, Manifest
from tidecd.health._fields import integer, name, quote, rollout, text


def check(obj: Manifest) -> HealthResult:
    if integer(obj, "metadata", "generation") > integer(obj, "status", "observedGeneration"):
        return HealthResult(HealthStatus.PROGRESSING, "Waiting for rollout to finish: "
                            "observed daemon set generation less than desired generation")
    desired = integer(obj, "status", "desiredNumberScheduled")
    updated = integer(obj, "status", "updatedNumberScheduled")
    available = integer(obj, "status", "numberAvailable")
    if text(obj, "spec", "updateStrategy", "type") == "OnDelete":
        # Old pods are replaced only when someone deletes them, so an old pod is not "progress".
        return HealthResult(HealthStatus.HEALTHY,
                            f"daemon set {updated} out of {desired} new pods have been updated")
    return rollout(f"Waiting for daemon set {quote(name(obj))} rollout to finish", [
        (updated < desired, f"{updated} out of {desired} new pods have been updated..."),
        (available < desired, f"{available} of {desired} updated pods are available..."),
    ])
