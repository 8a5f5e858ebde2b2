"""StatefulSet health, following `kubectl rollout status` for each update strategy."""

from __future__ import annotations

from tidecd.base.model import HealthResult, HealthStatus, Manifest
from tidecd.health._fields import integer, text


def check(obj: Manifest) -> HealthResult:
    observed = integer(obj, "status", "observedGeneration")
    if observed == 0 or integer(obj, "metadata", "generation") > observed:
        return HealthResult(HealthStatus.PROGRESSING, "Waiting for statefulset spec update to be observed...")
    desired = integer(obj, "spec", "replicas", default=1)
    ready = integer(obj, "status", "readyReplicas")
    if ready < desired:
        return HealthResult(HealthStatus.PROGRESSING, f"Waiting for {desired - ready} pods to be ready...")
    updated = integer(obj, "status", "updatedReplicas")
    strategy = text(obj, "spec", "updateStrategy", "type") or "RollingUpdate"
    if strategy == "OnDelete":
        return HealthResult(HealthStatus.HEALTHY, f"statefulset has {ready} ready pods")
    partition = integer(obj, "spec", "updateStrategy", "rollingUpdate", "partition")
    if partition > 0:
        # Pods below the partition keep the old revision on purpose: only the rest must be updated.
        target = desired - partition
        if updated < target:
            return HealthResult(HealthStatus.PROGRESSING, "Waiting for partitioned roll out to finish: "
                                f"{updated} out of {target} new pods have been updated...")
        return HealthResult(HealthStatus.HEALTHY,
                            f"partitioned roll out complete: {updated} new pods have been updated...")
    current_rev = text(obj, "status", "currentRevision")
    update_rev = text(obj, "status", "updateRevision")
    if update_rev and update_rev != current_rev:
        return HealthResult(HealthStatus.PROGRESSING, "waiting for statefulset rolling update to complete "
                            f"{updated} pods at revision {update_rev}...")
    current = integer(obj, "status", "currentReplicas")
    return HealthResult(HealthStatus.HEALTHY,
                        f"statefulset rolling update complete {current} pods at revision {current_rev}...")
