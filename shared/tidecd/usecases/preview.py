"""Pull-request previews: what merging a PR would change in the cluster, as one upserted PR comment.

The webhook hands a `pull_request` event (opened, synchronize, reopened, labeled, closed) to
`on_pull_request`, and an `issue_comment` event to `on_issue_comment`:
1. Trust first (`tidecd.usecases.forks`): a PR whose head branch is in the base repository gets the full
   preview. A PR from a fork is previewed only when a maintainer asks (the label `tidecd:preview`, or the
   comment `/tidecd preview` by an OWNER, MEMBER or COLLABORATOR); until then it gets one comment saying
   so, and no render and no commit status.
2. The apps it can affect are those whose repoURL is the PR's base repository and whose targetRevision
   names the base branch, narrowed by `manifest-generate-paths` against the PR's changed files (from
   GitHub's "list pull request files"; without a github Secret, no narrowing).
3. It records the request (`previews/<owner>/<repo>/<number>/request.json`: head sha, apps, mode) and fans
   out one job per app: a Pub/Sub message on the refresh topic (attribute `kind=preview`, run by the
   reconcile function) in the cloud, a background thread locally. The webhook answers at once.
4. Each job (`run_job`) renders the app at the PR head (fetched by sha from the base repository, where
   GitHub keeps every PR head under `refs/pull/N/head`):
   - full (`preview_app`): with the installation's credentials, compared with the live cluster through
     the same server-side dry-run as a sync; nothing is written to the cluster;
   - fork (`preview_fork`): with no credential at all (no repository or registry credential, no sealing
     key: SealedSecrets stay sealed), compared with the rendered manifests of the base's last rendered
     revision (the app's recorded revision); the cluster is never read.
   A live object no app owns is never shown (neither dry-run nor read into the comment): the full preview
   says a sync would take it over, and nothing more. The job stores its result, posts the commit status
   `tidecd/preview/<app>` on the head (failure on a render error or a project-rule violation), then
   rewrites the PR's one comment from every result of this head, under a short lease so two jobs never
   post stale text. The comment is found again by a hidden marker, so it is never duplicated, and it
   stays under GitHub's 65,536 characters (cut with a note). Secret values are masked (the diff's masking).
`closed` drops the stored results; the comment stays as it was.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

import structlog

from tidecd.base.errors import PermanentError, ProjectViolation, TidecdError
from tidecd.base.model import Manifest, ResourceKey, SyncStatus
from tidecd.clients import github as gh
from tidecd.clients.pubsub import PUBLISH_TIMEOUT, Message, Publisher, PubSubPublisher
from tidecd.clients.store import PreconditionFailed, acquire_lease, read_json, release_lease, write_json
from tidecd.config.load import Application, Destination, normalize_repo_url
from tidecd.diff import ResourceDiff, compare
from tidecd.runtime import Runtime
from tidecd.state.plans import AppPlan
from tidecd.triggers.dispatch import topic_path
from tidecd.usecases import forks
from tidecd.usecases import plan as planning
from tidecd.usecases.forks import Mode
from tidecd.usecases.preview_text import AppPreview, comment_marker, render_comment, render_waiting

log = structlog.get_logger("tidecd.usecases.preview")

ACTIONS = ("opened", "synchronize", "reopened", "labeled", "closed")
PREFIX = "previews/"
LEASE_TTL = 30.0
LEASE_TRIES = 20
MAX_APPS = 500


@dataclass(frozen=True)
class PullRequest:
    repo: gh.Repo  # the base repository on GitHub
    repo_urls: frozenset[str]  # the base repository's URLs, normalized
    number: int
    action: str
    head_sha: str
    base_ref: str
    default_branch: str
    head_repo: str = ""  # owner/name of the head repository; "" when the fork was deleted
    fork: bool = False  # the head repository is not the base repository (or is gone)
    labels: frozenset[str] = frozenset()
    open: bool = True

    @property
    def folder(self) -> str:
        return f"{PREFIX}{self.repo.owner}/{self.repo.name}/{self.number}/"

    @property
    def name(self) -> str:
        return f"{self.repo.full_name}#{self.number}"


class BadPullRequest(PermanentError):
    """A pull_request payload without the fields a preview needs (names the field)."""


def _text(doc: Mapping[str, Any], path: str, event: str = "pull_request") -> str:
    value: Any = doc
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if not isinstance(value, str) or not value:
        raise BadPullRequest(f"{event} payload: field `{path}` is missing or not a string")
    return value


def _number(value: Any, path: str, event: str = "pull_request") -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise BadPullRequest(f"{event} payload: field `{path}` must be a positive integer")
    return value


def _sha(value: str, path: str, event: str = "pull_request") -> str:
    sha = value.lower()
    if len(sha) != 40 or any(c not in "0123456789abcdef" for c in sha):
        raise BadPullRequest(f"{event} payload: field `{path}` is not a commit sha")
    return sha


def _login(user: Any) -> str:
    """A payload's `user.login`, "" when it is not there (or the payload has another shape)."""
    login = user.get("login") if isinstance(user, Mapping) else None
    return login if isinstance(login, str) else ""


def base_repo_of(doc: Mapping[str, Any], api_url: str, event: str = "pull_request"
                 ) -> tuple[gh.Repo, frozenset[str], str]:
    """The payload's `repository` (the base): its GitHub owner/name, its URLs normalized, its default branch."""
    base = doc.get("repository") if isinstance(doc.get("repository"), Mapping) else {}
    urls = {normalize_repo_url(v) for k in ("clone_url", "html_url", "ssh_url", "git_url")
            if isinstance(v := (base or {}).get(k), str) and v}
    candidates = [(base or {}).get(k) for k in ("clone_url", "html_url")]
    repo = next((r for url in candidates if isinstance(url, str) and (r := gh.repo_of(url, api_url))), None)
    if repo is None:
        owner, _, name = _text(doc, "repository.full_name", event).partition("/")
        repo = gh.Repo(owner, name)
    return repo, frozenset(urls), str((base or {}).get("default_branch") or "")


def pull_request_of(doc: Mapping[str, Any], api_url: str = gh.DEFAULT_API_URL) -> PullRequest:
    number = _number(doc.get("number"), "number")
    repo, urls, default_branch = base_repo_of(doc, api_url)
    pull = doc.get("pull_request") if isinstance(doc.get("pull_request"), Mapping) else {}
    head = (pull or {}).get("head")
    head_repo = head.get("repo") if isinstance(head, Mapping) else None
    head_name = head_repo.get("full_name") if isinstance(head_repo, Mapping) else None
    return PullRequest(repo, urls, number, _text(doc, "action"),
                       _sha(_text(doc, "pull_request.head.sha"), "pull_request.head.sha"),
                       _text(doc, "pull_request.base.ref"), default_branch,
                       head_name if isinstance(head_name, str) else "", forks.is_fork(pull or {}),
                       forks.labels_of(pull or {}), (pull or {}).get("state", "open") != "closed")


Select = Callable[[Iterable[Application], PullRequest, "tuple[str, ...] | None"], list[Application]]
"""Which apps a PR can affect: the webhook's own push matching (`webhook.pr_apps`), passed in."""


# --- the webhook side ------------------------------------------------------------------------------------


class Runner(Protocol):
    def submit(self, runtime: Runtime, jobs: Sequence[dict[str, Any]]) -> dict[str, str]:
        """Start every job; a short error per app that could not be started."""
        ...


class ThreadRunner:
    """Locally: the jobs run on a background pool of this process, after the webhook answered."""

    def __init__(self, workers: int = 4, runtime_factory: Callable[[Runtime], Runtime] | None = None) -> None:
        self.runtime_factory = runtime_factory  # default: a fresh Runtime per job (Runtimes are not shared)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tidecd-preview")
        self._pending: set[Any] = set()
        self._lock = threading.Lock()

    def submit(self, runtime: Runtime, jobs: Sequence[dict[str, Any]]) -> dict[str, str]:
        for job in jobs:
            fresh = (self.runtime_factory(runtime) if self.runtime_factory
                     else Runtime(runtime.settings, runtime.store))
            future = self._pool.submit(_run_fresh, fresh, job)
            with self._lock:
                self._pending.add(future)
            future.add_done_callback(self._done)
        return {}

    def _done(self, future: Any) -> None:
        with self._lock:
            self._pending.discard(future)

    def wait(self, timeout: float) -> bool:
        """True when every submitted job finished within `timeout` (tests, local tools)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._pending:
                    return True
            time.sleep(0.05)
        return False


def _run_fresh(runtime: Runtime, job: Mapping[str, Any]) -> None:
    run_job(runtime, job)


class PubSubRunner:
    """In the cloud: one message per job on the refresh topic; the reconcile function runs it."""

    def __init__(self, topic: str, publisher: Publisher | None = None) -> None:
        self.topic = topic_path(topic)
        self.publisher = publisher or PubSubPublisher()

    def submit(self, runtime: Runtime, jobs: Sequence[dict[str, Any]]) -> dict[str, str]:
        messages = [Message(json.dumps(job).encode(), {"app": job["app"], "kind": "preview"}) for job in jobs]
        results = self.publisher.publish(self.topic, messages, timeout=PUBLISH_TIMEOUT)
        return {str(job["app"]): f"publishing the preview failed: {failed.kind}"
                for job, failed in zip(jobs, results, strict=True) if failed is not None}


LOCAL = ThreadRunner()


def runner_for(runtime: Runtime) -> Runner:
    return PubSubRunner(runtime.settings.refresh_topic) if runtime.settings.refresh_topic else LOCAL


def on_pull_request(doc: Mapping[str, Any], runtime: Runtime, select: Select, delivery: str = "",
                    runner: Runner | None = None) -> tuple[int, dict[str, Any]]:
    """The webhook's answer to a `pull_request` event (signature already checked); `select` picks the apps
    the PR can affect (repo, base branch, manifest-generate-paths against the changed files)."""
    api_url = runtime.settings.github_api_url or gh.DEFAULT_API_URL
    try:
        pr = pull_request_of(doc, api_url)
        policy = forks.Policy.from_env()
    except (BadPullRequest, PermanentError) as exc:
        return 400 if isinstance(exc, BadPullRequest) else 500, {"error": str(exc)}
    if pr.action not in ACTIONS:
        return 200, {"ignored": f"pull_request action {pr.action!r} needs no preview"}
    decision = None
    if pr.action != "closed":
        label = doc.get("label") if isinstance(doc.get("label"), Mapping) else {}
        sender = doc.get("sender") if isinstance(doc.get("sender"), Mapping) else {}
        decision = forks.decide(forks.Ask("pull_request", pr.action, pr.fork, pr.labels,
                                          label=str((label or {}).get("name") or ""),
                                          who=str((sender or {}).get("login") or ""), open=pr.open), policy)
        if decision.mode is Mode.IGNORED:
            log.info("preview not requested", pull_request=pr.name, action=pr.action, reason=decision.reason)
            return 200, {"ignored": decision.reason, "pull_request": pr.number}
    if delivery and not _claim(runtime, delivery, pr):
        return 200, {"duplicate": True, "delivery": delivery}
    if decision is None:
        pull = doc.get("pull_request") if isinstance(doc.get("pull_request"), Mapping) else {}
        merged = (pull or {}).get("merged") is True
        approved = planning.approve_merged(runtime, pr.repo, pr.number, pr.head_sha,
                                       str((pull or {}).get("merge_commit_sha") or "")) if merged else []
        _drop(runtime, pr)
        return 200, {"closed": f"{pr.name}: preview results dropped", "approved": approved}
    client = gh.client_for(runtime.secrets(), runtime.store, api_url)
    return _start(runtime, client, pr, decision, policy, select, runner)


def on_issue_comment(doc: Mapping[str, Any], runtime: Runtime, select: Select, delivery: str = "",
                     runner: Runner | None = None) -> tuple[int, dict[str, Any]]:
    """The webhook's answer to an `issue_comment` event: the comment command `/tidecd preview` by a
    maintainer previews the pull request's head (a fork's without credentials). GitHub's payload does not
    carry the pull request's head, so it is read from GitHub (the one call made for a command)."""
    api_url = runtime.settings.github_api_url or gh.DEFAULT_API_URL
    event = "issue_comment"
    issue = doc.get("issue") if isinstance(doc.get("issue"), Mapping) else {}
    comment = doc.get("comment") if isinstance(doc.get("comment"), Mapping) else {}
    if not isinstance((issue or {}).get("pull_request"), Mapping):
        return 200, {"ignored": "the comment is on an issue, not a pull request"}
    try:
        policy = forks.Policy.from_env()
        number = _number((issue or {}).get("number"), "issue.number", event)
        repo, urls, default_branch = base_repo_of(doc, api_url, event)
        body = (comment or {}).get("body")
        ask = forks.Ask(event, _text(doc, "action", event), True, body=body if isinstance(body, str) else "",
                        association=str((comment or {}).get("author_association") or ""),
                        who=_login((comment or {}).get("user")),
                        open=(issue or {}).get("state", "open") != "closed")
    except (BadPullRequest, PermanentError) as exc:
        return 400 if isinstance(exc, BadPullRequest) else 500, {"error": str(exc)}
    where = f"{repo.full_name}#{number}"
    if ask.action == "created" and forks.command_in(ask.body, planning.APPLY_COMMAND)[0]:
        return planning.on_apply_command(runtime, repo, number, ask.association, ask.who)
    decision = forks.decide(ask, policy)  # as if from a fork: a refusal does not depend on the head
    if decision.mode is Mode.IGNORED:
        log.info("preview command not taken", pull_request=where, who=ask.who, association=ask.association,
                 reason=decision.reason)
        return 200, {"ignored": decision.reason, "pull_request": number}
    client = gh.client_for(runtime.secrets(), runtime.store, api_url)
    pull = client.pull(repo, number) if client is not None else None
    if pull is None:
        reason = ("no github Secret: the pull request's head cannot be read" if client is None
                  else "GitHub did not answer with the pull request; redeliver to retry")
        log.warning("preview command not taken", pull_request=where, reason=reason)
        return (200 if client is None else 503), {"error": reason, "pull_request": number}
    if pull.state != "open":
        return 200, {"ignored": f"{policy.command!r} on a closed pull request: nothing to preview"}
    if decision.sha and not pull.head_sha.startswith(decision.sha):
        reason = (f"{policy.command!r} names {decision.sha} but the head is now {pull.head_sha[:12]}: nothing "
                  "previewed (ask again for the new head)")
        log.info("preview command not taken", pull_request=where, who=ask.who, reason=reason)
        return 200, {"ignored": reason, "pull_request": number}
    decision = forks.decide(dataclasses.replace(ask, fork=pull.fork), policy)
    pr = PullRequest(repo, urls, number, "comment", _sha(pull.head_sha, "head.sha", "pull request"),
                     pull.base_ref, default_branch, pull.head_repo, pull.fork, frozenset(pull.labels))
    if delivery and not _claim(runtime, delivery, pr):
        return 200, {"duplicate": True, "delivery": delivery}
    return _start(runtime, client, pr, decision, policy, select, runner)


def _start(runtime: Runtime, client: gh.GitHub | None, pr: PullRequest, decision: forks.Decision,
           policy: forks.Policy, select: Select, runner: Runner | None) -> tuple[int, dict[str, Any]]:
    """Record the request and start its jobs: one per app for a preview, one that writes the note for a
    fork nobody approved yet (only when the note is not there already: a fork's pushes cost no write)."""
    files = _changed_files(client, pr)
    apps = sorted(select(runtime.config().applications.values(), pr, files), key=lambda a: a.name)[:MAX_APPS]
    names = [a.name for a in apps]
    config = planning.config_source_app(runtime)
    planned = config is not None and decision.mode is not Mode.WAITING and bool(select([config], pr, files))
    previous = read_json(runtime.store, pr.folder + "request.json")
    log.info("preview decision", pull_request=pr.name, head=pr.head_sha[:12], fork=pr.fork,
             head_repo=pr.head_repo or "(deleted)", mode=decision.mode.value, reason=decision.reason,
             apps=len(names))
    if decision.mode is not Mode.FULL:  # a fork's results are kept for the head they were made of only
        for key in runtime.store.list(pr.folder + "apps/"):
            runtime.store.delete(key)
    write_json(runtime.store, pr.folder + "request.json",
               {"head_sha": pr.head_sha, "apps": names, "number": pr.number, "repo": pr.repo.full_name,
                "base_ref": pr.base_ref, "mode": decision.mode.value, "reason": decision.reason,
                "head_repo": pr.head_repo, "label": policy.label, "command": policy.command, "at": time.time(),
                "repo_urls": sorted(pr.repo_urls), "config_source": planned})
    answer: dict[str, Any] = {"pull_request": pr.number, "head_sha": pr.head_sha, "mode": decision.mode.value,
                              "reason": decision.reason}
    jobs = [planning.config_job(pr.repo.owner, pr.repo.name, pr.number, pr.head_sha)] if planned else []
    if not names and not jobs:
        return 200, answer | {"preview": []}
    job = {"kind": "preview", "owner": pr.repo.owner, "repo": pr.repo.name, "number": pr.number,
           "head_sha": pr.head_sha}
    if decision.mode is Mode.WAITING:
        was = previous[0] if previous is not None else {}
        if was.get("mode") == Mode.WAITING.value and was.get("apps") == names:
            return 200, answer | {"waiting": names}
        failures = (runner or runner_for(runtime)).submit(runtime, [job | {"app": names[0]}])
        if failures:
            return 503, {"error": "the note could not be started; redeliver to retry", "failed": failures}
        return 200, answer | {"waiting": names}
    failures = (runner or runner_for(runtime)).submit(runtime, jobs + [job | {"app": n} for n in names])
    log.info("preview requested", pull_request=pr.name, head=pr.head_sha[:12], apps=len(names),
             config_source=planned, mode=decision.mode.value, failed=sorted(failures))
    if failures:
        return 503, {"error": "some previews could not be started; redeliver to retry", "failed": failures}
    return 202, answer | {"preview": names, "plan": planned}


def _drop(runtime: Runtime, pr: PullRequest) -> None:
    for key in runtime.store.list(pr.folder):
        runtime.store.delete(key)


def _claim(runtime: Runtime, delivery: str, pr: PullRequest) -> bool:
    try:
        write_json(runtime.store, f"deliveries/{delivery}", {"pull_request": pr.number, "head": pr.head_sha,
                                                            "received_at": time.time()}, if_generation_match=0)
    except PreconditionFailed:
        return False
    return True


def _changed_files(client: gh.GitHub | None, pr: PullRequest) -> tuple[str, ...] | None:
    """The PR's changed files from GitHub (at most 3000, GitHub's cap); None when unknown."""
    files = client.pull_files(pr.repo, pr.number) if client is not None else None
    if files is None:
        log.info("pull request files unknown: previewing every app of the branch", number=pr.number)
        return None
    return tuple(files) if len(files) < 3000 else None


# --- one app's preview (the job) -------------------------------------------------------------------------


def _scope_violations(runtime: Runtime, app: Application, head_sha: str, mode: Mode) -> AppPreview | None:
    """The app's own project rules (source and destination), before anything is rendered."""
    from tidecd.project import rules  # lazy: cold start (the rendering pipeline, in the job only)

    project = runtime.config().projects.get(app.project)
    if project is None:
        return AppPreview(app.name, head_sha, errors=(f"project {app.project!r} is not defined",), mode=mode.value)
    scope = rules.check_source(project, app) + rules.check_destination(project, app.destination)
    if scope:
        return AppPreview(app.name, head_sha, violations=tuple(f"Application/{app.name}: {s}" for s in scope),
                          mode=mode.value)
    return None


def _enforce(runtime: Runtime, app: Application, manifests: list[Manifest],
             namespaced: Callable[[str, str], bool]) -> tuple[str, ...]:
    from tidecd.project import rules  # lazy: cold start (as above)

    try:
        rules.enforce(runtime.config().projects[app.project], app, manifests, namespaced)
    except ProjectViolation as exc:
        return tuple(exc.violations)
    return ()


def preview_app(runtime: Runtime, app: Application, head_sha: str) -> AppPreview:
    """Render `app` at `head_sha` ("" follows its targets; a multi-source app's revisions joined:
    `planning.pr_revision`) and compare with the live cluster (server-side dry-run); writes nothing. A live
    object no app owns is not compared: it is named as one a sync would take over. The result carries the
    app's plan (`tidecd.state.plans`), the hooks a sync would run and the sync window that would hold it."""
    # lazy: cold start (the rendering pipeline: a webhook's pull_request delivery only submits jobs)
    from tidecd.step.desired import desired_of
    from tidecd.step.observe import comparison_of, read
    from tidecd.step.operation import sync_cluster, sync_window

    refused = _scope_violations(runtime, app, head_sha, Mode.FULL)
    if refused is not None:
        return refused
    try:  # its dry-runs act as the sync would (impersonation): a right the sync lacks shows here first
        config = runtime.config()
        cluster = sync_cluster(runtime, config.argo_settings, config.project_of(app), app)
    except TidecdError as exc:
        return AppPreview(app.name, head_sha, errors=(f"cluster: {exc}",))
    try:
        desired = desired_of(runtime, app, cluster, head_sha)
        manifests, namespaced = desired.manifests, desired.namespaced
    except TidecdError as exc:
        return AppPreview(app.name, head_sha, errors=(f"render: {exc}",))
    violations = _enforce(runtime, app, manifests, namespaced)
    try:
        comparison, free = comparison_of(cluster, app, runtime.config(), manifests)
    except TidecdError as exc:
        return AppPreview(app.name, head_sha, errors=(f"compare: {exc}",), violations=violations)
    created, changed, deleted, errors = _sorted(list(comparison.resources))
    touched = [d.key for d in (*created, *changed)] + sorted(free)
    live = dict(read(cluster, touched))  # the versions the plan is computed against (a created one: None)
    return AppPreview(app.name, head_sha, created, changed, deleted, errors, violations, tuple(sorted(free)),
                      hooks=planning.hooks_of(manifests), held=sync_window(runtime.config(), app, manual=False),
                      plan=AppPlan.of(app.name, manifests, touched, live, desired.revision))


def _sorted(diffs: list[ResourceDiff]) -> tuple[tuple[ResourceDiff, ...], tuple[ResourceDiff, ...],
                                                 tuple[ResourceDiff, ...], tuple[str, ...]]:
    """(created, changed, deleted, errors) of a comparison."""
    created = tuple(d for d in diffs if d.changed_paths == (".",) and not d.requires_pruning and not d.error)
    deleted = tuple(d for d in diffs if d.requires_pruning)
    changed = tuple(d for d in diffs if d not in created and d not in deleted and not d.error
                    and d.status is not SyncStatus.SYNCED)
    return created, changed, deleted, tuple(f"{d.key}: {d.error}" for d in diffs if d.error)


class Uncredentialed(Runtime):
    """The runtime a fork's preview renders with: the installation's config, store and renderer, and
    nothing that opens a door. No Secret (so no repository, registry or cluster credential), no sealing
    key, no cluster, and settings without the webhook secret, api tokens or kubeconfig."""

    @classmethod
    def of_runtime(cls, runtime: Runtime) -> Uncredentialed:
        settings = dataclasses.replace(runtime.settings, webhook_secret="", api_token="", api_readonly_token="",
                                       sealing_keys="", kubeconfig="")
        return cls(settings=settings, store=runtime.store, _config=runtime.config(), _secrets=[],
                   render=runtime.render)

    def secrets(self) -> list[dict[str, Any]]:
        return []

    def private_keys(self) -> list[bytes]:
        return []

    def repo_credentials(self, repo_url: str) -> None:
        return None

    def cluster(self, destination: Destination) -> NoReturn:
        raise PermanentError("a fork's preview reads no cluster")


def preview_fork(runtime: Runtime, app: Application, head_sha: str) -> AppPreview:
    """A fork's approved preview: `app` rendered at `head_sha` without any credential, compared with the
    rendered manifests of the base's last rendered revision (the app's recorded revision). The cluster is
    never asked (not even which kinds are namespaced: `forks.StaticScopes`); SealedSecrets stay sealed."""
    # lazy: cold start (the rendering pipeline, in the job only)
    from tidecd.state import app as app_state
    from tidecd.step.desired import place, runtime_render
    from tidecd.sync import plan

    def failed(error: str) -> AppPreview:
        return AppPreview(app.name, head_sha, errors=(error,), mode=Mode.FORK.value)

    refused = _scope_violations(runtime, app, head_sha, Mode.FORK)
    if refused is not None:
        return refused
    fetched = [s.repo_url for s in app.all_sources if not forks.credential_free_url(s.repo_url)]
    if fetched:
        return failed(f"a fork's preview fetches without credentials, over http(s) only: "
                      f"{len(fetched)} source(s) of the app are not (ssh, a local path, or a URL with a user)")
    sandbox = Uncredentialed.of_runtime(runtime)
    sealed = dataclasses.replace(app, annotations=(*app.annotations, ("tidecd.io/sealed-secrets", "passthrough")))
    try:
        state = app_state.load(runtime.store, app.name)[0]
    except TidecdError as exc:
        return failed(f"the app's record cannot be read: {exc}")
    base = state.revision if state.revision and not state.revision.startswith("deleting") else ""
    render = runtime_render(sandbox)
    try:
        head = render(sandbox, sealed, head_sha)[1]
    except TidecdError as exc:
        return failed(f"render at the head, without credentials (a fork's preview uses none: a private "
                      f"repository cannot be previewed from a fork): {exc}")
    try:
        before = render(sandbox, sealed, base)[1] if base else []
    except TidecdError as exc:
        return failed(f"render of the base revision {base[:12]}, without credentials: {exc}")
    scopes = forks.StaticScopes.of([(k.group, k.kind, k.namespace) for k in
                                    [r.key for r in state.resources] + [k for k, _ in state.inventory_keys()]])
    settings = runtime.config().argo_settings
    placed = place(scopes, settings, sealed, head_sha, head)
    was = {ResourceKey.of(m): m for m in plan.resources(place(scopes, settings, sealed, base, before).manifests)}
    now = {ResourceKey.of(m): m for m in plan.resources(placed.manifests)}
    diffs = [compare(key, was.get(key), now.get(key), sides=("base", "head")) for key in sorted({*was, *now})]
    created, changed, deleted, _ = _sorted(diffs)
    return AppPreview(app.name, head_sha, created, changed, deleted, (),
                      _enforce(runtime, app, placed.manifests, placed.namespaced), mode=Mode.FORK.value, base=base)


def run_job(runtime: Runtime, job: Mapping[str, Any]) -> None:
    """One app's preview of one PR head: store it, post its status, update the PR comment; or, for a fork
    nobody approved, the note alone. The mode is the stored request's (the webhook's decision), never the
    message's. Never raises."""
    if job.get("kind") == "plan":
        planning.run_config_job(runtime, job, preview_app)
        return
    repo, number, sha, name = gh.Repo(str(job["owner"]), str(job["repo"])), int(job["number"]), \
        str(job["head_sha"]), str(job["app"])
    folder = f"{PREFIX}{repo.owner}/{repo.name}/{number}/"
    try:
        request = read_json(runtime.store, folder + "request.json")
        if request is None or request[0].get("head_sha") != sha:
            log.info("preview skipped: the PR moved on", app=name, head=sha[:12])
            return
        mode = str(request[0].get("mode") or "")
        api_url = runtime.settings.github_api_url or gh.DEFAULT_API_URL
        if mode == Mode.WAITING.value:
            client = gh.client_for(runtime.secrets(), runtime.store, api_url)
            if client is not None:
                update_comment(runtime, client, repo, number, folder)
            return
        if mode not in (Mode.FULL.value, Mode.FORK.value):
            log.warning("preview skipped: the request names no mode", app=name, head=sha[:12])
            return
        try:
            app = runtime.app(name)
            revision = planning.pr_revision(app, sha, request[0].get("repo_urls") or ())
            result = preview_fork(runtime, app, revision) if mode == Mode.FORK.value else \
                preview_app(runtime, app, revision)
            result = dataclasses.replace(result, head_sha=sha)
        except TidecdError as exc:
            result = AppPreview(name, sha, errors=(str(exc),), mode=mode)
        write_json(runtime.store, f"{folder}apps/{name}.json", result.to_json())
        log.info("preview done", app=name, head=sha[:12], mode=mode, summary=result.summary())
        client = gh.client_for(runtime.secrets(), runtime.store, api_url)  # after the render: a fork's never sees it
        if client is None:
            log.info("preview ready (no github Secret: nothing posted)", app=name, summary=result.summary())
            return
        client.status(repo, sha, "failure" if result.failed else "success", f"tidecd/preview/{name}",
                      result.summary(), _app_url(runtime, name))
        update_comment(runtime, client, repo, number, folder)
    except Exception as exc:  # noqa: BLE001 - a preview never breaks anything else
        log.warning("preview failed", app=name, error=type(exc).__name__, detail=str(exc)[:300])


def _app_url(runtime: Runtime, app: str) -> str:
    base = runtime.settings.public_url
    return f"{base.rstrip('/')}/ui/apps/{app}" if base else ""


def update_comment(runtime: Runtime, client: gh.GitHub, repo: gh.Repo, number: int, folder: str,
                   sleep: Callable[[float], None] = time.sleep) -> None:
    """Rewrite the PR comment from every stored result of the current head, under the PR's lease; the
    holder re-reads after posting, so a result stored meanwhile is never left out."""
    holder, lease = uuid.uuid4().hex, f"preview-{repo.owner}-{repo.name}-{number}".replace("/", "-")
    for _ in range(LEASE_TRIES):
        if acquire_lease(runtime.store, lease, holder, LEASE_TTL):
            break
        sleep(0.25)
    else:
        log.warning("preview comment not updated: its lease stayed held", pull_request=f"{repo.full_name}#{number}")
        return
    try:
        posted = ""
        for _ in range(5):
            body = _comment_for(runtime, repo, number, folder)
            if body is None or body == posted:
                return
            client.comment(repo, number, comment_marker(repo, number), body)
            posted = body
    finally:
        release_lease(runtime.store, lease, holder)


def _comment_for(runtime: Runtime, repo: gh.Repo, number: int, folder: str) -> str | None:
    request = read_json(runtime.store, folder + "request.json")
    if request is None:
        return None
    doc = request[0]
    sha, apps = str(doc["head_sha"]), [str(a) for a in doc.get("apps", [])]
    mode = str(doc.get("mode") or Mode.FULL.value)
    if mode == Mode.WAITING.value:
        policy = forks.Policy(str(doc.get("label") or forks.DEFAULT_LABEL),
                              str(doc.get("command") or forks.DEFAULT_COMMAND))
        return render_waiting(repo, number, str(doc.get("head_repo") or ""), policy, apps)
    results: dict[str, AppPreview | None] = {}
    for name in apps:
        found = read_json(runtime.store, f"{folder}apps/{name}.json")
        preview = AppPreview.from_json(found[0]) if found else None
        results[name] = preview if preview is not None and preview.head_sha == sha and preview.mode == mode else None
    return render_comment(repo, number, sha, results, mode=mode)

