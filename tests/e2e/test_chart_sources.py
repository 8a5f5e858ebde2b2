"""Charts from helm repositories and OCI registries, and plain OCI artifacts, synced for real (issue 12).

The helm repository is `helm package` + `helm repo index` output served over HTTP; the registry is the
distribution registry from `scripts/tools.sh`, filled with `helm push`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.apps import GitOps
from tests.support.charts import HelmRepo, package, write_chart
from tidecd.base.constants import LABEL_SECRET_TYPE, SECRET_TYPE_REPOSITORY
from tidecd.clients.secrets import generate_key, seal_secret, write_key_pair
from tidecd.state.app import AppState
from tidecd.triggers.dispatch import ManualDispatcher
from tidecd.usecases.commands import SyncRequest
from tidecd.usecases.poll import poll

pytestmark = pytest.mark.e2e


def assert_synced(state: AppState) -> None:
    text = " | ".join(f"{c['type']}: {c['message']}" for c in state.conditions)
    assert state.operation is not None, text
    assert state.operation.phase == "Succeeded", state.operation.message
    assert state.sync_status == "Synced", text


def chart_app(gitops: GitOps, repo_url: str, target: str, *, name: str = "app", chart: str = "web",
              automated: dict[str, Any] | None = None, **source: Any) -> str:
    fields: dict[str, Any] = {"repoURL": repo_url, "targetRevision": target, "path": ".", **source}
    if chart:
        fields["chart"] = chart
    return gitops.application(name, source=fields, automated=automated)


def cm(gitops: GitOps, app: str) -> dict[str, Any]:
    live = gitops.live("ConfigMap", f"{gitops.real(app)}-cm")
    assert live is not None
    return live


def test_chart_from_a_helm_repository_with_a_semver_range(gitops: GitOps, helm_repo: HelmRepo) -> None:
    for version in ("1.0.0", "1.1.0", "2.0.0"):
        helm_repo.add("web", version)
    chart_app(gitops, helm_repo.url, "1.x", helm={"valuesObject": {"color": "blue"}})
    gitops.sync()
    state = gitops.state()
    assert_synced(state)
    assert state.revision == "1.1.0"  # the chart version is the revision, as in Argo CD
    assert cm(gitops, "app")["data"] == {"chart": "web", "version": "1.1.0", "color": "blue"}
    assert [h.revision for h in state.history] == ["1.1.0"]
    stored = [k for k in gitops.store.list("snapshots/") if "/charts/web-1.1.0-" in k]
    assert len(stored) == 1 and stored[0].endswith(".tgz")
    downloads = sum(1 for p in helm_repo.requests if p.endswith(".tgz"))
    gitops.reconcile(automate=False)  # a refresh of the same version downloads nothing
    assert sum(1 for p in helm_repo.requests if p.endswith(".tgz")) == downloads == 1
    assert gitops.state().sync_status == "Synced"


def test_poll_checks_chart_versions_with_one_index_call_per_repository(gitops: GitOps,
                                                                        helm_repo: HelmRepo) -> None:
    helm_repo.add("web", "1.0.0")
    first = chart_app(gitops, helm_repo.url, "1.x", name="first")
    second = chart_app(gitops, helm_repo.url, "~1.0", name="second", automated={"prune": True})
    runtime = gitops.runtime()
    recorder = ManualDispatcher()
    poll(runtime, recorder, jitter_seconds=0)
    assert {r.app for r in recorder.refreshes} >= {first, second}
    gitops.reconcile("second")
    assert gitops.state("second").revision == "1.0.0"
    gitops.reconcile("first", automate=False)
    calls = helm_repo.index_calls()
    recorder.refreshes.clear()
    poll(runtime, recorder, jitter_seconds=0)
    assert helm_repo.index_calls() == calls + 1  # two apps, one repository: one index call
    assert [r.app for r in recorder.refreshes if r.reason != "drift sweep"] == []
    helm_repo.add("web", "1.0.5")
    poll(runtime, recorder, jitter_seconds=0)
    moved = {r.app: r.reason for r in recorder.refreshes if r.reason != "drift sweep"}
    assert moved == {first: "1.x now selects 1.0.5", second: "~1.0 now selects 1.0.5"}
    gitops.reconcile("second")
    state = gitops.state("second")
    assert_synced(state)
    assert state.revision == "1.0.5"
    assert cm(gitops, "second")["data"]["version"] == "1.0.5"


def test_private_helm_repository_with_a_sealed_helm_repository_secret(
        gitops: GitOps, private_helm_repo: HelmRepo, tmp_path: Path) -> None:
    private_helm_repo.add("web", "0.3.0")
    chart_app(gitops, private_helm_repo.url, "0.3.0")
    gitops.reconcile(automate=False)
    state = gitops.state()
    assert any("HTTP 401" in c["message"] for c in state.conditions), state.conditions
    keys = tmp_path / "keys"
    keys.mkdir()
    pair = generate_key()
    write_key_pair(pair, keys / "tls.key", keys / "tls.crt")
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "charts", "namespace": "argocd",
                           "labels": {LABEL_SECRET_TYPE: SECRET_TYPE_REPOSITORY}},
              "stringData": {"type": "helm", "name": "charts", "url": private_helm_repo.url,
                             "username": private_helm_repo.username, "password": private_helm_repo.password}}
    (gitops.config_dir / "repo.yaml").write_text(yaml.safe_dump(seal_secret(secret, pair.cert_pem)))
    gitops.reconcile(request=SyncRequest(), runtime=gitops.runtime(sealing_keys=str(keys)))
    state = gitops.state()
    assert_synced(state)
    assert cm(gitops, "app")["data"]["version"] == "0.3.0"
    for path in gitops.store.root.rglob("*.json"):
        assert private_helm_repo.password not in path.read_text(errors="replace")


def test_a_chart_whose_archive_differs_from_the_index_digest_is_refused(gitops: GitOps, helm_repo: HelmRepo,
                                                                        tmp_path: Path) -> None:
    tgz = helm_repo.add("web", "1.0.0")
    other = write_chart(tmp_path / "evil", "web", "1.0.0", values={"color": "evil"})
    evil = package(other, tmp_path / "evil-out", helm_repo.home)
    tgz.write_bytes(evil.read_bytes())  # the archive changes; the index keeps the old digest
    chart_app(gitops, helm_repo.url, "1.0.0")
    gitops.sync()
    state = gitops.state()
    assert any("does not match the index" in c["message"] for c in state.conditions), state.conditions
    assert gitops.live("ConfigMap", f"{gitops.real('app')}-cm") is None
    assert not [k for k in gitops.store.list("snapshots/") if "/charts/" in k]


def test_chart_dependencies_are_fetched_into_the_snapshot(gitops: GitOps, helm_repo: HelmRepo) -> None:
    helm_repo.add("web", "1.0.0")
    helm_repo.add("web", "1.4.0")
    helm_repo.add("umbrella", "0.1.0", raw=True,
                  dependencies=[{"name": "web", "version": "1.x", "repository": helm_repo.url}],
                  values={"color": "red", "web": {"color": "green"}}, templates={"NOTES.txt": "umbrella\n"})
    chart_app(gitops, helm_repo.url, "0.1.0", chart="umbrella")
    gitops.sync()
    state = gitops.state()
    assert_synced(state)
    names = {r.name: r for r in state.resources}
    real = gitops.real("app")
    assert set(names) == {f"{real}-cm"}  # the umbrella renders the web subchart only
    assert cm(gitops, "app")["data"] == {"chart": "web", "version": "1.4.0", "color": "green"}
    [key] = [k for k in gitops.store.list("snapshots/") if "/charts/umbrella-0.1.0-" in k]
    import io
    import tarfile

    blob = gitops.store.read(key)
    assert blob is not None
    with tarfile.open(fileobj=io.BytesIO(blob.data), mode="r:gz") as tar:
        assert "umbrella/charts/web-1.4.0.tgz" in tar.getnames()


def test_chart_dependencies_come_only_from_repositories_the_project_permits(gitops: GitOps,
                                                                           helm_repo: HelmRepo) -> None:
    elsewhere = "http://127.0.0.1:9/elsewhere"  # nothing listens: it must never even be tried
    helm_repo.add("umbrella", "0.2.0", raw=True, templates={"NOTES.txt": "x\n"},
                  dependencies=[{"name": "web", "version": "1.x", "repository": elsewhere}])
    gitops.project({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "charts"},
                    "spec": {"sourceRepos": [helm_repo.url], "destinations": [{"server": "*", "namespace": "*"}]}})
    gitops.application(project="charts", source={"repoURL": helm_repo.url, "chart": "umbrella",
                                                 "targetRevision": "0.2.0", "path": "."})
    gitops.reconcile(automate=False)
    messages = [c["message"] for c in gitops.state().conditions]
    assert any(f"dependency web: repository '{elsewhere}' is not permitted by the project's sourceRepos" in m
               for m in messages), messages
    assert not [k for k in gitops.store.list("snapshots/") if "/charts/" in k]
