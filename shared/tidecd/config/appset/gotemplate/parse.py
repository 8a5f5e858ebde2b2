"""Lexing and parsing a Go template into a small tree of text, actions and `if`/`range`/`with` blocks.

Anything outside the subset ApplicationSets use (`define`, `template`, `block`, `break`, `continue`) is
refused here, before anything runs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from tidecd.config.appset.gotemplate.values import MAX_DEPTH, MAX_TEMPLATE, TemplateError

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
class Token:
    kind: str
    text: str


def _tokens(source: str) -> list[Token]:
    out: list[Token] = []
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
            out[-1] = Token("var", out[-1].text + text)  # $x.a.b
            continue
        out.append(Token(kind, text))
    return out


# --------------------------------------------------------------------------------------------------
# Parsing into a small tree


@dataclass
class Pipeline:
    declare: tuple[str, ...]  # variables declared (`$x :=`) or assigned (`$x =`)
    assign: bool
    commands: list[list[Any]]  # each command: a list of operands (first may be a function name)


@dataclass
class Node:
    kind: str  # text | action | if | range | with
    text: str = ""
    pipe: Pipeline | None = None
    body: list[Node] = field(default_factory=list)
    orelse: list[Node] = field(default_factory=list)


@dataclass(frozen=True)
class Operand:
    kind: str  # field | var | string | number | bool | nil | ident | sub
    value: Any
    chain: tuple[str, ...] = ()


def _parse_pipeline(tokens: list[Token]) -> Pipeline:
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
    return Pipeline(tuple(declare), assign, commands)


def _operand(tokens: list[Token], i: int) -> tuple[Operand, int]:
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
        return Operand("sub", inner, chain), j
    if tok.kind == "field":
        return Operand("field", None, tuple(p for p in tok.text.split(".")[1:] if p)), i + 1
    if tok.kind == "var":
        name, _, rest = tok.text.partition(".")
        return Operand("var", name, tuple(rest.split(".")) if rest else ()), i + 1
    if tok.kind == "string":
        try:
            return Operand("string", json.loads(tok.text)), i + 1
        except json.JSONDecodeError as exc:
            raise TemplateError(f"bad string literal: {exc.msg}") from exc
    if tok.kind == "raw":
        return Operand("string", tok.text[1:-1]), i + 1
    if tok.kind == "char":
        return Operand("number", ord(json.loads('"' + tok.text[1:-1] + '"'))), i + 1
    if tok.kind == "number":
        return Operand("number", float(tok.text) if "." in tok.text else int(tok.text)), i + 1
    if tok.kind == "ident":
        if tok.text in ("true", "false"):
            return Operand("bool", tok.text == "true"), i + 1
        if tok.text == "nil":
            return Operand("nil", None), i + 1
        return Operand("ident", tok.text), i + 1
    raise TemplateError(f"unexpected {tok.text!r} in action")


_KEYWORDS = ("if", "range", "with", "else", "end", "define", "template", "block", "break", "continue")


def parse(source: str) -> list[Node]:
    """The template's tree; raises TemplateError for anything outside the supported subset."""
    if len(source) > MAX_TEMPLATE:
        raise TemplateError(f"template longer than {MAX_TEMPLATE} characters")
    root: list[Node] = []
    stack: list[tuple[Node, bool]] = []  # (block node, in its else part)
    pos = 0
    trim_next = False

    def target() -> list[Node]:
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
            target().append(Node("text", text))
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
            node = Node(head, pipe=_parse_pipeline(tokens[1:]))
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
                inner = Node(tokens[1].text, pipe=_parse_pipeline(tokens[2:]))
                node.orelse.append(inner)
                stack.append((inner, False))
                inner.text = "chained"
        elif head == "end":
            if not stack:
                raise TemplateError("unexpected {{end}}")
            while stack and stack.pop()[0].text == "chained":
                pass
        else:
            target().append(Node("action", pipe=_parse_pipeline(tokens)))
    tail = source[pos:]
    if trim_next:
        tail = tail.lstrip()
    if "{{" in tail:
        raise TemplateError("unclosed action: '{{' without '}}'")
    if tail:
        target().append(Node("text", tail))
    if stack:
        raise TemplateError(f"unexpected end of template: {{{{{stack[-1][0].kind}}}}} has no {{{{end}}}}")
    return root
