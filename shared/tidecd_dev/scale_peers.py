"""The peer side of the scale scenario (issue 17): the same apps through Flux's and Argo CD's own controllers.

The repos and app paths are tidecd_dev.scale's (`apps/<app>/` in `repos` repositories); each tool gets its
own object names (`flux-app-0007`, `argo-app-0007`) and its own namespaces (`flux-scale-r07`,
`argo-scale-r07`), so no tool sees another's objects. What is here:

- the manifests: one Flux GitRepository per repo and one Kustomization per app (`wait: true`: Ready only
  once every applied object is healthy), or one Argo CD Application per app (automated sync with prune);
- `Readiness`: when each object was first seen done (Kustomization Ready=True at its generation with a
  revision applied; Application Synced + Healthy after a Succeeded operation);
- `ObjectWatch`: one list + watch stream on a collection feeding a `Readiness` (the observer costs one
  request, not a list per poll);
- `strip_and_delete`: the teardown that leaves nothing Terminating: finalizers removed, then deleted.

Used by bench/scale_peers.py (`make bench-scale`).
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tidecd_dev.devcluster import DevCluster
from tidecd_dev.peers import AppStatus, FluxStatus
from tidecd_dev.scale import Scenario

Obj = dict[str, Any]
FLUX_PREFIX, ARGO_PREFIX = "flux", "argo"
GITREPOSITORIES = "/apis/source.toolkit.fluxcd.io/v1/namespaces/{ns}/gitrepositories"
KUSTOMIZATIONS = "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/{ns}/kustomizations"
APPLICATIONS = "/apis/argoproj.io/v1alpha1/namespaces/{ns}/applications"


def peer_name(prefix: str, app: str) -> str:
    """The peer's own name for scenario app `app`: `flux-app-0007`."""
    return f"{prefix}-{app}"


# -- manifests ---------------------------------------------------------------------------------------------


def flux_objects(scenario: Scenario, urls: Mapping[str, str], namespace: str, *, interval: str = "1h",
                 prefix: str = FLUX_PREFIX) -> tuple[list[Obj], list[Obj]]:
    """(GitRepositories, Kustomizations): one source per repo, one Kustomization per app with `wait: true`,
    applying `apps/<app>` into `<prefix>-<repo>`."""
    sources = [{"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
                "metadata": {"name": repo, "namespace": namespace},
                "spec": {"interval": interval, "url": urls[repo], "ref": {"branch": "main"}}}
               for repo in scenario.repo_names()]
    kustomizations = [
        {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
         "metadata": {"name": peer_name(prefix, app), "namespace": namespace},
         "spec": {"interval": interval, "prune": True, "wait": True, "path": f"./apps/{app}",
                  "targetNamespace": scenario.namespace(prefix, repo),
                  "sourceRef": {"kind": "GitRepository", "name": repo}}}
        for app, repo in scenario.placement()]
    return sources, kustomizations


def argo_applications(scenario: Scenario, urls: Mapping[str, str], namespace: str, *,
                      prefix: str = ARGO_PREFIX) -> list[Obj]:
    """One Application per app, automated sync with prune, `apps/<app>` into `<prefix>-<repo>`."""
    return [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
             "metadata": {"name": peer_name(prefix, app), "namespace": namespace},
             "spec": {"project": "default",
                      "source": {"repoURL": urls[repo], "targetRevision": "main", "path": f"apps/{app}"},
                      "destination": {"server": "https://kubernetes.default.svc",
                                      "namespace": scenario.namespace(prefix, repo)},
                      "syncPolicy": {"automated": {"prune": True}}}}
            for app, repo in scenario.placement()]


# -- when is an object done ----------------------------------------------------------------------------------


def kustomization_done(obj: Obj) -> bool:
    """Ready=True for the current generation, with a revision applied (with `wait: true` that means every
    applied object passed kstatus)."""
    status = FluxStatus.of(obj)
    return status.ready and bool((obj.get("status") or {}).get("lastAppliedRevision"))


def kustomization_state(obj: Obj) -> str:
    status = FluxStatus.of(obj)
    return f"ready={status.ready} {status.message[:120]}".strip()


def application_done(obj: Obj) -> bool:
    """Synced and Healthy at a revision, after a sync operation that Succeeded (Argo CD's own word)."""
    status = AppStatus.of(obj)
    return (status.sync, status.health, status.operation_phase) == ("Synced", "Healthy", "Succeeded") \
        and bool(status.revision)


def application_state(obj: Obj) -> str:
    status = AppStatus.of(obj)
    return f"{status.sync or '-'}/{status.health or '-'}/{status.operation_phase or 'no operation'} " \
           f"{'; '.join(status.conditions)[:120]}".strip()


def _unix(stamp: object) -> float | None:
    """An RFC 3339 time of the API (`2026-12-01T18:00:00Z`) in unix seconds; None when missing or bad."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


WAIT, SYNC = "until sync started", "sync operation"


def phases(spans: Iterable[tuple[float | None, float | None]], started: float) -> dict[str, float]:
    """Where the time went, split alike for every tool: p50 and p99 over the apps of the wait from the
    clock's start until the app's sync began (`WAIT`) and of the sync itself until it ended (`SYNC`), from
    (began, ended) unix times per app (None: not known)."""
    from tidecd_dev.scale import percentile

    waits = [begun - started for begun, _ in spans if begun is not None]
    runs = [ended - begun for begun, ended in spans if begun is not None and ended is not None]
    out: dict[str, float] = {}
    for name, values in ((WAIT, waits), (SYNC, runs)):
        if values:
            out[f"{name} p50"], out[f"{name} p99"] = percentile(values, 50), percentile(values, 99)
    return out


def argo_phases(apps: Iterable[Obj], started: float) -> dict[str, float]:
    """Argo CD's, from its own operationState: the sync operation's startedAt and finishedAt."""
    spans = []
    for app in apps:
        op = (app.get("status") or {}).get("operationState") or {}
        spans.append((_unix(op.get("startedAt")), _unix(op.get("finishedAt"))))
    return phases(spans, started)


def flux_phases(kustomizations: Iterable[Obj], started: float) -> dict[str, float]:
    """Flux's, from each Kustomization's own `status.history` (kustomize-controller records, per applied
    revision, when it was first reconciled and how long its last reconcile took, health wait included):
    a first reconcile ended at `firstReconciled` and began `lastReconciledDuration` before it."""
    spans: list[tuple[float | None, float | None]] = []
    for obj in kustomizations:
        history = (obj.get("status") or {}).get("history") or []
        first = history[-1] if isinstance(history, list) and history and isinstance(history[-1], dict) else {}
        ended, took = _unix(first.get("firstReconciled")), _duration(first.get("lastReconciledDuration"))
        single = first.get("totalReconciliations") == 1  # else the duration is a later reconcile's
        spans.append((ended - took, ended) if ended is not None and took is not None and single else (None, None))
    return phases(spans, started)


def _duration(text: object) -> float | None:
    """A Go duration as metav1.Duration writes it (`1.5s`, `2m3.25s`, `850ms`), in seconds; None when bad."""
    import re

    found = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m(?!s))?(?:([\d.]+)s)?(?:([\d.]+)ms)?", str(text or ""))
    if not found or not any(found.groups()):
        return None
    hours, minutes, seconds, millis = (float(g) if g else 0.0 for g in found.groups())
    return hours * 3600 + minutes * 60 + seconds + millis / 1000


@dataclass
class Readiness:
    """When each of `names` was first seen done (unix seconds), from the objects observed."""

    names: frozenset[str]
    is_done: Callable[[Obj], bool]
    describe: Callable[[Obj], str] = lambda obj: ""
    done: dict[str, float] = field(default_factory=dict)
    last: dict[str, str] = field(default_factory=dict)

    def observe(self, obj: Obj, at: float) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        if name not in self.names or name in self.done:
            return
        if self.is_done(obj):
            self.done[name] = at
        else:
            self.last[name] = self.describe(obj)

    @property
    def complete(self) -> bool:
        return len(self.done) == len(self.names)

    def stragglers(self, limit: int = 5) -> list[str]:
        left = sorted(self.names - self.done.keys())
        return [f"{name}: {self.last.get(name, 'never seen')}" for name in left[:limit]]

    def wait(self, timeout: float, *, every: float = 0.5, progress: Callable[[int], None] | None = None,
             alive: Callable[[], None] = lambda: None) -> bool:
        """True once every name is done; False after `timeout` s. `alive` raises when a peer died."""
        deadline = time.monotonic() + timeout
        while True:
            if progress is not None:
                progress(len(self.done))
            if self.complete:
                return True
            alive()
            if time.monotonic() > deadline:
                return False
            time.sleep(every)


# -- talking to the dev control plane -------------------------------------------------------------------------


class Api:
    """JSON requests to a DevCluster as its admin (urllib: the watch streams line by line)."""

    def __init__(self, dev: DevCluster) -> None:
        pki = dev.workdir / "pki"
        self.server = dev.server
        self.ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))

    def call(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
             query: Mapping[str, str] | None = None, timeout: float = 60) -> Obj:
        """One request; a 429 (the loaded API server's max in flight) or 503 is retried after a pause."""
        url = self.server + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        for attempt in range(8):
            request = urllib.request.Request(url, data=data, method=method,  # noqa: S310 (the dev cluster)
                                             headers={"Content-Type": content_type, "Accept": "application/json"})
            try:
                with urllib.request.urlopen(request, context=self.ctx, timeout=timeout) as resp:  # noqa: S310
                    return dict(json.loads(resp.read() or b"{}"))
            except urllib.error.HTTPError as exc:
                if exc.code not in (429, 503) or attempt == 7:
                    raise
                time.sleep(min(5.0, 0.25 * 2**attempt))
        raise AssertionError("not reached")

    def apply(self, obj: Obj, manager: str = "tidecd-peers") -> Obj:
        """Server-side apply of a namespaced custom object, by its collection path."""
        return self.call("PATCH", f"{collection_path(obj)}/{obj['metadata']['name']}", obj,
                         content_type="application/apply-patch+yaml",
                         query={"fieldManager": manager, "force": "true"})

    def apply_all(self, objs: Iterable[Obj], *, threads: int = 4,
                  on_done: Callable[[Obj], None] = lambda obj: None) -> None:
        """Apply with a few requests in flight, as `kubectl apply` of many files and its client QPS would."""
        def one(obj: Obj) -> None:
            for attempt in range(5):
                try:
                    self.apply(obj)
                    break
                except urllib.error.HTTPError as exc:
                    if exc.code not in (409, 429, 500, 503) or attempt == 4:
                        raise RuntimeError(f"applying {obj['kind']} {obj['metadata']['name']}: HTTP {exc.code} "
                                           f"{exc.read()[:300]!r}") from exc
                    time.sleep(0.2 * (attempt + 1))
            on_done(obj)

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, objs))


PLURALS = {"GitRepository": "gitrepositories", "Kustomization": "kustomizations", "Application": "applications"}


def collection_path(obj: Obj) -> str:
    """`/apis/<group>/<version>/namespaces/<ns>/<plural>` of one of the peers' objects (PLURALS)."""
    kind = str(obj.get("kind", ""))
    if kind not in PLURALS:
        raise ValueError(f"{kind or 'an object without kind'}: not one of the peers' kinds ({', '.join(PLURALS)})")
    return f"/apis/{obj['apiVersion']}/namespaces/{obj['metadata']['namespace']}/{PLURALS[kind]}"


class ObjectWatch:
    """List and watch one collection in a thread, feeding every object seen to `readiness`."""

    def __init__(self, api: Api, path: str, readiness: Readiness) -> None:
        self.api, self.path, self.readiness = api, path, readiness
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch {path}", daemon=True)
        self.errors: list[str] = []

    def start(self) -> ObjectWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=70)

    def _run(self) -> None:
        while not self._stop.is_set() and not self.readiness.complete:
            try:
                listed = self.api.call("GET", self.path)
                now = time.time()
                for item in listed.get("items") or []:
                    self.readiness.observe(item, now)
                self._watch(str((listed.get("metadata") or {}).get("resourceVersion", "")))
            except (OSError, ValueError, urllib.error.URLError) as exc:
                if len(self.errors) < 20:
                    self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
                self._stop.wait(0.5)

    def _watch(self, version: str) -> None:
        query = urllib.parse.urlencode({"watch": "1", "timeoutSeconds": "30", "resourceVersion": version,
                                        "allowWatchBookmarks": "true"})
        request = urllib.request.Request(f"{self.api.server}{self.path}?{query}",  # noqa: S310 (the dev cluster)
                                         headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, context=self.api.ctx, timeout=45) as resp:  # noqa: S310
            for line in resp:
                if self._stop.is_set() or self.readiness.complete:
                    return
                event = json.loads(line)
                kind = event.get("type")
                if kind in ("ADDED", "MODIFIED"):
                    self.readiness.observe(event.get("object") or {}, time.time())
                elif kind == "ERROR":  # e.g. 410 Gone: list again
                    return


def strip_and_delete(api: Api, path: str, *, timeout: float = 120.0, threads: int = 4) -> int:
    """Delete every object of a collection so none stays Terminating: finalizers removed first (the peer's
    controller is stopped by then, nobody else would), then one delete-collection; waits until it is empty.
    Returns how many objects it deleted."""
    items = api.call("GET", path).get("items") or []

    def strip(item: Obj) -> None:
        if item.get("metadata", {}).get("finalizers"):
            try:
                api.call("PATCH", f"{path}/{item['metadata']['name']}", {"metadata": {"finalizers": None}},
                         content_type="application/merge-patch+json")
            except urllib.error.HTTPError as exc:
                if exc.code != 404:
                    raise

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(strip, items))
    if items:
        api.call("DELETE", path)
    deadline = time.monotonic() + timeout
    while True:
        left = api.call("GET", path).get("items") or []
        if not left:
            return len(items)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path}: {len(left)} objects still there after {timeout:.0f}s "
                               f"(e.g. {left[0]['metadata']['name']}, finalizers "
                               f"{left[0]['metadata'].get('finalizers')})")
        with ThreadPoolExecutor(threads) as pool:  # a controller re-added one meanwhile
            list(pool.map(strip, left))
        time.sleep(0.5)


def delete_namespaces(api: Api, names: Iterable[str]) -> None:
    """Delete namespaces (not waited for: nothing in them holds a finalizer once the peers' objects went)."""
    for name in names:
        try:
            api.call("DELETE", f"/api/v1/namespaces/{name}")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
