"""Argo CD's Lua resource actions, run unmodified: `GROUP/KIND/actions/discovery.lua` says which actions an
object offers now (`{name = {disabled = ...}}`), `actions/NAME/action.lua` does one.

The scripts are Argo CD v3.6.1's own, from the catalogue tidecd bundles (`tidecd.health.catalogue`: fetched by
`make tools`, shipped by `make package`); `TIDECD_RESOURCE_ACTIONS` names another directory laid out as Argo
CD's `resource_customizations/` to use instead (e.g. a newer Argo CD's, or actions of your own). They run in
the health checks' sandbox and budgets (`tidecd.health.lua.run_script`): no files, no network, bounded time
and memory. An action returns either the changed object (Argo CD's first form: it is patched with what
changed) or a list of `{operation = "patch"|"create", resource = ...}` (its second form, e.g. a CronJob's
`create-job`). What it may touch is held to the app: a patch only of the object it ran on, a create only in
that object's namespace.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidecd.base.errors import PermanentError
from tidecd.base.model import Manifest, ResourceKey
from tidecd.health import catalogue as bundled
from tidecd.health import lua

MAX_SCRIPT = 256 * 1024  # bytes of one script read


def catalogue() -> str:
    """The scripts' directory: `TIDECD_RESOURCE_ACTIONS`, else Argo CD's bundled catalogue ("" when neither
    is there: only tidecd's own actions)."""
    if chosen := os.environ.get("TIDECD_RESOURCE_ACTIONS", ""):
        return chosen
    found = bundled.root()
    return str(found) if found is not None else ""


@dataclass(frozen=True)
class Offered:
    name: str
    disabled: bool


def _kind_dir(root: str, key: ResourceKey) -> Path | None:
    if not root:
        return None
    base = Path(root)
    found = base / key.group / key.kind / "actions" if key.group else base / key.kind / "actions"
    return found if found.is_dir() and base.resolve() in found.resolve().parents else None


def _read(path: Path) -> str:
    with path.open("rb") as handle:
        return handle.read(MAX_SCRIPT).decode("utf-8", "replace")


def discover(root: str, key: ResourceKey, live: Manifest) -> list[Offered]:
    """The Lua actions the object offers now (none without a catalogue or a discovery.lua for its kind)."""
    where = _kind_dir(root, key)
    if where is None or not (where / "discovery.lua").is_file():
        return []
    try:
        found = lua.run_script(_read(where / "discovery.lua"), live)
    except lua.ScriptError as exc:
        raise PermanentError(f"{key.group}/{key.kind} actions/discovery.lua: {exc}") from exc
    if isinstance(found, list) and not found:
        return []
    if not isinstance(found, dict):
        raise PermanentError(f"{key.group}/{key.kind} actions/discovery.lua: returned no table of actions")
    out = []
    for name, spec in sorted(found.items()):
        if (where / name / "action.lua").is_file():
            out.append(Offered(name, bool(spec.get("disabled")) if isinstance(spec, dict) else False))
    return out


def run(root: str, key: ResourceKey, action: str, live: Manifest) -> list[tuple[str, Manifest]]:
    """What `action.lua` asks for: [(operation, object)], "patch" of the object itself or "create" of a new
    one in its namespace; PermanentError names the script and what is wrong."""
    where = _kind_dir(root, key)
    script = where / action / "action.lua" if where is not None else None
    if script is None or not script.is_file() or "/" in action or action.startswith("."):
        raise PermanentError(f"{key} has no Lua action {action!r}")
    label = f"{key.group}/{key.kind} actions/{action}/action.lua"
    try:
        result = lua.run_script(_read(script), live)
    except lua.ScriptError as exc:
        raise PermanentError(f"{label}: {exc}") from exc
    if isinstance(result, dict) and "kind" in result:
        impacted: list[Any] = [{"operation": "patch", "resource": result}]
    elif isinstance(result, list):
        impacted = result
    else:
        raise PermanentError(f"{label}: returned neither the object nor a list of impacted resources")
    out = []
    for item in impacted:
        op = item.get("operation") if isinstance(item, dict) else None
        obj = item.get("resource") if isinstance(item, dict) else None
        if op not in ("patch", "create") or not isinstance(obj, dict):
            raise PermanentError(f"{label}: each impacted resource needs operation patch or create and a resource")
        if op == "patch" and ResourceKey.of(obj) != key:
            raise PermanentError(f"{label}: may patch only {key}, not {ResourceKey.of(obj)}")
        if op == "create":  # in the object's own namespace, whatever the script wrote
            obj.setdefault("metadata", {})["namespace"] = key.namespace
        out.append((op, obj))
    return out


def merge_patch(old: Any, new: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns `old` into `new` (what Argo CD patches a changed object with)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch: dict[str, Any] = {k: None for k in old if k not in new}
    for k, v in new.items():
        if k not in old:
            patch[k] = v
        elif _seen_by_lua(old[k]) != v and not (old[k] in ({}, []) and v in ({}, [])):  # one empty table for both
            patch[k] = merge_patch(old[k], v)
    return patch


def _seen_by_lua(value: Any) -> Any:
    """`value` as a script saw it: a Lua table holds no nil, so a null the script did not touch is no change."""
    if isinstance(value, dict):
        return {k: _seen_by_lua(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_seen_by_lua(v) for v in value if v is not None]
    return value
