"""The scmProvider and clusterDecisionResource generators (`config.appset.discovery`), as Argo CD's scm_provider
and duck_type generators give them (facts from Generators-SCM-Provider.md, Generators-Cluster-Decision-Resource.md
and their Go tests; the cases here are tidecd's own).

scmProvider's github runs for real through PyGithub against the GitHub stand-in (GitHub's OpenAPI description,
its example answers): parameters, filters, token handling (no token in errors, none sent to another `api`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.github_standin import GitHubStandIn, Spec
from tests.unit.test_appset_generators import FakeSources, appset
from tidecd.clients.store import LocalStore
from tidecd.config.appset.discovery import (
    Decisions,
    GeneratorError,
    ScmRepo,
    ScmSpec,
    config_map_fields,
    select_repositories,
)
from tidecd.config.appset.expand import expand
from tidecd.config.appset.generators import ClusterInfo
from tidecd.config.appset.model import parse_application_set
from tidecd.config.schema import Errors, Node
from tidecd.runtime import Runtime, Settings
from tidecd.usecases.appset_discovery import label_selector
from tidecd.usecases.appsets import RuntimeSources

TOKEN = "ghp_scm_token_value_0123456789"  # noqa: S105 - a test token


def repo(name: str, branch: str = "main", labels: tuple[str, ...] = ()) -> ScmRepo:
    return ScmRepo("org", name, 1, f"git@example:org/{name}.git", branch, "c" * 40, labels)


REPOS = [repo("myapp-web", labels=("deploy-ok",)), repo("myapp-db"), repo("otherapp", labels=("deploy-ok", "x"))]
PATHS = {("myapp-web", "kubernetes/kustomization.yaml"), ("otherapp", "helm"), ("otherapp", "disabledrepo.txt")}


def branches(item: ScmRepo) -> list[ScmRepo]:
    return [item, ScmRepo(**{**item.__dict__, "branch": "feature"})] if item.repository == "myapp-db" else [item]


def has_path(item: ScmRepo, path: str) -> bool:
    return (item.repository, path) in PATHS


def selected(filters: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(r.repository, r.branch) for r in select_repositories({"filters": filters}, REPOS, branches, has_path)]


def test_scm_filters_as_argo_cd_applies_them() -> None:
    """The docs' filters: repositoryMatch AND pathsExist AND labelMatch; OR another filter; pathsDoNotExist."""
    assert selected([]) == [("myapp-web", "main"), ("myapp-db", "main"), ("myapp-db", "feature"), ("otherapp", "main")]
    docs = [{"repositoryMatch": "^myapp", "pathsExist": ["kubernetes/kustomization.yaml"], "labelMatch": "deploy-ok"},
            {"repositoryMatch": "^otherapp", "pathsExist": ["helm"], "pathsDoNotExist": ["disabledrepo.txt"]}]
    assert selected(docs) == [("myapp-web", "main")]
    assert selected([{"repositoryMatch": "db$"}, {"labelMatch": "^x$"}]) == [
        ("myapp-db", "main"), ("myapp-db", "feature"), ("otherapp", "main")]
    # a repository filter and a branch filter: the repository must pass the first, the branch the second
    assert selected([{"repositoryMatch": "^myapp"}, {"branchMatch": "^feat"}]) == [("myapp-db", "feature")]


class ScmSources(FakeSources):
    def __init__(self, root: Path, repos: list[ScmRepo]) -> None:
        super().__init__(root)
        self.repos = repos

    def scm_repositories(self, spec: ScmSpec) -> list[ScmRepo]:
        return list(self.repos)

    def scm_branches(self, spec: ScmSpec, item: ScmRepo) -> list[ScmRepo]:
        return [item]

    def scm_has_path(self, spec: ScmSpec, item: ScmRepo, path: str) -> bool:
        return False


def test_scm_parameters_in_both_template_forms(tmp_path: Path) -> None:
    gen = {"scmProvider": {"github": {"organization": "org"}, "values": {"name": "{{organization}}-{{repository}}"}}}
    fast = expand(appset([gen], name="{{values.name}}-{{branchNormalized}}",
                         extra={"source": {"repoURL": "{{url}}", "targetRevision": "{{sha}}", "path": "k8s"},
                                "info": [{"name": "short", "value": "{{short_sha}}/{{short_sha_7}}/{{labels}}"}]}),
                  ScmSources(tmp_path, [repo("Web_App", "Release/1.0", ("a", "b"))]))
    assert list(fast.apps) == ["org-web_app-release-1.0"] or fast.errors
    go = expand(appset([{"scmProvider": {"github": {"organization": "org"}, "values": {
        "name": "{{ .organization }}-{{ .repository | lower }}"}}}], go=True,
        name="{{ .values.name | replace \"_\" \"-\" }}", extra={
            "source": {"repoURL": "{{ .url }}", "targetRevision": "{{ .branch }}", "path": "k8s"},
            "info": [{"name": "id", "value": "{{ .repository_id }}/{{ .short_sha }}/{{ .labels }}"}]}),
        ScmSources(tmp_path, [repo("Web_App", "Release/1.0", ("a", "b"))]))
    assert list(go.apps) == ["org-web-app"], go.errors
    spec = go.apps["org-web-app"].doc["spec"]
    assert spec["source"] == {"repoURL": "git@example:org/Web_App.git", "targetRevision": "Release/1.0", "path": "k8s"}
    assert spec["info"] == [{"name": "id", "value": "1/cccccccc/a,b"}]


def parsed_errors(gen: dict[str, Any]) -> list[str]:
    doc = {"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "metadata": {"name": "set"},
           "spec": {"generators": [gen], "template": {"metadata": {"name": "x"}, "spec": {}}}}
    errors: list[str] = []
    parse_application_set(Node(doc, "", Errors("sets.yaml", "ApplicationSet/set", errors)))
    return errors


def test_scm_and_cdr_fields_are_checked_naming_the_field() -> None:
    text = "\n".join(parsed_errors({"scmProvider": {"gitea": {"owner": "g"}, "cloneProtocol": "ftp",
                                                    "filters": [{"repositoryMatch": "("}]}}))
    assert "spec.generators[0].scmProvider.gitea: the gitea provider is not implemented by tidecd" in text
    assert "spec.generators[0].scmProvider.cloneProtocol: 'ftp' is not one of ssh, https" in text
    assert "spec.generators[0].scmProvider.filters[0].repositoryMatch: not a regular expression" in text
    assert "scmProvider.github.organization: required field is missing" in "\n".join(
        parsed_errors({"scmProvider": {"github": {}}}))
    text = "\n".join(parsed_errors({"clusterDecisionResource": {"name": "a", "labelSelector": {
        "matchLabels": {"x": "y"}}}}))
    assert "clusterDecisionResource.configMapRef: required field is missing" in text
    assert "clusterDecisionResource: set exactly one of name or labelSelector" in text


# -- GitHub through PyGithub, against the stand-in ------------------------------------------------------------


def runtime_with(tmp_path: Path, docs: list[dict[str, Any]], api_url: str) -> Runtime:
    config = tmp_path / "config"
    config.mkdir(parents=True)
    (config / "all.yaml").write_text(yaml.safe_dump_all(docs))
    return Runtime(settings=Settings(config=str(config), store=str(tmp_path / "store"), github_api_url=api_url),
                   store=LocalStore(tmp_path / "store"))


def secret(name: str, data: dict[str, str], labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "argocd",
                                                               "labels": dict(labels or {})}, "stringData": data}


def scm_set(github: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "metadata": {"name": "repos"},
            "spec": {"goTemplate": True, "generators": [{"scmProvider": {"github": github, **extra}}],
                     "template": {"metadata": {"name": "{{ .repository | lower }}-{{ .branchNormalized }}"},
                                  "spec": {"project": "default",
                                           "source": {"repoURL": "{{ .url }}", "targetRevision": "{{ .sha }}",
                                                      "path": "kubernetes/"},
                                           "destination": {"name": "in-cluster", "namespace": "{{ .labels }}"}}}}}


def run(runtime: Runtime) -> Any:
    sources = RuntimeSources(runtime)
    try:
        return expand(runtime.config().appsets["repos"], sources)
    finally:
        sources.close()


def test_scm_provider_github_lists_an_organizations_repositories(tmp_path: Path, github_standin: GitHubStandIn) -> None:
    """The stand-in answers GitHub's own examples: octocat/Hello-World, default branch master, four topics."""
    rt = runtime_with(tmp_path, [scm_set({"organization": "octo", "api": github_standin.base_url,
                                          "tokenRef": {"secretName": "gh-token", "key": "token"}},
                                         cloneProtocol="https", filters=[{"pathsExist": ["kubernetes"]}]),
                                 secret("gh-token", {"token": TOKEN}, {"argocd.argoproj.io/secret-type": "scm-creds"})],
                     github_standin.base_url)
    out = run(rt)
    assert list(out.apps) == ["hello-world-master"], out.errors
    spec = out.apps["hello-world-master"].doc["spec"]
    assert spec["source"]["repoURL"] == "https://github.com/octocat/Hello-World.git"
    assert len(spec["source"]["targetRevision"]) == 40
    assert spec["destination"]["namespace"] == "octocat,atom,electron,api"
    used = {c.operation_id for c in github_standin.calls}
    assert {"repos/list-for-org", "repos/get-branch", "repos/get-content"} <= used
    assert all(TOKEN in c.authorization for c in github_standin.calls)

    github_standin.fail_next("repos/get-content", 404)  # pathsExist: the path is missing, the repository is not
    assert run(rt).apps == {}
    github_standin.fail_next("repos/get-branch", 404)  # an empty repository: no default branch, no app, no error
    empty = run(rt)
    assert empty.apps == {} and not empty.errors, empty.errors
    github_standin.fail_next("repos/list-for-org", 403)
    failed = run(rt)
    assert failed.failed and "spec.generators[0].scmProvider: scmProvider: GitHub organization octo: 403" in \
        failed.errors[0]
    assert TOKEN not in "".join(failed.errors)


def test_the_github_secret_token_goes_only_to_its_own_api(tmp_path: Path, github_spec: Spec,
                                                          github_standin: GitHubStandIn) -> None:
    """Without tokenRef the config's `github` Secret is used for the GitHub it is for; an ApplicationSet naming
    another `api` is answered anonymously, so it cannot make tidecd send that token elsewhere."""
    other = GitHubStandIn(github_spec).start()
    try:
        github = secret("github", {"token": TOKEN}, {"argocd.argoproj.io/secret-type": "github"})
        own = run(runtime_with(tmp_path / "own", [scm_set({"organization": "octo"}), github], github_standin.base_url))
        assert list(own.apps) == ["hello-world-master"], own.errors
        assert github_standin.calls and all(TOKEN in c.authorization for c in github_standin.calls)
        elsewhere = run(runtime_with(tmp_path / "other", [scm_set({"organization": "octo", "api": other.base_url}),
                                                          github], github_standin.base_url))
        assert list(elsewhere.apps) == ["hello-world-master"], elsewhere.errors
        assert other.calls and not any(TOKEN in c.authorization for c in other.calls)
    finally:
        other.stop()
    other.assert_clean()


# -- clusterDecisionResource ----------------------------------------------------------------------------------


class DecisionSources(FakeSources):
    def __init__(self, root: Path, clusters: list[ClusterInfo], decisions: Decisions) -> None:
        super().__init__(root, clusters)
        self.decisions = decisions
        self.asked_for: list[tuple[str, str, Mapping[str, Any]]] = []

    def cluster_decisions(self, config_map: str, name: str, label_selector: Mapping[str, Any]) -> Decisions:
        self.asked_for.append((config_map, name, label_selector))
        return self.decisions


def test_cluster_decision_resource_gives_the_decided_known_clusters(tmp_path: Path) -> None:
    """duck_type.go: each decision naming a known cluster (matchKey) gives name and server, then its own keys;
    a decision naming no known cluster is skipped; `values` are added as written (duck_type.go's
    collectParams does not template them, unlike the cluster generator)."""
    decisions = Decisions("clusterName", ({"clusterName": "prod", "reason": "fits"}, {"clusterName": "gone"},
                                          {"reason": "no key"}, {"clusterName": "in-cluster"}))
    sources = DecisionSources(tmp_path, [ClusterInfo("prod", "https://prod")], decisions)
    gen = {"clusterDecisionResource": {"configMapRef": "ocm-placement", "name": "placement-1",
                                       "values": {"tier": "{{ .reason | default \"none\" }}"}}}
    out = expand(appset([gen], go=True, name="{{ .name }}",
                        extra={"destination": {"server": "{{ .server }}", "namespace": "{{ .reason }}"},
                               "info": [{"name": "tier", "value": "{{ .values.tier }}"}]}),
                 sources)
    assert sorted(out.apps) == ["in-cluster", "prod"], out.errors
    assert out.apps["prod"].doc["spec"]["destination"] == {"server": "https://prod", "namespace": "fits"}
    assert out.apps["prod"].doc["spec"]["info"] == [{"name": "tier", "value": "{{ .reason | default \"none\" }}"}]
    assert out.apps["in-cluster"].doc["spec"]["destination"]["server"] == "https://kubernetes.default.svc"
    assert sources.asked_for == [("ocm-placement", "placement-1", {})]


def test_cluster_decision_configmap_fields_and_label_selectors() -> None:
    assert config_map_fields({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "placementdecisions",
                              "statusListKey": "decisions", "matchKey": "clusterName"}, "argocd/ocm") == (
        "cluster.open-cluster-management.io", "v1beta1", "placementdecisions", "decisions")
    assert config_map_fields({"apiVersion": "x.io/v1", "kind": "d", "matchKey": "c"}, "m")[3] == "clusters"
    with pytest.raises(GeneratorError, match="ConfigMap argocd/ocm: data.matchKey is missing"):
        config_map_fields({"apiVersion": "x.io/v1", "kind": "d"}, "argocd/ocm")
    with pytest.raises(GeneratorError, match="data.apiVersion and data.kind must name the resource"):
        config_map_fields({"apiVersion": "v1", "kind": "d", "matchKey": "c"}, "m")
    assert label_selector({"matchLabels": {"b": "2", "a": "1"}, "matchExpressions": [
        {"key": "env", "operator": "In", "values": ["x", "y"]}, {"key": "gone", "operator": "DoesNotExist"}]}) == \
        "a=1,b=2,env in (x,y),!gone"
