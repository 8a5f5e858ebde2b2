"""The generators that discover their parameters elsewhere: `scmProvider` (the repositories of a GitHub
organization or a GitLab group) and `clusterDecisionResource` (a duck-typed resource's `status` list of
cluster decisions), as Argo CD's scm_provider and duck_type generators give them.

scmProvider: every repository of the GitHub organization (archived ones left out with
`excludeArchivedRepos`), or every project of the GitLab group as GitLab lists it (`includeSubgroups`,
`includeSharedProjects`, `includeArchivedRepos`, `topic` are GitLab's own query parameters), with its
default branch or, with `allBranches`, every branch; `filters` as Argo CD applies them, the same for both
providers (GitLab's labels are the project's topics): a filter
naming only `repositoryMatch` and/or `labelMatch` selects repositories, one naming `pathsExist`,
`pathsDoNotExist` or `branchMatch` selects branches (checking its repository conditions too); within each
kind any filter may match, and a kind with no filter lets everything through. Parameters: `organization`,
`repository`, `repository_id`, `url` (the ssh URL, or the https one with `cloneProtocol: https`), `branch`,
`branchNormalized`, `sha`, `short_sha` (8), `short_sha_7`, `labels` (the topics, comma-joined). For
GitLab, `organization` is the project's namespace full path (a subgroup's project names its subgroup) and
`repository` the project's path.

clusterDecisionResource: the ConfigMap `configMapRef` names gives the resource's `apiVersion` and `kind`,
`statusListKey` (default `clusters`) and `matchKey`; the resources (`name`, or `labelSelector`) are listed,
each decision of their `status.<statusListKey>` whose `matchKey` value names a cluster tidecd knows gives one
parameter set: `name` and `server` of that cluster, then every key of the decision.

Reading GitHub and the cluster is the caller's (`generators.Sources`); this module is pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidecd.base.errors import ConfigError
from tidecd.config.schema import Keys, Node

SCM_KEYS = Keys(("github", "gitlab", "bitbucket", "bitbucketServer", "gitea", "azureDevOps", "awsCodeCommit",
                 "cloneProtocol", "filters", "requeueAfterSeconds", "template", "values"))
SCM_PROVIDERS = ("github", "gitlab")
_SCM_GITHUB = Keys(("organization", "api", "allBranches", "excludeArchivedRepos", "tokenRef", "appSecretName"))
_SCM_GITLAB = Keys(("group", "api", "allBranches", "includeSubgroups", "includeSharedProjects",
                    "includeArchivedRepos", "topic", "tokenRef", "insecure", "caRef"))
_SCM_FILTER = Keys(("repositoryMatch", "pathsExist", "pathsDoNotExist", "labelMatch", "branchMatch"))
_TOKEN_REF = Keys(("secretName", "key"))
CDR_KEYS = Keys(("configMapRef", "name", "labelSelector", "requeueAfterSeconds", "template", "values"))
_SELECTOR = Keys(("matchLabels", "matchExpressions"))
_BRANCH_CONDITIONS = ("pathsExist", "pathsDoNotExist", "branchMatch")


class GeneratorError(ConfigError):
    """A generator that cannot produce its parameters (the message starts with the dotted field)."""


@dataclass(frozen=True)
class ScmSpec:
    """What the caller needs to list an organization's (GitHub) or a group's (GitLab) repositories."""

    provider: str  # "github" | "gitlab"
    organization: str  # GitHub's organization, GitLab's group (its id or full path)
    api: str = ""
    token_ref: tuple[str, str] | None = None  # (Secret name, key)
    all_branches: bool = False
    exclude_archived: bool = False  # github
    clone_protocol: str = "ssh"
    include_subgroups: bool = False  # gitlab, as Argo CD's defaults
    include_shared_projects: bool = True
    include_archived: bool = False
    topic: str = ""
    insecure: bool = False


@dataclass(frozen=True)
class ScmRepo:
    """One repository at one branch."""

    organization: str
    repository: str
    repository_id: int
    url: str
    branch: str
    sha: str = ""
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class Decisions:
    """A clusterDecisionResource's ConfigMap read and its resources listed."""

    match_key: str
    decisions: tuple[Mapping[str, Any], ...]


# --------------------------------------------------------------------------------------------------
# Validation


def validate_scm(node: Node) -> None:
    body = node.child("scmProvider", SCM_KEYS, required=True)
    if body is None:
        return
    others = [k for k in SCM_KEYS.allowed if k in body.data and k not in (*SCM_PROVIDERS, "cloneProtocol", "filters",
                                                                         "requeueAfterSeconds", "template", "values")]
    for name in others:
        body.error(name, f"the {name} provider is not implemented by tidecd (github and gitlab are)")
    github = body.child("github", _SCM_GITHUB)
    gitlab = body.child("gitlab", _SCM_GITLAB)
    if github is None and gitlab is None and not others:
        body.error("", "set a provider (tidecd implements github and gitlab)")
    if github is not None and gitlab is not None:
        body.error("", "set one provider: github and gitlab are both set (Argo CD would read github only)")
    if github is not None:
        github.text("organization", required=True)
        github.text("api")
        github.flag("allBranches")
        github.flag("excludeArchivedRepos")
        validate_github_auth(github, "use tokenRef")
    if gitlab is not None:
        _validate_gitlab(gitlab)
    protocol = body.text("cloneProtocol", "ssh") or "ssh"
    if protocol not in ("ssh", "https"):
        body.error("cloneProtocol", f"{protocol!r} is not one of ssh, https")
    body.number("requeueAfterSeconds", 1800)
    body.get("values", (dict,), "a mapping")
    for entry in body.children("filters", _SCM_FILTER):
        for key in ("repositoryMatch", "labelMatch", "branchMatch"):
            pattern = entry.text(key)
            if pattern:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    entry.error(key, f"not a regular expression: {exc}")
        entry.texts("pathsExist")
        entry.texts("pathsDoNotExist")


def _validate_gitlab(gitlab: Node) -> None:
    gitlab.text("group", required=True)
    gitlab.text("api")
    gitlab.text("topic")
    for key in ("allBranches", "includeSubgroups", "includeSharedProjects", "includeArchivedRepos", "insecure"):
        gitlab.flag(key)
    if gitlab.data.get("caRef") is not None:
        gitlab.error("caRef", "not implemented by tidecd (its config source keeps no argocd-tls-certs-cm): use a "
                              "certificate the system trusts, or insecure: true")
    _validate_token_ref(gitlab)


def validate_github_auth(github: Node, instead: str) -> None:
    """A GitHub provider's credentials: `tokenRef` (a Secret name and key); `appSecretName` is not implemented."""
    if github.data.get("appSecretName") is not None:
        github.error("appSecretName", f"not implemented by tidecd ({instead})")
    _validate_token_ref(github)


def _validate_token_ref(provider: Node) -> None:
    ref = provider.child("tokenRef", _TOKEN_REF)
    if ref is not None:
        ref.text("secretName", required=True)
        ref.text("key", required=True)


def validate_cdr(node: Node) -> None:
    body = node.child("clusterDecisionResource", CDR_KEYS, required=True)
    if body is None:
        return
    body.text("configMapRef", required=True)
    name = body.text("name")
    selector = body.child("labelSelector", _SELECTOR)
    if selector is not None:
        selector.pairs("matchLabels")
    if bool(name) == bool(selector is not None and selector.data):
        body.error("", "set exactly one of name or labelSelector (as Argo CD requires)")
    body.number("requeueAfterSeconds", 180)
    body.get("values", (dict,), "a mapping")


def scm_spec(body: Mapping[str, Any]) -> ScmSpec:
    protocol = str(body.get("cloneProtocol") or "ssh")
    if isinstance(body.get("gitlab"), Mapping) and not isinstance(body.get("github"), Mapping):
        gitlab = body["gitlab"]
        shared = gitlab.get("includeSharedProjects")
        return ScmSpec(provider="gitlab", organization=str(gitlab.get("group", "")),
                       api=str(gitlab.get("api") or ""), token_ref=_token_ref(gitlab),
                       all_branches=bool(gitlab.get("allBranches")), clone_protocol=protocol,
                       include_subgroups=bool(gitlab.get("includeSubgroups")),
                       include_shared_projects=shared is None or bool(shared),  # WillIncludeSharedProjects
                       include_archived=bool(gitlab.get("includeArchivedRepos")),
                       topic=str(gitlab.get("topic") or ""), insecure=bool(gitlab.get("insecure")))
    github = body.get("github") or {}
    return ScmSpec(provider="github", organization=str(github.get("organization", "")),
                   api=str(github.get("api") or ""), token_ref=_token_ref(github),
                   all_branches=bool(github.get("allBranches")),
                   exclude_archived=bool(github.get("excludeArchivedRepos")), clone_protocol=protocol)


def _token_ref(provider: Mapping[str, Any]) -> tuple[str, str] | None:
    ref = provider.get("tokenRef")
    return (str(ref["secretName"]), str(ref["key"])) if isinstance(ref, Mapping) else None


# --------------------------------------------------------------------------------------------------
# scmProvider


def _filters(body: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """(repository filters, branch filters), as Argo CD's getApplicableFilters splits them."""
    entries = [f for f in body.get("filters") or [] if isinstance(f, Mapping)]
    branch = [f for f in entries if any(f.get(k) for k in _BRANCH_CONDITIONS)]
    return [f for f in entries if f not in branch], branch


def _matches(entry: Mapping[str, Any], repo: ScmRepo, has_path: Callable[[ScmRepo, str], bool]) -> bool:
    if entry.get("repositoryMatch") and not re.search(str(entry["repositoryMatch"]), repo.repository):
        return False
    if entry.get("branchMatch") and not re.search(str(entry["branchMatch"]), repo.branch):
        return False
    if entry.get("labelMatch") and not any(re.search(str(entry["labelMatch"]), label) for label in repo.labels):
        return False
    if not all(has_path(repo, str(p)) for p in entry.get("pathsExist") or []):
        return False
    return not any(has_path(repo, str(p)) for p in entry.get("pathsDoNotExist") or [])


def select_repositories(body: Mapping[str, Any], repos: Sequence[ScmRepo], branches: Callable[[ScmRepo], list[ScmRepo]],
                        has_path: Callable[[ScmRepo, str], bool]) -> list[ScmRepo]:
    """The repositories (then their branches) the filters let through, in the provider's order."""
    repo_filters, branch_filters = _filters(body)
    kept = [r for r in repos if not repo_filters or any(_matches(f, r, has_path) for f in repo_filters)]
    out: list[ScmRepo] = []
    for repo in kept:
        out.extend(b for b in branches(repo) if not branch_filters or any(_matches(f, b, has_path)
                                                                           for f in branch_filters))
    return out


def scm_params(repo: ScmRepo, sanitized: Callable[[str], str]) -> dict[str, Any]:
    return {"organization": repo.organization, "repository": repo.repository, "repository_id": repo.repository_id,
            "url": repo.url, "branch": repo.branch, "branchNormalized": sanitized(repo.branch), "sha": repo.sha,
            "short_sha": repo.sha[:8], "short_sha_7": repo.sha[:7], "labels": ",".join(repo.labels)}


# --------------------------------------------------------------------------------------------------
# clusterDecisionResource


def config_map_fields(data: Mapping[str, Any], name: str) -> tuple[str, str, str, str]:
    """(group, version, kind or resource, statusListKey) from the ConfigMap's data; errors name it."""
    api_version, kind = str(data.get("apiVersion") or ""), str(data.get("kind") or "")
    group, _, version = api_version.rpartition("/")
    if not kind or not version or "/" not in api_version:
        raise GeneratorError(f"ConfigMap {name}: data.apiVersion and data.kind must name the resource "
                             f"(e.g. cluster.open-cluster-management.io/v1beta1 and placementdecisions); got "
                             f"{api_version!r} and {kind!r}")
    if not str(data.get("matchKey") or ""):
        raise GeneratorError(f"ConfigMap {name}: data.matchKey is missing (the decision's key naming a cluster)")
    return group, version, kind, str(data.get("statusListKey") or "clusters")


def decision_params(decisions: Decisions, clusters: Mapping[str, str]) -> list[dict[str, Any]]:
    """One set per decision naming a known cluster (`clusters`: name → server), the cluster's name and server
    first, then the decision's own keys."""
    out = []
    for decision in decisions.decisions:
        value = decision.get(decisions.match_key)
        if not isinstance(value, str) or value not in clusters:
            continue
        params: dict[str, Any] = {"name": value, "server": clusters[value]}
        params.update({str(k): v for k, v in decision.items()})
        out.append(params)
    return out
