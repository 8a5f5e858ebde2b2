"""Health assessment: one pure module per kind, rolled up to the app here.

Each `<kind>.check(obj)` maps one live object (raw API JSON, with its status) to a `HealthResult`;
`assess` picks the check by (group, kind), as gitops-engine's `GetHealthCheckFunc` does. A kind without a
check has no health (None) and, as in Argo CD, does not affect the app's health.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tidecd.health import (
    apiservice,
    crd,
    cronjob,
    daemonset,
    deployment,
    hpa,
    ingress,
    job,
    namespace,
    pod,
    pvc,
    replicaset,
    service,
    statefulset,
)
from tidecd.health._fields import get
from tidecd.model import HealthResult, HealthStatus, Manifest, ResourceKey

Check = Callable[[Manifest], HealthResult]

_CHECKS: dict[tuple[str, str], Check] = {
    ("apps", "Deployment"): deployment.check,
    ("apps", "StatefulSet"): statefulset.check,
    ("apps", "DaemonSet"): daemonset.check,
    ("apps", "ReplicaSet"): replicaset.check,
    ("extensions", "Deployment"): deployment.check,
    ("extensions", "DaemonSet"): daemonset.check,
    ("extensions", "ReplicaSet"): replicaset.check,
    ("extensions", "Ingress"): ingress.check,
    ("networking.k8s.io", "Ingress"): ingress.check,
    ("", "Pod"): pod.check,
    ("", "Service"): service.check,
    ("", "PersistentVolumeClaim"): pvc.check,
    ("", "Namespace"): namespace.check,
    ("batch", "Job"): job.check,
    ("batch", "CronJob"): cronjob.check,
    ("autoscaling", "HorizontalPodAutoscaler"): hpa.check,
    ("apiregistration.k8s.io", "APIService"): apiservice.check,
    ("apiextensions.k8s.io", "CustomResourceDefinition"): crd.check,
}


def has_check(group: str, kind: str) -> bool:
    """Whether objects of this kind have a health at all."""
    return (group, kind) in _CHECKS


def assess(obj: Manifest | None) -> HealthResult | None:
    """Health of one live object: Missing when absent, None when its kind has no health check."""
    if obj is None:
        return HealthResult(HealthStatus.MISSING)
    if get(obj, "metadata", "deletionTimestamp"):
        return HealthResult(HealthStatus.PROGRESSING, "Pending deletion")
    key = ResourceKey.of(obj)
    check = _CHECKS.get((key.group, key.kind))
    return None if check is None else _run(check, obj, key)


def roll_up(results: Iterable[HealthResult | None]) -> HealthStatus:
    """The worst status in Argo CD's order (`HealthStatus.is_worse`); None is ignored; empty is Healthy."""
    worst = HealthStatus.HEALTHY
    for result in results:
        if result is not None and result.status.is_worse(worst):
            worst = result.status
    return worst


def app_health(resources: Iterable[tuple[ResourceKey, HealthResult | None]]) -> HealthStatus:
    """An app's health from (key, `assess` result) of each of its resources, with Argo CD's rules.

    As `roll_up`, except that a Missing resource counts only when its kind has a health check: a missing
    ConfigMap shows as Missing on the resource but does not make the app Missing. The caller leaves out
    hooks and resources with `compare-options: IgnoreExtraneous`, as Argo CD does.
    """
    return roll_up(
        result for key, result in resources
        if not (result is not None and result.status is HealthStatus.MISSING
                and not has_check(key.group, key.kind))
    )


@dataclass(frozen=True)
class HookOutcome:
    """Where a sync hook stands: the sync engine waits until `finished`, then fails unless `succeeded`."""

    finished: bool
    succeeded: bool
    message: str = ""


def hook_outcome(obj: Manifest) -> HookOutcome:
    """Judge a live hook object as gitops-engine does, from its health.

    Healthy → succeeded; Degraded or Unknown → failed; Progressing or Suspended → still running; a kind
    without a health check (a ConfigMap hook) is done once it exists. `deletionTimestamp` is not
    consulted: a Job that completed stays completed while a delete policy removes it.
    """
    key = ResourceKey.of(obj)
    check = _CHECKS.get((key.group, key.kind))
    if check is None:
        return HookOutcome(True, True, f"{key} created")
    result = _run(check, obj, key)
    if result.status is HealthStatus.HEALTHY:
        return HookOutcome(True, True, result.message)
    if result.status in (HealthStatus.DEGRADED, HealthStatus.UNKNOWN):
        return HookOutcome(True, False, result.message or f"{key} failed")
    return HookOutcome(False, False, result.message)


def is_hook_done(obj: Manifest) -> tuple[bool, bool]:
    """(finished, succeeded) of a live Job, Pod or other hook object; see `hook_outcome`."""
    outcome = hook_outcome(obj)
    return outcome.finished, outcome.succeeded


def _run(check: Check, obj: Manifest, key: ResourceKey) -> HealthResult:
    """A check that trips over a malformed object reports Unknown naming the object, as Argo CD does."""
    try:
        return check(obj)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        return HealthResult(HealthStatus.UNKNOWN, f"{key}: health check failed: {exc}")


__all__ = ["HookOutcome", "app_health", "assess", "has_check", "hook_outcome", "is_hook_done", "roll_up"]
