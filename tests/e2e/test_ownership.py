"""tidecd's own ownership marks against the real API server (issue 18.1): Argo CD's objects are refused,
an older tidecd's marks are rewritten in place, and Argo CD's marks are never written by default.

Argo CD-tracked objects are made here by hand, as Argo CD leaves them (its tracking id, applied by its
field manager `argocd-controller`); tests/e2e/test_argocd_side_by_side.py runs the real Argo CD.
"""

from __future__ import annotations

import json
from typing import Any

from tests.support.apps import GitOps, configmap, deployment
from tidecd.base.model import ResourceKey
from tidecd.usecases.commands import SyncRequest


def apply_as(gitops: GitOps, obj: dict[str, Any], manager: str) -> dict[str, Any]:
    """Server-side apply of `obj` into the test's namespace by another field manager."""
    obj = {**obj, "metadata": {**obj["metadata"], "namespace": gitops.namespace}}
    key = ResourceKey.of(obj)
    res = gitops.kube.resource(key.group, key.kind)
    return dict(gitops.kube.request("PATCH", res.path(key.namespace, key.name), body=json.dumps(obj),
                                    query={"fieldManager": manager, "force": "true"},
                                    content_type="application/apply-patch+yaml", key=key))


def marked(obj: dict[str, Any], app: str, gitops: GitOps, *, label: bool = False) -> dict[str, Any]:
    """`obj` with Argo CD's tracking id for `app` (and its instance label)."""
    key = ResourceKey.of({**obj, "metadata": {**obj["metadata"], "namespace": gitops.namespace}})
    meta = {**obj["metadata"], "annotations": {**obj["metadata"].get("annotations", {}),
                                               "argocd.argoproj.io/tracking-id": key.tracking_id(app)}}
    if label:
        meta["labels"] = {**meta.get("labels", {}), "app.kubernetes.io/instance": app}
    return {**obj, "metadata": meta}


def test_tidecd_writes_only_its_own_marks(gitops: GitOps) -> None:
    gitops.push({"app/web.yaml": deployment("web"), "app/cm.yaml": configmap("cm")})
    name = gitops.application()
    gitops.sync()
    live = gitops.live("Deployment", "web", "apps")
    assert live is not None
    meta = live["metadata"]
    assert meta["labels"]["tidecd.io/app"] == name
    assert meta["annotations"]["tidecd.io/tracking-id"] == f"default:{name}:apps/Deployment:{gitops.namespace}/web"
    assert "argocd.argoproj.io/tracking-id" not in meta["annotations"]
    assert "app.kubernetes.io/instance" not in meta["labels"]
    assert gitops.state().sync_status == "Synced"


def test_an_argo_cd_object_is_never_overwritten_or_pruned(gitops: GitOps) -> None:
    name = gitops.real("app")
    theirs = apply_as(gitops, marked(configmap("theirs", {"owner": "argo"}), name, gitops), "argocd-controller")
    gitops.push({"app/theirs.yaml": configmap("theirs", {"owner": "tidecd"},
                                              annotations={"argocd.argoproj.io/sync-options": "AllowTakeover=true"}),
                 "app/mine.yaml": configmap("mine")})
    gitops.application(automated={"prune": True, "selfHeal": True})
    outcome = gitops.reconcile()
    state = gitops.state()
    warning = [c["message"] for c in state.conditions if c["type"] == "SharedResourceWarning"]
    assert warning and f"tracked by Argo CD Application {name!r}" in warning[0]
    op = state.operation
    assert op is not None and "not overwritten" in op.message and f"tidecd app adopt {name}" in op.message
    live = gitops.live("ConfigMap", "theirs")
    assert live is not None and live["data"] == {"owner": "argo"}
    assert live["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]
    assert gitops.live("ConfigMap", "mine") is None and outcome.changes.entries == []
    # git drops it: still never pruned, even when an inventory were to list it
    gitops.push({"app/theirs.yaml": None})
    gitops.reconcile()
    assert gitops.state().sync_status == "Synced"
    live = gitops.live("ConfigMap", "theirs")
    assert live is not None and live["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]


def test_an_older_tidecds_marks_are_rewritten_in_place(gitops: GitOps) -> None:
    name = gitops.real("app")
    # what tidecd before its own marks wrote: Argo CD's tracking id and instance label, by field manager tidecd
    old = [gitops.kube.apply({**marked(o, name, gitops, label=True),
                              "metadata": {**marked(o, name, gitops, label=True)["metadata"],
                                           "namespace": gitops.namespace}})
           for o in (deployment("web"), configmap("cm"))]
    gitops.push({"app/web.yaml": deployment("web"), "app/cm.yaml": configmap("cm")})
    gitops.application()
    gitops.reconcile()
    state = gitops.state()
    assert state.sync_status == "OutOfSync"
    assert all("older tidecd" in r.diff for r in state.resources), [r.diff for r in state.resources]
    assert not [c for c in state.conditions if c["type"] == "SharedResourceWarning"]
    gitops.reconcile(request=SyncRequest())
    for before in old:
        key = ResourceKey.of(before)
        live = gitops.kube.get(key)
        assert live is not None and live["metadata"]["uid"] == before["metadata"]["uid"]
        assert "argocd.argoproj.io/tracking-id" not in live["metadata"]["annotations"]
        assert "app.kubernetes.io/instance" not in live["metadata"]["labels"]
        assert live["metadata"]["annotations"]["tidecd.io/tracking-id"] == f"default:{key.tracking_id(name)}"
        # only the marks changed (a Deployment's generation still moves: annotation changes bump it)
        assert {k: v for k, v in live.items() if k not in ("metadata", "status")} == \
            {k: v for k, v in before.items() if k not in ("metadata", "status")}
    gitops.settle()  # the rollout's last status writes are not the comparison's business
    runtime = gitops.runtime()
    gitops.reconcile(runtime=runtime)
    assert gitops.state().sync_status == "Synced"
    assert runtime.cluster(runtime.app(name).destination).writes == 0
