"""Explain why: an app's resources one by one, read from the destination cluster when asked.

For one object of an app: the live manifest, the desired one, their diff (the step's own comparison,
`step.observe.compare_all`, never a second one), the core/v1 Events about it and, for a Pod, its
containers (state, restarts, last termination, image) and logs. The objects the cluster made from the
app's own (ReplicaSets, Pods, Jobs) are found by following ownerReferences, as Argo CD's resource tree
does; the dashboard's tree (`ui.tree`) walks them with the same `LiveIndex`.

Within the project's rules: the object must be in the app's inventory or under one of its objects, and
its namespace among the project's destinations (else NotFound, or PermissionDenied for a namespace
outside them); reading needs Argo CD's `applications, get`, logs `logs, get`. Secret values never leave:
every manifest goes through `diff.mask_secret` (Argo CD's `++++++++`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from tidecd.base.errors import NotFound, PermanentError, PermissionDenied
from tidecd.base.model import Manifest, ResourceKey
from tidecd.base.principal import Principal
from tidecd.clients.cluster import KubeCluster, UnknownKind
from tidecd.config.load import Application, Destination
from tidecd.diff import mask_secret
from tidecd.project import rules
from tidecd.runtime import Runtime
from tidecd.state import app as app_state
from tidecd.usecases import authz

# Kinds whose objects own generated children, and the kinds of those children (Argo CD's tree).
CHILD_KINDS: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {
    ("apps", "Deployment"): (("apps", "ReplicaSet"),),
    ("apps", "ReplicaSet"): (("", "Pod"),),
    ("apps", "StatefulSet"): (("", "Pod"),),
    ("apps", "DaemonSet"): (("", "Pod"),),
    ("batch", "CronJob"): (("batch", "Job"),),
    ("batch", "Job"): (("", "Pod"),),
}
MAX_CHILDREN = 200  # per object: a runaway controller must not make a page or an answer unbounded
MAX_DEPTH = 3  # Deployment → ReplicaSet → Pod, CronJob → Job → Pod
MAX_LOG_PODS = 10  # pods whose logs one call reads (an app's, or an owner's)
MAX_TAIL = 5000  # lines per container and call


class Lister(Protocol):
    def list(self, group: str, kind: str, *, namespace: str = "", label_selector: str = "") -> list[Manifest]: ...


class LiveIndex:
    """Objects of one (group, kind, namespace), listed once per page or answer."""

    def __init__(self, lister: Lister) -> None:
        self.lister = lister
        self.cache: dict[tuple[str, str, str], list[Manifest]] = {}

    def objects(self, group: str, kind: str, namespace: str) -> list[Manifest]:
        slot = (group, kind, namespace)
        if slot not in self.cache:
            self.cache[slot] = self.lister.list(group, kind, namespace=namespace)
        return self.cache[slot]

    def find(self, key: ResourceKey) -> Manifest | None:
        return next((o for o in self.objects(key.group, key.kind, key.namespace)
                     if (o.get("metadata") or {}).get("name") == key.name), None)

    def children(self, owner: Manifest, namespace: str) -> list[Manifest]:
        """The objects whose ownerReferences name `owner`'s uid, by name, at most MAX_CHILDREN."""
        uid = (owner.get("metadata") or {}).get("uid")
        key = ResourceKey.of(owner)
        found = []
        for group, kind in CHILD_KINDS.get((key.group, key.kind), ()):
            for obj in self.objects(group, kind, namespace):
                refs = (obj.get("metadata") or {}).get("ownerReferences") or []
                if uid and any(ref.get("uid") == uid for ref in refs):
                    found.append(obj)
        return sorted(found, key=lambda o: str((o.get("metadata") or {}).get("name", "")))[:MAX_CHILDREN]

    def descendants(self, owner: Manifest, namespace: str, depth: int = 0) -> Iterable[tuple[Manifest, Manifest]]:
        """(parent, child) pairs under `owner`, depth first."""
        if depth >= MAX_DEPTH:
            return
        for child in self.children(owner, namespace):
            yield owner, child
            yield from self.descendants(child, namespace, depth + 1)


@dataclass(frozen=True)
class Found:
    """One object of an app, located: `managed` when it is in the app's inventory, else a child."""

    app: Application
    key: ResourceKey
    live: Manifest | None
    managed: bool
    cluster: KubeCluster


def key_of(query: Mapping[str, str]) -> ResourceKey:
    """The object a query names (`group`, `kind`, `namespace`, `name`); a missing field is named."""
    for field in ("kind", "name"):
        if not query.get(field):
            raise PermanentError(f"query parameter {field} is required (with group and namespace)")
    return ResourceKey(query.get("group", ""), query["kind"], query.get("namespace", ""), query["name"])


def _managed(runtime: Runtime, name: str) -> list[app_state.ResourceStatus]:
    return list(app_state.load(runtime.store, name)[0].resources)


def _check_namespace(runtime: Runtime, app: Application, key: ResourceKey) -> None:
    if not key.namespace:
        return
    project = runtime.config().projects[app.project]
    where = Destination(app.destination.server, app.destination.name, key.namespace)
    if not rules.destination_permitted(project, where):
        raise PermissionDenied(f"namespace {key.namespace!r} is not among project {app.project!r}'s destinations")


def locate(runtime: Runtime, who: Principal, name: str, key: ResourceKey, action: str = "get") -> Found:
    """The object `key` of app `name`, read now: in its inventory, or under one of its objects."""
    app = authz.app_for(runtime, who, name)
    if action == "logs":
        authz.require(runtime, who, "logs", "get", authz.app_object(app))
    _check_namespace(runtime, app, key)
    managed = {r.key for r in _managed(runtime, name)}
    cluster = runtime.cluster(app.destination)
    if key in managed:
        try:
            return Found(app, key, cluster.get(key), True, cluster)
        except UnknownKind:
            return Found(app, key, None, True, cluster)
    index = LiveIndex(cluster)
    for owner in sorted(k for k in managed if (k.group, k.kind) in CHILD_KINDS and k.namespace == key.namespace):
        live = index.find(owner)
        for _, child in (index.descendants(live, owner.namespace) if live is not None else ()):
            if ResourceKey.of(child) == key:
                return Found(app, key, child, False, cluster)
    raise NotFound(f"app {name!r} has no resource {key} (not in its inventory, nor under one of its objects)")


def shown(obj: Manifest | None) -> Manifest | None:
    """An object as a page or answer may show it: Secret values masked, managedFields left out."""
    if obj is None:
        return None
    masked = dict(mask_secret(obj))
    meta = dict(masked.get("metadata") or {})
    meta.pop("managedFields", None)
    head = {"apiVersion": masked.get("apiVersion", ""), "kind": masked.get("kind", ""), "metadata": meta}
    return head | {k: v for k, v in masked.items() if k not in head}  # as kubectl prints it: kind first


def tree(runtime: Runtime, who: Principal, name: str) -> list[dict[str, Any]]:
    """The app's objects (stored status) and, under each owner, what the cluster made from it (read now):
    one row per object with its `parent` (`""` for the app's own)."""
    app = authz.app_for(runtime, who, name)
    rows: list[dict[str, Any]] = []
    owners = []
    for res in _managed(runtime, name):
        rows.append({**res.key.to_dict(), "sync": str(res.status), "health": str(res.health or ""),
                     "message": res.health_message, "parent": "", "managed": True})
        if (res.key.group, res.key.kind) in CHILD_KINDS and res.key.namespace:
            owners.append(res.key)
    if owners:
        index = LiveIndex(runtime.cluster(app.destination))
        for owner in owners:
            live = index.find(owner)
            for parent, child in (index.descendants(live, owner.namespace) if live is not None else ()):
                rows.append({**ResourceKey.of(child).to_dict(), "sync": "", "health": _child_health(child),
                             "message": pod_reason(child), "parent": str(ResourceKey.of(parent)),
                             "managed": False})
    return rows


def _child_health(obj: Manifest) -> str:
    # lazy: the health catalogue (Lua) only when children are shown
    from tidecd import health

    result = health.assess(obj, {})
    return result.status.value if result else ""


def pod_reason(obj: Manifest) -> str:
    """A Pod's one-line why, as `kubectl get pods` prints STATUS: a waiting or terminated container's
    reason (CrashLoopBackOff, Error, OOMKilled) with its exit code, else the pod's reason or phase."""
    if obj.get("kind") != "Pod":
        return ""
    status = obj.get("status") or {}
    for container in containers(obj):
        if container["reason"] and container["state"] != "running":
            code = f" (exit code {container['exitCode']})" if container.get("exitCode") is not None else ""
            return f"{container['reason']}{code}"
    return str(status.get("reason") or status.get("phase") or "")


def containers(pod: Manifest) -> list[dict[str, Any]]:
    """Each container of a Pod: image, state and its reason, ready, restarts, last termination."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    statuses = {s.get("name"): s for s in (status.get("initContainerStatuses") or [])
                + (status.get("containerStatuses") or []) if isinstance(s, dict)}
    out = []
    for init, items in ((True, spec.get("initContainers") or []), (False, spec.get("containers") or [])):
        for item in items:
            found = statuses.get(item.get("name"), {})
            state, detail = _state(found.get("state") or {})
            last = (found.get("lastState") or {}).get("terminated") or {}
            out.append({"name": str(item.get("name", "")), "init": init, "image": str(item.get("image", "")),
                        "state": state, "reason": str(detail.get("reason", "")),
                        "message": str(detail.get("message", ""))[:1000], "exitCode": detail.get("exitCode"),
                        "ready": bool(found.get("ready", False)), "restartCount": int(found.get("restartCount", 0)),
                        "lastTermination": {"reason": str(last.get("reason", "")), "exitCode": last.get("exitCode"),
                                            "finishedAt": str(last.get("finishedAt", "")),
                                            "message": str(last.get("message", ""))[:1000]} if last else None})
    return out


def _state(state: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    for name in ("waiting", "terminated", "running"):
        if isinstance(state.get(name), dict):
            return name, state[name]
    return "unknown", {}


def events(found: Found) -> list[dict[str, Any]]:
    """The Events about the object, oldest first (Argo CD's resource events)."""
    if found.live is None:
        return []
    uid = str((found.live.get("metadata") or {}).get("uid", ""))
    out = []
    for event in found.cluster.events(found.key, uid):
        source = event.get("source") or {}
        out.append({"type": str(event.get("type", "")), "reason": str(event.get("reason", "")),
                    "message": str(event.get("message", ""))[:2000], "count": int(event.get("count") or 1),
                    "firstSeen": str(event.get("firstTimestamp") or event.get("eventTime") or ""),
                    "lastSeen": str(event.get("lastTimestamp") or event.get("eventTime") or ""),
                    "source": str(source.get("component") or event.get("reportingComponent") or "")})
    return sorted(out, key=lambda e: e["lastSeen"])


def detail(runtime: Runtime, who: Principal, name: str, key: ResourceKey) -> dict[str, Any]:
    """Everything about one object: live, desired, their diff (for the app's own objects), events, and for a
    Pod its containers and why it fails."""
    found = locate(runtime, who, name, key)
    body: dict[str, Any] = {"app": name, "resource": key.to_dict(), "managed": found.managed,
                            "live": shown(found.live), "desired": None, "sync": "", "diff": "", "changedPaths": []}
    if found.managed:
        body.update(_compared(runtime, found))
    body["events"] = events(found)
    if key.kind == "Pod" and found.live is not None:
        body["containers"] = containers(found.live)
        body["reason"] = pod_reason(found.live)
    return body


def _compared(runtime: Runtime, found: Found) -> dict[str, Any]:
    """The desired object at the app's compared revision and the step's comparison of it with live."""
    # lazy: the render and the comparison only when one object's details are asked for
    from tidecd.step import desired, observe

    current = app_state.load(runtime.store, found.app.name)[0]
    wanted = desired.desired_of(runtime, found.app, found.cluster, current.revision)
    obj = next((m for m in wanted.manifests if ResourceKey.of(m) == found.key), None)
    live = {found.key: found.live} if found.live is not None else {}
    compared = observe.compare_all(found.cluster, found.app, runtime.config(), [obj] if obj else [], live)
    result = next((r for r in compared.comparison.resources if r.key == found.key), None)
    return {"desired": shown(obj), "revision": wanted.revision,
            "sync": str(result.status) if result else "Synced",
            "diff": result.text if result else "", "changedPaths": list(result.changed_paths) if result else [],
            "error": result.error if result else ""}


def log_query(query: Mapping[str, str]) -> tuple[ResourceKey | None, str, int, str]:
    """(object or None for the whole app, container, tail, sinceTime) from a query; bad values named."""
    tail = query.get("tail", "100")
    if not tail.isdigit() or not 0 < int(tail) <= MAX_TAIL:
        raise PermanentError(f"query parameter tail must be a number of lines from 1 to {MAX_TAIL}")
    key = key_of(query) if query.get("kind") or query.get("name") else None
    return key, query.get("container", ""), int(tail), query.get("sinceTime", "")


def logs(runtime: Runtime, who: Principal, name: str, query: Mapping[str, str]) -> dict[str, Any]:
    """The last lines of the pods' containers: one pod, the pods under an object, or every pod of the app
    (at most MAX_LOG_PODS); `sinceTime` (RFC 3339) keeps only newer lines, for a client that follows."""
    key, container, tail, since = log_query(query)
    if key is None:
        app = authz.app_for(runtime, who, name)
        authz.require(runtime, who, "logs", "get", authz.app_object(app))
        found = _app_pods(runtime, app)
    else:
        top = locate(runtime, who, name, key, "logs")
        found = [top] if key.kind == "Pod" else _pods_under(top)
    out = []
    for pod in found[:MAX_LOG_PODS]:
        if pod.live is None:
            continue
        names = [c["name"] for c in containers(pod.live) if not container or c["name"] == container]
        if container and not names and key is not None and key.kind == "Pod":
            raise NotFound(f"pod {pod.key} has no container {container!r}")
        for each in names:
            text = pod.cluster.pod_log(pod.key.namespace, pod.key.name, container=each, tail_lines=tail,
                                       since_time=since)
            out.append({"pod": pod.key.name, "namespace": pod.key.namespace, "container": each,
                        "lines": _lines(text)})
    return {"app": name, "logs": out}


def _app_pods(runtime: Runtime, app: Application) -> list[Found]:
    """The app's own Pods and the Pods under its objects, read now."""
    cluster = runtime.cluster(app.destination)
    index = LiveIndex(cluster)
    pods: list[Manifest] = []
    for res in _managed(runtime, app.name):
        if res.key.kind == "Pod" and not res.key.group:
            live = index.find(res.key)
            pods += [live] if live is not None else []
        elif (res.key.group, res.key.kind) in CHILD_KINDS and res.key.namespace:
            owner = index.find(res.key)
            pods += [c for _, c in (index.descendants(owner, res.key.namespace) if owner is not None else ())
                     if c.get("kind") == "Pod"]
    return [Found(app, ResourceKey.of(p), p, False, cluster) for p in pods]


def manifests(runtime: Runtime, who: Principal, name: str, source: str, revision: str) -> dict[str, Any]:
    """The app's manifests: `git` renders them at `revision` (default: the compared one) as a sync would
    apply them; `live` reads its objects now. Secret values masked."""
    app = authz.app_for(runtime, who, name)
    cluster = runtime.cluster(app.destination)
    if source == "live":
        if revision:
            raise PermanentError("query parameter revision applies to source=git only")
        keys = [r.key for r in _managed(runtime, name)]
        # lazy: the step's concurrent reads only when live manifests are asked for
        from tidecd.step.observe import read

        return {"app": name, "source": "live", "revision": "",
                "manifests": [shown(obj) for _, obj in read(cluster, keys) if obj is not None]}
    if source != "git":
        raise PermanentError(f"query parameter source must be live or git, not {source!r}")
    # lazy: the render only when desired manifests are asked for
    from tidecd.step import desired

    wanted = desired.desired_of(runtime, app, cluster, revision or app_state.load(runtime.store, name)[0].revision)
    return {"app": name, "source": "git", "revision": wanted.revision,
            "manifests": [shown(obj) for obj in wanted.manifests]}


MAX_LOCAL_FILES, MAX_LOCAL_BYTES = 2000, 8 * 1024 * 1024  # what `app diff --local` may send


def diff_local(runtime: Runtime, who: Principal, name: str, files: Mapping[str, str]) -> dict[str, Any]:
    """What a sync of the app's source as `files` (a local directory: `tidecd app diff --local DIR`) would
    change now: rendered as the app's source is (its tool and options, `render.render`), placed as the
    step places it, held to the project's rules, then the preview's comparison (`observe.comparison_of`)."""
    # lazy: the render and the step's comparison only for a local diff
    from tidecd import render
    from tidecd.images.state import render_override
    from tidecd.step import desired, observe

    app = authz.app_for(runtime, who, name)
    if app.sources or app.source.chart:
        raise PermanentError(f"app {name!r}: --local renders the directory of a single git source only "
                             "(not a chart repository's chart, nor several sources)")
    cluster = runtime.cluster(app.destination)
    config = runtime.config()
    with tempfile.TemporaryDirectory(prefix="tidecd-local-") as tmp:
        _write_files(Path(tmp), files)
        manifests = render.render(Path(tmp), replace(app.source, path="."), app_name=app.name,
                                  namespace=app.destination.namespace, override=render_override(runtime.store, name),
                                  build_env=desired.build_env_of(runtime, app, "local"))
    placed = desired.place(cluster, config.argo_settings, app, "local", manifests)
    rules.enforce(config.projects[app.project], app, placed.manifests, placed.namespaced)
    comparison, free = observe.comparison_of(cluster, app, config, placed.manifests)
    # the app's objects the directory no longer has: what a sync would prune (compare_all's own rule)
    given_keys = {ResourceKey.of(m) for m in placed.manifests}
    gone = [key for key in (r.key for r in _managed(runtime, name)) if key not in given_keys]
    stale = {key: obj for key, obj in observe.read(cluster, gone) if obj is not None}
    pruned = observe.compare_all(cluster, app, config, [], stale).comparison.resources
    changes = [r.change().to_dict() for r in [*comparison.resources, *pruned]]
    status = "OutOfSync" if pruned else str(comparison.status)
    return {"app": name, "sync": status, "changes": changes, "notOwned": sorted(str(k) for k in free)}


def _write_files(root: Path, files: Mapping[str, str]) -> None:
    """The sent files under `root`: relative paths only, bounded in number and size (named when not)."""
    if len(files) > MAX_LOCAL_FILES or sum(len(v) for v in files.values()) > MAX_LOCAL_BYTES:
        raise PermanentError(f"body field files: at most {MAX_LOCAL_FILES} files and {MAX_LOCAL_BYTES:,} bytes")
    for rel, text in files.items():
        parts = PurePosixPath(rel).parts
        if not parts or PurePosixPath(rel).is_absolute() or ".." in parts or "\\" in rel:
            raise PermanentError(f"body field files: {rel!r} is not a relative path inside the directory")
        target = root.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def _pods_under(top: Found) -> list[Found]:
    if top.live is None:
        return []
    index = LiveIndex(top.cluster)
    pods = [child for _, child in index.descendants(top.live, top.key.namespace) if child.get("kind") == "Pod"]
    return [Found(top.app, ResourceKey.of(p), p, False, top.cluster) for p in pods[:MAX_LOG_PODS]]


def _lines(text: str) -> list[dict[str, str]]:
    """Log lines as the server sent them with timestamps (`TIME TEXT`): the time apart, for following."""
    out = []
    for line in text.splitlines():
        stamp, _, rest = line.partition(" ")
        if stamp[:2].isdigit() and "T" in stamp:
            out.append({"time": stamp, "text": rest})
        else:
            out.append({"time": "", "text": line})
    return out
