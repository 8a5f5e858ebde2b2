"""Bitnami `SealedSecret` health: the controller's `Synced` condition, for the current generation only.

As Argo CD's check: a Synced condition that describes an earlier generation says nothing yet, so until
`status.observedGeneration` equals `metadata.generation` the secret is Progressing ("Waiting for Sealed
Secret to be decrypted"); Synced False is Degraded with the controller's message (which names the key that
failed, never a value); Synced True is Healthy.
"""

from __future__ import annotations

from tidecd.base.model import HealthResult, HealthStatus, Manifest
from tidecd.health._fields import get, items

_WAITING = HealthResult(HealthStatus.PROGRESSING, "Waiting for Sealed Secret to be decrypted")


def check(obj: Manifest) -> HealthResult:
    generation = get(obj, "metadata", "generation")
    if generation is None or get(obj, "status") is None or get(obj, "status", "observedGeneration") != generation:
        return _WAITING
    for cond in items(obj, "status", "conditions"):
        if cond.get("type") == "Synced" and cond.get("status") == "False":
            return HealthResult(HealthStatus.DEGRADED, str(cond.get("message") or ""))
        if cond.get("type") == "Synced" and cond.get("status") == "True":
            return HealthResult(HealthStatus.HEALTHY, str(cond.get("message") or ""))
    return _WAITING
