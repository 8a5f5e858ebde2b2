"""Pod health by phase, readiness and container states.

Waiting reasons that mean "stuck" (CrashLoopBackOff, ImagePullBackOff, ErrImagePull, Create*Error) make a
pod Degraded only under `restartPolicy: Always`: a hook pod (OnFailure/Never) that waits for an image must
not fail the hook early, then run anyway once the image appears (Argo CD's reasoning).
"""

from __future__ import annotations

from typing import Any

from tidecd.base.model import HealthResult, HealthStatus, Manifest
from tidecd.health._fields import condition, get, integer, is_false, is_true, items, quote, text

_STUCK_SUFFIXES = ("Error", "BackOff")  # CrashLoopBackOff, ImagePullBackOff, CreateContainerConfigError


def check(obj: Manifest) -> HealthResult:
    restart = text(obj, "spec", "restartPolicy") or "Always"
    phase = text(obj, "status", "phase")
    message = text(obj, "status", "message")
    containers = items(obj, "status", "initContainerStatuses") + items(obj, "status", "containerStatuses")
    if restart == "Always":
        stuck = [m for m in map(_stuck, containers) if m]
        if stuck:
            return HealthResult(HealthStatus.DEGRADED, "; ".join(stuck))
    if phase == "Pending":
        unscheduled = condition(obj, "PodScheduled")
        why = text(unscheduled, "message") if unscheduled is not None and is_false(unscheduled) else ""
        return HealthResult(HealthStatus.PROGRESSING, message or why)
    if phase == "Succeeded":
        return HealthResult(HealthStatus.HEALTHY, message)
    if phase == "Failed":
        failure = message or next((m for m in map(_failure, containers) if m), "")
        return HealthResult(HealthStatus.DEGRADED, failure or "pod failed")
    if phase == "Running":
        if restart != "Always":
            # A finite pod (typically a hook) is done only when it Succeeded.
            return HealthResult(HealthStatus.PROGRESSING, message)
        if is_true(condition(obj, "Ready")):
            return HealthResult(HealthStatus.HEALTHY, message)
        restarted = next((c for c in containers if get(c, "lastState", "terminated") is not None), None)
        if restarted is not None:
            return HealthResult(HealthStatus.DEGRADED, message or _restart_message(restarted))
        return HealthResult(HealthStatus.PROGRESSING, message)
    return HealthResult(HealthStatus.UNKNOWN, message)


def _stuck(container: dict[str, Any]) -> str:
    reason = text(container, "state", "waiting", "reason")
    if not (reason.startswith("Err") or reason.endswith(_STUCK_SUFFIXES) or reason == "InvalidImageName"):
        return ""
    detail = text(container, "state", "waiting", "message")
    where = f"container {quote(text(container, 'name'))}: {reason}"
    return f"{where}: {detail}" if detail else where


def _failure(container: dict[str, Any]) -> str:
    term = get(container, "state", "terminated")
    if not isinstance(term, dict):
        return ""
    if text(term, "message"):
        return text(term, "message")
    if text(term, "reason") == "OOMKilled":
        return "OOMKilled"
    code = integer(term, "exitCode")
    return f"container {quote(text(container, 'name'))} failed with exit code {code}" if code else ""


def _restart_message(container: dict[str, Any]) -> str:
    reason = text(container, "lastState", "terminated", "reason") or "terminated"
    code = integer(container, "lastState", "terminated", "exitCode")
    return f"container {quote(text(container, 'name'))} restarted after {reason} (exit code {code})"
