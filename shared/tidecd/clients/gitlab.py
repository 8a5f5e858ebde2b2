"""GitLab's REST API (v4) through python-gitlab, for what the ApplicationSet `scmProvider` generator reads:
a group's projects, a project's branches, and whether a path exists at a branch.

The calls are the ones Argo CD v3.6.1's GitLab provider makes (applicationset/services/scm_provider/gitlab.go):

- `GET /groups/:id/projects` with `include_subgroups`, `with_shared`, `topic` and, for archived projects,
  `archived=true`, 100 a page, paged by `X-Next-Page`;
- `GET /projects/:id/repository/branches/:branch` (the default branch; 404: no branch) or
  `GET /projects/:id/repository/branches` (every branch, paged the same way; 404: none);
- `HEAD /projects/:id/repository/files/:file_path?ref=` (Argo CD GETs the file: the same answer without its
  content), then on 404 `GET /projects/:id/repository/tree?path=&ref=` (a directory; 404: the path is missing).

Bounded: each request has `REQUEST_TIMEOUT`, and all of one client's requests `BUDGET` together; nothing is
retried (python-gitlab's transient retries off, a 429 is not slept on but answered); pages are asked for one
by one, by number, never by following a `Link` the server names (that could send the token to another
host), and a listing stops at its `limit`.

Errors: `Refused` (a 4xx/5xx answer: its status and GitLab's message), `Unreachable` (no answer, a timeout, TLS),
`Malformed` (an answer that is not GitLab's JSON). No error carries the token: it is sent only in the
`PRIVATE-TOKEN` header, never put in a message, and a server's message that echoes it is masked.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from tidecd.base.errors import PermanentError, TemporaryError

if TYPE_CHECKING:
    from gitlab import Gitlab

DEFAULT_URL = "https://gitlab.com"
REQUEST_TIMEOUT = 10
BUDGET = 300.0  # seconds, every request of one client (one generator's evaluation) together
PER_PAGE = 100
MESSAGE_LIMIT = 200


class Refused(PermanentError):
    """GitLab answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}" if message else str(status))
        self.status = status


class Unreachable(TemporaryError):
    """No answer: the connection failed, timed out, or the certificate did not verify."""


class Malformed(PermanentError):
    """An answer that is not what GitLab's API gives."""


class TooMany(PermanentError):
    """A listing longer than its limit."""


@dataclass(frozen=True)
class Project:
    """A project as `GET /groups/:id/projects` lists it (the fields Argo CD reads)."""

    id: int
    path: str
    namespace: str  # namespace.full_path
    default_branch: str  # "" for an empty repository
    ssh_url: str
    http_url: str
    topics: tuple[str, ...]  # `topics`, or `tag_list` where a GitLab before 14.5 gives no topics


def base_url(api: str) -> str:
    """The instance URL python-gitlab wants (it adds `/api/v4`): `api` as Argo CD takes it (go-gitlab accepts
    the instance's URL or its `/api/v4` URL), default gitlab.com."""
    url = (api or DEFAULT_URL).strip().rstrip("/")
    return url.removesuffix("/api/v4").rstrip("/") or DEFAULT_URL


class GitLab:
    """One instance, one token ("" for anonymous requests)."""

    def __init__(self, api: str, token: str, *, insecure: bool = False, timeout: float = REQUEST_TIMEOUT,
                 budget: float = BUDGET) -> None:
        # lazy: cold start (python-gitlab only when GitLab is called)
        import gitlab

        self._token = token
        self.url = base_url(api)
        self.shown = _without_credentials(self.url)
        self.timeout = timeout
        self.budget = budget
        self._until = time.monotonic() + budget
        self.gl: Gitlab = gitlab.Gitlab(self.url, private_token=token or None, ssl_verify=not insecure,
                                        timeout=timeout, retry_transient_errors=False, keep_base_url=True)

    def __repr__(self) -> str:  # never print the token
        return f"GitLab({self.shown!r}, {'token' if self._token else 'anonymous'})"

    def _once(self) -> dict[str, Any]:
        """python-gitlab's per-call options: what the budget leaves, no sleep on a 429, no retry of anything."""
        left = self._until - time.monotonic()
        if left <= 0:
            raise Unreachable(f"{self.shown}: the requests took more than {self.budget:g} s together")
        return {"timeout": min(self.timeout, left), "obey_rate_limit": False, "max_retries": 0,
                "retry_transient_errors": False}

    # -- the calls --------------------------------------------------------------------------------------

    def group_projects(self, group: str, *, include_subgroups: bool, with_shared: bool, archived_only: bool,
                       topic: str, limit: int) -> list[Project]:
        """The group's projects in GitLab's order; Refused(404) when GitLab has no such group (for this token)."""
        query = {"include_subgroups": _flag(include_subgroups), "with_shared": _flag(with_shared)}
        if topic:
            query["topic"] = topic
        if archived_only:  # Argo CD sends archived=true: GitLab then lists the archived projects only
            query["archived"] = "true"
        with self._answers():
            return [_project(item) for item in self._pages(f"/groups/{_id(group)}/projects", query, limit)]

    def branch_sha(self, project: int, branch: str) -> str | None:
        """The commit `branch` points at, or None when GitLab answers 404 (no such branch)."""
        if not branch:
            return None  # an empty repository: GitLab gives it no default branch
        try:
            with self._answers():
                found = self.gl.http_get(f"/projects/{project}/repository/branches/{_id(branch)}", **self._once())
                return _sha(found)
        except Refused as exc:
            if exc.status == 404:
                return None
            raise

    def branches(self, project: int, limit: int) -> list[tuple[str, str]]:
        """(name, commit) of every branch, sorted by name as GitLab lists them; [] when GitLab answers 404."""
        try:
            with self._answers():
                return [(_text(item, "name"), _sha(item))
                        for item in self._pages(f"/projects/{project}/repository/branches", {}, limit)]
        except Refused as exc:
            if exc.status == 404:
                return []
            raise

    def path_exists(self, project: int, path: str, ref: str) -> bool:
        """Whether `path` is a file or a directory of the project at `ref`."""
        try:
            with self._answers():
                self.gl.http_head(f"/projects/{project}/repository/files/{_id(path)}", query_data={"ref": ref},
                                  **self._once())
            return True
        except Refused as exc:
            if exc.status != 404:
                raise
        try:
            with self._answers():
                self.gl.http_list(f"/projects/{project}/repository/tree", {"path": path, "ref": ref},
                                  get_all=False, per_page=1, **self._once())
            return True
        except Refused as exc:
            if exc.status != 404:
                raise
        return False

    # -- plumbing ---------------------------------------------------------------------------------------

    def _pages(self, path: str, query: dict[str, str], limit: int) -> list[dict[str, Any]]:
        """Every item of a paged listing, asked for page by page (`X-Next-Page`), at most `limit` items."""
        # lazy: cold start (python-gitlab only when GitLab is called)
        from gitlab.client import GitlabList

        items: list[dict[str, Any]] = []
        page = 1
        while True:
            listed = GitlabList(self.gl, self.gl._build_url(path), dict(query), get_next=False, page=page,
                                per_page=PER_PAGE, **self._once())
            batch = list(listed)
            if not all(isinstance(item, dict) for item in batch):
                raise Malformed("a listing whose items are not objects")
            items.extend(batch)
            if len(items) > limit:
                raise TooMany(f"more than {limit} listed")
            following = listed.next_page
            if not batch or following is None or following <= page:
                return items
            page = following

    @contextmanager
    def _answers(self) -> Iterator[None]:
        """python-gitlab's and requests' exceptions as Refused, Unreachable or Malformed, token masked."""
        # lazy: cold start (python-gitlab only when GitLab is called)
        import requests
        from gitlab import exceptions as gle

        try:
            yield
        except gle.GitlabParsingError:
            raise Malformed("an answer that is not JSON") from None
        except gle.GitlabError as exc:
            if exc.response_code is None:
                raise Malformed(self._masked(str(exc.error_message))) from None
            raise Refused(exc.response_code, self._masked(str(exc.error_message))) from None
        except requests.exceptions.SSLError:
            raise Unreachable(f"{self.shown}: the TLS certificate does not verify (insecure: true skips "
                              "the check)") from None
        except requests.exceptions.Timeout:
            raise Unreachable(f"{self.shown}: no answer in time (at most {self.timeout:g} s a request)") from None
        except requests.exceptions.RequestException as exc:
            raise Unreachable(f"{self.shown}: {type(exc).__name__}") from None
        except (KeyError, IndexError, TypeError, ValueError):
            raise Malformed("an answer not shaped as GitLab's") from None

    def _masked(self, message: str) -> str:
        text = " ".join(message.split())
        if self._token:
            text = text.replace(self._token, "***")
        return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _id(value: str | int) -> str:
    """A path segment as GitLab wants an id, a full path, a branch or a file path: every `/` encoded."""
    from gitlab.utils import EncodedId  # lazy: cold start (python-gitlab only when GitLab is called)

    return str(EncodedId(str(value)))


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _text(item: Any, key: str) -> str:
    value = item[key]
    if not isinstance(value, str):
        raise TypeError(key)
    return value


def _sha(branch: Any) -> str:
    if not isinstance(branch, dict) or not isinstance(branch.get("commit"), dict):
        raise Malformed("a branch without its commit")
    return _text(branch["commit"], "id")


def _project(item: dict[str, Any]) -> Project:
    topics = item.get("topics") or item.get("tag_list") or []
    namespace = item.get("namespace")
    if not isinstance(item.get("id"), int) or not isinstance(namespace, dict) or not isinstance(topics, list):
        raise Malformed("a project without its id or namespace")
    return Project(id=item["id"], path=_text(item, "path"), namespace=_text(namespace, "full_path"),
                   default_branch=str(item.get("default_branch") or ""), ssh_url=_text(item, "ssh_url_to_repo"),
                   http_url=_text(item, "http_url_to_repo"), topics=tuple(str(t) for t in topics))
