"""The CLI's exit codes and the answer a command ends with, shared by the thin client and the full CLI
(standard library only: a `--server` call loads it before anything else)."""

from __future__ import annotations

from typing import Any

from tidecd.base.errors import PermanentError

EXIT_FAILED = 1  # out of sync (diff), the operation failed, or it timed out
EXIT_NOT_FOUND = 2  # no such app (404), or the request was refused; click's usage errors are 2 as well
EXIT_CONFLICT = 3  # an operation already runs (409)
EXIT_UNREACHABLE = 4  # cannot connect to the api, or it could not reach what it depends on (502/503/504)
EXIT_APP_ERROR = 5  # the app fails to compare: sync or health Unknown with an ...Error condition


class Failed(PermanentError):
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
