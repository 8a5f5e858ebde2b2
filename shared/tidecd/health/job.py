"""Job health from its terminal conditions; a running or not-yet-started Job is Progressing."""

from __future__ import annotations

from tidecd.base.model import HealthResult, HealthStatus, Manifest
from tidecd.health._fields import condition, get, integer, is_true, text


def check(obj: Manifest) -> HealthResult:
    failed = condition(obj, "Failed")
    if failed is not None and is_true(failed):
        return HealthResult(HealthStatus.DEGRADED,
                            str(failed.get("message") or failed.get("reason") or "Job failed"))
    complete = condition(obj, "Complete")
    if complete is not None and is_true(complete):
        return HealthResult(HealthStatus.HEALTHY, str(complete.get("message") or ""))
    if get(obj, "spec", "suspend") is True or is_true(condition(obj, "Suspended")):
        return HealthResult(HealthStatus.SUSPENDED, "Job is suspended")
    active = integer(obj, "status", "active")
    started = text(obj, "status", "startTime")
    message = f"Job is running: {active} active pods" if started else "Waiting for the Job to start"
    return HealthResult(HealthStatus.PROGRESSING, message)
