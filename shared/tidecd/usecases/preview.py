"""Pull-request previews: what merging a PR would change in the cluster, as one upserted PR comment.

The webhook hands a `pull_request` event (opened, synchronize, reopened, closed) to `on_pull_request`:
1. The apps it can affect are those whose repoURL is the PR's base repository and whose targetRevision
   names the base branch, narrowed by `manifest-generate-paths` against the PR's changed files (from
   GitHub's "list pull request files"; without a github Secret, no narrowing).
2. It records the request (`previews/<owner>/<repo>/<number>/request.json`: head sha, apps) and fans out
   one job per app: a Pub/Sub message on the refresh topic (attribute `kind=preview`, run by the
   reconcile function) in the cloud, a background thread locally. The webhook answers at once.
3. Each job (`run_job`) renders the app at the PR head (fetched by sha from the base repository, where
   GitHub keeps every PR head under `refs/pull/N/head`) and compares it with the live cluster through the
   same server-side dry-run as a sync; nothing is written to the cluster. It stores its result, posts the
   commit status `tidecd/preview/<app>` on the head (failure on a render error or a project-rule
   violation), then rewrites the PR's one comment from every result of this head, under a short lease so
   two jobs never post stale text. The comment is found again by a hidden marker, so it is never
   duplicated, and it stays under GitHub's 65,536 characters (cut with a note). Secret values are masked
   (the diff's masking).
`closed` drops the stored results; the comment stays as it was.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from tidecd.base.errors import PermanentError, ProjectViolation, TidecdError
from tidecd.base.model import ResourceKey, SyncStatus
from tidecd.clients import github as gh
from tidecd.clients.pubsub import PUBLISH_TIMEOUT, Message, Publisher, PubSubPublisher
from tidecd.clients.store import PreconditionFailed, acquire_lease, read_json, release_lease, write_json
from tidecd.config.load import Application, normalize_repo_url
from tidecd.diff import ResourceDiff
from tidecd.runtime import Runtime
from tidecd.triggers.dispatch import topic_path

log = structlog.get_logger("tidecd.usecases.preview")

ACTIONS = ("opened", "synchronize", "reopened", "closed")
PREFIX = "previews/"
MAX_DIFF_CHARS = 12_000  # one object's diff in the comment
COMMENT_BUDGET = gh.COMMENT_LIMIT - 600  # room for the truncation note and the footer
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

    @property
    def folder(self) -> str:
        return f"{PREFIX}{self.repo.owner}/{self.repo.name}/{self.number}/"


class BadPullRequest(PermanentError):
    """A pull_request payload without the fields a preview needs (names the field)."""


def pull_request_of(doc: Mapping[str, Any], api_url: str = gh.DEFAULT_API_URL) -> PullRequest:
    def text(path: str) -> str:
        value: Any = doc
        for part in path.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if not isinstance(value, str) or not value:
            raise BadPullRequest(f"pull_request payload: field `{path}` is missing or not a string")
        return value

    number = doc.get("number")
    if not isinstance(number, int) or isinstance(number, bool) or number <= 0:
        raise BadPullRequest("pull_request payload: field `number` must be a positive integer")
    base = doc.get("repository") if isinstance(doc.get("repository"), Mapping) else {}
    urls = {normalize_repo_url(v) for k in ("clone_url", "html_url", "ssh_url", "git_url")
            if isinstance(v := (base or {}).get(k), str) and v}
    candidates = [(base or {}).get(k) for k in ("clone_url", "html_url")]
    repo = next((r for url in candidates if isinstance(url, str) and (r := gh.repo_of(url, api_url))), None)
    if repo is None:
        full = text("repository.full_name")
        owner, _, name = full.partition("/")
        repo = gh.Repo(owner, name)
    sha = text("pull_request.head.sha").lower()
    if len(sha) != 40 or any(c not in "0123456789abcdef" for c in sha):
        raise BadPullRequest("pull_request payload: field `pull_request.head.sha` is not a commit sha")
    return PullRequest(repo, frozenset(urls), number, text("action"), sha, text("pull_request.base.ref"),
                       str((base or {}).get("default_branch") or ""))


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
    except BadPullRequest as exc:
        return 400, {"error": str(exc)}
    if pr.action not in ACTIONS:
        return 200, {"ignored": f"pull_request action {pr.action!r} needs no preview"}
    if delivery and not _claim(runtime, delivery, pr):
        return 200, {"duplicate": True, "delivery": delivery}
    if pr.action == "closed":
        for key in runtime.store.list(pr.folder):
            runtime.store.delete(key)
        return 200, {"closed": f"{pr.repo.full_name}#{pr.number}: preview results dropped"}
    client = gh.client_for(runtime.secrets(), runtime.store, api_url)
    files = _changed_files(client, pr)
    apps = sorted(select(runtime.config().applications.values(), pr, files), key=lambda a: a.name)[:MAX_APPS]
    names = [a.name for a in apps]
    write_json(runtime.store, pr.folder + "request.json",
               {"head_sha": pr.head_sha, "apps": names, "number": pr.number, "repo": pr.repo.full_name,
                "base_ref": pr.base_ref, "at": time.time()})
    if not names:
        return 200, {"preview": [], "pull_request": pr.number}
    jobs = [{"kind": "preview", "app": n, "owner": pr.repo.owner, "repo": pr.repo.name, "number": pr.number,
             "head_sha": pr.head_sha} for n in names]
    failures = (runner or runner_for(runtime)).submit(runtime, jobs)
    log.info("preview requested", pull_request=f"{pr.repo.full_name}#{pr.number}", head=pr.head_sha[:12],
             apps=len(names), failed=sorted(failures))
    if failures:
        return 503, {"error": "some previews could not be started; redeliver to retry", "failed": failures}
    return 202, {"preview": names, "pull_request": pr.number, "head_sha": pr.head_sha}


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


@dataclass(frozen=True)
class AppPreview:
    app: str
    head_sha: str
    created: tuple[ResourceDiff, ...] = ()
    changed: tuple[ResourceDiff, ...] = ()
    deleted: tuple[ResourceDiff, ...] = ()
    errors: tuple[str, ...] = ()  # render errors, dry-run failures
    violations: tuple[str, ...] = ()  # project rules

    @property
    def failed(self) -> bool:
        return bool(self.errors or self.violations)

    def summary(self) -> str:
        if self.violations:
            return f"{len(self.violations)} project-rule violation(s)"
        if self.errors:
            return f"{len(self.errors)} error(s)"
        return f"{len(self.created)} to create, {len(self.changed)} to change, {len(self.deleted)} to delete"

    def to_json(self) -> dict[str, Any]:
        def diffs(items: tuple[ResourceDiff, ...]) -> list[dict[str, Any]]:
            return [{"key": d.key.to_dict(), "changed": list(d.changed_paths), "text": d.text, "error": d.error}
                    for d in items]

        return {"app": self.app, "head_sha": self.head_sha, "created": diffs(self.created),
                "changed": diffs(self.changed), "deleted": diffs(self.deleted), "errors": list(self.errors),
                "violations": list(self.violations)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AppPreview:
        def diffs(name: str) -> tuple[ResourceDiff, ...]:
            return tuple(ResourceDiff(ResourceKey.from_dict(d["key"]), SyncStatus.OUT_OF_SYNC,
                                      tuple(d.get("changed", ())), str(d.get("text", "")),
                                      name == "deleted", str(d.get("error", "")))
                         for d in data.get(name, []))

        return cls(str(data["app"]), str(data["head_sha"]), diffs("created"), diffs("changed"), diffs("deleted"),
                   tuple(data.get("errors", ())), tuple(data.get("violations", ())))


def preview_app(runtime: Runtime, app: Application, head_sha: str) -> AppPreview:
    """Render `app` at `head_sha` and compare with the live cluster (server-side dry-run); writes nothing."""
    # lazy: cold start (the rendering pipeline: a webhook's pull_request delivery only submits jobs)
    from tidecd.project import rules
    from tidecd.step.desired import desired_of
    from tidecd.step.observe import comparison_of

    project = runtime.config().projects.get(app.project)
    if project is None:
        return AppPreview(app.name, head_sha, errors=(f"project {app.project!r} is not defined",))
    scope = rules.check_source(project, app) + rules.check_destination(project, app.destination)
    if scope:
        return AppPreview(app.name, head_sha, violations=tuple(f"Application/{app.name}: {s}" for s in scope))
    try:
        cluster = runtime.cluster(app.destination)
        desired = desired_of(runtime, app, cluster, head_sha)
        manifests, namespaced = desired.manifests, desired.namespaced
    except TidecdError as exc:
        return AppPreview(app.name, head_sha, errors=(f"render: {exc}",))
    violations: tuple[str, ...] = ()
    try:
        rules.enforce(project, app, manifests, namespaced)
    except ProjectViolation as exc:
        violations = tuple(exc.violations)
    try:
        diffs = list(comparison_of(cluster, app, runtime.config(), manifests).resources)
    except TidecdError as exc:
        return AppPreview(app.name, head_sha, errors=(f"compare: {exc}",), violations=violations)
    created = tuple(d for d in diffs if d.changed_paths == (".",) and not d.requires_pruning and not d.error)
    deleted = tuple(d for d in diffs if d.requires_pruning)
    changed = tuple(d for d in diffs if d not in created and d not in deleted and not d.error
                    and d.status is not SyncStatus.SYNCED)
    errors = tuple(f"{d.key}: {d.error}" for d in diffs if d.error)
    return AppPreview(app.name, head_sha, created, changed, deleted, errors, violations)


def run_job(runtime: Runtime, job: Mapping[str, Any]) -> None:
    """One app's preview of one PR head: store it, post its status, update the PR comment. Never raises."""
    repo, number, sha, name = gh.Repo(str(job["owner"]), str(job["repo"])), int(job["number"]), \
        str(job["head_sha"]), str(job["app"])
    folder = f"{PREFIX}{repo.owner}/{repo.name}/{number}/"
    try:
        request = read_json(runtime.store, folder + "request.json")
        if request is None or request[0].get("head_sha") != sha:
            log.info("preview skipped: the PR moved on", app=name, head=sha[:12])
            return
        try:
            result = preview_app(runtime, runtime.app(name), sha)
        except TidecdError as exc:
            result = AppPreview(name, sha, errors=(str(exc),))
        write_json(runtime.store, f"{folder}apps/{name}.json", result.to_json())
        api_url = runtime.settings.github_api_url or gh.DEFAULT_API_URL
        client = gh.client_for(runtime.secrets(), runtime.store, api_url)
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


def comment_marker(repo: gh.Repo, number: int) -> str:
    return gh.marker("preview", f"{repo.full_name}#{number}")


def _comment_for(runtime: Runtime, repo: gh.Repo, number: int, folder: str) -> str | None:
    request = read_json(runtime.store, folder + "request.json")
    if request is None:
        return None
    sha, apps = str(request[0]["head_sha"]), [str(a) for a in request[0].get("apps", [])]
    results: dict[str, AppPreview | None] = {}
    for name in apps:
        found = read_json(runtime.store, f"{folder}apps/{name}.json")
        preview = AppPreview.from_json(found[0]) if found else None
        results[name] = preview if preview is not None and preview.head_sha == sha else None
    return render_comment(repo, number, sha, results)


# --- the comment (pure) ----------------------------------------------------------------------------------


@dataclass
class _Budget:
    left: int
    cut: int = 0
    parts: list[str] = field(default_factory=list)

    def add(self, text: str) -> bool:
        if len(text) > self.left:
            self.cut += 1
            return False
        self.parts.append(text)
        self.left -= len(text)
        return True


def render_comment(repo: gh.Repo, number: int, head_sha: str, results: Mapping[str, AppPreview | None],
                   limit: int = COMMENT_BUDGET) -> str:
    head = [comment_marker(repo, number), f"### tidecd preview of `{head_sha[:12]}`", "",
            "| App | Result | Create | Change | Delete |", "|---|---|---|---|---|"]
    for name, res in results.items():
        if res is None:
            head.append(f"| `{name}` | ⏳ pending | | | |")
        else:
            mark = "❌" if res.failed else "✅"
            head.append(f"| `{name}` | {mark} {res.summary()} | {len(res.created)} | {len(res.changed)} "
                        f"| {len(res.deleted)} |")
    budget = _Budget(limit)
    budget.add("\n".join(head) + "\n")
    for name, res in results.items():
        if res is None:
            continue
        lines = [f"\n#### `{name}`\n"]
        lines += [f"- ❌ project rule: {v}\n" for v in res.violations]
        lines += [f"- ❌ {e}\n" for e in res.errors]
        for verb, items in (("create", res.created), ("change", res.changed), ("delete", res.deleted)):
            if items:
                lines.append(f"- {verb}: " + ", ".join(f"`{d.key}`" for d in items) + "\n")
        if not budget.add("".join(lines)):
            continue
        for verb, items in (("created", res.created), ("changed", res.changed), ("deleted", res.deleted)):
            for d in items:
                text = gh.cut(d.text, MAX_DIFF_CHARS, "\n… (diff cut)\n")
                budget.add(f"<details><summary>{verb}: <code>{d.key}</code></summary>\n\n```diff\n"
                           f"{text.replace('```', '` ` `')}\n```\n</details>\n")
    if budget.cut:
        budget.parts.append(f"\n> ⚠️ {budget.cut} section(s) left out: the comment would exceed GitHub's "
                            f"{gh.COMMENT_LIMIT:,} characters. See the dashboard for every diff.\n")
    budget.parts.append("\n<sub>Rendered at the PR head and compared with the live cluster by server-side "
                        "dry-run; nothing was applied. Secret values are masked.</sub>\n")
    return "".join(budget.parts)


def job_of(cloud_event_data: Mapping[str, Any]) -> dict[str, Any] | None:
    """The preview job inside a Pub/Sub CloudEvent (attribute kind=preview), or None for a refresh."""
    message = cloud_event_data.get("message") if isinstance(cloud_event_data, Mapping) else None
    if not isinstance(message, Mapping) or (message.get("attributes") or {}).get("kind") != "preview":
        return None
    try:
        job = json.loads(base64.b64decode(str(message.get("data") or "")))
    except ValueError:
        return None
    keys = ("app", "owner", "repo", "number", "head_sha")
    return job if isinstance(job, dict) and all(k in job for k in keys) else None
