"""Deleting an app as Argo CD does: its deletion hooks (never run by a sync), then its resources wave by
wave, then its PostDelete hooks and their cleanup (`tidecd.sync.hooks`, `tidecd.sync.deletion`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tidecd.base.errors import ConfigError, PermissionDenied
from tidecd.base.model import Action, HealthStatus, ResourceKey
from tidecd.base.principal import ADMIN, READONLY
from tidecd.clients.store import LocalStore, MemoryStore
from tidecd.config.model import Application, ApplicationSource, Config, Destination
from tidecd.generated import records as generated
from tidecd.runtime import Runtime, Settings
from tidecd.state.app import Operation, OperationRequest, Progress, TaskPhase, TaskResult
from tidecd.sync import decide as d
from tidecd.sync import hooks
from tidecd.sync.deletion import CreateHooks, DeleteHooks, HooksFailed, Stage, WaitHooks, cleanup, kept, run_hooks
from tidecd.sync.plan import hook_phases, plan, resources
from tidecd.sync.prune import next_wave
from tidecd.usecases import api, app_write, app_write_api


def obj(kind: str, name: str, **annotations: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": kind, "metadata": {"name": name, "namespace": "ns",
                                                                 "annotations": dict(annotations)}}


ARGO, HELM = "argocd.argoproj.io/hook", "helm.sh/hook"


@pytest.mark.parametrize(("notes", "kind"), [
    ({ARGO: "PreDelete"}, "PreDelete"), ({ARGO: "PostDelete"}, "PostDelete"),
    ({HELM: "pre-delete"}, "PreDelete"), ({HELM: "post-delete"}, "PostDelete"),
    ({ARGO: "PreSync"}, ""), ({HELM: "pre-install"}, ""), ({}, "")])
def test_deletion_hooks_are_known_by_argo_and_helm_annotations(notes: dict[str, str], kind: str) -> None:
    assert hooks.delete_hook_type(obj("Job", "x", **notes)) == kind


@pytest.mark.parametrize("notes", [{ARGO: "PreDelete"}, {ARGO: "PostDelete"}, {HELM: "pre-delete"},
                                   {HELM: "post-delete"}])
def test_a_sync_neither_applies_compares_nor_refuses_deletion_hooks(notes: dict[str, str]) -> None:
    """Argo CD's test_e2e TestPreDeleteHook / TestPostDeleteHook: the app syncs, the hook is not created."""
    manifests = [obj("Job", "cleanup", **notes), obj("ConfigMap", "c")]
    assert hook_phases(manifests[0]) == []
    assert [t.key.name for t in plan(manifests)] == ["c"]
    assert [r["metadata"]["name"] for r in resources(manifests)] == ["c"]


def test_a_deletion_hook_beside_a_sync_phase_runs_in_that_phase_only() -> None:
    assert [t.phase.value for t in plan([obj("Job", "x", **{ARGO: "PreSync,PostDelete"})])] == ["PreSync"]


def test_a_deletion_hook_is_created_owned_and_marked() -> None:
    created = hooks.delete_hook_object(obj("Job", "x", **{ARGO: "PostDelete"}), "web")
    notes = created["metadata"]["annotations"]
    assert notes["tidecd.io/operation-id"] == hooks.DELETE_OPERATION
    assert created["metadata"]["labels"]


KEY_A, KEY_B = ResourceKey("batch", "Job", "ns", "a"), ResourceKey("batch", "Job", "ns", "b")


@pytest.mark.parametrize(("policy", "outcomes", "deleted"), [
    ("", {KEY_A: HealthStatus.HEALTHY}, [KEY_A]),  # no policy: always deleted
    ("HookSucceeded", {KEY_A: HealthStatus.HEALTHY}, [KEY_A]),
    ("HookSucceeded", {KEY_A: HealthStatus.HEALTHY, KEY_B: HealthStatus.DEGRADED}, []),  # the worst decides
    ("HookFailed", {KEY_A: HealthStatus.HEALTHY, KEY_B: HealthStatus.DEGRADED}, [KEY_A, KEY_B]),
    ("BeforeHookCreation", {KEY_A: HealthStatus.HEALTHY}, []),
])
def test_cleanup_follows_the_delete_policy_and_the_worst_outcome(
        policy: str, outcomes: dict[ResourceKey, HealthStatus], deleted: list[ResourceKey]) -> None:
    notes = {ARGO: "PostDelete", **({"argocd.argoproj.io/hook-delete-policy": policy} if policy else {})}
    live = {key: obj("Job", key.name, **notes) for key in outcomes}
    assert hooks.cleanup(live, outcomes) == deleted


def test_helm_delete_policies_are_mapped() -> None:
    job = obj("Job", "x", **{HELM: "post-delete", "helm.sh/hook-delete-policy": "hook-succeeded"})
    assert hooks.explicit_delete_policies(job) == {"HookSucceeded"}


# --- prune, wave by wave ------------------------------------------------------------------------------

def cm(name: str, wave: int) -> tuple[ResourceKey, int]:
    return ResourceKey("", "ConfigMap", "ns", name), wave


def test_next_wave_is_the_highest_not_pruned_yet() -> None:
    candidates = [cm("a", 0), cm("b", 2), cm("c", 2), cm("d", -1)]
    assert next_wave(candidates, set()) == ((cm("b", 2), cm("c", 2)), False)
    assert next_wave(candidates, {cm("b", 2)[0], cm("c", 2)[0]}) == ((cm("a", 0),), False)
    assert next_wave(candidates, {k for k, _ in candidates[:3]}) == ((cm("d", -1),), True)
    assert next_wave(candidates, {k for k, _ in candidates}) == ((), True)


def live_cm(name: str, *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def pruning(results: list[TaskResult], live: list[dict[str, Any]], *, pruned: bool = False) -> d.Step:
    inventory = (cm("a", 0), cm("b", 2))
    obs = d.Observation(app="app", revision="sha1", tasks=(), inventory=inventory, now=1.0,
                        live={ResourceKey.of(m): m for m in live})
    op = Operation(id="op1", revision="sha1", progress=Progress(checked=True, pruned=pruned),
                   request=OperationRequest(prune=True), results=results)
    return d.decide(obs, op, d.Policy()).step


def gone(name: str, wave: int) -> TaskResult:
    return TaskResult(cm(name, wave)[0], "Sync", wave, False, Action.PRUNED, TaskPhase.SUCCEEDED)


def test_prune_deletes_the_highest_wave_first_and_waits_until_its_objects_are_gone() -> None:
    """Argo CD's TestSyncPruneOrderWithSyncWaves: a wave is pruned once the one above it is gone."""
    first = pruning([], [live_cm("a"), live_cm("b")])
    assert isinstance(first, d.Prune) and first.candidates == (cm("b", 2),) and not first.last
    waiting = pruning([gone("b", 2)], [live_cm("a"), live_cm("b", deleting=True)])
    assert isinstance(waiting, d.Wait) and "waiting for pruned /ConfigMap/ns/b to be deleted" in waiting.message
    second = pruning([gone("b", 2)], [live_cm("a")])
    assert isinstance(second, d.Prune) and second.candidates == (cm("a", 0),) and second.last


def test_the_operation_ends_only_once_the_last_wave_is_gone() -> None:
    done = [gone("b", 2), gone("a", 0)]
    assert isinstance(pruning(done, [live_cm("a", deleting=True)], pruned=True), d.Wait)
    finished = pruning(done, [], pruned=True)
    assert isinstance(finished, d.Finish) and finished.phase.value == "Succeeded"


# --- apps removed from the config source ----------------------------------------------------------------

FINALIZER = "resources-finalizer.argocd.argoproj.io"


def written(name: str, *finalizers: str, origin: str = "") -> Application:
    return Application(name=name, project="default", source=ApplicationSource(repo_url="https://git/x", path="a"),
                       destination=Destination(namespace="ns"), finalizers=finalizers,
                       origin=origin or f"config/{name}.yaml")


def config_of(*apps: Application, problems: list[str] | None = None, invalid: dict[str, str] | None = None) -> Config:
    return Config(applications={a.name: a for a in apps}, problems=list(problems or []), invalid=dict(invalid or {}))


def loaded(store: LocalStore, base: Config) -> Config:
    return generated.merge(base, generated.load_records(store))


@pytest.mark.parametrize(("finalizers", "cascade"), [
    ((FINALIZER,), "foreground"), ((f"{FINALIZER}/foreground",), "foreground"),
    ((f"{FINALIZER}/background",), "background"), (("other",), ""), ((), "")])
def test_the_finalizer_decides_the_cascade(finalizers: tuple[str, ...], cascade: str) -> None:
    assert generated.cascade_of(finalizers) == cascade


def test_a_written_app_with_the_finalizer_removed_from_git_is_deleting_with_its_propagation(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    keep, fg, bg, orphan = (written("keep", FINALIZER), written("fg", FINALIZER),
                            written("bg", f"{FINALIZER}/background"), written("orphan"))
    assert generated.track_written(store, config_of(keep, fg, bg, orphan), "git") == []
    assert generated.track_written(store, config_of(keep), "git") == ["bg", "fg"]
    config = loaded(store, config_of(keep))
    assert config.deleting == {"bg", "fg"} and "orphan" not in config.applications
    fg_app, bg_app = config.applications["fg"], config.applications["bg"]
    assert generated.is_deleting(fg_app) and fg_app.sync_policy.automated and fg_app.sync_policy.prune
    assert "PrunePropagationPolicy=foreground" in fg_app.sync_policy.sync_options
    assert "PrunePropagationPolicy=background" in bg_app.sync_policy.sync_options
    assert config.owners["fg"] == generated.REMOVED
    assert generated.track_written(store, config_of(keep), "git") == []  # once


def test_an_app_written_again_stops_its_deletion(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    app = written("web", FINALIZER)
    generated.track_written(store, config_of(app), "git")
    generated.track_written(store, config_of(), "git")
    assert loaded(store, config_of(app)).deleting == set()  # the written app wins at once
    generated.track_written(store, config_of(app), "git")
    assert generated.load_records(store).get(generated.REMOVED) is None


@pytest.mark.parametrize("unreadable", ["set aside", "bad file", "other source"])
def test_an_app_that_may_only_be_unreadable_is_never_taken_for_removed(tmp_path: Path, unreadable: str) -> None:
    store = LocalStore(tmp_path)
    generated.track_written(store, config_of(written("web", FINALIZER)), "git")
    now = {"set aside": config_of(invalid={"web": "config/web.yaml: bad"}),
           "bad file": config_of(problems=["config/web.yaml: cannot parse YAML"]),
           "other source": config_of()}[unreadable]
    assert generated.track_written(store, now, "other" if unreadable == "other source" else "git") == []
    assert loaded(store, config_of()).deleting == set()


def test_the_stage_is_recorded_and_read_back(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    generated.track_written(store, config_of(written("web", FINALIZER)), "git")
    generated.track_written(store, config_of(), "git")
    generated.set_stage(store, generated.REMOVED, "web", Stage.POST_DELETE.value)
    assert generated.deletion_stage(loaded(store, config_of()).applications["web"]) == "post-delete"
    generated.forget(store, generated.REMOVED, "web")
    assert "web" not in loaded(store, config_of()).applications


# --- the deletion's decisions ------------------------------------------------------------------------------

JOB_A = obj("Job", "a", **{ARGO: "PreDelete"})


def test_deletion_hooks_are_created_then_waited_for_then_done() -> None:
    declared = {KEY_A: JOB_A}
    assert run_hooks("PreDelete", declared, {KEY_A: None}, {}) == CreateHooks((JOB_A,))
    waiting = run_hooks("PreDelete", declared, {KEY_A: JOB_A}, {KEY_A: HealthStatus.PROGRESSING})
    assert isinstance(waiting, WaitHooks) and waiting.keys == (KEY_A,)
    assert run_hooks("PreDelete", declared, {KEY_A: JOB_A}, {KEY_A: HealthStatus.HEALTHY}) is None


def test_a_failed_deletion_hook_stops_the_deletion_and_is_deleted_to_run_again() -> None:
    failed = run_hooks("PreDelete", {KEY_A: JOB_A}, {KEY_A: JOB_A}, {KEY_A: HealthStatus.DEGRADED})
    assert failed == HooksFailed((KEY_A,), "PreDelete hook(s) failed: ns/a")


def test_cleanup_deletes_then_waits_until_the_hooks_are_gone() -> None:
    going = {**JOB_A, "metadata": {**JOB_A["metadata"], "deletionTimestamp": "now"}}
    assert cleanup({KEY_A: JOB_A}, {KEY_A: HealthStatus.HEALTHY}) == DeleteHooks((KEY_A,))
    assert isinstance(cleanup({KEY_A: going}, {KEY_A: HealthStatus.HEALTHY}), WaitHooks)
    assert cleanup({KEY_A: None}, {}) is None


@pytest.mark.parametrize(("notes", "kind", "why"), [
    ({}, "ConfigMap", ""), ({"argocd.argoproj.io/sync-options": "Prune=false"}, "ConfigMap", ""),
    ({"argocd.argoproj.io/sync-options": "Delete=false"}, "ConfigMap", "Delete=false"),
    ({"helm.sh/resource-policy": "keep"}, "ConfigMap", "helm.sh/resource-policy: keep"),
    ({}, "CustomResourceDefinition", "a CustomResourceDefinition is never deleted with its app")])
def test_what_app_deletion_leaves_alone(notes: dict[str, str], kind: str, why: str) -> None:
    """Argo CD's `shouldBeDeleted`: Prune=false does not keep an object from its app's deletion."""
    assert kept(obj(kind, "x", **notes)) == why


# --- `tidecd app delete`: the api ----------------------------------------------------------------------------


def test_the_removal_keeps_every_other_document_of_the_file() -> None:
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web"}}
    app = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "web"}}
    text = yaml.safe_dump_all([other, app])
    assert list(yaml.safe_load_all(app_write.without(text, "web"))) == [other]
    assert app_write.without(yaml.safe_dump(app), "web") == ""


@pytest.mark.parametrize(("query", "cascade"), [
    ({}, "foreground"), ({"cascade": "true"}, "foreground"), ({"cascade": "false"}, "orphan"),
    ({"propagationPolicy": "background"}, "background"), ({"propagationPolicy": "orphan"}, "orphan"),
    ({"cascade": "background"}, "background"), ({"cascade": "orphan"}, "orphan")])
def test_argo_cds_delete_parameters_name_the_cascade(query: dict[str, str], cascade: str) -> None:
    assert app_write_api.cascade_of_query(query) == cascade


def _git_runtime(tmp_path: Path, *apps: Application) -> Runtime:
    config = Config(applications={a.name: a for a in apps})
    return Runtime.of(Settings(config="https://git.example.invalid/config.git#main:apps", api_token="t"),
                      MemoryStore(), config=config)


def test_a_delete_is_refused_before_any_git_is_touched(tmp_path: Path) -> None:
    """The config repo does not resolve: each refusal must come first, naming why."""
    runtime = _git_runtime(tmp_path, written("web", FINALIZER))
    with pytest.raises(PermissionDenied, match=r"applications, delete, default/web, sub: readonly"):
        app_write.remove(runtime, READONLY, "web")
    with pytest.raises(ConfigError, match=r"cascade 'sideways': expected foreground, background or orphan"):
        app_write.remove(runtime, ADMIN, "web", cascade="sideways")
    runtime.config().owners["web"] = "ApplicationSet/envs"
    with pytest.raises(ConfigError, match=r"app 'web' is generated by ApplicationSet/envs: remove it there"):
        app_write.remove(runtime, ADMIN, "web")
    answer = api.handle("DELETE", "/api/v1/apps/web", {"Authorization": "Bearer t"}, b"", runtime,
                        query={"cascade": "sideways"})
    assert answer.status == 400 and "expected foreground, background or orphan" in answer.body["message"]
