"""The values a Go template works with: plain JSON data, Go's notion of truth and its `%v` text, the one
error type and the bounds every template obeys. The parser, the executor and the functions share these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tidecd.base.errors import ConfigError

MAX_TEMPLATE = 64 * 1024
MAX_OUTPUT = 1024 * 1024
MAX_ITERATIONS = 10_000
MAX_DEPTH = 40
NO_VALUE = "<no value>"


class TemplateError(ConfigError):
    """A template that cannot be parsed or executed."""


class Missing:
    """A missing map key under the default `missingkey` option: prints `<no value>`, is false."""

    def __bool__(self) -> bool:
        return False

    def __str__(self) -> str:
        return NO_VALUE


MISSING = Missing()


def go_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "[]interface {}"
    return "interface {}"


def truth(value: Any) -> bool:
    if isinstance(value, Missing) or value is None:
        return False
    if isinstance(value, bool | int | float | str | list | tuple | dict):
        return bool(value)
    return True


def to_text(value: Any) -> str:
    """Go's `%v` of plain data."""
    if value is None:
        return "<nil>"
    if isinstance(value, Missing):
        return NO_VALUE
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
    if isinstance(value, list | tuple):
        return "[" + " ".join(to_text(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{k}:{to_text(value[k])}" for k in sorted(value, key=str)) + "]"
    return str(value)
