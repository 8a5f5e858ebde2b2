"""Tolerant readers for live-object fields, and the rollout verdict, shared by the per-kind checks.

Live objects are raw API JSON: a field may be absent (zero values are often omitted), so every reader
returns a default instead of raising.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from tidecd.base.model import HealthResult, HealthStatus, Manifest


def get(obj: Manifest, *path: str) -> object:
    """The value at `path` (dict keys), or None when any step is missing or not a mapping."""
    node: Any = obj
    for part in path:
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def integer(obj: Manifest, *path: str, default: int = 0) -> int:
    value = get(obj, *path)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def text(obj: Manifest, *path: str) -> str:
    value = get(obj, *path)
    return value if isinstance(value, str) else ""


def items(obj: Manifest, *path: str) -> list[dict[str, Any]]:
    """The mappings of the list at `path`; anything else reads as empty."""
    value = get(obj, *path)
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def condition(obj: Manifest, kind: str) -> dict[str, Any] | None:
    """The first `status.conditions` entry of type `kind`, if any."""
    return next((c for c in items(obj, "status", "conditions") if c.get("type") == kind), None)


def is_true(cond: dict[str, Any] | None) -> bool:
    return cond is not None and cond.get("status") == "True"


def is_false(cond: dict[str, Any] | None) -> bool:
    return cond is not None and cond.get("status") == "False"


def name(obj: Manifest) -> str:
    return text(obj, "metadata", "name")


def quote(value: str) -> str:
    """Double-quoted, as Kubernetes and Argo CD messages quote names (Go's %q)."""
    return json.dumps(value)


def rollout(wait: str, gaps: Iterable[tuple[bool, str]]) -> HealthResult:
    """A rollout's verdict, as `kubectl rollout status` gives it: the first open gap (checked in order) is
    Progressing with `wait: message`; with none open, Healthy."""
    for is_open, message in gaps:
        if is_open:
            return HealthResult(HealthStatus.PROGRESSING, f"{wait}: {message}")
    return HealthResult(HealthStatus.HEALTHY)
