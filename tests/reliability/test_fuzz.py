"""Property-based fuzzing of every parser of hostile input: whatever arrives, the answer is a clear error
of tidecd's own (or an HTTP status), never a crash, and nothing is written outside a checkout.

`make test` runs the `ci` profile (60 examples each, derandomized); `make fuzz` the `fuzz` profile.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import io
import json
import re
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tidecd.base.errors import ConfigError, LimitExceeded, SecretError, UnsafePathError
from tidecd.clients import secrets
from tidecd.clients.store import MemoryStore
from tidecd.config.load import load_config
from tidecd.runtime import Runtime, Settings
from tidecd.source import extract
from tidecd.usecases import api
from tidecd.usecases import webhook as hooks

SECRET = "fuzz-secret"
TOKEN = "fuzz-token"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30,
)
push_like = st.fixed_dictionaries({}, optional={
    "ref": st.one_of(st.text(max_size=30), st.just("refs/heads/main"), json_values),
    "after": st.one_of(st.text(alphabet="0123456789abcdef", max_size=40), json_values),
    "repository": st.one_of(json_values, st.fixed_dictionaries({}, optional={
        "clone_url": st.one_of(st.just("https://github.com/acme/deploy.git"), st.text(max_size=30), json_values),
        "default_branch": st.one_of(st.just("main"), json_values)})),
    "project": json_values,
    "commits": st.one_of(json_values, st.lists(st.fixed_dictionaries({}, optional={
        "added": st.lists(st.text(max_size=20), max_size=3), "modified": json_values}), max_size=4)),
    "deleted": json_values, "forced": json_values, "total_commits_count": json_values,
})

_CONFIG = Path(tempfile.mkdtemp(prefix="tidecd-fuzz-config-"))


def _runtime() -> Runtime:
    return Runtime(settings=Settings(config=str(_CONFIG), webhook_secret=SECRET, api_token=TOKEN),
                   store=MemoryStore())


class _Recorder:
    def dispatch(self, refreshes: Any) -> dict[str, str]:
        return {}


def _sign(body: bytes) -> str:
    return "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()


@given(payload=push_like, event=st.sampled_from(["push", "ping", "issues", ""]),
       form=st.booleans(), junk=st.binary(max_size=40))
def test_webhook_answers_every_signed_payload(payload: dict[str, Any], event: str, form: bool, junk: bytes) -> None:
    body = json.dumps(payload).encode() if not junk or len(junk) % 3 else junk
    content_type = "application/json"
    if form:
        from urllib.parse import urlencode

        body, content_type = urlencode({"payload": body.decode("utf-8", "replace")}).encode(), \
            "application/x-www-form-urlencoded"
    headers = {"X-GitHub-Event": event, "X-Hub-Signature-256": _sign(body), "Content-Type": content_type,
               "X-GitHub-Delivery": "d-1"}
    answer = hooks.handle(headers, body, _runtime(), _Recorder())  # type: ignore[arg-type]
    assert answer.status in (200, 202, 400, 413, 503), answer
    json.dumps(answer.body)


@given(headers=st.dictionaries(st.sampled_from(["X-GitHub-Event", "X-Gitlab-Event", "X-Hub-Signature-256",
                                                "X-Gitlab-Token", "Content-Length", "X-GitHub-Delivery",
                                                "Content-Type"]), st.text(max_size=80), max_size=7),
       body=st.binary(max_size=200))
def test_webhook_refuses_unsigned_or_odd_requests_cleanly(headers: dict[str, str], body: bytes) -> None:
    answer = hooks.handle(headers, body, _runtime(), _Recorder())  # type: ignore[arg-type]
    assert answer.status in (200, 202, 400, 401, 413, 503), answer
    if answer.status >= 400:
        assert SECRET not in json.dumps(answer.body)


registry_like = st.fixed_dictionaries({}, optional={
    "repository": st.one_of(json_values, st.fixed_dictionaries({}, optional={"repo_name": json_values})),
    "push_data": json_values, "docker_url": st.one_of(st.just("quay.io/acme/web"), st.text(max_size=30), json_values),
    "updated_tags": json_values, "type": st.one_of(st.sampled_from(["PUSH_ARTIFACT", "harbor.artifact.pushed"]),
                                                   json_values),
    "specversion": json_values, "data": json_values,
    "event_data": st.one_of(json_values, st.fixed_dictionaries({"resources": st.lists(st.one_of(
        json_values, st.fixed_dictionaries({}, optional={"resource_url": st.one_of(st.text(max_size=40), json_values),
                                                         "tag": json_values})), max_size=3)})),
    "action": st.one_of(st.sampled_from(["INSERT", "DELETE", "published"]), json_values),
    "tag": st.one_of(st.text(max_size=40), json_values), "digest": json_values,
    "package": st.one_of(json_values, st.fixed_dictionaries({}, optional={
        "package_type": st.one_of(st.just("CONTAINER"), json_values), "name": json_values,
        "namespace": json_values, "package_version": json_values, "registry": json_values})),
})


@given(payload=registry_like, source=st.sampled_from(["dockerhub", "quay", "harbor", "github"]),
       junk=st.binary(max_size=40))
def test_registry_notifications_with_a_good_proof_are_answered_cleanly(payload: dict[str, Any], source: str,
                                                                       junk: bytes) -> None:
    """Every authenticated registry notification, however malformed, is a JSON answer (never a crash, and
    nothing triggered from a payload no app follows)."""
    from tidecd.usecases import registry_events as events

    body = json.dumps(payload).encode() if not junk or len(junk) % 3 else junk
    token = events.source_token(SECRET, source)
    if source == "github":
        headers, path = {"X-GitHub-Event": "package", "X-Hub-Signature-256": _sign(body)}, "/"
    elif source == "harbor":
        headers, path = {"Authorization": token}, "/registry/harbor"
    else:
        headers, path = {}, f"/registry/{source}/{token}"
    answer = hooks.handle(headers, body, _runtime(), _Recorder(), path=path)  # type: ignore[arg-type]
    assert answer.status in (200, 400), answer
    assert token not in json.dumps(answer.body) and SECRET not in json.dumps(answer.body)


app_docs = st.fixed_dictionaries({
    "apiVersion": st.sampled_from(["argoproj.io/v1alpha1", "v1", "bitnami.com/v1alpha1", "x"]),
    "kind": st.sampled_from(["Application", "AppProject", "Secret", "SealedSecret", "ConfigMap"]),
}, optional={"metadata": st.one_of(json_values, st.fixed_dictionaries({"name": st.text(max_size=12)})),
             "spec": json_values, "data": json_values})


@given(docs=st.lists(st.one_of(app_docs, json_values), max_size=4), raw=st.text(max_size=200),
       use_raw=st.booleans())
def test_config_loader_never_crashes(docs: list[Any], raw: str, use_raw: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="tidecd-fuzz-") as tmp:
        good = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "good"},
                "spec": {"project": "default", "source": {"repoURL": "https://g.example/a.git", "path": "."},
                         "destination": {"server": "https://kubernetes.default.svc", "namespace": "x"}}}
        Path(tmp, "good.yaml").write_text(yaml.safe_dump(good))
        Path(tmp, "fuzz.yaml").write_text(raw if use_raw else yaml.safe_dump_all(docs))
        config = load_config(Path(tmp), strict=False)
        assert "good" in config.applications or "good" in config.invalid
        with contextlib.suppress(ConfigError):  # strict loading refuses, but only with a ConfigError
            load_config(Path(tmp), strict=True)


_KEYS: list[bytes] = []


def _keys() -> list[bytes]:
    if not _KEYS:
        _KEYS.append(secrets.generate_key().private_pem)
    return _KEYS


sealed_like = st.fixed_dictionaries({
    "apiVersion": st.sampled_from(["bitnami.com/v1alpha1", "v1"]),
    "kind": st.sampled_from(["SealedSecret", "Secret"]),
}, optional={
    "metadata": st.one_of(json_values, st.fixed_dictionaries({"name": st.text(max_size=10)}, optional={
        "namespace": st.text(max_size=10), "annotations": json_values})),
    "spec": st.one_of(json_values, st.fixed_dictionaries({}, optional={
        "encryptedData": st.one_of(json_values, st.dictionaries(st.text(max_size=8), st.text(max_size=60))),
        "template": json_values, "data": json_values})),
})


@given(sealed=sealed_like)
def test_sealed_secret_parser_only_raises_secret_errors(sealed: dict[str, Any]) -> None:
    try:
        secrets.unseal(sealed, _keys(), default_namespace="ns")
    except SecretError as exc:
        assert "\n" not in str(exc)[:1] and len(str(exc)) < 2000


members = st.lists(st.tuples(
    st.one_of(st.text(alphabet="ab./", min_size=1, max_size=12), st.sampled_from(["../x", "/etc/x", "a/../../x"])),
    st.sampled_from([tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE]),
    st.one_of(st.text(alphabet="ab./", max_size=12), st.sampled_from(["/", "..", "../../etc", "a"])),
    st.binary(max_size=20)), max_size=8)


@given(entries=members)
def test_tar_extraction_never_writes_outside(entries: list[tuple[str, bytes, str, bytes]]) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, kind, link, data in entries:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = link
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    with tempfile.TemporaryDirectory(prefix="tidecd-fuzz-") as tmp:
        outside = Path(tmp) / "outside"
        outside.mkdir()
        dest = Path(tmp) / "box" / "out"
        try:
            extract(buffer.getvalue(), dest)
        except (UnsafePathError, LimitExceeded):
            assert not dest.exists(), "a refused archive leaves nothing behind"
        assert list(outside.iterdir()) == []
        for path in (Path(tmp) / "box").rglob("*"):
            if path.is_symlink():
                assert Path(tmp, "box", "out").resolve() in path.resolve().parents
        assert sorted(p.name for p in Path(tmp).iterdir()) == ["box", "outside"]


@given(body=st.one_of(st.binary(max_size=100), json_values.map(lambda v: json.dumps(v).encode()),
                      st.integers(1, 5000).map(lambda n: b'{"a":' + b"[" * n + b"]" * n + b"}")),
       method=st.sampled_from(["GET", "POST", "PUT"]),
       path=st.sampled_from(["/api/v1/apps", "/api/v1/apps/nope", "/api/v1/apps/nope/sync",
                             "/api/v1/apps/nope/rollback", "/api/v1/nothing"]))
def test_api_body_parser_answers_json(body: bytes, method: str, path: str) -> None:
    answer = api.handle(method, path, {"Authorization": f"Bearer {TOKEN}"}, body, _runtime())
    assert 200 <= answer.status < 600
    assert isinstance(answer.body, dict)
    json.dumps(answer.body)


# --- foreign answers: the OCI registry, the helm index, webhook and notification payloads (issue 29) -------
#
# The property of each: any input gives a parsed value, or one of tidecd's own errors that names the source
# (the registry, the repository, the payload's field), never another exception, and in bounded time.

SLOW = 5.0  # seconds any one example may take: far above what a parse of these sizes costs


def _bounded(call: Any) -> Any:
    start = time.monotonic()
    try:
        return call()
    finally:
        assert time.monotonic() - start < SLOW, "a parse of a small input took too long"


REGISTRY = "registry.fuzz.example"
descriptor = st.fixed_dictionaries({}, optional={
    "mediaType": st.sampled_from(["application/vnd.oci.image.layer.v1.tar+gzip", "application/vnd.cncf.helm."
                                  "chart.content.v1.tar+gzip", "text/html"]) | json_values,
    "digest": st.sampled_from(["sha256:" + "a" * 64, "sha256:../../x", "md5:1", ""]) | json_values,
    "size": st.integers(-5, 2**70) | json_values,
    "platform": st.fixed_dictionaries({}, optional={"os": st.just("linux") | json_values,
                                                     "architecture": st.just("amd64") | json_values}) | json_values,
})
manifest_like = st.fixed_dictionaries({}, optional={
    "schemaVersion": st.sampled_from([2, 1]) | json_values,
    "mediaType": st.sampled_from(["application/vnd.oci.image.manifest.v1+json",
                                  "application/vnd.oci.image.index.v1+json"]) | json_values,
    "config": descriptor | json_values, "layers": st.lists(descriptor, max_size=4) | json_values,
    "manifests": st.lists(descriptor, max_size=4) | json_values,
    "tags": st.lists(st.text(max_size=12) | json_values, max_size=5) | json_values,
    "created": st.text(max_size=30) | json_values, "token": st.text(max_size=10) | json_values,
})
registry_body = st.one_of(
    manifest_like.map(lambda d: json.dumps(d).encode()),
    st.tuples(manifest_like.map(lambda d: json.dumps(d).encode()), st.integers(0, 60)).map(lambda t: t[0][:t[1]]),
    st.binary(max_size=80),
    st.sampled_from([b"<!doctype html><html><body>Sign in</body></html>", b"", b"null", b"[]",
                     b'{"tags": ' + b"[" * 5000 + b"]" * 5000 + b"}"]),
)
registry_headers = st.fixed_dictionaries({}, optional={
    "Content-Type": st.sampled_from(["application/json", "text/html", "application/vnd.oci.image.index.v1+json",
                                     "application/vnd.oci.image.manifest.v1+json"]) | st.text(max_size=20),
    "Link": st.sampled_from(['</v2/team/app/tags/list?last=x>; rel="next"', '<http://[::1/x>; rel="next"',
                             '<https://elsewhere.example/v2/x>; rel="next"', '<:>; rel=next']) | st.text(max_size=30),
    "Location": st.sampled_from(["http://[::1/x", "/v2/team/app/tags/list", "ftp://x/y", "https://h:99999/"])
    | st.text(max_size=30),
    "Retry-After": st.sampled_from(["²", "9" * 400, "1", "Wed, 21 Oct 2015 07:28:00 GMT", "Fri, 31 Dec 9999"])
    | st.text(max_size=12),
    "WWW-Authenticate": st.sampled_from(['Bearer realm="http://[::1/t",service="x"', 'Basic realm="r"',
                                         'Bearer realm="https://169.254.169.254/t"', "Negotiate"])
    | st.text(max_size=30),
    "Docker-Content-Digest": st.sampled_from(["sha256:" + "b" * 64, "<html>"]) | st.text(max_size=20),
    "Content-Encoding": st.sampled_from(["gzip", "deflate", "br"]),
    "Content-Length": st.sampled_from(["4096", "0", "-1", "x"]),
})
registry_answer = st.tuples(st.sampled_from([200, 200, 200, 302, 307, 401, 404, 429, 500]), registry_headers,
                            registry_body)


class _Session:
    """Hands out the fuzzed answers in turn (the last one again when they run out), as real
    `requests.Response` objects over a urllib3 body: the client reads them as it reads the network's."""

    def __init__(self, answers: list[tuple[int, dict[str, str], bytes]]) -> None:
        self.answers, self.calls = answers, 0

    def get(self, url: str, **_: Any) -> Any:
        import requests
        import urllib3
        from requests.structures import CaseInsensitiveDict

        status, headers, body = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        assert self.calls < 400, "the client keeps asking: unbounded"
        response = requests.Response()
        response.status_code, response.url = status, url
        response.headers = CaseInsensitiveDict(headers)
        response.raw = urllib3.HTTPResponse(body=io.BytesIO(body), headers=headers, status=status,
                                            preload_content=False, decode_content=False,
                                            enforce_content_length=True)
        return response


def _registry_errors() -> tuple[type[BaseException], ...]:
    from tidecd.base.errors import TidecdError

    return (TidecdError,)


@given(answers=st.lists(registry_answer, min_size=1, max_size=4),
       question=st.sampled_from(["tags", "manifest", "digest", "created"]))
def test_the_registry_client_reads_any_answer_into_a_value_or_its_own_error(
        answers: list[tuple[int, dict[str, str], bytes]], question: str) -> None:
    from tidecd.clients.registry import HttpRegistry, Repository

    session = _Session(answers)
    client = HttpRegistry(session=session, sleep=lambda _s: None)  # type: ignore[arg-type]
    repo = Repository(REGISTRY, "team/app")
    asks = {"tags": lambda: client.tags(repo, None), "manifest": lambda: client.manifest(repo, "1.0", None),
            "digest": lambda: client.digest(repo, "1.0", None, ("linux/amd64",)),
            "created": lambda: client.created(repo, "1.0", None)}
    try:
        value = _bounded(asks[question])
    except _registry_errors() as exc:
        assert REGISTRY in str(exc), f"the error names the registry: {exc}"
        return
    if question == "tags":
        assert isinstance(value, list) and all(isinstance(t, str) for t in value)
    if question in ("manifest", "digest"):
        body = value[2] if question == "manifest" else None
        assert body is None or isinstance(json.loads(body), dict), "only a JSON object is taken for a manifest"


@given(manifest=manifest_like, blob=st.binary(max_size=60) | st.sampled_from([b"\x1f\x8b\x08\x00garbage"]),
       headers=registry_headers, status=st.sampled_from([200, 200, 404, 429, 500]))
def test_an_oci_source_reads_any_manifest_and_layer_into_an_archive_or_its_own_error(
        manifest: dict[str, Any], blob: bytes, headers: dict[str, str], status: int) -> None:
    from tidecd.base.errors import TidecdError
    from tidecd.source import oci

    registry = oci.Registry(oci.parse(f"oci://{REGISTRY}/team/app"))
    body = json.dumps(manifest).encode()
    registry.client.session = _Session([(status, headers, body), (200, {}, blob)])  # type: ignore[assignment]
    try:
        archive, digest, _chart = _bounded(lambda: oci.fetch(registry, "1.0"))
    except TidecdError as exc:
        assert REGISTRY in str(exc) or "an artifact layer" in str(exc), f"names the source: {exc}"
        return
    assert isinstance(archive, bytes) and digest.startswith("sha256:")


index_entry = st.fixed_dictionaries({}, optional={
    "name": st.text(max_size=8) | json_values, "version": st.sampled_from(["1.0.0", "2.1.0-rc.1"]) | json_values,
    "digest": st.text(alphabet="0123456789abcdef", max_size=64) | json_values,
    "urls": st.lists(st.text(max_size=20) | json_values, max_size=3) | json_values,
})
index_doc = st.fixed_dictionaries({}, optional={
    "apiVersion": st.just("v1") | json_values,
    "entries": st.dictionaries(st.text(max_size=8), st.lists(index_entry, max_size=3) | json_values, max_size=3)
    | json_values,
})


@given(doc=index_doc, form=st.sampled_from(["yaml", "json", "cut", "raw", "bytes"]), raw=st.text(max_size=200),
       junk=st.binary(max_size=100), cut=st.integers(0, 200))
def test_the_helm_index_parser_reads_any_index_into_versions_or_its_own_error(
        doc: dict[str, Any], form: str, raw: str, junk: bytes, cut: int) -> None:
    from tidecd.base.errors import SourceUnavailable
    from tidecd.source import helmrepo

    text = yaml.safe_dump(doc).encode() if form in ("yaml", "cut") else json.dumps(doc).encode()
    data = {"yaml": text, "json": text, "cut": text[:cut], "raw": raw.encode(), "bytes": junk}[form]
    try:
        index = _bounded(lambda: helmrepo.parse_index(data, "https://charts.fuzz.example/team"))
    except SourceUnavailable as exc:
        assert "https://charts.fuzz.example/team/index.yaml" in str(exc), exc
        return
    for name, versions in index.items():
        assert isinstance(name, str)
        assert all(isinstance(v.version, str) and all(isinstance(u, str) for u in v.urls) for v in versions)


SHA = "a" * 40
REPOSITORY = {"clone_url": "https://github.com/acme/deploy.git", "html_url": "https://github.com/acme/deploy",
              "full_name": "acme/deploy", "name": "deploy", "owner": {"login": "acme"}, "default_branch": "main"}
FORK = {**REPOSITORY, "full_name": "mallory/deploy", "clone_url": "https://github.com/mallory/deploy.git"}
VALID: dict[str, dict[str, Any]] = {  # one well-formed payload of each kind, as its sender documents it
    "push": {"ref": "refs/heads/main", "after": SHA, "repository": REPOSITORY,
             "commits": [{"added": ["app/a.yaml"], "modified": [], "removed": []}]},
    "pull_request": {"action": "labeled", "number": 7, "repository": REPOSITORY, "label": {"name": "preview"},
                     "pull_request": {"state": "open", "head": {"sha": SHA, "ref": "fix", "repo": FORK},
                                      "base": {"ref": "main", "repo": REPOSITORY},
                                      "labels": [{"name": "preview"}], "user": {"login": "mallory"}},
                     "sender": {"login": "owner"}},
    "issue_comment": {"action": "created", "repository": REPOSITORY,
                      "issue": {"number": 7, "state": "open", "pull_request": {"url": "https://x"}},
                      "comment": {"body": "/tidecd preview", "author_association": "OWNER",
                                  "user": {"login": "owner"}}},
    "registry_package": {"action": "published", "registry_package": {
        "package_type": "container", "name": "web", "namespace": "acme", "registry": {"url": "https://ghcr.io"},
        "owner": {"login": "acme"}, "package_version": {"package_url": "ghcr.io/acme/web:1.0.1",
                                                        "container_metadata": {"tag": {"name": "1.0.1"}}}}},
    "package": {"action": "published", "package": {
        "package_type": "CONTAINER", "name": "web", "namespace": "acme", "registry": {"url": "https://ghcr.io"},
        "package_version": {"container_metadata": {"tag": {"name": "1.0.1"}}}}},
    "dockerhub": {"repository": {"repo_name": "acme/web"}, "push_data": {"tag": "1.0.1"}},
    "quay": {"docker_url": "quay.io/acme/web", "updated_tags": ["1.0.1"]},
    "harbor": {"type": "PUSH_ARTIFACT", "event_data": {"resources": [
        {"resource_url": "harbor.example/acme/web:1.0.1", "tag": "1.0.1"}]}},
    "harbor-cloudevents": {"specversion": "1.0", "type": "harbor.artifact.pushed", "data": {"resources": [
        {"resource_url": "harbor.example/acme/web:1.0.1", "tag": "1.0.1"}]}},
    "gcr": {"action": "INSERT", "digest": "us-docker.pkg.dev/p/r/web@sha256:" + "c" * 64,
            "tag": "us-docker.pkg.dev/p/r/web:1.0.1"},
}
_GONE = object()  # a mutation that deletes the key


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside `doc` (keys and list indices)."""
    found: list[tuple[Any, ...]] = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        found.append((*prefix, key))
        found.extend(_paths(value, (*prefix, key)))
    return found


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copy = json.loads(json.dumps(doc))
    holder = copy
    for key in path[:-1]:
        holder = holder[key]
    if value is _GONE and isinstance(holder, dict):
        del holder[path[-1]]
    elif value is not _GONE:
        holder[path[-1]] = value
    return copy


def mutated(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    """`VALID[kind]` with up to three of its values replaced by any JSON (or deleted): the payload a sender
    gets almost right, which reaches deeper into a parser than random documents do."""
    valid = VALID[kind]
    paths = _paths(valid)
    junk = st.one_of(json_values, st.just(_GONE), st.sampled_from(["", " ", "x" * 600, "ghcr.io/a b", "a://b",
                                                                   -1, 0, 2**64, True, [], {}]))

    def apply(changes: list[tuple[tuple[Any, ...], Any]]) -> dict[str, Any]:
        doc: Any = valid
        for path, value in changes:
            try:
                doc = _set(doc, path, value)
            except (KeyError, IndexError, TypeError):  # an earlier change removed the path
                continue
        return doc if isinstance(doc, dict) else {}

    return st.lists(st.tuples(st.sampled_from(paths), junk), max_size=3).map(apply)


GITHUB_KINDS = ["push", "pull_request", "issue_comment", "registry_package", "package"]


@given(data=st.data(), kind=st.sampled_from(GITHUB_KINDS))
def test_webhook_answers_every_signed_github_event(data: st.DataObject, kind: str) -> None:
    event = data.draw(st.sampled_from([kind, kind, kind, *GITHUB_KINDS, "ping", "x"]))  # mostly its own event
    payload = data.draw(mutated(kind))
    body = json.dumps(payload).encode()
    headers = {"X-GitHub-Event": event, "X-Hub-Signature-256": _sign(body), "Content-Type": "application/json",
               "X-GitHub-Delivery": "d-fuzz"}
    answer = _bounded(lambda: hooks.handle(headers, body, _runtime(), _Recorder()))  # type: ignore[arg-type]
    assert answer.status in (200, 202, 400, 503), answer
    json.dumps(answer.body)


@given(payload=mutated("pull_request"))
def test_the_pull_request_parser_gives_a_pull_request_or_names_the_field(payload: dict[str, Any]) -> None:
    from tidecd.usecases import preview

    try:
        pr = preview.pull_request_of(payload)
    except preview.BadPullRequest as exc:
        assert str(exc).startswith("pull_request payload: field `"), exc
        return
    assert pr.number > 0 and len(pr.head_sha) == 40


REGISTRY_KINDS = {"dockerhub": "dockerhub", "quay": "quay", "harbor": "harbor", "harbor-cloudevents": "harbor",
                  "gcr": "gcr"}


@given(data=st.data(), kind=st.sampled_from(list(REGISTRY_KINDS)))
def test_registry_notification_parsers_give_a_push_or_name_the_field(data: st.DataObject, kind: str) -> None:
    from tidecd.usecases import registry_events as events

    source = REGISTRY_KINDS[kind]
    doc = data.draw(mutated(kind))
    try:
        push = _bounded(lambda: events.parse(source, doc))
    except events.Refused as exc:
        assert exc.status == 400 and re.match(rf"^{source}\b.*payload", exc.message), exc.message
        return
    except events.Ignored:
        return
    assert push.source == source and 1 <= len(push.repositories) <= events.MAX_ITEMS


@given(data=st.data(), event=st.sampled_from(["package", "registry_package"]))
def test_github_package_parser_gives_a_push_or_names_the_field(data: st.DataObject, event: str) -> None:
    from tidecd.usecases import registry_events as events

    doc = data.draw(mutated(event))
    try:
        push = _bounded(lambda: events.github_package(event, doc))
    except events.Refused as exc:
        assert exc.status == 400 and exc.message.startswith("github"), exc.message
        return
    except events.Ignored:
        return
    assert push.source == "github" and len(push.repositories) == 1


@given(data=st.one_of(st.none(), json_values, st.fixed_dictionaries({}, optional={
    "message": st.one_of(json_values, st.fixed_dictionaries({}, optional={
        "data": st.one_of(st.binary(max_size=60).map(lambda b: base64.b64encode(b).decode()),
                          json_values.map(lambda v: base64.b64encode(json.dumps(v).encode()).decode()),
                          st.sampled_from([b'{"app": "a", "notBefore": ' + str(10**400).encode() + b"}",
                                           b'{"app": "a", "notBefore": 1e999}', b'{"app": "a", "notBefore": "-inf"}',
                                           b'{"app": ' + b"[" * 5000 + b"]" * 5000 + b"}"]).map(
                              lambda b: base64.b64encode(b).decode()),
                          st.text(max_size=20), json_values),
        "attributes": st.one_of(json_values, st.fixed_dictionaries({}, optional={
            "app": st.text(max_size=8) | json_values, "kind": st.just("preview") | json_values,
            "notBefore": st.sampled_from(["1e400", "nan", "12"]) | json_values}))}))})))
def test_pubsub_messages_decode_to_a_refresh_a_job_or_a_bad_message(data: Any) -> None:
    from tidecd.triggers import dispatch

    job = dispatch.preview_job(data)
    assert job is None or isinstance(job, dict)
    try:
        refresh = dispatch.decode_refresh(data)
    except dispatch.BadRefreshMessage as exc:
        assert str(exc).startswith("refresh message"), exc
        return
    assert refresh.app and refresh.not_before == refresh.not_before


@given(annotations=st.dictionaries(st.sampled_from([
    "notifications.argoproj.io/subscribe.on-sync-succeeded.webhook", "notifications.argoproj.io/subscribe.x.y",
    "notifications.argoproj.io/subscribe.on-deployed.github", "notifications.argoproj.io/subscribe.", "other"]),
    st.text(max_size=30), max_size=4),
    secrets_=st.lists(st.one_of(json_values, st.fixed_dictionaries({}, optional={
        "metadata": st.one_of(json_values, st.fixed_dictionaries({}, optional={"labels": json_values})),
        "data": json_values, "stringData": json_values})), max_size=3))
def test_notification_subscriptions_and_targets_parse_or_name_the_annotation(
        annotations: dict[str, str], secrets_: list[Any]) -> None:
    from tidecd.notify import deliver

    subs, errors = deliver.subscriptions(annotations)
    assert all(e.startswith("annotation notifications.argoproj.io/") for e in errors), errors
    assert all(s.service in deliver.SERVICES for s in subs)
    targets = deliver.targets_from_secrets(secrets_)
    assert "fields" in repr(targets)


audit_event_like = st.one_of(json_values, st.fixed_dictionaries({}, optional={
    "auditID": st.one_of(st.text(max_size=12), json_values),
    "stage": st.one_of(st.sampled_from(["ResponseComplete", "ResponseStarted", "Panic"]), json_values),
    "verb": st.one_of(st.sampled_from(["create", "update", "patch", "delete", "get"]), json_values),
    "user": st.one_of(json_values, st.fixed_dictionaries({}, optional={"username": st.one_of(st.text(max_size=20),
                                                                                            json_values)})),
    "impersonatedUser": json_values,
    "userAgent": st.one_of(st.sampled_from(["kubectl/v1.34.4", "tidecd"]), st.text(max_size=30), json_values),
    "requestURI": st.one_of(st.text(max_size=40), st.just("/apis/apps/v1/x?fieldManager=tidecd&%%="), json_values),
    "objectRef": st.one_of(json_values, st.fixed_dictionaries({}, optional={
        k: st.one_of(st.text(max_size=12), json_values)
        for k in ("apiGroup", "resource", "subresource", "namespace", "name")})),
    "responseStatus": st.one_of(json_values, st.fixed_dictionaries({}, optional={"code": json_values})),
    "stageTimestamp": st.one_of(st.just("2026-12-02T09:00:00.000000Z"), st.text(max_size=30), json_values),
}))
audit_batch_like = st.one_of(json_values, st.fixed_dictionaries({
    "kind": st.one_of(st.just("EventList"), json_values),
    "apiVersion": st.one_of(st.just("audit.k8s.io/v1"), json_values)}, optional={
    "items": st.one_of(json_values, st.lists(audit_event_like, max_size=6))}))


@given(batch=audit_batch_like, junk=st.binary(max_size=40), token=st.sampled_from(["", "wrong", TOKEN]))
def test_the_audit_batch_parser_gives_events_or_names_the_field(batch: Any, junk: bytes, token: str) -> None:
    from tidecd.usecases import audit

    body = junk if junk and len(junk) % 4 == 0 else json.dumps(batch).encode()
    try:
        events = audit.parse(body)
    except audit.BadBatch as exc:
        assert str(exc).startswith("audit batch: "), exc
    else:
        assert all(isinstance(e, audit.AuditEvent) and isinstance(e.code, int) for e in events)
        assert all(isinstance(audit.ignored(e, frozenset()), str) for e in events)
    answer = audit.handle({"Authorization": f"Bearer {token}"}, body, _runtime(), _Recorder(),  # type: ignore[arg-type]
                          settings=audit.AuditSettings(token=TOKEN))
    assert answer.status in ((200, 400) if token == TOKEN else (401,)), answer


@given(entry=st.one_of(json_values, st.fixed_dictionaries({}, optional={
    "insertId": json_values, "timestamp": st.one_of(st.text(max_size=30), json_values),
    "protoPayload": st.one_of(json_values, st.fixed_dictionaries({}, optional={
        "serviceName": st.one_of(st.just("k8s.io"), json_values),
        "methodName": st.one_of(st.just("io.k8s.apps.v1.deployments.patch"), st.text(max_size=40), json_values),
        "resourceName": st.one_of(st.just("apps/v1/namespaces/ns/deployments/web/scale"),
                                  st.text(alphabet="ab/", max_size=30), json_values),
        "status": st.one_of(json_values, st.fixed_dictionaries({}, optional={"code": json_values})),
        "authenticationInfo": json_values, "requestMetadata": json_values}))})))
def test_a_gke_audit_log_entry_reads_as_an_event_none_or_names_the_field(entry: Any) -> None:
    from tidecd.usecases import audit

    try:
        event = audit.parse_log_entry(json.dumps(entry).encode())
    except audit.BadBatch as exc:
        assert str(exc).startswith("audit log entry: "), exc
        return
    assert event is None or (isinstance(event, audit.AuditEvent) and event.name is not None)


ADVERTISEMENT = (b"001e# service=git-upload-pack\n0000"
                 b"0055" + b"a" * 40 + b" HEAD\x00symref=HEAD:refs/heads/main agent=git/2\n"
                 b"003f" + b"a" * 40 + b" refs/heads/main\n0000")


@pytest.fixture(scope="module")
def git_site() -> Iterator[tuple[str, dict[str, tuple[str, bytes]]]]:
    """A loopback "git server" answering every request with what the example put in `answer["now"]`."""
    from tests.support import localhttp

    answer: dict[str, tuple[str, bytes]] = {"now": ("text/plain", b"")}

    def serve(req: Any) -> None:
        kind, body = answer["now"]
        req.send_response(200)
        req.send_header("Content-Type", kind)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)

    httpd = localhttp.serve_get(serve)
    yield f"http://127.0.0.1:{httpd.server_address[1]}/team/deploy.git", answer
    localhttp.stop(httpd)


@given(edits=st.lists(st.tuples(st.integers(0, len(ADVERTISEMENT)), st.binary(max_size=6), st.integers(0, 8)),
                      max_size=4),
       kind=st.sampled_from(["application/x-git-upload-pack-advertisement", "text/plain", "text/html", ""]),
       page=st.booleans())
def test_git_reads_any_ref_advertisement_into_refs_or_its_own_error(
        git_site: tuple[str, dict[str, tuple[str, bytes]]], edits: list[tuple[int, bytes, int]], kind: str,
        page: bool) -> None:
    """info/refs as a git server, a proxy or a web site may answer it (smart or dumb protocol, spliced,
    cut, an HTML page): refs, or a SourceUnavailable naming the repository, never dulwich's ValueError."""
    from tidecd.base.errors import SourceUnavailable
    from tidecd.source import git

    url, answer = git_site
    body = bytearray(b"<!doctype html><html><body>Sign in</body></html>" if page else ADVERTISEMENT)
    for at, insert, cut in edits:
        body[at:at + cut] = insert
    answer["now"] = (kind, bytes(body))
    try:
        refs = _bounded(lambda: git.ls_remote(url))
    except SourceUnavailable as exc:
        assert url in str(exc) and "<html" not in str(exc), exc
        return
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in refs.items())


@pytest.fixture(scope="module")
def pack_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """A git server over smart HTTP whose answers are real `git upload-pack`'s, then spliced by the example:
    (repository URL, the commit, the splice to apply to the pack answer)."""
    import subprocess
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    repo = tmp_path_factory.mktemp("fuzz-git") / "r"
    def run(*args: str, stdin: bytes | None = None) -> bytes:
        return subprocess.run(["git", *args], check=True, capture_output=True, input=stdin).stdout

    run("init", "-q", "-b", "main", str(repo))
    (repo / "app").mkdir()
    (repo / "app" / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n" * 20)
    run("-C", str(repo), "add", "-A")
    run("-C", str(repo), "-c", "user.name=f", "-c", "user.email=f@example.com", "commit", "-qm", "one")
    sha = run("-C", str(repo), "rev-parse", "HEAD").decode().strip()
    refs = run("upload-pack", "--stateless-rpc", "--advertise-refs", str(repo))
    advertisement = b"001e# service=git-upload-pack\n0000" + refs
    splice: dict[str, Any] = {"edits": []}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def answer(self, kind: str, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.answer("application/x-git-upload-pack-advertisement", advertisement)

        def do_POST(self) -> None:  # noqa: N802
            if self.headers.get("Content-Length"):
                asked = self.rfile.read(int(self.headers["Content-Length"]))
            else:  # chunked
                asked = b""
                while size := int(self.rfile.readline().strip() or b"0", 16):
                    asked += self.rfile.read(size)
                    self.rfile.readline()
                self.rfile.readline()
            body = bytearray(run("upload-pack", "--stateless-rpc", str(repo), stdin=asked))
            for at, insert, cut in splice["edits"]:
                at = at % max(len(body), 1)
                body[at:at + cut] = insert
            self.answer("application/x-git-upload-pack-result", bytes(body))

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/r.git", sha, splice
    httpd.shutdown()
    httpd.server_close()


@given(edits=st.lists(st.tuples(st.integers(0, 2**16), st.binary(max_size=6), st.integers(0, 40)), min_size=1,
                      max_size=4))
def test_git_reads_any_pack_answer_into_a_snapshot_or_its_own_error(
        pack_site: tuple[str, str, dict[str, Any]], edits: list[tuple[int, bytes, int]]) -> None:
    """The fetch's answer (pkt-lines, sideband channels, the pack) spliced anywhere: a snapshot of the
    commit asked for, or a TidecdError naming the repository; never dulwich's AssertionError or
    BufferError (both found here)."""
    from tidecd.base.errors import TidecdError
    from tidecd.source import git

    url, sha, splice = pack_site
    splice["edits"] = edits
    try:
        archive = _bounded(lambda: git.fetch_snapshot(url, sha))
    except TidecdError as exc:
        assert url in str(exc), exc
        return
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        assert "app/cm.yaml" in tar.getnames()
