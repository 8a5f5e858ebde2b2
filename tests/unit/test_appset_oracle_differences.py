"""The differences the ApplicationSet oracle (tests/e2e/test_appset_oracle.py) found between tidecd and Argo CD
v3.6.1's controller, each pinned down here from Argo CD's source (applicationset/generators/list.go,
controllers/applicationset_controller.go validateGeneratedApplications, util/argo GetDestinationCluster,
controllers/template/patch.go and apimachinery's strategic merge patch); the cases are tidecd's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_appset_argo_parity import params
from tests.unit.test_appset_generators import FakeSources, appset
from tidecd.config.appset.expand import expand
from tidecd.config.appset.generators import ClusterInfo
from tidecd.config.appset.template import merged_scalars

CLUSTERS = [ClusterInfo("staging", "https://staging.example:6443"), ClusterInfo("prod", "https://prod.example/"),
            ClusterInfo("twin", "https://twin-1"), ClusterInfo("twin", "https://twin-2")]
FINALIZER = "resources-finalizer.argocd.argoproj.io"


# -- list elements without goTemplate (list.go) --------------------------------------------------------------


def test_fasttemplate_list_elements_take_strings_only(tmp_path: Path) -> None:
    """Without goTemplate, Argo CD's list generator reads each value as a string and `values` as a mapping of
    strings; a number, a boolean or a nested mapping fails the generator ('error parsing value as string')."""
    gen = {"list": {"elements": [{"cluster": "a", "values": {"ns": "n1"}}]}}
    assert params(gen, tmp_path, go=False) == [{"cluster": "a", "values.ns": "n1"}]
    for element, field in (({"cluster": "n", "ratio": 1.5}, "elements[1].ratio: float value"),
                           ({"cluster": "n", "on": True}, "elements[1].on: bool value"),
                           ({"cluster": "n", "deep": {"k": "v"}}, "elements[1].deep: dict value"),
                           ({"cluster": "n", "values": {"deep": {"k": "v"}}}, "elements[1].values.deep: dict value"),
                           ({"cluster": "n", "values": "x"}, "elements[1].values: expected a mapping of strings")):
        out = expand(appset([{"list": {"elements": [{"cluster": "ok"}, element]}}], name="{{cluster}}"),
                     FakeSources(tmp_path))
        assert out.failed and out.apps == {}, element
        assert f"spec.generators[0].list.{field}" in out.errors[0]


def test_go_template_list_elements_keep_any_value(tmp_path: Path) -> None:
    gen = {"list": {"elements": [{"cluster": "n", "ratio": 1.5, "on": True, "deep": {"k": "v"}}]}}
    assert params(gen, tmp_path) == [{"cluster": "n", "ratio": 1.5, "on": True, "deep": {"k": "v"}}]


def test_elements_yaml_items_are_taken_as_they_are_without_go_templates(tmp_path: Path) -> None:
    """list.go appends elementsYaml's items unconverted; fasttemplate then leaves a tag naming a non-string."""
    out = expand(appset([{"list": {"elementsYaml": "- cluster: y1\n  count: 3\n"}}], name="{{cluster}}",
                        extra={"info": [{"name": "count", "value": "{{count}}"}]}), FakeSources(tmp_path))
    assert list(out.apps) == ["y1"], out.errors
    assert out.apps["y1"].doc["spec"]["info"] == [{"name": "count", "value": "{{count}}"}]


# -- destinations (validateGeneratedApplications → GetDestinationCluster) -----------------------------------


def destination_outcome(tmp_path: Path, destination: dict[str, Any]) -> tuple[list[str], list[str]]:
    gen = {"list": {"elements": [{"n": "app"}]}}
    out = expand(appset([gen], name="{{n}}", extra={"destination": {**destination, "namespace": "ns"}}),
                 FakeSources(tmp_path, CLUSTERS))
    assert not out.failed
    return list(out.apps), out.errors


@pytest.mark.parametrize("destination", [
    {"server": "https://kubernetes.default.svc"}, {"server": "https://kubernetes.default.svc/"},
    {"server": "https://staging.example:6443"}, {"server": "https://staging.example:6443/"},
    {"server": "https://prod.example"}, {"name": "in-cluster"}, {"name": "staging"}])
def test_a_destination_argo_cd_knows_is_generated(tmp_path: Path, destination: dict[str, str]) -> None:
    assert destination_outcome(tmp_path, destination) == (["app"], [])


@pytest.mark.parametrize(("destination", "problem"), [
    ({"server": "https://1.2.3.4"}, "no cluster has the server 'https://1.2.3.4'"),
    ({"name": "nowhere"}, "no cluster is named 'nowhere'"),
    ({"name": "twin"}, "2 clusters are named 'twin'"),
    ({"name": "staging", "server": "https://staging.example:6443"}, "names both a server"),
    ({}, "names no server and no cluster name")])
def test_a_destination_argo_cd_does_not_know_sets_the_app_aside(tmp_path: Path, destination: dict[str, str],
                                                               problem: str) -> None:
    """Argo CD sets such an app aside ('application destination spec is invalid') and generates the others."""
    apps, errors = destination_outcome(tmp_path, destination)
    assert apps == []
    [error] = errors
    assert "spec.generators[0] (list element 0): spec.template.spec.destination: " in error and problem in error


def test_an_unknown_destination_sets_aside_only_its_app(tmp_path: Path) -> None:
    gen = {"list": {"elements": [{"n": "a", "url": "https://staging.example:6443"}, {"n": "b", "url": "https://x"}]}}
    out = expand(appset([gen], name="{{n}}", extra={"destination": {"server": "{{url}}"}}),
                 FakeSources(tmp_path, CLUSTERS))
    assert list(out.apps) == ["a"] and len(out.errors) == 1 and not out.failed


def test_the_local_cluster_needs_no_cluster_read(tmp_path: Path) -> None:
    class NoClusters(FakeSources):
        def clusters(self) -> list[ClusterInfo]:
            raise AssertionError("clusters read for the local cluster")

    gen = {"list": {"elements": [{"n": "a"}]}}
    out = expand(appset([gen], name="{{n}}", extra={"destination": {"server": "https://kubernetes.default.svc"}}),
                 NoClusters(tmp_path))
    assert list(out.apps) == ["a"]


# -- templatePatch and finalizers (strategic merge patch) ----------------------------------------------------


def test_a_patch_cannot_remove_the_resources_finalizer(tmp_path: Path) -> None:
    """patch.go applies the patch with strategicpatch; ObjectMeta.finalizers has patchStrategy merge, so
    `finalizers: []` keeps the finalizer RenderTemplateParams added, and a patch adds to it (first: an item
    only the patch has goes before the original's)."""
    gen = {"list": {"elements": [{"n": "a"}]}}
    kept = expand(appset([gen], go=True, name="{{ .n }}",
                         patch="metadata:\n  finalizers: []\n  annotations:\n    note: patched\n"),
                  FakeSources(tmp_path))
    meta = kept.apps["a"].doc["metadata"]
    assert meta["finalizers"] == [FINALIZER] and meta["annotations"] == {"note": "patched"}, kept.errors
    added = expand(appset([gen], go=True, name="{{ .n }}", patch='{"metadata": {"finalizers": ["x.io/y"]}}'),
                   FakeSources(tmp_path))
    assert added.apps["a"].doc["metadata"]["finalizers"] == ["x.io/y", FINALIZER]


def test_merged_scalars_order_as_apimachinery() -> None:
    assert merged_scalars(["a"], []) == ["a"]
    assert merged_scalars([], ["b", "b"]) == ["b"]
    assert merged_scalars(["a", "b"], ["c"]) == ["c", "a", "b"]  # a patch item the original lacks goes first
    assert merged_scalars(["a", "b", "c"], ["c", "a"]) == ["b", "c", "a"]
    assert merged_scalars(["a", "b", "c"], ["x", "c"]) == ["x", "a", "b", "c"]
    assert merged_scalars(["a", "b", "c", "d"], ["d", "b"]) == ["a", "c", "d", "b"]
