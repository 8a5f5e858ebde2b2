"""Executing a parsed Go template: the dot, the variable scopes, pipelines and the `missingkey` option."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidecd.config.appset.gotemplate.functions import FUNCTIONS
from tidecd.config.appset.gotemplate.parse import Node, Operand, Pipeline, parse
from tidecd.config.appset.gotemplate.values import (
    MAX_ITERATIONS,
    MAX_OUTPUT,
    MISSING,
    Missing,
    TemplateError,
    go_type,
    to_text,
    truth,
)


@dataclass
class Run:
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



def _lookup(value: Any, chain: Sequence[str], run: Run, what: str) -> Any:
    for name in chain:
        if isinstance(value, Mapping):
            if name in value:
                value = value[name]
            elif run.missing == "error":
                raise TemplateError(f"map has no entry for key {name!r} ({what})")
            else:
                value = "" if run.missing == "zero" else MISSING
        elif value is None or isinstance(value, Missing):
            if run.missing == "error":
                raise TemplateError(f"nil pointer evaluating {what}")
            value = MISSING
        else:
            raise TemplateError(f"can't evaluate field {name} in type {go_type(value)} ({what})")
    return value


def _eval_operand(op: Operand, dot: Any, scope: list[dict[str, Any]], run: Run, final: Any,
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


def _call(name: str, args: list[Any], run: Run) -> Any:
    func = run.funcs.get(name)
    if func is None:
        raise TemplateError(f'function "{name}" not defined')
    try:
        return func(*args)
    except TemplateError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError, OverflowError) as exc:
        raise TemplateError(f"error calling {name}: {type(exc).__name__}: {str(exc)[:120]}") from exc


def _eval_command(command: list[Operand], dot: Any, scope: list[dict[str, Any]], run: Run,
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


def _eval_pipeline(pipe: Pipeline, dot: Any, scope: list[dict[str, Any]], run: Run) -> Any:
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


def _execute(nodes: list[Node], dot: Any, scope: list[dict[str, Any]], run: Run) -> None:
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


def _range(node: Node, dot: Any, scope: list[dict[str, Any]], run: Run) -> None:
    assert node.pipe is not None
    names = node.pipe.declare
    pipe = Pipeline((), False, node.pipe.commands)
    value = _eval_pipeline(pipe, dot, scope, run)
    if isinstance(value, Mapping):
        items: list[tuple[Any, Any]] = [(k, value[k]) for k in sorted(value, key=str)]
    elif isinstance(value, list | tuple):
        items = list(enumerate(value))
    elif isinstance(value, int) and not isinstance(value, bool):
        items = [(i, i) for i in range(max(0, min(value, MAX_ITERATIONS + 1)))]
    elif value is None or isinstance(value, Missing):
        items = []
    else:
        raise TemplateError(f"range can't iterate over {go_type(value)}")
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
    run = Run(FUNCTIONS, missing)
    _execute(parse(source), data, [{"$": data}], run)
    return "".join(run.out)
