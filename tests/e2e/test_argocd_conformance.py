"""Argo CD's own e2e cases (argoproj/argo-cd `test/e2e/*.go`), replayed against tidecd on the dev control plane.

Each test names the Go test it ports; the assertions are Argo CD's (what lands in the cluster, the app's
sync and health status, the operation's phase and per-resource results), checked against Argo CD's source
with the search tool. Issue 23 collects what still differs.
"""

from __future__ import annotations

from typing import Any

from tests.support.apps import GitOps, configmap, job
from tidecd.base.model import Action
from tidecd.usecases.commands import SyncRequest

WAVE = "argocd.argoproj.io/sync-wave"
HOOK = "argocd.argoproj.io/hook"
SYNC_OPTIONS = "argocd.argoproj.io/sync-options"
COMPARE_OPTIONS = "argocd.argoproj.io/compare-options"
DELETE_POLICY = "argocd.argoproj.io/hook-delete-policy"


def unknown_kind(namespace: str, name: str = "w1", **annotations: str) -> dict[str, Any]:
    """A custom resource of a group no CRD on the destination serves."""
    meta: dict[str, Any] = {"name": name}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": f"{namespace}.unserved.example.com/v1", "kind": "Gadget", "metadata": meta,
            "spec": {"size": 1}}


def test_an_unserved_kind_is_out_of_sync_and_missing_and_fails_only_its_sync(gitops: GitOps) -> None:
    """Argo CD: a kind the destination does not serve compares OutOfSync with health Missing (the
    comparison goes on: the app is OutOfSync, not Unknown); its sync fails naming the kind, and
    `SkipDryRunOnMissingResource=true` lets it past the dry-run (gitops-engine sync_context)."""
    gitops.push({"app/cm.yaml": configmap("plain"), "app/gadget.yaml": unknown_kind(gitops.namespace)})
    gitops.application()
    state = gitops.reconcile(automate=False).state
    assert state is not None
    assert state.sync_status == "OutOfSync", state.conditions
    [gadget] = [r for r in state.resources if r.kind == "Gadget"]
    assert gadget.status == "OutOfSync" and gadget.health == "Missing", gadget
    assert not [c for c in state.conditions if c.get("type") == "ComparisonError"], state.conditions
    gitops.sync()
    state = gitops.state()
    assert state.operation is not None and state.operation.phase == "Failed"
    [result] = [r for r in state.operation.results if r.key.kind == "Gadget"]
    assert "could not find the requested resource" in result.message and "CRDs" in result.message, result
    assert gitops.live("ConfigMap", "plain") is None  # the dry-run failed: nothing written
    # SkipDryRunOnMissingResource=true: past the dry-run, the rest applies, the object's own apply fails
    skip = {SYNC_OPTIONS: "SkipDryRunOnMissingResource=true"}
    gitops.push({"app/gadget.yaml": unknown_kind(gitops.namespace, **skip)})
    gitops.sync()
    state = gitops.state()
    assert state.operation is not None and state.operation.phase == "Failed"
    assert gitops.live("ConfigMap", "plain") is not None
    [result] = [r for r in state.operation.results if r.key.kind == "Gadget"]
    assert "could not find the requested resource" in result.message, result


def hook_job(generate_name: str, hook: str, policy: str = "") -> dict[str, Any]:
    """A hook Job named only by `metadata.generateName`, as Argo CD's e2e hook testdata writes them."""
    obj = job("unused", annotations={HOOK: hook, **({DELETE_POLICY: policy} if policy else {})})
    del obj["metadata"]["name"]
    obj["metadata"]["generateName"] = generate_name
    return obj


def test_hooks_named_by_generate_name_run_and_are_tracked(gitops: GitOps) -> None:
    """Argo CD (hook_test.go, gitops-engine sync/doc.go): a hook with only `generateName` is created anew on
    every sync, runs in its phase, and is tracked in the operation's results under its generated name."""
    gitops.push({"app/cm.yaml": configmap("plain"),
                 "app/pre.yaml": hook_job("pre-", "PreSync"),
                 "app/post.yaml": hook_job("post-", "PostSync", "HookSucceeded")})
    gitops.application()
    gitops.sync()
    state = gitops.state()
    assert state.operation is not None and state.operation.phase == "Succeeded", state.operation
    hooks = {r.key.name: r for r in state.operation.results if r.hook}
    pre = [n for n in hooks if n.startswith("pre-")]
    post = [n for n in hooks if n.startswith("post-")]
    assert len(pre) == 1 and len(post) == 1, hooks
    assert hooks[pre[0]].sync_phase == "PreSync" and hooks[post[0]].sync_phase == "PostSync"
    assert all(r.phase.value == "Succeeded" for r in hooks.values()), hooks
    assert gitops.live("Job", pre[0], "batch") is not None
    assert gitops.live("Job", post[0], "batch") is None  # HookSucceeded
    assert {r.kind for r in state.resources} == {"ConfigMap"}  # hooks are not resources
    gitops.sync()  # a second sync creates a new copy, under a new name
    again = gitops.state()
    assert again.operation is not None and again.operation.phase == "Succeeded"
    second = [r.key.name for r in again.operation.results if r.hook and r.key.name.startswith("pre-")]
    assert len(second) == 1 and second[0] != pre[0], (pre, second)


def test_a_finished_generated_hook_is_no_resource_of_the_app(gitops: GitOps) -> None:
    """Argo CD (controller/state.go CompareAppState, gitops-engine `hook.IsHook`): a live object that is a
    hook is neither compared nor listed, so a finished PreSync hook named by its operation (of the same kind
    as a plain object of the app, hence listed) does not make the app OutOfSync once the operation is over."""
    gitops.push({"app/work.yaml": job("work"), "app/pre.yaml": hook_job("pre-", "PreSync")})
    gitops.application()
    gitops.sync()
    gitops.reconcile(automate=False)  # a refresh after the operation: its hook name is no longer planned
    state = gitops.state()
    assert state.operation is not None and state.operation.phase == "Succeeded", state.operation
    [pre] = [r.key.name for r in state.operation.results if r.hook]
    assert gitops.live("Job", pre, "batch") is not None  # BeforeHookCreation: it stays until the next sync
    assert [(r.kind, r.name) for r in state.resources] == [("Job", "work")], state.resources
    assert state.sync_status == "Synced" and state.health == "Healthy", (state.sync_status, state.health)


def test_prune_runs_after_the_apply_waves_highest_wave_first(gitops: GitOps) -> None:
    """Argo CD's sync-waves doc: waves are applied lowest first and pruned highest first, and pruning comes
    after the sync phase's waves (gitops-engine gives prune tasks the last wave's turn)."""
    gitops.push({f"app/{name}.yaml": configmap(name, annotations={WAVE: str(wave)})
                 for name, wave in (("low", -1), ("mid", 0), ("high", 3))})
    gitops.application()
    gitops.sync()
    gitops.push({"app/low.yaml": None, "app/mid.yaml": None, "app/high.yaml": None,
                 "app/new.yaml": configmap("new", annotations={WAVE: "5"})})
    outcome = gitops.sync(prune=True)
    state = gitops.state()
    assert state.operation is not None and state.operation.phase == "Succeeded", state.operation
    order = [(e.key.name, e.action) for e in outcome.changes.entries
             if e.action in (Action.PRUNED, Action.CREATED)]
    assert order == [("new", Action.CREATED), ("high", Action.PRUNED), ("mid", Action.PRUNED),
                     ("low", Action.PRUNED)], order
    assert [gitops.live("ConfigMap", n) for n in ("low", "mid", "high")] == [None, None, None]
    assert state.sync_status == "Synced"


def test_a_failed_automated_sync_sets_sync_error_until_a_sync_succeeds(gitops: GitOps) -> None:
    """Argo CD's controller (`autoSync`): after an automated sync of a revision failed, the app carries a
    `SyncError` condition "Failed last sync attempt to [<revision>]: <message>" and that revision is not
    tried again; the condition goes once a later sync succeeds."""
    sha = gitops.push({"app/cm.yaml": configmap("plain"), "app/gadget.yaml": unknown_kind(gitops.namespace)})
    gitops.application(automated={})
    gitops.reconcile()
    state = gitops.state()
    assert state.operation is not None and state.operation.phase == "Failed", state.operation
    outcome = gitops.reconcile()
    state = gitops.state()
    assert state.operation is not None and state.operation.phase == "Failed"  # not started again
    assert not outcome.changes.entries
    [error] = [c for c in state.conditions if c["type"] == "SyncError"]
    assert error["message"].startswith(f"Failed last sync attempt to [{sha}]: "), error
    assert "Gadget" in error["message"], error
    assert state.sync_status == "OutOfSync"  # a sync error is no comparison error
    gitops.push({"app/gadget.yaml": None})
    gitops.reconcile()
    state = gitops.state()
    assert state.operation is not None and state.operation.phase == "Succeeded", state.operation
    gitops.reconcile()
    assert not [c for c in gitops.state().conditions if c["type"] == "SyncError"], gitops.state().conditions


def test_an_extraneous_object_with_ignore_extraneous_is_listed_but_keeps_the_app_synced(gitops: GitOps) -> None:
    """Argo CD's compare-options page: `IgnoreExtraneous` leaves an extraneous object out of the app's sync
    status only; the object is still listed OutOfSync (requires pruning), and a sync with prune deletes it."""
    gitops.push({"app/a.yaml": configmap("a"),
                 "app/gen.yaml": configmap("gen", annotations={COMPARE_OPTIONS: "IgnoreExtraneous"})})
    gitops.application()
    gitops.sync()
    gitops.push({"app/gen.yaml": None})
    state = gitops.reconcile(automate=False).state
    assert state is not None
    assert state.sync_status == "Synced", [(r.name, r.status) for r in state.resources]
    [gen] = [r for r in state.resources if r.name == "gen"]
    assert gen.status == "OutOfSync" and gen.requires_pruning, gen
    outcome = gitops.sync(prune=True)
    assert {e.key.name: e.action for e in outcome.changes.entries}.get("gen") is Action.PRUNED
    assert gitops.live("ConfigMap", "gen") is None


def test_replace_true_replaces_on_every_sync_even_when_synced(gitops: GitOps) -> None:
    """Argo CD's TestSyncOptionReplace (app_management_test.go): a ConfigMap with `Replace=true` is created
    by the first sync and "replaced" by the second, though it compared Synced in between."""
    gitops.push({"app/cm.yaml": configmap("my-map", annotations={SYNC_OPTIONS: "Replace=true"})})
    gitops.application()
    first = gitops.sync()
    assert [(e.key.name, e.action) for e in first.changes.entries] == [("my-map", Action.CREATED)]
    assert gitops.state().sync_status == "Synced"
    runtime = gitops.runtime()
    second = gitops.reconcile(request=SyncRequest(), runtime=runtime)
    state = gitops.state()
    assert state.operation is not None and state.operation.phase == "Succeeded", state.operation
    assert state.sync_status == "Synced"
    [result] = [r for r in state.operation.results if r.key.name == "my-map"]
    assert result.action is Action.CONFIGURED and result.message == "replaced", result
    assert runtime.cluster(runtime.app(gitops.real("app")).destination).writes >= 1, second.changes.entries
