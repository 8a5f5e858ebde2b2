"""The conformance harness's pure parts (tests/support/conformance.py): what it strips before comparing, how
it names generated hooks, and what it reports as a difference or a left `$ARGOCD_` placeholder."""

from __future__ import annotations

from pathlib import Path

from tests.support.conformance import Names, Observation, Outcome, normalise, placeholders
from tests.support.conformance_cases import CASES, pod


def observation(**changes: object) -> Observation:
    base: dict[str, object] = {"sync": "Synced", "health": "Healthy", "phase": "Succeeded",
                               "results": (("Pod", "pod", "Synced", "created", "Sync"),),
                               "resources": (("Pod", "pod", "Synced"),), "live": {"Pod/pod": {"a": 1}}}
    base.update(changes)
    return Observation(**base)  # type: ignore[arg-type]


def test_normalise_drops_server_and_tool_fields_and_the_namespace() -> None:
    live = {"apiVersion": "v1", "kind": "Service", "status": {"loadBalancer": {}},
            "metadata": {"name": "web", "namespace": "cfa-1", "uid": "u", "resourceVersion": "9",
                         "creationTimestamp": "t", "managedFields": [{}], "labels": {"tidecd.io/app": "x", "k": "v"},
                         "annotations": {"argocd.argoproj.io/tracking-id": "a:b", "note": "in cfa-1"}},
            "spec": {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "ports": [{"port": 80}]}}
    assert normalise(live, "cfa-1", "web") == {
        "apiVersion": "v1", "kind": "Service", "spec": {"ports": [{"port": 80}]},
        "metadata": {"name": "web", "labels": {"k": "v"}, "annotations": {"note": "in NS"}}}


def test_generated_names_compare_by_prefix_and_written_names_as_written() -> None:
    hook = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "hook-"}}
    names = Names([pod("pod"), hook])
    assert [names("pod"), names("hook-x7k2p"), names("pod-8ec5810-presync-1796223550"), names("my-map-798k5k7g9f"),
            names("8ec5810-postsync-1796223550")] == ["pod", "hook-*", "pod-*", "my-map-798k5k7g9f", "*"]


def test_differences_name_each_aspect_and_the_round() -> None:
    argo = observation()
    tide = observation(phase="Failed", live={"Pod/pod": {"a": 2}})
    assert set(argo.differences(tide)) == {"phase", "live"}
    outcome = Outcome(CASES[0], ((argo, argo), (argo, tide)))
    assert outcome.differences()["phase"].startswith("round 1: argocd 'Succeeded' | tidecd 'Failed'")
    assert Outcome(CASES[0], ((argo, argo),)).differences() == {}


def test_placeholders_finds_argocd_variables_left_in_rendered_and_live_manifests(tmp_path: Path) -> None:
    (tmp_path / "manifests" / "app").mkdir(parents=True)
    (tmp_path / "manifests" / "app" / "a.json").write_text('{"data": {"foo": "$ARGOCD_APP_NAME"}}')
    live = [{"kind": "ConfigMap", "metadata": {"name": "m", "namespace": "n"},
             "data": {"x": "${ARGOCD_APP_NAMESPACE}"}}]
    assert placeholders(tmp_path, live) == ["manifests/app/a.json: $ARGOCD_APP_NAME",
                                            "ConfigMap/m in n: ${ARGOCD_APP_NAMESPACE}"]
    assert placeholders(tmp_path, [{"kind": "ConfigMap", "metadata": {"name": "m"}, "data": {"x": "ARGOCD"}}]) \
        == ["manifests/app/a.json: $ARGOCD_APP_NAME"]
