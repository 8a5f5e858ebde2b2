"""RollingSync's decision (`config.appset.rolling`), cases after Argo CD's controller tests
(TestUpdateApplicationSetApplicationStatusProgress, TestBuildAppDependencyList, TestBuildAppSyncMap):
steps gate on the Healthy of every earlier step, maxUpdate bounds a step, an app of no step never syncs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.unit.test_appset_config import runtime, write
from tidecd.config.appset.model import ApplicationSet, parse_application_set
from tidecd.config.appset.rolling import AppView, Expression, Step, decide, step_of
from tidecd.config.schema import Errors, Node
from tidecd.generated import records as generated
from tidecd.usecases.appsets import refresh


def env(*values: str, op: str = "In") -> Step:
    return Step((Expression("env", op, values),))


def app(env_: str, *, synced: bool = False, healthy: bool = True, running: bool = False) -> AppView:
    return AppView({"env": env_}, synced=synced, healthy=healthy, running=running)


STEPS = (env("dev"), env("qa"), env("prod"))


def test_first_matching_step_wins_and_not_in_excludes() -> None:
    steps = (env("dev", "qa"), env("dev"), Step((Expression("env", "NotIn", ("prod",)),)))
    assert step_of({"env": "dev"}, steps) == 0
    assert step_of({"env": "stage"}, steps) == 2
    assert step_of({"env": "prod"}, steps) is None
    assert step_of({}, (env("dev"),)) is None


def test_only_the_first_step_syncs_while_later_steps_wait() -> None:
    apps = {"d1": app("dev"), "d2": app("dev"), "p1": app("prod")}
    statuses, start = decide(STEPS, apps, {})
    assert start == ["d1", "d2"]
    assert statuses["p1"][0] == "Waiting"


def test_next_step_starts_once_every_app_before_is_healthy() -> None:
    previous = {"d1": "Progressing", "d2": "Progressing", "p1": "Waiting"}
    apps = {"d1": app("dev", synced=True), "d2": app("dev", running=True), "p1": app("prod")}
    statuses, start = decide(STEPS, apps, previous)
    assert (statuses["d1"][0], statuses["d2"][0], start) == ("Healthy", "Progressing", [])
    apps["d2"] = app("dev", synced=True)
    statuses, start = decide(STEPS, apps, {n: s[0] for n, s in statuses.items()})
    assert start == ["p1"] and statuses["p1"][:2] == ("Pending", "chosen to sync in step 3")


def test_unhealthy_after_sync_keeps_the_step_progressing() -> None:
    apps = {"d1": app("dev", synced=True, healthy=False), "p1": app("prod")}
    statuses, start = decide(STEPS, apps, {"d1": "Progressing"})
    assert statuses["d1"][0] == "Progressing" and start == []


def test_max_update_bounds_a_step_counting_what_already_runs() -> None:
    steps = (Step((Expression("env", "In", ("prod",)),), max_update=2),)
    apps = {f"p{i}": app("prod") for i in range(5)}
    assert decide(steps, apps, {})[1] == ["p0", "p1"]
    apps["p0"], apps["p1"] = app("prod", running=True), app("prod", synced=True)
    assert decide(steps, apps, {"p0": "Progressing", "p1": "Healthy"})[1] == ["p2"]


def test_max_update_percent_rounds_down_but_at_least_one_and_zero_stops() -> None:
    assert Step((), "10%").limit(5) == 1
    assert Step((), "50%").limit(5) == 2
    assert Step((), "0%").limit(5) == 0
    assert Step((), 0).limit(5) == 0
    assert Step((), None).limit(5) == 5
    apps = {"q1": app("qa")}
    assert decide((Step((Expression("env", "In", ("qa",)),), 0),), apps, {})[1] == []


def test_an_app_of_no_step_is_never_synced() -> None:
    statuses, start = decide(STEPS, {"x": app("sandbox")}, {})
    assert start == [] and statuses["x"][2] is None


def test_already_synced_and_healthy_apps_do_not_sync_and_let_the_next_step_go() -> None:
    apps = {"d1": app("dev", synced=True), "p1": app("prod")}
    statuses, start = decide(STEPS, apps, {})
    assert statuses["d1"][0] == "Healthy" and start == ["p1"]


def parsed(strategy: dict[str, Any]) -> tuple[ApplicationSet | None, list[str]]:
    doc = {"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "metadata": {"name": "set"},
           "spec": {"generators": [], "template": {"metadata": {"name": "x"}, "spec": {}}, "strategy": strategy}}
    errors: list[str] = []
    return parse_application_set(Node(doc, "", Errors("sets.yaml", "ApplicationSet/set", errors))), errors


def test_the_documented_rolling_sync_is_read() -> None:
    appset, errors = parsed({"type": "RollingSync", "rollingSync": {"defaultPrune": True, "steps": [
        {"matchExpressions": [{"key": "envLabel", "operator": "In", "values": ["env-dev"]}]},
        {"matchExpressions": [{"key": "envLabel", "operator": "In", "values": ["env-qa"]}], "maxUpdate": 0},
        {"matchExpressions": [{"key": "envLabel", "operator": "NotIn", "values": ["env-dev", "env-qa"]}],
         "maxUpdate": "10%"}]}})
    assert errors == [] and appset is not None and appset.default_prune
    assert [s.max_update for s in appset.rolling_steps or ()] == [None, 0, "10%"]
    assert appset.rolling_steps[2].expressions[0] == Expression("envLabel", "NotIn", ("env-dev", "env-qa"))  # type: ignore[index]
    all_at_once, errors = parsed({"type": "AllAtOnce"})
    assert errors == [] and all_at_once is not None and all_at_once.rolling_steps is None
    assert all_at_once.spec_hash() != appset.spec_hash()


def test_a_bad_strategy_is_refused_naming_the_field() -> None:
    appset, errors = parsed({"type": "RollingSync", "rollingSync": {"steps": [
        {"matchExpressions": [{"key": "env", "operator": "Exists"}], "maxUpdate": "ten"},
        {"matchExpressions": [{"operator": "In", "values": ["a"]}], "maxUpdate": -1}]}})
    text = "\n".join(errors)
    assert appset is None
    assert "sets.yaml: ApplicationSet/set: spec.strategy.rollingSync.steps[0].matchExpressions[0].operator: " \
           "'Exists' is not one of In, NotIn" in text
    assert "spec.strategy.rollingSync.steps[0].maxUpdate: 'ten' is neither an integer nor a percent" in text
    assert "spec.strategy.rollingSync.steps[1].matchExpressions[0].key: required field is missing" in text
    assert "spec.strategy.rollingSync.steps[1].maxUpdate: must not be negative" in text
    assert "spec.strategy.type: 'Rolling' is not one of" in "\n".join(parsed({"type": "Rolling"})[1])


def rolling_set(reverse: bool, finalizer: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "{{name}}", "labels": {"env": "{{env}}"}}
    if not finalizer:
        meta["finalizers"] = ["other.example/keep"]
    strategy: dict[str, Any] = {"type": "RollingSync", "rollingSync": {"steps": [
        {"matchExpressions": [{"key": "env", "operator": "In", "values": [e]}]} for e in ("dev", "qa", "prod")]}}
    if reverse:
        strategy["deletionOrder"] = "Reverse"
    elements = [{"name": n, "env": n.rstrip("0123456789")} for n in ("dev1", "dev2", "qa1", "prod1", "lab1")]
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "metadata": {"name": "envs"},
            "spec": {"generators": [{"list": {"elements": elements}}], "strategy": strategy,
                     "template": {"metadata": meta, "spec": {
                         "project": "default", "source": {"repoURL": "https://git.example/a", "path": "{{name}}"},
                         "destination": {"name": "in-cluster", "namespace": "{{name}}"}}}}}


def deleting_after_refresh(tmp_path: Path) -> set[str]:
    refresh(runtime(tmp_path))
    config = runtime(tmp_path).config()
    for name in set(config.applications) - config.deleting:
        assert not config.applications[name].sync_policy.automated
    return set(config.deleting)


def test_reverse_deletion_removes_the_last_step_first_and_the_next_once_it_is_gone(tmp_path: Path) -> None:
    """Progressive-Syncs.md, deletionOrder Reverse: a deleted ApplicationSet's apps go step by step, the last
    step first, each once the apps of the step after it are gone; apps of no step go last."""
    write(tmp_path / "config", rolling_set(reverse=True))
    refresh(runtime(tmp_path))
    record = generated.load_records(runtime(tmp_path).store)["ApplicationSet/envs"]
    assert record["deletionOrder"] == "Reverse"
    assert record["deletionSteps"] == {"dev1": 0, "dev2": 0, "qa1": 1, "prod1": 2, "lab1": -1}
    write(tmp_path / "config")
    store = runtime(tmp_path).store
    order = []
    for _ in range(5):
        deleting = deleting_after_refresh(tmp_path)
        assert deleting_after_refresh(tmp_path) == deleting  # nothing more while a step is still deleting
        order.append(sorted(deleting))
        for name in deleting:
            generated.forget(store, "ApplicationSet/envs", name)
        if not deleting:
            break
    assert order == [["prod1"], ["qa1"], ["dev1", "dev2"], ["lab1"], []]


def test_reverse_deletion_without_the_finalizer_and_all_at_once_remove_everything_at_once(tmp_path: Path) -> None:
    write(tmp_path / "config", rolling_set(reverse=True, finalizer=False))
    refresh(runtime(tmp_path))
    write(tmp_path / "config")
    refresh(runtime(tmp_path))
    assert "ApplicationSet/envs" not in generated.load_records(runtime(tmp_path).store)  # all left at once
    write(tmp_path / "config", rolling_set(reverse=False))
    refresh(runtime(tmp_path))
    write(tmp_path / "config")
    assert deleting_after_refresh(tmp_path) == {"dev1", "dev2", "qa1", "prod1", "lab1"}
