"""A GitLab REST API (v4) stand-in for tests: the endpoints the scmProvider generator's GitLab provider calls.

GitLab cannot be reached from here, so tests talk to this local HTTP server. It answers as GitLab's own API
documentation says (docs.gitlab.com, the REST API pages; doc/api/ of gitlab-org/gitlab):

- Groups API, "List projects" of a group: `GET /groups/:id/projects`, `:id` a group's id or URL-encoded full
  path; `include_subgroups` (default false), `with_shared` (default true: projects shared with the group too),
  `archived` (omitted: all; true: archived only; false: not archived), `topic` (comma-separated, a project
  must have them all), pagination; 404 `{"message": "404 Group Not Found"}`. Each project has the documented
  fields (`id`, `path`, `path_with_namespace`, `default_branch`, `topics`, `tag_list`, `ssh_url_to_repo`,
  `http_url_to_repo`, `archived`, `namespace` with `full_path`, ...).
- Branches API: `GET /projects/:id/repository/branches` (sorted by name, paginated) and
  `GET /projects/:id/repository/branches/:branch`; 404 `{"message": "404 Branch Not Found"}`.
- Projects API, "Get a single project": `GET /projects/:id`, `:id` an id or URL-encoded full path; 404
  `{"message": "404 Project Not Found"}`.
- Repository files API, "Get file from repository": `GET /projects/:id/repository/files/:file_path?ref=` (the
  file with its base64 content; 404 `{"message": "404 File Not Found"}`), and "Get file metadata only", the
  same as `HEAD`: the `X-Gitlab-*` headers, 404 without a body. `ref` is required.
- Repositories API, "List repository tree": `GET /projects/:id/repository/tree?path=&ref=`; a path that is
  not a directory: 404 `{"message": "404 Tree Not Found"}` (GitLab since 16.5; before, `[]`).
- REST API "Pagination" (offset): `page`, `per_page` (at most 100), and the headers `x-page`, `x-per-page`,
  `x-next-page`, `x-prev-page`, `x-total`, `x-total-pages`, `Link`.
- "Authentication": a `PRIVATE-TOKEN` header; a wrong token answers 401 `{"message": "401 Unauthorized"}`;
  without a token only public projects are seen, and a group with none is 404.

A request the documentation does not allow (another path or method, an unknown query parameter, a boolean
that is not `true`/`false`, `per_page` over 100, a missing `ref`) answers 400 and is kept in `violations`;
the `gitlab_standin` fixture fails the test at teardown if there is any (`gitlab_session`: one for the
session, `reset` between uses). Every call is kept in `calls`.
`fail_next(route, status, body=...)` answers the next call of a route with a fault (a raw `bytes` body for
junk). Routes: "group-projects", "project", "branches", "branch", "file", "file-head", "tree"; and "api-root",
`GET /api/v4/`, which GitLab answers 404 and go-gitlab asks once for its rate-limit headers (Argo CD's
controller runs against this stand-in in tests/e2e/test_appset_oracle.py).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import pytest

HOST = "gitlab.example.com"  # the host GitLab's documentation examples use, in clone URLs
_COMMON = {"page", "per_page"}
_ROUTES: list[tuple[str, str, re.Pattern[str], set[str]]] = [
    ("group-projects", "GET", re.compile(r"^/api/v4/groups/([^/]+)/projects$"),
     {"include_subgroups", "with_shared", "archived", "topic", "order_by", "sort", "search", "simple", "owned",
      "starred", "visibility", "with_issues_enabled", "with_merge_requests_enabled", "min_access_level",
      "with_custom_attributes", "with_security_reports"}),
    ("api-root", "GET", re.compile(r"^/api/v4/?$"), set()),
    ("project", "GET", re.compile(r"^/api/v4/projects/([^/]+)$"),
     {"statistics", "license", "with_custom_attributes"}),
    ("branches", "GET", re.compile(r"^/api/v4/projects/([^/]+)/repository/branches$"), {"search", "regex"}),
    ("branch", "GET", re.compile(r"^/api/v4/projects/([^/]+)/repository/branches/([^/]+)$"), set()),
    ("file", "GET", re.compile(r"^/api/v4/projects/([^/]+)/repository/files/([^/]+)$"), {"ref"}),
    ("file-head", "HEAD", re.compile(r"^/api/v4/projects/([^/]+)/repository/files/([^/]+)$"), {"ref"}),
    ("tree", "GET", re.compile(r"^/api/v4/projects/([^/]+)/repository/tree$"),
     {"path", "ref", "recursive", "pagination", "page_token"}),
]
_BOOLEANS = {"include_subgroups", "with_shared", "archived", "simple", "owned", "starred", "recursive",
             "with_issues_enabled", "with_merge_requests_enabled", "with_custom_attributes"}


@dataclass
class Call:
    method: str
    path: str
    route: str
    query: dict[str, str]
    token: str  # the PRIVATE-TOKEN header, "" without one
    status: int = 0


@dataclass
class Project:
    id: int
    group: str  # the namespace's full path
    path: str
    default_branch: str | None = "main"
    topics: list[str] = field(default_factory=list)
    tag_list: list[str] | None = None  # a GitLab before 14.5 gives tag_list and no topics
    archived: bool = False
    public: bool = True
    shared_with: list[str] = field(default_factory=list)  # full paths of groups the project is shared with
    branches: dict[str, str] = field(default_factory=dict)  # name -> commit id
    files: dict[str, set[str]] = field(default_factory=dict)  # branch -> file paths

    def doc(self, groups: dict[str, int]) -> dict[str, Any]:
        full = f"{self.group}/{self.path}"
        parent = self.group.rpartition("/")[0]
        return {
            "id": self.id, "description": None, "name": self.path, "name_with_namespace": full.replace("/", " / "),
            "path": self.path, "path_with_namespace": full, "created_at": "2024-01-02T10:00:00.000Z",
            "default_branch": self.default_branch, "tag_list": self.tag_list if self.tag_list is not None
            else list(self.topics), "topics": [] if self.tag_list is not None else list(self.topics),
            "ssh_url_to_repo": f"git@{HOST}:{full}.git", "http_url_to_repo": f"https://{HOST}/{full}.git",
            "web_url": f"https://{HOST}/{full}", "readme_url": None, "avatar_url": None, "forks_count": 0,
            "star_count": 0, "last_activity_at": "2024-01-02T10:00:00.000Z", "archived": self.archived,
            "visibility": "public" if self.public else "private",
            "namespace": {"id": groups[self.group], "name": self.group.rpartition("/")[2],
                          "path": self.group.rpartition("/")[2], "kind": "group", "full_path": self.group,
                          "parent_id": groups.get(parent), "avatar_url": None,
                          "web_url": f"https://{HOST}/groups/{self.group}"},
            "shared_with_groups": [{"group_id": groups[g], "group_name": g.rpartition("/")[2],
                                    "group_full_path": g, "group_access_level": 30} for g in self.shared_with],
        }


@dataclass
class _Fault:
    route: str
    status: int
    body: Any
    times: int


class GitLabStandIn:
    def __init__(self, token: str = "") -> None:
        self.token = token  # when set, any other PRIVATE-TOKEN is a 401
        self.groups: dict[str, int] = {}
        self.projects: list[Project] = []
        self.calls: list[Call] = []
        self.violations: list[str] = []
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    # -- setting it up ---------------------------------------------------------------------------------

    def group(self, full_path: str) -> int:
        """Add a group (and its parents); its id."""
        parts = full_path.split("/")
        for depth in range(1, len(parts) + 1):
            self.groups.setdefault("/".join(parts[:depth]), 100 + len(self.groups))
        return self.groups[full_path]

    def project(self, group: str, path: str, **fields: Any) -> Project:
        self.group(group)
        for shared in fields.get("shared_with", []):
            self.group(shared)
        project = Project(id=1000 + len(self.projects), group=group, path=path, **fields)
        if project.default_branch and project.default_branch not in project.branches:
            project.branches[project.default_branch] = f"{project.id:04d}" + "a" * 36
        self.projects.append(project)
        return project

    def reset(self) -> None:
        """Forget every group, project, call, violation and fault (the session's stand-in between modules)."""
        with self._lock:
            self.groups, self.projects, self.calls, self.violations, self._faults = {}, [], [], [], []
        self.token = ""

    def fail_next(self, route: str, status: int, *, body: Any = None, times: int = 1) -> None:
        """Answer the next `times` calls of `route` with `status` and `body` (GitLab's `{"message": ...}` by
        default; `bytes` are sent as they are)."""
        self._faults.append(_Fault(route, status, body if body is not None else {"message": f"{status} fault"},
                                   times))

    def calls_to(self, route: str) -> list[Call]:
        return [c for c in self.calls if c.route == route]

    # -- serving ---------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> GitLabStandIn:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                standin._answer(self)

            def do_HEAD(self) -> None:  # noqa: N802
                standin._answer(self)

            def do_OTHER(self) -> None:  # noqa: N802
                standin._answer(self)

            do_POST = do_PUT = do_PATCH = do_DELETE = do_OTHER  # noqa: N815

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def assert_clean(self) -> None:
        assert not self.violations, "requests GitLab's API documentation does not allow:\n" + "\n".join(
            self.violations)

    def _answer(self, request: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(request.path)
        raw_query = parse_qs(parts.query, keep_blank_values=True)
        query = {k: v[-1] for k, v in raw_query.items()}
        token = request.headers.get("PRIVATE-TOKEN") or ""
        route, allowed = "", set[str]()
        params: tuple[str, ...] = ()
        for name, method, pattern, extra in _ROUTES:
            match = pattern.match(parts.path)
            if match and method == request.command:
                route, params, allowed = name, tuple(unquote(p) for p in match.groups()), extra | _COMMON
                break
        call = Call(request.command, parts.path, route, query, token)
        with self._lock:
            self.calls.append(call)
        status, body, headers = self._handle(call, params, allowed, raw_query)
        call.status = status
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        for key, value in headers.items():
            request.send_header(key, value)
        request.send_header("Content-Length", str(0 if request.command == "HEAD" else len(data)))
        request.end_headers()
        if request.command != "HEAD":
            request.wfile.write(data)

    def _violation(self, call: Call, why: str) -> tuple[int, Any, dict[str, str]]:
        self.violations.append(f"{call.method} {call.path}?{call.query}: {why}")
        return 400, {"error": why}, {}

    def _handle(self, call: Call, params: tuple[str, ...], allowed: set[str],
                raw_query: dict[str, list[str]]) -> tuple[int, Any, dict[str, str]]:
        if not call.route:
            return self._violation(call, "no such endpoint in the documented API")
        unknown = set(call.query) - allowed
        if unknown:
            return self._violation(call, f"unknown query parameters {sorted(unknown)}")
        if any(len(v) > 1 for v in raw_query.values()):
            return self._violation(call, "a query parameter given twice")
        for key in _BOOLEANS & set(call.query):
            if call.query[key] not in ("true", "false"):
                return self._violation(call, f"{key}={call.query[key]!r} is not a boolean")
        if not call.query.get("per_page", "20").isdigit() or not 1 <= int(call.query.get("per_page", "20")) <= 100:
            return self._violation(call, "per_page must be 1..100")
        if call.route in ("file", "file-head") and not call.query.get("ref"):
            return self._violation(call, "ref is required")
        for fault in self._faults:
            if fault.route == call.route and fault.times > 0:
                fault.times -= 1
                return fault.status, fault.body, {}
        if self.token and call.token and call.token != self.token:
            return 401, {"message": "401 Unauthorized"}, {}
        seen = [p for p in self.projects if p.public or (self.token and call.token == self.token)]
        if call.route == "api-root":
            return 404, {"error": "404 Not Found"}, {}
        if call.route == "group-projects":
            return self._group_projects(call, params[0], seen)
        project = next((p for p in seen if str(p.id) == params[0] or f"{p.group}/{p.path}" == params[0]), None)
        if project is None:
            return 404, {"message": "404 Project Not Found"}, {}
        if call.route == "project":
            return 200, project.doc(self.groups), {}
        if call.route == "branch":
            if params[1] not in project.branches:
                return 404, {"message": "404 Branch Not Found"}, {}
            return 200, _branch(project, params[1]), {}
        if call.route == "branches":
            return self._paged(call, [_branch(project, name) for name in sorted(project.branches)])
        ref = call.query.get("ref") or project.default_branch or ""
        files = project.files.get(ref, set()) if ref in project.branches else set()
        if call.route == "file" and params[1] not in files:
            return 404, {"message": "404 File Not Found"}, {}
        if call.route == "file":
            return 200, {"file_name": params[1].rpartition("/")[2], "file_path": params[1], "size": 10,
                         "encoding": "base64", "content": "a2luZDogTGlzdAo=", "content_sha256": "0" * 64,
                         "ref": ref, "blob_id": "b" * 40, "commit_id": project.branches[ref],
                         "last_commit_id": project.branches[ref], "execute_filemode": False}, {}
        if call.route == "file-head":
            if params[1] not in files:
                return 404, b"", {}
            return 200, b"", {"X-Gitlab-File-Path": params[1], "X-Gitlab-Ref": ref,
                              "X-Gitlab-Commit-Id": project.branches[ref], "X-Gitlab-Size": "10"}
        return self._tree(call, files, call.query.get("path", "").strip("/"))

    def _group_projects(self, call: Call, group: str, seen: list[Project]) -> tuple[int, Any, dict[str, str]]:
        full = next((g for g, i in self.groups.items() if g == group or str(i) == group), None)
        inside = [p for p in self.projects if p.group == full or p.group.startswith(f"{full}/")]
        if full is None or (inside and not any(p in seen for p in inside)):  # a private group is not seen
            return 404, {"message": "404 Group Not Found"}, {}
        subgroups = call.query.get("include_subgroups") == "true"
        shared = call.query.get("with_shared", "true") == "true"
        archived = call.query.get("archived")
        topics = [t for t in call.query.get("topic", "").split(",") if t]
        out = []
        for p in seen:
            own = p.group == full or (subgroups and p.group.startswith(full + "/"))
            if not (own or (shared and full in p.shared_with)):
                continue
            if archived is not None and p.archived != (archived == "true"):
                continue
            if not all(t in p.topics for t in topics):
                continue
            out.append(p.doc(self.groups))
        return self._paged(call, out)

    def _tree(self, call: Call, files: set[str], path: str) -> tuple[int, Any, dict[str, str]]:
        prefix = f"{path}/" if path else ""
        below = sorted(f[len(prefix):] for f in files if f.startswith(prefix))
        if path and not below:
            return 404, {"message": "404 Tree Not Found"}, {}
        entries: dict[str, str] = {}
        for rest in below:
            head, slash, _ = rest.partition("/")
            entries.setdefault(head, "tree" if slash else "blob")
        return self._paged(call, [{"id": "b" * 40, "name": name, "type": kind, "path": prefix + name,
                                   "mode": "040000" if kind == "tree" else "100644"}
                                  for name, kind in sorted(entries.items())])

    def _paged(self, call: Call, items: list[Any]) -> tuple[int, Any, dict[str, str]]:
        per_page = int(call.query.get("per_page", "20"))
        page = max(1, int(call.query.get("page", "1") or 1))
        pages = max(1, -(-len(items) // per_page))
        headers = {"x-page": str(page), "x-per-page": str(per_page), "x-total": str(len(items)),
                   "x-total-pages": str(pages), "x-next-page": str(page + 1) if page < pages else "",
                   "x-prev-page": str(page - 1) if page > 1 else ""}
        url = f"{self.base_url}{call.path}"

        def link(number: int, rel: str) -> str:
            query = "&".join(f"{k}={quote(v)}" for k, v in {**call.query, "page": str(number)}.items())
            return f'<{url}?{query}>; rel="{rel}"'

        links = [link(page + 1, "next")] if page < pages else []
        headers["Link"] = ", ".join([*links, link(1, "first"), link(pages, "last")])
        return 200, items[(page - 1) * per_page: page * per_page], headers


def _branch(project: Project, name: str) -> dict[str, Any]:
    sha = project.branches[name]
    return {"name": name, "merged": False, "protected": name == project.default_branch,
            "default": name == project.default_branch, "developers_can_push": False, "developers_can_merge": False,
            "can_push": True, "web_url": f"https://{HOST}/{project.group}/{project.path}/-/tree/{name}",
            "commit": {"id": sha, "short_id": sha[:8], "created_at": "2024-01-02T10:00:00.000Z",
                       "parent_ids": [], "title": "add projects API", "message": "add projects API",
                       "author_name": "John Smith", "author_email": "john@example.com",
                       "authored_date": "2024-01-02T10:00:00.000Z", "committer_name": "John Smith",
                       "committer_email": "john@example.com", "committed_date": "2024-01-02T10:00:00.000Z",
                       "web_url": f"https://{HOST}/{project.group}/{project.path}/-/commit/{sha}"}}


@pytest.fixture(scope="session")
def gitlab_session() -> Iterator[GitLabStandIn]:
    """One stand-in for the session, started before the session's Argo CD, whose loopback-only network
    namespace relays its port (`argocd_session`'s `reach`): the ApplicationSet oracle points both tools at it."""
    standin = GitLabStandIn().start()
    try:
        yield standin
    finally:
        standin.stop()


@pytest.fixture
def gitlab_standin() -> Iterator[GitLabStandIn]:
    standin = GitLabStandIn().start()
    try:
        yield standin
    finally:
        standin.stop()
    standin.assert_clean()
