"""AppProject rules, checked before anything is applied: Argo CD's semantics, as pure functions.

- sourceRepos: a repoURL is permitted when some pattern matches it and no `!pattern` does (Argo CD's
  documented rule). URLs and patterns are compared normalized (`normalize_repo_url`, lowercase), so the
  https and ssh spellings of a repo agree. Patterns are globs where `*` stays within one `/`
  segment and `**` crosses segments, as Argo CD's gobwas globs; the pattern `*` alone allows every repo.
- destinations: permitted when some entry matches both the cluster (server or name) and the namespace
  and no deny entry (one whose server, name or namespace starts with `!`) matches. `*` matches any
  cluster, even one only named. Pass a destination with `server` resolved when you know it.
- kinds (Argo CD `IsGroupKindPermitted`): a cluster-scoped kind must match clusterResourceWhitelist (an
  absent or empty whitelist allows none) and not clusterResourceBlacklist; a namespaced kind must not
  match namespaceResourceBlacklist and, when namespaceResourceWhitelist is set, must match it. Group and
  kind entries are shell globs (`*`). Blacklists beat whitelists.
- every namespaced object's namespace (or the app's destination namespace when unset) must itself be a
  permitted destination namespace on the app's cluster.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from dataclasses import replace
from enum import Enum

from tidecd.base.errors import ProjectViolation
from tidecd.base.globs import compile_glob
from tidecd.base.model import Manifest, ResourceKey
from tidecd.config.load import (
    Application,
    AppProject,
    Destination,
    GroupKind,
    ProjectDestination,
    normalize_repo_url,
    redact_repo_url,
)

Namespaced = Callable[[str, str], bool]  # (group, kind) -> is the kind namespaced?


def glob_match(pattern: str, value: str, *, separator: str = "") -> bool:
    """Argo CD's glob (`tidecd.base.globs`); with a separator `*` stays in a segment and `**` crosses it.
    The pattern `*` alone matches everything; one that is no valid glob (an unclosed `{`, `[z-a]`) is
    compared literally."""
    if pattern == "*":
        return True
    try:
        regex = compile_glob(pattern, separator=separator or None)
    except ValueError:
        return pattern == value
    return regex.fullmatch(value) is not None


def _negation(pattern: str) -> tuple[bool, str]:
    return (True, pattern[1:]) if pattern.startswith("!") else (False, pattern)


# ---------------------------------------------------------------------------------------------------
# Sources and destinations


def source_permitted(project: AppProject, repo_url: str) -> bool:
    """Some sourceRepos pattern matches `repo_url` and no `!pattern` does."""
    url = normalize_repo_url(repo_url)
    allowed = False
    for pattern in project.source_repos:
        deny, raw = _negation(pattern)
        matched = raw == "*" or glob_match(normalize_repo_url(raw), url, separator="/")
        if deny and matched:
            return False
        allowed = allowed or (matched and not deny)
    return allowed


def check_source(project: AppProject, app: Application) -> list[str]:
    """Each of the app's repoURLs (every source of a multi-source app) against the project's sourceRepos;
    credentials in the URL are never shown."""
    problems = []
    for source in app.all_sources:
        if not source_permitted(project, source.repo_url):
            shown = redact_repo_url(source.repo_url)
            problems.append(f"source repository {shown!r} is not permitted by project {project.name!r}")
    return list(dict.fromkeys(problems))


class _Verdict(Enum):
    ALLOW = "allow"
    DENY = "deny"
    NONE = "none"


def _cluster_matches(item: ProjectDestination, dst: Destination) -> tuple[bool, bool]:
    """(negated, matched) of the entry's server/name patterns against the destination's cluster."""
    negated = matched = False
    for pattern, value in ((item.server, dst.server), (item.name, dst.name)):
        if not pattern:
            continue
        deny, raw = _negation(pattern)
        negated = negated or deny
        matched = matched or raw == "*" or (bool(value) and glob_match(raw, value))
    return negated, matched


def _verdict(item: ProjectDestination, dst: Destination) -> _Verdict:
    cluster_negated, cluster_matched = _cluster_matches(item, dst)
    ns_negated, ns_raw = _negation(item.namespace)
    ns_matched = glob_match(ns_raw, dst.namespace)
    if not (cluster_matched and ns_matched):
        return _Verdict.NONE
    return _Verdict.DENY if cluster_negated or ns_negated else _Verdict.ALLOW


def destination_permitted(project: AppProject, destination: Destination) -> bool:
    """Some entry allows the destination and no deny entry matches it."""
    verdicts = [_verdict(item, destination) for item in project.destinations]
    return _Verdict.DENY not in verdicts and _Verdict.ALLOW in verdicts


def _describe(destination: Destination) -> str:
    cluster = f"server {destination.server!r}" if destination.server else f"cluster {destination.name!r}"
    return f"{cluster} namespace {destination.namespace!r}"


def check_destination(project: AppProject, destination: Destination) -> list[str]:
    """The app's destination against the project's destinations."""
    if destination_permitted(project, destination):
        return []
    return [f"destination {_describe(destination)} is not permitted by project {project.name!r}"]


# ---------------------------------------------------------------------------------------------------
# Kinds and namespaces of the desired objects


def _listed(entries: Iterable[GroupKind], group: str, kind: str) -> bool:
    return any(fnmatch.fnmatchcase(kind, e.kind) and fnmatch.fnmatchcase(group, e.group) for e in entries)


def kind_violation(project: AppProject, group: str, kind: str, namespaced: bool) -> str:
    """Why the project forbids `group/kind`, or "" when it is allowed."""
    name = project.name
    if namespaced:
        if _listed(project.namespace_resource_blacklist, group, kind):
            return f"kind is in the namespaceResourceBlacklist of project {name!r}"
        whitelist = project.namespace_resource_whitelist
        if whitelist is not None and not _listed(whitelist, group, kind):
            return f"namespaced kind is not in the namespaceResourceWhitelist of project {name!r}"
        return ""
    if _listed(project.cluster_resource_blacklist, group, kind):
        return f"cluster-scoped kind is in the clusterResourceBlacklist of project {name!r}"
    if not _listed(project.cluster_resource_whitelist or (), group, kind):
        return f"cluster-scoped kind not allowed by project {name!r}"
    return ""


def _object_violations(project: AppProject, app: Application, obj: Manifest,
                       namespaced: Namespaced) -> list[str]:
    key = ResourceKey.of(obj)
    is_namespaced = namespaced(key.group, key.kind)
    key = replace(key, namespace=(key.namespace or app.destination.namespace) if is_namespaced else "")
    reasons = [kind_violation(project, key.group, key.kind, is_namespaced)]
    if is_namespaced:
        target = replace(app.destination, namespace=key.namespace)
        if not destination_permitted(project, target):
            reasons.append(f"namespace {key.namespace!r} is not a permitted destination of project "
                           f"{project.name!r}")
    return [f"{key}: {reason}" for reason in reasons if reason]


def check_resources(project: AppProject, app: Application, manifests: list[Manifest],
                    namespaced: Namespaced) -> list[str]:
    """One line per offending object and rule, each starting with the object's ResourceKey text."""
    return [line for obj in manifests for line in _object_violations(project, app, obj, namespaced)]


def enforce(project: AppProject, app: Application, manifests: list[Manifest],
            namespaced: Namespaced) -> None:
    """Raise ProjectViolation listing every problem (source, destination, each object), else return."""
    violations = [f"Application/{app.name}: {line}"
                  for line in check_source(project, app) + check_destination(project, app.destination)]
    violations += check_resources(project, app, manifests, namespaced)
    if violations:
        raise ProjectViolation(project.name, violations)
