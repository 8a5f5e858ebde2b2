"""The api's routes that write an app to the config source (`tidecd.usecases.app_write`): `POST /apps` with an
Application manifest creates it, `PUT /apps/NAME` replaces its spec; both answer with the commit (and the pull
request on a protected branch). Argo CD's `POST /api/v1/applications` and `PUT /api/v1/applications/NAME`,
under this api's `/apps` naming."""

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
