"""The app page's resource tree: the app's objects grouped by kind, with the objects the cluster made
from them (ReplicaSets, Pods, Jobs) found by following owner references, as Argo CD's tree shows them.

`build` is pure over a `Lister` (the slice of the `Cluster` protocol it needs), so it is unit-tested
with a fake; on the app page the lister is the destination cluster. Only names, kinds and health are read
from children: never a Secret, never a spec.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tidecd import health
from tidecd.base.model import Manifest, ResourceKey
from tidecd.state import app as app_state
from tidecd.sync.plan import kind_rank
from tidecd.ui.views import operation_view
from tidecd.usecases.resources import CHILD_KINDS, Lister, LiveIndex


@dataclass
class Node:
    key: ResourceKey
    sync: str = ""
    health: str = ""
    health_message: str = ""
    wave: str = ""
    hook_phase: str = ""
    diff: str = ""
    changed: tuple[str, ...] = ()
    requires_pruning: bool = False
    detail: str = ""  # e.g. a Pod's phase
    children: list[Node] = field(default_factory=list)

    @property
    def anchor(self) -> str:
        return "r-" + "-".join(p or "_" for p in (self.key.group, self.key.kind, self.key.namespace, self.key.name))


@dataclass(frozen=True)
class Tree:
    groups: list[tuple[str, list[Node]]]
    problem: str = ""  # why the live children could not be read (the tree is then the app's objects only)

    def find(self, kind: str) -> list[Node]:
        out: list[Node] = []

        def walk(nodes: Iterable[Node]) -> None:
            for node in nodes:
                if node.key.kind == kind:
                    out.append(node)
                walk(node.children)

        walk(n for _, nodes in self.groups for n in nodes)
        return out


def _waves(current: app_state.AppState) -> dict[ResourceKey, str]:
    waves = {}
    for item in current.inventory:
        try:
            waves[ResourceKey.from_dict(item)] = str(item.get("wave", 0))
        except KeyError:
            continue
    return waves


def _results(operation: Any) -> list[dict[str, Any]]:
    view = operation_view(operation)
    return list(view.results) if view else []


def _result_key(result: dict[str, Any]) -> ResourceKey | None:
    key = result.get("key")
    if isinstance(key, dict) and "kind" in key and "name" in key:
        return ResourceKey(str(key.get("group", "")), str(key["kind"]), str(key.get("namespace", "")),
                           str(key["name"]))
    return None


def app_nodes(current: app_state.AppState) -> list[Node]:
    """The app's own objects (and the hooks of its last operation) from the stored state."""
    waves = _waves(current)
    nodes: dict[ResourceKey, Node] = {}
    for res in current.resources:
        nodes[res.key] = Node(res.key, res.status, res.health or "", res.health_message, waves.get(res.key, "0"),
                              diff=res.diff, changed=tuple(res.changed), requires_pruning=res.requires_pruning)
    for result in _results(current.operation):
        key = _result_key(result)
        if key is None:
            continue
        node = nodes.get(key)
        hook_phase = str(result.get("hook_phase") or result.get("hookPhase") or "")
        wave = result.get("wave")
        if node is None and hook_phase:
            status = str(result.get("phase") or result.get("status") or result.get("action") or "")
            node = nodes[key] = Node(key, "", status, str(result.get("message", "")))
        if node is not None:
            node.hook_phase = node.hook_phase or hook_phase
            if wave is not None and not node.wave:
                node.wave = str(wave)
    return list(nodes.values())


def build(current: app_state.AppState, lister: Lister | None, scripts: Mapping[str, str] | None = None) -> Tree:
    """The tree of one app; with a lister, each owning object gets its live children (their health with
    argocd-cm's Lua `scripts` first, as the app's own resources)."""
    nodes = app_nodes(current)
    problem = ""
    if lister is not None:
        try:
            _attach_children(nodes, lister, scripts or {})
        except Exception as exc:  # any cluster failure leaves the stored tree readable
            problem = f"live objects could not be read: {type(exc).__name__}: {str(exc)[:200]}"
    groups: dict[str, list[Node]] = {}
    for node in sorted(nodes, key=lambda n: (kind_rank(n.key.kind), n.key.kind, n.key.namespace, n.key.name)):
        groups.setdefault(node.key.kind, []).append(node)
    return Tree(list(groups.items()), problem)


def _attach_children(nodes: list[Node], lister: Lister, scripts: Mapping[str, str]) -> None:
    index = LiveIndex(lister)
    for node in nodes:
        key = node.key
        if (key.group, key.kind) not in CHILD_KINDS or not key.namespace:
            continue
        live = index.find(key)
        if live is not None:
            node.children = _child_nodes(index, live, key.namespace, 0, scripts)


def _child_nodes(index: LiveIndex, owner: Manifest, namespace: str, depth: int,
                 scripts: Mapping[str, str]) -> list[Node]:
    if depth > 3:
        return []
    out = []
    for obj in index.children(owner, namespace):
        result = health.assess(obj, scripts)
        status = obj.get("status") or {}
        detail = str(status.get("phase", "")) if obj.get("kind") == "Pod" else ""
        if obj.get("kind") == "ReplicaSet":
            detail = f"{status.get('readyReplicas', 0) or 0}/{(obj.get('spec') or {}).get('replicas', 0)} ready"
        child = Node(ResourceKey.of(obj), health=result.status.value if result else "",
                     health_message=result.message if result else "", detail=detail)
        child.children = _child_nodes(index, obj, namespace, depth + 1, scripts)
        out.append(child)
    return out
