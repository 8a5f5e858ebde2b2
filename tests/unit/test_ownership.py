"""tidecd's own ownership marks, Argo CD's read only to stay away from them (tidecd.base.ownership)."""

from __future__ import annotations

from typing import Any

import pytest

from tidecd.base import ownership
from tidecd.base.errors import ConfigError
from tidecd.base.model import ResourceKey

KEY = ResourceKey("apps", "Deployment", "ns", "web")


def live(annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
         managers: dict[str, list[str]] | None = None, name: str = "web") -> dict[str, Any]:
    """A Deployment; `managers`: field manager -> the annotation/label names it owns (`a:` or `l:` prefix)."""
    fields = []
    for manager, names in (managers or {}).items():
        meta: dict[str, Any] = {}
        for item in names:
            section = "f:annotations" if item.startswith("a:") else "f:labels"
            meta.setdefault(section, {})[f"f:{item[2:]}"] = {}
        fields.append({"manager": manager, "operation": "Apply", "fieldsV1": {"f:metadata": meta}})
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {
        "name": name, "namespace": "ns", "annotations": annotations or {}, "labels": labels or {},
        "managedFields": fields}}


def test_marks_carry_installation_app_and_object() -> None:
    out = ownership.marked(live(), "guestbook", installation="blue")
    assert out["metadata"]["annotations"]["tidecd.io/tracking-id"] == "blue:guestbook:apps/Deployment:ns/web"
    assert out["metadata"]["labels"]["tidecd.io/app"] == "guestbook"
    assert "argocd.argoproj.io/tracking-id" not in out["metadata"]["annotations"]
    assert "app.kubernetes.io/instance" not in out["metadata"]["labels"]
    both = ownership.marked(live(), "guestbook", argocd=True, installation="blue")
    assert both["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"] == "guestbook:apps/Deployment:ns/web"
    assert both["metadata"]["labels"]["app.kubernetes.io/instance"] == "guestbook"
    assert ownership.parse("blue:guestbook:apps/Deployment:ns/web") == ownership.Mark("guestbook", KEY, "blue")
    assert ownership.parse("guestbook:apps/Deployment:ns/web") is None
    assert ownership.parse_argocd("guestbook:apps/Deployment") is None


def test_installation_id_comes_from_the_environment_and_is_checked() -> None:
    assert ownership.installation_id({}) == "default"
    assert ownership.installation_id({"TIDECD_INSTALLATION_ID": "prod-eu"}) == "prod-eu"
    with pytest.raises(ConfigError, match="TIDECD_INSTALLATION_ID='a:b'"):
        ownership.installation_id({"TIDECD_INSTALLATION_ID": "a:b"})


def test_a_long_app_name_gets_a_valid_label_value() -> None:
    long = "a" * 40 + "." + "b" * 40
    value = ownership.label_value(long)
    assert len(value) <= 63 and value != ownership.label_value(long + "c") and value[-1].isalnum()
    assert ownership.selector("web") == "tidecd.io/app=web"


def test_owner_tells_tidecd_argo_cd_older_tidecd_and_copies_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDECD_INSTALLATION_ID", "blue")
    mine = live({"tidecd.io/tracking-id": "blue:web:apps/Deployment:ns/web"})
    assert ownership.owned_by(mine, "web") and not ownership.owned_by(mine, "other")
    assert ownership.claim(mine, "web") is None
    green = live({"tidecd.io/tracking-id": "green:web:apps/Deployment:ns/web"})
    assert not ownership.owned_by(green, "web")
    found = ownership.claim(green, "web")
    assert found is not None and found.describe() == "owned by tidecd app 'web' of installation 'green'"
    argo = live({"argocd.argoproj.io/tracking-id": "argocd_web:apps/Deployment:ns/web"},
                managers={"argocd-controller": ["a:argocd.argoproj.io/tracking-id"]})
    found = ownership.claim(argo, "web")
    assert found is not None and found.tool is ownership.Tool.ARGOCD
    assert found.describe() == ("tracked by Argo CD Application 'argocd/web' "
                                "(argocd.argoproj.io/tracking-id)")
    assert not ownership.owned_by(argo, "argocd_web")
    # Argo CD's mark beside tidecd's, with Argo CD among its writers: Argo CD claims it (shared is not ours)
    both = live({"tidecd.io/tracking-id": "blue:web:apps/Deployment:ns/web",
                 "argocd.argoproj.io/tracking-id": "web:apps/Deployment:ns/web"},
                managers={"tidecd": ["a:argocd.argoproj.io/tracking-id"],
                          "argocd-application-controller": ["a:argocd.argoproj.io/tracking-id"]})
    assert not ownership.owned_by(both, "web")
    # an older tidecd wrote Argo CD's names with its own field manager: still its app's, to be rewritten
    legacy = live({"argocd.argoproj.io/tracking-id": "web:apps/Deployment:ns/web"},
                  {"app.kubernetes.io/instance": "web"},
                  managers={"tidecd": ["a:argocd.argoproj.io/tracking-id", "l:app.kubernetes.io/instance"]})
    assert ownership.owned_by(legacy, "web")
    assert "older tidecd" in ownership.needs_remark(legacy, "web")
    assert ownership.needs_remark(mine, "web") == ""
    # a copy of another object's mark claims nothing
    copy = live({"argocd.argoproj.io/tracking-id": "web:apps/Deployment:ns/original"})
    assert ownership.claim(copy, "other") is None and not ownership.owned_by(copy, "web")


def test_the_instance_label_is_argo_cds_only_when_argo_cd_wrote_it() -> None:
    helm = live(labels={"app.kubernetes.io/instance": "web"}, managers={"tidecd": ["l:app.kubernetes.io/instance"]})
    assert ownership.owner(helm) is None
    labelled = live(labels={"app.kubernetes.io/instance": "web"},
                    managers={"argocd-application-controller": ["l:app.kubernetes.io/instance"]})
    found = ownership.claim(labelled, "web")
    assert found is not None and found.tool is ownership.Tool.ARGOCD and found.app == "web"
