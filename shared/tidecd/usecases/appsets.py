"""The ApplicationSet refresh (a use case beside the image updater): evaluate every ApplicationSet of the
config and record what it generates.

Run by each poll tick (before the tick groups apps by repository, so an app generated for a directory
pushed since the last tick is refreshed in the same tick), by the webhook (a push to a repository an
ApplicationSet reads; a `pull_request` event for a pull-request generator) and by the api. One record per
ApplicationSet (`tidecd.generated.records`); `applicationsSync` decides what may be created, updated and deleted.
An ApplicationSet whose generator fails keeps what it generated before, with its error recorded; a
pull-request, scmProvider or clusterDecisionResource generator (each reads a service that tells tidecd of no
change) is asked again after its `requeueAfterSeconds`, Argo CD's defaults (30 min, 30 min, 3 min), and an
unchanged spec is not evaluated before then unless a webhook event forces it.

RollingSync (`step.rolling.progress`): every refresh then asks which generated apps sync now, from each one's
labels, state and recorded `applicationStatus`, starts those syncs (initiated by the ApplicationSet) and
records the statuses. Nothing waits: the step of a generated app hands over to the next apps as soon as its
operation ends or it turns Healthy (`step.rolling.after_step`), and each refresh asks again too.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from tidecd import source as git
from tidecd.base.constants import LABEL_SECRET_TYPE, SECRET_TYPE_CLUSTER
from tidecd.base.errors import TidecdError
from tidecd.clients.secrets import text_fields
from tidecd.config.appset import rolling
from tidecd.config.appset.discovery import Decisions, ScmRepo, ScmSpec
from tidecd.config.appset.expand import Expansion, apply_policy, expand
from tidecd.config.appset.generators import ClusterInfo, GeneratorError, PullRequest
from tidecd.config.appset.model import ApplicationSet
from tidecd.config.load import normalize_repo_url, redact_repo_url
from tidecd.generated import records as generated
from tidecd.usecases import appset_discovery as discovery

if TYPE_CHECKING:
    from tidecd.runtime import Runtime

log = structlog.get_logger("tidecd.config.appset")
LsRemote = Callable[[str, Any], dict[str, str]]
PR_REQUEUE_DEFAULT = 1800.0
# the generators asked again after their requeueAfterSeconds, with Argo CD's defaults for it
REQUEUE_DEFAULTS = {"pullRequest": PR_REQUEUE_DEFAULT, "scmProvider": 1800.0, "clusterDecisionResource": 180.0}


@dataclass
class RefreshSummary:
    evaluated: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # ApplicationSets whose generated apps changed
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)  # RollingSync: generated apps whose sync it started


class RuntimeSources:
    """`generators.Sources` from a Runtime: git snapshots through the object store, the config's cluster
    Secrets, GitHub through PyGithub, GitLab through python-gitlab. Checkouts live until `close()`."""

    def __init__(self, runtime: Runtime, ls_remote: LsRemote | None = None) -> None:
        self.runtime = runtime
        self.ls_remote: LsRemote = ls_remote or git.ls_remote
        self._tmp = tempfile.TemporaryDirectory(prefix="tidecd-appset-")
        self._checkouts: dict[tuple[str, str], tuple[str, Path]] = {}
        self.used_repos: set[str] = set()
        self.inputs: dict[str, str] = {}  # "repoURL#revision" → commit, of the evaluation running now
        self._scms: dict[ScmSpec, discovery.GitHubScm | discovery.GitLabScm] = {}

    def close(self) -> None:
        self._tmp.cleanup()

    def checkout(self, repo_url: str, revision: str) -> tuple[str, Path]:
        self.used_repos.add(normalize_repo_url(repo_url))
        try:
            sha = self.resolve(repo_url, revision)
            creds = self.runtime.repo_credentials(repo_url)
            key = (normalize_repo_url(repo_url), sha)
            if key not in self._checkouts:
                root = Path(self._tmp.name) / f"repo-{len(self._checkouts)}"
                root.mkdir()
                git.Snapshots(self.runtime.store).checkout(repo_url, sha, root, creds)
                self._checkouts[key] = (sha, root)
            return self._checkouts[key]
        except TidecdError as exc:
            raise GeneratorError(f"git: repository {redact_repo_url(repo_url)} at {revision}: {exc}") from None

    def resolve(self, repo_url: str, revision: str) -> str:
        """The commit `revision` names now (one ls-remote per repository per refresh); recorded as an input."""

        creds = self.runtime.repo_credentials(repo_url)
        sha = git.resolve_revision(self.ls_remote(repo_url, creds), revision, repo_url)
        self.inputs[f"{repo_url}#{revision}"] = sha
        return sha

    def clusters(self) -> list[ClusterInfo]:
        out = []
        try:
            secrets = self.runtime.secrets()
        except TidecdError as exc:
            raise GeneratorError(f"clusters: the cluster Secrets cannot be read: {exc}") from None
        for secret in secrets:
            meta = secret.get("metadata") or {}
            labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
            if labels.get(LABEL_SECRET_TYPE) != SECRET_TYPE_CLUSTER:
                continue
            fields = text_fields(secret, f"cluster secret {meta.get('name', '?')}")
            annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
            out.append(ClusterInfo(name=fields.get("name", "") or str(meta.get("name", "")),
                                   server=fields.get("server", ""), labels=labels, annotations=annotations,
                                   project=fields.get("project", "")))
        return out

    def pull_requests(self, owner: str, repo: str, api: str, token_ref: tuple[str, str] | None,
                      labels: Sequence[str]) -> list[PullRequest]:
        base, token = discovery.github_token(self.runtime, api, token_ref, "pullRequest")
        return list_pull_requests(base, owner, repo, token, labels)

    def _scm(self, spec: ScmSpec) -> discovery.GitHubScm | discovery.GitLabScm:
        if spec not in self._scms:
            self._scms[spec] = discovery.scm_provider(self.runtime, spec)
        return self._scms[spec]

    def scm_repositories(self, spec: ScmSpec) -> list[ScmRepo]:
        return self._scm(spec).repositories()

    def scm_branches(self, spec: ScmSpec, repo: ScmRepo) -> list[ScmRepo]:
        return self._scm(spec).branches(repo)

    def scm_has_path(self, spec: ScmSpec, repo: ScmRepo, path: str) -> bool:
        return self._scm(spec).has_path(repo, path)

    def cluster_decisions(self, config_map: str, name: str, label_selector: Mapping[str, Any]) -> Decisions:
        return discovery.cluster_decisions(self.runtime, config_map, name, label_selector)


def list_pull_requests(api_url: str, owner: str, repo: str, token: str, labels: Sequence[str]) -> list[PullRequest]:
    """Open pull requests of `owner/repo` through PyGithub, keeping those carrying every label in `labels`."""
    out = []
    with discovery.github_errors(f"pullRequest: GitHub {owner}/{repo}", api_url):
        for pull in discovery.client(api_url, token).get_repo(f"{owner}/{repo}").get_pulls(state="open"):
            names = tuple(label.name for label in pull.labels)
            if all(label in names for label in labels):
                out.append(PullRequest(number=int(pull.number), branch=str(pull.head.ref),
                                       target_branch=str(pull.base.ref), head_sha=str(pull.head.sha),
                                       labels=names, author=str(pull.user.login) if pull.user else "",
                                       title=str(pull.title or "")))
            if len(out) >= 1000:
                break
    return out


def _walk(gens: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    for gen in gens:
        yield gen
        for kind in ("matrix", "merge"):
            if isinstance(gen.get(kind), dict):
                yield from _walk(gen[kind].get("generators") or [])


def git_repos(appset: ApplicationSet) -> set[str]:
    """The repositories the git generators of `appset` read (normalized; templated URLs left out)."""
    return {normalize_repo_url(str(g["git"].get("repoURL", ""))) for g in _walk(appset.generators)
            if isinstance(g.get("git"), dict) and "{{" not in str(g["git"].get("repoURL", ""))}


def pull_request_repos(appset: ApplicationSet) -> set[str]:
    """`owner/repo` (lowercase) of every pull-request generator of `appset`."""
    out = set()
    for gen in _walk(appset.generators):
        github = (gen.get("pullRequest") or {}).get("github") if isinstance(gen.get("pullRequest"), dict) else None
        if isinstance(github, dict):
            out.add(f"{github.get('owner', '')}/{github.get('repo', '')}".lower())
    return out


def _requeue(gens: Iterable[dict[str, Any]]) -> float | None:
    """The shortest requeueAfterSeconds of the requeued generators (nested ones too), None without any."""
    found = [float((g[kind] or {}).get("requeueAfterSeconds") or default) for g in _walk(gens)
             for kind, default in REQUEUE_DEFAULTS.items() if isinstance(g.get(kind), dict)]
    return min(found) if found else None


def refresh(runtime: Runtime, *, only: set[str] | None = None, force_pull_requests: bool = False,
            ls_remote: LsRemote | None = None, now: Callable[[], float] = time.time) -> RefreshSummary:
    """Evaluate the ApplicationSets (all, or `only`) and record their apps; reloads the runtime's config
    when anything changed."""
    summary = RefreshSummary()
    config = runtime.config()
    try:
        records = generated.load_records(runtime.store)
    except TidecdError as exc:
        summary.errors.append(f"{generated.PREFIX}: {exc}")
        return summary
    sources = RuntimeSources(runtime, ls_remote)
    try:
        for name in sorted(config.appsets):
            if only is not None and name not in only:
                continue
            appset = config.appsets[name]
            record = records.get(appset.label) or {}
            requeue = _requeue(appset.generators)
            if (requeue is not None and not force_pull_requests and record.get("specHash") == appset.spec_hash()
                    and now() - float(record.get("evaluatedAt") or 0) < requeue):
                continue
            if _unchanged(appset, record, sources):
                continue
            summary.evaluated.append(name)
            sources.inputs = {}
            _one(runtime, appset, sources, now, summary)
    finally:
        sources.close()
    if only is None:  # ApplicationSets removed from the config: what they generated goes (finalizers decide)
        for owner in sorted(records):
            if generated.owner_kind(owner) == "ApplicationSet" and generated.owner_name(owner) not in config.appsets \
                    and generated.owner_name(owner) not in config.invalid_appsets:
                _gone(runtime, owner, summary)
    if summary.changed:
        runtime.forget_config()
    for name in sorted(config.appsets):
        if (only is None or name in only) and config.appsets[name].rolling_steps is not None:
            # lazy: step.rolling loads the step's operation model (only an ApplicationSet with RollingSync needs it)
            from tidecd.step import rolling as rolling_step

            started, errors = rolling_step.progress(runtime, config.appsets[name])
            summary.started.extend(started)
            summary.errors.extend(errors)
    log.info("appsets refreshed", evaluated=len(summary.evaluated), changed=summary.changed,
             created=summary.created, deleted=summary.deleted, started=summary.started, errors=len(summary.errors))
    return summary


def _unchanged(appset: ApplicationSet, record: dict[str, Any], sources: RuntimeSources) -> bool:
    """Nothing an evaluation reads has changed since the recorded one: same spec, every git revision it
    read still resolves to the same commit (one ls-remote per repository, shared with the poll), no
    failure recorded; cluster generators are always evaluated (they are cheap to ask), and the requeued ones
    (`REQUEUE_DEFAULTS`) whenever `refresh` lets them through (their requeue time passed)."""
    kinds = {k for g in _walk(appset.generators) for k in g}
    if record.get("specHash") != appset.spec_hash() or record.get("failed") or kinds & {"clusters", *REQUEUE_DEFAULTS}:
        return False
    inputs = record.get("inputs")
    if not isinstance(inputs, dict):
        return False
    try:
        return all(sources.resolve(*key.rsplit("#", 1)) == sha for key, sha in inputs.items())
    except TidecdError:
        return False


def _one(runtime: Runtime, appset: ApplicationSet, sources: RuntimeSources, now: Callable[[], float],
         summary: RefreshSummary) -> None:
    try:
        expansion = expand(appset, sources)
    except TidecdError as exc:
        expansion = Expansion(errors=[f"{appset.origin}: {appset.label}: {exc}"], failed=True)
    summary.errors.extend(expansion.errors)
    created: list[str] = []
    removed: list[str] = []

    def change(record: dict[str, Any]) -> dict[str, Any]:
        old = {n: e for n, e in (record.get("apps") or {}).items() if isinstance(e, dict)}
        live_old = {n: e for n, e in old.items() if not e.get("deleting")}
        new = {g.name: {"doc": g.doc, "generator": g.generator} for g in expansion.apps.values()}
        gone: set[str] = set()
        if expansion.failed:
            kept = dict(old)
        else:
            kept, gone = apply_policy(appset.applications_sync, new, live_old)
            for name, entry in old.items():  # still being deleted: keep until its objects are gone
                if entry.get("deleting") and name not in kept:
                    kept[name] = entry
        for name in sorted(gone):
            entry = old[name]
            if generated.cascades(entry["doc"]) and not appset.preserve_resources_on_deletion:
                kept[name] = {**entry, "deleting": True}
            removed.append(name)
        created.extend(sorted(n for n in kept if n not in live_old and not kept[n].get("deleting")))
        out = {**record, "apps": kept, "errors": list(expansion.errors), "specHash": appset.spec_hash(),
               "origin": appset.origin, "inputs": dict(sources.inputs), "failed": expansion.failed,
               "applicationsSync": appset.applications_sync, "orphaned": False}
        if _requeue(appset.generators) is not None:
            out["evaluatedAt"] = now()
        out.pop("deletionOrder", None)
        out.pop("deletionSteps", None)
        if appset.reverse_deletion:  # kept in the record: the ApplicationSet may be gone when it is needed
            out["deletionOrder"] = "Reverse"
            out["deletionSteps"] = _steps_of(appset, kept)
        return out

    try:
        if generated.update(runtime.store, appset.label, change):
            summary.changed.append(appset.name)
            summary.created.extend(created)
            summary.deleted.extend(removed)
    except TidecdError as exc:
        summary.errors.append(f"{appset.label}: recording its apps: {exc}")


def _steps_of(appset: ApplicationSet, apps: dict[str, Any]) -> dict[str, int]:
    """Each app's RollingSync step (0-based; -1 for none) from the labels its document gives it."""
    out = {}
    for name, entry in apps.items():
        labels = ((entry.get("doc") or {}).get("metadata") or {}).get("labels") or {}
        found = rolling.step_of({str(k): str(v) for k, v in labels.items()}, appset.rolling_steps or ())
        out[name] = -1 if found is None else found
    return out


def _reverse_step(record: dict[str, Any], summary: RefreshSummary) -> dict[str, Any]:
    """`deletionOrder: Reverse`: while an app of the step being removed is still deleting, nothing more; else
    the apps of the last step left are flagged deleting (those without the finalizer leave at once, and the
    next step follows in the same call). Apps of no step go last, as Argo CD leaves them to the garbage
    collector once its steps are done."""
    apps = {n: e for n, e in (record.get("apps") or {}).items() if isinstance(e, dict)}
    steps = record.get("deletionSteps") or {}
    while apps and not any(e.get("deleting") for e in apps.values()):
        last = max(int(steps.get(n, -1)) for n in apps)
        for name in sorted(n for n in apps if int(steps.get(n, -1)) == last):
            if generated.cascades(apps[name].get("doc") or {}):
                apps[name] = {**apps[name], "deleting": True}
            else:
                del apps[name]
            summary.deleted.append(name)
    return {**record, "apps": apps, "errors": []}


def _gone(runtime: Runtime, owner: str, summary: RefreshSummary) -> None:
    """An ApplicationSet removed from the config. Under `create-only` or `create-update` (its last recorded
    policy) its apps stay, unowned, as Argo CD's controller removes their owner references instead of
    deleting them; otherwise they go, and each one's finalizer decides whether its objects go too; with
    `deletionOrder: Reverse` one RollingSync step at a time, the last first (`_reverse_step`)."""
    def change(record: dict[str, Any]) -> dict[str, Any] | None:
        if record.get("applicationsSync") in ("create-only", "create-update"):
            return {**record, "orphaned": True, "errors": []}
        if record.get("deletionOrder") == "Reverse":
            out = _reverse_step(record, summary)
            return None if out == record else out
        apps = {}
        for name, entry in (record.get("apps") or {}).items():
            if isinstance(entry, dict) and generated.cascades(entry.get("doc") or {}):
                apps[name] = {**entry, "deleting": True}
            summary.deleted.append(name)
        return {**record, "apps": apps, "errors": []}

    try:
        if generated.update(runtime.store, owner, change):
            summary.changed.append(generated.owner_name(owner))
    except TidecdError as exc:
        summary.errors.append(f"{owner}: {exc}")
