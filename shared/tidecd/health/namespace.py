"""Namespace health by phase: Terminating means its contents are still being deleted."""

from __future__ import annotations

from tidecd.base.model import HealthResult, HealthStatus, Manifest
from tidecd.health._fields import quote, text


def check(obj: Manifest) -> HealthResult:
    phase = text(obj, "status", "phase")
    if phase == "Active":
        return HealthResult(HealthStatus.HEALTHY)
    if phase == "Terminating":
        return HealthResult(HealthStatus.PROGRESSING, "Namespace is terminating")
    return HealthResult(HealthStatus.UNKNOWN,
                        f"unexpected phase {quote(phase)}" if phase else "no phase reported yet")
