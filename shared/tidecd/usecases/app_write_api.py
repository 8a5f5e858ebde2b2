"""The api's routes that write an app to the config source (`tidecd.usecases.app_write`): `POST /apps` with an
Application manifest creates it, `PUT /apps/NAME` replaces its spec, `DELETE /apps/NAME?cascade=` deletes it;
each answers with the commit (and the pull request on a protected branch). Argo CD's `POST`, `PUT` and
`DELETE /api/v1/applications[/NAME]`, under this api's `/apps` naming."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tidecd.base.errors import PermanentError
from tidecd.base.model import Response
from tidecd.runtime import Runtime
from tidecd.usecases import api, app_write


@api.route("POST", "/apps", body="ApplicationManifest")
def create_app(runtime: Runtime, _: str, payload: dict[str, Any], __: Mapping[str, str]) -> Response:
    saved = app_write.save(runtime, api.principal(), payload, create=True, dispatcher=api.chosen_dispatcher())
    return Response(201, saved.to_dict())


@api.route("PUT", "/apps/(?P<name>[^/]+)", body="ApplicationManifest")
def update_app(runtime: Runtime, name: str, payload: dict[str, Any], __: Mapping[str, str]) -> Response:
    meta = payload.get("metadata")
    if not isinstance(meta, dict) or meta.get("name") != name:
        raise PermanentError(f"body field metadata.name must be {name!r}, the app the path names")
    saved = app_write.save(runtime, api.principal(), payload, create=False, dispatcher=api.chosen_dispatcher())
    return Response(200, saved.to_dict())


@api.route("DELETE", "/apps/(?P<name>[^/]+)")
def delete_app(runtime: Runtime, name: str, _: dict[str, Any], query: Mapping[str, str]) -> Response:
    """Argo CD's `DELETE /api/v1/applications/NAME?cascade=&propagationPolicy=`: `cascade=false` (or
    `propagationPolicy=orphan`) orphans the objects, `propagationPolicy=background` deletes them in the
    background; tidecd's `cascade=foreground|background|orphan` says the same in one word."""
    cascade = cascade_of_query(query)
    saved = app_write.remove(runtime, api.principal(), name, cascade=cascade, dispatcher=api.chosen_dispatcher())
    return Response(200, {**saved.to_dict(), "cascade": cascade})


def cascade_of_query(query: Mapping[str, str]) -> str:
    cascade = (query.get("cascade") or "").lower()
    policy = (query.get("propagationPolicy") or "").lower()
    if cascade in ("false", "0") or policy == "orphan":
        return "orphan"
    if cascade in ("", "true", "1"):
        return policy if policy in ("foreground", "background") else "foreground"
    return cascade  # checked by `app_write.remove`
