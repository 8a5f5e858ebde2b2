"""The sync plan: phases, waves, kind order and hooks, as Argo CD orders them."""

from __future__ import annotations

from typing import Any

import pytest

from tidecd.base.errors import ConfigError
from tidecd.base.model import ResourceKey
from tidecd.sync.plan import (
    Phase,
    apply_batches,
    apply_order,
    hook_phases,
    is_hook,
    plan,
    prune_order,
    resources,
    sync_options,
    waves,
)


def obj(kind: str, name: str, api: str = "v1", **annotations: str) -> dict[str, object]:
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": "ns",
                                                          "annotations": dict(annotations)}}


def hook(kind: str, name: str, phase: str, **more: str) -> dict[str, object]:
    return obj(kind, name, "batch/v1", **{"argocd.argoproj.io/hook": phase, **more})


def names(tasks: list) -> list[str]:  # type: ignore[type-arg]
    return [f"{t.phase.value}:{t.wave}:{t.key.kind}/{t.key.name}" for t in tasks]


def test_order_is_phase_then_wave_then_kind_then_name() -> None:
    manifests = [
        obj("Deployment", "web", "apps/v1"),
        obj("Service", "web"),
        obj("ConfigMap", "b"),
        obj("ConfigMap", "a"),
        obj("Namespace", "ns"),
        obj("Deployment", "late", "apps/v1", **{"argocd.argoproj.io/sync-wave": "2"}),
        obj("Secret", "early", **{"argocd.argoproj.io/sync-wave": "-1"}),
        hook("Job", "migrate", "PreSync"),
        hook("Job", "smoke", "PostSync"),
        obj("Widget", "custom", "example.com/v1"),
    ]
    assert names(plan(manifests)) == [
        "PreSync:0:Job/migrate",
        "Sync:-1:Secret/early",
        "Sync:0:Namespace/ns",
        "Sync:0:ConfigMap/a",
        "Sync:0:ConfigMap/b",
        "Sync:0:Service/web",
        "Sync:0:Deployment/web",
        "Sync:0:Widget/custom",
        "Sync:2:Deployment/late",
        "PostSync:0:Job/smoke",
    ]


def test_waves_groups_tasks_of_one_phase() -> None:
    tasks = plan([obj("ConfigMap", "a"), obj("ConfigMap", "b", **{"argocd.argoproj.io/sync-wave": "1"})])
    assert [(w, [t.key.name for t in ts]) for w, ts in waves(tasks, Phase.SYNC)] == [(0, ["a"]), (1, ["b"])]


def test_hooks_are_not_resources_and_skip_is_never_applied() -> None:
    manifests = [hook("Job", "x", "PreSync"), obj("ConfigMap", "c"),
                 obj("ConfigMap", "skipped", **{"argocd.argoproj.io/hook": "Skip"})]
    assert [r["metadata"]["name"] for r in resources(manifests)] == ["c"]
    assert names(plan(manifests)) == ["PreSync:0:Job/x", "Sync:0:ConfigMap/c"]


def test_a_live_hook_is_known_by_its_annotation_whatever_its_name() -> None:
    """gitops-engine's `hook.IsHook`: a finished hook an earlier operation named (generateName) is still a
    hook, so the comparison leaves it out; `Skip` and Helm's `crd-install` are not hooks."""
    generated = hook("Pod", "hook-abc1234-presync-1700000000", "PreSync")
    assert is_hook(generated)
    assert is_hook(hook("Pod", "x", "PreDelete"))
    assert is_hook(obj("Job", "t", **{"helm.sh/hook": "test"}))
    assert not is_hook(obj("ConfigMap", "c"))
    assert not is_hook(obj("ConfigMap", "s", **{"argocd.argoproj.io/hook": "Skip"}))
    assert not is_hook(obj("CustomResourceDefinition", "d", **{"helm.sh/hook": "crd-install"}))


def test_helm_hooks_map_to_argo_phases_with_weight_as_wave() -> None:
    helm = obj("Job", "pre", "batch/v1", **{"helm.sh/hook": "pre-install,pre-upgrade", "helm.sh/hook-weight": "5",
                                            "helm.sh/hook-delete-policy": "hook-succeeded"})
    [task] = plan([helm])
    assert (task.phase, task.wave, task.hook, task.delete_policies) == (
        Phase.PRE_SYNC, 5, True, frozenset({"HookSucceeded"}))
    assert hook_phases(obj("Pod", "t", **{"helm.sh/hook": "test"})) == []


def test_default_delete_policy_is_before_hook_creation() -> None:
    [task] = plan([hook("Job", "x", "Sync")])
    assert task.delete_policies == frozenset({"BeforeHookCreation"})


def test_multiple_phases_give_one_task_each() -> None:
    assert names(plan([hook("Job", "x", "PreSync,PostSync")])) == ["PreSync:0:Job/x", "PostSync:0:Job/x"]


@pytest.mark.parametrize("bad", [{"argocd.argoproj.io/sync-wave": "one"}, {"argocd.argoproj.io/hook": "Later"},
                                 {"argocd.argoproj.io/hook": "Sync",
                                  "argocd.argoproj.io/hook-delete-policy": "Never"}])
def test_bad_annotations_name_the_object(bad: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="Job ns/x"):
        plan([obj("Job", "x", "batch/v1", **bad)])


def test_sync_options_and_prune_order() -> None:
    assert sync_options(obj("ConfigMap", "a", **{"argocd.argoproj.io/sync-options": "Prune=false, Replace=true"})) \
        == frozenset({"Prune=false", "Replace=true"})
    ns = ResourceKey("", "Namespace", "", "ns")
    dep = ResourceKey("apps", "Deployment", "ns", "d")
    late = ResourceKey("", "ConfigMap", "ns", "late")
    assert prune_order([(ns, 0), (dep, 0), (late, 3)]) == [late, dep, ns]


def deployment(name: str, pod: dict[str, Any]) -> dict[str, object]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "ns"},
            "spec": {"template": {"spec": pod}}}


def test_apply_order_issues_workloads_before_configmaps_and_secrets_nothing_names() -> None:
    pod = {"serviceAccountName": "runner", "imagePullSecrets": [{"name": "pull"}],
           "volumes": [{"name": "c", "configMap": {"name": "mounted"}}, {"name": "s", "secret": {"secretName": "tls"}},
                       {"name": "p", "projected": {"sources": [{"configMap": {"name": "projected"}}]}}],
           "containers": [{"name": "web", "envFrom": [{"configMapRef": {"name": "env"}}],
                           "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "password", "key": "k"}}}]}]}
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": "ns"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {
                "containers": [{"name": "c", "env": [{"name": "Y", "valueFrom": {"configMapKeyRef": {
                    "name": "cron-settings", "key": "k"}}}]}]}}}}}}
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "runner", "namespace": "ns"},
               "imagePullSecrets": [{"name": "account-pull"}]}
    data = [obj(kind, name) for kind, name in [
        ("ConfigMap", "mounted"), ("ConfigMap", "projected"), ("ConfigMap", "env"), ("ConfigMap", "cron-settings"),
        ("ConfigMap", "unused-1"), ("ConfigMap", "unused-2"), ("Secret", "pull"), ("Secret", "tls"),
        ("Secret", "password"), ("Secret", "account-pull"), ("Secret", "unused")]]
    tasks = plan([*data, obj("Service", "web"), account, deployment("web", pod), cron,
                  obj("Ingress", "web", "networking.k8s.io/v1"), obj("Widget", "w", "example.io/v1")])

    ordered = [f"{t.key.kind}/{t.key.name}" for t in apply_order(tasks)]

    assert ordered == [
        "ServiceAccount/runner", "Secret/account-pull", "Secret/password", "Secret/pull", "Secret/tls",
        "ConfigMap/cron-settings", "ConfigMap/env", "ConfigMap/mounted", "ConfigMap/projected", "Service/web",
        "Deployment/web", "CronJob/nightly",
        "Secret/unused", "ConfigMap/unused-1", "ConfigMap/unused-2",  # named by nothing: after the workloads
        "Ingress/web", "Widget/w",  # still after every ConfigMap and Secret, as in the plan
    ]
    batches = [[f"{t.key.kind}/{t.key.name}" for t in batch] for batch in apply_batches(tasks)]
    assert batches == [ordered[:10], ordered[10:]]  # all a workload needs is answered before one is sent
    planned = [f"{t.key.kind}/{t.key.name}" for t in tasks]  # the plan itself keeps Argo CD's kind order
    assert planned.index("ConfigMap/unused-1") < planned.index("Service/web") < planned.index("Deployment/web")


def test_apply_order_without_workloads_is_the_plan_order() -> None:
    tasks = plan([obj("ConfigMap", "b"), obj("Service", "s"), obj("ConfigMap", "a"), obj("Secret", "x")])
    assert apply_order(tasks) == tasks
    assert apply_batches(tasks) == [tasks]
