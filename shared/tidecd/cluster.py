"""Talking to one Kubernetes API server: raw JSON over the `kubernetes` client's transport.

The typed models of the `kubernetes` package are slow to deserialize, so every call here moves plain JSON
(`Manifest` dicts) through `ApiClient.call_api`. API discovery (which group/kind is served where, and
whether it is namespaced) is one aggregated-discovery request per cluster, cached per server version in
memory. API errors are mapped to tidecd's exceptions at this boundary, without echoing request bodies.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from tidecd import constants
from tidecd.errors import ClusterUnavailable, PermanentError, TidecdError
from tidecd.model import Manifest, ResourceKey


class ApiError(TidecdError):
    """The API server refused a request; `status` is the HTTP code, `reason` Kubernetes' reason."""

    def __init__(self, key: ResourceKey | None, status: int, reason: str, message: str) -> None:
        self.key, self.status, self.reason = key, status, reason
        prefix = f"{key}: " if key else ""
        super().__init__(f"{prefix}{message}")

    @property
    def is_invalid(self) -> bool:
        return self.status == 422

    @property
    def is_conflict(self) -> bool:
        return self.status == 409


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

    def replace(self, obj: Manifest) -> Manifest: ...

    def delete(self, key: ResourceKey, *, propagation: str = "Background") -> None: ...


_discovery_cache: dict[str, dict[tuple[str, str], ApiResource]] = {}
_discovery_lock = threading.Lock()


class KubeCluster:
    """A cluster reached through a `kubernetes.client.ApiClient` (kubeconfig or unsealed cluster secret)."""

    def __init__(self, api_client: Any, *, name: str = "in-cluster") -> None:
        self.api = api_client
        self.name = name
        self.writes = 0  # write calls made (apply, replace, delete): a no-op resync must make none
        self._lock = threading.Lock()

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, *, context: str | None = None) -> KubeCluster:
        from kubernetes import config

        return cls(config.new_client_from_config(config_file=path, context=context),  # type: ignore[no-untyped-call]
                   name=context or "in-cluster")

    @property
    def server(self) -> str:
        return str(self.api.configuration.host)

    # -- transport -------------------------------------------------------------------------------------

    def request(self, method: str, path: str, *, body: Any = None, query: dict[str, str] | None = None,
                content_type: str = "application/json", accept: str = "application/json",
                key: ResourceKey | None = None) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        if method != "GET":
            with self._lock:
                self.writes += 1
        headers = {"Content-Type": content_type, "Accept": accept}
        try:
            prepared = self.api.param_serialize(method=method, resource_path=path,
                                                query_params=list(query.items()) if query else None,
                                                header_params=headers, body=body, auth_settings=["BearerToken"])
            resp = self.api.call_api(*prepared[:3], body=prepared[3], post_params=prepared[4],
                                     _request_timeout=(5, 60))
            data = resp.read()
        except (ApiException, HTTPError, OSError) as exc:
            raise ClusterUnavailable(f"API server {self.server} unreachable: {type(exc).__name__}") from None
        if resp.status >= 400:
            raise _api_error(key, resp.status, resp.reason, data)
        return json.loads(data) if data else None

    # -- discovery -------------------------------------------------------------------------------------

    def resources(self, *, refresh: bool = False) -> dict[tuple[str, str], ApiResource]:
        cache_key = f"{self.server}@{self._server_version()}"
        with _discovery_lock:
            if not refresh and cache_key in _discovery_cache:
                return _discovery_cache[cache_key]
        found: dict[tuple[str, str], ApiResource] = {}
        accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
        for root in ("/api", "/apis"):
            found.update(_parse_discovery(self.request("GET", root, accept=accept)))
        with _discovery_lock:
            _discovery_cache[cache_key] = found
        return found

    def _server_version(self) -> str:
        if not hasattr(self, "_version"):
            self._version = str(self.request("GET", "/version").get("gitVersion", ""))
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
        key = ResourceKey.of(obj)
        res = self.resource(key.group, key.kind)
        query = {"fieldManager": constants.FIELD_MANAGER, "force": "true"}
        if dry_run:
            query["dryRun"] = "All"
        return dict(self.request("PATCH", res.path(key.namespace, key.name), body=json.dumps(obj), query=query,
                                 content_type="application/apply-patch+yaml", key=key))

    def replace(self, obj: Manifest) -> Manifest:
        """PUT the object whole (sync option Replace=true), creating it when absent."""
        key = ResourceKey.of(obj)
        res = self.resource(key.group, key.kind)
        live = self.get(key)
        if live is None:
            return dict(self.request("POST", res.path(key.namespace), body=obj,
                                     query={"fieldManager": constants.FIELD_MANAGER}, key=key))
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": live["metadata"]["resourceVersion"]}}
        return dict(self.request("PUT", res.path(key.namespace, key.name), body=obj,
                                 query={"fieldManager": constants.FIELD_MANAGER}, key=key))

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


def _api_error(key: ResourceKey | None, status: int, reason: str | None, data: bytes) -> Exception:
    """Map an error answer to our exceptions; only the Status `reason` and `message` are kept."""
    if status in (502, 503, 504):
        return ClusterUnavailable(f"{key or 'API server'}: {reason or 'unavailable'} (HTTP {status})")
    kind, message = str(reason or ""), ""
    try:
        status_body = json.loads(data)
        kind, message = str(status_body.get("reason", kind)), str(status_body.get("message", ""))
    except (TypeError, ValueError, AttributeError):
        pass
    return ApiError(key, status, kind, message or kind or f"HTTP {status}")


def managed_selector(app: str) -> str:
    return f"{constants.LABEL_INSTANCE}={app}"


def kinds_of(objects: Iterable[Manifest]) -> set[tuple[str, str]]:
    return {(ResourceKey.of(o).group, ResourceKey.of(o).kind) for o in objects}


# -- clusters from Argo CD cluster secrets -----------------------------------------------------------------


def _secret_field(secret: Manifest, name: str) -> str:
    import base64

    if name in (secret.get("stringData") or {}):
        return str(secret["stringData"][name])
    raw = (secret.get("data") or {}).get(name)
    return base64.b64decode(raw).decode() if raw else ""


def find_cluster_secret(secrets: list[Manifest], *, name: str, server: str) -> Manifest | None:
    """The cluster secret (`argocd.argoproj.io/secret-type: cluster`) matching a destination."""
    for secret in secrets:
        labels = (secret.get("metadata") or {}).get("labels") or {}
        if labels.get(constants.LABEL_SECRET_TYPE) != constants.SECRET_TYPE_CLUSTER:
            continue
        if (name and _secret_field(secret, "name") == name) or (
                server and _secret_field(secret, "server").rstrip("/") == server.rstrip("/")):
            return secret
    return None


def client_for_secret(secret: Manifest) -> Any:
    """An ApiClient from a cluster secret's `server` and `config` (bearerToken, tlsClientConfig)."""
    from kubernetes import config as kube_config

    meta_name = (secret.get("metadata") or {}).get("name", "?")
    server = _secret_field(secret, "server")
    try:
        settings = json.loads(_secret_field(secret, "config") or "{}")
    except ValueError:
        raise PermanentError(f"cluster secret {meta_name}: field config is not valid JSON") from None
    if not server:
        raise PermanentError(f"cluster secret {meta_name}: field server is missing")
    tls = settings.get("tlsClientConfig") or {}
    cluster: dict[str, Any] = {"server": server}
    if tls.get("caData"):
        cluster["certificate-authority-data"] = tls["caData"]
    if tls.get("insecure"):
        cluster["insecure-skip-tls-verify"] = True
    user: dict[str, Any] = {}
    if settings.get("bearerToken"):
        user["token"] = settings["bearerToken"]
    if tls.get("certData"):
        user["client-certificate-data"] = tls["certData"]
        user["client-key-data"] = tls.get("keyData", "")
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": cluster}], "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }
    return kube_config.new_client_from_config_dict(kubeconfig)  # type: ignore[no-untyped-call]
