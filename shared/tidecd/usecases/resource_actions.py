"""Resource actions: what a person may do to one live object of an app, as Argo CD's resource actions do.

- `restart` (Deployment, StatefulSet, DaemonSet): the pod template's annotation
  `kubectl.kubernetes.io/restartedAt` is set to now, as `kubectl rollout restart` and Argo CD's built-in
  restart do, so the controller rolls new pods (a Deployment: a new ReplicaSet);
- `scale` (Deployment, StatefulSet, ReplicaSet): `spec.replicas` set to the `replicas` parameter;
- `delete` (any object of the app, or one under it such as a Pod): deleted in the background.

RBAC is Argo CD's: `applications, action/GROUP/KIND/ACTION, PROJECT/APP` for an action and
`applications, delete/GROUP/KIND/NAMESPACE/NAME, PROJECT/APP` for a delete; every refusal and every action
done is in the audit log. The object must be the app's (`resources.locate`: its inventory, or under one of
its objects) in a namespace the project permits. Git is not changed: a scale an app's manifests disagree
with shows OutOfSync (and self-heal, where on, puts it back), as in Argo CD.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidecd.base.errors import NotFound, PermanentError
from tidecd.base.model import Manifest, ResourceKey
from tidecd.base.principal import Principal
from tidecd.runtime import Runtime
from tidecd.usecases import authz, lua_actions, resources

RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
RESTARTABLE = frozenset({("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "DaemonSet")})
SCALABLE = frozenset({("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "ReplicaSet")})
MAX_REPLICAS = 10_000


@dataclass(frozen=True)
class ActionInfo:
    """One action an object offers: its name, its parameters, and whether it is disabled now (and why)."""

    name: str
    params: tuple[str, ...] = ()
    disabled: bool = False
    reason: str = ""
    lua: bool = False  # one of Argo CD's Lua actions (`lua_actions`)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "params": list(self.params), "disabled": self.disabled, "reason": self.reason}


def offered(key: ResourceKey, live: Manifest | None,
            scripted: Sequence[lua_actions.Offered] = ()) -> list[ActionInfo]:
    """The actions of an object as it is now (none when it is gone): tidecd's own, then the Lua ones
    (`lua_actions`) whose names differ."""
    if live is None:
        return []
    kind = (key.group, key.kind)
    found = []
    if kind in RESTARTABLE:
        found.append(ActionInfo("restart"))
    if kind in SCALABLE:
        found.append(ActionInfo("scale", ("replicas",)))
    deleting = bool((live.get("metadata") or {}).get("deletionTimestamp"))
    found.append(ActionInfo("delete", disabled=deleting, reason="being deleted" if deleting else ""))
    own = {a.name for a in found}
    found += [ActionInfo(s.name, disabled=s.disabled, reason="not now (discovery.lua)" if s.disabled else "",
                         lua=True) for s in scripted if s.name not in own]
    return found


def list_actions(runtime: Runtime, who: Principal, name: str, key: ResourceKey) -> list[ActionInfo]:
    """The actions object `key` of app `name` offers (the caller must see the app)."""
    found = resources.locate(runtime, who, name, key)
    return offered(found.key, found.live, _scripted(runtime, found.key, found.live))


def _scripted(runtime: Runtime, key: ResourceKey, live: Manifest | None) -> list[lua_actions.Offered]:
    return lua_actions.discover(lua_actions.catalogue(), key, live) if live is not None else []


def rbac_action(key: ResourceKey, action: str) -> str:
    """Argo CD's RBAC action for `action` on `key`."""
    if action == "delete":
        return f"delete/{key.group}/{key.kind}/{key.namespace}/{key.name}"
    return f"action/{key.group}/{key.kind}/{action}"


def run_action(runtime: Runtime, who: Principal, name: str, key: ResourceKey, action: str,
               params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run `action` on object `key` of app `name` now; what it did. NotFound for an object that is not the
    app's (or is gone), PermanentError for an action it does not offer or a bad parameter (named),
    PermissionDenied (audited) when RBAC refuses."""
    found = resources.locate(runtime, who, name, key)
    if found.live is None:
        raise NotFound(f"app {name!r}: {key} is not live")
    offers = {a.name: a for a in offered(found.key, found.live, _scripted(runtime, found.key, found.live))}
    chosen = offers.get(action)
    if chosen is None:
        raise PermanentError(f"{key} has no action {action!r} (it has: {', '.join(offers) or 'none'})")
    if chosen.disabled:
        raise PermanentError(f"{key}: action {action!r} is disabled: {chosen.reason}")
    verb, obj = rbac_action(key, action), authz.app_object(found.app)
    authz.require(runtime, who, "applications", verb, obj)
    cluster = found.cluster
    if action == "restart":
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        cluster.json_patch(key, restart_patch(found.live, now))
        message = f"restarted at {now}: the pod template's {RESTARTED_AT} annotation"
    elif chosen.lua:
        message = _run_lua(runtime, found.cluster, key, action, found.live)
    elif action == "scale":
        replicas = replicas_of(params or {})
        cluster.json_patch(key, [{"op": "add", "path": "/spec/replicas", "value": replicas}])
        message = f"scaled to {replicas} replicas"
    else:
        cluster.delete(key, propagation="Background")
        message = "deleted"
    authz.done(runtime, who, "applications", verb, obj, f"{key}: {message}")
    return {"app": name, "resource": str(key), "key": key.to_dict(), "action": action, "message": message}


def _run_lua(runtime: Runtime, cluster: Any, key: ResourceKey, action: str, live: Manifest) -> str:
    """Do what the action's script asks: patch the object with what it changed, create what it made."""
    done = []
    for operation, obj in lua_actions.run(lua_actions.catalogue(), key, action, live):
        if operation == "patch":
            patch = lua_actions.merge_patch(live, obj)
            if patch:
                cluster.merge_patch(key, patch)
            done.append(f"patched {key}" if patch else f"{key} unchanged")
        else:
            created = cluster.apply(obj)
            done.append(f"created {ResourceKey.of(created)}")
    return f"{action} (Lua): " + "; ".join(done)


def restart_patch(live: Manifest, now: str) -> list[dict[str, Any]]:
    """The JSON patch that stamps the pod template with `now` (creating its annotations map when absent)."""
    template = (live.get("spec") or {}).get("template") or {}
    meta = template.get("metadata")
    if meta is None:
        return [{"op": "add", "path": "/spec/template/metadata", "value": {"annotations": {RESTARTED_AT: now}}}]
    if not meta.get("annotations"):
        return [{"op": "add", "path": "/spec/template/metadata/annotations", "value": {RESTARTED_AT: now}}]
    return [{"op": "add", "path": "/spec/template/metadata/annotations/" + RESTARTED_AT.replace("/", "~1"),
             "value": now}]


def replicas_of(params: Mapping[str, Any]) -> int:
    """The `replicas` parameter: a whole number from 0 to MAX_REPLICAS (a form's text too)."""
    raw = params.get("replicas")
    try:
        value = int(str(raw).strip()) if raw is not None and not isinstance(raw, bool) else -1
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_REPLICAS:
        raise PermanentError(f"parameter replicas: {raw!r} is not a whole number from 0 to {MAX_REPLICAS}")
    return value
