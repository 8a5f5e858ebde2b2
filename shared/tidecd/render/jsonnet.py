"""`.jsonnet` files of a directory source, evaluated as Argo CD evaluates them (`directory.jsonnet`).

Each `.jsonnet` file among the directory's manifest files (same walk order, recurse, include and
exclude) is evaluated with the PyPI `jsonnet` package, with the app's top-level arguments (`tlas`) and
external variables (`extVars`), each a string or, with `code: true`, jsonnet code; Argo CD's build
environment (`render.buildenv`) is substituted in every value first, code included, as Argo CD's
`makeJsonnetVM` does. `libs` are library
directories relative to the repository root, searched after the importing file's own directory, as
go-jsonnet's FileImporter does. Every import is resolved inside the checkout: an absolute path, `..`
leaving it, or a symlink pointing out is an error naming the file. The result must be an object (a
`kind: List` is expanded) or an array of objects.

Evaluation runs in a child process (`render.tool.run_child`) within the render's limits: what is left of
`TIDECD_MAX_RENDER_SECONDS` for the whole render, `TIDECD_MAX_RENDER_MEMORY_BYTES` of memory and
`TIDECD_MAX_RENDER_OUTPUT_BYTES` of output, so a hostile or runaway program (jsonnet is Turing-complete)
costs bounded time and memory, cannot take the function down with it, and is refused with a
LimitExceeded naming the variable (stored with the render's input: not evaluated again on every trigger).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidecd.base.errors import RenderError
from tidecd.config.load import JsonnetSpec, JsonnetVar
from tidecd.render.buildenv import BuildEnv
from tidecd.render.tool import run_child

JSONNET_SUFFIX = ".jsonnet"
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the directory holding the `tidecd` package


def render_jsonnet(checkout: Path, app_dir: Path, rel: str, spec: JsonnetSpec, *, source: str,
                   build_env: BuildEnv | None = None) -> list[Any]:
    """The objects one `.jsonnet` file (at `rel` under `app_dir`) evaluates to, with `build_env`
    substituted in the tlas and extVars values."""
    env = build_env or BuildEnv()

    def values(items: tuple[JsonnetVar, ...]) -> list[list[Any]]:
        return [[v.name, env.subst(v.value), v.code] for v in items]

    request = {
        "root": str(checkout.resolve()),
        "file": str((app_dir / rel).resolve()),
        "libs": [str((checkout.resolve() / lib).resolve()) for lib in spec.libs],
        "tlas": values(spec.tlas),
        "ext_vars": values(spec.ext_vars),
    }
    done = run_child(
        [sys.executable, "-c", "import sys; from tidecd.render.jsonnet import _child; sys.exit(_child())"],
        what=f"{source} (jsonnet)", stdin=json.dumps(request),
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": _PACKAGE_ROOT},
    )
    if done.returncode != 0:
        message = done.stderr.strip() or f"exit status {done.returncode}"
        if done.returncode < 0:
            message = f"jsonnet evaluation stopped by signal {-done.returncode}"
        raise RenderError(f"{source}: {_strip(message, checkout)}")
    value = json.loads(done.stdout)
    items = value if isinstance(value, list) else [value]
    for index, item in enumerate(items, 1):
        if not isinstance(item, dict):
            raise RenderError(f"{source}: jsonnet output item {index} is not an object")
    return items


def _strip(message: str, checkout: Path) -> str:
    root = str(checkout.resolve())
    message = message.replace(root + "/", "").replace(root, ".")
    return message if len(message) <= 2000 else message[:2000] + "..."


# --- the child process --------------------------------------------------------------------------------


def _inside(root: Path, candidate: Path) -> bool:
    return candidate == root or root in candidate.parents


def _importer(root: Path, libs: list[Path]) -> Callable[[str, str], tuple[str, bytes]]:
    def import_callback(base: str, rel: str) -> tuple[str, bytes]:
        if os.path.isabs(rel):
            raise RuntimeError(f"import {rel!r}: absolute imports are not allowed")
        for directory in [Path(base), *libs]:
            candidate = (directory / rel).resolve()
            if not _inside(root, candidate):
                raise RuntimeError(f"import {rel!r} leaves the repository checkout")
            if candidate.is_file():
                return str(candidate), candidate.read_bytes()
        raise RuntimeError(f"import {rel!r}: file not found")

    return import_callback


def _child() -> int:
    # lazy: cold start (the jsonnet extension only in the render child process)
    import _jsonnet

    request = json.loads(sys.stdin.read())
    root = Path(request["root"])
    libs = [Path(p) for p in request["libs"]]
    if not all(_inside(root, lib) for lib in libs):
        print("spec.source.directory.jsonnet.libs: a library directory leaves the checkout", file=sys.stderr)
        return 2

    def split(items: list[list[Any]]) -> tuple[dict[str, str], dict[str, str]]:
        return ({n: v for n, v, code in items if not code}, {n: v for n, v, code in items if code})

    tla_vars, tla_codes = split(request["tlas"])
    ext_vars, ext_codes = split(request["ext_vars"])
    try:
        out = _jsonnet.evaluate_file(
            request["file"], import_callback=_importer(root, libs),
            tla_vars=tla_vars, tla_codes=tla_codes, ext_vars=ext_vars, ext_codes=ext_codes, max_stack=500,
        )
    except RuntimeError as exc:
        print(str(exc).strip(), file=sys.stderr)
        return 1
    sys.stdout.write(out)
    return 0

