"""The dashboard's ApplicationSets page: each ApplicationSet the caller may see, with the apps it generated
(those the caller may see: their sync and health as recorded) and its errors.

    GET /ui/appsets

The same use case as `GET /api/v1/applicationsets` and `tidecd appset list` (`usecases.appset_views`).
Registered on `tidecd.ui`'s table when it loads.
"""

from __future__ import annotations

from tidecd.ui import Context, Page, render, route, who
from tidecd.usecases import appset_views


@route("GET", "/appsets")
def appsets(ctx: Context) -> Page:
    return render("appsets.html", ctx, active="appsets", appsets=appset_views.summaries(ctx.runtime, who(ctx)))
