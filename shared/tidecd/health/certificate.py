"""cert-manager `Certificate` health: `Issuing` first, then `Ready`, as Argo CD judges it.

Issuing True is Progressing (a renewal in flight, even while the old certificate is still Ready); Ready
False is Degraded and Ready True Healthy, each with cert-manager's message; no verdict yet is Progressing
("Waiting for certificate").
"""

from __future__ import annotations

from tidecd.base.model import HealthResult, HealthStatus, Manifest
from tidecd.health._fields import items


def check(obj: Manifest) -> HealthResult:
    conditions = items(obj, "status", "conditions")
    for cond in conditions:
        if cond.get("type") == "Issuing" and cond.get("status") == "True":
            return HealthResult(HealthStatus.PROGRESSING, str(cond.get("message") or ""))
    for cond in conditions:
        if cond.get("type") == "Ready" and cond.get("status") == "False":
            return HealthResult(HealthStatus.DEGRADED, str(cond.get("message") or ""))
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            return HealthResult(HealthStatus.HEALTHY, str(cond.get("message") or ""))
    return HealthResult(HealthStatus.PROGRESSING, "Waiting for certificate")
