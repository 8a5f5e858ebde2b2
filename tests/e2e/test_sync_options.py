"""Sync options and the dry-run before the first write, as Argo CD v3.6.1 behaves, on the dev control plane.

Each case says which Argo CD behaviour it pins (gitops-engine `sync_context.go`, `controller/sync_namespace.go`,
Argo CD's sync-options page) and, where it ports one, the Go test of argoproj/argo-cd `test/e2e/`.
"""

from __future__ import annotations

from typing import Any

from tests.support.apps import GitOps, configmap
from tidecd.base.model import ResourceKey

WAVE = "argocd.argoproj.io/sync-wave"
SYNC_OPTIONS = "argocd.argoproj.io/sync-options"


def pod(name: str, service_account: str, wave: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": {WAVE: wave}},
            "spec": {"serviceAccountName": service_account, "automountServiceAccountToken": False,
                     "containers": [{"name": "main", "image": "nginx:1.27"}]}}


def account(name: str, wave: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "annotations": {WAVE: wave}}}


def phase_and_message(gitops: GitOps) -> tuple[str, str]:
    op = gitops.state().operation
    assert op is not None
    return op.phase.value, op.message


def test_a_later_wave_admitted_by_what_an_earlier_wave_creates_syncs(gitops: GitOps) -> None:
    """Argo CD dry-runs client-side (no admission) before the first write, so a wave-2 Pod naming the
    ServiceAccount wave 0 creates syncs. A refusal that holds at its own wave still writes nothing of that
    wave (the earlier waves stay applied, as in Argo CD, whose apply of the wave fails)."""
    gitops.push({"app/sa.yaml": account("runner", "0"), "app/pod.yaml": pod("worker", "runner", "2"),
                 "app/late.yaml": configmap("late-ok", annotations={WAVE: "2"})})
    gitops.application()
    gitops.sync()
    assert phase_and_message(gitops)[0] == "Succeeded", phase_and_message(gitops)
    assert gitops.live("Pod", "worker") is not None and gitops.live("ConfigMap", "late-ok") is not None
    # A ServiceAccount nothing creates: refused before its wave's first write, after wave 0 was applied.
    gitops.push({"app/early.yaml": configmap("early", annotations={WAVE: "0"}),
                 "app/ghost.yaml": pod("haunted", "ghost", "2"),
                 "app/late.yaml": configmap("late-ok", {"v": "2"}, annotations={WAVE: "2"})})
    gitops.sync()
    phase, message = phase_and_message(gitops)
    assert phase == "Failed" and "ghost" in message, message
    assert gitops.live("ConfigMap", "early") is not None
    assert gitops.live("Pod", "haunted") is None
    assert gitops.live("ConfigMap", "late-ok")["data"] == {"k": "v"}  # type: ignore[index]  # wave 2 unwritten


def test_ignored_fields_reset_unless_respected_and_apply_out_of_sync_only(gitops: GitOps) -> None:
    """Argo CD applies every object of a sync: a field ignoreDifferences hides is reset to git unless
    RespectIgnoreDifferences=true; ApplyOutOfSyncOnly=true leaves Synced objects out, results too (Argo CD's
    `TestSyncWithApplyOutOfSyncOnly`: one result; gitops-engine `filterOutOfSyncTasks`)."""
    ignore = {"ignoreDifferences": [{"kind": "ConfigMap", "name": "tuned", "jsonPointers": ["/data/x"]}]}
    gitops.push({"app/tuned.yaml": configmap("tuned", {"x": "git"}), "app/other.yaml": configmap("other", {"v": "1"})})
    gitops.application(extra_spec=ignore)
    gitops.sync()
    tuned = ResourceKey("", "ConfigMap", gitops.namespace, "tuned")

    def drift_and_sync(version: str, options: list[str]) -> set[str]:
        gitops.kube.merge_patch(tuned, {"data": {"x": "live"}})
        gitops.push({"app/other.yaml": configmap("other", {"v": version})})
        gitops.application(extra_spec=ignore, sync_options=options)
        gitops.sync()
        op = gitops.state().operation
        assert op is not None and op.phase == "Succeeded", op
        return {r.key.name for r in op.results}

    assert drift_and_sync("2", ["ApplyOutOfSyncOnly=true"]) == {"other"}
    assert gitops.live("ConfigMap", "tuned")["data"]["x"] == "live"  # type: ignore[index]
    assert drift_and_sync("3", ["RespectIgnoreDifferences=true"]) == {"tuned", "other"}
    assert gitops.live("ConfigMap", "tuned")["data"]["x"] == "live"  # type: ignore[index]
    assert drift_and_sync("4", []) == {"tuned", "other"}
    assert gitops.live("ConfigMap", "tuned")["data"]["x"] == "git"  # type: ignore[index]
    # the option for one sync only (the sync panel, `app sync --apply-out-of-sync-only`), not the app's
    gitops.kube.merge_patch(tuned, {"data": {"x": "live"}})
    gitops.push({"app/other.yaml": configmap("other", {"v": "5"})})
    gitops.sync(sync_options=("ApplyOutOfSyncOnly=true",))
    op = gitops.state().operation
    assert op is not None and op.phase == "Succeeded" and {r.key.name for r in op.results} == {"other"}, op
    assert gitops.live("ConfigMap", "tuned")["data"]["x"] == "live"  # type: ignore[index]


def test_managed_namespace_metadata_follows_the_app(gitops: GitOps) -> None:
    """controller/sync_namespace.go: with managedNamespaceMetadata the namespace's labels and annotations are
    applied server-side on every sync: a changed value lands, one it set and no longer names goes, other
    managers' stay."""
    target = f"{gitops.namespace}-managed"
    gitops.push({"app/cm.yaml": configmap("c")})

    def sync_with(labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
        gitops.application(namespace=target, sync_options=["CreateNamespace=true"],
                           managedNamespaceMetadata={"labels": labels, "annotations": annotations})
        gitops.sync()
        assert phase_and_message(gitops)[0] == "Succeeded", phase_and_message(gitops)
        live = gitops.kube.get(ResourceKey("", "Namespace", "", target))
        assert live is not None
        return dict(live["metadata"])

    try:
        meta = sync_with({"team": "a", "tier": "1"}, {"owner": "me"})
        assert meta["labels"]["team"] == "a" and meta["annotations"]["owner"] == "me"
        gitops.kube.merge_patch(ResourceKey("", "Namespace", "", target), {"metadata": {"labels": {"theirs": "x"}}})
        meta = sync_with({"team": "b"}, {"owner": "you"})
        assert meta["labels"]["team"] == "b" and "tier" not in meta["labels"] and meta["labels"]["theirs"] == "x"
        assert meta["annotations"]["owner"] == "you"
    finally:
        gitops.kube.delete(ResourceKey("", "Namespace", "", target))


def test_validate_false_drops_an_undeclared_field(gitops: GitOps) -> None:
    """Argo CD's `TestSyncOptionsValidateTrue` and `TestSyncOptionsValidateFalse` (testdata
    sync-options-validate-false/invalid-cm.yaml): a ConfigMap with a key the kind does not declare fails the
    sync; with `Validate=false` it syncs (kubectl apply --validate=false drops the field)."""
    invalid = {**configmap("invalid-cm"), "invalidKey": "this-fails"}
    gitops.push({"app/invalid-cm.yaml": invalid})
    gitops.application()
    gitops.sync()
    assert phase_and_message(gitops)[0] == "Failed"
    assert gitops.live("ConfigMap", "invalid-cm") is None
    invalid["metadata"]["annotations"] = {SYNC_OPTIONS: "Validate=false"}
    gitops.push({"app/invalid-cm.yaml": invalid})
    gitops.sync()
    assert phase_and_message(gitops)[0] == "Succeeded", phase_and_message(gitops)
    live = gitops.live("ConfigMap", "invalid-cm")
    assert live is not None and "invalidKey" not in live and live["data"] == {"k": "v"}
