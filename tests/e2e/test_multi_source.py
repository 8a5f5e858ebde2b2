"""Multi-source apps (`spec.sources`): a chart in one repository, its values in another (`ref` and
`$values/...`), plain manifests beside it; merged output, each source's revision, and rollback of all."""

from __future__ import annotations

import json
import re
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.apps import GitOps, configmap
from tests.support.gitserver import GitRepo
from tidecd.state.app import AppState
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
    assert state.revisions == [app_sha, values_sha, values_sha]  # each source's revision, in order (Argo CD's)
    assert state.revision == f"{app_sha},{values_sha},{values_sha}"  # what older readers know: the list joined
    assert [h.revisions for h in state.history] == [state.revisions]
    assert state.operation is not None and state.operation.revisions == state.revisions
    # The third source declares web-settings too: the later source wins, with Argo CD's warning.
    assert gitops.live("ConfigMap", "web-settings")["data"] == {"color": "from-extra"}  # type: ignore[index]
    assert gitops.live("ConfigMap", "extra")["data"] == {"from": "values repo"}  # type: ignore[index]
    warnings = [c["message"] for c in state.conditions if c["type"] == "RepeatedResourceWarning"]
    assert warnings == ["ConfigMap web-settings is declared by more than one source; the later source's object "
                        "is used"]


def test_values_ref_changes_and_rollback_restores_every_source(gitops: GitOps, values_repo: GitRepo) -> None:
    """Two repositories move; a rollback through the api (as the CLI and the dashboard send it) restores
    each source's revision from the history entry's list, and api, CLI and dashboard show the list."""
    from tidecd.usecases import api

    app_sha1 = gitops.push(CHART)
    values_sha1 = push(values_repo, {"envs/prod.yaml": "color: blue\n",
                                     "extra/cm.yaml": configmap("extra", {"v": "1"})})
    app = multi_app(gitops, values_repo)
    gitops.sync()
    first = gitops.state()
    assert_synced(first)
    assert first.revisions == [app_sha1, values_sha1, values_sha1]
    assert gitops.live("ConfigMap", "web-settings")["data"] == {"color": "blue", "size": "small"}  # type: ignore[index]
    gitops.push({"chart/values.yaml": "color: red\nsize: large\n"})
    push(values_repo, {"envs/prod.yaml": "color: green\n", "extra/cm.yaml": configmap("extra", {"v": "2"})})
    app_sha2 = gitops.repo.head()
    values_sha2 = values_repo.head()
    gitops.sync()
    second = gitops.state()
    assert_synced(second)
    assert second.revisions == [app_sha2, values_sha2, values_sha2]
    assert [h.revisions for h in second.history] == [first.revisions, second.revisions]
    assert gitops.live("ConfigMap", "web-settings")["data"] == {"color": "green", "size": "large"}  # type: ignore[index]
    assert gitops.live("ConfigMap", "extra")["data"] == {"v": "2"}  # type: ignore[index]
    runtime = gitops.runtime(api_token="t")
    auth = {"Authorization": "Bearer t"}
    listed = api.handle("GET", "/api/v1/apps", auth, b"", runtime).body["apps"]
    assert [a["revisions"] for a in listed if a["name"] == app] == [second.revisions]
    history = api.handle("GET", f"/api/v1/apps/{app}/history", auth, b"", runtime).body["history"]
    assert [h["revisions"] for h in history] == [first.revisions, second.revisions]
    started = api.handle("POST", f"/api/v1/apps/{app}/rollback", auth,
                         json.dumps({"id": second.history[0].id}).encode(), runtime)
    assert started.status == 202, started.body
    if (running := gitops.state().operation) is not None and running.running:  # the api ran its first step
        gitops.reconcile(runtime=runtime)
    state = gitops.state()  # a refresh after the rollback compares with the targetRevision again (OutOfSync)
    assert state.operation is not None and state.operation.request.rollback and state.operation.phase == "Succeeded"
    assert state.operation.revisions == [app_sha1, values_sha1, values_sha1]
    assert state.operation.revision == first.revision
    assert state.history[-1].revisions == first.revisions and state.automation.disabled
    assert len(state.revisions) == 3
    body = api.handle("GET", f"/api/v1/apps/{app}", auth, b"", runtime).body
    assert body["operation"]["revisions"] == first.revisions and body["history"][-1]["revisions"] == first.revisions
    assert body["revisions"] == state.revisions
    _cli_and_dashboard_show_each_revision(gitops, app, state, runtime)
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

    from tidecd.triggers.dispatch import ManualDispatcher
    from tidecd.usecases.poll import poll

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


def _cli_and_dashboard_show_each_revision(gitops: GitOps, app: str, state: AppState, runtime: Any) -> None:
    from typer.testing import CliRunner

    from tidecd import ui
    from tidecd.cli import app as cli

    env = {"TIDECD_CONFIG": str(gitops.config_dir), "TIDECD_STORE": str(gitops.store.root),
           "KUBECONFIG": str(gitops.dev.kubeconfig)}
    shorts = ", ".join(r[:12] for r in state.revisions)
    listed = CliRunner().invoke(cli, ["app", "history", app], env=env)
    assert listed.exit_code == 0, listed.output
    rolled_back = ", ".join(r[:12] for r in state.history[-1].revisions)
    assert rolled_back in listed.output.splitlines()[-1], listed.output  # the rollback's entry, each source
    got = CliRunner().invoke(cli, ["app", "get", app, "--cached"], env=env)
    assert got.exit_code == 0 and f"(revision {shorts})" in got.output, got.output
    page = ui.handle(ui.Request("GET", f"/ui/apps/{app}", {"Authorization": "Bearer t", "Host": "ui.test"}),
                     runtime)
    html = page.body.decode()
    assert page.status == 200, html[:500]
    for index, revision in enumerate(state.revisions):
        assert re.search(rf'data-source-revision="{index}"[^>]*>.*?title="{revision}"', html), (index, html[:300])
