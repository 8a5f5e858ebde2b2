"""The api's routes for one app's resources (`tidecd.usecases.resources`): the tree, one object's details,
its events, pods' logs, the app's manifests and a diff of manifests rendered elsewhere.

    GET  /apps/NAME/resources                                   the tree (the app's objects and their children)
    GET  /apps/NAME/resource?group=&kind=&namespace=&name=      live, desired, diff, events, containers
    GET  /apps/NAME/events?group=&kind=&namespace=&name=        the object's Events
    GET  /apps/NAME/logs?[kind=&name=...]&container=&tail=&sinceTime=   pods' logs (`logs, get`)
    GET  /apps/NAME/manifests?source=git|live&revision=&format= the app's manifests (format=yaml: as one text)
    POST /apps/NAME/diff/local {"files": {PATH: TEXT}}         what a sync of that directory would change

Registered on `tidecd.usecases.api`'s table when that module loads (it imports this one last).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from tidecd.base.errors import PermanentError
from tidecd.base.model import Response
from tidecd.runtime import Runtime
from tidecd.usecases import api, resources


@api.route("GET", "/apps/(?P<name>[^/]+)/resources")
def tree(runtime: Runtime, name: str, _: dict[str, Any], __: Mapping[str, str]) -> Response:
    return Response(200, {"app": name, "resources": resources.tree(runtime, api.principal(), name)})


@api.route("GET", "/apps/(?P<name>[^/]+)/resource")
def resource(runtime: Runtime, name: str, _: dict[str, Any], query: Mapping[str, str]) -> Response:
    return Response(200, resources.detail(runtime, api.principal(), name, resources.key_of(query)))


@api.route("GET", "/apps/(?P<name>[^/]+)/events")
def events(runtime: Runtime, name: str, _: dict[str, Any], query: Mapping[str, str]) -> Response:
    key = resources.key_of(query)
    found = resources.locate(runtime, api.principal(), name, key)
    return Response(200, {"app": name, "resource": key.to_dict(), "events": resources.events(found)})


@api.route("GET", "/apps/(?P<name>[^/]+)/logs")
def logs(runtime: Runtime, name: str, _: dict[str, Any], query: Mapping[str, str]) -> Response:
    return Response(200, resources.logs(runtime, api.principal(), name, query))


@api.route("GET", "/apps/(?P<name>[^/]+)/manifests")
def manifests(runtime: Runtime, name: str, _: dict[str, Any], query: Mapping[str, str]) -> Response:
    body = resources.manifests(runtime, api.principal(), name, query.get("source", "git"), query.get("revision", ""))
    form = query.get("format", "json")
    if form not in ("json", "yaml"):
        raise PermanentError(f"query parameter format must be json or yaml, not {form!r}")
    if form == "yaml":  # dumped here once, so the thin client (standard library only) prints what the full CLI does
        body = {k: v for k, v in body.items() if k != "manifests"} | {
            "yaml": yaml.safe_dump_all(body["manifests"], sort_keys=False)}
    return Response(200, body)


@api.route("POST", "/apps/(?P<name>[^/]+)/diff/local", body="LocalDiffRequest")
def diff_local(runtime: Runtime, name: str, payload: dict[str, Any], _: Mapping[str, str]) -> Response:
    files = payload.get("files")
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise PermanentError("body field files (relative path → text) is required")
    return Response(200, resources.diff_local(runtime, api.principal(), name, files))
