"""Health assessment, table-driven: one YAML fixture per interesting state, as the API server returns it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidecd import health
from tidecd.base.model import HealthResult, HealthStatus, ResourceKey
from tidecd.health import (
    HookOutcome,
    app_health,
    assess,
    catalogue,
    hook_outcome,
    is_hook_done,
    namespace,
    roll_up,
)

FIXTURES = Path(__file__).parent / "fixtures" / "health"

H, S, P, M, D, U = (HealthStatus.HEALTHY, HealthStatus.SUSPENDED, HealthStatus.PROGRESSING,
                    HealthStatus.MISSING, HealthStatus.DEGRADED, HealthStatus.UNKNOWN)
WAIT = "Waiting for rollout to finish"


class _ApiLoader(yaml.SafeLoader):
    """YAML read as the API server's JSON: timestamps stay strings."""


_ApiLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load(name: str) -> dict[str, Any]:
    data = yaml.load((FIXTURES / name).read_text(), Loader=_ApiLoader)  # noqa: S506 - a SafeLoader subclass
    assert isinstance(data, dict), name
    return data


CASES: list[tuple[str, HealthStatus | None, str]] = [
    ("deployment-healthy.yaml", H, ""),
    ("deployment-progressing-generation.yaml", P,
     f"{WAIT}: observed deployment generation less than desired generation"),
    ("deployment-progressing-updated.yaml", P, f"{WAIT}: 1 out of 3 new replicas have been updated..."),
    ("deployment-progressing-terminating.yaml", P, f"{WAIT}: 1 old replicas are pending termination..."),
    ("deployment-progressing-available.yaml", P, f"{WAIT}: 1 of 3 updated replicas are available..."),
    ("deployment-degraded-deadline.yaml", D, 'Deployment "guestbook-ui" exceeded its progress deadline: '
     'ReplicaSet "guestbook-ui-7c9f6d5b8" has timed out progressing.'),
    ("deployment-suspended.yaml", S, "Deployment is paused"),
    ("deployment-pending-deletion.yaml", P, "Pending deletion"),
    ("statefulset-healthy.yaml", H,
     "statefulset rolling update complete 3 pods at revision redis-6d4b8f7c9d..."),
    ("statefulset-progressing-generation.yaml", P, "Waiting for statefulset spec update to be observed..."),
    ("statefulset-progressing-ready.yaml", P, "Waiting for 2 pods to be ready..."),
    ("statefulset-progressing-revision.yaml", P,
     "waiting for statefulset rolling update to complete 1 pods at revision redis-75c9d8b6f4..."),
    ("statefulset-progressing-partition.yaml", P,
     "Waiting for partitioned roll out to finish: 1 out of 2 new pods have been updated..."),
    ("statefulset-healthy-partition.yaml", H,
     "partitioned roll out complete: 2 new pods have been updated..."),
    ("statefulset-healthy-ondelete.yaml", H, "statefulset has 3 ready pods"),
    ("daemonset-healthy.yaml", H, ""),
    ("daemonset-progressing-generation.yaml", P,
     f"{WAIT}: observed daemon set generation less than desired generation"),
    ("daemonset-progressing-updated.yaml", P,
     'Waiting for daemon set "node-exporter" rollout to finish: 1 out of 3 new pods have been updated...'),
    ("daemonset-progressing-available.yaml", P,
     'Waiting for daemon set "node-exporter" rollout to finish: 2 of 3 updated pods are available...'),
    ("daemonset-healthy-ondelete.yaml", H, "daemon set 1 out of 3 new pods have been updated"),
    ("replicaset-healthy.yaml", H, ""),
    ("replicaset-progressing.yaml", P, f"{WAIT}: 1 out of 2 new replicas are available..."),
    ("replicaset-degraded.yaml", D, 'pods "frontend-x7k2p" is forbidden: exceeded quota: compute-resources, '
     "requested: limits.cpu=2, used: limits.cpu=4, limited: limits.cpu=4"),
    ("pod-running-ready.yaml", H, ""),
    ("pod-progressing-not-ready.yaml", P, ""),
    ("pod-pending-unschedulable.yaml", P,
     "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: "
     "0/3 nodes are available: 3 No preemption victims found for incoming pod."),
    ("pod-degraded-crashloop.yaml", D,
     'container "guestbook-ui": CrashLoopBackOff: back-off 2m40s restarting '
     "failed container=guestbook-ui pod=guestbook-ui-85d7c9b6f4-x2kq9_guestbook"
     "(c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f)"),
    ("pod-degraded-imagepullbackoff.yaml", D,
     'container "guestbook-ui": ImagePullBackOff: '
     'Back-off pulling image "gcr.io/heptio-images/ks-guestbook-demo:0.3"'),
    ("pod-degraded-restarted.yaml", D, 'container "guestbook-ui" restarted after OOMKilled (exit code 137)'),
    ("pod-hook-succeeded.yaml", H, ""),
    ("pod-hook-running.yaml", P, ""),
    ("pod-hook-imagepullbackoff.yaml", P, ""),  # restartPolicy Never: must not fail the hook early
    ("pod-hook-failed-exitcode.yaml", D, 'container "migrate" failed with exit code 3'),
    ("pod-hook-failed-message.yaml", D, 'migration 0042_orders failed: relation "orders" already exists'),
    ("pod-hook-evicted.yaml", D,
     "The node was low on resource: memory. Threshold quantity: 100Mi, available: 91948Ki."),
    ("service-clusterip.yaml", H, ""),
    ("service-loadbalancer-pending.yaml", P, "Waiting for the load balancer address"),
    ("service-loadbalancer-ready.yaml", H, ""),
    ("ingress-pending.yaml", P, "Waiting for the ingress controller to publish an address"),
    ("ingress-ready.yaml", H, ""),
    ("pvc-bound.yaml", H, ""),
    ("pvc-pending.yaml", P, ""),
    ("pvc-lost.yaml", D, "the bound PersistentVolume was lost"),
    ("job-complete.yaml", H, "Reached expected number of succeeded pods"),
    ("job-running.yaml", P, "Job is running: 1 active pods"),
    ("job-failed.yaml", D, "Job has reached the specified backoff limit"),
    ("job-suspended.yaml", S, "Job is suspended"),
    ("job-pending-deletion.yaml", P, "Pending deletion"),
    ("cronjob-healthy.yaml", H, "CronJob's last run succeeded"),
    ("cronjob-never-ran.yaml", H, "CronJob has not run yet"),
    ("cronjob-active.yaml", H, "CronJob is running a job"),
    ("cronjob-degraded-last-failed.yaml", D,
     "CronJob's last run, scheduled at 2024-05-03T02:00:00Z, did not complete successfully"),
    ("cronjob-degraded-never-succeeded.yaml", D,
     "CronJob's last run, scheduled at 2024-05-02T02:00:00Z, did not complete successfully"),
    ("cronjob-suspended.yaml", S, "CronJob is suspended"),
    ("hpa-healthy.yaml", H, "DesiredWithinRange: the desired count is within the acceptable range"),
    ("hpa-v1-healthy.yaml", H,
     "TooFewReplicas: the desired replica count is less than the minimum replica count"),
    ("hpa-progressing-new.yaml", P, "Waiting to Autoscale"),
    ("hpa-degraded-metrics.yaml", D,
     "FailedGetResourceMetric: the HPA was unable to compute the replica count: "
     "failed to get cpu utilization: missing request for cpu in container guestbook-ui of Pod "
     "guestbook-ui-85d7c9b6f4-x2kq9"),
    ("hpa-degraded-scale.yaml", D,
     "FailedGetScale: the HPA controller was unable to get the target's current "
     'scale: deployments/scale.apps "guestbook-ui" not found'),
    ("hpa-suspended-scaled-to-zero.yaml", S,
     "ScalingDisabled: scaling is disabled since the replica count of the target is zero"),
    ("apiservice-available.yaml", H, "Passed: all checks passed"),
    ("apiservice-unavailable.yaml", P,
     'MissingEndpoints: endpoints for service/metrics-server in "kube-system" '
     'have no addresses with port name "https"'),
    ("namespace-active.yaml", H, ""),
    ("namespace-terminating.yaml", P, "Pending deletion"),
    ("crd-established.yaml", H, "CRD is established"),
    ("crd-installing.yaml", P, "CRD is not established yet"),
    ("crd-names-not-accepted.yaml", D, 'CRD names have not been accepted: "cert" is already in use'),
    # No health check: no health, as in Argo CD.
    ("configmap.yaml", None, ""),
    ("certificate-not-ready.yaml", D, "Issuing certificate as Secret does not exist"),  # cert-manager.io built-in
]
MALFORMED = ["hpa-v1-malformed.yaml"]
# The kinds Argo CD's Lua catalogue checks (batch/CronJob, CustomResourceDefinition, cert-manager's
# Certificate): by default its health.lua decides, before tidecd's built-in check (as Argo CD runs its
# catalogue before gitops-engine's checks), and says this.
BY_THE_CATALOGUE = {
    "crd-established.yaml": (H, "CRD is healthy"),
    "crd-installing.yaml": (P, "CRD is being installed"),
    "crd-names-not-accepted.yaml": (D, 'CRD names have not been accepted: "cert" is already in use'),
    "cronjob-active.yaml": (H, "The job is running. Its last execution may not have been successful"),
    "cronjob-degraded-last-failed.yaml": (D, "CronJob has not completed its last execution successfully"),
    "cronjob-degraded-never-succeeded.yaml": (H, "The CronJob never completed successfully. It may not be healthy"),
    "cronjob-healthy.yaml": (H, "CronJob has completed its last execution successfully"),
    "cronjob-never-ran.yaml": (H, "CronJob has not been scheduled yet"),
    "cronjob-suspended.yaml": (H, "CronJob is Suspended"),
    "certificate-not-ready.yaml": (D, "Issuing certificate as Secret does not exist"),
}


@pytest.mark.parametrize(("fixture", "status", "message"), CASES, ids=[c[0] for c in CASES])
def test_assess(fixture: str, status: HealthStatus | None, message: str) -> None:
    """As tidecd runs by default: Argo CD's catalogue first where it has the kind."""
    status, message = BY_THE_CATALOGUE.get(fixture, (status, message))
    _assess_is(fixture, status, message)


@pytest.mark.parametrize(("fixture", "status", "message"), CASES, ids=[c[0] for c in CASES])
def test_built_in_checks_where_the_catalogue_is_not_installed(fixture: str, status: HealthStatus | None,
                                                              message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalogue, "root", lambda: None)
    _assess_is(fixture, status, message)


def test_the_catalogue_is_installed_and_applies_by_default() -> None:
    assert catalogue.root() is not None, "scripts/tools.sh argocd-catalogue (in make tools) fetches it"
    assert catalogue.health_script("batch", "CronJob") is not None
    assert catalogue.health_script("", "ConfigMap") is None
    assert set(BY_THE_CATALOGUE) <= {c[0] for c in CASES}


def _assess_is(fixture: str, status: HealthStatus | None, message: str) -> None:
    obj = load(fixture)
    before = copy.deepcopy(obj)
    result = assess(obj)
    if status is None:
        assert result is None
    else:
        assert result == HealthResult(status, message)
    assert obj == before, "assess must not modify the object"


def test_every_fixture_is_in_the_table() -> None:
    on_disk = {p.name for p in FIXTURES.glob("*.yaml")}
    in_table = {c[0] for c in CASES} | set(MALFORMED)
    assert on_disk == in_table


def test_missing_object() -> None:
    assert assess(None) == HealthResult(M)


def test_malformed_object_is_unknown_and_names_it() -> None:
    result = assess(load("hpa-v1-malformed.yaml"))
    assert result is not None and result.status is U
    where = "autoscaling/HorizontalPodAutoscaler default/php-apache"
    assert result.message.startswith(f"{where}: health check failed:")


def test_wrong_field_types_do_not_raise() -> None:
    obj = load("deployment-healthy.yaml")
    obj["status"] = {"replicas": "three", "conditions": "none", "observedGeneration": None}
    result = assess(obj)
    assert result is not None and result.status is P


def test_deletion_pending_wins_even_for_kinds_without_check() -> None:
    obj = load("configmap.yaml")
    obj["metadata"]["deletionTimestamp"] = "2024-05-03T09:00:00Z"
    assert assess(obj) == HealthResult(P, "Pending deletion")


@pytest.mark.parametrize(("api_version", "fixture"), [
    ("extensions/v1beta1", "deployment-progressing-updated.yaml"),
    ("extensions/v1beta1", "ingress-pending.yaml"),
    ("apps/v1beta2", "statefulset-progressing-ready.yaml"),
])
def test_dispatch_is_by_group_and_kind(api_version: str, fixture: str) -> None:
    obj = load(fixture)
    expected = assess(obj)
    obj["apiVersion"] = api_version
    assert assess(obj) == expected
    obj["apiVersion"] = "example.com/v1"
    assert assess(obj) is None


def test_namespace_check_terminating_phase() -> None:
    assert namespace.check(load("namespace-terminating.yaml")) == HealthResult(P, "Namespace is terminating")


def test_has_check() -> None:
    assert health.has_check("apps", "Deployment")
    assert health.has_check("", "Pod")
    assert not health.has_check("", "ConfigMap")
    assert not health.has_check("apps", "Pod")


ORDER = [H, S, P, M, D, U]


@pytest.mark.parametrize(("better", "worse"), list(zip(ORDER, ORDER[1:], strict=False)))
def test_roll_up_takes_the_worst(better: HealthStatus, worse: HealthStatus) -> None:
    assert roll_up([HealthResult(better), HealthResult(worse), HealthResult(better)]) is worse
    assert roll_up([HealthResult(worse), None, HealthResult(better)]) is worse


def test_roll_up_empty_and_no_health_is_healthy() -> None:
    assert roll_up([]) is H
    assert roll_up([None, None]) is H
    assert roll_up(iter([HealthResult(S)])) is S


def test_app_health_counts_only_live_resources_unless_none_is_live() -> None:
    """Argo CD 3 (controller/health.go setApplicationHealth): a resource not live (a selective sync left it
    out) does not make the app Missing, whatever its kind; only an app none of whose resources is live is."""
    cm = ResourceKey("", "ConfigMap", "guestbook", "guestbook-config")
    deploy = ResourceKey("apps", "Deployment", "guestbook", "guestbook-ui")
    svc = ResourceKey("", "Service", "guestbook", "guestbook-ui")
    service = load("service-clusterip.yaml")
    assert app_health([(cm, None, assess(None)), (svc, service, assess(service))]) is H
    assert app_health([(deploy, None, assess(None)), (svc, service, assess(service))]) is H
    assert app_health([(cm, None, assess(None)), (deploy, None, assess(None))]) is M
    degraded = load("deployment-degraded-deadline.yaml")
    assert app_health([(deploy, degraded, assess(degraded)), (cm, None, assess(None))]) is D
    assert app_health([(deploy, degraded, assess(degraded)), (cm, configmap := {"kind": "ConfigMap"}, None)]) is D
    assert configmap and app_health([]) is H


def test_app_health_ignores_what_argocd_ignores() -> None:
    """`argocd.argoproj.io/ignore-healthcheck: "true"` keeps an object out; a child Application that is
    Missing or Unknown does not affect its parent; a live object a Lua check calls Missing still counts."""
    deploy = ResourceKey("apps", "Deployment", "guestbook", "guestbook-ui")
    degraded = copy.deepcopy(load("deployment-degraded-deadline.yaml"))
    degraded["metadata"].setdefault("annotations", {})["argocd.argoproj.io/ignore-healthcheck"] = "true"
    assert app_health([(deploy, degraded, assess(degraded))]) is H
    child = ResourceKey("argoproj.io", "Application", "argocd", "child")
    app = {"kind": "Application"}
    assert app_health([(child, app, HealthResult(M)), (child, app, HealthResult(U))]) is H
    assert app_health([(child, app, HealthResult(D))]) is D
    widget = ResourceKey("example.com", "Widget", "ns", "w")
    assert app_health([(widget, {"kind": "Widget"}, HealthResult(M))]) is M


HOOKS = [
    ("job-complete.yaml", True, True),
    ("job-failed.yaml", True, False),
    ("job-running.yaml", False, False),
    ("job-suspended.yaml", False, False),
    ("job-pending-deletion.yaml", True, True),  # completed: a delete policy removing it changes nothing
    ("pod-hook-succeeded.yaml", True, True),
    ("pod-hook-failed-exitcode.yaml", True, False),
    ("pod-hook-evicted.yaml", True, False),
    ("pod-hook-running.yaml", False, False),
    ("pod-hook-imagepullbackoff.yaml", False, False),
    ("configmap.yaml", True, True),  # no health check: done once it exists
]


@pytest.mark.parametrize(("fixture", "finished", "succeeded"), HOOKS, ids=[h[0] for h in HOOKS])
def test_is_hook_done(fixture: str, finished: bool, succeeded: bool) -> None:
    assert is_hook_done(load(fixture)) == (finished, succeeded)


def test_hook_outcome_messages() -> None:
    assert hook_outcome(load("job-failed.yaml")) == HookOutcome(
        True, False, "Job has reached the specified backoff limit")
    assert hook_outcome(load("configmap.yaml")) == HookOutcome(
        True, True, "ConfigMap guestbook/guestbook-config created")
    failed_silently = load("pod-hook-failed-exitcode.yaml")
    failed_silently["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] = 0
    assert hook_outcome(failed_silently) == HookOutcome(True, False, "pod failed")
