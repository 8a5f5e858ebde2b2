"""Imports inside functions in shared/tidecd, and whether each says why it is lazy (issue 22, typed edges).

    python scripts/lazy_imports.py            # lists every one, exits 1 if any lacks its comment
    python scripts/lazy_imports.py --missing  # only those without a comment

An import stays inside a function only when a cold start needs it there (a heavy module a trigger may not
need) or to break an import cycle, and then says so: a `# lazy: ...` comment on its line or on the line
above its group of imports. Every other import belongs at the top of its module. Imports under
`if TYPE_CHECKING:` are not inside a function and are not counted.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "shared" / "tidecd"
MARK = "# lazy:"


@dataclass(frozen=True)
class LazyImport:
    where: str
    text: str
    commented: bool


def _commented(lines: list[str], lineno: int) -> bool:
    """The import's own line, or the line above its group of imports, carries the mark."""
    if MARK in lines[lineno - 1]:
        return True
    above = lineno - 2
    while above >= 0 and lines[above].strip().startswith(("import ", "from ")):
        above -= 1
    return above >= 0 and lines[above].strip().startswith(MARK)


def lazy_imports(path: Path) -> list[LazyImport]:
    source = path.read_text()
    lines = source.splitlines()
    found: list[LazyImport] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, ast.Import | ast.ImportFrom):
                text = lines[child.lineno - 1].strip()
                found.append(LazyImport(f"{path.relative_to(LIB)}:{child.lineno}", text,
                                        _commented(lines, child.lineno)))
            visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))

    visit(ast.parse(source), False)
    return found


def main() -> int:
    only_missing = "--missing" in sys.argv[1:]
    found = [one for path in sorted(LIB.rglob("*.py")) for one in lazy_imports(path)]
    missing = [one for one in found if not one.commented]
    for one in missing if only_missing else found:
        print(f"{one.where}: {'lazy' if one.commented else 'NO COMMENT'}: {one.text}")
    print(f"{len(found)} imports inside functions, {len(missing)} without a `{MARK}` comment")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
