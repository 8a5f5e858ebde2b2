"""The thin client: `tidecd --server URL app list|get|history|diff|sync|refresh|rollback|terminate-op|wait|
resources|logs` answered with the standard library alone.

A `--server` call does 4–100 ms of api work, but the full CLI (typer, rich, requests, structlog, the config
schema) takes over a second to start. This module imports only the standard library (`json`, `os`, `re`,
`pathlib`, `urllib`), so the commands it knows start about as fast as the interpreter;
`tests/unit/test_cli_thin.py` holds it to that import set and `bench cli` measures the start.

It answers a command only when it can answer it exactly as the full CLI does (the same api calls, columns,
output and exit codes): the full CLI prints through the formatting functions below, so there is one of each.
Anything else — another command, a flag it does not know, `-o yaml`, `-p`/`-l`, no token given nor
kept by `tidecd login` (or a config file the full CLI would complain about) — returns None, and `main` runs
the full CLI with the same arguments.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXIT_FAILED = 1  # out of sync (diff), the operation failed, or it timed out
EXIT_NOT_FOUND = 2  # no such app (404), or the request was refused; click's usage errors are 2 as well
EXIT_CONFLICT = 3  # an operation already runs (409)
EXIT_UNREACHABLE = 4  # cannot connect to the api, or it could not reach what it depends on (502/503/504)
EXIT_APP_ERROR = 5  # the app fails to compare: sync or health Unknown with an ...Error condition
TIMEOUT = 900.0
_VALUED = {"--server": "server", "--token": "token", "-o": "output", "--output": "output"}


class Failed(Exception):
    """An answer the command ends with: its message (on stderr) and exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def in_error(sync: str, health: str, conditions: list[dict[str, Any]]) -> bool:
    """Whether an app fails to compare (Argo CD's ComparisonError and its kin): its status is Unknown and a
    condition says why. An app never compared yet is Unknown with no condition: not an error."""
    unknown = "Unknown" in (sync, health)
    return unknown and any(str(c.get("type", "")).endswith("Error") for c in conditions)


def short_revision(record: dict[str, Any]) -> str:
    """A revision as tables print it: 12 characters, or each source's (multi-source) joined by ", "."""
    revisions = record.get("revisions") or []
    if revisions:
        return ", ".join(str(r)[:12] for r in revisions)
    return str(record.get("revision", ""))[:12]


@dataclass(frozen=True)
class Call:
    """A command this client answers: its word after `app`, its arguments (the app's name first), the options
    and flags given."""

    command: str
    args: tuple[str, ...]
    server: str
    token: str
    output: str
    flags: frozenset[str] = frozenset()
    values: tuple[tuple[str, str], ...] = ()  # the command's own valued options, in order (some repeat)

    @property
    def name(self) -> str:
        return self.args[0] if self.args else ""

    def value(self, option: str, default: str = "") -> str:
        """The option's last value (as click takes a repeated single option), else `default`."""
        return next((v for o, v in reversed(self.values) if o == option), default)

    def every(self, option: str) -> list[str]:
        return [v for o, v in self.values if o == option]


_FOLLOW = frozenset({"--async"})
_OBJECT = frozenset({"--group", "--kind", "--namespace", "--name"})  # one object of the app's tree
# Per command: its arguments (NAME, or NAME and a history ID), the flags and valued options it knows here, and
# the outputs it prints here (yaml, and what the full CLI refuses, stay the full CLI's).
_COMMANDS: dict[str, tuple[int, frozenset[str], frozenset[str], tuple[str, ...]]] = {
    "list": (0, frozenset({"--cached", "--refresh"}), frozenset(), ("table", "wide", "json", "name")),
    "get": (1, frozenset({"--cached"}), frozenset(), ("table", "json")),
    "history": (1, frozenset(), frozenset(), ("table", "json")),
    "diff": (1, frozenset({"--cached"}), frozenset(), ("table", "json")),
    "refresh": (1, frozenset(), frozenset(), ("table", "json")),
    "terminate-op": (1, frozenset(), frozenset(), ("table", "json")),
    "sync": (1, _FOLLOW | {"--prune", "--dry-run", "--replace", "--force"},
             frozenset({"--resource", "--revision", "--timeout"}), ("table", "json")),
    "rollback": (2, _FOLLOW | {"--prune", "--revert-pr"}, frozenset({"--timeout", "--revert"}), ("table", "json")),
    "wait": (1, frozenset({"--sync", "--health", "--operation"}), frozenset({"--timeout"}), ()),  # no -o
    "resources": (1, frozenset(), _OBJECT, ("table", "json")),
    "logs": (1, frozenset({"-f", "--follow"}), _OBJECT | {"-c", "--container", "--tail", "--timeout"}, ()),
}
_VALUED_OWN = frozenset().union(*(valued for _, _, valued, _ in _COMMANDS.values()))
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")  # an app's name: safe in a URL path as it is
_NUMBER = re.compile(r"[0-9]{1,9}(\.[0-9]{1,6})?")  # --timeout and a history ID as both CLIs read them alike


def parse(argv: list[str]) -> Call | None:
    """The command this client answers, or None (the full CLI's to answer)."""
    options = {"server": os.environ.get("TIDECD_SERVER", ""), "token": os.environ.get("TIDECD_API_TOKEN", ""),
               "output": ""}
    words: list[str] = []
    flags: set[str] = set()
    values: list[tuple[str, str]] = []
    rest = iter(argv)
    for arg in rest:
        name, eq, value = arg.partition("=")
        if name in _VALUED and (name.startswith("--") or not eq):  # click reads -o=x as "=x"
            if not eq:
                value = next(rest, "")
            options[_VALUED[name]] = value
        elif name in _VALUED_OWN and (name.startswith("--") or not eq):
            values.append((name, value if eq else next(rest, "")))
        elif arg.startswith("-o") and len(arg) > 2 and not arg.startswith("--"):
            options["output"] = arg[2:]
        elif arg.startswith("-"):
            flags.add(arg)
        else:
            words.append(arg)
    if len(words) < 2 or words[0] != "app" or words[1] not in _COMMANDS:
        return None
    arity, known, valued, outputs = _COMMANDS[words[1]]
    args = tuple(words[2:])
    if len(args) != arity or not all(_NAME.fullmatch(a) for a in args[:1]) or not flags <= known:
        return None
    if arity == 2 and not args[1].isdigit() or any(o not in valued for o, _ in values):
        return None
    if any(o == "--timeout" and not _NUMBER.fullmatch(v) or o == "--revert" and v not in ("pr", "push")
           or o == "--tail" and not v.isdigit() or not v for o, v in values):
        return None  # a value the full CLI would refuse: it says how
    if bool(_value(values, "--kind")) != bool(_value(values, "--name")):
        return None  # the full CLI says they go together
    if "--revert-pr" in flags and any(o == "--revert" and v != "pr" for o, v in values):
        return None
    given = options["output"]  # "" when not given; a command without -o (wait) refuses any
    if (given or "table") not in outputs if outputs else given:
        return None
    if not options["server"].startswith(("http://", "https://")):
        return None
    token = options["token"] or saved_token(options["server"])
    if not token:
        return None  # no token, or a config file the full CLI explains
    return Call(words[1], args, options["server"], token, options["output"] or "table", frozenset(flags),
                tuple(values))


def _value(values: list[tuple[str, str]], option: str) -> str:
    return next((v for o, v in reversed(values) if o == option), "")


def config_path() -> Path:
    """The CLI's config file, where `tidecd login` keeps a token per server."""
    explicit = os.environ.get("TIDECD_CLI_CONFIG", "")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME", "") or str(Path.home() / ".config")
    return Path(base) / "tidecd" / "cli.json"


MAX_CONFIG = 1024 * 1024


def saved_token(server: str) -> str:
    """The token `tidecd login` kept for this server; "" when none, or when the file is not as the full CLI
    expects (the full CLI then names the problem)."""
    path = config_path()
    try:
        if not path.is_file() or path.stat().st_size > MAX_CONFIG:
            return ""
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return ""
    servers = doc.get("servers") if isinstance(doc, dict) else None
    entry = servers.get(server.rstrip("/")) if isinstance(servers, dict) else None
    token = entry.get("token") if isinstance(entry, dict) else None
    return token if isinstance(token, str) else ""


def call(server: str, token: str, path: str, *, refresh: bool = False, method: str = "GET",
         body: dict[str, Any] | None = None) -> dict[str, Any]:
    """`method` `path` of the api (`?refresh=true` when `refresh`) with the JSON `body`; its JSON object, or
    Failed with the full CLI's exit code for the failure."""
    from urllib import error, request  # lazy: only a call that reaches the network pays for it

    if not server.startswith(("http://", "https://")):
        raise Failed(f"--server {server!r}: expected an http:// or https:// URL", EXIT_NOT_FOUND)
    url = server.rstrip("/") + "/api/v1" + path + ("?refresh=true" if refresh else "")
    asked = request.Request(url, method=method, data=json.dumps(body or {}).encode(),  # noqa: S310 - http(s) only
                            headers={"Authorization": f"Bearer {token}", "Accept": "application/json",
                                     "Content-Type": "application/json"})
    try:
        with request.urlopen(asked, timeout=TIMEOUT) as answer:  # noqa: S310 - http(s) only (above)
            status, kind, raw = answer.status, answer.headers.get("Content-Type", ""), answer.read()
    except error.HTTPError as exc:
        status, kind, raw = exc.code, exc.headers.get("Content-Type", ""), exc.read()
    except (error.URLError, OSError, ValueError) as exc:
        raise Failed(f"cannot reach {server}: {type(exc).__name__}", EXIT_UNREACHABLE) from None
    try:  # the api answers JSON objects, labelled so; anything else is not the api (a proxy, a web site)
        body = json.loads(raw) if kind.split(";")[0].strip() == "application/json" else None
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise Failed(f"{server} did not answer as tidecd's api does (HTTP {status}, {kind or 'no content type'}): "
                     "check --server", EXIT_UNREACHABLE)
    if status >= 400:
        code = {409: EXIT_CONFLICT, 502: EXIT_UNREACHABLE, 503: EXIT_UNREACHABLE,
                504: EXIT_UNREACHABLE}.get(status, EXIT_NOT_FOUND)
        raise Failed(str(body.get("message") or body), code)
    return body


# The formatting both CLIs print (the full CLI imports these): one implementation, standard library only.

LIST_COLUMNS = ["NAME", "SYNC", "HEALTH", "REVISION"]
RESOURCE_COLUMNS = ["KIND", "NAMESPACE", "NAME", "STATUS", "HEALTH", "MESSAGE"]
HISTORY_COLUMNS = ["ID", "REVISION", "DEPLOYED AT", "RESULT", "BY", "TRIGGER"]


def list_row(item: dict[str, Any]) -> list[str]:
    """An `app list` row's NAME, SYNC, HEALTH and REVISION."""
    return [item["name"], item["sync"] if "error" not in item else "Invalid", item["health"], short_revision(item)]


def owner(item: dict[str, Any]) -> str:
    """The OWNER column: the ApplicationSet (or app of apps) that made the app, and whether it is going."""
    return str(item.get("owner", "")) + (" (deleting)" if item.get("deleting") else "")


WIDE_COLUMNS = ["PROJECT", "CLUSTER", "NAMESPACE", "CONDITIONS"]


def list_table(body: dict[str, Any], wide: dict[str, list[str]] | None) -> tuple[list[str], list[list[str]]]:
    """`app list`'s headers and rows; `wide`: each app's PROJECT, CLUSTER, NAMESPACE and CONDITIONS cells (-o
    wide; blank for an app it lacks)."""
    headers = [*LIST_COLUMNS, *(WIDE_COLUMNS if wide is not None else []), "OWNER"]
    rows = [[*list_row(a), *((wide.get(a["name"]) or [""] * 4) if wide is not None else []), owner(a)]
            for a in body["apps"]]
    return headers, rows


def list_notes(body: dict[str, Any]) -> list[str]:
    """What `app list` prints on stderr below the table: invalid apps and config problems."""
    return ([f"invalid: {a['name']}: {a['error']}" for a in body["apps"] if "error" in a]
            + [f"config problem: {problem}" for problem in body.get("configProblems", [])])


def app_lines(b: dict[str, Any]) -> list[str]:
    """`app get`'s text above the resource table (its last line is empty)."""
    lines = [f"Name:       {b['app']}", f"Sync:       {b['syncStatus']}  (revision {short_revision(b)})",
             f"Health:     {b['health']}" + (f"  ({b['healthMessage']})" if b.get("healthMessage") else "")]
    if b.get("owner"):
        lines += [f"Owner:      {owner(b)}", f"Origin:     {b.get('origin', '')}"]
    if b.get("children"):
        lines.append(f"Children:   {', '.join(b['children'])}")
    lines += [f"Condition:  {cond['type']}: {cond['message']}" for cond in b.get("conditions", [])]
    if b.get("operation"):
        op = b["operation"]
        lines.append(f"Operation:  {op['phase']}" + (f": {op['message']}" if op.get("message") else "")
                     + f"  (id {op.get('id', '')}, started {op.get('startedAt', '')} by {op.get('initiatedBy', '')})")
        if op.get("phase") in ("Running", "Terminating"):
            wave = op.get("wave")
            lines += [f"Wave:       {wave if wave is not None else '-'}", f"Waiting:    {op.get('step') or '-'}"]
    if b.get("autoRollback"):
        auto = b["autoRollback"]
        lines.append(f"Rolled back automatically: {auto['revision'][:12]} → {auto['to'][:12]} at {auto['at']} "
                     f"({auto['reason']}); revert: {auto['revert']}")
    if b.get("revert"):
        lines.append(f"Revert:     {b['revert']['message']}")
    images = b.get("images") or {}
    if images.get("override"):
        lines.append(f"Images:     {', '.join(images['override'])}  (image updater, argocd write-back)")
    if images.get("pinned"):
        lines.append(f"Images:     {images['pinned']} (tidecd image unpin {b['app']})")
    elif images.get("check"):
        lines.append(f"Images:     {images['check'].get('status')}: {images['check'].get('message')}")
    return [*lines, ""]


def resource_rows(b: dict[str, Any]) -> list[list[str]]:
    """`app get`'s resource table (RESOURCE_COLUMNS)."""
    return [[(r["group"] + "/" if r["group"] else "") + r["kind"], r["namespace"], r["name"],
             r["status"] + (" (requires pruning)" if r.get("requiresPruning") else ""), r["health"],
             r.get("healthMessage") or ", ".join(r.get("changed") or [])] for r in b["resources"]]


def history_rows(b: dict[str, Any]) -> list[list[str]]:
    """`app history`'s table (HISTORY_COLUMNS); * marks the deployed entry (the last that succeeded)."""
    deployed = next((h["id"] for h in reversed(b["history"]) if h["result"] == "Succeeded"), None)
    return [[f"{h['id']}{'*' if h['id'] == deployed else ''}", short_revision(h), h["deployedAt"], h["result"],
             h.get("initiatedBy") or "", h.get("trigger") or ("rollback" if h.get("rollback") else "")]
            for h in b["history"]]


TREE_COLUMNS = ["GROUP", "KIND", "NAMESPACE", "NAME", "STATUS", "HEALTH", "MESSAGE"]


def tree_rows(body: dict[str, Any]) -> list[list[str]]:
    """`app resources`' tree (TREE_COLUMNS): each object indented under its parent (Pods under ReplicaSets)."""
    depth: dict[str, int] = {}
    rows = []
    for r in body["resources"]:
        text = f"{r['group'] + '/' if r['group'] else ''}{r['kind']} " + \
            (f"{r['namespace']}/{r['name']}" if r["namespace"] else r["name"])
        depth[text] = depth.get(r["parent"], -1) + 1 if r["parent"] else 0
        rows.append([r["group"], "  " * depth[text] + r["kind"], r["namespace"], r["name"], r["sync"], r["health"],
                     r["message"]])
    return rows


def resolved(rows: list[dict[str, Any]], app: str, group: str, kind: str, namespace: str,
             name: str) -> dict[str, str]:
    """The object of the app's tree (`rows`) named by kind and name (and group/namespace when given): one, or
    Failed listing the candidates."""
    found = [r for r in rows if r["kind"] == kind and r["name"] == name
             and (not group or r["group"] == group) and (not namespace or r["namespace"] == namespace)]
    if len(found) != 1:
        where = ", ".join(f"{r['group'] or 'core'}/{r['kind']} {r['namespace']}/{r['name']}" for r in found)
        raise Failed(f"app {app!r} has {len(found) or 'no'} {kind} named {name!r}"
                     + (f": {where} (give --group/--namespace)" if found else ""), EXIT_NOT_FOUND)
    return {"group": found[0]["group"], "kind": kind, "namespace": found[0]["namespace"], "name": name}


def print_detail(body: dict[str, Any], echo: Callable[[str], None],
                 tab: Callable[[list[str], list[list[str]]], None]) -> None:
    """`app resources NAME --kind K --name N`: why the object is as it is — a Pod's reason, its containers
    (state, restarts, last termination), the events and the diff."""
    key = body["resource"]
    echo(f"{key['kind']} {key['namespace']}/{key['name']}" + ("" if body["managed"] else "  (not in git: "
                                                              "made by the cluster from the app's objects)"))
    if body.get("reason"):
        echo(f"reason: {body['reason']}")
    if body.get("sync"):
        echo(f"sync: {body['sync']}" + (f"  ({body['error']})" if body.get("error") else ""))
    if body.get("containers"):
        echo("")
        rows = []
        for c in body["containers"]:
            last = c.get("lastTermination") or {}
            state = c["state"] + (f": {c['reason']}" if c["reason"] else "") + \
                (f" (exit code {c['exitCode']})" if c.get("exitCode") is not None else "")
            ended = f"{last['reason']} (exit code {last['exitCode']}) at {last['finishedAt']}" if last else ""
            rows.append([c["name"] + (" (init)" if c["init"] else ""), c["image"], state,
                         "yes" if c["ready"] else "no", str(c["restartCount"]), ended])
        tab(["CONTAINER", "IMAGE", "STATE", "READY", "RESTARTS", "LAST TERMINATION"], rows)
    echo("\nevents:" if body["events"] else "\nevents: none")
    if body["events"]:
        tab(["LAST SEEN", "TYPE", "REASON", "COUNT", "FROM", "MESSAGE"],
            [[e["lastSeen"], e["type"], e["reason"], str(e["count"]), e["source"], e["message"]]
             for e in body["events"]])
    if body.get("diff"):
        echo("\ndiff:\n" + body["diff"])


FOLLOW_LOGS = 2.0  # seconds between reads while following logs


def print_logs(fetch: Callable[[dict[str, str]], dict[str, Any]], query: dict[str, str], *, follow: bool,
               timeout: float, echo: Callable[[str], None]) -> None:
    """`app logs`: each stream's lines (led by POD/CONTAINER when there are several); with `follow`, reads
    again every 2 s from the oldest stream's last time, printing only lines not printed yet, until `timeout`."""
    seen: dict[tuple[str, str], str] = {}
    deadline = time.monotonic() + timeout
    while True:
        streams = fetch(query)["logs"]
        for stream in streams:
            where = (stream["pod"], stream["container"])
            prefix = f"{stream['pod']}/{stream['container']} " if len(streams) > 1 else ""
            for line in stream["lines"]:
                if line["time"] and line["time"] <= seen.get(where, ""):
                    continue  # printed already (sinceTime is the oldest stream's: others repeat)
                echo(prefix + line["text"])
                seen[where] = line["time"] or seen.get(where, "")
        if not follow or time.monotonic() > deadline:
            return
        if seen:
            query["sinceTime"] = min(seen.values())
        time.sleep(FOLLOW_LOGS)


def table(headers: list[str], rows: list[list[str]], echo: Callable[[str], None] = print) -> None:
    """Columns as a table prints into a pipe or file: left-aligned, two spaces apart, a row a line (so
    scripts can split it); the full CLI prints this too when its output is not a terminal."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    for row in (headers, *rows):
        echo("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


WOULD = {"created": "create", "configured": "configure", "pruned": "prune", "unchanged": "stay unchanged",
         "prune-skipped": "not prune (pruning off)"}  # a dry run's result, as what it would do


def result_lines(op: dict[str, Any], body: dict[str, Any], seen: dict[tuple[str, str], tuple[str, str, str]],
                 printed: set[tuple[str, str]]) -> list[str]:
    """A line per task result that is new or changed since `seen`; a result whose change the local step has
    just printed (`printed`) is only remembered, so no change shows twice."""
    health = {(r.get("group", ""), r.get("kind", ""), r.get("namespace", ""), r.get("name", "")):
              r.get("health", "") for r in body.get("resources", [])}
    lines = []
    for result in op.get("results", []):
        key = result.get("key") or {}
        rk = (key.get("group", ""), key.get("kind", ""), key.get("namespace", ""), key.get("name", ""))
        state = (str(result.get("action", "")), str(result.get("phase", "")), str(health.get(rk, "")))
        ident = (str(result.get("resource", "")), str(result.get("syncPhase", "")))
        if seen.get(ident) == state:
            continue
        first = ident not in seen
        seen[ident] = state
        if first and (ident[0], state[0]) in printed:
            continue
        note = f": {result['message']}" if result.get("message") and not op.get("dryRun") else ""
        done = f"would {WOULD.get(state[0], state[0])}" if op.get("dryRun") else f"{state[0]}, {state[1]}"
        lines.append(f"  [{ident[1]} wave {result.get('wave', 0)}] {ident[0]} {done}"
                     + (f", {state[2]}" if state[2] and not op.get("dryRun") else "") + note)
    return lines


Step = Callable[[], tuple[float, list[tuple[str, str, str]]]]
"""One step taken by this process (locally; with --server the installation takes them): seconds until the
next is due, and the changes it printed as (line, resource, action)."""


def _remote(delay: float) -> Step:
    return lambda: (delay, [])


def follow(fetch: Callable[[], dict[str, Any]], step: Step, operation_id: str, timeout: float, *, quiet: bool,
           echo: Callable[[str], None]) -> dict[str, Any]:
    """Until the operation `operation_id` (or the running one, when empty) has ended: the app's last status
    (`fetch`). Prints each change once: the step's own change lines as it takes them; then every task result
    when it first appears or changes, unless the step already printed that very change (a task's later
    health is a new line); and each new thing it waits for. Failed (exit 1) past `timeout` seconds (0: none)."""
    deadline = time.monotonic() + timeout if timeout > 0 else None
    seen: dict[tuple[str, str], tuple[str, str, str]] = {}
    printed: set[tuple[str, str]] = set()  # (resource, action) the local step printed
    last_step = ""
    while True:
        delay, changes = step()
        if not quiet:
            for line, resource, action in changes:
                echo(line)
                printed.add((resource, action))
        body = fetch()
        op = body.get("operation") or {}
        mine = op and (not operation_id or op.get("id") == operation_id)
        if mine and not quiet:
            for line in result_lines(op, body, seen, printed):
                echo(line)
            waits = str(op.get("step", ""))
            if waits and waits != last_step and op.get("phase") in ("Running", "Terminating"):
                echo(f"... {waits}")
            last_step = waits
        if not mine or op.get("phase") not in ("Running", "Terminating"):
            if mine and not quiet:
                echo(f"\n{op.get('phase')}" + (f": {op['message']}" if op.get("message") else ""))
                echo(f"sync: {body.get('syncStatus')}  health: {body.get('health')}")
            return body
        if deadline is not None and time.monotonic() + delay > deadline:
            raise Failed(f"operation {op.get('id')} still {op.get('phase')} after {timeout:g}s: {op.get('step', '')}",
                         EXIT_FAILED)
        time.sleep(min(max(delay, 0.2), 5.0))


def wait_until(name: str, fetch: Callable[[bool], dict[str, Any]], step: Callable[[], float] | None,
               wanted: tuple[bool, bool, bool], timeout: float, echo: Callable[[str], None]) -> int:
    """`app wait`: until the app is Synced, Healthy and/or done with its operation (`wanted`, in that order);
    exit 1 when the operation it waited for failed, Failed (exit 1) past `timeout` seconds (0: none). `step`
    takes a step locally; None (--server) asks the api for a refresh while no operation runs."""
    sync_, health, operation = wanted
    deadline = time.monotonic() + timeout if timeout > 0 else None
    while True:
        delay = step() if step is not None else 3.0
        body = fetch(False)  # locally: just refreshed by the step
        if step is None and (body.get("operation") or {}).get("phase") not in ("Running", "Terminating"):
            body = fetch(True)  # no step is coming: ask the api for a refresh (one bounded step there)
        op = body.get("operation") or {}
        running = op.get("phase") in ("Running", "Terminating")
        missing = [what for what, on, ok in (
            ("sync", sync_, body.get("syncStatus") == "Synced"),
            ("health", health, body.get("health") == "Healthy"),
            ("operation", operation, not running)) if on and not ok]
        if not missing:
            echo(f"{name}: sync {body.get('syncStatus')}, health {body.get('health')}"
                 + (f", operation {op.get('phase')}" if op else ""))
            return EXIT_FAILED if operation and op.get("phase") in ("Failed", "Error") else 0
        if deadline is not None and time.monotonic() + min(delay, 3.0) > deadline:
            raise Failed(f"{name}: timed out after {timeout:g}s waiting for {', '.join(missing)} (sync "
                         f"{body.get('syncStatus')}, health {body.get('health')}"
                         + (f", operation {op.get('phase')}: {op.get('step', '')}" if op else "") + ")", EXIT_FAILED)
        time.sleep(min(max(delay, 0.2), 3.0))


def change_lines(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """What `app refresh` prints: (line, on stderr) — each change, the operation's end, each condition, the
    status."""
    from tidecd.base.model import ChangeSet  # lazy: cold start (only the commands that print changes)

    lines = [(line, False) for line in ChangeSet.from_dicts(body.get("changes", [])).lines()]
    if "operation" in body:
        lines.append((f"\n{body['operation']['phase']}: {body['operation']['message']}", False))
    lines += [(f"{cond['type']}: {cond['message']}", True) for cond in body.get("conditions", [])]
    return [*lines, (f"sync: {body['sync']}  health: {body['health']}", False)]


def refresh_failed(body: dict[str, Any]) -> bool:
    """Whether `app refresh` exits 1: its operation failed, or a condition was raised."""
    return body.get("operation", {}).get("phase") == "Failed" or bool(body.get("conditions"))


def diff_text(body: dict[str, Any]) -> str:
    """`app diff`'s text: each differing object and its diff."""
    from tidecd.base.model import ChangeSet  # lazy: cold start (only the commands that print changes)

    return "\n".join(ChangeSet.from_dicts(body["changes"]).lines(diffs=True))


def started_line(started: dict[str, Any]) -> str:
    """What `--async` prints for an operation it started."""
    return f"operation {started.get('operationId', '')} started" + (
        f" ({started['warning']})" if started.get("warning") else "")


def _json(body: dict[str, Any]) -> None:
    print(json.dumps(body, indent=2))


def _say(line: str) -> None:
    print(line, flush=True)  # a followed operation's lines as they come, also into a pipe


def _emit(c: Call, body: dict[str, Any], text: Callable[[], None]) -> None:
    if c.output == "json":
        _json(body)
    else:
        text()


def app_list(c: Call) -> int:
    """`tidecd app list` through the api: the recorded states (with --refresh, each app compared first), one
    GET more per Unknown app (only those can be failing to compare, which makes the exit code 5), or per app
    for the wide table's CONDITIONS."""
    body = call(c.server, c.token, "/apps")
    if "--refresh" in c.flags and "--cached" not in c.flags:
        for item in body["apps"]:
            if "error" not in item:  # an app the config sets aside has nothing to refresh
                call(c.server, c.token, f"/apps/{item['name']}", refresh=True)
        body = call(c.server, c.token, "/apps")
    failing = False
    wide: dict[str, list[str]] = {}
    for item in body["apps"]:
        if "error" in item or not (c.output == "wide" or "Unknown" in (item["sync"], item["health"])):
            continue
        got = call(c.server, c.token, f"/apps/{item['name']}")
        conditions = got.get("conditions") or []
        wide[item["name"]] = ["", "", "", ", ".join(str(cond.get("type", "")) for cond in conditions)]
        failing |= in_error(str(got.get("syncStatus", "")), str(got.get("health", "")), conditions)
    if c.output == "json":
        _json(body)
    elif c.output == "name":
        for item in body["apps"]:
            print(item["name"])
    else:
        table(*list_table(body, wide if c.output == "wide" else None))
        for note in list_notes(body):
            print(note, file=sys.stderr)
    return EXIT_APP_ERROR if failing else 0


def app_get(c: Call) -> int:
    """`tidecd app get NAME`: a fresh comparison (unless --cached), exit 5 when the app fails to compare."""
    body = call(c.server, c.token, f"/apps/{c.name}", refresh="--cached" not in c.flags)

    def text() -> None:
        for line in app_lines(body):
            print(line)
        table(RESOURCE_COLUMNS, resource_rows(body))

    _emit(c, body, text)
    failing = in_error(str(body.get("syncStatus", "")), str(body.get("health", "")), body.get("conditions") or [])
    return EXIT_APP_ERROR if failing else 0


def app_history(c: Call) -> int:
    """`tidecd app history NAME`."""
    body = call(c.server, c.token, f"/apps/{c.name}/history")
    _emit(c, body, lambda: table(HISTORY_COLUMNS, history_rows(body)))
    return 0


def app_diff(c: Call) -> int:
    """`tidecd app diff NAME`: exit 1 when out of sync."""
    call(c.server, c.token, f"/apps/{c.name}", refresh="--cached" not in c.flags)
    body = call(c.server, c.token, f"/apps/{c.name}/diff")
    _emit(c, body, lambda: print(diff_text(body)))
    return EXIT_FAILED if body["sync"] != "Synced" else 0


def app_refresh(c: Call) -> int:
    """`tidecd app refresh NAME`: one reconcile there."""
    body = call(c.server, c.token, f"/apps/{c.name}/refresh", method="POST")

    def text() -> None:
        for line, err in change_lines(body):
            print(line, file=sys.stderr if err else sys.stdout)

    _emit(c, body, text)
    return EXIT_FAILED if refresh_failed(body) else 0


def app_terminate(c: Call) -> int:
    """`tidecd app terminate-op NAME`."""
    body = call(c.server, c.token, f"/apps/{c.name}/operation", method="DELETE")
    _emit(c, body, lambda: print(f"operation {body['operationId']} of {c.name}: terminating"))
    return 0


def app_sync(c: Call) -> int:
    """`tidecd app sync NAME`: start the operation and (unless --async) follow it."""
    payload: dict[str, Any] = {"prune": "--prune" in c.flags, "dryRun": "--dry-run" in c.flags}
    if c.value("--revision"):
        payload["revision"] = c.value("--revision")
    replace, force = "--replace" in c.flags, "--force" in c.flags
    if replace or force:
        payload["syncOptions"] = [o for o, on in (("Replace=true", replace), ("Force=true", force)) if on]
    if c.every("--resource"):
        call(c.server, c.token, f"/apps/{c.name}", refresh=True)
        payload["resources"] = c.every("--resource")
    return _started(c, call(c.server, c.token, f"/apps/{c.name}/sync", method="POST", body=payload))


def app_rollback(c: Call) -> int:
    """`tidecd app rollback NAME ID`: re-sync a revision from history (and revert git with --revert)."""
    payload: dict[str, Any] = {"id": int(c.args[1]), "prune": "--prune" in c.flags}
    if c.value("--revert") or "--revert-pr" in c.flags:
        payload["revert"] = c.value("--revert") or "pr"
    started = call(c.server, c.token, f"/apps/{c.name}/rollback", method="POST", body=payload)
    if c.output == "table" and started.get("revert"):
        print(started["revert"]["message"])
    if started.get("revertError"):
        print(f"warning: {started['revertError']}", file=sys.stderr)
    return _started(c, started)


def _started(c: Call, started: dict[str, Any]) -> int:
    operation_id = str(started.get("operationId", ""))
    if "--async" in c.flags:
        _emit(c, started, lambda: print(started_line(started)))
        return 0
    body = follow(lambda: call(c.server, c.token, f"/apps/{c.name}"), _remote(2.0), operation_id,
                  float(c.value("--timeout", "0")), quiet=c.output != "table", echo=_say)
    if c.output != "table":
        _json(body)
    op = body.get("operation") or {}
    return EXIT_FAILED if op.get("id") == operation_id and op.get("phase") != "Succeeded" else 0


def _object(c: Call) -> dict[str, str]:
    """The object --kind and --name (--group, --namespace) name in the app's tree; {} when not given."""
    if not c.value("--kind"):
        return {}
    rows = call(c.server, c.token, f"/apps/{c.name}/resources")["resources"]
    return resolved(rows, c.name, c.value("--group"), c.value("--kind"), c.value("--namespace"), c.value("--name"))


def app_resources(c: Call) -> int:
    """`tidecd app resources NAME`: the tree; with --kind and --name, one object's detail."""
    from urllib.parse import urlencode  # lazy: only a query pays for it

    query = _object(c)
    if query:
        detail = call(c.server, c.token, f"/apps/{c.name}/resource?{urlencode(query)}")
        _emit(c, detail, lambda: print_detail(detail, print, table))
        return 0
    body = call(c.server, c.token, f"/apps/{c.name}/resources")
    _emit(c, body, lambda: table(TREE_COLUMNS, tree_rows(body)))
    return 0


def app_logs(c: Call) -> int:
    """`tidecd app logs NAME`: every pod's logs, or those under --kind/--name."""
    from urllib.parse import urlencode  # lazy: only logs send a query

    container = next((v for o, v in reversed(c.values) if o in ("-c", "--container")), "")  # the last given
    query = {"tail": str(int(c.value("--tail", "100"))), **({"container": container} if container else {}),
             **_object(c)}
    print_logs(lambda q: call(c.server, c.token, f"/apps/{c.name}/logs?{urlencode(q)}"), query,
               follow=bool({"-f", "--follow"} & c.flags), timeout=float(c.value("--timeout", "600")), echo=_say)
    return 0


def app_wait(c: Call) -> int:
    """`tidecd app wait NAME`: all three conditions without flags."""
    wanted = tuple(f in c.flags for f in ("--sync", "--health", "--operation"))
    return wait_until(c.name, lambda fresh: call(c.server, c.token, f"/apps/{c.name}", refresh=fresh), None,
                      (wanted[0], wanted[1], wanted[2]) if any(wanted) else (True, True, True),
                      float(c.value("--timeout", "0")), _say)


_HANDLERS: dict[str, Callable[[Call], int]] = {
    "list": app_list, "get": app_get, "history": app_history, "diff": app_diff, "refresh": app_refresh,
    "terminate-op": app_terminate, "sync": app_sync, "rollback": app_rollback, "wait": app_wait,
    "resources": app_resources, "logs": app_logs}


def run(argv: list[str]) -> int | None:
    """The command's exit code when this client answered it, else None."""
    parsed = parse(argv)
    if parsed is None:
        return None
    try:
        return _HANDLERS[parsed.command](parsed)
    except Failed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
