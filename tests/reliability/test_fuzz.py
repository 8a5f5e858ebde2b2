"""Property-based fuzzing of every parser of hostile input: whatever arrives, the answer is a clear error
of tidecd's own (or an HTTP status), never a crash, and nothing is written outside a checkout.

`make test` runs the `ci` profile (60 examples each, derandomized); `make fuzz` the `fuzz` profile.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import json
import tarfile
import tempfile
from pathlib import Path
from typing import Any

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
