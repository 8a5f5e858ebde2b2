"""The conformance harness's pure parts (tests/support/conformance.py): what it strips before comparing, how
it names generated hooks, and what it reports as a difference or a left `$ARGOCD_` placeholder."""

from __future__ import annotations

from pathlib import Path

from tests.support.conformance import Names, Observation, Outcome, _verb, normalise, placeholders
from tests.support.conformance_cases import CASES, pod
from tests.support.example_cases import EXAMPLE_CASES


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


def test_normalise_drops_allocated_node_ports_and_a_jobs_copied_name_labels() -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "front-end"},
               "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 31234}]}}
    assert normalise(service, "cfa-1", "front-end")["spec"] == {"type": "NodePort", "ports": [{"port": 80}]}
    real = "maint-7539c82-postsync-1796262941"
    names = {"job-name": real, "batch.kubernetes.io/job-name": real}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": real, "labels": {**names, "k": "v"}},
           "spec": {"selector": {}, "template": {"metadata": {"labels": {**names, "tier": "db"}}}}}
    shown = normalise(job, "cfa-1", "maint-*")
    assert shown["metadata"]["labels"] == {"k": "v"}
    assert shown["spec"]["template"]["metadata"]["labels"] == {
        "job-name": "maint-*", "batch.kubernetes.io/job-name": "maint-*", "tier": "db"}


def test_argo_results_verb_reads_apply_and_rbac_reconcile_messages() -> None:
    assert _verb({"status": "Synced", "message": "configmap/my-map created"}) == "created"
    assert _verb({"status": "Synced", "message": "role.rbac.authorization.k8s.io/r reconciled. reconciliation "
                                                "required create\n\tmissing rules added: ... configured."}) == "created"
    assert _verb({"status": "Synced", "message": "role.rbac.authorization.k8s.io/r reconciled. reconciliation "
                                                "required update ... configured."}) == ""
    assert _verb({"status": "SyncFailed", "message": "configmap/my-map created"}) == ""


def test_example_cases_name_their_directory_of_argocd_example_apps() -> None:
    for case in EXAMPLE_CASES:
        directory, _, variant = case.go_test.removeprefix("argocd-example-apps/").partition(" ")
        assert case.name == "-".join(["ex", directory] + ([variant.strip("()")] if variant else [])), case
    assert {c.name for c in EXAMPLE_CASES} >= {f"ex-{d}" for d in (
        "guestbook", "helm-guestbook", "kustomize-guestbook", "jsonnet-guestbook", "jsonnet-guestbook-tla",
        "helm-dependency", "helm-hooks", "pre-post-sync", "sync-waves", "sock-shop", "blue-green", "apps")}


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
