"""RollingSync (issue 24), against the real git server and control plane: an ApplicationSet's generated
apps sync step by step. Their own automated sync is held; a refresh (a poll tick here) starts the first
step's syncs (initiated by the ApplicationSet) and records every app's applicationStatus; the prod step
waits, with nothing waiting in a function, until each dev app is Healthy, and starts from the step that
saw the last dev app settle (the handover), not at the next poll tick."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.support.apps import GitOps, configmap
from tidecd.base.principal import Principal
from tidecd.generated import records as generated
from tidecd.runtime import Runtime
from tidecd.triggers.dispatch import DirectDispatcher
from tidecd.triggers.scheduler import LocalScheduler
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
    """A poll tick, then every step it leads to (operations to their end, the handovers' syncs), through the
    local scheduler as `make demo` runs them."""
    settings, store = gitops.runtime().settings, gitops.store
    scheduler = LocalScheduler(workers=2)
    dispatcher = DirectDispatcher(lambda: Runtime(settings=settings, store=store), store=store, scheduler=scheduler)
    summary = poll(gitops.runtime(), dispatcher, jitter_seconds=0)
    assert not [e for e in summary.errors if "rollout" in e], summary.errors
    assert scheduler.wait_idle(120), f"steps still pending: {scheduler.pending()}"
    return summary


def statuses(gitops: GitOps) -> dict[str, str]:
    record = generated.load_records(gitops.store)["ApplicationSet/rollout"]
    return {n.removesuffix(f"-{gitops.namespace}"): e["status"] for n, e in record["applicationStatus"].items()}


def value(gitops: GitOps, name: str) -> str | None:
    live = gitops.live("ConfigMap", f"cm-{name}", namespace=gitops.namespace)
    return None if live is None else str(live["data"]["k"])


def handed_over(gitops: GitOps) -> None:
    """prod's sync started once both dev syncs had ended, by the ApplicationSet."""
    ops = {n: gitops.state(n).operation for n in NAMES}
    assert all(op is not None and op.phase == "Succeeded" for op in ops.values()), ops
    assert ops["prod"].request.initiated_by == "ApplicationSet/rollout"  # type: ignore[union-attr]
    assert ops["prod"].started_at >= max(ops[n].finished_at for n in ("dev-a", "dev-b"))  # type: ignore[union-attr]


def test_rolling_sync_syncs_dev_first_and_hands_over_to_prod_when_dev_is_healthy(gitops: GitOps) -> None:
    gitops.push({f"apps/{n}/cm.yaml": configmap(f"cm-{n}", {"k": "v1"}) for n in NAMES})
    (gitops.config_dir / "rollout.yaml").write_text(yaml.safe_dump(rolling_set(gitops)))
    real = {n: gitops.real(n) for n in NAMES}

    first = tick(gitops)  # created; step 1 (dev) starts, and when both end Healthy, step 2 (prod)
    assert sorted(first.rolling_started) == [real["dev-a"], real["dev-b"]]
    config = gitops.runtime().config()
    assert not any(config.applications[real[n]].sync_policy.automated for n in NAMES)  # held by the strategy
    assert {n: value(gitops, n) for n in NAMES} == dict.fromkeys(NAMES, "v1")
    handed_over(gitops)
    assert statuses(gitops) == dict.fromkeys(NAMES, "Healthy")

    # a new commit: the first tick sees it (each app compared, none syncs itself), the next rolls it out
    gitops.push({f"apps/{n}/cm.yaml": configmap(f"cm-{n}", {"k": "v2"}) for n in NAMES}, "v2")
    tick(gitops)
    assert {n: value(gitops, n) for n in NAMES} == dict.fromkeys(NAMES, "v1")
    assert gitops.state("dev-a").sync_status == "OutOfSync"
    third = tick(gitops)
    assert sorted(third.rolling_started) == [real["dev-a"], real["dev-b"]]
    assert {n: value(gitops, n) for n in NAMES} == dict.fromkeys(NAMES, "v2")
    handed_over(gitops)
    assert statuses(gitops) == dict.fromkeys(NAMES, "Healthy")

    [shown] = [s for s in summaries(gitops.runtime(), Principal("admin")) if s["name"] == "rollout"]
    assert shown["strategy"] == "RollingSync"
    assert {a["name"]: a["applicationStatus"]["status"] for a in shown["apps"]} == \
        {real[n]: "Healthy" for n in NAMES}
