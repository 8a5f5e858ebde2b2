"""Argo CD cluster Secrets (`argocd.argoproj.io/secret-type: cluster`): which one a destination names, and
the kubeconfig and token source its `server` and `config` describe (`tidecd.clients.cluster` connects).

`config` is Argo CD's JSON: `bearerToken`, `tlsClientConfig` {caData, certData, keyData, insecure}, or a
short-lived credential instead of a token (`execProviderConfig`, GKE's Google identity:
`tidecd.clients.credentials`). Errors name the Secret and the field, never a value.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from tidecd.base import constants
from tidecd.base.errors import PermanentError
from tidecd.base.model import Manifest
from tidecd.clients import credentials
from tidecd.clients.secrets import text_fields


def secret_field(secret: Manifest, name: str) -> str:
    meta_name = (secret.get("metadata") or {}).get("name", "?")
    return text_fields(secret, f"cluster secret {meta_name}").get(name, "")


def find_cluster_secret(secrets: list[Manifest], *, name: str, server: str) -> Manifest | None:
    """The cluster secret (`argocd.argoproj.io/secret-type: cluster`) matching a destination."""
    for secret in secrets:
        labels = (secret.get("metadata") or {}).get("labels") or {}
        if labels.get(constants.LABEL_SECRET_TYPE) != constants.SECRET_TYPE_CLUSTER:
            continue
        if (name and secret_field(secret, "name") == name) or (
                server and secret_field(secret, "server").rstrip("/") == server.rstrip("/")):
            return secret
    return None


@dataclass(frozen=True)
class ClusterLogin:
    """What a cluster Secret says: a kubeconfig for the kubernetes client, the source of its bearer token
    when that is short-lived (None: the kubeconfig's static token or certificate), and an identity that
    changes whenever any of it does (clients are shared per identity)."""

    name: str  # the Secret's metadata.name, for errors
    kubeconfig: dict[str, Any]
    tokens: credentials.TokenSource | None
    identity: str


def login_of(secret: Manifest) -> ClusterLogin:
    meta_name = (secret.get("metadata") or {}).get("name", "?")
    server = secret_field(secret, "server")
    try:
        settings = json.loads(secret_field(secret, "config") or "{}")
    except ValueError:
        raise PermanentError(f"cluster secret {meta_name}: field config is not valid JSON") from None
    if not server:
        raise PermanentError(f"cluster secret {meta_name}: field server is missing")
    if not isinstance(settings, dict) or not isinstance(settings.get("tlsClientConfig") or {}, dict):
        raise PermanentError(f"cluster secret {meta_name}: field config must be a JSON object "
                             "(with tlsClientConfig an object)")
    tls = settings.get("tlsClientConfig") or {}
    check_base64(tls, meta_name)
    cluster: dict[str, Any] = {"server": server}
    if tls.get("caData"):
        cluster["certificate-authority-data"] = tls["caData"]
    if tls.get("insecure"):
        cluster["insecure-skip-tls-verify"] = True
    user: dict[str, Any] = {}
    tokens = credentials.token_source(settings, f"cluster secret {meta_name}")
    if settings.get("bearerToken") and tokens is None:
        user["token"] = settings["bearerToken"]
    if tls.get("certData"):
        user["client-certificate-data"] = tls["certData"]
        user["client-key-data"] = tls.get("keyData", "")
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": cluster}], "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }
    plugin = settings.get("execProviderConfig")
    identity = hashlib.sha256(json.dumps([kubeconfig, plugin], sort_keys=True).encode()).hexdigest()
    return ClusterLogin(meta_name, kubeconfig, tokens, identity)


def check_base64(tls: dict[str, Any], meta_name: str) -> None:
    """caData, certData and keyData are base64 PEM; say which one is broken, never what it holds."""

    for field in ("caData", "certData", "keyData"):
        value = tls.get(field)
        if not value:
            continue
        try:
            base64.b64decode(str(value), validate=True)
        except ValueError:
            raise PermanentError(f"cluster secret {meta_name}: config.tlsClientConfig.{field} "
                                 "is not valid base64") from None
