"""Talking to one Kubernetes API server: raw JSON over the `kubernetes` client's transport.

The typed models of the `kubernetes` package are slow to deserialize, so every call here moves plain JSON
(`Manifest` dicts) through `ApiClient.call_api`. API discovery (which group/kind is served where, and
whether it is namespaced) is one aggregated-discovery request per cluster, cached per server version in
memory. API errors are mapped to tidecd's exceptions at this boundary, without echoing request bodies.

Every call has a deadline (`clients.deadlines`: in a reconcile step what is left of its budget, elsewhere
a fixed timeout), and urllib3 retries nothing by itself (`clients.transport`).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

import yaml

from tidecd.base import constants
from tidecd.base.errors import ClusterUnavailable, ConfigError, PermanentError, TemporaryError, TidecdError
from tidecd.base.model import Manifest, ResourceKey
from tidecd.base.ownership import selector
from tidecd.clients import clustersecrets, credentials, metrics, transport
from tidecd.clients.deadlines import ApiTimeouts

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


class ApiError(TidecdError):
    """The API server refused a request (HTTP >= 400). Never raised as itself: `ApiError(key, status, ...)`
    builds the class of that status (`ApiForbidden`, `ApiTooManyRequests`, ...), each either Permanent or
    Temporary, so `except ApiError` catches every refusal and the entry points know whether to retry.

    `status` is the HTTP code, `reason` the Status' reason (`Forbidden`, `Invalid`, ...); the message is the
    Status' message, shortened (`shorten_values`) and prefixed by the object's key. No request body is kept.
    """

    status: int
    delay: float

    def __new__(cls, key: ResourceKey | None, status: int, reason: str, message: str, *,
                delay: float | None = None) -> ApiError:
        chosen = api_error_class(status) if cls is ApiError else cls
        return super().__new__(chosen)

    def __init__(self, key: ResourceKey | None, status: int, reason: str, message: str, *,
                 delay: float | None = None) -> None:
        self.key, self.status, self.reason = key, status, reason
        self.delay = delay if delay is not None else 5.0
        prefix = f"{key}: " if key else ""
        Exception.__init__(self, f"{prefix}{message}{self.hint(message)}")

    def hint(self, message: str) -> str:
        """What the user can do about it, appended to the message ("" when nothing useful)."""
        return ""

    @property
    def is_invalid(self) -> bool:
        return self.status == 422

    @property
    def is_conflict(self) -> bool:
        return self.status == 409


class ApiBadRequest(ApiError, PermanentError):
    """400: the request (usually the object) is malformed."""


class ApiUnauthorized(ApiError, PermanentError):
    """401: the cluster's credentials were not accepted (expired token, wrong certificate)."""

    def hint(self, message: str) -> str:
        return " (check the credentials of the cluster secret or kubeconfig)"


class ApiForbidden(ApiError, PermanentError):
    """403: the credentials are valid, but RBAC does not allow this verb on this resource."""


class ApiNotFound(ApiError, PermanentError):
    """404: no such object (or namespace)."""


class ApiTooLarge(ApiError, PermanentError):
    """413: the object is larger than the API server accepts (about 3 MiB of JSON; etcd stores 1.5 MiB)."""

    def hint(self, message: str) -> str:
        return " (split the object, or keep large data out of it, e.g. in a volume or an image)"


class ApiInvalid(ApiError, PermanentError):
    """422: the object fails validation; an immutable field needs `Replace=true,Force=true`."""

    def hint(self, message: str) -> str:
        if any(marker in message for marker in IMMUTABLE):
            return (" (the field cannot change in place; add the sync options Replace=true,Force=true to "
                    "recreate the object)")
        return ""


# How the API server says a field cannot change: most kinds, and Service clusterIP(s) / Job selectors.
IMMUTABLE = ("immutable", "may not change once set", "may not be changed")


class ApiConflict(ApiError, TemporaryError):
    """409: the object changed meanwhile, or is still being deleted; a later try sees the new state."""


class ApiGone(ApiError, TemporaryError):
    """410: a list or watch position expired; listing again from scratch works."""


class ApiTooManyRequests(ApiError, TemporaryError):
    """429: the API server (or its priority and fairness) throttles us; `delay` is its Retry-After."""


class ApiServerError(ApiError, TemporaryError):
    """5xx: the API server, an aggregated API or an admission webhook failed; it may work later."""


class ClusterTlsError(PermanentError):
    """The API server's certificate does not verify against the cluster's CA data."""


_API_ERRORS: dict[int, type[ApiError]] = {
    400: ApiBadRequest, 401: ApiUnauthorized, 403: ApiForbidden, 404: ApiNotFound, 409: ApiConflict,
    410: ApiGone, 413: ApiTooLarge, 422: ApiInvalid, 429: ApiTooManyRequests,
}


def api_error_class(status: int) -> type[ApiError]:
    """The ApiError subclass for an HTTP status: the table above, any other 5xx a server error, any other
    4xx a bad request (permanent: a retry would send the same request)."""
    return _API_ERRORS.get(status) or (ApiServerError if status >= 500 else ApiBadRequest)


def unreachable(exc: BaseException) -> bool:
    """Is the API server away (or overloaded) rather than refusing this request? It could not be reached
    (refused, reset, timed out: ClusterUnavailable), or it answered 429 or 5xx to a call the step could not
    do without. A running operation waits that out through continuations (`step.stepping`), up to its retry
    policy; a refusal of one object's write is that object's failure instead (`sync.apply`)."""
    return isinstance(exc, ClusterUnavailable | ApiTooManyRequests | ApiServerError)


class UnknownKind(PermanentError):
    """The API server serves no resource of this group and kind."""


@dataclass(frozen=True)
class ApiResource:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str = "", name: str = "") -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


class Cluster(Protocol):
    """What the diff and sync stages need from a cluster; `KubeCluster` is the real one."""

    def resource(self, group: str, kind: str) -> ApiResource: ...

    def get(self, key: ResourceKey) -> Manifest | None: ...

    def list(self, group: str, kind: str, *, namespace: str = "", label_selector: str = "") -> list[Manifest]: ...

    def apply(self, obj: Manifest, *, dry_run: bool = False) -> Manifest: ...

    def replace(self, obj: Manifest, *, force: bool = False) -> Manifest: ...

    def delete(self, key: ResourceKey, *, propagation: str = "Background") -> None: ...


_discovery_cache: dict[str, dict[tuple[str, str], ApiResource]] = {}
_served_cache: dict[str, tuple[tuple[str, ...], float]] = {}  # discovery key → (API versions, when discovered)
_discovery_lock = threading.Lock()
_VERSIONS: dict[int, tuple[Any, str, float]] = {}  # id(api client) → (the client, gitVersion, when asked)
MAX_EVENTS, MAX_LOG_BYTES = 200, 1 << 20  # per object and per log read: bounded answers, bounded memory
USER_AGENT = constants.FIELD_MANAGER  # its writes are told apart in the audit log too (usecases.audit)
VERSION_TTL = 300.0  # seconds: an upgraded server is noticed (and discovered again) within this
SERVED_TTL = 60.0  # seconds: a CRD installed meanwhile shows in `capabilities` (helm's APIVersions) within this


class KubeCluster:
    """A cluster reached through a `kubernetes.client.ApiClient` (kubeconfig or unsealed cluster secret)."""

    def __init__(self, api_client: Any, *, name: str = "in-cluster", impersonate: str = "",
                 timeouts: ApiTimeouts | None = None) -> None:
        self.api = api_client
        self.name = name
        self.timeouts = timeouts or ApiTimeouts.from_env()
        self.writes = 0  # write calls made (apply, replace, delete): a no-op resync must make none
        self._lock = threading.Lock()
        # sync impersonation (tidecd.project.impersonation): every write, dry-runs included, is sent as
        # this user; reads stay the cluster Secret's, as Argo CD's controller reads with its own identity
        self.impersonate = impersonate

    def impersonating(self, user: str) -> KubeCluster:
        """The same cluster (and connection pool) whose writes act as `user` (`system:serviceaccount:NS:SA`),
        so the cluster's RBAC for that user decides what a sync may change."""
        return KubeCluster(self.api, name=self.name, impersonate=user, timeouts=self.timeouts) if user else self

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, *, context: str | None = None) -> KubeCluster:
        """A client from a kubeconfig (`path`, else $KUBECONFIG, else ~/.kube/config); a missing or broken
        one is a ConfigError of one line naming the file, never the kubernetes client's traceback."""
        # lazy: cold start (kubernetes only when a cluster is reached)
        from kubernetes import config

        def connect() -> ApiClient:
            _keep_credentials_in_memory()
            try:
                client: ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
                    config_file=path, context=context, client_configuration=transport.configuration())
                return _as_tidecd(client)
            except Exception as exc:  # noqa: BLE001 - every failure of reading it is the same user problem
                raise ConfigError(_kubeconfig_problem(path, exc)) from None

        stamp = _file_stamp(path or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
                            or os.path.expanduser("~/.kube/config"))
        client = _shared_client(f"kubeconfig\0{path}\0{context}\0{stamp}", connect) if stamp else connect()
        return cls(client, name=context or "in-cluster")

    @property
    def server(self) -> str:
        return str(self.api.configuration.host)

    # -- transport -------------------------------------------------------------------------------------

    def request(self, method: str, path: str, *, body: Any = None, query: dict[str, str] | None = None,
                content_type: str = "application/json", accept: str = "application/json",
                key: ResourceKey | None = None) -> dict[str, Any]:
        """The answer's JSON object; {} for an empty answer (a DELETE's, say)."""
        data = self.call(method, path, body=body, query=query, content_type=content_type, accept=accept, key=key)
        answer = json.loads(data) if data else {}
        return answer if isinstance(answer, dict) else {}

    def call(self, method: str, path: str, *, body: Any = None, query: dict[str, str] | None = None,
             content_type: str = "application/json", accept: str = "application/json",
             key: ResourceKey | None = None) -> bytes:
        """The answer's bytes (a pod's log is text, not JSON); API errors as tidecd's exceptions."""
        # lazy: cold start (kubernetes only when a cluster is reached)
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        if method != "GET":
            with self._lock:
                self.writes += 1
        headers = {"Content-Type": content_type, "Accept": accept}
        if self.impersonate and method != "GET":
            headers["Impersonate-User"] = self.impersonate
        def attempt(timeout: float) -> tuple[Any, bytes]:
            prepared = self.api.param_serialize(method=method, resource_path=path,
                                                query_params=list(query.items()) if query else None,
                                                header_params=headers, body=body, auth_settings=["BearerToken"])
            # one number: urllib3's total, bounding the connect (and TLS handshake) and the answer together
            resp = self.api.call_api(*prepared[:3], body=prepared[3], post_params=prepared[4],
                                     _request_timeout=timeout)
            return resp, resp.read()

        try:
            resp, data = transport.send(method, self.timeouts, attempt, self.server)
        except (ApiException, HTTPError, OSError) as exc:
            raise _transport_error(self.server, key, exc, body) from None
        if resp.status == 401 and (found := _TOKENS.get(id(self.api))) is not None and found[0] is self.api:
            found[1].forget()  # a token refused before its expiry (revoked): the next request asks anew
        if resp.status >= 400:
            raise _api_error(key, resp.status, resp.reason, data, resp.headers.get("Retry-After"))
        return bytes(data or b"")

    # -- discovery -------------------------------------------------------------------------------------

    def resources(self, *, refresh: bool = False) -> dict[tuple[str, str], ApiResource]:
        cache_key = f"{self.server}@{self._server_version()}"
        with _discovery_lock:
            if not refresh and cache_key in _discovery_cache:
                return _discovery_cache[cache_key]
        found: dict[tuple[str, str], ApiResource] = {}
        served: set[str] = set()
        accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
        for root in ("/api", "/apis"):
            doc = self.request("GET", root, accept=accept)
            found.update(_parse_discovery(doc))
            served.update(served_api_versions(doc))
        with _discovery_lock:
            _discovery_cache[cache_key] = found
            _served_cache[cache_key] = (tuple(sorted(served)), time.monotonic())
        return found

    def capabilities(self) -> tuple[str, tuple[str, ...]]:
        """The server's gitVersion and the API versions it serves, as Argo CD's cluster cache hands them to
        `helm template` (`--kube-version`, `--api-versions`): see `served_api_versions`. From the cached
        discovery, which is asked again once it is SERVED_TTL old (a CRD installed since shows then)."""
        cache_key = f"{self.server}@{self._server_version()}"
        with _discovery_lock:
            known = _served_cache.get(cache_key)
        if known is None or time.monotonic() - known[1] >= SERVED_TTL:
            self.resources(refresh=True)
            with _discovery_lock:
                known = _served_cache[cache_key]
        return self._server_version(), known[0]

    def _server_version(self) -> str:
        """The server's gitVersion, asked once per shared client every VERSION_TTL seconds (it keys the
        discovery cache): each invocation's KubeCluster would otherwise ask again, one call per step."""

        if not hasattr(self, "_version"):
            with _discovery_lock:
                known = _VERSIONS.get(id(self.api))
            if known is not None and known[0] is self.api and time.monotonic() - known[2] < VERSION_TTL:
                self._version = known[1]
            else:
                self._version = str(self.request("GET", "/version").get("gitVersion", ""))
                with _discovery_lock:
                    if len(_VERSIONS) >= MAX_CLIENTS:
                        _VERSIONS.clear()
                    _VERSIONS[id(self.api)] = (self.api, self._version, time.monotonic())
        return self._version

    def resource(self, group: str, kind: str) -> ApiResource:
        found = self.resources().get((group, kind))
        if found is None:  # maybe a CRD created since discovery was cached
            found = self.resources(refresh=True).get((group, kind))
        if found is None:
            raise UnknownKind(f"the API server serves no {group + '/' if group else ''}{kind}")
        return found

    def is_namespaced(self, group: str, kind: str) -> bool:
        return self.resource(group, kind).namespaced

    # -- objects ---------------------------------------------------------------------------------------

    def get(self, key: ResourceKey) -> Manifest | None:
        res = self.resource(key.group, key.kind)
        try:
            return dict(self.request("GET", res.path(key.namespace, key.name), key=key))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def events(self, key: ResourceKey, uid: str = "", *, limit: int = MAX_EVENTS) -> list[Manifest]:
        """The core/v1 Events about one object (`involvedObject`, as `kubectl describe` reads them)."""
        fields = f"involvedObject.name={key.name},involvedObject.kind={key.kind}" + (f",involvedObject.uid={uid}"
                                                                                     if uid else "")
        path = f"/api/v1/namespaces/{key.namespace}/events" if key.namespace else "/api/v1/events"
        return list(self.request("GET", path, query={"fieldSelector": fields, "limit": str(limit)},
                                 key=key).get("items") or [])[:limit]

    def pod_log(self, namespace: str, name: str, *, container: str = "", tail_lines: int = 100,
                limit_bytes: int = MAX_LOG_BYTES, since_time: str = "", previous: bool = False) -> str:
        """A pod's log (`pods/log`, the kubelet's through the API server), each line led by its RFC 3339
        time: the last `tail_lines` lines newer than `since_time`, at most `limit_bytes` whatever is sent."""
        query = {"tailLines": str(tail_lines), "limitBytes": str(limit_bytes), "timestamps": "true",
                 "container": container, "sinceTime": since_time, "previous": "true" if previous else ""}
        data = self.call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}/log", accept="text/plain, */*",
                         query={k: v for k, v in query.items() if v}, key=ResourceKey("", "Pod", namespace, name))
        return data[:limit_bytes].decode("utf-8", errors="replace")

    def list(self, group: str, kind: str, *, namespace: str = "", label_selector: str = "") -> list[Manifest]:
        res = self.resource(group, kind)
        query = {"labelSelector": label_selector} if label_selector else None
        body = self.request("GET", res.path(namespace), query=query)
        items = body.get("items") or []
        for item in items:  # list items omit apiVersion/kind
            item.setdefault("apiVersion", res.api_version)
            item.setdefault("kind", res.kind)
        return list(items)

    def apply(self, obj: Manifest, *, dry_run: bool = False) -> Manifest:
        """Server-side apply as field manager `tidecd`, taking over conflicting fields."""
        return self.apply_as(obj, constants.FIELD_MANAGER, dry_run=dry_run)

    def apply_as(self, obj: Manifest, manager: str, *, dry_run: bool = False) -> Manifest:
        """Server-side apply as field manager `manager` (Argo CD's, for `tidecd app release`), forced."""
        key = ResourceKey.of(obj)
        res = self.resource(key.group, key.kind)
        query = {"fieldManager": manager, "force": "true"}
        if dry_run:
            query["dryRun"] = "All"
        with metrics.timed("dry_run" if dry_run else "apply"):
            return dict(self.request("PATCH", res.path(key.namespace, key.name), body=json.dumps(obj), query=query,
                                     content_type="application/apply-patch+yaml", key=key))

    def json_patch(self, key: ResourceKey, operations: Sequence[Mapping[str, Any]]) -> Manifest:
        """A JSON patch (RFC 6902) of one object: adopt/release rewrite marks and `managedFields` with it,
        guarded by a `test` of the resourceVersion they read."""
        res = self.resource(key.group, key.kind)
        return dict(self.request("PATCH", res.path(key.namespace, key.name), body=list(operations),
                                 query={"fieldManager": constants.FIELD_MANAGER},
                                 content_type="application/json-patch+json", key=key))

    def merge_patch(self, key: ResourceKey, patch: Mapping[str, Any]) -> Manifest:
        """A JSON merge patch (RFC 7386) of one object: what a resource action changed (Argo CD's way)."""
        res = self.resource(key.group, key.kind)
        return dict(self.request("PATCH", res.path(key.namespace, key.name), body=dict(patch),
                                 query={"fieldManager": constants.FIELD_MANAGER},
                                 content_type="application/merge-patch+json", key=key))

    def replace(self, obj: Manifest, *, force: bool = False) -> Manifest:
        """Sync option Replace=true: PUT the object whole (POST when absent). A field that cannot change
        fails it, as `kubectl replace` does; with `force` (Force=true) the object is deleted and created
        again instead, as `kubectl replace --force` recreates it."""
        key = ResourceKey.of(obj)
        res = self.resource(key.group, key.kind)
        query = {"fieldManager": constants.FIELD_MANAGER}
        live = self.get(key)
        if live is not None:
            body = {**obj, "metadata": {**obj["metadata"], "resourceVersion": live["metadata"]["resourceVersion"]}}
            try:
                return dict(self.request("PUT", res.path(key.namespace, key.name), body=body, query=query, key=key))
            except ApiError as exc:
                if not (force and exc.is_invalid and any(marker in str(exc) for marker in IMMUTABLE)):
                    raise
            self.delete(key, propagation="Background")
            self._wait_gone(key)
        return dict(self.request("POST", res.path(key.namespace), body=obj, query=query, key=key))

    def _wait_gone(self, key: ResourceKey, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while self.get(key) is not None:
            if time.monotonic() > deadline:
                raise ApiError(key, 409, "Conflict", f"still being deleted after {timeout:.0f}s")
            time.sleep(0.2)

    def delete(self, key: ResourceKey, *, propagation: str = "Background") -> None:
        res = self.resource(key.group, key.kind)
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        try:
            self.request("DELETE", res.path(key.namespace, key.name), body=body, key=key)
        except ApiError as exc:
            if exc.status != 404:
                raise


def _parse_discovery(doc: dict[str, Any]) -> dict[tuple[str, str], ApiResource]:
    """Aggregated discovery (apidiscovery.k8s.io/v2): the preferred (first) version of each group wins."""
    found: dict[tuple[str, str], ApiResource] = {}
    for group in doc.get("items") or []:
        group_name = group.get("metadata", {}).get("name", "")
        for version in group.get("versions") or []:
            for res in version.get("resources") or []:
                kind = res.get("responseKind", {}).get("kind")
                if not kind or (group_name, kind) in found:
                    continue
                found[(group_name, kind)] = ApiResource(
                    group=group_name, version=version["version"], kind=kind, plural=res["resource"],
                    namespaced=res.get("scope") == "Namespaced",
                )
    return found


def served_api_versions(doc: dict[str, Any]) -> set[str]:
    """Aggregated discovery's served API versions as Argo CD lists them for helm (gitops-engine's
    `GetAPIResources`, not preferred, then `APIResourcesToStrings` with kinds): `group/version` and
    `group/version/Kind` of every version of every resource that can be listed and watched."""
    out: set[str] = set()
    for group in doc.get("items") or []:
        group_name = group.get("metadata", {}).get("name", "")
        for version in group.get("versions") or []:
            group_version = f"{group_name}/{version.get('version', '')}" if group_name else str(version.get("version"))
            for res in version.get("resources") or []:
                kind, verbs = res.get("responseKind", {}).get("kind"), res.get("verbs") or []
                if kind and "list" in verbs and "watch" in verbs:
                    out.update((group_version, f"{group_version}/{kind}"))
    return out


def _api_error(key: ResourceKey | None, status: int, reason: str | None, data: bytes,
               retry_after: str | None = None) -> ApiError:
    """The ApiError subclass of an error answer; only the Status' `reason` and `message` are kept (and for
    429 its Retry-After), never the request."""
    kind, message, details = str(reason or ""), "", cast(dict[str, Any], {})
    try:
        status_body = json.loads(data)
        kind, message = str(status_body.get("reason") or kind), str(status_body.get("message") or "")
        details = status_body.get("details") or {}
    except (TypeError, ValueError, AttributeError):
        pass
    delay = _seconds(retry_after) or _seconds(details.get("retryAfterSeconds") if isinstance(details, dict) else None)
    text = shorten_values(message) or kind or f"HTTP {status}"
    if status >= 500 and not message:
        text = f"API server {kind or 'failed'} (HTTP {status})"
    return ApiError(key, status, kind, text, delay=delay)


def _seconds(value: object) -> float | None:
    try:
        seconds = float(str(value))
    except ValueError:
        return None
    return min(max(seconds, 1.0), 600.0)


# The API server's default limit on a request body (`--max-request-bytes` of etcd is 1.5 MiB more strictly).
MAX_REQUEST_BYTES = 3 * 1024 * 1024


def _transport_error(server: str, key: ResourceKey | None, exc: Exception, body: Any) -> TidecdError:
    """A failure below HTTP: TLS verification (permanent), a connection broken while sending an oversized
    object (the server refused it: permanent), anything else unreachable (temporary)."""
    if transport.tls_unverified(exc):
        return ClusterTlsError(f"API server {server}: TLS verification failed (check the cluster's CA data)")
    size = _body_size(body)
    if size > MAX_REQUEST_BYTES:
        return ApiError(key, 413, "RequestEntityTooLarge",
                        f"request entity too large: the object is {size / 1e6:.1f} MB, the API server accepts "
                        f"about {MAX_REQUEST_BYTES / 2**20:.0f} MiB (the connection closed while sending)")
    return ClusterUnavailable(f"API server {server} unreachable: {transport.reason(exc)}")


def _body_size(body: Any) -> int:
    if body is None:
        return 0
    if isinstance(body, str | bytes):
        return len(body)
    try:
        return len(json.dumps(body))
    except (TypeError, ValueError):
        return 0


def shorten_values(message: str, limit: int = 60) -> str:
    """Drop the long `Invalid value: {...}` dumps the API server puts in validation errors: they repeat the
    whole object (unreadable, and for a Secret they could echo data)."""
    out, pos, marker = [], 0, "Invalid value: "
    while (start := message.find(marker, pos)) >= 0:
        value_start = start + len(marker)
        end = _value_end(message, value_start)
        out.append(message[pos:value_start])
        value = message[value_start:end]
        out.append(value if len(value) <= limit else "(value omitted)")
        pos = end
    out.append(message[pos:])
    return "".join(out)


def _value_end(text: str, start: int) -> int:
    """End of a JSON-ish value starting at `start` (balanced braces/brackets, or up to the next ': ')."""
    if start < len(text) and text[start] in "{[":
        depth, quoted = 0, False
        for index in range(start, len(text)):
            char = text[index]
            if char == '"' and text[index - 1] != "\\":
                quoted = not quoted
            elif not quoted and char in "{[":
                depth += 1
            elif not quoted and char in "}]":
                depth -= 1
                if depth == 0:
                    return index + 1
        return len(text)
    end = text.find(": ", start)
    return len(text) if end < 0 else end


def _kubeconfig_problem(path: str | None, exc: Exception) -> str:
    """One line naming the kubeconfig and what is wrong; a YAML error gives no text of the file (tokens)."""

    where = path or os.environ.get("KUBECONFIG") or "~/.kube/config"
    files = [os.path.expanduser(f) for f in where.split(os.pathsep) if f]
    if isinstance(exc, FileNotFoundError) or not any(os.path.isfile(f) for f in files):
        what = "not found" if path or os.environ.get("KUBECONFIG") else "not found (set KUBECONFIG)"
    elif "No configuration found" in str(exc):
        what = "empty"
    elif isinstance(exc, yaml.YAMLError):
        mark = getattr(exc, "problem_mark", None)
        what = f"not valid YAML{f' (line {mark.line + 1})' if mark is not None else ''}"
    else:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        what = shorten_values(first)[:200]
    return f"kubeconfig {where}: {what}"


def managed_selector(app: str) -> str:
    """The label selector of an app's objects (tidecd's own label; the tracking id proves ownership)."""

    return selector(app)


# -- clusters from Argo CD cluster secrets -----------------------------------------------------------------


def client_for_secret(secret: Manifest) -> ApiClient:
    """An ApiClient from a cluster secret (`tidecd.clients.clustersecrets`), shared while it is unchanged."""
    # lazy: cold start (kubernetes only when a cluster is reached)
    from kubernetes import config as kube_config

    login = clustersecrets.login_of(secret)
    _keep_credentials_in_memory()

    def connect() -> ApiClient:
        try:
            client: ApiClient = kube_config.new_client_from_config_dict(  # type: ignore[no-untyped-call]
                login.kubeconfig, client_configuration=transport.configuration())
            if login.tokens is not None:
                _ask_before_each_request(client, login.tokens)
            return _as_tidecd(client)
        except (ValueError, TypeError, kube_config.ConfigException) as exc:  # never echo the (secret) values
            raise PermanentError(f"cluster secret {login.name}: field config is not usable "
                                 f"({type(exc).__name__})") from None

    return _shared_client(f"secret\0{login.identity}", connect)


def _ask_before_each_request(client: ApiClient, tokens: credentials.TokenSource) -> None:
    """The bearer token of every request comes from `tokens` (an exec plugin's or Google's short-lived
    ones, cached until they expire): the client's hook runs before each request is signed."""

    def refresh(configuration: Any) -> None:
        configuration.api_key["authorization"] = f"Bearer {tokens.token()}"

    client.configuration.api_key["authorization"] = ""  # the client signs a request only when a key is set
    client.configuration.refresh_api_key_hook = refresh
    _TOKENS[id(client)] = (client, tokens)


def _as_tidecd(client: ApiClient) -> ApiClient:
    """tidecd's requests name it (`User-Agent: tidecd/...`), so its own writes are known in the cluster's
    audit log (`tidecd.usecases.audit` ignores them) as they are in `managedFields` (FIELD_MANAGER)."""
    client.user_agent = USER_AGENT
    return client


# A warm instance keeps its clients: each one holds a pool of open TLS connections to its API server. A new
# client per Runtime (per invocation) paid a TLS handshake per connection and call thread, ~13% of a step's
# time in the 1,000-app scenario (py-spy). Keyed by the kubeconfig file's stamp or the secret's content, so a
# changed or rotated credential gets a new client; KubeCluster wrappers (and their write counters) stay per
# Runtime.
_CLIENTS: dict[str, ApiClient] = {}
_TOKENS: dict[int, tuple[Any, credentials.TokenSource]] = {}  # id(client) → (client, its token source)
_CLIENTS_LOCK = threading.Lock()
MAX_CLIENTS = 32


def _shared_client(key: str, connect: Callable[[], ApiClient]) -> ApiClient:
    with _CLIENTS_LOCK:
        found = _CLIENTS.get(key)
    if found is not None:
        return found
    client = connect()
    with _CLIENTS_LOCK:
        if len(_CLIENTS) >= MAX_CLIENTS:
            _CLIENTS.clear()
            _TOKENS.clear()
        return _CLIENTS.setdefault(key, client)


def _file_stamp(path: str) -> str:
    """size, mtime and inode of a file, "" when it cannot be read (then nothing is shared)."""
    try:
        stat = os.stat(path)
    except OSError:
        return ""
    return f"{os.path.realpath(path)}:{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ino}"


def _keep_credentials_in_memory() -> None:
    """The kubernetes client writes embedded certificates and keys to temp files, removed only at a clean
    exit; a function instance that is killed would leave a cluster's private key on disk. Hand it
    anonymous in-memory files (memfd) instead, which vanish with the process."""

    # lazy: cold start (kubernetes only when a cluster is reached)
    from kubernetes.config import kube_config

    if getattr(kube_config._create_temp_file_with_content, "tidecd", False) or not hasattr(os, "memfd_create"):
        return
    created: dict[str, str] = {}

    def in_memory(content: str | bytes, temp_file_path: str | None = None, force_recreate: bool = False) -> str:
        data = content.encode() if isinstance(content, str) else content
        key = hashlib.sha256(data).hexdigest()
        if force_recreate or key not in created:
            fd = os.memfd_create("tidecd-kubeconfig", 0)
            os.write(fd, data)
            created[key] = f"/proc/{os.getpid()}/fd/{fd}"
        return created[key]

    in_memory.tidecd = True  # type: ignore[attr-defined]
    kube_config._create_temp_file_with_content = in_memory
