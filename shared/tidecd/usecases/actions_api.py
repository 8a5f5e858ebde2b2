"""The api's routes for resource actions (`tidecd.usecases.resource_actions`), Argo CD's
`GET .../resource/actions` and `POST .../resource/actions`: the object is named by the query (`group`, `kind`,
`namespace`, `name`) as for `GET /apps/NAME/resource`, the action by the path."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tidecd.base.errors import PermanentError
from tidecd.base.model import Response
from tidecd.runtime import Runtime
from tidecd.usecases import api, resource_actions, resources

_ACTION = "/resource/actions/"


@api.route("GET", "/apps/(?P<name>[^/]+)/resource/actions")
def list_actions(runtime: Runtime, name: str, _: dict[str, Any], query: Mapping[str, str]) -> Response:
    key = resources.key_of(query)
    found = resource_actions.list_actions(runtime, api.principal(), name, key)
    return Response(200, {"app": name, "resource": key.to_dict(), "actions": [a.to_dict() for a in found]})


@api.route("POST", "/apps/(?P<name>[^/]+/resource/actions/[A-Za-z][A-Za-z0-9_-]{0,62})", body="ActionRequest")
def run_action(runtime: Runtime, path: str, payload: dict[str, Any], query: Mapping[str, str]) -> Response:
    name, _, action = path.partition(_ACTION)
    params = payload.get("params") or {}
    if not isinstance(params, dict):
        raise PermanentError("body field params must be an object (name → value)")
    done = resource_actions.run_action(runtime, api.principal(), name, resources.key_of(query), action, params)
    return Response(200, done)
