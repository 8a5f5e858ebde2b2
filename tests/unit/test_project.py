"""AppProject rules: sources, destinations, kinds and namespaces, with Argo CD's defaults and globs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidecd.base.errors import ProjectViolation
from tidecd.base.model import Manifest
from tidecd.config.load import (
    DEFAULT_PROJECT,
    Application,
    ApplicationSource,
    AppProject,
    Destination,
    GroupKind,
    ProjectDestination,
    load_config,
)
from tidecd.project.rules import (
    check_destination,
    check_resources,
    check_source,
    destination_permitted,
    enforce,
    glob_match,
    kind_violation,
    source_permitted,
)

GOOD = Path(__file__).parent / "fixtures" / "config" / "good"
CLUSTER = "https://kubernetes.default.svc"
CLUSTER_SCOPED = {("", "Namespace"), ("rbac.authorization.k8s.io", "ClusterRole"),
                  ("apiextensions.k8s.io", "CustomResourceDefinition"), ("storage.k8s.io", "StorageClass")}


def namespaced(group: str, kind: str) -> bool:
    """Discovery of a plain cluster: the few cluster-scoped kinds these tests use."""
    return (group, kind) not in CLUSTER_SCOPED


def app(repo: str = "https://github.com/example/guestbook", *, server: str = CLUSTER, name: str = "",
        namespace: str = "team-a-web", project: str = "team-a") -> Application:
    return Application(name="web", project=project, source=ApplicationSource(repo_url=repo),
                       destination=Destination(server=server, name=name, namespace=namespace))


def obj(api_version: str, kind: str, name: str, namespace: str = "") -> Manifest:
    meta: dict[str, str] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


def project(**fields: object) -> AppProject:
    base: dict[str, object] = {"name": "team-a", "source_repos": ("*",),
                               "destinations": (ProjectDestination("*", "", "*"),)}
    return AppProject(**(base | fields))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------
# Globs


@pytest.mark.parametrize(("pattern", "value", "separator", "expected"), [
    ("*", "anything/at/all", "/", True),
    ("github.com/org/*", "github.com/org/repo", "/", True),
    ("github.com/org/*", "github.com/org/sub/repo", "/", False),
    ("github.com/org/**", "github.com/org/sub/repo", "/", True),
    ("github.com/*/repo", "github.com/org/repo", "/", True),
    ("team-?", "team-a", "", True),
    ("team-?", "team-ab", "", False),
    ("team-[a-c]", "team-b", "", True),
    ("team-[!a-c]", "team-b", "", False),
    ("team-[!a-c]", "team-d", "", True),
    ("{dev,prod}-*", "prod-eu", "", True),
    ("{dev,prod}-*", "test-eu", "", False),
    ("a\\*b", "a*b", "", True),
    ("a\\*b", "axb", "", False),
    ("{unbalanced", "{unbalanced", "", True),
    ("https://*.example.com", "https://k8s.prod.example.com", "", True),
    ("web", "web2", "", False),
    ("", "", "", True),
])
def test_glob_match(pattern: str, value: str, separator: str, expected: bool) -> None:
    assert glob_match(pattern, value, separator=separator) is expected


# ---------------------------------------------------------------------------------------------------
# Source repositories


@pytest.mark.parametrize(("patterns", "url", "expected"), [
    (("*",), "git@anywhere.example:x/y.git", True),
    (("https://github.com/example/*",), "https://github.com/example/guestbook", True),
    (("https://github.com/example/*",), "git@github.com:example/guestbook.git", True),  # ssh == https
    (("git@github.com:example/*",), "https://github.com/Example/Guestbook/", True),  # case-insensitive
    (("https://github.com/example/*",), "https://github.com/example/group/app", False),  # one segment
    (("https://github.com/example/**",), "https://github.com/example/group/app", True),
    (("https://github.com/example/*",), "https://github.com/other/guestbook", False),
    (("https://github.com/example/guestbook.git",), "https://github.com/example/guestbook", True),
    (("https://github.com/example/*", "!https://github.com/example/secret"),
     "https://github.com/example/secret.git", False),  # negation beats an allow
    (("!https://github.com/example/secret", "*"), "https://github.com/example/guestbook", True),
    (("!https://github.com/example/secret",), "https://github.com/example/guestbook", False),  # no allow
    ((), "https://github.com/example/guestbook", False),  # absent sourceRepos allow nothing
])
def test_source_permitted(patterns: tuple[str, ...], url: str, expected: bool) -> None:
    assert source_permitted(project(source_repos=patterns), url) is expected


def test_check_source_message_hides_credentials() -> None:
    violations = check_source(project(source_repos=("https://github.com/example/*",)),
                              app("https://user:s3cret@github.com/other/app"))
    assert violations == ["source repository 'https://github.com/other/app' is not permitted by project "
                          "'team-a'"]
    assert check_source(project(), app()) == []


# ---------------------------------------------------------------------------------------------------
# Destinations

TEAM_DESTINATIONS = (
    ProjectDestination(server=CLUSTER, namespace="team-a-*"),
    ProjectDestination(server="", name="staging", namespace="*"),
    ProjectDestination(server="*", namespace="!kube-system"),
    ProjectDestination(server="!https://team-b-*", namespace="*"),
)


@pytest.mark.parametrize(("destination", "expected"), [
    (Destination(server=CLUSTER, namespace="team-a-web"), True),
    (Destination(server=CLUSTER, namespace="team-b-web"), False),
    (Destination(name="staging", namespace="anything"), True),
    (Destination(name="prod", namespace="team-a-web"), False),
    (Destination(name="staging", namespace="kube-system"), False),  # the deny entry matches any cluster
    (Destination(server=CLUSTER, namespace="kube-system"), False),
    (Destination(server="https://team-b-prod:6443", namespace="team-a-web"), False),
])
def test_destination_permitted(destination: Destination, expected: bool) -> None:
    assert destination_permitted(project(destinations=TEAM_DESTINATIONS), destination) is expected


def test_deny_destinations_beat_an_allow_all_entry() -> None:
    proj = project(destinations=(*TEAM_DESTINATIONS, ProjectDestination("*", "", "*")))
    assert destination_permitted(proj, Destination(server="https://other", namespace="web"))
    assert not destination_permitted(proj, Destination(server="https://team-b-prod:6443", namespace="web"))
    assert not destination_permitted(proj, Destination(server="https://other", namespace="kube-system"))


def test_destination_matches_cluster_by_server_or_name() -> None:
    proj = project(destinations=(ProjectDestination(server="https://*.example.com", namespace="web"),))
    assert destination_permitted(proj, Destination(server="https://k8s.example.com", namespace="web"))
    assert not destination_permitted(proj, Destination(name="k8s", namespace="web"))  # server unknown
    assert destination_permitted(proj, Destination(server="https://k8s.example.com", name="k8s",
                                                   namespace="web"))
    # Argo CD: an entry without a namespace only matches destinations without one.
    bare = project(destinations=(ProjectDestination(server="*", namespace=""),))
    assert destination_permitted(bare, Destination(server=CLUSTER))
    assert not destination_permitted(bare, Destination(server=CLUSTER, namespace="web"))
    assert not destination_permitted(project(destinations=()), Destination(server=CLUSTER))


def test_check_destination_message() -> None:
    proj = project(destinations=TEAM_DESTINATIONS)
    assert check_destination(proj, Destination(name="prod", namespace="web")) == [
        "destination cluster 'prod' namespace 'web' is not permitted by project 'team-a'"]
    assert check_destination(proj, Destination(server=CLUSTER, namespace="kube-system")) == [
        f"destination server '{CLUSTER}' namespace 'kube-system' is not permitted by project 'team-a'"]
    assert check_destination(proj, Destination(server=CLUSTER, namespace="team-a-x")) == []


# ---------------------------------------------------------------------------------------------------
# Kinds


def test_argo_cd_default_project_allows_everything() -> None:
    manifests = [obj("rbac.authorization.k8s.io/v1", "ClusterRole", "admin"), obj("v1", "Namespace", "x"),
                 obj("apps/v1", "Deployment", "web", "kube-system"), obj("v1", "ResourceQuota", "q")]
    anywhere = app("git@example.com:any/repo", server="https://far.away", namespace="any", project="default")
    enforce(DEFAULT_PROJECT, anywhere, manifests, namespaced)


def test_project_without_cluster_whitelist_allows_no_cluster_scoped_kind() -> None:
    violations = check_resources(project(), app(), [obj("rbac.authorization.k8s.io/v1", "ClusterRole",
                                                        "admin", "ignored-ns")], namespaced)
    assert violations == ["rbac.authorization.k8s.io/ClusterRole admin: cluster-scoped kind not allowed by "
                          "project 'team-a'"]
    assert kind_violation(project(cluster_resource_whitelist=()), "", "Namespace", False)


def test_cluster_whitelist_globs_and_blacklist_beats_it() -> None:
    proj = project(cluster_resource_whitelist=(GroupKind("*", "*"),),
                   cluster_resource_blacklist=(GroupKind("rbac.authorization.k8s.io", "Cluster*"),))
    assert kind_violation(proj, "", "Namespace", False) == ""
    assert kind_violation(proj, "rbac.authorization.k8s.io", "ClusterRole", False) == (
        "cluster-scoped kind is in the clusterResourceBlacklist of project 'team-a'")
    core_only = project(cluster_resource_whitelist=(GroupKind("", "Namespace"),))
    assert kind_violation(core_only, "", "Namespace", False) == ""
    assert kind_violation(core_only, "example.com", "Namespace", False) != ""


def test_namespaced_kinds_whitelist_absent_empty_and_set() -> None:
    assert kind_violation(project(), "apps", "Deployment", True) == ""  # absent: all allowed
    assert kind_violation(project(namespace_resource_whitelist=()), "apps", "Deployment", True) == (
        "namespaced kind is not in the namespaceResourceWhitelist of project 'team-a'")
    listed = project(namespace_resource_whitelist=(GroupKind("apps", "*"), GroupKind("", "ConfigMap")))
    assert kind_violation(listed, "apps", "StatefulSet", True) == ""
    assert kind_violation(listed, "", "ConfigMap", True) == ""
    assert kind_violation(listed, "", "Secret", True) != ""
    assert kind_violation(listed, "batch", "Job", True) != ""


def test_namespace_blacklist_beats_whitelist() -> None:
    proj = project(namespace_resource_whitelist=(GroupKind("*", "*"),),
                   namespace_resource_blacklist=(GroupKind("", "ResourceQuota"), GroupKind("", "LimitRange")))
    assert kind_violation(proj, "", "ResourceQuota", True) == (
        "kind is in the namespaceResourceBlacklist of project 'team-a'")
    assert kind_violation(proj, "", "ConfigMap", True) == ""


def test_object_namespace_defaults_to_destination_and_must_be_permitted() -> None:
    proj = project(destinations=(ProjectDestination(server=CLUSTER, namespace="team-a-*"),))
    manifests = [obj("v1", "ConfigMap", "settings"),  # takes team-a-web from the destination
                 obj("v1", "ConfigMap", "leak", "kube-system"),
                 obj("v1", "Namespace", "kube-system")]  # cluster-scoped: no namespace check
    violations = check_resources(proj, app(), manifests, namespaced)
    assert violations == [
        "ConfigMap kube-system/leak: namespace 'kube-system' is not a permitted destination of project 'team-a'",
        "Namespace kube-system: cluster-scoped kind not allowed by project 'team-a'",
    ]
    no_namespace_app = app(namespace="")
    assert check_resources(proj, no_namespace_app, [obj("v1", "ConfigMap", "x")], namespaced) == [
        "ConfigMap x: namespace '' is not a permitted destination of project 'team-a'"]


# ---------------------------------------------------------------------------------------------------
# enforce


def test_enforce_lists_every_offending_object() -> None:
    proj = project(source_repos=("https://github.com/example/*",),
                   destinations=(ProjectDestination(server=CLUSTER, namespace="team-a-*"),),
                   namespace_resource_blacklist=(GroupKind("", "Secret"),))
    manifests = [obj("apps/v1", "Deployment", "web"),
                 obj("v1", "Secret", "token"),
                 obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "widgets.example.com"),
                 obj("apps/v1", "Deployment", "elsewhere", "default")]
    with pytest.raises(ProjectViolation) as info:
        enforce(proj, app("https://gitlab.com/x/y"), manifests, namespaced)
    assert info.value.project == "team-a"
    assert info.value.violations == [
        "Application/web: source repository 'https://gitlab.com/x/y' is not permitted by project 'team-a'",
        "Secret team-a-web/token: kind is in the namespaceResourceBlacklist of project 'team-a'",
        "apiextensions.k8s.io/CustomResourceDefinition widgets.example.com: cluster-scoped kind not allowed "
        "by project 'team-a'",
        "apps/Deployment default/elsewhere: namespace 'default' is not a permitted destination of project "
        "'team-a'",
    ]
    assert str(info.value).startswith("project 'team-a' forbids: Application/web: source repository")


def test_enforce_passes_when_everything_is_allowed() -> None:
    proj = project(source_repos=("https://github.com/example/*",),
                   destinations=(ProjectDestination(server=CLUSTER, namespace="team-a-*"),),
                   cluster_resource_whitelist=(GroupKind("", "Namespace"),))
    enforce(proj, app(), [obj("v1", "Namespace", "team-a-web"), obj("apps/v1", "Deployment", "web")],
            namespaced)


def test_enforce_reports_a_forbidden_destination() -> None:
    proj = project(destinations=(ProjectDestination(server=CLUSTER, namespace="team-a-*"),))
    with pytest.raises(ProjectViolation) as info:
        enforce(proj, app(namespace="prod"), [], namespaced)
    assert info.value.violations == [
        f"Application/web: destination server '{CLUSTER}' namespace 'prod' is not permitted by project "
        "'team-a'"]


def test_rules_of_a_loaded_project() -> None:
    config = load_config(GOOD)
    team_a, guestbook = config.projects["team-a"], config.applications["guestbook"]
    enforce(team_a, guestbook, [obj("apps/v1", "Deployment", "web"), obj("v1", "ConfigMap", "c"),
                                obj("v1", "Namespace", "team-a-guestbook")], namespaced)
    violations = check_resources(team_a, guestbook, [
        obj("rbac.authorization.k8s.io/v1", "ClusterRole", "reader"),  # blacklisted group
        obj("v1", "ResourceQuota", "q"),  # namespace blacklist
        obj("batch/v1", "Job", "migrate"),  # not in the namespace whitelist
    ], namespaced)
    assert violations == [
        "rbac.authorization.k8s.io/ClusterRole reader: cluster-scoped kind is in the clusterResourceBlacklist "
        "of project 'team-a'",
        "ResourceQuota team-a-guestbook/q: kind is in the namespaceResourceBlacklist of project 'team-a'",
        "batch/Job team-a-guestbook/migrate: namespaced kind is not in the namespaceResourceWhitelist of "
        "project 'team-a'",
    ]
    assert not source_permitted(team_a, "git@github.com:example/forbidden.git")
    assert check_source(team_a, config.applications["shop-kustomize"]) == []
