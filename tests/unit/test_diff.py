"""Comparison of desired and live objects: normalization, ignored fields, masking."""

from __future__ import annotations

import copy
from typing import Any

from tidecd.base.model import ResourceKey, SyncStatus
from tidecd.clients.secrets import MASK
from tidecd.config.load import IgnoreDifference
from tidecd.diff import changed_paths, compare, live_identity, normalize, text_diff

LIVE = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "ns", "uid": "u", "resourceVersion": "7", "generation": 3,
                 "creationTimestamp": "2026-01-01T00:00:00Z",
                 "labels": {"tidecd.io/app": "demo"},
                 "annotations": {"deployment.kubernetes.io/revision": "2",
                                 "tidecd.io/tracking-id": "default:demo:apps/Deployment:ns/web",
                                 "argocd.argoproj.io/tracking-id": "demo:apps/Deployment:ns/web"},
                 "managedFields": [{"manager": "hpa", "operation": "Update",
                                    "fieldsV1": {"f:spec": {"f:replicas": {}}}}]},
    "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}},
    "status": {"readyReplicas": 2},
}
KEY = ResourceKey.of(LIVE)


def with_spec(**spec: object) -> dict[str, object]:
    return {**LIVE, "spec": {**LIVE["spec"], **spec}}  # type: ignore[dict-item]


def test_server_owned_fields_never_differ() -> None:
    predicted = {**LIVE, "metadata": {**LIVE["metadata"], "resourceVersion": "8"}, "status": {}}  # type: ignore[dict-item]
    assert compare(KEY, LIVE, predicted).status is SyncStatus.SYNCED


def test_changed_replicas_are_named() -> None:
    result = compare(KEY, LIVE, with_spec(replicas=3))
    assert result.status is SyncStatus.OUT_OF_SYNC
    assert result.changed_paths == ("spec.replicas",)
    assert "-  replicas: 2" in result.text and "+  replicas: 3" in result.text


def test_list_items_are_named_by_index() -> None:
    containers = [{"name": "c", "image": "nginx:2"}]
    result = compare(KEY, LIVE, with_spec(template={"spec": {"containers": containers}}))
    assert result.changed_paths == ("spec.template.spec.containers[0].image",)


def test_json_pointer_and_managed_fields_rules() -> None:
    pointer = IgnoreDifference(group="apps", kind="Deployment", json_pointers=("/spec/replicas",))
    manager = IgnoreDifference(kind="Deployment", managed_fields_managers=("hpa",))
    other_kind = IgnoreDifference(kind="StatefulSet", json_pointers=("/spec/replicas",))
    assert compare(KEY, LIVE, with_spec(replicas=9), [pointer]).status is SyncStatus.SYNCED
    assert compare(KEY, LIVE, with_spec(replicas=9), [manager]).status is SyncStatus.SYNCED
    assert compare(KEY, LIVE, with_spec(replicas=9), [other_kind]).status is SyncStatus.OUT_OF_SYNC


def test_missing_and_extraneous() -> None:
    assert compare(KEY, None, LIVE).status is SyncStatus.OUT_OF_SYNC
    extra = compare(KEY, LIVE, None)
    assert extra.requires_pruning and extra.status is SyncStatus.OUT_OF_SYNC


def test_secret_values_are_masked_in_diffs() -> None:
    live = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns"},
            "data": {"password": "aHVudGVyMg=="}}
    desired = {**live, "data": {"password": "c2VjcmV0LXZhbHVl"}}
    result = compare(ResourceKey.of(live), live, desired)
    assert result.status is SyncStatus.OUT_OF_SYNC and result.changed_paths == ("data.password",)
    assert "aHVudGVyMg==" not in result.text and "c2VjcmV0LXZhbHVl" not in result.text
    assert MASK in text_diff(ResourceKey.of(live), live, None)
    assert f"-  password: {MASK}\n" in result.text and f"+  password: {MASK}+\n" in result.text


def test_normalize_keeps_user_metadata() -> None:
    out = normalize(LIVE)
    assert "status" not in out and "uid" not in out["metadata"]
    assert "labels" not in out["metadata"] and "annotations" not in out["metadata"]
    helm = copy.deepcopy(LIVE)
    helm["metadata"]["labels"] = {"app.kubernetes.io/instance": "demo"}  # type: ignore[index]
    assert normalize(helm)["metadata"]["labels"] == {"app.kubernetes.io/instance": "demo"}  # a chart's label
    assert changed_paths({"a": [1, 2]}, {"a": [1]}) == ["a"]


def test_the_live_identity_ignores_status_writes_and_follows_everything_a_dry_run_depends_on() -> None:
    """The comparison cache's key: a controller's status write (and the deployment controller's revision
    annotation) keep it, so a health follow-up step needs no dry-run; a spec, label, uid or deletion
    change, or tidecd's own field ownership, changes it."""
    ours = {"manager": "tidecd", "operation": "Apply", "time": "2026-01-01T00:00:00Z",
            "fieldsV1": {"f:spec": {"f:template": {}}}}
    status = {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
              "time": "2026-01-01T00:00:01Z", "fieldsV1": {"f:status": {}}}
    live: dict[str, Any] = copy.deepcopy(LIVE)
    live["metadata"]["managedFields"] = [ours, status]
    base = live_identity(live)

    def changed(edit: object) -> str:
        obj = copy.deepcopy(live)
        edit(obj)  # type: ignore[operator]
        return live_identity(obj)

    def status_write(obj: dict[str, Any]) -> None:
        obj["status"] = {"readyReplicas": 3, "observedGeneration": 4}
        obj["metadata"]["resourceVersion"] = "8"
        obj["metadata"]["managedFields"][1]["time"] = "2026-01-01T00:00:09Z"
        obj["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "3"
        obj["metadata"]["managedFields"].append({"manager": "kube-controller-manager", "operation": "Update",
                                                 "fieldsV1": {"f:metadata": {"f:annotations": {}}}})

    assert changed(status_write) == base
    assert changed(lambda o: o["spec"].update(replicas=5)) != base
    assert changed(lambda o: o["metadata"]["labels"].update(team="x")) != base
    assert changed(lambda o: o["metadata"].update(uid="other")) != base
    assert changed(lambda o: o["metadata"].update(deletionTimestamp="2026-01-02T00:00:00Z")) != base
    assert changed(lambda o: o["metadata"]["managedFields"][0].update(fieldsV1={})) != base
    # another manager's entry matters only when an ignore rule names managers
    other = {"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {"f:replicas": {}}}}
    assert changed(lambda o: o["metadata"]["managedFields"].append(other)) == base
    with_other: dict[str, Any] = copy.deepcopy(live)
    with_other["metadata"]["managedFields"].append(other)
    assert live_identity(with_other, all_managers=True) != live_identity(live, all_managers=True)
