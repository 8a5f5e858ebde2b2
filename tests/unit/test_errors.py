"""The exception tree: every public exception drawn in `tidecd.base.errors`, Kubernetes API errors split by status at
the client boundary, and the one table the entry points answer by."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest
import urllib3

import tidecd
from tidecd.base import errors
from tidecd.base.errors import (
    ClusterUnavailable,
    ConfigError,
    LeaseHeld,
    NotFound,
    PermanentError,
    TemporaryError,
    TidecdError,
    disposition,
)
from tidecd.base.model import ResourceKey
from tidecd.clients import cluster
from tidecd.clients.cluster import (
    ApiBadRequest,
    ApiConflict,
    ApiError,
    ApiForbidden,
    ApiGone,
    ApiInvalid,
    ApiNotFound,
    ApiServerError,
    ApiTooLarge,
    ApiTooManyRequests,
    ApiUnauthorized,
    ClusterTlsError,
)

BASES = {TidecdError, PermanentError, TemporaryError, ApiError}
KEY = ResourceKey("", "Service", "web", "front")


def public_exceptions() -> dict[str, type[BaseException]]:
    """Every public exception class defined in the tidecd package, by its name in the tree."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(tidecd.__path__, "tidecd."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name
                    and not name.startswith("_")):
                short = info.name.removeprefix("tidecd.")
                found[name if short == "base.errors" else f"{short}.{name}"] = obj
    return found


def test_every_public_exception_is_drawn_in_the_tree() -> None:
    tree = errors.__doc__ or ""
    drawn = set(re.findall(r"[├└]── ([A-Za-z_.]+)", tree)) | set(re.findall(r"^    (TidecdError)$", tree, re.M))
    found = public_exceptions()
    assert len(found) >= 30
    missing = sorted(set(found) - drawn)
    assert not missing, f"add these to the tree in errors.py's docstring: {missing}"
    stale = sorted(d for d in drawn - set(found) if d not in ("TemporaryError(delay)",))
    assert not stale, f"drawn but not defined: {stale}"


def test_every_exception_is_permanent_or_temporary_and_drawn_under_it() -> None:
    tree = errors.__doc__ or ""
    temporary_part = tree[tree.index("└── TemporaryError"):]
    for name, cls in public_exceptions().items():
        if cls in BASES:
            continue
        permanent, temporary = issubclass(cls, PermanentError), issubclass(cls, TemporaryError)
        assert permanent != temporary, f"{name} must be exactly one of Permanent and Temporary"
        assert (f"── {name} " in temporary_part or temporary_part.endswith(f"── {name}")) == temporary, name


STATUS_CLASSES = [
    (400, ApiBadRequest, False), (401, ApiUnauthorized, False), (403, ApiForbidden, False),
    (404, ApiNotFound, False), (409, ApiConflict, True), (410, ApiGone, True), (413, ApiTooLarge, False),
    (422, ApiInvalid, False), (429, ApiTooManyRequests, True), (500, ApiServerError, True),
    (503, ApiServerError, True), (418, ApiBadRequest, False),
]


def status_body(code: int, reason: str, message: str) -> bytes:
    import json

    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                       "reason": reason, "message": message}).encode()


@pytest.mark.parametrize(("status", "cls", "temporary"), STATUS_CLASSES)
def test_api_errors_split_by_status_and_carry_the_server_message(status: int, cls: type[ApiError],
                                                                 temporary: bool) -> None:
    exc = cluster._api_error(KEY, status, "Some Reason", status_body(status, "Why", f"said {status}"))
    assert type(exc) is cls and isinstance(exc, ApiError)
    assert isinstance(exc, TemporaryError) is temporary and isinstance(exc, PermanentError) is not temporary
    assert exc.status == status and exc.reason == "Why"
    assert str(exc).startswith(f"Service/web/front: said {status}") or str(exc).startswith(f"{KEY}: said {status}")
    assert disposition(exc).retry is temporary


def test_building_an_api_error_by_status_gives_its_class() -> None:
    assert type(ApiError(KEY, 409, "Conflict", "still being deleted")) is ApiConflict
    assert type(ApiError(None, 599, "", "x")) is ApiServerError
    assert type(ApiForbidden(KEY, 403, "Forbidden", "no")) is ApiForbidden


def test_429_waits_as_long_as_the_server_asks() -> None:
    header = cluster._api_error(KEY, 429, "Too Many Requests", b"", retry_after="7")
    assert isinstance(header, ApiTooManyRequests) and header.delay == 7.0
    import json

    body = json.dumps({"reason": "TooManyRequests", "message": "slow down", "details": {"retryAfterSeconds": 3}})
    from_body = cluster._api_error(KEY, 429, "", body.encode())
    assert from_body.delay == 3.0 and disposition(from_body).delay == 3.0
    assert "slow down" in str(from_body)


def test_no_request_body_and_no_object_dump_in_the_message() -> None:
    message = ('Secret "db" is invalid: data[password]: Invalid value: {"password":"hunter2-very-secret-and-long'
               '-enough-to-be-omitted-by-the-shortener"}: must be base64')
    exc = cluster._api_error(KEY, 422, "Invalid", status_body(422, "Invalid", message))
    assert "hunter2" not in str(exc) and "(value omitted)" in str(exc)


def test_an_immutable_service_cluster_ip_hints_replace() -> None:
    message = ('Service "front" is invalid: spec.clusterIPs[0]: Invalid value: []string{"10.96.0.12"}: '
               "may not change once set")
    exc = cluster._api_error(KEY, 422, "Invalid", status_body(422, "Invalid", message))
    assert isinstance(exc, ApiInvalid) and "Replace=true" in str(exc)
    other = cluster._api_error(KEY, 422, "Invalid", status_body(422, "Invalid", "spec.ports[0].port: Required value"))
    assert "Replace=true" not in str(other)


def test_a_5xx_without_a_status_body_names_the_code() -> None:
    exc = cluster._api_error(None, 502, "Bad Gateway", b"<html>proxy</html>")
    assert isinstance(exc, ApiServerError) and "502" in str(exc) and "proxy" not in str(exc)


def test_transport_failures_tls_oversized_and_unreachable() -> None:
    tls = cluster._transport_error("https://k", None, urllib3.exceptions.SSLError(
        "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"), None)
    assert isinstance(tls, ClusterTlsError) and "TLS verification failed" in str(tls)
    assert not disposition(tls).retry
    big = cluster._transport_error("https://k", KEY, urllib3.exceptions.ProtocolError("Connection aborted",
                                   BrokenPipeError(32, "Broken pipe")), "x" * (30 * 2**20))
    assert isinstance(big, ApiTooLarge) and "request entity too large" in str(big)
    assert "TLS" not in str(big) and not disposition(big).retry
    eof = cluster._transport_error("https://k", KEY, urllib3.exceptions.SSLError("EOF occurred"), "{}")
    assert isinstance(eof, ClusterUnavailable) and disposition(eof).retry


def test_a_missing_or_broken_kubeconfig_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nusers: [\n  token: s3cr3t: x\n")
    for path, expected in ((str(tmp_path / "nope"), "not found"), (str(broken), "not valid YAML")):
        probe = ("from tidecd.clients.cluster import KubeCluster\n"
                 f"KubeCluster.from_kubeconfig({path!r})\n")
        run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
        last = run.stderr.strip().splitlines()[-1]
        assert last == f"tidecd.base.errors.ConfigError: kubeconfig {path}: {expected}" or expected in last
        assert "s3cr3t" not in run.stderr
    with pytest.raises(ConfigError, match=r"^kubeconfig .*nope: not found$"):
        cluster.KubeCluster.from_kubeconfig(str(tmp_path / "nope"))


def test_the_disposition_table() -> None:
    assert disposition(NotFound("x")) == errors.Disposition(404, "not_found", retry=False)
    assert disposition(ConfigError("x")) == errors.Disposition(400, "bad_request", retry=False)
    assert disposition(LeaseHeld("x", delay=2)) == errors.Disposition(409, "busy", retry=True, delay=2)
    assert disposition(ClusterUnavailable("x", delay=9)) == errors.Disposition(503, "unavailable", True, 9)
    assert disposition(KeyError("x")) == errors.Disposition(500, "internal", retry=True)


def test_the_api_answers_every_failure_as_json_without_echoing_a_bug() -> None:
    from tidecd.usecases import api

    bug = api.failure(KeyError("token-abc"))
    assert bug.status == 500 and bug.body["error"] == "internal" and "token-abc" not in bug.body["message"]
    busy = api.failure(ApiTooManyRequests(KEY, 429, "TooManyRequests", "slow down", delay=12))
    assert busy.status == 503 and busy.body["retryAfter"] == 12 and "slow down" in busy.body["message"]
    assert api.failure(NotFound("app 'x' not found")).status == 404
