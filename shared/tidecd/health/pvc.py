"""PersistentVolumeClaim health by phase."""

from __future__ import annotations

from tidecd.base.model import HealthResult, HealthStatus, Manifest
from tidecd.health._fields import quote, text

_BY_PHASE = {
    "Bound": HealthStatus.HEALTHY,
    "Pending": HealthStatus.PROGRESSING,
    "Lost": HealthStatus.DEGRADED,
}


def check(obj: Manifest) -> HealthResult:
    phase = text(obj, "status", "phase")
    status = _BY_PHASE.get(phase, HealthStatus.UNKNOWN)
    if status is HealthStatus.DEGRADED:
        return HealthResult(status, "the bound PersistentVolume was lost")
    if status is HealthStatus.UNKNOWN:
        return HealthResult(status, f"unexpected phase {quote(phase)}" if phase else "no phase reported yet")
    return HealthResult(status)
