"""What the discovering ApplicationSet generators read (`config.appset.discovery`): a GitHub organization's
repositories, branches and paths through PyGithub, a GitLab group's projects, branches and paths through
python-gitlab (`clients.gitlab`), and a clusterDecisionResource's ConfigMap and duck-typed resources on the
local cluster (in-cluster, namespace `argocd`, where Argo CD reads them).

Tokens: a generator's `tokenRef` names a Secret of the config source; without one, the config source's
`github` Secret is used only when the generator's `api` is the GitHub that Secret is for (its `url`, else
TIDECD_GITHUB_API_URL, else api.github.com), so an ApplicationSet naming another `api` is answered
anonymously and never sends that token elsewhere. GitLab's token is the generator's `tokenRef` only (as
Argo CD: no tokenRef, anonymous requests). No error carries a token (`clients.github` never echoes a request,
`clients.gitlab` masks one a server echoes), and a URL in one is shown without its credentials.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from tidecd.base.errors import TidecdError
from tidecd.base.model import ResourceKey
from tidecd.clients import github as gh
from tidecd.clients import gitlab as gl
from tidecd.clients.github import REQUEST_TIMEOUT, RateLimited, Rejected, Unavailable, translated_errors
from tidecd.clients.secrets import text_fields
from tidecd.config.appset.discovery import Decisions, GeneratorError, ScmRepo, ScmSpec, config_map_fields
from tidecd.config.load import redact_repo_url
from tidecd.config.model import Destination

if TYPE_CHECKING:
    from github import Github

    from tidecd.runtime import Runtime

ARGOCD_NAMESPACE = "argocd"  # where Argo CD keeps a clusterDecisionResource's ConfigMap and resources
MAX_REPOSITORIES = 1000
MAX_BRANCHES = 1000  # of one repository, with allBranches (GitLab)
MAX_DECISIONS = 5000


def github_token(runtime: Runtime, api: str, token_ref: tuple[str, str] | None, what: str) -> tuple[str, str]:
    """(the API base URL, the token to send there, "" for anonymous): see the module docstring."""
    default = (runtime.settings.github_api_url or gh.DEFAULT_API_URL).rstrip("/")
    base = (api or default).rstrip("/")
    try:
        secrets = runtime.secrets()
        if token_ref is not None:
            return base, secret_value(secrets, *token_ref, what=what)
        auth = gh.auth_from_secrets(secrets, default)
    except TidecdError as exc:
        raise GeneratorError(f"{what}: credentials: {exc}") from None
    if auth is None or auth.api_url.rstrip("/") != base:
        return base, ""
    return base, auth.token


def secret_value(secrets: list[dict[str, Any]], name: str, key: str, *, what: str) -> str:
    for secret in secrets:
        if (secret.get("metadata") or {}).get("name") == name:
            value = text_fields(secret, f"Secret {name}").get(key)
            if value:
                return value.strip()
            raise GeneratorError(f"{what}: tokenRef: Secret {name} has no key {key!r}")
    raise GeneratorError(f"{what}: tokenRef: no Secret {name!r} in the config source")


def client(api_url: str, token: str) -> Github:
    # lazy: cold start (PyGithub only when GitHub is called)
    import github
    from github import Auth

    return github.Github(auth=Auth.Token(token) if token else None, base_url=api_url, retry=None,
                         timeout=REQUEST_TIMEOUT, seconds_between_requests=None, seconds_between_writes=None,
                         lazy=True)


@contextmanager
def github_errors(what: str, api_url: str) -> Iterator[None]:
    """GitHub's refusals and outages, and an answer PyGithub cannot read, as GeneratorError naming `what`."""
    # lazy: cold start (PyGithub only when GitHub is called)
    import github

    try:
        with translated_errors():
            yield
    except (Rejected, RateLimited, Unavailable) as exc:
        raise GeneratorError(f"{what}: {exc}") from None
    except (ValueError, TypeError, KeyError, AttributeError, github.BadAttributeException):
        raise GeneratorError(f"{what}: the answer is not what GitHub's API gives (is {redact_repo_url(api_url)} "
                             "GitHub's API?)") from None


class GitHubScm:
    """scmProvider's github: one client per generator spec, for its repositories, branches and paths."""

    def __init__(self, runtime: Runtime, spec: ScmSpec) -> None:
        self.spec = spec
        self.what = f"scmProvider: GitHub organization {spec.organization}"
        self.api, token = github_token(runtime, spec.api, spec.token_ref, "scmProvider")
        self.github = client(self.api, token)

    def repositories(self) -> list[ScmRepo]:
        out = []
        with github_errors(self.what, self.api):
            for repo in self.github.get_organization(self.spec.organization).get_repos():
                if self.spec.exclude_archived and repo.archived:
                    continue
                url = repo.clone_url if self.spec.clone_protocol == "https" else repo.ssh_url
                out.append(ScmRepo(organization=str(repo.owner.login), repository=str(repo.name),
                                   repository_id=int(repo.id), url=str(url), branch=str(repo.default_branch),
                                   labels=tuple(str(t) for t in repo.topics or ())))
                if len(out) >= MAX_REPOSITORIES:
                    raise GeneratorError(f"{self.what}: more than {MAX_REPOSITORIES} repositories")
        return out

    def branches(self, repo: ScmRepo) -> list[ScmRepo]:
        """The default branch, or every branch; none when GitHub answers 404 for the default branch (an empty
        repository), as Argo CD's listBranches."""
        with github_errors(f"{self.what}: repository {repo.repository}", self.api):
            handle = self.github.get_repo(f"{repo.organization}/{repo.repository}")
            if not self.spec.all_branches:
                try:
                    with translated_errors():
                        branch = handle.get_branch(repo.branch)
                except Rejected as exc:
                    if exc.status == 404:
                        return []
                    raise
                return [dataclasses.replace(repo, sha=str(branch.commit.sha))]
            return [dataclasses.replace(repo, branch=str(b.name), sha=str(b.commit.sha)) for b in handle.get_branches()]

    def has_path(self, repo: ScmRepo, path: str) -> bool:
        what = f"{self.what}: repository {repo.repository} at {repo.branch}: path {path}"
        try:
            with translated_errors():
                self.github.get_repo(f"{repo.organization}/{repo.repository}").get_contents(
                    path.strip("/"), ref=repo.branch)
        except Rejected as exc:
            if exc.status == 404:
                return False
            raise GeneratorError(f"{what}: {exc}") from None
        except (RateLimited, Unavailable) as exc:
            raise GeneratorError(f"{what}: {exc}") from None
        return True


class GitLabScm:
    """scmProvider's gitlab: one client per generator spec, as Argo CD's GitlabProvider (`clients.gitlab` says
    which calls). A `pathsExist` check asks by the project's id, where Argo CD first looks the project up by
    its path: one call less, the same answer."""

    def __init__(self, runtime: Runtime, spec: ScmSpec) -> None:
        self.spec = spec
        self.what = f"scmProvider: GitLab group {spec.organization}"
        token = ""
        if spec.token_ref is not None:
            try:
                token = secret_value(runtime.secrets(), *spec.token_ref, what=self.what)
            except GeneratorError:
                raise
            except TidecdError as exc:
                raise GeneratorError(f"{self.what}: credentials: {exc}") from None
        self.gitlab = gl.GitLab(spec.api, token, insecure=spec.insecure)

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except gl.Malformed as exc:
            raise GeneratorError(f"{what}: the answer is not what GitLab's API gives ({exc}; is "
                                 f"{self.gitlab.shown} a GitLab?)") from None
        except (gl.Refused, gl.Unreachable, gl.TooMany) as exc:
            raise GeneratorError(f"{what}: {exc}") from None

    def repositories(self) -> list[ScmRepo]:
        with self._errors(self.what):
            projects = self.gitlab.group_projects(
                self.spec.organization, include_subgroups=self.spec.include_subgroups,
                with_shared=self.spec.include_shared_projects, archived_only=self.spec.include_archived,
                topic=self.spec.topic, limit=MAX_REPOSITORIES)
        return [ScmRepo(organization=p.namespace, repository=p.path, repository_id=p.id,
                        url=p.http_url if self.spec.clone_protocol == "https" else p.ssh_url,
                        branch=p.default_branch, labels=p.topics) for p in projects]

    def branches(self, repo: ScmRepo) -> list[ScmRepo]:
        """The default branch, or every branch; none when GitLab answers 404 (as Argo CD)."""
        with self._errors(f"{self.what}: repository {repo.organization}/{repo.repository}"):
            if not self.spec.all_branches:
                sha = self.gitlab.branch_sha(repo.repository_id, repo.branch)
                return [] if sha is None else [dataclasses.replace(repo, sha=sha)]
            return [dataclasses.replace(repo, branch=name, sha=sha)
                    for name, sha in self.gitlab.branches(repo.repository_id, MAX_BRANCHES)]

    def has_path(self, repo: ScmRepo, path: str) -> bool:
        with self._errors(f"{self.what}: repository {repo.organization}/{repo.repository} at {repo.branch}: "
                          f"path {path}"):
            return self.gitlab.path_exists(repo.repository_id, path, repo.branch)


def scm_provider(runtime: Runtime, spec: ScmSpec) -> GitHubScm | GitLabScm:
    """The provider a generator spec names."""
    return GitLabScm(runtime, spec) if spec.provider == "gitlab" else GitHubScm(runtime, spec)


def label_selector(selector: Mapping[str, Any]) -> str:
    """A LabelSelector as the API's `labelSelector` query (matchLabels, then matchExpressions)."""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, values = str(expr.get("key", "")), ",".join(str(v) for v in expr.get("values") or [])
        parts.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": key,
                      "DoesNotExist": f"!{key}"}.get(str(expr.get("operator")), key))
    return ",".join(parts)


def cluster_decisions(runtime: Runtime, config_map: str, name: str, selector: Mapping[str, Any]) -> Decisions:
    """The ConfigMap `config_map` of the local cluster's `argocd` namespace, and the decisions of the resources
    it describes (`name`, or matching `selector`), as Argo CD's duck_type generator reads them."""
    where = f"clusterDecisionResource: ConfigMap {ARGOCD_NAMESPACE}/{config_map}"
    try:
        kube = runtime.cluster(Destination(server="https://kubernetes.default.svc"))
        found = kube.get(ResourceKey("", "ConfigMap", ARGOCD_NAMESPACE, config_map))
        if found is None:
            raise GeneratorError(f"{where}: not found on the local cluster")
        data = found.get("data") or {}
        group, _, kind, list_key = config_map_fields(data, f"{ARGOCD_NAMESPACE}/{config_map}")
        resource = next((r for (g, k), r in kube.resources().items() if g == group and kind in (k, r.plural)), None)
        if resource is None:
            raise GeneratorError(f"{where}: the local cluster serves no {group}/{kind}")
        labels = label_selector(selector)
        items = kube.list(group, resource.kind, namespace=ARGOCD_NAMESPACE, label_selector=labels)
    except TidecdError as exc:
        raise GeneratorError(f"{where}: {exc}") from None
    items = [i for i in items if not name or (i.get("metadata") or {}).get("name") == name]
    if not items:
        raise GeneratorError(f"{where}: no {resource.kind} found in {ARGOCD_NAMESPACE} "
                             f"({'name ' + name if name else 'labels ' + (labels or 'any')})")
    decisions: list[Mapping[str, Any]] = []
    for item in items:
        listed = (item.get("status") or {}).get(list_key)
        decisions.extend(d for d in listed or [] if isinstance(d, Mapping))
    if len(decisions) > MAX_DECISIONS:
        raise GeneratorError(f"{where}: more than {MAX_DECISIONS} decisions")
    return Decisions(str(data.get("matchKey")), tuple(decisions))
