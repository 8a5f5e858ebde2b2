"""A small in-memory cluster implementing `tidecd.clients.cluster.Cluster`, and a Runtime around it.

Enough of an API server for the sync engine's decisions: kinds served (CRDs add theirs once applied),
server-side apply with dry-run, validation of a few fields (a Service port out of range is refused, as the
real API server refuses it), label-selector lists, deletes (optionally slow: a `deletionTimestamp` first).
Nothing becomes healthy by itself: tests move objects along with `ready`, `complete` and `fail`.
"""

from __future__ import annotations

import builtins
import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidecd.base.errors import ClusterUnavailable
from tidecd.base.model import Manifest, ResourceKey
from tidecd.clients.cluster import ApiError, ApiResource, UnknownKind
from tidecd.clients.store import MemoryStore
from tidecd.config.load import Application, ApplicationSource, Config, Destination, SyncPolicy
from tidecd.runtime import Runtime, Settings

KINDS = [
    ("", "v1", "Namespace", "namespaces", False), ("", "v1", "ConfigMap", "configmaps", True),
    ("", "v1", "Secret", "secrets", True), ("", "v1", "Service", "services", True),
    ("", "v1", "Pod", "pods", True), ("apps", "v1", "Deployment", "deployments", True),
    ("batch", "v1", "Job", "jobs", True), ("networking.k8s.io", "v1", "Ingress", "ingresses", True),
    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False),
]


class FakeCluster:
    def __init__(self) -> None:
        self.kinds = {(g, k): ApiResource(g, v, k, p, ns) for g, v, k, p, ns in KINDS}
        self.objects: dict[ResourceKey, Manifest] = {}
        self.calls: list[tuple[str, ResourceKey]] = []  # (verb, key): apply, dry-run, delete, replace
        self.writes = 0
        self.slow_delete = False
        self.before_call: Callable[[str, ResourceKey], None] | None = None  # e.g. raise to simulate a kill
        self.away = False  # the API server does not answer: every call raises ClusterUnavailable
        self._rv = 0
        self._lock = threading.RLock()
        self.event_items: builtins.list[Manifest] = []  # what `events` answers
        self.pod_logs: dict[tuple[str, str, str], str] = {}  # (namespace, pod, container) → `pod_log`'s text

    # -- the Cluster protocol --------------------------------------------------------------------------

    def resource(self, group: str, kind: str) -> ApiResource:
        self._answer()
        found = self.kinds.get((group, kind))
        if found is None:
            raise UnknownKind(f"the API server serves no {group + '/' if group else ''}{kind}")
        return found

    def is_namespaced(self, group: str, kind: str) -> bool:
        return self.resource(group, kind).namespaced

    def capabilities(self) -> tuple[str, tuple[str, ...]]:
        """As `KubeCluster.capabilities`: the version and the served kinds' `group/version[/Kind]`."""
        self._answer()
        served = {text for r in self.kinds.values() for text in (r.api_version, f"{r.api_version}/{r.kind}")}
        return "v1.34.4", tuple(sorted(served))

    def get(self, key: ResourceKey) -> Manifest | None:
        self.resource(key.group, key.kind)
        with self._lock:
            found = self.objects.get(key)
            return copy.deepcopy(found) if found is not None else None

    def list(self, group: str, kind: str, *, namespace: str = "", label_selector: str = "") -> list[Manifest]:
        self.resource(group, kind)
        label, _, value = label_selector.partition("=")
        with self._lock:
            return [copy.deepcopy(o) for k, o in sorted(self.objects.items())
                    if (k.group, k.kind) == (group, kind) and (not namespace or k.namespace == namespace)
                    and (not label or (o["metadata"].get("labels") or {}).get(label) == value)]

    def apply(self, obj: Manifest, *, dry_run: bool = False) -> Manifest:
        key = ResourceKey.of(obj)
        self._call("dry-run" if dry_run else "apply", key)
        self.resource(key.group, key.kind)
        self._validate(key, obj)
        with self._lock:
            current = self.objects.get(key)
            merged = copy.deepcopy(obj)
            meta = merged.setdefault("metadata", {})
            if current is not None:
                for name in ("uid", "creationTimestamp", "deletionTimestamp"):
                    if name in current["metadata"]:
                        meta[name] = current["metadata"][name]
                if "status" in current:
                    merged["status"] = current["status"]
                changed = _spec(current) != _spec(merged)
                meta["generation"] = current["metadata"].get("generation", 1) + (1 if changed else 0)
            else:
                meta["uid"] = f"uid-{self._rv + 1}"
                meta["creationTimestamp"] = "2026-01-01T00:00:00Z"
                meta["generation"] = 1
            if dry_run:
                meta["resourceVersion"] = current["metadata"]["resourceVersion"] if current else ""
                return merged
            self.writes += 1
            self._rv += 1
            meta["resourceVersion"] = str(self._rv)
            self.objects[key] = merged
            if key.kind == "CustomResourceDefinition":
                spec = obj["spec"]
                version = spec["versions"][0]["name"]
                self.kinds[(spec["group"], spec["names"]["kind"])] = ApiResource(
                    spec["group"], version, spec["names"]["kind"], spec["names"]["plural"],
                    spec.get("scope", "Namespaced") == "Namespaced")
                merged["status"] = {"conditions": [{"type": "Established", "status": "True"},
                                                   {"type": "NamesAccepted", "status": "True"}]}
            return copy.deepcopy(merged)

    def replace(self, obj: Manifest, *, force: bool = False) -> Manifest:
        self._call("replace", ResourceKey.of(obj))
        return self.apply(obj)

    def delete(self, key: ResourceKey, *, propagation: str = "Background") -> None:
        self._call("delete", key)
        with self._lock:
            self.writes += 1
            if key not in self.objects:
                return
            if self.slow_delete:
                self.objects[key]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:01Z"
            else:
                del self.objects[key]

    # -- test controls ---------------------------------------------------------------------------------

    def finish_deletes(self) -> None:
        with self._lock:
            for key in [k for k, o in self.objects.items() if o["metadata"].get("deletionTimestamp")]:
                del self.objects[key]

    def ready(self, key: ResourceKey) -> None:
        """A Deployment rolled out (Healthy)."""
        with self._lock:
            obj = self.objects[key]
            replicas = obj.get("spec", {}).get("replicas", 1)
            obj["status"] = {"observedGeneration": obj["metadata"]["generation"], "replicas": replicas,
                             "updatedReplicas": replicas, "availableReplicas": replicas}
            self._bump(obj)

    def complete(self, key: ResourceKey) -> None:
        with self._lock:
            obj = self.objects[key]
            obj["status"] = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}
            self._bump(obj)

    def fail(self, key: ResourceKey, message: str = "BackoffLimitExceeded") -> None:
        with self._lock:
            obj = self.objects[key]
            obj["status"] = {"conditions": [{"type": "Failed", "status": "True", "message": message}]}
            self._bump(obj)

    def add(self, obj: Manifest) -> None:
        """An object created by someone else (kubectl, another tool)."""
        with self._lock:
            self._rv += 1
            obj = copy.deepcopy(obj)
            obj["metadata"].update({"uid": f"uid-{self._rv}", "resourceVersion": str(self._rv), "generation": 1})
            self.objects[ResourceKey.of(obj)] = obj

    def events(self, key: ResourceKey, uid: str = "", *, limit: int = 200) -> builtins.list[Manifest]:
        """The Events a test recorded (`event_items`) whose involvedObject is `key` (and `uid`)."""
        self._answer()
        return [copy.deepcopy(e) for e in self.event_items
                if (e["involvedObject"]["kind"], e["involvedObject"]["name"]) == (key.kind, key.name)
                and (not uid or e["involvedObject"].get("uid") == uid)][:limit]

    def pod_log(self, namespace: str, name: str, *, container: str = "", tail_lines: int = 100,
                limit_bytes: int = 1 << 20, since_time: str = "", previous: bool = False) -> str:
        """The log a test recorded (`pod_logs[(namespace, pod, container)]`): `TIME TEXT` lines, as the
        API server answers with timestamps=true."""
        self._answer()
        lines = self.pod_logs.get((namespace, name, container), "").splitlines()
        lines = [line for line in lines if not since_time or line.split(" ", 1)[0] > since_time]
        return "".join(line + "\n" for line in lines[-tail_lines:])[:limit_bytes]

    def created(self, kind: str) -> builtins.list[str]:
        return [k.name for verb, k in self.calls if verb == "apply" and k.kind == kind]

    def _bump(self, obj: Manifest) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)

    def _answer(self) -> None:
        if self.away:
            raise ClusterUnavailable("API server https://fake:6443 unreachable: ConnectionRefusedError")

    def _call(self, verb: str, key: ResourceKey) -> None:
        self._answer()
        if self.before_call is not None:
            self.before_call(verb, key)
        with self._lock:
            self.calls.append((verb, key))

    def _validate(self, key: ResourceKey, obj: Manifest) -> None:
        if key.kind == "Service":
            for index, port in enumerate((obj.get("spec") or {}).get("ports") or []):
                if not 0 < int(port.get("port", 0)) < 65536:
                    raise ApiError(key, 422, "Invalid", f'Service "{key.name}" is invalid: spec.ports[{index}].port: '
                                   "Invalid value: 99999: must be between 1 and 65535, inclusive")
        if key.namespace and ResourceKey("", "Namespace", "", key.namespace) not in self.objects:
            raise ApiError(key, 404, "NotFound", f'namespaces "{key.namespace}" not found')


def _spec(obj: Manifest) -> Any:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


@dataclass
class FakeGit:
    """A fake source (`tidecd.step.desired.Render`, given to `fake_runtime`): the manifests of each revision
    pushed, HEAD the last one."""

    head: str = ""
    revisions: dict[str, list[Manifest]] = field(default_factory=dict)
    renders: int = 0

    def push(self, manifests: list[Manifest]) -> str:
        sha = f"{len(self.revisions) + 1:040x}"
        self.revisions[sha], self.head = copy.deepcopy(manifests), sha
        return sha

    def render(self, runtime: Runtime, app: Application, revision: str = "",
               warnings: list[str] | None = None) -> tuple[str, list[Manifest]]:
        self.renders += 1
        sha = revision or self.head
        return sha, copy.deepcopy(self.revisions[sha])


class CountingStore(MemoryStore):
    """The in-memory store, noting every key written: a no-op must write nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, key: str, data: bytes, *, if_generation_match: int | None = None) -> int:
        self.writes.append(key)
        return super().write(key, data, if_generation_match=if_generation_match)

    def state_writes(self) -> list[str]:
        return [k for k in self.writes if k.startswith("state/")]


def fake_runtime(cluster: FakeCluster, store: MemoryStore, app: Application, git: FakeGit | None = None, *,
                 config: Config | None = None, secrets: list[dict[str, Any]] | None = None) -> Runtime:
    """A Runtime over the fakes: the cluster as destination `in-cluster`, `git` as the app's source, the
    config of `app` alone unless `config` is given, and `secrets` as the config source's plain Secrets."""
    return Runtime.of(Settings(config="fake", store="memory"), store,
                      config=config if config is not None else Config(applications={app.name: app}),
                      clusters={"in-cluster": cluster},  # type: ignore[dict-item]
                      secrets=secrets, render=git.render if git is not None else None)


def application(name: str = "app", namespace: str = "ns", **policy: Any) -> Application:
    return Application(name=name, project="default",
                       source=ApplicationSource(repo_url="https://git.example/repo.git", path="app",
                                                target_revision="main"),
                       destination=Destination(name="in-cluster", namespace=namespace),
                       sync_policy=SyncPolicy(**policy))
