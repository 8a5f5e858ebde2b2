"""User health checks written in Lua, as argocd-cm's `resource.customizations.health.<group>_<Kind>` holds them.

Argo CD embeds gopher-lua: Lua 5.1 plus `goto`, which its catalogue uses (`goto continue`). Scripts run
here on Lua 5.2 (`lupa.lua52`: `goto`, numbers formatted as in 5.1) with the 5.1 functions gopher-lua still
has put back (`unpack`, `table.getn`, `table.maxn`, `math.mod`, `math.log10`), so Argo CD's own
catalogue runs unmodified. A script sees the global `obj`
(the live object as Lua tables) and returns a table `{status = "...", message = "..."}`, or nil for "no
health". Each evaluation gets a fresh interpreter, so nothing one script does survives into the next.

The sandbox gives a script only what Argo CD's scripts use: the base functions that touch no file and load
no code (`pairs`, `ipairs`, `next`, `type`, `tostring`, `tonumber`, `error`, `assert`, `pcall`, `select`,
`unpack`, `setmetatable`, ...), copies of `string` (without `dump`), `table` and `math`, and an `os` with
only `time`, `date` and `clock`; `require` returns those four and nothing else. No `io`, no `debug`, no
`load`/`loadstring`/`dofile`, no `package`, no `coroutine`, no bridge to Python; binary chunks are refused.

Budgets: an instruction-count hook stops a script after `max_instructions` VM instructions or
`max_seconds` of CPU time, whichever comes first, and the script cannot allocate more than `max_memory`
bytes beyond the converted object (objects come from the API server, which bounds their size; the
limit is set only once they are converted, and lifted again before the result is read, because an
allocation failure outside a protected Lua call would abort the process). A script error, a timeout,
running out of memory or a bad return value becomes an `Unknown` result whose message names the
group/kind and what went wrong, never an exception. A script that spent its time budget is not run again
in this process for `SPENT_COOLDOWN` seconds (its objects read Unknown at once), so one endless loop
costs one budget per process, not one per object per reconcile.
"""

from __future__ import annotations

import fnmatch
import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidecd.base.errors import PermanentError
from tidecd.base.model import HealthResult, HealthStatus, Manifest, ResourceKey

MAX_MEMORY = 32 * 1024 * 1024
MAX_INSTRUCTIONS = 50_000_000
MAX_SECONDS = 1.0  # Argo CD gives a script one second
_HOOK_EVERY = 10_000  # instructions between two budget checks
SPENT_COOLDOWN = 300.0
_spent: dict[str, float] = {}  # sha256 of a script that spent its time budget → monotonic time it may run again
_MAX_DEPTH = 64  # nesting of the converted object; deeper values are cut off
_MAX_MESSAGE = 4096  # characters of a script's message kept in status

_VALID = {s.value: s for s in HealthStatus}

# Runs inside the fresh interpreter once: keeps private references to what the sandbox needs, then
# returns `run(source, obj, max_ticks, max_seconds, every)`. `run` answers (ok, value): value is the
# script's return value when ok, else the error text; "\0budget" marks a spent time budget.
_BOOT = r"""
local load, sethook, clock, pcall, error = load, debug.sethook, os.clock, pcall, error
local pairs, type, tostring, floor = pairs, type, tostring, math.floor
local function copy(t)
  local out = {}
  for k, v in pairs(t) do out[k] = v end
  return out
end
string.dump = nil
local libs = {
  string = copy(string), table = copy(table), math = copy(math),
  os = {time = os.time, date = os.date, clock = os.clock},
}
-- Lua 5.1 as gopher-lua has it
libs.table.getn = function(t) return #t end
libs.table.maxn = function(t)
  local n = 0
  for k in pairs(t) do if type(k) == "number" and k > n then n = k end end
  return n
end
libs.math.mod = math.fmod
libs.math.log10 = function(x) return math.log(x, 10) end
_G.unpack = table.unpack
local base = {
  "assert", "error", "ipairs", "next", "pairs", "pcall", "rawequal", "rawget", "rawset", "select",
  "setmetatable", "getmetatable", "tonumber", "tostring", "type", "unpack", "xpcall", "_VERSION",
}
local function environment(obj)
  local env = {}
  for _, name in pairs(base) do env[name] = _G[name] end
  for name, lib in pairs(libs) do env[name] = copy(lib) end
  env.print = function() end
  env.require = function(name)
    local lib = env[name]
    if libs[name] == nil or lib == nil then
      error("module '" .. tostring(name) .. "' is not available to health checks", 2)
    end
    return lib
  end
  env._G = env
  env.obj = obj
  return env
end
return function(source, obj, max_ticks, max_seconds, every)
  if source:byte(1) == 27 then return false, "binary (precompiled) chunks are not allowed" end
  local fn, err = load(source, "=health.lua", "t", environment(obj))
  if fn == nil then return false, err end
  local ticks, started, spent = 0, clock(), false
  local function hook()
    ticks = ticks + 1
    if spent or ticks > max_ticks or clock() - started > max_seconds then
      if not spent then
        spent = true
        sethook(hook, "", 1)  -- from now on every instruction fails: a pcall in the script cannot go on
      end
      error("\0budget", 0)
    end
  end
  sethook(hook, "", every)
  local ok, value = pcall(fn)
  sethook()
  if spent then return false, "\0budget" end
  return ok, value
end
"""


@dataclass(frozen=True)
class Budget:
    """What one evaluation may use."""

    max_instructions: int = MAX_INSTRUCTIONS
    max_seconds: float = MAX_SECONDS
    max_memory: int = MAX_MEMORY


class _ScriptFailed(Exception):
    """A user script that failed; its text is the message the resource shows."""

    def __init__(self, message: str, *, spent: bool = False) -> None:
        super().__init__(message)
        self.spent = spent


def forget_spent_scripts() -> None:
    """Let every script that spent its budget run again at once (tests; a process otherwise waits out
    SPENT_COOLDOWN)."""
    _spent.clear()


def script_for(scripts: Mapping[str, str], group: str, kind: str) -> tuple[str, str] | None:
    """(key, script) of the customization for this kind: the exact key first, then a glob key (as
    Argo CD's `*.crossplane.io/*`). Core kinds are keyed "Kind" in Argo CD; "/Kind" is accepted too."""
    wanted = f"{group}/{kind}" if group else kind
    for key in (wanted, f"/{kind}") if not group else (wanted,):
        script = scripts.get(key)
        if script and script.strip():
            return key, script

    for key in sorted(scripts):
        if "*" in key and fnmatch.fnmatchcase(wanted, key) and scripts[key].strip():
            return key, scripts[key]
    return None


def evaluate(script: str, obj: Manifest, *, where: str = "", budget: Budget = Budget()) -> HealthResult | None:
    """Run a health script on one object. None when the script returns nil (no health, as Argo CD);
    an `Unknown` result naming `where` (the group/kind) for any failure."""
    label = where or str(ResourceKey.of(obj))
    digest, now = hashlib.sha256(script.encode()).hexdigest(), time.monotonic()
    if _spent.get(digest, 0.0) > now:
        return HealthResult(HealthStatus.UNKNOWN, f"health check for {label}: the script exceeded its time budget "
                            f"on an earlier object; not run again for {_spent[digest] - now:.0f}s")
    try:
        return _evaluate(script, obj, budget)
    except _ScriptFailed as exc:
        if exc.spent:
            if len(_spent) > 256:
                _spent.clear()
            _spent[digest] = now + SPENT_COOLDOWN
        return HealthResult(HealthStatus.UNKNOWN, f"health check for {label}: {exc}")


def _evaluate(script: str, obj: Manifest, budget: Budget) -> HealthResult | None:
    runtime, result = _run(script, obj, budget)
    return _result(runtime, result)


class ScriptError(PermanentError):
    """A resource action's script failed: what went wrong (a Lua error, a spent budget), for the caller."""


def run_script(script: str, obj: Manifest, *, budget: Budget = Budget()) -> Any:
    """Run a script of Argo CD's resource actions (`discovery.lua`, `action.lua`) on `obj` in the same
    sandbox and budgets as a health check; its return value as JSON-shaped Python (a Lua table with keys
    1..n is a list, another a dict; an empty one is an empty dict). ScriptError says why it failed."""
    from lupa import lua52 as lua51  # lazy: cold start (lupa only for a Lua script)

    try:
        runtime, result = _run(script, obj, budget)
    except _ScriptFailed as exc:
        raise ScriptError(str(exc)) from exc
    try:
        return _from_lua(lua51, result, 0)
    finally:
        del runtime


def _from_lua(lua: Any, value: Any, depth: int) -> Any:
    if lua.lua_type(value) != "table":
        return value
    if depth >= _MAX_DEPTH:
        return {}
    items = list(value.items())
    if items and all(isinstance(k, int) for k, _ in items) and sorted(k for k, _ in items) == list(
            range(1, len(items) + 1)):
        return [_from_lua(lua, v, depth + 1) for _, v in sorted(items, key=lambda kv: kv[0])]
    return {str(k): _from_lua(lua, v, depth + 1) for k, v in items}


def _run(script: str, obj: Manifest, budget: Budget) -> tuple[Any, Any]:
    """(the interpreter, the script's return value) or _ScriptFailed."""
    # lazy: cold start (lupa only for a Lua health check)
    from lupa import lua52 as lua51

    runtime = lua51.LuaRuntime(register_eval=False, register_builtins=False, unpack_returned_tuples=True,
                               max_memory=0)
    started = time.monotonic()
    try:
        run = runtime.execute(_BOOT)
        for name in ("python", "io", "debug", "package", "require", "dofile", "loadfile", "load", "coroutine",
                     "collectgarbage", "bit32", "rawlen"):
            runtime.globals()[name] = None
        value = _to_lua(runtime, obj, 0)
        ticks = max(1, budget.max_instructions // _HOOK_EVERY)
        runtime.set_max_memory(runtime.get_memory_used() + budget.max_memory)
        try:
            ok, result = run(script, value, ticks, budget.max_seconds, _HOOK_EVERY)
        finally:
            runtime.set_max_memory(0)  # reading the result from Python allocates outside a protected call
    except lua51.LuaMemoryError as exc:
        raise _ScriptFailed(f"the script exceeded its memory budget ({budget.max_memory // 2**20} MiB)") from exc
    except lua51.LuaError as exc:  # a spent budget fires on every instruction, the sandbox's own included
        raise _ScriptFailed(_failure(str(exc), budget, time.monotonic() - started),
                            spent="\0budget" in str(exc)) from exc
    if not ok:
        raise _ScriptFailed(_failure(str(result), budget, time.monotonic() - started),
                            spent="\0budget" in str(result))
    return runtime, result


def _failure(text: str, budget: Budget, elapsed: float) -> str:
    if "\0budget" in text:
        return (f"the script exceeded its time budget ({budget.max_seconds:g}s or "
                f"{budget.max_instructions:,} instructions; stopped after {elapsed:.2f}s)")
    if "not enough memory" in text:
        return f"the script exceeded its memory budget ({budget.max_memory // 2**20} MiB)"
    return f"Lua error: {_first_line(text)}"


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "(no message)"


def _result(runtime: Any, result: Any) -> HealthResult | None:
    # lazy: cold start (lupa only for a Lua health check)
    from lupa import lua52 as lua51

    if result is None:
        return None
    if lua51.lua_type(result) != "table":
        kind = lua51.lua_type(result) or type(result).__name__
        kind = {"str": "string", "int": "number", "float": "number", "bool": "boolean"}.get(kind, kind)
        raise _ScriptFailed(f"expect table output from Lua script, not {kind}")
    status, message = result["status"], result["message"]
    if status is None and message is None and next(iter(result.keys()), None) is None:
        return None  # an empty table: no health, as Argo CD reads it
    if message is not None and not isinstance(message, str):
        if isinstance(message, bool) or not isinstance(message, int | float):
            raise _ScriptFailed(f"the returned message is a {lua51.lua_type(message) or type(message).__name__}, "
                                "not a string")
        message = _number_text(message)
    if not isinstance(status, str) or status not in _VALID:
        return HealthResult(HealthStatus.UNKNOWN, "Lua returned an invalid health status"
                            + (f" {status!r}" if isinstance(status, str) else ""))
    text = message or ""
    return HealthResult(_VALID[status], text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE] + "...")


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _to_lua(runtime: Any, value: Any, depth: int) -> Any:
    """JSON-shaped Python → Lua tables (lists 1-based); null becomes nil, as in Argo CD's decodeValue."""
    if isinstance(value, dict):
        table = runtime.table()
        if depth < _MAX_DEPTH:
            for key, item in value.items():
                if item is not None:
                    table[str(key)] = _to_lua(runtime, item, depth + 1)
        return table
    if isinstance(value, list | tuple):
        table = runtime.table()
        if depth < _MAX_DEPTH:
            for index, item in enumerate(value, start=1):
                if item is not None:
                    table[index] = _to_lua(runtime, item, depth + 1)
        return table
    if isinstance(value, bool | str | float):
        return value
    if isinstance(value, int):
        return float(value) if abs(value) >= 2**53 else value
    return None if value is None else str(value)


__all__ = ["Budget", "evaluate", "script_for"]
