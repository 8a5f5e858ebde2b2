"""The dashboard's resource pages: one object of an app, opened from the tree.

    GET /ui/apps/NAME/resource?group=&kind=&namespace=&name=[&container=&tail=&follow=1]
    GET /ui/apps/NAME/resource/logs?...     the logs panel alone (htmx polls it while following)

What is shown comes from `tidecd.usecases.resources`, the same use case the api and the CLI answer with:
the live and desired manifests (Secret values masked there), the step's diff, the Events, a Pod's
containers and why it fails, and its logs (a container chosen, a tail, and following by polling every
3 s, at most FOLLOW_POLLS times per page load). Registered on `tidecd.ui`'s table when it loads.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import yaml

from tidecd.base.errors import NotFound, PermanentError, TidecdError, disposition
from tidecd.ui import Context, Page, diffview, error_page, render, route
from tidecd.ui import who as _principal
from tidecd.usecases import resources

_NAME = r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,252})"
FOLLOW_POLLS = 200  # a followed log stops polling after this many reads (10 minutes at 3 s)
TAILS = ("50", "100", "500", "2000")


def _key_query(ctx: Context) -> dict[str, str]:
    q = ctx.request.query
    return {k: q.get(k, "") for k in ("group", "kind", "namespace", "name")}


def _logs(ctx: Context) -> dict[str, Any]:
    """The logs panel's values: the streams (or why they could not be read), the chosen container and tail."""
    q = ctx.request.query
    tail = q.get("tail", "100") if q.get("tail", "100") in TAILS else "100"
    polls = int(q["polls"]) if q.get("polls", "").isdigit() else 0
    query = {**_key_query(ctx), "tail": tail, **({"container": q["container"]} if q.get("container") else {})}
    try:
        streams, problem = resources.logs(ctx.runtime, _principal(ctx), ctx.match["name"], query)["logs"], ""
    except TidecdError as exc:  # a pod whose node serves no logs, a refusal: said on the panel
        streams, problem = [], str(exc)[:300]
    following = q.get("follow") == "1" and polls < FOLLOW_POLLS
    again = urlencode({**query, "follow": "1", "polls": str(polls + 1)}) if following else ""
    return {"streams": streams, "log_problem": problem, "tail": tail, "tails": TAILS, "following": following,
            "container": q.get("container", ""), "again": again, "base": urlencode(_key_query(ctx))}


def _refused(ctx: Context, exc: TidecdError) -> Page:
    """A bad query (400) or an object outside the project's destinations (403) as the api answers them."""
    return error_page(ctx.runtime, ctx.identity, disposition(exc).status, str(exc))


@route("GET", f"/apps/{_NAME}/resource")
def resource_page(ctx: Context) -> Page:
    try:
        key = resources.key_of(ctx.request.query)
        body = resources.detail(ctx.runtime, _principal(ctx), ctx.match["name"], key)
    except PermanentError as exc:
        if isinstance(exc, NotFound):
            raise  # the dashboard's 404 page
        return _refused(ctx, exc)
    diff = diffview.lines(body["diff"], secret=key.kind == "Secret") if body.get("diff") else []
    dump = {side: yaml.safe_dump(body[side], sort_keys=False) if body.get(side) else "" for side in ("live", "desired")}
    has_pods = key.kind == "Pod" or (key.group, key.kind) in resources.CHILD_KINDS
    return render("resource.html", ctx, active="apps", app_name=ctx.match["name"], key=key, res=body, diff=diff,
                  manifests=dump, **(_logs(ctx) if has_pods else {"streams": None}))


@route("GET", f"/apps/{_NAME}/resource/logs")
def logs_panel(ctx: Context) -> Page:
    resources.key_of(ctx.request.query)
    return render("_logs.html", ctx, app_name=ctx.match["name"], **_logs(ctx))
