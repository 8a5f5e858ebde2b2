"""The thin client: `tidecd --server URL app list|get|history` answered with the standard library alone.

A `--server` call does 4–100 ms of api work, but the full CLI (typer, rich, requests, structlog, the config
schema) takes over a second to start. This module imports only the standard library (`json`, `os`, `re`,
`pathlib`, `urllib`), so the commands it knows start about as fast as the interpreter;
`tests/unit/test_cli_thin.py` holds it to that import set and `bench cli` measures the start.

It answers a command only when it can answer it exactly as the full CLI does (the same api calls, columns,
output and exit codes): the full CLI prints through the formatting functions below, so there is one of each.
Anything else — another command, a flag it does not know, `-o wide` or `yaml`, `-p`/`-l`, no token given nor
kept by `tidecd login` (or a config file the full CLI would complain about) — returns None, and `main` runs
the full CLI with the same arguments.
"""

from __future__ import annotations

import json
import os
import re
import sys
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
    """A command this client answers: its words after `app`, the app's name, options and flags."""

    command: str
    name: str
    server: str
    token: str
    output: str
    flags: frozenset[str] = frozenset()


# Per command: whether it takes an app's NAME, the flags it knows here, and the outputs it prints here (yaml
# and the rest are the full CLI's).
_COMMANDS: dict[str, tuple[bool, frozenset[str], tuple[str, ...]]] = {
    "list": (False, frozenset({"--cached"}), ("table", "json", "name")),
    "get": (True, frozenset({"--cached"}), ("table", "json")),
    "history": (True, frozenset(), ("table", "json")),
}
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")  # an app's name: safe in a URL path as it is


def parse(argv: list[str]) -> Call | None:
    """The command this client answers, or None (the full CLI's to answer)."""
    options = {"server": os.environ.get("TIDECD_SERVER", ""), "token": os.environ.get("TIDECD_API_TOKEN", ""),
               "output": "table"}
    words: list[str] = []
    flags: set[str] = set()
    rest = iter(argv)
    for arg in rest:
        name, eq, value = arg.partition("=")
        if name in _VALUED and (eq or name == "-o" or name.startswith("--")):
            if not eq:
                value = next(rest, "")
            options[_VALUED[name]] = value
        elif arg.startswith("-o") and len(arg) > 2 and not arg.startswith("--"):
            options["output"] = arg[2:]
        elif arg.startswith("-"):
            flags.add(arg)
        else:
            words.append(arg)
    if len(words) < 2 or words[0] != "app" or words[1] not in _COMMANDS:
        return None
    named, known, outputs = _COMMANDS[words[1]]
    if len(words) != (3 if named else 2) or (named and not _NAME.fullmatch(words[2])) or not flags <= known:
        return None
    if options["output"] not in outputs or not options["server"].startswith(("http://", "https://")):
        return None
    token = options["token"] or saved_token(options["server"])
    if not token:
        return None  # no token, or a config file the full CLI explains
    return Call(words[1], words[2] if named else "", options["server"], token, options["output"], frozenset(flags))


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


def call(server: str, token: str, path: str, *, refresh: bool = False) -> dict[str, Any]:
    """GET `path` of the api (`?refresh=true` when `refresh`); its JSON object, or Failed with the full CLI's
    exit code for the failure."""
    from urllib import error, request  # lazy: only a call that reaches the network pays for it

    if not server.startswith(("http://", "https://")):
        raise Failed(f"--server {server!r}: expected an http:// or https:// URL", EXIT_NOT_FOUND)
    url = server.rstrip("/") + "/api/v1" + path + ("?refresh=true" if refresh else "")
    asked = request.Request(url, method="GET",  # noqa: S310 - http(s) only
                            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
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


def table(headers: list[str], rows: list[list[str]], echo: Callable[[str], None] = print) -> None:
    """Columns as a table prints into a pipe or file: left-aligned, two spaces apart, a row a line (so
    scripts can split it); the full CLI prints this too when its output is not a terminal."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    for row in (headers, *rows):
        echo("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _json(body: dict[str, Any]) -> None:
    print(json.dumps(body, indent=2))


def app_list(c: Call) -> int:
    """`tidecd app list` through the api: the recorded states, one GET more per Unknown app (only those can
    be failing to compare, which makes the exit code 5)."""
    body = call(c.server, c.token, "/apps")
    failing = False
    for item in body["apps"]:
        if "error" not in item and "Unknown" in (item["sync"], item["health"]):
            got = call(c.server, c.token, f"/apps/{item['name']}")
            failing |= in_error(str(got.get("syncStatus", "")), str(got.get("health", "")),
                                got.get("conditions") or [])
    if c.output == "json":
        _json(body)
    elif c.output == "name":
        for item in body["apps"]:
            print(item["name"])
    else:
        table([*LIST_COLUMNS, "OWNER"], [[*list_row(a), owner(a)] for a in body["apps"]])
        for note in list_notes(body):
            print(note, file=sys.stderr)
    return EXIT_APP_ERROR if failing else 0


def app_get(c: Call) -> int:
    """`tidecd app get NAME`: a fresh comparison (unless --cached), exit 5 when the app fails to compare."""
    body = call(c.server, c.token, f"/apps/{c.name}", refresh="--cached" not in c.flags)
    if c.output == "json":
        _json(body)
    else:
        for line in app_lines(body):
            print(line)
        table(RESOURCE_COLUMNS, resource_rows(body))
    failing = in_error(str(body.get("syncStatus", "")), str(body.get("health", "")), body.get("conditions") or [])
    return EXIT_APP_ERROR if failing else 0


def app_history(c: Call) -> int:
    """`tidecd app history NAME`."""
    body = call(c.server, c.token, f"/apps/{c.name}/history")
    if c.output == "json":
        _json(body)
    else:
        table(HISTORY_COLUMNS, history_rows(body))
    return 0


_HANDLERS: dict[str, Callable[[Call], int]] = {"list": app_list, "get": app_get, "history": app_history}


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
