"""ApplicationSet generators and expansion against an in-memory `Sources` (git trees in tmp_path)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidecd.config.appset.discovery import Decisions, ScmRepo, ScmSpec
from tidecd.config.appset.expand import apply_policy, expand
from tidecd.config.appset.generators import ClusterInfo, GeneratorError, PullRequest, selector_matches
from tidecd.config.appset.model import ApplicationSet, parse_application_set
from tidecd.config.schema import Errors, Node


class FakeSources:
    def __init__(self, root: Path, clusters: list[ClusterInfo] | None = None,
                 pulls: list[PullRequest] | None = None) -> None:
        self.root, self._clusters, self._pulls = root, clusters or [], pulls or []
        self.asked: list[tuple[str, str]] = []

    def checkout(self, repo_url: str, revision: str) -> tuple[str, Path]:
        self.asked.append((repo_url, revision))
        if repo_url == "https://git.example/broken":
            raise GeneratorError("git: repository https://git.example/broken: unreachable")
        return "a" * 40, self.root

    def clusters(self) -> list[ClusterInfo]:
        return list(self._clusters)

    def pull_requests(self, owner: str, repo: str, api: str, token_ref: tuple[str, str] | None,
                      labels: Sequence[str]) -> list[PullRequest]:
        return [p for p in self._pulls if all(label in p.labels for label in labels)]

    def scm_repositories(self, spec: ScmSpec) -> list[ScmRepo]:
        return []

    def scm_branches(self, spec: ScmSpec, repo: ScmRepo) -> list[ScmRepo]:
        return [repo]

    def scm_has_path(self, spec: ScmSpec, repo: ScmRepo, path: str) -> bool:
        return False

    def cluster_decisions(self, config_map: str, name: str, label_selector: Mapping[str, Any]) -> Decisions:
        return Decisions("", ())


def appset(generators: list[dict[str, Any]], *, go: bool = False, name: str = "{{path.basename}}",
           patch: str = "", extra: dict[str, Any] | None = None, **spec: Any) -> ApplicationSet:
    template = {"metadata": {"name": name}, "spec": {
        "project": "default", "source": {"repoURL": "https://git.example/apps", "path": "{{path}}" if not go
                                         else "{{ .path.path }}"},
        "destination": {"name": "in-cluster", "namespace": "ns"}, **(extra or {})}}
    doc: dict[str, Any] = {"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet",
                           "metadata": {"name": "set"},
                           "spec": {"generators": generators, "template": template, "goTemplate": go, **spec}}
    if patch:
        doc["spec"]["templatePatch"] = patch
    errors: list[str] = []
    found = parse_application_set(Node(doc, "", Errors("appsets.yaml", "ApplicationSet/set", errors)))
    assert found is not None, errors
    return found


def errors_of(doc_spec: dict[str, Any]) -> list[str]:
    doc = {"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "metadata": {"name": "set"},
           "spec": doc_spec}
    errors: list[str] = []
    assert parse_application_set(Node(doc, "", Errors("appsets.yaml", "ApplicationSet/set", errors))) is None
    return errors


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    for name in ("web", "api", "db", "cache", "queue"):
        (tmp_path / "apps" / name).mkdir(parents=True)
        (tmp_path / "apps" / name / "cm.yaml").write_text("kind: ConfigMap\n")
    (tmp_path / "apps" / "skip").mkdir()
    (tmp_path / "envs" / "prod").mkdir(parents=True)
    (tmp_path / "envs" / "prod" / "config.json").write_text(json.dumps({"env": "prod", "cluster": {"name": "c1"}}))
    (tmp_path / "envs" / "dev").mkdir(parents=True)
    (tmp_path / "envs" / "dev" / "config.yaml").write_text(yaml.safe_dump([{"env": "dev1"}, {"env": "dev2"}]))
    return tmp_path


GIT_DIRS = {"git": {"repoURL": "https://git.example/apps", "revision": "main",
                    "directories": [{"path": "apps/*"}, {"path": "apps/skip", "exclude": True}]}}


def test_git_directories_yield_one_app_per_directory(repo: Path) -> None:
    sources = FakeSources(repo)
    out = expand(appset([GIT_DIRS]), sources)
    assert sorted(out.apps) == ["api", "cache", "db", "queue", "web"]
    web = out.apps["web"]
    assert web.doc["spec"]["source"]["path"] == "apps/web"
    assert "git directory apps/web" in web.generator and web.generator.startswith("spec.generators[0]")
    assert sources.asked == [("https://git.example/apps", "main")]


def test_git_directories_with_go_templates(repo: Path) -> None:
    out = expand(appset([GIT_DIRS], go=True, name="{{ .path.basename }}-{{ index .path.segments 0 }}"),
                 FakeSources(repo))
    assert sorted(out.apps) == ["api-apps", "cache-apps", "db-apps", "queue-apps", "web-apps"]
    assert out.apps["db-apps"].doc["spec"]["source"]["path"] == "apps/db"


def test_git_files_yield_their_content(repo: Path) -> None:
    gen = {"git": {"repoURL": "https://git.example/apps", "files": [{"path": "envs/**/config.*"}]}}
    out = expand(appset([gen], name="{{env}}-{{path.basename}}"), FakeSources(repo))
    assert sorted(out.apps) == ["dev1-dev", "dev2-dev", "prod-prod"]
    go = expand(appset([gen], go=True, name="{{ .env }}-{{ .path.filename | trimSuffix \".json\" }}"),
                FakeSources(repo))
    assert "prod-config" in go.apps
    nested = expand(appset([gen], name="{{cluster.name}}-x"), FakeSources(repo))
    assert "c1-x" in nested.apps


def test_list_generator_and_generator_template(repo: Path) -> None:
    gen = {"list": {"elements": [{"cluster": "a", "url": "https://a"}, {"cluster": "b", "url": "https://b"}],
                    "template": {"spec": {"destination": {"server": "{{url}}"}}}}}
    clusters = [ClusterInfo("a", "https://a"), ClusterInfo("b", "https://b")]
    out = expand(appset([gen], name="app-{{cluster}}", extra={"destination": {"namespace": "ns"}}),
                 FakeSources(repo, clusters))
    assert sorted(out.apps) == ["app-a", "app-b"], out.errors
    assert out.apps["app-b"].doc["spec"]["destination"] == {"namespace": "ns", "server": "https://b"}


def test_cluster_generator_selects_by_label_and_adds_in_cluster_without_selector(repo: Path) -> None:
    clusters = [ClusterInfo("prod", "https://prod", {"env": "prod"}), ClusterInfo("dev", "https://dev", {"env": "dev"})]
    every = expand(appset([{"clusters": {}}], name="{{name}}"), FakeSources(repo, clusters))
    assert sorted(every.apps) == ["dev", "in-cluster", "prod"]
    selected = expand(appset([{"clusters": {"selector": {"matchLabels": {"env": "prod"}},
                                            "values": {"tier": "{{name}}-t"}}}],
                             name="{{name}}-{{values.tier}}"), FakeSources(repo, clusters))
    assert sorted(selected.apps) == ["prod-prod-t"]


def test_matrix_combines_and_interpolates_the_second_generator(repo: Path) -> None:
    gen = {"matrix": {"generators": [
        {"list": {"elements": [{"dir": "apps/web"}, {"dir": "apps/db"}]}},
        {"git": {"repoURL": "https://git.example/apps", "directories": [{"path": "{{dir}}"}]}}]}}
    out = expand(appset([gen], name="{{path.basename}}-m"), FakeSources(repo))
    assert sorted(out.apps) == ["db-m", "web-m"]


def test_merge_overrides_by_merge_key(repo: Path) -> None:
    gen = {"merge": {"mergeKeys": ["name"], "generators": [
        {"list": {"elements": [{"name": "a", "size": "s"}, {"name": "b", "size": "s"}]}},
        {"list": {"elements": [{"name": "b", "size": "xl"}]}}]}}
    out = expand(appset([gen], name="{{name}}-{{size}}"), FakeSources(repo))
    assert sorted(out.apps) == ["a-s", "b-xl"]


def test_pull_request_generator_params(repo: Path) -> None:
    pulls = [PullRequest(7, "feature/Login", "main", "0123456789abcdef" * 2 + "01234567", ("preview",)),
             PullRequest(8, "other", "main", "f" * 40, ())]
    gen = {"pullRequest": {"github": {"owner": "o", "repo": "r", "labels": ["preview"]}}}
    source = {"repoURL": "https://git.example/apps", "path": "app", "targetRevision": "{{head_sha}}"}
    out = expand(appset([gen], name="pr-{{number}}-{{branch_slug}}", extra={"source": source}),
                 FakeSources(repo, pulls=pulls))
    assert list(out.apps) == ["pr-7-feature-login"]
    assert out.apps["pr-7-feature-login"].doc["spec"]["source"]["targetRevision"].startswith("0123456789")


def test_template_patch(repo: Path) -> None:
    patch = "{{ if eq .path.basename \"web\" }}spec:\n  syncPolicy:\n    automated: {prune: true}\n{{ end }}"
    out = expand(appset([GIT_DIRS], go=True, name="{{ .path.basename }}", patch=patch), FakeSources(repo))
    assert out.apps["web"].doc["spec"]["syncPolicy"] == {"automated": {"prune": True}}
    assert "syncPolicy" not in out.apps["db"].doc["spec"]


def test_post_selector_filters_parameters(repo: Path) -> None:
    gen = {"list": {"elements": [{"n": "a", "env": "prod"}, {"n": "b", "env": "dev"}]},
           "selector": {"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}}
    assert list(expand(appset([gen], name="{{n}}"), FakeSources(repo)).apps) == ["a"]


def test_one_bad_parameter_set_is_set_aside_alone(repo: Path) -> None:
    gen = {"list": {"elements": [{"n": "good"}, {"n": "Bad Name"}, {"n": "good"}, {"n": "fine"}]}}
    out = expand(appset([gen], name="{{n}}"), FakeSources(repo))
    assert list(out.apps) == ["fine"]  # both "good" go, as in Argo CD
    text = "\n".join(out.errors)
    assert "appsets.yaml: ApplicationSet/set: spec.generators[0] (list element 1): spec.template.metadata.name" in text
    assert "'good' is generated again" in text and not out.failed


def test_a_failing_generator_fails_the_evaluation(repo: Path) -> None:
    gen = {"git": {"repoURL": "https://git.example/broken", "directories": [{"path": "*"}]}}
    out = expand(appset([gen]), FakeSources(repo))
    assert out.failed and "spec.generators[0]" not in out.errors[0] or "broken" in out.errors[0]


def test_parse_errors_name_the_field() -> None:
    errors = errors_of({"generators": [{"git": {"directories": [{"path": "a"}]}}, {"plugin": {}},
                                       {"list": {}, "clusters": {}}],
                        "template": {"metadata": {"name": "x"}, "spec": {}},
                        "strategy": {"type": "RollingSync", "deletionOrder": "Backwards"},
                        "syncPolicy": {"applicationsSync": "sometimes"}, "templatePatch": "x"})
    text = "\n".join(errors)
    assert "spec.generators[0].git.repoURL: required field is missing" in text
    assert "spec.generators[1].plugin: Argo CD generator plugin is not implemented by tidecd" in text
    assert "spec.generators[2]: expected exactly one generator" in text
    assert "spec.strategy.rollingSync: required field is missing (type RollingSync)" in text
    assert "spec.strategy.deletionOrder: 'Backwards' is not one of AllAtOnce, Reverse" in text
    assert "spec.syncPolicy.applicationsSync: 'sometimes' is not one of" in text
    assert "spec.templatePatch: needs goTemplate: true" in text
    assert all(e.startswith("appsets.yaml: ApplicationSet/set: ") for e in errors)


@pytest.mark.parametrize(("policy", "kept", "removed"), [
    ("sync", {"a": "new", "c": "new"}, {"b"}),
    ("create-only", {"a": "old", "b": "old", "c": "new"}, set()),
    ("create-update", {"a": "new", "b": "old", "c": "new"}, set()),
    ("create-delete", {"a": "old", "c": "new"}, {"b"}),
])
def test_applications_sync_policies(policy: str, kept: dict[str, str], removed: set[str]) -> None:
    old: dict[str, dict[str, Any]] = {"a": {"doc": "old"}, "b": {"doc": "old"}}
    new: dict[str, dict[str, Any]] = {"a": {"doc": "new"}, "c": {"doc": "new"}}
    found, gone = apply_policy(policy, new, old)
    assert {n: e["doc"] for n, e in found.items()} == kept
    assert gone == removed


def test_selector_matches() -> None:
    labels = {"env": "prod", "tier": "web"}
    assert selector_matches({"matchLabels": {"env": "prod"}}, labels)
    assert not selector_matches({"matchLabels": {"env": "dev"}}, labels)
    assert selector_matches({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]},
                                labels)
