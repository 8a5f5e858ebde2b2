"""The thin client: `tidecd --server URL app list` answered with the standard library alone.

A `--server` call does 4–100 ms of api work, but the full CLI (typer, rich, requests, structlog, the config
schema) takes over a second to start. This module imports only `json`, `os` and `urllib`, so the commands
it knows start about as fast as the interpreter; `tests/unit/test_cli_thin.py` holds it to that import set
and `bench cli` measures the start.

It answers a command only when it can answer it exactly as the full CLI does (the same api calls, columns,
output and exit codes); anything else — another command, a flag it does not know, `-o wide` or `yaml`,
`-p`/`-l`, no token given (the full CLI reads the one `tidecd login` kept) — returns None, and `main` runs the
full CLI with the same arguments.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

EXIT_FAILED = 1  # out of sync (diff), the operation failed, or it timed out
EXIT_NOT_FOUND = 2  # no such app (404), or the request was refused; click's usage errors are 2 as well
EXIT_CONFLICT = 3  # an operation already runs (409)
EXIT_UNREACHABLE = 4  # cannot connect to the api, or it could not reach what it depends on (502/503/504)
EXIT_APP_ERROR = 5  # the app fails to compare: sync or health Unknown with an ...Error condition
TIMEOUT = 900.0
OUTPUTS = ("table", "json", "name")
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


def parse(argv: list[str]) -> dict[str, str] | None:
    """The options of a command this client answers, or None (the full CLI's to answer)."""
    options = {"server": os.environ.get("TIDECD_SERVER", ""), "token": os.environ.get("TIDECD_API_TOKEN", ""),
               "output": "table"}
    words: list[str] = []
    rest = iter(argv)
    for arg in rest:
        name, eq, value = arg.partition("=")
        if name in _VALUED and (eq or name == "-o" or name.startswith("--")):
            if not eq:
                value = next(rest, "")
            options[_VALUED[name]] = value
        elif arg.startswith("-o") and len(arg) > 2 and not arg.startswith("--"):
            options["output"] = arg[2:]
        elif arg == "--cached":  # the default, kept for scripts
            continue
        elif arg.startswith("-"):
            return None
        else:
            words.append(arg)
    if words != ["app", "list"] or options["output"] not in OUTPUTS or not options["server"] or not options["token"]:
        return None
    return options


def call(server: str, token: str, path: str) -> dict[str, Any]:
    """GET `path` of the api; its JSON object, or Failed with the full CLI's exit code for the failure."""
    from urllib import error, request  # lazy: only a call that reaches the network pays for it

    if not server.startswith(("http://", "https://")):
        raise Failed(f"--server {server!r}: expected an http:// or https:// URL", EXIT_NOT_FOUND)
    asked = request.Request(server.rstrip("/") + "/api/v1" + path, method="GET",  # noqa: S310 - http(s) only
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


def app_list(options: dict[str, str]) -> int:
    """`tidecd app list` through the api: the recorded states, one GET more per Unknown app (only those can
    be failing to compare, which makes the exit code 5)."""
    server, token = options["server"], options["token"]
    body = call(server, token, "/apps")
    failing = False
    for item in body["apps"]:
        if "error" not in item and "Unknown" in (item["sync"], item["health"]):
            got = call(server, token, f"/apps/{item['name']}")
            failing |= in_error(str(got.get("syncStatus", "")), str(got.get("health", "")),
                                got.get("conditions") or [])
    if options["output"] == "json":
        print(json.dumps(body, indent=2))
    elif options["output"] == "name":
        for item in body["apps"]:
            print(item["name"])
    else:
        rows = [[a["name"], a["sync"] if "error" not in a else "Invalid", a["health"], short_revision(a),
                 a.get("owner", "") + (" (deleting)" if a.get("deleting") else "")] for a in body["apps"]]
        _table(["NAME", "SYNC", "HEALTH", "REVISION", "OWNER"], rows)
        for a in body["apps"]:
            if "error" in a:
                print(f"invalid: {a['name']}: {a['error']}", file=sys.stderr)
        for problem in body.get("configProblems", []):
            print(f"config problem: {problem}", file=sys.stderr)
    return EXIT_APP_ERROR if failing else 0


def _table(headers: list[str], rows: list[list[str]]) -> None:
    """Columns as the full CLI's table prints them into a pipe: left-aligned, two spaces apart."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    for row in (headers, *rows):
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def run(argv: list[str]) -> int | None:
    """The command's exit code when this client answered it, else None."""
    options = parse(argv)
    if options is None:
        return None
    try:
        return app_list(options)
    except Failed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
