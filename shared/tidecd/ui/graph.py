"""The app's resource tree drawn as a graph (parent → child, like Argo CD's tree view): server-rendered
SVG, each node a link to the same details page the list's nodes open (`ui.resources`).

`layout` is pure over `tree.Tree`: the app at the left, its objects in the next column, what the cluster
made from them (ReplicaSets, then Pods) further right; every leaf takes a row and a parent sits level with
the middle of its children. Bounded: at most MAX_NODES boxes (the rest is counted, not drawn).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from tidecd.state import app as app_state
from tidecd.ui import Context, Page, render, route, tree
from tidecd.ui import who as _principal
from tidecd.usecases import authz

_NAME = r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,252})"
BOX_W, BOX_H, COL_W, ROW_H, PAD = 230, 44, 290, 56, 12
MAX_NODES = 400


@dataclass(frozen=True)
class Box:
    x: int
    y: int
    kind: str
    name: str
    health: str
    sync: str
    href: str
    detail: str


@dataclass(frozen=True)
class Edge:
    x1: int
    y1: int
    x2: int
    y2: int


@dataclass(frozen=True)
class Graph:
    boxes: tuple[Box, ...]
    edges: tuple[Edge, ...]
    width: int
    height: int
    left_out: int  # nodes over MAX_NODES, not drawn


def layout(app: str, resource_tree: tree.Tree) -> Graph:
    """Boxes and edges of the tree, rooted at the app."""
    boxes: list[Box] = []
    edges: list[Edge] = []
    rows = [0]
    left_out = [0]

    def place(node: tree.Node, depth: int) -> int | None:
        """The node's centre y, once its children are placed (None: over the bound)."""
        if len(boxes) >= MAX_NODES:
            left_out[0] += 1
            return None
        centres = [c for c in (place(child, depth + 1) for child in node.children) if c is not None]
        if centres:
            mid = (centres[0] + centres[-1]) // 2
        else:
            mid = PAD + rows[0] * ROW_H + BOX_H // 2
            rows[0] += 1
        x = PAD + depth * COL_W
        query = urlencode({"group": node.key.group, "kind": node.key.kind, "namespace": node.key.namespace,
                           "name": node.key.name})
        boxes.append(Box(x, mid - BOX_H // 2, node.key.kind, node.key.name, node.health, node.sync,
                         f"/ui/apps/{app}/resource?{query}", node.detail or node.health_message[:60]))
        edges.extend(Edge(x + BOX_W, mid, x + COL_W, c) for c in centres)
        return mid

    tops = [c for c in (place(n, 1) for _, nodes in resource_tree.groups for n in nodes) if c is not None]
    root_y = (tops[0] + tops[-1]) // 2 if tops else PAD + BOX_H // 2
    boxes.append(Box(PAD, root_y - BOX_H // 2, "Application", app, "", "", f"/ui/apps/{app}", ""))
    edges.extend(Edge(PAD + BOX_W, root_y, PAD + COL_W, c) for c in tops)
    depth = max((b.x for b in boxes), default=PAD) + BOX_W + PAD
    return Graph(tuple(boxes), tuple(edges), depth, PAD * 2 + max(rows[0], 1) * ROW_H, left_out[0])


@route("GET", f"/apps/{_NAME}/graph")
def graph_page(ctx: Context) -> Page:
    name = ctx.match["name"]
    app = authz.app_for(ctx.runtime, _principal(ctx), name)  # NotFound for an app this caller may not see
    current = app_state.load(ctx.runtime.store, name)[0]
    problem = ""
    try:
        lister = ctx.runtime.cluster(app.destination)
    except Exception as exc:  # any client failure: the graph still shows the stored objects
        lister, problem = None, f"the destination cluster cannot be reached ({type(exc).__name__})"
    drawn = tree.build(current, lister, ctx.runtime.config().argo_settings.health_lua)
    return render("graph.html", ctx, active="apps", app_name=name, graph=layout(name, drawn),
                  problem=problem or drawn.problem, box=(BOX_W, BOX_H))
