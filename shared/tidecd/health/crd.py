"""CustomResourceDefinition health: Established, names accepted, structural schema.

Later sync waves often create custom resources of this CRD, so "not established yet" is Progressing.
"""

from __future__ import annotations

from tidecd.base.clock import unix
from tidecd.base.model import HealthResult, HealthStatus, Manifest
from tidecd.health._fields import condition, is_false, is_true, text


def check(obj: Manifest) -> HealthResult:
    if is_true(condition(obj, "Terminating")):
        return HealthResult(HealthStatus.PROGRESSING, "CRD is being terminated")
    names = condition(obj, "NamesAccepted")
    if names is not None and is_false(names):
        return HealthResult(HealthStatus.DEGRADED,
                            f"CRD names have not been accepted: {text(names, 'message')}")
    violation = condition(obj, "NonStructuralSchema")
    if violation is not None and is_true(violation):
        return HealthResult(HealthStatus.DEGRADED, f"Schema violations found: {text(violation, 'message')}")
    if not is_true(condition(obj, "Established")):
        return HealthResult(HealthStatus.PROGRESSING, "CRD is not established yet")
    return HealthResult(HealthStatus.HEALTHY, "CRD is established")


def established_at(obj: Manifest) -> float | None:
    """When the CRD turned Established (unix; 0.0 when the condition gives no time), None while it is not.
    The API server's discovery lists the new kind a moment after the condition, not with it."""
    found = condition(obj, "Established")
    return unix(str(found.get("lastTransitionTime") or "")) if found is not None and is_true(found) else None
