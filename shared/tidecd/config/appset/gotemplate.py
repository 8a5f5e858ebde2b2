"""A small, safe interpreter for the subset of Go's `text/template` that ApplicationSet templates use.

Argo CD renders ApplicationSet templates with Go's `text/template` plus Sprig's functions when
`goTemplate: true`. Jinja2 (already a dependency) was the first candidate to build on, but its scoping and
filters differ from Go's where it matters here (the dot is rebound by `range`/`with`, a pipeline passes its
value as the *last* argument, a missing key prints `<no value>` or fails with `missingkey=error`), so a
translation would be wrong in corner cases users hit. This module interprets the subset directly:

    {{ .path.basename }}  {{ index .path.segments 1 }}  {{ .name | upper }}  {{ printf "%s-%d" .a 3 }}
    {{ if eq .env "prod" }}..{{ else if .x }}..{{ else }}..{{ end }}   {{ range $i, $v := .list }}..{{ end }}
    {{ with .values }}..{{ end }}   {{ $x := .a }}   {{- trimmed -}}   {{/* comments */}}

Safe by construction: values are plain JSON data (dicts, lists, strings, numbers); there is no attribute
access on Python objects, no `define`/`template`/`block`, and every template is bounded (its length, the
output size, the number of loop iterations, nesting). Functions: Go's builtins (`and or not len index eq
ne lt le gt ge print printf println slice`) and a Sprig-like set listed in `FUNCTIONS`. Errors are
`TemplateError` with a short message; they never echo values of the data.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from tidecd.base.errors import ConfigError

MAX_TEMPLATE = 64 * 1024
MAX_OUTPUT = 1024 * 1024
MAX_ITERATIONS = 10_000
MAX_DEPTH = 40
NO_VALUE = "<no value>"


class TemplateError(ConfigError):
    """A template that cannot be parsed or executed."""


# --------------------------------------------------------------------------------------------------
# Lexing: text and actions

_ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.DOTALL)
_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<raw>`[^`]*`)
  | (?P<char>'(?:[^'\\]|\\.)')
  | (?P<number>-?\d+(?:\.\d+)?)
  | (?P<declare>:=)
  | (?P<assign>=)
  | (?P<field>(?:\.[A-Za-z_][A-Za-z0-9_]*)+|\.)
  | (?P<var>\$[A-Za-z0-9_]*)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>[|(),])
""", re.VERBOSE)


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str


def _tokens(source: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    while pos < len(source):
        match = _TOKEN.match(source, pos)
        if match is None:
            raise TemplateError(f"unexpected character {source[pos]!r} in action")
        kind = match.lastgroup or ""
        text = match.group()
        pos = match.end()
        if kind == "space":
            continue
        after_paren = out and out[-1].text == ")" and source[match.start() - 1] == ")"
        if kind == "field" and after_paren:
            kind = "chain"  # (pipeline).field
        elif kind == "field" and out and out[-1].kind == "var" and source[match.start() - 1] != " ":
            out[-1] = _Tok("var", out[-1].text + text)  # $x.a.b
            continue
        out.append(_Tok(kind, text))
    return out


# --------------------------------------------------------------------------------------------------
# Parsing into a small tree


@dataclass
class _Pipeline:
    declare: tuple[str, ...]  # variables declared (`$x :=`) or assigned (`$x =`)
    assign: bool
    commands: list[list[Any]]  # each command: a list of operands (first may be a function name)


@dataclass
class _Node:
    kind: str  # text | action | if | range | with
    text: str = ""
    pipe: _Pipeline | None = None
    body: list[_Node] = field(default_factory=list)
    orelse: list[_Node] = field(default_factory=list)


@dataclass(frozen=True)
class _Operand:
    kind: str  # field | var | string | number | bool | nil | ident | sub
    value: Any
    chain: tuple[str, ...] = ()


def _parse_pipeline(tokens: list[_Tok]) -> _Pipeline:
    declare: list[str] = []
    assign = False
    if tokens and tokens[0].kind == "var":
        names, i = [tokens[0].text], 1
        if len(tokens) > 2 and tokens[1].text == "," and tokens[2].kind == "var":
            names, i = [tokens[0].text, tokens[2].text], 3
        if i < len(tokens) and tokens[i].kind in ("declare", "assign"):
            declare, assign, tokens = names, tokens[i].kind == "assign", tokens[i + 1 :]
    commands: list[list[Any]] = [[]]
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.text == "|" and tok.kind == "punct":
            if not commands[-1]:
                raise TemplateError("missing command before '|'")
            commands.append([])
            i += 1
            continue
        operand, i = _operand(tokens, i)
        commands[-1].append(operand)
    if not commands[-1]:
        raise TemplateError("missing value for command")
    return _Pipeline(tuple(declare), assign, commands)


def _operand(tokens: list[_Tok], i: int) -> tuple[_Operand, int]:
    tok = tokens[i]
    if tok.kind == "punct" and tok.text == "(":
        depth, j = 1, i + 1
        while j < len(tokens) and depth:
            if tokens[j].kind == "punct" and tokens[j].text in "()":
                depth += 1 if tokens[j].text == "(" else -1
            j += 1
        if depth:
            raise TemplateError("unclosed '('")
        inner = _parse_pipeline(tokens[i + 1 : j - 1])
        chain: tuple[str, ...] = ()
        if j < len(tokens) and tokens[j].kind == "chain":
            chain = tuple(tokens[j].text.split(".")[1:])
            j += 1
        return _Operand("sub", inner, chain), j
    if tok.kind == "field":
        return _Operand("field", None, tuple(p for p in tok.text.split(".")[1:] if p)), i + 1
    if tok.kind == "var":
        name, _, rest = tok.text.partition(".")
        return _Operand("var", name, tuple(rest.split(".")) if rest else ()), i + 1
    if tok.kind == "string":
        try:
            return _Operand("string", json.loads(tok.text)), i + 1
        except json.JSONDecodeError as exc:
            raise TemplateError(f"bad string literal: {exc.msg}") from exc
    if tok.kind == "raw":
        return _Operand("string", tok.text[1:-1]), i + 1
    if tok.kind == "char":
        return _Operand("number", ord(json.loads('"' + tok.text[1:-1] + '"'))), i + 1
    if tok.kind == "number":
        return _Operand("number", float(tok.text) if "." in tok.text else int(tok.text)), i + 1
    if tok.kind == "ident":
        if tok.text in ("true", "false"):
            return _Operand("bool", tok.text == "true"), i + 1
        if tok.text == "nil":
            return _Operand("nil", None), i + 1
        return _Operand("ident", tok.text), i + 1
    raise TemplateError(f"unexpected {tok.text!r} in action")


_KEYWORDS = ("if", "range", "with", "else", "end", "define", "template", "block", "break", "continue")


def parse(source: str) -> list[_Node]:
    """The template's tree; raises TemplateError for anything outside the supported subset."""
    if len(source) > MAX_TEMPLATE:
        raise TemplateError(f"template longer than {MAX_TEMPLATE} characters")
    root: list[_Node] = []
    stack: list[tuple[_Node, bool]] = []  # (block node, in its else part)
    pos = 0
    trim_next = False

    def target() -> list[_Node]:
        if not stack:
            return root
        node, in_else = stack[-1]
        return node.orelse if in_else else node.body

    for match in _ACTION.finditer(source):
        text = source[pos : match.start()]
        if trim_next:
            text = text.lstrip()
        if match.group(1):
            text = text.rstrip()
        if text:
            target().append(_Node("text", text))
        pos, trim_next = match.end(), bool(match.group(3))
        body = match.group(2).strip()
        if body.startswith("/*"):
            if not body.endswith("*/"):
                raise TemplateError("unclosed comment")
            continue
        tokens = _tokens(body)
        if not tokens:
            raise TemplateError("empty action {{}}")
        head = tokens[0].text if tokens[0].kind == "ident" else ""
        if head in ("define", "template", "block", "break", "continue"):
            raise TemplateError(f"{{{{{head}}}}} is not supported in ApplicationSet templates")
        if head in ("if", "range", "with"):
            if len(stack) >= MAX_DEPTH:
                raise TemplateError("templates nested too deeply")
            node = _Node(head, pipe=_parse_pipeline(tokens[1:]))
            target().append(node)
            stack.append((node, False))
        elif head == "else":
            if not stack or stack[-1][1]:
                raise TemplateError("unexpected {{else}}")
            node, _ = stack.pop()
            stack.append((node, True))
            if len(tokens) > 1:  # else if / else with: a nested block sharing the outer {{end}}
                if tokens[1].text not in ("if", "with"):
                    raise TemplateError("expected {{else}}, {{else if ...}} or {{else with ...}}")
                inner = _Node(tokens[1].text, pipe=_parse_pipeline(tokens[2:]))
                node.orelse.append(inner)
                stack.append((inner, False))
                inner.text = "chained"
        elif head == "end":
            if not stack:
                raise TemplateError("unexpected {{end}}")
            while stack and stack.pop()[0].text == "chained":
                pass
        else:
            target().append(_Node("action", pipe=_parse_pipeline(tokens)))
    tail = source[pos:]
    if trim_next:
        tail = tail.lstrip()
    if "{{" in tail:
        raise TemplateError("unclosed action: '{{' without '}}'")
    if tail:
        target().append(_Node("text", tail))
    if stack:
        raise TemplateError(f"unexpected end of template: {{{{{stack[-1][0].kind}}}}} has no {{{{end}}}}")
    return root


# --------------------------------------------------------------------------------------------------
# Execution


@dataclass
class _Run:
    funcs: Mapping[str, Callable[..., Any]]
    missing: str  # "default" | "zero" | "error"
    out: list[str] = field(default_factory=list)
    size: int = 0
    iterations: int = 0

    def write(self, text: str) -> None:
        self.size += len(text)
        if self.size > MAX_OUTPUT:
            raise TemplateError(f"template output larger than {MAX_OUTPUT} characters")
        self.out.append(text)


class _Missing:
    """A missing map key under the default `missingkey` option: prints `<no value>`, is false."""

    def __bool__(self) -> bool:
        return False

    def __str__(self) -> str:
        return NO_VALUE


MISSING = _Missing()


def _lookup(value: Any, chain: Sequence[str], run: _Run, what: str) -> Any:
    for name in chain:
        if isinstance(value, Mapping):
            if name in value:
                value = value[name]
            elif run.missing == "error":
                raise TemplateError(f"map has no entry for key {name!r} ({what})")
            else:
                value = "" if run.missing == "zero" else MISSING
        elif value is None or isinstance(value, _Missing):
            if run.missing == "error":
                raise TemplateError(f"nil pointer evaluating {what}")
            value = MISSING
        else:
            raise TemplateError(f"can't evaluate field {name} in type {_go_type(value)} ({what})")
    return value


def _go_type(value: Any) -> str:
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
    if isinstance(value, _Missing) or value is None:
        return False
    if isinstance(value, bool | int | float | str | list | tuple | dict):
        return bool(value)
    return True


def to_text(value: Any) -> str:
    """Go's `%v` of plain data."""
    if value is None:
        return "<nil>"
    if isinstance(value, _Missing):
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


def _eval_operand(op: _Operand, dot: Any, scope: list[dict[str, Any]], run: _Run, final: Any,
                  has_final: bool, args: list[Any] | None = None) -> Any:
    if op.kind == "field":
        return _lookup(dot, op.chain, run, "." + ".".join(op.chain))
    if op.kind == "var":
        for frame in reversed(scope):
            if op.value in frame:
                return _lookup(frame[op.value], op.chain, run, op.value)
        raise TemplateError(f"undefined variable {op.value}")
    if op.kind == "sub":
        return _lookup(_eval_pipeline(op.value, dot, scope, run), op.chain, run, "(...)")
    if op.kind == "ident":
        return _call(op.value, [], run) if args is None else None
    return op.value


def _call(name: str, args: list[Any], run: _Run) -> Any:
    func = run.funcs.get(name)
    if func is None:
        raise TemplateError(f'function "{name}" not defined')
    try:
        return func(*args)
    except TemplateError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError, OverflowError) as exc:
        raise TemplateError(f"error calling {name}: {type(exc).__name__}: {str(exc)[:120]}") from exc


def _eval_command(command: list[_Operand], dot: Any, scope: list[dict[str, Any]], run: _Run,
                  final: Any, has_final: bool) -> Any:
    head = command[0]
    if head.kind == "ident":
        args = [_eval_operand(a, dot, scope, run, None, False) for a in command[1:]]
        if has_final:
            args.append(final)
        if head.value in ("and", "or"):
            return _and_or(head.value, args)
        return _call(head.value, args, run)
    if len(command) > 1 or has_final:
        raise TemplateError("can't give arguments to a non-function value")
    return _eval_operand(head, dot, scope, run, None, False)


def _and_or(name: str, args: list[Any]) -> Any:
    if not args:
        raise TemplateError(f"wrong number of args for {name}: want at least 1 got 0")
    for arg in args[:-1]:
        if truth(arg) != (name == "and"):
            return arg
    return args[-1]


def _eval_pipeline(pipe: _Pipeline, dot: Any, scope: list[dict[str, Any]], run: _Run) -> Any:
    value: Any = None
    for index, command in enumerate(pipe.commands):
        value = _eval_command(command, dot, scope, run, value, index > 0)
    if pipe.declare:
        if pipe.assign:
            for frame in reversed(scope):
                if pipe.declare[0] in frame:
                    frame[pipe.declare[0]] = value
                    break
            else:
                raise TemplateError(f"undefined variable {pipe.declare[0]}")
        else:
            scope[-1][pipe.declare[-1]] = value
    return value


def _execute(nodes: list[_Node], dot: Any, scope: list[dict[str, Any]], run: _Run) -> None:
    for node in nodes:
        if node.kind == "text":
            run.write(node.text)
        elif node.kind == "action":
            assert node.pipe is not None
            value = _eval_pipeline(node.pipe, dot, scope, run)
            if not node.pipe.declare:
                run.write(to_text(value))
        elif node.kind in ("if", "with"):
            assert node.pipe is not None
            scope.append({})
            value = _eval_pipeline(node.pipe, dot, scope, run)
            if truth(value):
                _execute(node.body, value if node.kind == "with" else dot, scope, run)
            else:
                _execute(node.orelse, dot, scope, run)
            scope.pop()
        elif node.kind == "range":
            _range(node, dot, scope, run)


def _range(node: _Node, dot: Any, scope: list[dict[str, Any]], run: _Run) -> None:
    assert node.pipe is not None
    names = node.pipe.declare
    pipe = _Pipeline((), False, node.pipe.commands)
    value = _eval_pipeline(pipe, dot, scope, run)
    if isinstance(value, Mapping):
        items: list[tuple[Any, Any]] = [(k, value[k]) for k in sorted(value, key=str)]
    elif isinstance(value, list | tuple):
        items = list(enumerate(value))
    elif isinstance(value, int) and not isinstance(value, bool):
        items = [(i, i) for i in range(max(0, min(value, MAX_ITERATIONS + 1)))]
    elif value is None or isinstance(value, _Missing):
        items = []
    else:
        raise TemplateError(f"range can't iterate over {_go_type(value)}")
    if not items:
        _execute(node.orelse, dot, scope, run)
        return
    for key, item in items:
        run.iterations += 1
        if run.iterations > MAX_ITERATIONS:
            raise TemplateError(f"more than {MAX_ITERATIONS} loop iterations")
        frame: dict[str, Any] = {}
        if len(names) == 2:
            frame[names[0]], frame[names[1]] = key, item
        elif len(names) == 1:
            frame[names[0]] = item
        scope.append(frame)
        _execute(node.body, item, scope, run)
        scope.pop()


def render(source: str, data: Any, *, options: Sequence[str] = ()) -> str:
    """Execute `source` with `data` as the dot; `options` are `goTemplateOptions` (`missingkey=...`)."""
    missing = "default"
    for option in options:
        name, _, value = option.partition("=")
        if name != "missingkey" or value not in ("default", "invalid", "zero", "error"):
            raise TemplateError(f"unsupported goTemplateOptions entry {option!r} (known: missingkey=default|"
                                "invalid|zero|error)")
        missing = "default" if value == "invalid" else value
    run = _Run(FUNCTIONS, missing)
    _execute(parse(source), data, [{"$": data}], run)
    return "".join(run.out)


# --------------------------------------------------------------------------------------------------
# Functions: Go's builtins and a Sprig-like set


def _index(value: Any, *keys: Any) -> Any:
    for key in keys:
        if isinstance(value, Mapping):
            value = value.get(key, MISSING)
        elif isinstance(value, list | tuple | str):
            if not isinstance(key, int) or not 0 <= key < len(value):
                raise TemplateError(f"index out of range: {key}")
            value = value[key]
        elif value is None or isinstance(value, _Missing):
            raise TemplateError("index of untyped nil")
        else:
            raise TemplateError(f"can't index item of type {_go_type(value)}")
    return value


def _compare(a: Any, b: Any) -> tuple[Any, Any]:
    if isinstance(a, _Missing) or isinstance(b, _Missing):
        raise TemplateError("incompatible types for comparison (a missing value)")
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        return a, b
    if type(a) is not type(b):
        raise TemplateError(f"incompatible types for comparison: {_go_type(a)} and {_go_type(b)}")
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
        raise TemplateError(f"invalid type for comparison: {_go_type(x)}")
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
            text = f"%!{verb}({_go_type(value)}={to_text(value)})"
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
    from tidecd.base import limits

    try:
        limits.check_yaml(_string(text), "fromYaml")
        return yaml.load(_string(text), Loader=limits.SafeLoader)  # noqa: S506 - a SafeLoader subclass
    except (yaml.YAMLError, ValueError) as exc:
        raise TemplateError(f"fromYaml: {type(exc).__name__}") from exc


def _indent(count: int, text: Any) -> str:
    pad = " " * _bounded(count)
    return "\n".join(pad + line for line in _string(text).split("\n"))


def _plain(value: Any) -> Any:
    if isinstance(value, _Missing):
        return None
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _len(value: Any) -> int:
    if isinstance(value, str | list | tuple | Mapping):
        return len(value)
    raise TemplateError(f"len of type {_go_type(value)}")


def _slice(value: Any, *bounds: int) -> Any:
    if not isinstance(value, str | list | tuple):
        raise TemplateError(f"can't slice item of type {_go_type(value)}")
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
    "cat": lambda *a: " ".join(to_text(v) for v in a if v is not None and not isinstance(v, _Missing)),
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
