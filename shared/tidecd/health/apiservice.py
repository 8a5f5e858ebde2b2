"""APIService health from its Available condition (an aggregated API answers discovery)."""

from __future__ import annotations

from tidecd.base.model import HealthResult, HealthStatus, Manifest
from tidecd.health._fields import condition, is_true


def check(obj: Manifest) -> HealthResult:
    available = condition(obj, "Available")
    if available is None:
        return HealthResult(HealthStatus.PROGRESSING, "Waiting to be processed")
    reason, message = str(available.get("reason") or ""), str(available.get("message") or "")
    text = f"{reason}: {message}" if reason and message else reason or message
    # Unavailable is Progressing, as in Argo CD: the backing pods are often still starting during a sync.
    return HealthResult(HealthStatus.HEALTHY if is_true(available) else HealthStatus.PROGRESSING, text)
