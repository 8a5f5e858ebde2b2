"""Argo CD's own Lua resource actions (`resource_customizations/*/actions/`, v3.6.1, fetched from the Go
module proxy by `tests.support.argocd_catalogue`, never copied into the repo) run unmodified by
`tidecd.usecases.lua_actions`: every discovery test of the catalogue offers the actions it expects, and each
action test (without parameters) makes the change its expected output shows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.argocd_catalogue import load_yaml
from tidecd.base.errors import PermanentError
from tidecd.base.model import ResourceKey
from tidecd.usecases import lua_actions

STAMP = re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d|^\w+-\d{10,11}$")  # os.date / os.time in a value


def _timeless(value: Any) -> Any:
    """Argo CD's tests run with the clock at zero: a time (or a name made of one) reads `<time>`."""
    if isinstance(value, dict):  # a null the fixture has beside the change (`creationTimestamp: null`) is noise
        return {k: _timeless(v) for k, v in value.items() if v is not None} or None
    if isinstance(value, list):  # Lua has one empty table for [] and {}
        return [_timeless(v) for v in value] or None
    return "<time>" if isinstance(value, str) and STAMP.match(value) else value


def _tests(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    return [(t.parent, load_yaml(t) or {}) for t in sorted(root.glob("*/*/actions/action_test.yaml"))]


def test_every_discovery_test_of_argocds_catalogue(argocd_catalogue: Path) -> None:
    wrong, count = [], 0
    for where, spec in _tests(argocd_catalogue):
        for case in spec.get("discoveryTests") or []:
            obj = load_yaml(where / case["inputPath"])
            got = sorted(o.name for o in lua_actions.discover(str(argocd_catalogue), ResourceKey.of(obj), obj))
            want = sorted(r["name"] for r in case.get("result") or [] if (where / r["name"] / "action.lua").is_file())
            count += 1
            if got != want:
                wrong.append(f"{where.parent.name} {case['inputPath']}: {got} != {want}")
    assert count > 60 and not wrong, wrong


def test_every_action_test_of_argocds_catalogue(argocd_catalogue: Path) -> None:
    wrong, count = [], 0
    for where, spec in _tests(argocd_catalogue):
        for case in spec.get("actionTests") or []:
            if case.get("parameters"):
                continue
            obj = load_yaml(where / case["inputPath"])
            expected = load_yaml(where / case["expectedOutputPath"])
            done = lua_actions.run(str(argocd_catalogue), ResourceKey.of(obj), case["action"], obj)
            count += 1
            if isinstance(expected, list):  # the second form: the impacted resources
                want = [(e.get("k8sOperation"), e.get("unstructuredObj", {}).get("kind")) for e in expected]
                got = [(op, o.get("kind")) for op, o in done]
            else:  # the object's spec after the action is the expected one's (times and nulls aside)
                want = [("patch", _timeless(expected.get("spec")))]
                got = [(op, _timeless(o.get("spec"))) for op, o in done]
            if got != want:
                wrong.append(f"{where.parent.name}/{case['action']} {case['inputPath']}: {got} != {want}")
    assert count > 80 and not wrong, wrong


def test_a_script_cannot_reach_outside_its_object(tmp_path: Path) -> None:
    actions = tmp_path / "batch" / "Job" / "actions"
    (actions / "steal").mkdir(parents=True)
    (actions / "discovery.lua").write_text('return {steal = {}}')
    (actions / "steal" / "action.lua").write_text(
        'local other = {apiVersion = "v1", kind = "Secret", metadata = {name = "x", namespace = "kube-system"}}\n'
        'return {{operation = "patch", resource = other}}')
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ns"}}
    key = ResourceKey.of(job)
    assert [o.name for o in lua_actions.discover(str(tmp_path), key, job)] == ["steal"]
    with pytest.raises(PermanentError, match="may patch only batch/Job ns/j"):
        lua_actions.run(str(tmp_path), key, "steal", job)
    (actions / "steal" / "action.lua").write_text('while true do end')
    with pytest.raises(PermanentError, match="time budget"):
        lua_actions.run(str(tmp_path), key, "steal", job)
    with pytest.raises(PermanentError, match="no Lua action '../x'"):
        lua_actions.run(str(tmp_path), key, "../x", job)
