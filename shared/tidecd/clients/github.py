"""GitHub write-back through PyGithub: commit statuses, deployments and pull-request comments, and the two
reads previews need (a pull request's changed files, and its head and labels for a comment command).

Nothing here may fail a sync. `GitHub` wraps every call: GitHub's errors become a recorded `Delivery`
(sent / backoff / rejected / error), never an exception to the caller.

- Rate limiting (403 or 429 with `x-ratelimit-remaining: 0`, `x-ratelimit-reset` or `retry-after`) opens
  a backoff window kept in the object store (`github/backoff.json`), so every instance stops calling
  until GitHub's reset time; calls inside the window are recorded as `backoff` and dropped.
- A 422 (GitHub allows 1000 statuses per sha and context, then answers "Validation Failed") and other
  4xx answers are `rejected`, not retried. 5xx and connection errors are `error`.
- Commit status descriptions are cut to GitHub's 140 characters; comments to 65,536.

Auth comes from a Secret in the config source (sealed in git, opened in memory by `Runtime.secrets`)
labelled `argocd.argoproj.io/secret-type: github`, with either `token` (a PAT or any bearer token) or
`appID` + `installationID` + `privateKey` (a GitHub App; the same field names as Argo CD Notifications'
GitHub service), and optionally `url` (the API base URL, GitHub Enterprise: `https://HOST/api/v3`).
`TIDECD_GITHUB_API_URL` sets the API base URL when the Secret does not (default `https://api.github.com`).

Which repos are "on GitHub": `github.com`, and the host of a non-default API URL (GitHub Enterprise;
the tests' stand-in). The owner and name are the repo URL's last two path segments.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

import structlog

from tidecd.base.constants import LABEL_SECRET_TYPE, SECRET_TYPE_GITHUB
from tidecd.base.errors import ConfigError, PermanentError, TemporaryError
from tidecd.clients import metrics
from tidecd.clients.secrets import text_fields
from tidecd.clients.store import ObjectStore, PreconditionFailed, read_json, write_json

if TYPE_CHECKING:
    from github import Github
    from github.Repository import Repository

log = structlog.get_logger("tidecd.clients.github")

DEFAULT_API_URL = "https://api.github.com"
DESCRIPTION_LIMIT = 140
COMMENT_LIMIT = 65_536
BACKOFF_KEY = "github/backoff.json"
DEFAULT_BACKOFF = 60.0  # seconds, when a rate-limit answer names no reset time
MAX_BACKOFF = 3600.0
REQUEST_TIMEOUT = 10
STATUS_STATES = ("error", "failure", "pending", "success")
DEPLOYMENT_STATES = ("error", "failure", "inactive", "in_progress", "queued", "pending", "success")
_SCP = re.compile(r"^[\w.-]+@([\w.-]+):(.+)$")  # git@github.com:owner/repo.git


@dataclass(frozen=True)
class Repo:
    owner: str
    name: str

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


def api_host(api_url: str) -> str:
    return (urlsplit(api_url).hostname or "").lower()


def repo_of(repo_url: str, api_url: str = DEFAULT_API_URL) -> Repo | None:
    """The GitHub repo a repoURL names, or None when it is not on GitHub (or not owner/name shaped)."""
    url = repo_url.strip()
    if match := _SCP.match(url):
        host, path = match.group(1).lower(), match.group(2)
    else:
        parts = urlsplit(url)
        host, path = (parts.hostname or "").lower(), parts.path
    hosts = {"github.com", "www.github.com"}
    if api_host(api_url) not in ("", "api.github.com"):
        hosts.add(api_host(api_url))
    segments = [s for s in path.strip("/").split("/") if s]
    if host not in hosts or len(segments) < 2:
        return None
    owner, name = segments[-2], segments[-1].removesuffix(".git")
    if not owner or not name:
        return None
    return Repo(owner, name)


def cut(text: str, limit: int, note: str = "…") -> str:
    """`text` within `limit` characters, ending in `note` when cut."""
    return text if len(text) <= limit else text[: max(0, limit - len(note))] + note


# --- auth ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GitHubAuth:
    token: str = ""
    app_id: str = ""
    installation_id: int = 0
    private_key: str = ""
    api_url: str = DEFAULT_API_URL

    def __repr__(self) -> str:  # never print a credential
        kind = "token" if self.token else f"app {self.app_id} installation {self.installation_id}"
        return f"GitHubAuth({kind}, api_url={self.api_url!r})"


def auth_from_secrets(secrets: list[dict[str, Any]], api_url: str = "") -> GitHubAuth | None:
    """The (unsealed) Secret labelled `secret-type: github`, or None when there is none."""
    for secret in secrets:
        labels = (secret.get("metadata") or {}).get("labels") or {}
        if labels.get(LABEL_SECRET_TYPE) == SECRET_TYPE_GITHUB:
            return _auth_of(secret, api_url)
    return None


def _auth_of(secret: dict[str, Any], api_url: str) -> GitHubAuth:
    name = (secret.get("metadata") or {}).get("name", "?")
    fields = text_fields(secret, f"github Secret {name}")
    url = fields.get("url", "").strip().rstrip("/") or api_url.rstrip("/") or DEFAULT_API_URL
    if fields.get("token"):
        return GitHubAuth(token=fields["token"].strip(), api_url=url)
    missing = [k for k in ("appID", "installationID", "privateKey") if not fields.get(k)]
    if missing:
        raise ConfigError(f"github Secret {name}: needs `token`, or `appID`, `installationID` and "
                          f"`privateKey`; missing {', '.join(missing)}")
    if not fields["installationID"].strip().isdigit():
        raise ConfigError(f"github Secret {name}: installationID must be a number")
    return GitHubAuth(app_id=fields["appID"].strip(), installation_id=int(fields["installationID"]),
                      private_key=fields["privateKey"], api_url=url)


# --- the API seam ----------------------------------------------------------------------------------------


class RateLimited(TemporaryError):
    """GitHub's rate limit is used up until `reset_at` (epoch seconds); `delay` waits until then."""

    def __init__(self, reset_at: float) -> None:
        super().__init__(f"rate limited until {reset_at:.0f}", delay=max(1.0, reset_at - time.time()))
        self.reset_at = reset_at


class Rejected(PermanentError):
    """GitHub refused the request (4xx other than rate limiting): retrying the same request cannot help."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class Unavailable(TemporaryError):
    """GitHub could not be reached or answered 5xx."""


class GitHubApi(Protocol):
    """What tidecd asks of GitHub; `PyGithubApi` is the real one, tests may use a fake."""

    def create_status(self, repo: Repo, sha: str, state: str, context: str, description: str,
                      target_url: str) -> None: ...

    def create_deployment(self, repo: Repo, sha: str, environment: str, description: str) -> int: ...

    def create_deployment_status(self, repo: Repo, deployment_id: int, state: str, description: str,
                                 environment_url: str, log_url: str) -> None: ...

    def upsert_comment(self, repo: Repo, number: int, marker: str, body: str) -> int: ...

    def pull_files(self, repo: Repo, number: int) -> list[str]: ...

    def commit_pulls(self, repo: Repo, sha: str) -> list[int]: ...

    def pull(self, repo: Repo, number: int) -> PullInfo: ...


@dataclass(frozen=True)
class PullInfo:
    """What a comment command needs of its pull request (an `issue_comment` payload does not say it)."""

    number: int
    state: str  # open | closed
    head_sha: str
    head_repo: str  # owner/name; "" when the fork was deleted
    base_repo: str
    base_ref: str
    labels: tuple[str, ...] = ()

    @property
    def fork(self) -> bool:
        return not self.head_repo or self.head_repo.lower() != self.base_repo.lower()


class PyGithubApi:
    """`GitHubApi` through PyGithub; no retries inside (PyGithub's own would sleep on a rate limit)."""

    def __init__(self, auth: GitHubAuth) -> None:
        # lazy: cold start (PyGithub only when GitHub is called)
        import github
        from github import Auth

        self.auth = auth
        credentials: Any
        if auth.token:
            credentials = Auth.Token(auth.token)
        else:
            app = Auth.AppAuth(auth.app_id, auth.private_key)
            credentials = Auth.AppInstallationAuth(app, auth.installation_id)
        # No client-side throttle or retry: both would sleep inside a function call. GitHub's secondary
        # rate limits answer 403/429 with retry-after, which opens the shared backoff window instead.
        self._gh = github.Github(auth=credentials, base_url=auth.api_url, retry=None, timeout=REQUEST_TIMEOUT,
                                 lazy=True, seconds_between_requests=None, seconds_between_writes=None)

    @property
    def api(self) -> Github:
        """The PyGithub client itself, for writes this class has no method for (images.github_write)."""
        return self._gh

    def _repo(self, repo: Repo) -> Repository:
        return self._gh.get_repo(repo.full_name)

    def create_status(self, repo: Repo, sha: str, state: str, context: str, description: str,
                      target_url: str) -> None:
        # lazy: cold start (PyGithub only when GitHub is called)
        from github.GithubObject import NotSet

        with translated_errors():
            self._repo(repo).get_commit(sha).create_status(state, target_url=target_url or NotSet,
                                                           description=description, context=context)

    def create_deployment(self, repo: Repo, sha: str, environment: str, description: str) -> int:
        with translated_errors():
            found = self._repo(repo).get_deployments(sha=sha, environment=environment)
            for deployment in found:
                return int(deployment.id)
            created = self._repo(repo).create_deployment(
                sha, environment=environment, description=cut(description, DESCRIPTION_LIMIT),
                auto_merge=False, required_contexts=[], transient_environment=False)
            return int(created.id)

    def create_deployment_status(self, repo: Repo, deployment_id: int, state: str, description: str,
                                 environment_url: str, log_url: str) -> None:
        # lazy: cold start (PyGithub only when GitHub is called)
        from github.GithubObject import NotSet

        with translated_errors():
            deployment = self._repo(repo).get_deployment(deployment_id)
            deployment.create_status(state, description=description, environment_url=environment_url or NotSet,
                                     target_url=log_url or NotSet, auto_inactive=True)

    def upsert_comment(self, repo: Repo, number: int, marker: str, body: str) -> int:
        with translated_errors():
            issue = self._repo(repo).get_issue(number)
            for comment in issue.get_comments():
                if marker in (comment.body or ""):
                    comment.edit(body)
                    return int(comment.id)
            return int(issue.create_comment(body).id)

    def commit_pulls(self, repo: Repo, sha: str) -> list[int]:
        with translated_errors():
            return [int(p.number) for p in self._repo(repo).get_commit(sha).get_pulls()]

    def pull_files(self, repo: Repo, number: int) -> list[str]:
        with translated_errors():
            return [f.filename for f in self._repo(repo).get_pull(number).get_files()]

    def pull(self, repo: Repo, number: int) -> PullInfo:
        with translated_errors():
            pull = self._repo(repo).get_pull(number)
            head_repo = pull.head.repo.full_name if pull.head.repo is not None else ""
            return PullInfo(number, str(pull.state), str(pull.head.sha).lower(), str(head_repo or ""),
                            str(pull.base.repo.full_name), str(pull.base.ref),
                            tuple(str(label.name) for label in pull.labels))


def ensure_pull(gh_repo: Any, repo: Repo, *, base: str, head: str, title: str, body: str) -> tuple[int, str]:
    """(number, page) of the open pull request base ← head of a PyGithub repository, opened when there is
    none (so a retried write opens it once). Raises PyGithub's errors: wrap in `translated_errors`."""
    for pull in gh_repo.get_pulls(state="open", base=base, head=f"{repo.owner}:{head}"):
        return int(pull.number), str(pull.html_url or "")
    created = gh_repo.create_pull(base=base, head=head, title=cut(title, 256), body=cut(body, COMMENT_LIMIT))
    return int(created.number), str(created.html_url or "")


@contextmanager
def translated_errors() -> Iterator[None]:
    """PyGithub's and requests' exceptions → RateLimited / Rejected / Unavailable (no bodies echoed)."""
    # lazy: cold start (PyGithub only when GitHub is called)
    import github
    import requests

    try:
        yield
    except github.GithubException as exc:
        headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
        message = str(exc.data.get("message", "")) if isinstance(exc.data, dict) else ""
        if isinstance(exc, github.RateLimitExceededException) or (
                exc.status in (403, 429) and (headers.get("x-ratelimit-remaining") == "0"
                                              or "retry-after" in headers or "rate limit" in message.lower())):
            raise RateLimited(_reset_at(headers)) from exc
        if exc.status >= 500:
            raise Unavailable(f"GitHub answered {exc.status}") from exc
        raise Rejected(exc.status, cut(message, 200)) from exc
    except (requests.RequestException, OSError) as exc:
        raise Unavailable(f"GitHub unreachable: {type(exc).__name__}") from exc


def _reset_at(headers: dict[str, str], now: Callable[[], float] = time.time) -> float:
    """GitHub's reset time: `retry-after` seconds, else `x-ratelimit-reset` (epoch), else a minute."""
    try:
        if "retry-after" in headers:
            return now() + min(float(headers["retry-after"]), MAX_BACKOFF)
        if "x-ratelimit-reset" in headers:
            return min(float(headers["x-ratelimit-reset"]), now() + MAX_BACKOFF)
    except ValueError:
        pass
    return now() + DEFAULT_BACKOFF


# --- the facade ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    result: str  # sent | backoff | rejected | error | skipped
    what: str
    detail: str = ""
    value: int = 0  # a deployment or comment id when one came back

    @property
    def ok(self) -> bool:
        return self.result == "sent"


class GitHub:
    """Calls GitHub, honours the shared backoff window, and never raises."""

    def __init__(self, api: GitHubApi, store: ObjectStore | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.api, self.store, self.clock = api, store, clock

    def status(self, repo: Repo, sha: str, state: str, context: str, description: str = "",
               target_url: str = "") -> Delivery:
        if state not in STATUS_STATES:
            raise ValueError(f"commit status state {state!r} is not one of {STATUS_STATES}")
        what = f"status {context}={state} on {repo.full_name}@{sha[:12]}"
        full = self._full_key(repo, sha, context)
        if self.store is not None and self.store.read(full) is not None:
            return Delivery("rejected", what, "GitHub's limit of statuses for this sha and context was reached")
        delivery = self._call(what, lambda: self.api.create_status(
            repo, sha, state, cut(context, 255), cut(description, DESCRIPTION_LIMIT), target_url))
        if delivery.result == "rejected" and delivery.detail.startswith("422") and self.store is not None:
            try:  # 1000 statuses per sha and context: every further one would be refused too
                write_json(self.store, full, {"repo": repo.full_name, "sha": sha, "context": context,
                                              "at": self.clock()})
            except Exception as exc:  # noqa: BLE001 - best effort
                log.warning("github limit not recorded", error=type(exc).__name__)
        return delivery

    @staticmethod
    def _full_key(repo: Repo, sha: str, context: str) -> str:
        digest = hashlib.sha256(f"{repo.full_name}\0{sha}\0{context}".encode()).hexdigest()[:32]
        return f"github/full/{digest}.json"

    def deployment(self, repo: Repo, sha: str, environment: str, state: str, description: str = "",
                   environment_url: str = "", log_url: str = "") -> Delivery:
        if state not in DEPLOYMENT_STATES:
            raise ValueError(f"deployment state {state!r} is not one of {DEPLOYMENT_STATES}")

        def post() -> int:
            ident = self.api.create_deployment(repo, sha, environment, description)
            self.api.create_deployment_status(repo, ident, state, cut(description, DESCRIPTION_LIMIT),
                                              environment_url, log_url)
            return ident

        return self._call(f"deployment {environment}={state} on {repo.full_name}@{sha[:12]}", post)

    def comment(self, repo: Repo, number: int, marker: str, body: str) -> Delivery:
        return self._call(f"comment on {repo.full_name}#{number}",
                          lambda: self.api.upsert_comment(repo, number, marker, cut(body, COMMENT_LIMIT)))

    def pull_files(self, repo: Repo, number: int) -> list[str] | None:
        """The files a pull request changes (None when GitHub cannot say: rate limited, down, refused)."""
        found: list[list[str]] = []
        delivery = self._call(f"files of {repo.full_name}#{number}",
                              lambda: found.append(self.api.pull_files(repo, number)))
        return found[0] if delivery.ok and found else None

    def commit_pulls(self, repo: Repo, sha: str) -> list[int] | None:
        """The pull requests a commit belongs to (None when GitHub cannot say)."""
        found: list[list[int]] = []
        delivery = self._call(f"pulls of {repo.full_name}@{sha[:12]}",
                              lambda: found.append(self.api.commit_pulls(repo, sha)))
        return found[0] if delivery.ok and found else None

    def pull(self, repo: Repo, number: int) -> PullInfo | None:
        """The pull request's head, base and labels (None when GitHub cannot say: rate limited, down, refused)."""
        found: list[PullInfo] = []
        delivery = self._call(f"pull {repo.full_name}#{number}", lambda: found.append(self.api.pull(repo, number)))
        return found[0] if delivery.ok and found else None

    # -- the one path every call takes ------------------------------------------------------------------

    def _call(self, what: str, call: Callable[[], Any]) -> Delivery:
        delivery = self._attempt(what, call)
        metrics.GITHUB_CALLS.labels(kind=what.split(" ", 1)[0], result=delivery.result).inc()
        return delivery

    def _attempt(self, what: str, call: Callable[[], Any]) -> Delivery:
        until = self.backoff_until()
        if until > self.clock():
            log.info("github call dropped: rate limited", call=what, until=int(until))
            return Delivery("backoff", what, f"rate limited until {_iso(until)}")
        try:
            value = call()
        except RateLimited as exc:
            self._back_off(exc.reset_at)
            log.warning("github rate limited", call=what, until=int(exc.reset_at))
            return Delivery("backoff", what, f"rate limited until {_iso(exc.reset_at)}")
        except Rejected as exc:
            log.warning("github rejected", call=what, status=exc.status, error=str(exc))
            return Delivery("rejected", what, str(exc))
        except Unavailable as exc:
            log.warning("github unavailable", call=what, error=str(exc))
            return Delivery("error", what, str(exc))
        except Exception as exc:  # noqa: BLE001 - never fail a sync because of GitHub
            log.warning("github call failed", call=what, error=type(exc).__name__)
            return Delivery("error", what, type(exc).__name__)
        log.info("github call sent", call=what)
        return Delivery("sent", what, value=value if isinstance(value, int) else 0)

    def backoff_until(self) -> float:
        if self.store is None:
            return getattr(self, "_until", 0.0)
        try:
            found = read_json(self.store, BACKOFF_KEY)
        except Exception:  # noqa: BLE001 - an unreadable record means no window
            return 0.0
        return float(found[0].get("until", 0.0)) if found and isinstance(found[0], dict) else 0.0

    def _back_off(self, until: float) -> None:
        if self.store is None:
            self._until = until
            return
        try:
            write_json(self.store, BACKOFF_KEY, {"until": until, "set_at": self.clock()})
        except (PreconditionFailed, Exception) as exc:  # noqa: BLE001 - best effort
            log.warning("github backoff not recorded", error=type(exc).__name__)


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def client_for(secrets: list[dict[str, Any]], store: ObjectStore | None, api_url: str = "") -> GitHub | None:
    """The GitHub facade for an installation's config source, or None when it holds no github Secret."""
    auth = auth_from_secrets(secrets, api_url)
    return GitHub(PyGithubApi(auth), store) if auth else None


def marker(kind: str, key: str) -> str:
    """The hidden HTML comment that finds a comment again: `<!-- tidecd:KIND:KEY -->`."""
    return f"<!-- tidecd:{kind}:{json.dumps(key)[1:-1]} -->"
