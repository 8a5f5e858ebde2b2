"""The functions a template may call: Go's builtins and a Sprig-like set, as `FUNCTIONS`."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from tidecd.base import limits
from tidecd.config.appset.gotemplate.values import MAX_OUTPUT, MISSING, Missing, TemplateError, go_type, to_text, truth


def _index(value: Any, *keys: Any) -> Any:
    for key in keys:
        if isinstance(value, Mapping):
            value = value.get(key, MISSING)
        elif isinstance(value, list | tuple | str):
            if not isinstance(key, int) or not 0 <= key < len(value):
                raise TemplateError(f"index out of range: {key}")
            value = value[key]
        elif value is None or isinstance(value, Missing):
            raise TemplateError("index of untyped nil")
        else:
            raise TemplateError(f"can't index item of type {go_type(value)}")
    return value


def _compare(a: Any, b: Any) -> tuple[Any, Any]:
    if isinstance(a, Missing) or isinstance(b, Missing):
        raise TemplateError("incompatible types for comparison (a missing value)")
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        return a, b
    if type(a) is not type(b):
        raise TemplateError(f"incompatible types for comparison: {go_type(a)} and {go_type(b)}")
    return a, b


def _eq(a: Any, *others: Any) -> bool:
    if not others:
        raise TemplateError("missing argument for comparison")
    for other in others:
        x, y = (a, other) if a is None or other is None else _compare(a, other)
        if x == y:
            return True
    return False


def _lt(a: Any, b: Any) -> bool:
    x, y = _compare(a, b)
    if not isinstance(x, int | float | str):
        raise TemplateError(f"invalid type for comparison: {go_type(x)}")
    return bool(x < y)


_VERB = re.compile(r"%([-+# 0]*)(\d*)(?:\.(\d+))?([vsdqtfxXgo%])")


def _printf(fmt: str, *args: Any) -> str:
    values = list(args)

    def one(match: re.Match[str]) -> str:
        flags, width, precision, verb = match.groups()
        if verb == "%":
            return "%"
        if not values:
            return f"%!{verb}(MISSING)"
        value = values.pop(0)
        if verb in "vst":
            text = to_text(value)
        elif verb == "q":
            text = json.dumps(to_text(value))
        elif verb in "dxXo" and isinstance(value, int | float) and not isinstance(value, bool):
            text = format(int(value), {"d": "d", "x": "x", "X": "X", "o": "o"}[verb])
        elif verb in "fg" and isinstance(value, int | float) and not isinstance(value, bool):
            text = format(float(value), f".{precision or 6}f" if verb == "f" else "g")
        else:
            text = f"%!{verb}({go_type(value)}={to_text(value)})"
        if width and len(width) <= 3:
            text = text.ljust(int(width)) if "-" in flags else text.rjust(int(width), "0" if "0" in flags else " ")
        return text

    out = _VERB.sub(one, fmt)
    if values:
        out += "%!(EXTRA " + ", ".join(to_text(v) for v in values) + ")"
    return out


def _string(value: Any) -> str:
    return value if isinstance(value, str) else to_text(value)


def _bounded(count: int) -> int:
    if not isinstance(count, int) or count < 0 or count > 10_000:
        raise TemplateError("count must be an integer between 0 and 10000")
    return count


def _trunc(count: int, text: Any) -> str:
    value = _string(text)
    return value[:count] if count >= 0 else value[count:]


def _default(fallback: Any, *value: Any) -> Any:
    return value[0] if value and _sprig_truth(value[0]) else fallback


def _sprig_truth(value: Any) -> bool:
    return truth(value)


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return int(value)
    try:
        return int(str(value).strip() or "0")
    except ValueError:
        return 0


def _number(value: Any) -> int | float:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else _to_int(value)


def _normalize(text: Any) -> str:
    """Argo CD's `normalize`: a DNS-1123 name from any text (lowercase, other characters become '-')."""
    value = re.sub(r"[^a-z0-9-.]", "-", _string(text).lower())
    return value[:253].strip("-.")


def _slugify(text: Any, max_size: int = 50, smart: bool = True) -> str:
    value = re.sub(r"[^a-z0-9-]+", "-", _string(text).lower()).strip("-")
    if len(value) > max_size:
        cut = value[:max_size]
        value = cut.rsplit("-", 1)[0] if smart and "-" in cut else cut
    return value.strip("-")


def _words(text: Any) -> list[str]:
    return [w for w in re.split(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])", _string(text)) if w]


def _b64dec(text: Any) -> str:
    try:
        return base64.b64decode(_string(text), validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError) as exc:
        raise TemplateError("b64dec: not base64") from exc


def _dict(*pairs: Any) -> dict[str, Any]:
    if len(pairs) % 2:
        raise TemplateError("dict: expected key/value pairs")
    return {_string(pairs[i]): pairs[i + 1] for i in range(0, len(pairs), 2)}


def _from_yaml(text: Any) -> Any:
    try:
        return limits.load_yaml(_string(text), "fromYaml")
    except (yaml.YAMLError, ValueError) as exc:
        raise TemplateError(f"fromYaml: {type(exc).__name__}") from exc


def _indent(count: int, text: Any) -> str:
    pad = " " * _bounded(count)
    return "\n".join(pad + line for line in _string(text).split("\n"))


def _plain(value: Any) -> Any:
    if isinstance(value, Missing):
        return None
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _len(value: Any) -> int:
    if isinstance(value, str | list | tuple | Mapping):
        return len(value)
    raise TemplateError(f"len of type {go_type(value)}")


def _slice(value: Any, *bounds: int) -> Any:
    if not isinstance(value, str | list | tuple):
        raise TemplateError(f"can't slice item of type {go_type(value)}")
    start = bounds[0] if bounds else 0
    end = bounds[1] if len(bounds) > 1 else len(value)
    if not 0 <= start <= end <= len(value):
        raise TemplateError(f"slice index out of range: {start}:{end}")
    return value[start:end]


FUNCTIONS: dict[str, Callable[..., Any]] = {
    # Go's builtins (and/or are evaluated lazily-enough in _and_or)
    "not": lambda v: not truth(v),
    "len": _len,
    "index": _index,
    "slice": _slice,
    "eq": _eq,
    "ne": lambda a, b: not _eq(a, b),
    "lt": _lt,
    "le": lambda a, b: _lt(a, b) or _eq(a, b),
    "gt": lambda a, b: _lt(b, a),
    "ge": lambda a, b: _lt(b, a) or _eq(a, b),
    "print": lambda *a: "".join(to_text(v) for v in a),
    "println": lambda *a: " ".join(to_text(v) for v in a) + "\n",
    "printf": _printf,
    # Sprig: strings
    "lower": lambda s: _string(s).lower(),
    "upper": lambda s: _string(s).upper(),
    "title": lambda s: " ".join(w[:1].upper() + w[1:] for w in _string(s).split(" ")),
    "trim": lambda s: _string(s).strip(),
    "trimAll": lambda cut, s: _string(s).strip(_string(cut)),
    "trimPrefix": lambda p, s: _string(s).removeprefix(_string(p)),
    "trimSuffix": lambda p, s: _string(s).removesuffix(_string(p)),
    "replace": lambda old, new, s: _string(s).replace(_string(old), _string(new)),
    "contains": lambda sub, s: _string(sub) in _string(s),
    "hasPrefix": lambda p, s: _string(s).startswith(_string(p)),
    "hasSuffix": lambda p, s: _string(s).endswith(_string(p)),
    "quote": lambda *a: " ".join(json.dumps(_string(v)) for v in a),
    "squote": lambda *a: " ".join(f"'{_string(v)}'" for v in a),
    "trunc": _trunc,
    "substr": lambda start, end, s: _string(s)[start:end if end >= 0 else None],
    "repeat": lambda n, s: _string(s) * _bounded(n) if len(_string(s)) * _bounded(n) <= MAX_OUTPUT else "",
    "nospace": lambda s: re.sub(r"\s+", "", _string(s)),
    "cat": lambda *a: " ".join(to_text(v) for v in a if v is not None and not isinstance(v, Missing)),
    "indent": _indent,
    "nindent": lambda n, s: "\n" + _indent(n, s),
    "kebabcase": lambda s: "-".join(w.lower() for w in _words(s)),
    "snakecase": lambda s: "_".join(w.lower() for w in _words(s)),
    "camelcase": lambda s: "".join(w[:1].upper() + w[1:] for w in _words(s)),
    "splitList": lambda sep, s: _string(s).split(_string(sep)) if _string(sep) else list(_string(s)),
    "join": lambda sep, items: _string(sep).join(to_text(v) for v in (items or [])),
    "toString": _string,
    "normalize": _normalize,
    "slugify": _slugify,
    # Sprig: defaults and logic
    "default": _default,
    "empty": lambda v: not truth(v),
    "coalesce": lambda *a: next((v for v in a if truth(v)), None),
    "ternary": lambda a, b, cond: a if truth(cond) else b,
    "required": lambda msg, v: v if truth(v) else (_ for _ in ()).throw(TemplateError(_string(msg))),
    # Sprig: numbers
    "int": _to_int,
    "atoi": _to_int,
    "add": lambda *a: sum(_number(v) for v in a),
    "sub": lambda a, b: _number(a) - _number(b),
    "mul": lambda a, b: _number(a) * _number(b),
    "div": lambda a, b: _to_int(a) // _to_int(b),
    "mod": lambda a, b: _to_int(a) % _to_int(b),
    "max": lambda *a: max(_number(v) for v in a),
    "min": lambda *a: min(_number(v) for v in a),
    # Sprig: lists and dicts
    "list": lambda *a: list(a),
    "first": lambda items: items[0] if items else None,
    "last": lambda items: items[-1] if items else None,
    "has": lambda needle, items: needle in (items or []),
    "uniq": lambda items: list(dict.fromkeys(items or [])),
    "dict": _dict,
    "keys": lambda *maps: sorted(k for m in maps for k in m),
    "hasKey": lambda m, k: isinstance(m, Mapping) and k in m,
    "get": lambda m, k: m.get(k, "") if isinstance(m, Mapping) else "",
    # Sprig: encodings
    "toJson": lambda v: json.dumps(_plain(v), separators=(",", ":"), sort_keys=True),
    "toPrettyJson": lambda v: json.dumps(_plain(v), indent=2, sort_keys=True),
    "toYaml": lambda v: yaml.safe_dump(_plain(v), sort_keys=True).rstrip("\n"),
    "fromYaml": _from_yaml,
    "b64enc": lambda s: base64.b64encode(_string(s).encode()).decode(),
    "b64dec": _b64dec,
    "sha256sum": lambda s: hashlib.sha256(_string(s).encode()).hexdigest(),
}
