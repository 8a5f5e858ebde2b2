"""Argo CD `Application` health, for app-of-apps waves: the child's own `status.health`.

This is the check Argo CD's documentation gives for `resource.customizations.health.argoproj.io_Application`
(a parent's wave waits until its children report Healthy): no status yet is Progressing; otherwise the
reported health and its message. One addition: while the child's sync operation is still running
(`status.operationState.phase: Running`) it is Progressing whatever it reported, so a wave never passes a
child that has not finished syncing, and a Healthy child whose sync status is not Synced (OutOfSync,
Unknown) is Progressing too: a wave passes only children that are Synced and Healthy.
"""

from __future__ import annotations

from tidecd.base.model import HealthResult, HealthStatus, Manifest
from tidecd.health._fields import get, text

_STATUSES = {s.value: s for s in HealthStatus}


def check(obj: Manifest) -> HealthResult:
    reported = get(obj, "status", "health", "status")
    if reported is None:
        return HealthResult(HealthStatus.PROGRESSING, "")
    status = _STATUSES.get(str(reported))
    if status is None:
        return HealthResult(HealthStatus.UNKNOWN, f"Application reports an unknown health {str(reported)!r}")
    message = text(obj, "status", "health", "message")
    if text(obj, "status", "operationState", "phase") == "Running":
        return HealthResult(HealthStatus.PROGRESSING, message or "sync operation is running")
    sync = text(obj, "status", "sync", "status")
    if sync and sync != "Synced" and status is HealthStatus.HEALTHY:
        # an app of apps' wave waits until the earlier children are Synced *and* Healthy (tidecd's children
        # report their sync status; a child not synced yet has not deployed what its parent declared)
        return HealthResult(HealthStatus.PROGRESSING, message or f"sync status is {sync}")
    return HealthResult(status, message)
