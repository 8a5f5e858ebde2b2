"""A GitHub REST API stand-in for tests, driven by GitHub's own OpenAPI description.

GitHub cannot be reached from here, so tests talk to this local HTTP server instead. It reads the
`@octokit/openapi` npm package (GitHub's official description, pinned in `tests/support/npm.py`, fetched
once into `~/.cache/tidecd/npm/`) and for every request:

- finds the operation by path template and method; a path or method the spec does not have is a violation;
- validates path and query parameters (unknown query parameters too) and the JSON body against the
  operation's schemas (OpenAPI 3.0 semantics via `openapi-schema-validator`); a mismatch is a violation;
- answers with the spec's own example response for the operation's success status, with
  `https://api.github.com` replaced by the stand-in's address, adjusted by small stateful handlers where
  a test needs state (commit statuses, issue comments, deployments and their statuses, a pull request's
  head and files as a test sets them);
- records every call (`standin.calls`: method, path, operationId, query, body, Authorization header).

A violation answers 400 and is kept in `standin.violations`; the `github_standin` fixture fails the test
at teardown if any request did not match the spec. Use it like this:

    def test_something(github_standin):
        gh = github.Github(auth=Auth.Token("t"), base_url=github_standin.base_url, retry=None)
        gh.get_repo("octo/app", lazy=True).get_commit("a" * 40).create_status("pending", context="x")
        assert github_standin.status_states("octo/app", "a" * 40, "x") == ["pending"]

For tidecd itself set `TIDECD_GITHUB_API_URL=github_standin.base_url` (see `tidecd.clients.github`). Fault
injection: `standin.fail_next("repos/create-commit-status", 403, headers={...})` answers the next matching
call(s) with that status instead (rate limits, 422 "too many statuses", 5xx outages).

Fixtures: `github_spec` (session: the parsed spec, compiled once) and `github_standin` (per test: a fresh
server with empty state, stopped and checked at teardown). `webhook_examples` (session) loads
`@octokit/webhooks-examples`: `webhook_examples["pull_request"]` is the list of example payloads.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.support.npm import OPENAPI_PACKAGE, WEBHOOKS_EXAMPLES_PACKAGE, npm_package

SPEC_URI = "urn:github-openapi"
GITHUB_API = "https://api.github.com"


@dataclass
class Call:
    method: str
    path: str
    operation_id: str
    query: dict[str, list[str]]
    body: Any
    authorization: str
    status: int = 0


@dataclass
class Operation:
    operation_id: str
    method: str
    template: str
    regex: re.Pattern[str]
    param_names: list[str]
    literal: int  # characters outside parameters: the most specific template wins
    spec: dict[str, Any]
    pointer: str  # JSON pointer of the operation in the spec


class Spec:
    """The parsed OpenAPI description with a route table and cached schema validators."""

    def __init__(self, doc: dict[str, Any]) -> None:
        from openapi_schema_validator import OAS30WriteValidator
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT4

        self.doc = doc
        self._validator_class = OAS30WriteValidator
        self._registry: Any = Registry().with_resource(SPEC_URI, Resource.from_contents(doc, DRAFT4))
        self._validators: dict[str, Any] = {}
        self.operations: list[Operation] = []
        for template, item in doc["paths"].items():
            regex, names = _compile_template(template, item)
            literal = len(re.sub(r"\{[^}]+\}", "", template))
            for method, op in item.items():
                if method in ("get", "post", "put", "patch", "delete") and isinstance(op, dict):
                    pointer = "/paths/" + _escape(template) + "/" + method
                    self.operations.append(Operation(op.get("operationId", ""), method.upper(), template, regex,
                                                     names, literal, op, pointer))

    def resolve(self, node: Any) -> Any:
        while isinstance(node, dict) and "$ref" in node:
            node = self.pointer(node["$ref"].removeprefix("#"))
        return node

    def pointer(self, pointer: str) -> Any:
        node: Any = self.doc
        for part in pointer.strip("/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def validate(self, pointer: str, value: Any) -> list[str]:
        """Errors of `value` against the schema at `pointer` (refs resolved within the spec)."""
        validator = self._validators.get(pointer)
        if validator is None:
            validator = self._validator_class({"$ref": f"{SPEC_URI}#{pointer}"}, registry=self._registry)
            self._validators[pointer] = validator
        return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message[:300]}"
                for e in validator.iter_errors(value)]

    def route(self, method: str, path: str) -> tuple[Operation | None, dict[str, str], bool]:
        """(operation, path parameters, whether the path exists for some other method)."""
        best: tuple[Operation, dict[str, str]] | None = None
        path_known = False
        for op in self.operations:
            match = op.regex.fullmatch(path)
            if match is None:
                continue
            path_known = True
            if op.method != method:
                continue
            if best is None or op.literal > best[0].literal:
                best = (op, dict(zip(op.param_names, match.groups(), strict=True)))
        return (best[0], best[1], True) if best else (None, {}, path_known)


def _escape(template: str) -> str:
    return template.replace("~", "~0").replace("/", "~1")


def _compile_template(template: str, item: dict[str, Any]) -> tuple[re.Pattern[str], list[str]]:
    multi = {p.get("name") for op in item.values() if isinstance(op, dict)
             for p in op.get("parameters", []) if isinstance(p, dict) and p.get("x-multi-segment")}
    names: list[str] = []
    pattern = ""
    for part in re.split(r"(\{[^}]+\})", template):
        if part.startswith("{") and part.endswith("}"):
            names.append(part[1:-1])
            pattern += "(.+)" if part[1:-1] in multi else "([^/]+)"
        else:
            pattern += re.escape(part)
    return re.compile(pattern), names


# --- the server ------------------------------------------------------------------------------------------


@dataclass
class _Fault:
    operation_id: str
    status: int
    body: Any
    headers: dict[str, str]
    times: int


@dataclass
class GitHubStandIn:
    spec: Spec
    calls: list[Call] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    statuses: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    comments: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    deployments: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    deployment_statuses: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    pull_files: dict[tuple[str, int], list[str]] = field(default_factory=dict)  # set by tests: a PR's files
    # set by tests: a PR as `pulls/get` answers it; keys `head_sha`, `head_repo` (a full_name, None for a
    # deleted fork; default: the base repo), `base_ref`, `state`, `labels` (names); the rest is the spec's example
    pull_heads: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    base_url: str = ""
    _faults: list[_Fault] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1001))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> GitHubStandIn:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                return

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, headers, body = standin.handle(self.command, self.path, dict(self.headers), raw)
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, args=(0.05,), name="github-standin", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- test helpers ---------------------------------------------------------------------------------

    def comment_bodies(self, repo: str, number: int) -> list[str]:
        return [c["body"] for c in self.comments.get((repo, number), [])]

    def fail_next(self, operation_id: str, status: int, *, body: Any = None, headers: dict[str, str] | None = None,
                  times: int = 1) -> None:
        """Answer the next `times` calls of `operation_id` with `status` (GitHub's error body shape)."""
        body = body if body is not None else {"message": f"stand-in fault {status}",
                                               "documentation_url": "https://docs.github.com/rest"}
        self._faults.append(_Fault(operation_id, status, body, headers or {}, times))

    def calls_to(self, operation_id: str) -> list[Call]:
        return [c for c in self.calls if c.operation_id == operation_id]

    def status_states(self, repo: str, sha: str, context: str) -> list[str]:
        """The states posted for (repo, sha, context), oldest first."""
        return [s["state"] for s in reversed(self.statuses.get((repo, sha), [])) if s["context"] == context]

    def assert_clean(self) -> None:
        assert not self.violations, "requests the GitHub OpenAPI spec does not allow:\n" + "\n".join(self.violations)

    # -- request handling -----------------------------------------------------------------------------

    def handle(self, method: str, target: str, headers: dict[str, str],
               raw: bytes) -> tuple[int, dict[str, str], Any]:
        url = urlsplit(target)
        query = parse_qs(url.query, keep_blank_values=True)
        auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        op, params, path_known = self.spec.route(method, url.path)
        call = Call(method, url.path, op.operation_id if op else "", query, None, auth)
        with self._lock:
            self.calls.append(call)
        problems: list[str] = []
        if op is None:
            problems.append(f"{method} {url.path}: " + ("method not allowed" if path_known else "no such path"))
        else:
            body, problems = self._check(op, params, query, raw)
            call.body = body
        if problems:
            with self._lock:
                self.violations.extend(problems)
            call.status = 400
            return 400, {}, {"message": "request does not match the GitHub OpenAPI spec", "errors": problems}
        assert op is not None
        fault = self._fault(op.operation_id)
        if fault is not None:
            call.status = fault.status
            return fault.status, fault.headers, fault.body
        status, body = self._answer(op, params, query, call.body)
        call.status = status
        return status, {}, body

    def _fault(self, operation_id: str) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.operation_id == operation_id and fault.times > 0:
                    fault.times -= 1
                    return fault
        return None

    def _check(self, op: Operation, params: dict[str, str], query: dict[str, list[str]],
               raw: bytes) -> tuple[Any, list[str]]:
        where = f"{op.method} {op.template} ({op.operation_id})"
        problems: list[str] = []
        declared = {}
        path_item = self.spec.doc["paths"][op.template]
        for index, param in enumerate([*path_item.get("parameters", []), *op.spec.get("parameters", [])]):
            param = self.spec.resolve(param)
            declared[(param["in"], param["name"])] = (param, index)
        for name, value in params.items():
            entry = declared.get(("path", name))
            if entry and (errors := self._param_errors(entry[0], value)):
                problems.append(f"{where}: path parameter {name}={value!r}: {errors}")
        for name, values in query.items():
            entry = declared.get(("query", name))
            if entry is None:
                problems.append(f"{where}: query parameter {name!r} is not in the spec")
            elif errors := self._param_errors(entry[0], values[-1]):
                problems.append(f"{where}: query parameter {name}={values[-1]!r}: {errors}")
        for (place, name), (param, _) in declared.items():
            if place == "query" and param.get("required") and name not in query:
                problems.append(f"{where}: required query parameter {name!r} missing")
        body: Any = None
        request_body = self.spec.resolve(op.spec.get("requestBody")) if op.spec.get("requestBody") else None
        if raw.strip():
            try:
                body = json.loads(raw)
            except ValueError:
                problems.append(f"{where}: body is not JSON")
                return None, problems
            if request_body is None:
                problems.append(f"{where}: the operation takes no request body")
            elif "application/json" in request_body.get("content", {}):
                pointer = self._body_pointer(op, request_body)
                problems += [f"{where}: body {e}" for e in self.spec.validate(pointer, body)]
        elif request_body is not None and request_body.get("required"):
            problems.append(f"{where}: a request body is required")
        return body, problems

    def _body_pointer(self, op: Operation, request_body: dict[str, Any]) -> str:
        ref = op.spec["requestBody"].get("$ref")
        base = ref.removeprefix("#") if ref else op.pointer + "/requestBody"
        return base + "/content/application~1json/schema"

    def _param_errors(self, param: dict[str, Any], value: str) -> str:
        schema = self.spec.resolve(param.get("schema", {}))
        kind = schema.get("type")
        coerced: Any = value
        try:
            if kind == "integer":
                coerced = int(value)
            elif kind == "number":
                coerced = float(value)
            elif kind == "boolean":
                if value not in ("true", "false"):
                    return "not a boolean"
                coerced = value == "true"
            elif kind == "array":
                coerced = value.split(",")
        except ValueError:
            return f"not {kind}"
        from openapi_schema_validator import OAS30WriteValidator

        errors = [e.message for e in OAS30WriteValidator(schema).iter_errors(coerced)]
        return "; ".join(errors)

    # -- answers --------------------------------------------------------------------------------------

    def example(self, op: Operation) -> tuple[int, Any]:
        """The spec's example answer for the operation's success status, pointing at this server."""
        responses = op.spec.get("responses", {})
        code = min((c for c in responses if c.startswith("2")), default="200")
        response = self.spec.resolve(responses.get(code, {}))
        content = response.get("content", {}).get("application/json", {})
        examples = content.get("examples") or {}
        value: Any = None
        if examples:
            value = copy.deepcopy(self.spec.resolve(next(iter(examples.values()))).get("value"))
        elif "example" in content:
            value = copy.deepcopy(content["example"])
        elif content:
            value = {}
        return int(code), self._rebase(value)

    def _rebase(self, value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(GITHUB_API, self.base_url)
        if isinstance(value, list):
            return [self._rebase(v) for v in value]
        if isinstance(value, dict):
            return {k: self._rebase(v) for k, v in value.items()}
        return value

    def _answer(self, op: Operation, params: dict[str, str], query: dict[str, list[str]],
                body: Any) -> tuple[int, Any]:
        status, example = self.example(op)
        handler = getattr(self, "_on_" + op.operation_id.replace("/", "_").replace("-", "_"), None)
        if handler is None:
            return status, example
        repo = f"{params.get('owner', '')}/{params.get('repo', '')}"
        with self._lock:
            return status, handler(example, repo, params, query, body or {})

    def _repo_url(self, repo: str) -> str:
        return f"{self.base_url}/repos/{repo}"

    def _on_repos_create_commit_status(self, example: Any, repo: str, params: dict[str, str],
                                       query: Any, body: dict[str, Any]) -> Any:
        sha = params["sha"]
        ident = next(self._ids)
        status = example | {"id": ident, "state": body["state"], "context": body.get("context", "default"),
                            "description": body.get("description"), "target_url": body.get("target_url"),
                            "url": f"{self._repo_url(repo)}/statuses/{sha}", "created_at": _now(),
                            "updated_at": _now()}
        self.statuses.setdefault((repo, sha), []).insert(0, status)
        return status

    def _on_repos_list_commit_statuses_for_ref(self, example: Any, repo: str, params: dict[str, str],
                                               query: Any, body: Any) -> Any:
        return _page(self.statuses.get((repo, params["ref"]), []), query)

    def _on_issues_list_comments(self, example: Any, repo: str, params: dict[str, str], query: Any,
                                 body: Any) -> Any:
        return _page(self.comments.get((repo, int(params["issue_number"])), []), query)

    def _on_issues_create_comment(self, example: Any, repo: str, params: dict[str, str], query: Any,
                                  body: dict[str, Any]) -> Any:
        number, ident = int(params["issue_number"]), next(self._ids)
        comment = example | {"id": ident, "node_id": f"IC_{ident}", "body": body["body"],
                             "url": f"{self._repo_url(repo)}/issues/comments/{ident}",
                             "issue_url": f"{self._repo_url(repo)}/issues/{number}",
                             "html_url": f"https://github.com/{repo}/pull/{number}#issuecomment-{ident}",
                             "created_at": _now(), "updated_at": _now()}
        self.comments.setdefault((repo, number), []).append(comment)
        return comment

    def _on_issues_update_comment(self, example: Any, repo: str, params: dict[str, str], query: Any,
                                  body: dict[str, Any]) -> Any:
        ident = int(params["comment_id"])
        for (owner_repo, _), items in self.comments.items():
            for comment in items:
                if owner_repo == repo and comment["id"] == ident:
                    comment.update(body=body["body"], updated_at=_now())
                    return comment
        return example | {"id": ident, "body": body["body"]}

    def _on_repos_create_deployment(self, example: Any, repo: str, params: dict[str, str], query: Any,
                                    body: dict[str, Any]) -> Any:
        ident = next(self._ids)
        deployment = example | {"id": ident, "node_id": f"DE_{ident}", "ref": body["ref"], "sha": body["ref"],
                                "environment": body.get("environment", "production"),
                                "description": body.get("description"), "payload": body.get("payload", {}),
                                "url": f"{self._repo_url(repo)}/deployments/{ident}",
                                "statuses_url": f"{self._repo_url(repo)}/deployments/{ident}/statuses",
                                "repository_url": self._repo_url(repo)}
        self.deployments.setdefault(repo, []).insert(0, deployment)
        return deployment

    def _on_repos_list_deployments(self, example: Any, repo: str, params: dict[str, str],
                                   query: dict[str, list[str]], body: Any) -> Any:
        found = [d for d in self.deployments.get(repo, [])
                 if all(d.get(k) == query[k][-1] for k in ("sha", "ref", "environment") if k in query)]
        return _page(found, query)

    def _on_repos_create_deployment_status(self, example: Any, repo: str, params: dict[str, str], query: Any,
                                           body: dict[str, Any]) -> Any:
        deployment, ident = int(params["deployment_id"]), next(self._ids)
        status = example | {"id": ident, "state": body["state"], "description": body.get("description", ""),
                            "environment": body.get("environment", ""),
                            "environment_url": body.get("environment_url", ""), "log_url": body.get("log_url", ""),
                            "url": f"{self._repo_url(repo)}/deployments/{deployment}/statuses/{ident}",
                            "deployment_url": f"{self._repo_url(repo)}/deployments/{deployment}"}
        self.deployment_statuses.setdefault((repo, deployment), []).append(status)
        return status

    def _on_repos_list_deployment_statuses(self, example: Any, repo: str, params: dict[str, str],
                                           query: Any, body: Any) -> Any:
        return _page(list(reversed(self.deployment_statuses.get((repo, int(params["deployment_id"])), []))), query)

    def _on_pulls_get(self, example: Any, repo: str, params: dict[str, str], query: Any, body: Any) -> Any:
        number = int(params["pull_number"])
        wanted = self.pull_heads.get((repo, number))
        if wanted is None:
            return example
        answer = copy.deepcopy(example) | {"number": number, "state": wanted.get("state", "open")}
        answer["base"]["repo"] = answer["base"]["repo"] | {"full_name": repo, "name": repo.split("/")[-1]}
        answer["base"]["ref"] = wanted.get("base_ref", answer["base"]["ref"])
        answer["head"]["sha"] = wanted.get("head_sha", answer["head"]["sha"])
        head_repo = wanted.get("head_repo", repo)
        answer["head"]["repo"] = None if head_repo is None else answer["head"]["repo"] | {
            "full_name": head_repo, "name": head_repo.split("/")[-1]}
        template = example["labels"][0] if example.get("labels") else {}
        answer["labels"] = [template | {"name": name} for name in wanted.get("labels", [])]
        return answer

    def _on_pulls_list_files(self, example: Any, repo: str, params: dict[str, str], query: Any,
                             body: Any) -> Any:
        files = self.pull_files.get((repo, int(params["pull_number"])))
        if files is None:
            return example
        template = example[0] if isinstance(example, list) and example else {}
        return _page([template | {"filename": name, "sha": "0" * 40} for name in files], query)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _page(items: list[dict[str, Any]], query: dict[str, list[str]]) -> list[dict[str, Any]]:
    size = int(query.get("per_page", ["30"])[-1])
    page = int(query.get("page", ["1"])[-1])
    return items[(page - 1) * size: page * size]


# --- fixtures --------------------------------------------------------------------------------------------


def load_spec() -> Spec:
    folder = npm_package(*OPENAPI_PACKAGE)
    with (folder / "generated" / "api.github.com.json").open("rb") as handle:
        return Spec(json.load(handle))


def load_webhook_examples() -> dict[str, list[dict[str, Any]]]:
    """`@octokit/webhooks-examples`: event name → example payloads."""
    folder = npm_package(*WEBHOOKS_EXAMPLES_PACKAGE)
    entries = json.loads((folder / "api.github.com" / "index.json").read_text())
    return {entry["name"]: entry["examples"] for entry in entries}


@pytest.fixture(scope="session")
def github_spec() -> Spec:
    return load_spec()


@pytest.fixture
def github_standin(github_spec: Spec) -> Iterator[GitHubStandIn]:
    standin = GitHubStandIn(github_spec).start()
    try:
        yield standin
    finally:
        standin.stop()
    standin.assert_clean()


@pytest.fixture(scope="session")
def webhook_examples() -> dict[str, list[dict[str, Any]]]:
    return load_webhook_examples()
