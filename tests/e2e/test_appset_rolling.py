"""RollingSync (issue 24), against the real git server and control plane: an ApplicationSet's generated
apps sync step by step. Their own automated sync is held; each refresh (a poll tick here) asks which apps
may sync, starts those syncs through the one command (initiated by the ApplicationSet) and records every
app's applicationStatus; the prod step waits, with nothing waiting in a function, until each dev app is
Healthy."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.support.apps import GitOps, configmap
from tidecd.base.principal import Principal
from tidecd.generated import records as generated
from tidecd.triggers.dispatch import ManualDispatcher
from tidecd.usecases.appset_views import summaries
from tidecd.usecases.poll import PollSummary, poll

pytestmark = pytest.mark.e2e

NAMES = ("dev-a", "dev-b", "prod")


def rolling_set(gitops: GitOps) -> dict[str, Any]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "metadata": {"name": "rollout"},
            "spec": {"goTemplate": True,
                     "generators": [{"list": {"elements": [{"name": n, "env": n.split("-")[0]} for n in NAMES]}}],
                     "strategy": {"type": "RollingSync", "rollingSync": {"steps": [
                         {"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev"]}]},
                         {"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}]}},
                     "template": {"metadata": {"name": "{{ .name }}-" + gitops.namespace,
                                               "labels": {"env": "{{ .env }}"}},
                                  "spec": {"project": "default",
                                           "source": {"repoURL": gitops.repo.url, "targetRevision": "main",
                                                      "path": "apps/{{ .name }}"},
                                           "destination": {"name": "in-cluster", "namespace": gitops.namespace},
                                           "syncPolicy": {"automated": {"prune": True}}}}}}


def tick(gitops: GitOps) -> PollSummary:
    """A poll tick, then every step it handed over (each app's operation run to its end)."""
    dispatcher = ManualDispatcher()
    summary = poll(gitops.runtime(), dispatcher, jitter_seconds=0)
    assert not [e for e in summary.errors if "rollout" in e], summary.errors
    for name in sorted({r.app for r in dispatcher.refreshes}):
        gitops.reconcile(name)
    return summary


def statuses(gitops: GitOps) -> dict[str, str]:
    record = generated.load_records(gitops.store)["ApplicationSet/rollout"]
    return {n.removesuffix(f"-{gitops.namespace}"): e["status"] for n, e in record["applicationStatus"].items()}


def value(gitops: GitOps, name: str) -> str | None:
    live = gitops.live("ConfigMap", f"cm-{name}", namespace=gitops.namespace)
    return None if live is None else str(live["data"]["k"])


def test_rolling_sync_syncs_dev_first_and_prod_once_dev_is_healthy(gitops: GitOps) -> None:
    gitops.push({f"apps/{n}/cm.yaml": configmap(f"cm-{n}", {"k": "v1"}) for n in NAMES})
    (gitops.config_dir / "rollout.yaml").write_text(yaml.safe_dump(rolling_set(gitops)))
    real = {n: gitops.real(n) for n in NAMES}

    first = tick(gitops)  # created; step 1 (dev) starts, prod waits
    assert sorted(first.rolling_started) == [real["dev-a"], real["dev-b"]]
    config = gitops.runtime().config()
    assert not any(config.applications[real[n]].sync_policy.automated for n in NAMES)  # held by the strategy
    assert (value(gitops, "dev-a"), value(gitops, "dev-b"), value(gitops, "prod")) == ("v1", "v1", None)
    assert gitops.state("prod").sync_status == "OutOfSync" and gitops.state("prod").operation is None
    assert statuses(gitops)["prod"] == "Waiting"
    assert gitops.state("dev-a").operation.request.initiated_by == "ApplicationSet/rollout"  # type: ignore[union-attr]

    second = tick(gitops)  # dev Healthy: step 2 (prod) starts
    assert second.rolling_started == [real["prod"]]
    assert value(gitops, "prod") == "v1"
    tick(gitops)
    assert statuses(gitops) == dict.fromkeys(NAMES, "Healthy")

    # a new commit: dev syncs first, prod waits until every dev app is Healthy again
    gitops.push({f"apps/{n}/cm.yaml": configmap(f"cm-{n}", {"k": "v2"}) for n in NAMES}, "v2")
    tick(gitops)  # the push is seen: each app compared, none syncs itself
    assert {n: value(gitops, n) for n in NAMES} == dict.fromkeys(NAMES, "v1")
    assert gitops.state("dev-a").sync_status == "OutOfSync"
    third = tick(gitops)
    assert sorted(third.rolling_started) == [real["dev-a"], real["dev-b"]]
    assert {n: value(gitops, n) for n in NAMES} == {"dev-a": "v2", "dev-b": "v2", "prod": "v1"}
    assert statuses(gitops)["prod"] == "Waiting"
    fourth = tick(gitops)
    assert fourth.rolling_started == [real["prod"]] and value(gitops, "prod") == "v2"
    tick(gitops)
    assert statuses(gitops) == dict.fromkeys(NAMES, "Healthy")

    [shown] = [s for s in summaries(gitops.runtime(), Principal("admin")) if s["name"] == "rollout"]
    assert shown["strategy"] == "RollingSync"
    assert {a["name"]: a["applicationStatus"]["status"] for a in shown["apps"]} == \
        {real[n]: "Healthy" for n in NAMES}
