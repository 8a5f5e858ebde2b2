"""The thin client: `tidecd --server URL app list|get|history|diff|sync|refresh|rollback|terminate-op|delete|
wait|resources|logs|manifests` answered with the standard library alone.

A `--server` call does 4–100 ms of api work, but the full CLI (typer, rich, requests, structlog, the config
schema) takes over a second to start. This module imports only the standard library (`json`, `os`, `re`,
`pathlib`, `urllib`), so the commands it knows start about as fast as the interpreter;
`tests/unit/test_cli_thin.py` holds it to that import set and `bench cli` measures the start.

It answers a command only when it can answer it exactly as the full CLI does (the same api calls, columns,
output and exit codes): both print through `cli.textout` and exit through `cli.exits`, so there is one of each.
Anything else — another command, a flag it does not know, `-o yaml`, no token given nor
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

from tidecd.cli.exits import (
    EXIT_APP_ERROR,
    EXIT_CONFLICT,
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_UNREACHABLE,
    Failed,
    in_error,
)
from tidecd.cli.textout import (
    HISTORY_COLUMNS,
    RESOURCE_COLUMNS,
    TREE_COLUMNS,
    app_lines,
    change_lines,
    deleted_line,
    diff_text,
    follow,
    history_rows,
    list_failing,
    list_notes,
    list_table,
    print_detail,
    print_logs,
    refresh_failed,
    remote_step,
    resolved,
    resource_rows,
    selected,
    selector,
    started_line,
    sync_options,
    table,
    tree_rows,
    wait_until,
)

TIMEOUT = 900.0
_VALUED = {"--server": "server", "--token": "token", "-o": "output", "--output": "output"}


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
    "list": (0, frozenset({"--cached", "--refresh"}), frozenset({"-p", "--project", "-l", "--selector"}),
             ("table", "wide", "json", "name")),
    "get": (1, frozenset({"--cached"}), frozenset(), ("table", "json")),
    "history": (1, frozenset(), frozenset(), ("table", "json")),
    "diff": (1, frozenset({"--cached"}), frozenset(), ("table", "json")),
    "refresh": (1, frozenset(), frozenset(), ("table", "json")),
    "terminate-op": (1, frozenset(), frozenset(), ("table", "json")),
    "delete": (1, frozenset(), frozenset({"--cascade"}), ("table", "json")),
    "sync": (1, _FOLLOW | {"--prune", "--dry-run", "--replace", "--force", "--apply-out-of-sync-only"},
             frozenset({"--resource", "--revision", "--timeout"}), ("table", "json")),
    "rollback": (2, _FOLLOW | {"--prune", "--revert-pr"}, frozenset({"--timeout", "--revert"}), ("table", "json")),
    "wait": (1, frozenset({"--sync", "--health", "--operation"}), frozenset({"--timeout"}), ()),  # no -o
    "resources": (1, frozenset(), _OBJECT, ("table", "json")),
    "logs": (1, frozenset({"-f", "--follow"}), _OBJECT | {"-c", "--container", "--tail", "--timeout"}, ()),
    "manifests": (1, frozenset(), frozenset({"--source", "--revision"}), ()),
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


def _body(answer: Any) -> bytes:
    """An answer's body; one cut off mid-read (IncompleteRead) is what arrived, which then reads as no api
    answer (below), as the full CLI says of it."""
    from http.client import IncompleteRead  # lazy: only a call that reaches the network pays for it

    try:
        return bytes(answer.read())
    except IncompleteRead as exc:
        return bytes(exc.partial)


def call(server: str, token: str, path: str, *, refresh: bool = False, method: str = "GET",
         body: dict[str, Any] | None = None) -> dict[str, Any]:
    """`method` `path` of the api (`?refresh=true` when `refresh`) with the JSON `body`; its JSON object, or
    Failed with the full CLI's exit code for the failure."""
    from http.client import HTTPException  # lazy: only a call that reaches the network pays for it
    from urllib import error, request  # lazy: as above

    if not server.startswith(("http://", "https://")):
        raise Failed(f"--server {server!r}: expected an http:// or https:// URL", EXIT_NOT_FOUND)
    url = server.rstrip("/") + "/api/v1" + path + ("?refresh=true" if refresh else "")
    asked = request.Request(url, method=method, data=json.dumps(body or {}).encode(),  # noqa: S310 - http(s) only
                            headers={"Authorization": f"Bearer {token}", "Accept": "application/json",
                                     "Content-Type": "application/json"})
    try:
        with request.urlopen(asked, timeout=TIMEOUT) as answer:  # noqa: S310 - http(s) only (above)
            status, kind, raw = answer.status, answer.headers.get("Content-Type", ""), _body(answer)
    except error.HTTPError as exc:
        status, kind, raw = exc.code, exc.headers.get("Content-Type", ""), _body(exc)
    except (error.URLError, OSError, ValueError, HTTPException) as exc:
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
    """`tidecd app list` through the api: the recorded states (with --refresh, each app compared first). The
    list answer carries each app's project, destination, labels and conditions: the wide columns, `-p`/`-l`
    and the exit code (5 when an app fails to compare) need no call per app."""
    wanted = [selector(text) for text in c.every("-l") + c.every("--selector")]
    body = call(c.server, c.token, "/apps")
    if "--refresh" in c.flags and "--cached" not in c.flags:
        for item in body["apps"]:
            if "error" not in item:  # an app the config sets aside has nothing to refresh
                call(c.server, c.token, f"/apps/{item['name']}", refresh=True)
        body = call(c.server, c.token, "/apps")
    body = selected(body, c.every("-p") + c.every("--project"), wanted)
    if c.output == "json":
        _json(body)
    elif c.output == "name":
        for item in body["apps"]:
            print(item["name"])
    else:
        table(*list_table(body, wide=c.output == "wide"))
        for note in list_notes(body):
            print(note, file=sys.stderr)
    return EXIT_APP_ERROR if list_failing(body) else 0


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


def app_delete(c: Call) -> int:
    """`tidecd app delete NAME [--cascade=foreground|background|orphan]`."""
    from urllib.parse import quote  # lazy: as `call`'s

    cascade = quote(c.value("--cascade", "foreground"), safe="")  # checked by the api, as for the full CLI
    body = call(c.server, c.token, f"/apps/{c.name}?cascade={cascade}", method="DELETE")
    _emit(c, body, lambda: print(deleted_line(body)))
    return 0


def app_sync(c: Call) -> int:
    """`tidecd app sync NAME`: start the operation and (unless --async) follow it."""
    payload: dict[str, Any] = {"prune": "--prune" in c.flags, "dryRun": "--dry-run" in c.flags}
    if c.value("--revision"):
        payload["revision"] = c.value("--revision")
    chosen = sync_options("--replace" in c.flags, "--force" in c.flags, "--apply-out-of-sync-only" in c.flags)
    if chosen:
        payload["syncOptions"] = chosen
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
    body = follow(lambda: call(c.server, c.token, f"/apps/{c.name}"), remote_step(2.0), operation_id,
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


def app_manifests(c: Call) -> int:
    """`tidecd app manifests NAME`: the YAML the api dumps (`format=yaml`), as the full CLI prints it."""
    from urllib.parse import urlencode  # lazy: only a query pays for it

    query = {"source": c.value("--source", "git"), "format": "yaml",
             **({"revision": c.value("--revision")} if c.value("--revision") else {})}
    print(call(c.server, c.token, f"/apps/{c.name}/manifests?{urlencode(query)}")["yaml"], end="")
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
    "terminate-op": app_terminate, "delete": app_delete, "sync": app_sync, "rollback": app_rollback,
    "wait": app_wait, "resources": app_resources, "logs": app_logs, "manifests": app_manifests}


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
