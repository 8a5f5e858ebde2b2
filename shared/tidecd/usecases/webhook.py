"""The webhook use case: a GitHub or GitLab push refreshes exactly the apps it can affect.

Pure HTTP-shaped logic (headers and raw body in, status and JSON body out); the function entry point
adapts its framework's request. The order matters: size, then the signature over the raw body (nothing
of an unauthenticated body is parsed), then the event. A push refreshes the apps whose repoURL is the
pushed repository and whose targetRevision names the pushed ref, narrowed by Argo CD's
`manifest-generate-paths` annotation. A redelivery (same delivery id) is recognised by a
`deliveries/<id>` object written "only if absent" before anything is dispatched, so of any number of
concurrent deliveries of one id exactly one dispatches. The record says "claimed" until the refreshes are
handed over, then "done": only a done record makes a redelivery a duplicate; a claim whose delivery failed
(the store went away before it could be given back) is taken over after `CLAIM_TTL`. The secret and the
signature are never logged or echoed.

Outages: the store calls of one delivery share a budget (`TIDECD_WEBHOOK_STORE_BUDGET`, 0.6 s), so a store
that answers 503, resets or hangs turns into a quick 503 with `retry_after` (the function sends it as
`Retry-After`), and the forge redelivers; nothing is recorded as done that was not dispatched.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import posixpath
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs

import structlog

from tidecd.base import limits
from tidecd.base.constants import ANNOTATION_MANIFEST_GENERATE_PATHS
from tidecd.base.errors import PermanentError, TemporaryError, TidecdError
from tidecd.base.globs import compile_glob
from tidecd.base.model import Response, SyncStatus
from tidecd.clients.deadlines import budget, env_seconds
from tidecd.clients.store import PreconditionFailed, read_json, write_json
from tidecd.config.load import Application, Config, ConfigSourceRef, normalize_repo_url, parse_config_source
from tidecd.triggers.dispatch import Dispatcher, Refresh
from tidecd.usecases import registry_events

if TYPE_CHECKING:
    from tidecd.runtime import Runtime
    from tidecd.usecases.preview import PullRequest

_T = TypeVar("_T")

log = structlog.get_logger("tidecd.usecases.webhook")

DELIVERIES = "deliveries/"
STORE_BUDGET = 0.6  # seconds the store calls of one delivery may take together (TIDECD_WEBHOOK_STORE_BUDGET)
CLEANUP_BUDGET = 0.2  # seconds more, to give a claim back or mark it done (so an exhausted budget cannot
                      # leave a claim behind when the store answers again)
CLAIM_TTL = 30.0  # a delivery still "claimed" this long after it was claimed failed: a redelivery takes over
CLAIM_WAIT = 0.2  # a concurrent delivery of the same id waits this long for the claim to turn "done"
RETRY_AFTER = 30  # seconds, the Retry-After of a 503 caused by the store
GITHUB_MAX_COMMITS = 2048  # GitHub lists at most this many commits; beyond, the file list is incomplete
_ZERO_SHA = "0" * 40
_HEX = re.compile(r"[0-9a-f]+")
_DELIVERY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_KINDS: dict[type, str] = {str: "a string", dict: "an object", list: "a list"}
_PUSH_EVENTS = {"github": ("push",), "gitlab": ("Push Hook", "Tag Push Hook")}


@dataclass(frozen=True)
class Push:
    """What a push event says, whichever forge sent it."""

    repo_urls: frozenset[str]  # normalized (config.normalize_repo_url)
    ref: str  # refs/heads/<branch> or refs/tags/<tag>
    after: str
    default_branch: str
    deleted: bool
    changed_files: tuple[str, ...] | None  # None: the payload does not list every changed file

    def describe(self) -> str:
        repo = min(self.repo_urls) if self.repo_urls else "?"
        return f"push to {repo} {self.ref} ({self.after[:12]})"


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def handle(headers: Mapping[str, str], body: bytes, runtime: Runtime, dispatcher: Dispatcher,
           path: str = "/") -> Response:
    """Answer one webhook delivery; see the module docstring for the order of checks. `path` (with its
    query) routes registry notifications (`/registry/...`, `tidecd.usecases.registry_events`)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    try:
        with budget(env_seconds("TIDECD_WEBHOOK_STORE_BUDGET", STORE_BUDGET), "the webhook's store budget "
                    "(TIDECD_WEBHOOK_STORE_BUDGET)"):
            return _handle(lowered, body, runtime, dispatcher, path)
    except _Refused as refused:
        log.info("webhook refused", status=refused.status, reason=refused.message)
        answer: dict[str, Any] = {"error": refused.message}
        if refused.status == 503:
            answer["retry_after"] = RETRY_AFTER
        return Response(refused.status, answer)
    except TemporaryError as exc:  # the store (or another backend) is away: the forge redelivers
        log.warning("webhook unavailable", error=f"{type(exc).__name__}: {exc}"[:300])
        return Response(503, {"error": f"temporarily unavailable, redeliver later: {exc}",
                              "retry_after": RETRY_AFTER})


def _handle(headers: dict[str, str], body: bytes, runtime: Runtime, dispatcher: Dispatcher,
            path: str = "/") -> Response:
    _check_size(headers, body)
    if registry_events.is_route(path):  # Docker Hub, Quay, Harbor, Artifact Registry: their own proofs
        return registry_events.handle(path, headers, body, runtime, dispatcher)
    provider, event = _provider(headers)
    verify(provider, headers, body, runtime.settings.webhook_secret)
    if provider == "github" and event == "ping":
        return Response(200, {"msg": "pong"})
    if provider == "github" and event in registry_events.GITHUB_EVENTS:  # a container pushed to GHCR
        return registry_events.on_github(event, _payload(headers, body), runtime, dispatcher)
    if provider == "github" and event == "pull_request":  # previews (tidecd.usecases.preview), PR generators
        # lazy: cold start (only a pull_request delivery loads the preview and rollback pipelines)
        from tidecd.usecases import preview, revert

        payload = _payload(headers, body)
        generated_apps = _pull_request_generators(payload, runtime, dispatcher)
        status, previewed = preview.on_pull_request(payload, runtime, pr_apps, _delivery_id(provider, headers))
        if generated_apps:
            previewed = {**previewed, "applicationsets": generated_apps}
        if settled := revert.on_pull_request(payload, runtime, dispatcher):  # a rollback's revert closed
            previewed = {**previewed, "reverts": settled}
        return Response(status, previewed)
    if provider == "github" and event == "issue_comment":  # `/tidecd preview` by a maintainer (forks' PRs)
        from tidecd.usecases import preview  # lazy: cold start (as above)

        status, previewed = preview.on_issue_comment(_payload(headers, body), runtime, pr_apps,
                                                     _delivery_id(provider, headers))
        return Response(status, previewed)
    if event not in _PUSH_EVENTS[provider]:
        return Response(200, {"ignored": f"{provider} event {event!r} is not a push"})
    payload = _payload(headers, body)
    push = github_push(payload) if provider == "github" else gitlab_push(payload)
    delivery = _delivery_id(provider, headers)
    answer: dict[str, Any] = {"refreshed": [], "delivery": delivery}
    if push.deleted:
        return Response(200, answer | {"note": f"{push.ref} was deleted: nothing to refresh"})
    config = _config(runtime)
    created = _pushed_appsets(config, push, runtime, answer)
    if created is not None:
        config = _config(runtime)
    apps = matching_apps(config.applications.values(), push)
    apps += [config.applications[n] for n in created or () if n in config.applications and
             config.applications[n] not in apps]
    answer |= config_report(config)
    if config_source_matches(runtime.settings.config, push):
        answer["config_source"] = "changed: the next call loads the new configuration"
        removed = _removed(runtime)  # an Application removed by this push is deleted at once, as its finalizer says
        if removed:
            config = _config(runtime)
            apps += [config.applications[n] for n in removed if n in config.applications]
            answer["deleting"] = removed
    apps += team_source_apps(config, push, apps, answer)
    claim = _claim(runtime, delivery, provider, push) if delivery else None
    if claim is not None and claim.duplicate:
        return Response(200, {"duplicate": True, "delivery": delivery})
    try:
        response = _refresh(runtime, dispatcher, apps, push, answer)
    except BaseException:
        if claim is not None:
            _release(runtime, claim)  # so the forge's redelivery is not taken as a duplicate
        raise
    if claim is not None:
        if response.status == 503:
            _release(runtime, claim)
        else:
            _done(runtime, claim)
    return response


def _refresh(runtime: Runtime, dispatcher: Dispatcher, apps: list[Application], push: Push,
             answer: dict[str, Any]) -> Response:
    """Hand the refreshes of the apps not already at the pushed commit over; 503 when some could not be."""
    current = sorted(app.name for app in apps if _already_at(runtime, app, push.after))
    names = sorted(app.name for app in apps if app.name not in current)
    if current:
        answer["current"] = current  # reconciled at this very commit already: nothing new to find
    log.info("webhook push", push=push.describe(), delivery=answer["delivery"], refreshed=names, current=current)
    if not names:
        return Response(200, answer)
    failures = dispatcher.dispatch([Refresh(n, f"webhook: {push.describe()}", push.after) for n in names])
    if failures:
        return Response(503, {"error": "some refreshes could not be dispatched; redeliver to retry",
                              "failed": dict(sorted(failures.items())), "delivery": answer["delivery"],
                              "retry_after": RETRY_AFTER})
    return Response(202, answer | {"refreshed": names})


# --- authentication --------------------------------------------------------------------------------------


def _check_size(headers: Mapping[str, str], body: bytes) -> None:
    limit = limits.current().webhook_bytes
    declared = headers.get("content-length", "").strip()
    if declared and not declared.isdigit():
        raise _Refused(400, "Content-Length header is not a number")
    if (declared and int(declared) > limit) or len(body) > limit:
        raise _Refused(413, f"body larger than {limit:,} bytes (TIDECD_MAX_WEBHOOK_BYTES)")


def _provider(headers: Mapping[str, str]) -> tuple[str, str]:
    if "x-github-event" in headers:
        return "github", headers["x-github-event"].strip()
    if "x-gitlab-event" in headers:
        return "gitlab", headers["x-gitlab-event"].strip()
    raise _Refused(400, "not a GitHub or GitLab webhook: no X-GitHub-Event or X-Gitlab-Event header")


def verify(provider: str, headers: Mapping[str, str], body: bytes, secret: str) -> None:
    """GitHub: HMAC-SHA256 of the raw body; GitLab: the shared token. Both compared in constant time."""
    if not secret:
        raise _Refused(401, "the webhook secret is not configured (TIDECD_WEBHOOK_SECRET): "
                            "every delivery is refused")
    if provider == "github":
        given = headers.get("x-hub-signature-256", "")
        if not given:
            raise _Refused(401, "missing X-Hub-Signature-256 header (set a secret on the GitHub webhook)")
        expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected.encode(), given.strip().encode()):
            raise _Refused(401, "X-Hub-Signature-256 does not match the body and the configured secret")
    else:
        token = headers.get("x-gitlab-token", "")
        if not token:
            raise _Refused(401, "missing X-Gitlab-Token header (set a secret token on the GitLab webhook)")
        if not hmac.compare_digest(secret.encode(), token.encode()):
            raise _Refused(401, "X-Gitlab-Token does not match the configured secret")


def _delivery_id(provider: str, headers: Mapping[str, str]) -> str:
    name = "X-GitHub-Delivery" if provider == "github" else "X-Gitlab-Event-UUID"
    value = headers.get(name.lower(), "").strip()
    if value and not _DELIVERY_ID.fullmatch(value):
        raise _Refused(400, f"{name} header is not a valid delivery id (letters, digits, '.', '_', '-')")
    return value


# --- payloads --------------------------------------------------------------------------------------------


def _payload(headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
    """The JSON object; GitHub's form encoding (`payload=<json>`) is accepted too."""
    text: str | bytes = body
    if headers.get("content-type", "").split(";")[0].strip() == "application/x-www-form-urlencoded":
        form = parse_qs(body.decode("utf-8", "replace"))
        if "payload" not in form:
            raise _Refused(400, "form-encoded body has no `payload` field")
        text = form["payload"][0]
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise _Refused(400, f"body is not valid JSON: {getattr(exc, 'msg', type(exc).__name__)}") from None
    if not isinstance(doc, dict):
        raise _Refused(400, "body is not a JSON object")
    return doc


def _field(doc: Mapping[str, Any], path: str, kind: type[_T], *, required: bool = True) -> _T:
    """`doc[a][b]` for path `a.b`, type-checked; a missing or mistyped field is a 400 naming it."""
    value: Any = doc
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None and not required:
        return kind()
    if not isinstance(value, kind):
        what = "is missing" if value is None else f"must be {_KINDS[kind]}"
        raise _Refused(400, f"push payload: field `{path}` {what}")
    return value


def _urls(doc: Mapping[str, Any], section: str, keys: Iterable[str]) -> set[str]:
    block = doc.get(section)
    if not isinstance(block, Mapping):
        return set()
    return {normalize_repo_url(v) for k in keys if isinstance(v := block.get(k), str) and v.strip()}


def _changed_files(commits: list[Any], complete: bool) -> tuple[str, ...] | None:
    """Every file the commits touch, or None when some commit lists none (or the list is cut short)."""
    if not commits or not complete:
        return None
    files: list[str] = []
    for commit in commits:
        lists = [commit.get(key) for key in ("added", "modified", "removed")] if isinstance(commit, Mapping) else []
        touched = [f for listed in lists if isinstance(listed, list) for f in listed if isinstance(f, str)]
        if not touched:
            return None
        files.extend(touched)
    return tuple(dict.fromkeys(files))


def github_push(doc: Mapping[str, Any]) -> Push:
    ref, after = _field(doc, "ref", str), _field(doc, "after", str).lower()
    repo = _field(doc, "repository", dict)
    urls = _urls(doc, "repository", ("clone_url", "html_url", "ssh_url", "git_url", "url"))
    if not urls:
        raise _Refused(400, "push payload: `repository` has none of clone_url, html_url, ssh_url, git_url, url")
    commits = _field(doc, "commits", list, required=False)
    complete = not doc.get("forced") and len(commits) < GITHUB_MAX_COMMITS
    branch = repo.get("default_branch") or repo.get("master_branch") or ""
    return Push(repo_urls=frozenset(urls), ref=ref, after=after, default_branch=str(branch),
                deleted=bool(doc.get("deleted")) or after == _ZERO_SHA,
                changed_files=_changed_files(commits, complete))


def gitlab_push(doc: Mapping[str, Any]) -> Push:
    ref, after = _field(doc, "ref", str), _field(doc, "after", str).lower()
    _field(doc, "project", dict)
    urls = _urls(doc, "project", ("git_http_url", "git_ssh_url", "web_url", "http_url", "ssh_url"))
    urls |= _urls(doc, "repository", ("git_http_url", "git_ssh_url", "homepage", "url"))
    if not urls:
        raise _Refused(400, "push payload: `project` has none of git_http_url, git_ssh_url, web_url")
    commits = _field(doc, "commits", list, required=False)
    total = doc.get("total_commits_count")
    complete = not isinstance(total, int) or total <= len(commits)  # GitLab lists at most 20 commits
    return Push(repo_urls=frozenset(urls), ref=ref, after=after,
                default_branch=str(_field(doc, "project.default_branch", str, required=False)),
                deleted=after == _ZERO_SHA, changed_files=_changed_files(commits, complete))


# --- which apps a push affects ---------------------------------------------------------------------------


def matching_apps(apps: Iterable[Application], push: Push) -> list[Application]:
    return [app for app in apps
            if any(normalize_repo_url(source.repo_url) in push.repo_urls
                   and revision_matches(source.target_revision, push) for source in app.all_sources)
            and (len(app.all_sources) > 1 or files_match(refresh_paths(app), push.changed_files))]


def pr_apps(apps: Iterable[Application], pr: PullRequest, files: tuple[str, ...] | None) -> list[Application]:
    """The apps a pull request can affect: matched like a push of its head to its base branch."""
    return matching_apps(apps, Push(repo_urls=pr.repo_urls, ref=f"refs/heads/{pr.base_ref}", after=pr.head_sha,
                                    default_branch=pr.default_branch, deleted=False, changed_files=files))


def revision_matches(target_revision: str, push: Push) -> bool:
    """Does `target_revision` name the pushed ref? HEAD is the default branch; a sha only the new commit."""
    target = target_revision.strip() or "HEAD"
    if target == "HEAD":
        return bool(push.default_branch) and push.ref == f"refs/heads/{push.default_branch}"
    if target == push.ref:
        return True
    for kind in ("heads", "tags"):
        prefix = f"refs/{kind}/"
        if push.ref.startswith(prefix) and target in (push.ref[len(prefix):], f"{kind}/{push.ref[len(prefix):]}"):
            return True
    lowered = target.lower()
    return 7 <= len(lowered) <= 40 and bool(_HEX.fullmatch(lowered)) and push.after.startswith(lowered)


def refresh_paths(app: Application) -> list[str] | None:
    """The annotation's paths relative to the repository root (`.` = spec.source.path); None: no narrowing."""
    value = app.annotation(ANNOTATION_MANIFEST_GENERATE_PATHS)
    items = [item.strip() for item in value.split(";") if item.strip()]
    if not items:
        return None
    return [_from_root(item, app.source.path or ".") for item in items]


def _from_root(item: str, app_path: str) -> str:
    """`/x` is from the repository root, anything else from the app's path; normalized (`.` = root)."""
    if item.startswith("/"):
        return posixpath.normpath(item.lstrip("/") or ".")
    return posixpath.normpath(posixpath.join(app_path, item))


def files_match(paths: list[str] | None, files: tuple[str, ...] | None) -> bool:
    """Argo CD's rule: a changed file equal to, under, or matching (glob) one of the paths."""
    if paths is None or files is None:
        return True
    for file in files:
        parts = posixpath.normpath(file.lstrip("/")).split("/")
        candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]  # the file and its folders
        for path in paths:
            if path == "." or _glob_match(path, candidates):
                return True
    return False


def _glob_match(pattern: str, candidates: list[str]) -> bool:
    """`pattern` as a glob over the file and its folders: `*` and `?` within one segment, `**/` any
    number of folders, none included (`tidecd.base.globs`); no valid glob (an unclosed `{`) is a plain path."""
    try:
        regex = compile_glob(pattern, separator="/", globstar=True)
    except ValueError:
        return pattern in candidates
    return any(regex.fullmatch(c) for c in candidates)


def _removed(runtime: Runtime) -> list[str]:
    """The written apps this push removed from the config source, now deleting (`usecases.deletion`)."""
    from tidecd.usecases import deletion  # lazy: cold start (only a push to the config source)

    errors: list[str] = []
    removed = deletion.track(runtime, errors)
    if errors:
        log.warning("removed apps not checked; the poll checks again", errors=errors)
    return removed


def config_source_matches(spec: str, push: Push) -> bool:
    """Is this a push to the config source's repo, ref and path (TIDECD_CONFIG as REPO#REF:PATH)?"""
    try:
        source = parse_config_source(spec)
    except PermanentError:
        return False
    return (isinstance(source, ConfigSourceRef)
            and normalize_repo_url(source.repo_url) in push.repo_urls
            and revision_matches(source.ref, push)
            and files_match([source.path], push.changed_files))


def team_source_apps(config: Config, push: Push, already: list[Application],
                     answer: dict[str, Any]) -> list[Application]:
    """The apps of each team config source this push changed (`tidecd.config.teams`): refreshed so that
    they read their new definitions, as apps whose own repository was pushed are."""
    found: list[Application] = []
    for team in config.team_sources:
        if config_source_matches(team.spec, push):
            answer.setdefault("team_sources", []).append(team.name)
            found += [app for name, app in sorted(config.applications.items())
                      if config.teams.get(name) == team.name and app not in already and app not in found]
    return found


# --- store and config ------------------------------------------------------------------------------------


def _pushed_appsets(config: Config, push: Push, runtime: Runtime, answer: dict[str, Any]) -> list[str] | None:
    """ApplicationSets whose git generators read the pushed repository are evaluated now; the apps they
    created and those whose RollingSync step started a sync, to be stepped (None when no ApplicationSet
    reads it)."""
    if not config.appsets:
        return None
    from tidecd.usecases import appsets  # lazy: cold start (GitHub and ApplicationSets only when one is read)

    names = {n for n, s in config.appsets.items() if appsets.git_repos(s) & push.repo_urls}
    if not names:
        return None
    summary = appsets.refresh(runtime, only=names)
    answer["applicationsets"] = {"evaluated": summary.evaluated, "changed": summary.changed,
                                 "created": summary.created, "deleted": summary.deleted}
    if summary.errors:
        answer["applicationsets"]["errors"] = summary.errors
    return [*summary.created, *(n for n in summary.started if n not in summary.created)]


def _pull_request_generators(doc: Mapping[str, Any], runtime: Runtime, dispatcher: Dispatcher) -> dict[str, Any]:
    """A `pull_request` event re-evaluates the ApplicationSets with a pull-request generator for that
    repository at once (instead of after requeueAfterSeconds); the apps they create are refreshed."""
    from tidecd.usecases import appsets  # lazy: cold start (GitHub and ApplicationSets only for such events)

    repo = doc.get("repository") if isinstance(doc, Mapping) else None
    full_name = str(repo.get("full_name", "")).lower() if isinstance(repo, Mapping) else ""
    try:
        config = runtime.config()
    except TidecdError:
        return {}
    names = {n for n, s in config.appsets.items() if full_name and full_name in appsets.pull_request_repos(s)}
    if not names:
        return {}
    summary = appsets.refresh(runtime, only=names, force_pull_requests=True)
    if summary.created:
        dispatcher.dispatch([Refresh(n, f"webhook: pull request on {full_name}") for n in summary.created])
    out: dict[str, Any] = {"evaluated": summary.evaluated, "created": summary.created, "deleted": summary.deleted}
    if summary.errors:
        out["errors"] = summary.errors
    return out


def config_report(config: Config) -> dict[str, Any]:
    """What the config source sets aside (bad apps by name, other problems), for answers and listings."""
    report: dict[str, Any] = {}
    if config.invalid:
        report["set_aside"] = dict(sorted(config.invalid.items()))
    if config.problems:
        report["config_problems"] = list(config.problems)
    return report


def _config(runtime: Runtime) -> Config:
    try:
        return runtime.config()
    except TemporaryError as exc:
        raise _Refused(503, f"config source unavailable, redeliver later: {exc}") from exc
    except PermanentError as exc:
        raise _Refused(500, f"config source invalid: {exc}") from exc


def _already_at(runtime: Runtime, app: Application, sha: str) -> bool:
    """The app's last comparison was of this pushed commit, Synced, with no operation running: another
    delivery for the same commit (several webhooks, a redelivery under a new id) has nothing to refresh.
    A refresh still running for it coalesces such deliveries itself (`pending/`); this spares the runs
    that would start after it finished."""

    if len(sha) != 40 or app.sources:
        return False
    from tidecd.state import app as app_state  # lazy: cold start (the app's record only for a pushed sha)

    try:
        state = app_state.load(runtime.store, app.name)[0]
    except TidecdError:
        return False  # the refresh reports what is wrong with the record
    op = state.operation
    return state.revision == sha and state.sync_status is SyncStatus.SYNCED and not (op is not None and op.running)


@dataclass(frozen=True)
class _Claim:
    """This call's `deliveries/<id>` record (its generation), or a duplicate (a done record)."""

    delivery: str
    generation: int
    record: dict[str, Any]
    duplicate: bool = False


def _claim(runtime: Runtime, delivery: str, provider: str, push: Push) -> _Claim:
    """Record the delivery as "claimed", only if absent (or a stale claim): the claim, or a duplicate when a
    done record (or a live claim of a concurrent delivery that turned done) is there. Ambiguous outcomes
    (a write that landed but whose answer was lost, then retried) are recognised by the record's nonce."""
    record = {"provider": provider, "ref": push.ref, "after": push.after, "received_at": time.time(),
              "state": "claimed", "nonce": uuid.uuid4().hex}
    key = DELIVERIES + delivery
    try:
        return _Claim(delivery, write_json(runtime.store, key, record, if_generation_match=0), record)
    except PreconditionFailed:
        pass
    except TemporaryError as exc:
        raise _Refused(503, f"object store unavailable, redeliver later: {exc}") from exc
    waited_until = time.monotonic() + CLAIM_WAIT
    while True:
        try:
            found = read_json(runtime.store, key)
            doc, generation = found if found is not None else (None, 0)
            if isinstance(doc, dict) and doc.get("nonce") == record["nonce"]:
                return _Claim(delivery, generation, record)  # our own write, retried by the client
            if doc is None or (doc.get("state") == "claimed"
                               and time.time() - float(doc.get("received_at", 0)) > CLAIM_TTL):
                if doc is not None:
                    log.info("webhook stale claim taken over", delivery=delivery)
                return _Claim(delivery, write_json(runtime.store, key, record, if_generation_match=generation),
                              record)
            if doc.get("state") != "claimed":  # done (or written before claims had a state)
                log.info("webhook duplicate delivery", delivery=delivery)
                return _Claim(delivery, generation, record, duplicate=True)
        except PreconditionFailed:
            pass  # it changed under us: look again
        except (TemporaryError, PermanentError, TypeError, ValueError) as exc:
            raise _Refused(503, f"object store unavailable, redeliver later: {exc}") from exc
        if time.monotonic() > waited_until:
            raise _Refused(503, "a concurrent delivery of this id is being handled; redeliver later")
        time.sleep(0.02)


def _done(runtime: Runtime, claim: _Claim) -> None:
    """Mark the claim done: a redelivery is now a duplicate. When the store fails here the refreshes are
    handed over already; the claim stays and a redelivery after CLAIM_TTL refreshes once more (harmless:
    refreshes coalesce), never less."""
    try:
        with budget(CLEANUP_BUDGET, "the webhook's cleanup budget"):
            write_json(runtime.store, DELIVERIES + claim.delivery, claim.record | {"state": "done"},
                       if_generation_match=claim.generation)
    except TemporaryError as exc:
        log.warning("webhook delivery left claimed", delivery=claim.delivery, error=type(exc).__name__)


def _release(runtime: Runtime, claim: _Claim) -> None:
    try:
        with budget(CLEANUP_BUDGET, "the webhook's cleanup budget"):
            runtime.store.delete(DELIVERIES + claim.delivery, if_generation_match=claim.generation)
    except (PreconditionFailed, TemporaryError) as exc:
        log.warning("webhook delivery record kept", delivery=claim.delivery, error=type(exc).__name__)
