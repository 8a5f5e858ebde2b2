"""The error type and bounds of ApplicationSet templates, and Go's `%v` of plain JSON data (the text of a
non-string parameter in fasttemplate's flat parameters, as Argo CD's generators write it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tidecd.base.errors import ConfigError

MAX_OUTPUT = 1024 * 1024  # one rendered string; the helper stops there


class TemplateError(ConfigError):
    """A template that cannot be parsed or executed."""


def to_text(value: Any) -> str:
    """Go's `%v` of plain data."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
    if isinstance(value, list | tuple):
        return "[" + " ".join(to_text(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{k}:{to_text(value[k])}" for k in sorted(value, key=str)) + "]"
    return str(value)
