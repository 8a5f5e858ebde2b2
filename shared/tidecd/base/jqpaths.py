"""`ignoreDifferences[].jqPathExpressions`: jq paths removed from an object, as Argo CD removes them.

Argo CD's normalizer runs `del(<expression>)` on the object with gojq; we run the same program with the
`jq` package (libjq). An expression is compiled once (and checked at config load time, so a typo names the
field); evaluation errors on one object leave that object unchanged, as Argo CD logs and moves on.
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

MAX_EXPRESSION = 2000
_J = TypeVar("_J")  # a JSON value: paths are deleted from it, its kind stays


@functools.lru_cache(maxsize=256)
def compile_path(expression: str) -> Any:
    """The compiled `del(expression)` program; ValueError for an expression jq cannot compile."""
    # lazy: cold start (jq only for a jq path)
    import jq

    if not expression.strip():
        raise ValueError("empty jq path expression")
    if len(expression) > MAX_EXPRESSION:
        raise ValueError(f"jq path expression longer than {MAX_EXPRESSION} characters")
    try:
        return jq.compile(f"del({expression})")
    except ValueError as exc:
        raise ValueError(f"invalid jq path expression {expression!r}: {_first_line(exc)}") from None


def delete_paths(obj: _J, expressions: tuple[str, ...]) -> _J:
    """`obj` with every path the expressions select removed (a new object; `obj` is not changed)."""
    for expression in expressions:
        try:
            result = compile_path(expression).input_value(obj).all()
        except ValueError:
            continue  # e.g. an index into a value of another type: nothing to remove here
        if len(result) == 1:
            obj = result[0]
    return obj


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
