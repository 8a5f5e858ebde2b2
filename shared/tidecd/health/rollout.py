"""Argo Rollouts `Rollout` health, by the rule Argo CD applies to it (its `argoproj.io/Rollout` check).

Without the Rollouts controller nothing observes the spec, so a fresh Rollout reads Progressing ("Waiting
for rollout spec update to be observed"), never Healthy. Order: generation observed (numeric
`status.observedGeneration`; the v0.9 hash form counts as observed) and the workload generation of a
`workloadRef`; then the controller's own `status.phase`/`message` (Rollouts ≥ 1.0; Paused → Suspended);
else conditions (InvalidSpec, RolloutAborted, ProgressDeadlineExceeded → Degraded), pause, replica counts,
and the blue-green / canary cut-over.
"""

from __future__ import annotations

from typing import Any

from tidecd.base.model import HealthResult, HealthStatus, Manifest
from tidecd.health._fields import get, integer, items, text

_PHASES = {s.value: s for s in HealthStatus}
_OBSERVING = "Waiting for rollout spec update to be observed"


def check(obj: Manifest) -> HealthResult:
    if not _generation_observed(obj) or not _workload_generation_observed(obj):
        return HealthResult(HealthStatus.PROGRESSING, _OBSERVING)
    phase = get(obj, "status", "phase")
    if phase is not None:
        status = HealthStatus.SUSPENDED if phase == "Paused" else _PHASES.get(str(phase))
        if status is None:
            return HealthResult(HealthStatus.UNKNOWN, f"Rollout reports an unknown phase {str(phase)!r}")
        return HealthResult(status, text(obj, "status", "message"))
    for cond in items(obj, "status", "conditions"):
        if cond.get("type") == "InvalidSpec" or (
                cond.get("type") == "Progressing"
                and cond.get("reason") in ("RolloutAborted", "ProgressDeadlineExceeded")):
            return HealthResult(HealthStatus.DEGRADED, str(cond.get("message") or ""))
    if items(obj, "status", "pauseConditions") or get(obj, "spec", "paused") is True:
        return HealthResult(HealthStatus.SUSPENDED, "Rollout is paused")
    pod_hash = get(obj, "status", "currentPodHash")
    if pod_hash is None:
        return HealthResult(HealthStatus.PROGRESSING, "Waiting for rollout to finish: status has not been reconciled.")
    return _replicas(obj) or _cutover(obj, pod_hash) or HealthResult(HealthStatus.HEALTHY)


def _generation_observed(obj: Manifest) -> bool:
    status = get(obj, "status")
    if status is None:
        return False
    observed = _number(get(obj, "status", "observedGeneration"))
    generation = integer(obj, "metadata", "generation")
    return observed is None or observed > generation or observed == generation


def _workload_generation_observed(obj: Manifest) -> bool:
    annotations = get(obj, "metadata", "annotations")
    if get(obj, "spec", "workloadRef") is None or not isinstance(annotations, dict):
        return True
    wanted = _number(annotations.get("rollout.argoproj.io/workload-generation"))
    return wanted == _number(get(obj, "status", "workloadObservedGeneration"))


def _replicas(obj: Manifest) -> HealthResult | None:
    desired = integer(obj, "spec", "replicas", default=1)
    updated = integer(obj, "status", "updatedReplicas")
    available = integer(obj, "status", "availableReplicas")
    if updated < desired:
        return HealthResult(HealthStatus.PROGRESSING,
                            "Waiting for roll out to finish: More replicas need to be updated")
    if available < updated:
        return HealthResult(HealthStatus.PROGRESSING,
                            "Waiting for roll out to finish: updated replicas are still becoming available")
    return None


def _cutover(obj: Manifest, pod_hash: Any) -> HealthResult | None:
    stable = get(obj, "status", "stableRS")
    if stable is None:
        stable = get(obj, "status", "canary", "stableRS") or ""
    if get(obj, "spec", "strategy", "blueGreen") is not None:
        if get(obj, "status", "blueGreen", "activeSelector") != pod_hash:
            return HealthResult(HealthStatus.PROGRESSING, "active service cutover pending")
        if stable != "" and stable != pod_hash:
            return HealthResult(HealthStatus.PROGRESSING, "waiting for analysis to complete")
    elif get(obj, "spec", "strategy", "canary") is not None:
        if integer(obj, "status", "replicas") > integer(obj, "status", "updatedReplicas"):
            return HealthResult(HealthStatus.PROGRESSING,
                                "Waiting for roll out to finish: old replicas are pending termination")
        if stable == "" or stable != pod_hash:
            return HealthResult(HealthStatus.PROGRESSING, "Waiting for rollout to finish steps")
    return None


def _number(value: Any) -> float | None:
    """Lua's `tonumber`: numbers and numeric strings; anything else is None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None
