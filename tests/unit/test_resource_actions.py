"""Resource actions' pure parts: the restart patch, the replicas parameter, what each kind offers, and the
RBAC action names Argo CD uses."""

from __future__ import annotations

from typing import Any

import pytest

from tidecd.base.errors import PermanentError
from tidecd.base.model import ResourceKey
from tidecd.usecases import resource_actions as ra

WEB = ResourceKey("apps", "Deployment", "ns", "web")


def test_restart_stamps_the_pod_template_whatever_it_has() -> None:
    bare: dict[str, Any] = {"spec": {"template": {"spec": {}}}}
    assert ra.restart_patch(bare, "T") == [{"op": "add", "path": "/spec/template/metadata",
                                            "value": {"annotations": {ra.RESTARTED_AT: "T"}}}]
    no_notes = {"spec": {"template": {"metadata": {"labels": {"a": "b"}}}}}
    assert ra.restart_patch(no_notes, "T")[0]["path"] == "/spec/template/metadata/annotations"
    noted = {"spec": {"template": {"metadata": {"annotations": {"x": "y"}}}}}
    assert ra.restart_patch(noted, "T") == [{"op": "add", "value": "T", "path":
                                             "/spec/template/metadata/annotations/kubectl.kubernetes.io~1restartedAt"}]


@pytest.mark.parametrize("raw", [None, "", "x", "-1", "10001", True, "2.5"])
def test_a_bad_replicas_parameter_is_named(raw: object) -> None:
    with pytest.raises(PermanentError, match="parameter replicas"):
        ra.replicas_of({"replicas": raw})


def test_what_each_kind_offers_and_the_rbac_names() -> None:
    assert [a.name for a in ra.offered(WEB, {"metadata": {}})] == ["restart", "scale", "delete"]
    pod = ResourceKey("", "Pod", "ns", "p")
    assert [a.name for a in ra.offered(pod, {"metadata": {}})] == ["delete"]
    assert ra.offered(pod, None) == []
    assert ra.offered(pod, {"metadata": {"deletionTimestamp": "t"}})[0].disabled
    assert ra.replicas_of({"replicas": "3"}) == 3
    assert ra.rbac_action(WEB, "restart") == "action/apps/Deployment/restart"
    assert ra.rbac_action(pod, "delete") == "delete//Pod/ns/p"
