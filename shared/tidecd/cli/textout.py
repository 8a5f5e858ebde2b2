"""What the CLI prints, one function each, used by both the thin client (`cli.thin`) and the full CLI so
that both print alike: tables, an app's lines, a resource's detail, logs, an operation followed to its end,
changes and diffs. Standard library only (see `cli.thin`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tidecd.cli.exits import EXIT_FAILED, EXIT_NOT_FOUND, Failed, in_error, short_revision

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


def list_table(body: dict[str, Any], *, wide: bool) -> tuple[list[str], list[list[str]]]:
    """`app list`'s headers and rows; `wide` adds each app's PROJECT, CLUSTER (its destination's name, else its
    server), NAMESPACE and CONDITIONS from the list answer itself (blank for an app the config sets aside)."""
    headers = [*LIST_COLUMNS, *(WIDE_COLUMNS if wide else []), "OWNER"]
    rows = [[*list_row(a), *(_wide_cells(a) if wide else []), owner(a)] for a in body["apps"]]
    return headers, rows


def _wide_cells(item: dict[str, Any]) -> list[str]:
    dest = item.get("destination") or {}
    return [str(item.get("project", "")), str(dest.get("name") or dest.get("server") or ""),
            str(dest.get("namespace", "")), ", ".join(str(c.get("type", "")) for c in item.get("conditions") or [])]


def selector(text: str) -> tuple[str, str]:
    """`-l key=value` as a pair; Failed (exit 2, as click's usage errors) for anything else."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise Failed(f"-l {text!r}: expected key=value", EXIT_NOT_FOUND)
    return key.strip(), value.strip()


def selected(body: dict[str, Any], projects: list[str], wanted: list[tuple[str, str]]) -> dict[str, Any]:
    """The list answer with only the apps of `projects` (any, when empty) labelled with every `wanted` pair,
    as `argocd app list -p/-l` selects."""
    def keep(item: dict[str, Any]) -> bool:
        labels = item.get("labels") or {}
        return ((not projects or item.get("project") in projects)
                and all(labels.get(k) == v for k, v in wanted))

    return body | {"apps": [a for a in body["apps"] if keep(a)]}


def list_failing(body: dict[str, Any]) -> bool:
    """Whether a listed app fails to compare: `app list` then exits 5, as `app get` does for that app."""
    return any(in_error(str(a["sync"]), str(a["health"]), a.get("conditions") or [])
               for a in body["apps"] if "error" not in a)


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


def remote_step(delay: float) -> Step:
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


def sync_options(replace: bool, force: bool, out_of_sync_only: bool) -> list[str]:
    """`app sync`'s --replace, --force and --apply-out-of-sync-only as the api's syncOptions (both CLIs)."""
    chosen = (("Replace=true", replace), ("Force=true", force), ("ApplyOutOfSyncOnly=true", out_of_sync_only))
    return [option for option, on in chosen if on]


def started_line(started: dict[str, Any]) -> str:
    """What `--async` prints for an operation it started."""
    return f"operation {started.get('operationId', '')} started" + (
        f" ({started['warning']})" if started.get("warning") else "")


def deleted_line(body: dict[str, Any]) -> str:
    """`app delete`'s answer in one line: the commit, and what becomes of the app's objects."""
    fate = {"orphan": "left running (orphaned)", "background": "being deleted (background propagation)",
            "foreground": "being deleted (foreground propagation)"}.get(str(body.get("cascade")), "")
    where = f"pull request {body['pull']}" if body.get("pull") else f"commit {str(body.get('commit', ''))[:12]}"
    line = f"application {body.get('app')} removed from the config source ({where}); its objects: {fate}"
    if body.get("pull"):
        line += " once it merges, as its finalizer says"
    return line
