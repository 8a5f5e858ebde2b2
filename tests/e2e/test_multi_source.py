"""Multi-source apps (`spec.sources`): a chart in one repository, its values in another (`ref` and
`$values/...`), plain manifests beside it; merged output, each source's revision, and rollback of all."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.apps import GitOps, configmap
from tests.support.gitserver import GitRepo
from tidecd.reconcile import SyncRequest
from tidecd.state import AppState
from tidecd_dev.gitserver import GitServer

pytestmark = pytest.mark.e2e

CHART = {
    "chart/Chart.yaml": "apiVersion: v2\nname: web\nversion: 0.1.0\n",
    "chart/values.yaml": "color: red\nsize: small\n",
    "chart/templates/cm.yaml": textwrap.dedent("""\
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: web-settings}
        data:
          color: {{ .Values.color | quote }}
          size: {{ .Values.size | quote }}
        """),
}


def assert_synced(state: AppState) -> None:
    text = " | ".join(f"{c['type']}: {c['message']}" for c in state.conditions)
    assert state.operation is not None, text
    assert state.operation.phase == "Succeeded", state.operation.message
    assert state.sync_status == "Synced", text


def push(repo: GitRepo, files: dict[str, Any]) -> str:
    for path, content in files.items():
        repo.write(path, content if isinstance(content, str) else yaml.safe_dump(content))
    sha = str(repo.commit("change"))
    repo.push()
    return sha


@pytest.fixture()
def values_repo(git_server: GitServer, tmp_path: Path) -> GitRepo:
    return GitRepo(git_server, f"values-{uuid.uuid4().hex[:10]}", tmp_path / "values-work")


def multi_app(gitops: GitOps, values_repo: GitRepo) -> str:
    return gitops.application(extra_spec={"sources": [
        {"repoURL": gitops.repo.url, "targetRevision": "main", "path": "chart",
         "helm": {"valueFiles": ["$values/envs/prod.yaml"]}},
        {"repoURL": values_repo.url, "targetRevision": "main", "ref": "values"},
        {"repoURL": values_repo.url, "targetRevision": "main", "path": "extra"},
    ]})


def test_chart_with_values_from_another_repo_and_merged_sources(gitops: GitOps, values_repo: GitRepo) -> None:
    app_sha = gitops.push(CHART)
    values_sha = push(values_repo, {"envs/prod.yaml": "color: blue\n",
                                    "extra/cm.yaml": configmap("extra", {"from": "values repo"}),
                                    "extra/dup.yaml": configmap("web-settings", {"color": "from-extra"})})
    multi_app(gitops, values_repo)
    gitops.sync()
    state = gitops.state()
    assert_synced(state)
    assert state.revision == f"{app_sha},{values_sha},{values_sha}"  # each source's revision, in order
    assert [h.revision for h in state.history] == [state.revision]
    # The third source declares web-settings too: the later source wins, with Argo CD's warning.
    assert gitops.live("ConfigMap", "web-settings")["data"] == {"color": "from-extra"}  # type: ignore[index]
    assert gitops.live("ConfigMap", "extra")["data"] == {"from": "values repo"}  # type: ignore[index]
    warnings = [c["message"] for c in state.conditions if c["type"] == "RepeatedResourceWarning"]
    assert warnings == ["ConfigMap web-settings is declared by more than one source; the later source's object "
                        "is used"]


def test_values_ref_changes_and_rollback_restores_every_source(gitops: GitOps, values_repo: GitRepo) -> None:
    gitops.push(CHART)
    push(values_repo, {"envs/prod.yaml": "color: blue\n", "extra/cm.yaml": configmap("extra", {"v": "1"})})
    multi_app(gitops, values_repo)
    gitops.sync()
    first = gitops.state()
    assert_synced(first)
    assert gitops.live("ConfigMap", "web-settings")["data"] == {"color": "blue", "size": "small"}  # type: ignore[index]
    gitops.push({"chart/values.yaml": "color: red\nsize: large\n"})
    push(values_repo, {"envs/prod.yaml": "color: green\n", "extra/cm.yaml": configmap("extra", {"v": "2"})})
    gitops.sync()
    second = gitops.state()
    assert_synced(second)
    assert second.revision != first.revision
    assert gitops.live("ConfigMap", "web-settings")["data"] == {"color": "green", "size": "large"}  # type: ignore[index]
    assert gitops.live("ConfigMap", "extra")["data"] == {"v": "2"}  # type: ignore[index]
    gitops.reconcile(request=SyncRequest(revision=second.history[0].revision, rollback=True))
    state = gitops.state()
    assert_synced(state)
    assert state.revision == first.revision
    assert gitops.live("ConfigMap", "web-settings")["data"] == {"color": "blue", "size": "small"}  # type: ignore[index]
    assert gitops.live("ConfigMap", "extra")["data"] == {"v": "1"}  # type: ignore[index]


def test_a_missing_ref_names_the_source_and_the_refs(gitops: GitOps, values_repo: GitRepo) -> None:
    gitops.push(CHART)
    push(values_repo, {"envs/prod.yaml": "color: blue\n", "extra/cm.yaml": configmap("extra")})
    gitops.application(extra_spec={"sources": [
        {"repoURL": gitops.repo.url, "targetRevision": "main", "path": "chart",
         "helm": {"valueFiles": ["$vals/envs/prod.yaml"]}},
        {"repoURL": values_repo.url, "targetRevision": "main", "ref": "values"},
    ]})
    gitops.reconcile(automate=False)
    messages = [c["message"] for c in gitops.state().conditions]
    assert any("spec.sources[0]" in m and "no source has ref 'vals' (refs: $values)" in m for m in messages), messages


def test_the_poll_refreshes_a_multi_source_app_when_any_source_moves(gitops: GitOps, values_repo: GitRepo) -> None:

    from tidecd.dispatch import ManualDispatcher
    from tidecd.poll import poll

    gitops.push(CHART)
    push(values_repo, {"envs/prod.yaml": "color: blue\n", "extra/cm.yaml": configmap("extra")})
    app = multi_app(gitops, values_repo)
    runtime = gitops.runtime()
    recorder = ManualDispatcher()
    poll(runtime, recorder, jitter_seconds=0)
    gitops.reconcile(automate=False)
    recorder.refreshes.clear()
    summary = poll(runtime, recorder, jitter_seconds=0)
    assert summary.repos_checked == 2 and not summary.errors
    assert [r for r in recorder.refreshes if r.reason != "drift sweep"] == []
    push(values_repo, {"envs/prod.yaml": "color: green\n"})  # only the values repository moves
    poll(runtime, recorder, jitter_seconds=0)
    assert [r.app for r in recorder.refreshes if r.reason.startswith("main moved")] == [app]
    gitops.sync()
    assert gitops.live("ConfigMap", "web-settings")["data"]["color"] == "green"  # type: ignore[index]
