"""The stored unified diff of one object, shaped for the page: unified lines or side-by-side rows.

The diff module masks Secret values before a diff is stored; `lines` masks Secret values once more (a
value under `data:` or `stringData:` becomes a fixed mask), so a page never shows one even if a future
writer forgot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tidecd.clients.secrets import MASK

MAX_LINES = 4000
_SECRET_BLOCK = re.compile(r"^(?P<indent>\s*)(data|stringData):\s*$")
_ENTRY = re.compile(r"^(?P<indent>\s+)(?P<name>[^:\s][^:]*):(?P<value>.*)$")


@dataclass(frozen=True)
class Line:
    kind: str  # "add", "del", "ctx", "hunk", "file"
    text: str


@dataclass(frozen=True)
class Row:
    left: Line | None
    right: Line | None


def lines(diff: str, *, secret: bool = False) -> list[Line]:
    out: list[Line] = []
    block_indent: int | None = None
    for raw in diff.splitlines()[:MAX_LINES]:
        if raw.startswith(("+++", "---")):
            out.append(Line("file", raw))
            continue
        if raw.startswith("@@"):
            out.append(Line("hunk", raw))
            continue
        mark, body = (raw[:1], raw[1:]) if raw[:1] in ("+", "-", " ") else (" ", raw)
        if secret:
            body, block_indent = _mask(body, block_indent)
        out.append(Line({"+": "add", "-": "del"}.get(mark, "ctx"), body))
    if len(diff.splitlines()) > MAX_LINES:
        out.append(Line("hunk", f"… diff cut at {MAX_LINES} lines"))
    return out


def _mask(body: str, block_indent: int | None) -> tuple[str, int | None]:
    """Replace values inside a Secret's data/stringData block; returns the line and the block state."""
    if (match := _SECRET_BLOCK.match(body)) is not None:
        return body, len(match.group("indent"))
    entry = _ENTRY.match(body)
    if block_indent is not None and entry and len(entry.group("indent")) > block_indent:
        return f"{entry.group('indent')}{entry.group('name')}: {MASK}", block_indent
    if block_indent is not None and body.strip() and len(body) - len(body.lstrip()) <= block_indent:
        block_indent = None
    elif block_indent is not None and body.strip():
        return f"{body[: len(body) - len(body.lstrip())]}{MASK}", block_indent  # a folded value's line
    return body, block_indent


def side_by_side(items: list[Line]) -> list[Row]:
    """Deleted lines on the left, added on the right, paired in order within each run of changes."""
    rows: list[Row] = []
    dels: list[Line] = []
    adds: list[Line] = []

    def flush() -> None:
        for index in range(max(len(dels), len(adds))):
            rows.append(Row(dels[index] if index < len(dels) else None, adds[index] if index < len(adds) else None))
        dels.clear()
        adds.clear()

    for line in items:
        if line.kind == "del":
            if adds:
                flush()
            dels.append(line)
        elif line.kind == "add":
            adds.append(line)
        else:
            flush()
            if line.kind != "file":
                rows.append(Row(line, line))
    flush()
    return rows
