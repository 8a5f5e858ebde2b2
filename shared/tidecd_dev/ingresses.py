"""A stand-in for an ingress controller: publishes an address in every Ingress's status.

The dev control plane runs no ingress controller, so an Ingress never gets `status.loadBalancer.ingress`
and Argo CD (and tidecd, its health rule) reads it Progressing forever. The bench starts this writer for
the whole run, so every tool under comparison sees the same cluster: an Ingress is given
`status.loadBalancer.ingress: [{ip: 127.0.0.1}]` moments after it appears, as a real controller would.
It watches all namespaces (one watch stream) and patches the status subresource of each Ingress once.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from tidecd_dev.devcluster import DevCluster

INGRESSES = "/apis/networking.k8s.io/v1/ingresses"
ADDRESS = "127.0.0.1"


class IngressStatusWriter:
    def __init__(self, dev: DevCluster, *, namespace_prefix: str = "") -> None:
        self.namespace_prefix = namespace_prefix  # only Ingresses in namespaces starting with this
        pki = dev.workdir / "pki"
        self.server = dev.server
        self._ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self._ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.published = 0
        self.errors: list[str] = []

    def start(self) -> IngressStatusWriter:
        self._thread = threading.Thread(target=self._run, name="ingress-status", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def __enter__(self) -> IngressStatusWriter:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                version = self._sweep()
                self._watch(version)
            except (OSError, ValueError, urllib.error.URLError) as exc:
                if len(self.errors) < 20:
                    self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
                self._stop.wait(0.5)

    def _sweep(self) -> str:
        """Publish for every Ingress listed now; the list's resourceVersion, to watch from."""
        doc = self._call("GET", INGRESSES)
        for item in doc.get("items") or []:
            self._publish(item)
        return str(doc.get("metadata", {}).get("resourceVersion", ""))

    def _watch(self, version: str) -> None:
        url = f"{self.server}{INGRESSES}?watch=1&timeoutSeconds=30&resourceVersion={version}"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})  # noqa: S310 (loopback)
        with urllib.request.urlopen(request, context=self._ctx, timeout=40) as resp:  # noqa: S310 (loopback)
            for line in resp:
                if self._stop.is_set():
                    return
                event = json.loads(line)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    self._publish(event.get("object") or {})
                elif event.get("type") == "ERROR":  # e.g. 410 Gone: list again
                    return

    def _publish(self, ingress: dict[str, Any]) -> None:
        if (ingress.get("status") or {}).get("loadBalancer", {}).get("ingress"):
            return
        meta = ingress.get("metadata") or {}
        if not str(meta.get("namespace", "")).startswith(self.namespace_prefix):
            return
        path = f"/apis/networking.k8s.io/v1/namespaces/{meta.get('namespace')}/ingresses/{meta.get('name')}/status"
        patch = {"status": {"loadBalancer": {"ingress": [{"ip": ADDRESS}]}}}
        try:
            self._call("PATCH", path, patch, content_type="application/merge-patch+json")
            self.published += 1
        except urllib.error.HTTPError as exc:
            if exc.code != 404:  # deleted meanwhile: nothing to do
                raise

    def _call(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method,  # noqa: S310
                                         headers={"Content-Type": content_type, "Accept": "application/json"})
        for attempt in range(3):
            try:
                with urllib.request.urlopen(request, context=self._ctx, timeout=30) as resp:  # noqa: S310
                    return json.loads(resp.read() or b"{}")
            except urllib.error.HTTPError as exc:
                if exc.code != 409 or attempt == 2:
                    raise
                time.sleep(0.1)
        return {}
