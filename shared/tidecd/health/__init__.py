"""Health assessment: one pure module per kind, rolled up to the app here.

Each `<kind>.check(obj)` maps one live object (raw API JSON, with its status) to a `HealthResult`;
`assess` picks the check by (group, kind) in Argo CD's order (its `GetHealthScript`, then gitops-engine's
`GetResourceHealth`: the Lua scripts before the checks written in Go):

1. a user's Lua check from argocd-cm (`resource.customizations.health.<group>_<Kind>`, passed in as
   `scripts`, keyed "group/Kind"; see `lua.py`), which takes precedence over everything, as in Argo CD;
2. Argo CD's own Lua catalogue (`catalogue.py`: about 290 kinds, `batch/CronJob` and
   `policy/PodDisruptionBudget` among them), bundled and applied by default;
3. the built-in check of the kind (Kubernetes kinds as gitops-engine checks them in Go; Argo Rollouts,
   Argo CD Applications, SealedSecrets and cert-manager Certificates, which the catalogue checks first
   where it is installed);
4. for custom resources, the kstatus conventions (observedGeneration, Reconciling, Stalled, Ready).

A kind with none of these has no health (None) and, as in Argo CD, does not affect the app's health.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from tidecd.base.model import HealthResult, HealthStatus, Manifest, ResourceKey
from tidecd.health import (
    apiservice,
    application,
    catalogue,
    certificate,
    crd,
    cronjob,
    daemonset,
    deployment,
    hpa,
    ingress,
    job,
    kstatus,
    lua,
    namespace,
    pod,
    pvc,
    replicaset,
    rollout,
    sealedsecret,
    service,
    statefulset,
)
from tidecd.health._fields import get

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
    ("argoproj.io", "Rollout"): rollout.check,
    ("argoproj.io", "Application"): application.check,
    ("bitnami.com", "SealedSecret"): sealedsecret.check,
    ("cert-manager.io", "Certificate"): certificate.check,
}

Scripts = Mapping[str, str]  # "group/Kind" (core kinds: "Kind") → Lua health script, from argocd-cm
_NO_SCRIPTS: Scripts = {}

# API groups served by Kubernetes itself: their kinds get no kstatus fallback (a Node's Ready is not an
# app's health); every other group is a custom resource's.
_KUBERNETES_GROUPS = frozenset({
    "", "apps", "batch", "autoscaling", "policy", "extensions", "admissionregistration.k8s.io",
    "apiextensions.k8s.io", "apiregistration.k8s.io", "authentication.k8s.io", "authorization.k8s.io",
    "certificates.k8s.io", "coordination.k8s.io", "discovery.k8s.io", "events.k8s.io",
    "flowcontrol.apiserver.k8s.io", "internal.apiserver.k8s.io", "networking.k8s.io", "node.k8s.io",
    "rbac.authorization.k8s.io", "resource.k8s.io", "scheduling.k8s.io", "storage.k8s.io",
    "storagemigration.k8s.io",
})


def has_check(group: str, kind: str, scripts: Scripts = _NO_SCRIPTS) -> bool:
    """Whether objects of this kind have a health check of their own (a Lua or a built-in one)."""
    return ((group, kind) in _CHECKS or lua.script_for(scripts, group, kind) is not None
            or catalogue.health_script(group, kind) is not None)


def assess(obj: Manifest | None, scripts: Scripts = _NO_SCRIPTS) -> HealthResult | None:
    """Health of one live object: Missing when absent, None when its kind has no health check."""
    if obj is None:
        return HealthResult(HealthStatus.MISSING)
    if get(obj, "metadata", "deletionTimestamp"):
        return HealthResult(HealthStatus.PROGRESSING, "Pending deletion")
    return _judge(obj, ResourceKey.of(obj), scripts)


def _judge(obj: Manifest, key: ResourceKey, scripts: Scripts) -> HealthResult | None:
    """argocd-cm's Lua, Argo CD's catalogue, the built-in check, then kstatus for custom resources (see the
    module text)."""
    where = f"{key.group}/{key.kind}" if key.group else key.kind
    custom = lua.script_for(scripts, key.group, key.kind)
    if custom is not None:
        setting = "resource.customizations.health." + custom[0].lstrip("/").replace("/", "_")
        return lua.evaluate(custom[1], obj, where=f"{where} (argocd-cm {setting})")
    bundled = catalogue.health_script(key.group, key.kind)
    if bundled is not None:
        return lua.evaluate(bundled[1], obj, where=f"{where} (Argo CD's catalogue {bundled[0]}/health.lua)")
    check = _CHECKS.get((key.group, key.kind))
    if check is not None:
        return _run(check, obj, key)
    if key.group in _KUBERNETES_GROUPS:
        return None
    return _run(kstatus.check, obj, key)


def roll_up(results: Iterable[HealthResult | None]) -> HealthStatus:
    """The worst status in Argo CD's order (`HealthStatus.is_worse`); None is ignored; empty is Healthy."""
    worst = HealthStatus.HEALTHY
    for result in results:
        if result is not None and result.status.is_worse(worst):
            worst = result.status
    return worst


IGNORE_HEALTH_CHECK = "argocd.argoproj.io/ignore-healthcheck"  # "true": the object's health is not rolled up
_CHILD_APP_IGNORED = frozenset({HealthStatus.MISSING, HealthStatus.UNKNOWN})


def app_health(resources: Iterable[tuple[ResourceKey, Manifest | None, HealthResult | None]]) -> HealthStatus:
    """An app's health from (key, live object or None, `assess` result) of each of its resources, with Argo
    CD 3's rules (`controller/health.go` setApplicationHealth): the worst health of the live objects. A
    resource that is not live does not count (its OutOfSync already says it is missing), unless none of the
    app's resources is live: then the app is Missing. A live object annotated
    `argocd.argoproj.io/ignore-healthcheck: "true"` does not count, nor does a child Application whose
    health is Missing or Unknown. The caller leaves out hooks and resources with
    `compare-options: IgnoreExtraneous`, as Argo CD does.
    """
    worst, any_resource, any_live = HealthStatus.HEALTHY, False, False
    for key, live, result in resources:
        any_resource = True
        if live is None:
            continue
        any_live = True
        notes = (live.get("metadata") or {}).get("annotations") or {}
        if result is None or notes.get(IGNORE_HEALTH_CHECK) == "true":
            continue
        if (key.group, key.kind) == ("argoproj.io", "Application") and result.status in _CHILD_APP_IGNORED:
            continue
        if result.status.is_worse(worst):
            worst = result.status
    if any_resource and not any_live and HealthStatus.MISSING.is_worse(worst):
        return HealthStatus.MISSING
    return worst


@dataclass(frozen=True)
class HookOutcome:
    """Where a sync hook stands: the sync engine waits until `finished`, then fails unless `succeeded`."""

    finished: bool
    succeeded: bool
    message: str = ""


def hook_outcome(obj: Manifest, scripts: Scripts = _NO_SCRIPTS) -> HookOutcome:
    """Judge a live hook object as gitops-engine does, from its health.

    Healthy → succeeded; Degraded or Unknown → failed; Progressing or Suspended → still running; a kind
    without a health check (a ConfigMap hook) is done once it exists. `deletionTimestamp` is not
    consulted: a Job that completed stays completed while a delete policy removes it.
    """
    key = ResourceKey.of(obj)
    result = _judge(obj, key, scripts)
    if result is None:
        return HookOutcome(True, True, f"{key} created")
    if result.status is HealthStatus.HEALTHY:
        return HookOutcome(True, True, result.message)
    if result.status in (HealthStatus.DEGRADED, HealthStatus.UNKNOWN):
        return HookOutcome(True, False, result.message or f"{key} failed")
    return HookOutcome(False, False, result.message)


def is_hook_done(obj: Manifest) -> tuple[bool, bool]:
    """(finished, succeeded) of a live Job, Pod or other hook object; see `hook_outcome`."""
    outcome = hook_outcome(obj)
    return outcome.finished, outcome.succeeded


def _run(check: Callable[[Manifest], HealthResult | None], obj: Manifest, key: ResourceKey) -> HealthResult | None:
    """A check that trips over a malformed object reports Unknown naming the object, as Argo CD does."""
    try:
        return check(obj)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        return HealthResult(HealthStatus.UNKNOWN, f"{key}: health check failed: {exc}")


__all__ = ["IGNORE_HEALTH_CHECK", "HookOutcome", "Scripts", "app_health", "assess", "has_check", "hook_outcome",
           "is_hook_done", "roll_up"]
