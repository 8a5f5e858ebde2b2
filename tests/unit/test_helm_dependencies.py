"""A chart committed to git without its dependencies is built as Argo CD's `helm dependency build` builds it
(issue 23), but by tidecd: each dependency is fetched through the chart sources (as a snapshot in the store,
only from repositories the project permits), never by helm. Served by a real helm repository
(`tests/support/charts.py`), rendered by the real helm."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from tests.support.charts import HelmRepo, write_chart
from tidecd.base.errors import RenderError, UnsafePathError
from tidecd.clients.store import MemoryStore
from tidecd.config.load import ApplicationSource, HelmSpec
from tidecd.render import Dependencies, render
from tidecd.source.dependencies import fetch_missing, missing_in_directory

GIT = "https://git.example.com/apps.git"


def parent(root: Path, dependencies: list[dict[str, str]], **files: str) -> Path:
    """`root/app`: a chart of one ConfigMap whose values name its dependency's, as the helm-dependency example."""
    chart = write_chart(root, "app", "0.1.0", dependencies=dependencies, values={"web": {"color": "blue"}},
                        templates={"cm.yaml": "{apiVersion: v1, kind: ConfigMap, metadata: {name: parent}}\n"})
    for rel, text in files.items():
        (chart / rel).parent.mkdir(parents=True, exist_ok=True)
        (chart / rel).write_text(text)
    return chart


def downloads(repo: HelmRepo) -> int:
    return sum(1 for p in repo.requests if p.endswith(".tgz"))


def test_missing_dependencies_of_a_chart_directory_as_helm_dependency_build_reads_them(tmp_path: Path) -> None:
    chart = parent(tmp_path, [
        {"name": "web", "version": "1.x", "repository": "https://charts.example.com"},
        {"name": "db", "version": "2.x", "repository": "oci://r.example.com/charts"},
        {"name": "cache", "version": "3.x", "repository": "https://charts.example.com"},
        {"name": "local", "version": "0.1.0", "repository": "file://../local"}],
        **{"charts/db-2.1.0.tgz": "x", "charts/cache/Chart.yaml": "name: cache\n",
           "Chart.lock": yaml.safe_dump({"dependencies": [
               {"name": "web", "version": "1.4.2", "repository": "https://charts.example.com"}]})})
    found = missing_in_directory(chart, "app")
    assert [(d["name"], d["version"]) for d in found] == [("web", "1.4.2"), ("local", "0.1.0")]  # the lock pins
    v1 = tmp_path / "v1"
    v1.mkdir()
    (v1 / "Chart.yaml").write_text("apiVersion: v1\nname: old\nversion: 1.0.0\n")
    (v1 / "requirements.yaml").write_text("dependencies:\n- {name: web, version: 1.x, repository: https://c.example}\n")
    assert [d["name"] for d in missing_in_directory(v1, "v1")] == ["web"]
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: app\nversion: 0.1.0\ndependencies: [\n")
    with pytest.raises(RenderError, match=r"app/Chart.yaml: invalid YAML"):
        missing_in_directory(chart, "app")


def test_a_dependency_is_fetched_once_as_a_snapshot_and_rendered(tmp_path: Path, helm_repo: HelmRepo) -> None:
    for version in ("1.0.0", "1.2.0", "2.0.0"):
        helm_repo.add("web", version)
    checkout = tmp_path / "git"
    chart = parent(checkout, [{"name": "web", "version": "1.x", "repository": helm_repo.url}])
    store = MemoryStore()
    missing = missing_in_directory(chart, "app")
    archives = fetch_missing(missing, store, lambda _url: None, lambda _url: True, what="app/Chart.yaml")
    assert [name for name, _ in archives] == ["web-1.2.0.tgz"]
    assert [k for k in store.list("snapshots/") if "/charts/web-1.2.0-" in k]
    again = fetch_missing(missing, store, lambda _url: None, lambda _url: True, what="app/Chart.yaml")
    assert again == archives and downloads(helm_repo) == 1  # the second render reads the snapshot
    source = ApplicationSource(repo_url=GIT, path="app", helm=HelmSpec())
    objects = render(checkout, source, app_name="dep", namespace="team", dependencies=Dependencies(tuple(archives)))
    assert sorted((m["metadata"]["name"], m.get("data")) for m in objects) == [
        ("dep-cm", {"chart": "web", "version": "1.2.0", "color": "blue"}), ("parent", None)]
    assert not (chart / "charts").exists(), "the checkout is left as it was: the chart is built in a copy"
    with pytest.raises(RenderError, match=r"missing in charts/"):
        render(checkout, source, app_name="dep", namespace="team")  # without them helm says so, as before


def test_a_repository_the_project_does_not_permit_is_refused_before_any_fetch(tmp_path: Path,
                                                                             helm_repo: HelmRepo) -> None:
    helm_repo.add("web", "1.0.0")
    chart = parent(tmp_path, [{"name": "web", "version": "1.0.0", "repository": helm_repo.url}])
    with pytest.raises(RenderError, match=r"app/Chart.yaml: dependency web: repository .*not permitted by the "
                                          r"project's sourceRepos"):
        fetch_missing(missing_in_directory(chart, "app"), MemoryStore(), lambda _url: None, lambda _url: False,
                      what="app/Chart.yaml")
    assert helm_repo.requests == []
    named = parent(tmp_path / "named", [{"name": "web", "version": "1.0.0", "repository": "@stable"}])
    with pytest.raises(RenderError, match=r"dependency web is not in charts/ .*named one"):
        fetch_missing(missing_in_directory(named, "app"), MemoryStore(), lambda _url: None, lambda _url: True,
                      what="app/Chart.yaml")


def test_a_file_dependency_comes_from_the_checkout_and_may_not_leave_it(tmp_path: Path) -> None:
    checkout = tmp_path / "git"
    write_chart(checkout, "common", "0.2.0", templates={"cm.yaml": textwrap.dedent("""\
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: common-{{ .Values.color }}
        """)})
    chart = parent(checkout, [{"name": "common", "version": "0.2.0", "repository": "file://../common"}])
    source = ApplicationSource(repo_url=GIT, path="app", helm=HelmSpec())
    local = tuple((d["name"], d["repository"]) for d in missing_in_directory(chart, "app"))
    objects = render(checkout, source, app_name="dep", namespace="team", dependencies=Dependencies(local=local))
    assert sorted(m["metadata"]["name"] for m in objects) == ["common-red", "parent"]
    with pytest.raises(UnsafePathError, match=r"dependency common .file://../../outside'.*leaves"):
        render(checkout, source, app_name="dep", namespace="team",
               dependencies=Dependencies(local=(("common", "file://../../outside"),)))
