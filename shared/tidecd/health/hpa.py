"""HorizontalPodAutoscaler health from its AbleToScale / ScalingActive / ScalingLimited conditions.

autoscaling/v2 keeps them in `status.conditions`; an object read as autoscaling/v1 carries the same list
as JSON in an annotation.
"""

from __future__ import annotations

import json
from typing import Any

from tidecd.base.model import HealthResult, HealthStatus, Manifest
from tidecd.health._fields import items, text

_V1_CONDITIONS = "autoscaling.alpha.kubernetes.io/conditions"


def check(obj: Manifest) -> HealthResult:
    conditions = items(obj, "status", "conditions") or _v1_conditions(obj)
    if not conditions:
        return HealthResult(HealthStatus.PROGRESSING, "Waiting to Autoscale")
    by_type = {str(c.get("type")): c for c in conditions}
    able, active = by_type.get("AbleToScale"), by_type.get("ScalingActive")
    if active is not None and active.get("status") == "False":
        if active.get("reason") == "ScalingDisabled":  # the target was scaled to zero on purpose
            return HealthResult(HealthStatus.SUSPENDED, _describe(active))
        return HealthResult(HealthStatus.DEGRADED, _describe(active))
    if able is not None and able.get("status") == "False":
        if str(able.get("reason", "")).startswith("Backoff"):  # inside a stabilization window
            return HealthResult(HealthStatus.PROGRESSING, _describe(able))
        return HealthResult(HealthStatus.DEGRADED, _describe(able))
    limited = by_type.get("ScalingLimited")
    return HealthResult(HealthStatus.HEALTHY, _describe(limited) if limited else "")


def _v1_conditions(obj: Manifest) -> list[dict[str, Any]]:
    raw = text(obj, "metadata", "annotations", _V1_CONDITIONS)
    if not raw:
        return []
    parsed = json.loads(raw)  # a malformed annotation raises ValueError: assess() reports Unknown
    return [c for c in parsed if isinstance(c, dict)] if isinstance(parsed, list) else []


def _describe(cond: dict[str, Any]) -> str:
    reason, message = str(cond.get("reason") or ""), str(cond.get("message") or "")
    return f"{reason}: {message}" if reason and message else reason or message

