"""The Lua engine for argocd-cm health checks: results, the sandbox, and the time and memory budgets."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from tidecd.base.model import HealthResult, HealthStatus
from tidecd.health.lua import Budget, evaluate, script_for

H, P, D, U = HealthStatus.HEALTHY, HealthStatus.PROGRESSING, HealthStatus.DEGRADED, HealthStatus.UNKNOWN
WHERE = "example.com/Widget"
PREFIX = f"health check for {WHERE}: "

OBJ: dict[str, Any] = {
    "apiVersion": "example.com/v1", "kind": "Widget",
    "metadata": {"name": "w", "namespace": "ns", "generation": 3, "labels": {"tier": "web"}},
    "spec": {"replicas": 2, "ports": [80, 443], "note": None},
    "status": {"observedGeneration": 3, "ratio": 0.5,
               "conditions": [{"type": "Ready", "status": "True", "message": "all good"}]},
}


def run(script: str, obj: dict[str, Any] | None = None, budget: Budget = Budget()) -> HealthResult | None:
    return evaluate(script, obj if obj is not None else OBJ, where=WHERE, budget=budget)


def test_a_typical_check_reads_obj_as_tables() -> None:
    script = """
    local hs = {status = "Progressing", message = "Waiting"}
    if obj.status ~= nil and obj.status.observedGeneration == obj.metadata.generation then
      for _, c in ipairs(obj.status.conditions) do
        if c.type == "Ready" and c.status == "True" then
          hs.status = "Healthy"; hs.message = c.message .. " (" .. #obj.spec.ports .. " ports)"
        end
      end
    end
    return hs
    """
    before = copy.deepcopy(OBJ)
    assert run(script) == HealthResult(H, "all good (2 ports)")
    assert before == OBJ


@pytest.mark.parametrize(("script", "expected"), [
    ("return {status = 'Degraded', message = 'x'}", HealthResult(D, "x")),
    ("return {status = 'Suspended'}", HealthResult(HealthStatus.SUSPENDED, "")),
    ("return {status = 'Missing'}", HealthResult(HealthStatus.MISSING, "")),
    ("return {status = 'Unknown', message = 'who knows'}", HealthResult(U, "who knows")),
    ("return {status = 'Healthy', message = 42}", HealthResult(H, "42")),
    ("return {status = 'Great'}", HealthResult(U, "Lua returned an invalid health status 'Great'")),
    ("return {message = 'no status'}", HealthResult(U, "Lua returned an invalid health status")),
    ("return 'Healthy'", HealthResult(U, PREFIX + "expect table output from Lua script, not string")),
    ("return 3", HealthResult(U, PREFIX + "expect table output from Lua script, not number")),
    ("return {status = 'Healthy', message = {}}", HealthResult(U, PREFIX + "the returned message is a table, "
                                                                "not a string")),
], ids=["degraded", "suspended", "missing", "unknown", "number-message", "invalid-status", "no-status",
        "string", "number", "table-message"])
def test_return_values(script: str, expected: HealthResult) -> None:
    assert run(script) == expected


@pytest.mark.parametrize("script", ["return nil", "return {}", "local x = 1"])
def test_nil_or_empty_means_no_health(script: str) -> None:
    assert run(script) is None


def test_lua_51_as_argo_cd_has_it() -> None:
    """gopher-lua is Lua 5.1 with goto: table.getn, unpack, math.mod, `goto continue`, 5.1 number text."""
    script = """
    local n = 0
    for _, p in ipairs(obj.spec.ports) do
      if p == 80 then goto continue end
      n = n + 1
      ::continue::
    end
    local a, b = unpack({1, 2})
    return {status = "Healthy", message = table.getn(obj.spec.ports) .. " " .. n .. " " .. (a + b) .. " "
            .. math.mod(7, 3) .. " " .. tostring(obj.spec.replicas / 1) .. " " .. obj.status.ratio
            .. " " .. tostring(obj.spec.note) .. " " .. string.format("%d", table.maxn(obj.spec.ports))}
    """
    assert run(script) == HealthResult(H, "2 1 3 1 2 0.5 nil 2")


def test_require_gives_only_the_safe_libraries() -> None:
    script = """
    local os = require("os")
    local s = require("string")
    return {status = "Healthy", message = type(os.time()) .. " " .. s.upper("a") .. " " .. tostring(os.execute)}
    """
    assert run(script) == HealthResult(H, "number A nil")
    failed = run("local io = require('io') return {}")
    assert failed is not None and failed.status is U
    assert "module 'io' is not available to health checks" in failed.message


@pytest.mark.parametrize("name", ["io", "debug", "package", "load", "loadstring", "dofile", "loadfile",
                                  "python", "coroutine", "collectgarbage", "getfenv", "setfenv", "module",
                                  "rawlen", "bit32"])
def test_the_sandbox_has_no_escape_hatches(name: str) -> None:
    assert run(f"return {{status = 'Healthy', message = type({name})}}") == HealthResult(H, "nil")


def test_no_way_out_through_strings_or_globals() -> None:
    script = """
    local mt = getmetatable("")
    return {status = "Healthy", message = type(mt.__index.dump) .. " " .. type(string.dump) .. " "
            .. type(_G.io) .. " " .. type(os.exit) .. " " .. type(os.getenv) .. " " .. type(os.remove)}
    """
    assert run(script) == HealthResult(H, "nil nil nil nil nil nil")


def test_binary_chunks_are_refused() -> None:
    result = run("\x1bLuaR\x00")
    assert result == HealthResult(U, PREFIX + "Lua error: binary (precompiled) chunks are not allowed")


def test_one_run_cannot_leak_into_the_next() -> None:
    assert run("string.upper = nil; leaked = 1; return {status = 'Healthy'}") == HealthResult(H, "")
    assert run("return {status = 'Healthy', message = string.upper('a') .. tostring(leaked)}") == HealthResult(
        H, "Anil")


@pytest.mark.parametrize(("script", "text"), [
    ("return {status = ", "Lua error: health.lua:1: unexpected symbol near <eof>"),
    ("error('controller status unreadable')", "Lua error: health.lua:1: controller status unreadable"),
    ("return obj.status.missing.field", "Lua error: health.lua:1: attempt to index field 'missing'"),
    ("for _, c in ipairs(obj.status.nothing) do end", "Lua error: health.lua:1: bad argument #1 to 'ipairs'"),
], ids=["syntax", "error", "nil-index", "ipairs-nil"])
def test_script_errors_are_health_messages(script: str, text: str) -> None:
    result = run(script)
    assert result is not None and result.status is U
    assert result.message.startswith(PREFIX + text), result.message


@pytest.mark.parametrize("script", [
    "while true do end",
    "while true do pcall(function() while true do end end) end",  # a pcall cannot swallow the budget
    "local function f() return f() end return f()",
], ids=["loop", "pcall-loop", "tail-calls"])
def test_time_budget(script: str) -> None:
    result = run(script, budget=Budget(max_instructions=2_000_000, max_seconds=5.0))
    assert result is not None and result.status is U
    assert result.message.startswith(PREFIX + "the script exceeded its time budget"), result.message


def test_memory_budget() -> None:
    script = "local t = {} for i = 1, 1e7 do t[i] = string.rep('x', 64) .. i end return {}"
    result = run(script, budget=Budget(max_memory=2 * 1024 * 1024, max_seconds=30.0))
    assert result == HealthResult(U, PREFIX + "the script exceeded its memory budget (2 MiB)")
    huge = run("return {status = 'Healthy', message = string.rep('x', 2^30)}",
               budget=Budget(max_memory=2 * 1024 * 1024))
    assert huge is not None and huge.status is U and "memory budget" in huge.message


def test_the_memory_budget_is_the_scripts_own_beyond_the_object() -> None:
    """A large object is converted whole (the API server bounds its size); the budget limits what the
    script allocates on top of it, and reading the result afterwards never hits the limit."""
    big = copy.deepcopy(OBJ)
    big["data"] = {f"k{i}": "v" * 100 for i in range(20_000)}
    script = "local n = 0 for _ in pairs(obj.data) do n = n + 1 end return {status = 'Healthy', message = 'keys ' .. n}"
    assert run(script, big, budget=Budget(max_memory=1024 * 1024)) == HealthResult(H, "keys 20000")
    greedy = run("local t = {} for i = 1, 1e6 do t[i] = {} end return {}", big, budget=Budget(max_memory=1024 * 1024))
    assert greedy == HealthResult(U, PREFIX + "the script exceeded its memory budget (1 MiB)")


def test_script_for_picks_exact_keys_before_globs() -> None:
    scripts = {"example.com/Widget": "a", "*.com/*": "b", "Pod": "c", "empty.io/Thing": "  "}
    assert script_for(scripts, "example.com", "Widget") == ("example.com/Widget", "a")
    assert script_for(scripts, "other.com", "Gadget") == ("*.com/*", "b")
    assert script_for(scripts, "", "Pod") == ("Pod", "c")
    assert script_for(scripts, "empty.io", "Thing") is None
    assert script_for(scripts, "apps", "Deployment") is None


def test_a_script_that_spent_its_budget_is_not_run_again_for_a_while() -> None:
    from tidecd.health import lua

    lua.forget_spent_scripts()
    script = "local n = 0 while true do n = n + 1 end"
    budget = Budget(max_instructions=1_000_000)
    first = run(script, budget=budget)
    assert first is not None and "stopped after" in first.message
    started = time.monotonic()
    again = run(script, budget=budget)
    assert time.monotonic() - started < 0.05
    assert again is not None and again.status is U
    assert again.message.startswith(PREFIX + "the script exceeded its time budget on an earlier object; "
                                    "not run again for 300s"), again.message
    assert run("return {status = 'Healthy'}") == HealthResult(H, "")  # other scripts still run
