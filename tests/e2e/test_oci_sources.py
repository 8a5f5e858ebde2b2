"""OCI registries as sources: helm charts pushed with `helm push` (both of Argo CD's URL forms) and plain
OCI artifacts of manifests (Argo CD 3.1), against the distribution registry from `scripts/tools.sh`."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_chart_sources import assert_synced, chart_app, cm
from tests.support.apps import GitOps
from tests.support.charts import Registry, package, write_chart

pytestmark = pytest.mark.e2e


def test_oci_chart_pushed_with_helm_push_both_url_forms(gitops: GitOps, oci_registry: Registry,
                                                       tmp_path: Path) -> None:
    namespace = f"charts-{uuid.uuid4().hex[:6]}"
    for version in ("0.1.0", "0.1.4", "0.2.0"):
        tgz = package(write_chart(tmp_path / version, "web", version), tmp_path / "out", tmp_path / "home")
        oci_registry.helm_push(tgz, namespace, tmp_path / "home")
    chart_app(gitops, f"oci://{oci_registry.host}/{namespace}/web", "^0.1", name="new-form", chart="")
    chart_app(gitops, f"{oci_registry.host}/{namespace}", "0.2.0", name="old-form")  # Argo CD's enableOCI form
    for app, version in (("new-form", "0.1.4"), ("old-form", "0.2.0")):
        gitops.sync(app)
        state = gitops.state(app)
        assert_synced(state)
        assert state.revision == version
        assert cm(gitops, app)["data"]["version"] == version
    assert [k for k in gitops.store.list("snapshots/") if "/charts/web-0.1.4-" in k]


def test_plain_oci_artifact_of_manifests_as_a_source(gitops: GitOps, oci_registry: Registry) -> None:
    repository = f"manifests/app-{uuid.uuid4().hex[:6]}"
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "from-oci"}, "data": {"v": "1"}}
    oci_registry.push_artifact(repository, "v1", {"app/cm.yaml": yaml.safe_dump(config_map),
                                                  "other/ignored.yaml": yaml.safe_dump({**config_map,
                                                                                         "metadata": {"name": "no"}})})
    gitops.application(source={"repoURL": f"oci://{oci_registry.host}/{repository}", "targetRevision": "v1",
                               "path": "app"})
    gitops.sync()
    state = gitops.state()
    assert_synced(state)
    assert state.revision == "v1"
    assert gitops.live("ConfigMap", "from-oci")["data"] == {"v": "1"}  # type: ignore[index]
    assert gitops.live("ConfigMap", "no") is None


def test_poll_checks_oci_tags_once_per_repository(gitops: GitOps, oci_registry: Registry, tmp_path: Path) -> None:

    from tidecd.triggers.dispatch import ManualDispatcher
    from tidecd.usecases.poll import poll

    namespace = f"charts-{uuid.uuid4().hex[:6]}"
    home = tmp_path / "home"
    oci_registry.helm_push(package(write_chart(tmp_path / "a", "web", "1.0.0"), tmp_path / "out", home), namespace,
                           home)
    url = f"oci://{oci_registry.host}/{namespace}/web"
    first = chart_app(gitops, url, "1.x", name="first", chart="")
    second = chart_app(gitops, url, ">=1.0.0", name="second", chart="")
    runtime, recorder = gitops.runtime(), ManualDispatcher()
    summary = poll(runtime, recorder, jitter_seconds=0)
    assert (summary.repos_checked, summary.ls_remote_calls, summary.errors) == (1, 1, [])  # one tags call
    for app in ("first", "second"):
        gitops.reconcile(app, automate=False)
    recorder.refreshes.clear()
    oci_registry.helm_push(package(write_chart(tmp_path / "b", "web", "1.1.0"), tmp_path / "out", home), namespace,
                           home)
    poll(runtime, recorder, jitter_seconds=0)
    assert {r.app: r.reason for r in recorder.refreshes} == {first: "1.x now selects 1.1.0",
                                                            second: ">=1.0.0 now selects 1.1.0"}
    gitops.sync("first")
    state = gitops.state("first")
    assert_synced(state)
    assert state.revision == "1.1.0"
