"""Plain manifests: the `.yaml`, `.yml` and `.json` files of an app directory, as Argo CD reads them.

Files are visited in Argo CD's walk order (names sorted within each directory). `recurse` descends into
subdirectories; `include` and `exclude` are globs matched against the path relative to the app
directory, where `*` also crosses `/`, `{a,b}` means either (Argo CD's gobwas/glob syntax), and a bare
`a,b` list is read as `{a,b}`.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from tidecd.config import DirectorySpec
from tidecd.errors import RenderError
from tidecd.render.documents import Document, load_json, load_yaml

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
SKIPPED_DIRS = frozenset({".git"})


def render_directory(app_dir: Path, spec: DirectorySpec, *, label: str = "") -> list[Document]:
    """Every object in the app directory's manifest files; `label` prefixes file names in errors."""
    docs: list[Document] = []
    for rel in manifest_files(app_dir, spec):
        source = f"{label}/{rel}" if label and label != "." else rel
        text = _read(app_dir / rel, source)
        docs.extend(load_json(text, source) if rel.endswith(".json") else load_yaml(text, source))
    return docs


def manifest_files(app_dir: Path, spec: DirectorySpec) -> list[str]:
    """Relative POSIX paths of the files to read, in walk order."""
    include = compile_globs(spec.include)
    exclude = compile_globs(spec.exclude)
    out: list[str] = []
    for top, dirs, files in os.walk(app_dir, followlinks=False):
        dirs[:] = sorted(d for d in dirs if spec.recurse and d not in SKIPPED_DIRS)
        base = Path(top).relative_to(app_dir)
        for name in sorted(files):
            rel = (base / name).as_posix()
            if not name.endswith(MANIFEST_SUFFIXES) or not (app_dir / rel).is_file():
                continue
            if exclude is not None and exclude.fullmatch(rel):
                continue
            if include is not None and not include.fullmatch(rel):
                continue
            out.append(rel)
    return _walk_order(out)


def _walk_order(paths: list[str]) -> list[str]:
    """Order as a depth-first walk that sorts each directory's entries (files and dirs together)."""
    return sorted(paths, key=lambda p: p.split("/"))


def _read(path: Path, source: str) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise RenderError(f"{source}: not UTF-8 text (byte {exc.start})") from exc
    except OSError as exc:
        raise RenderError(f"{source}: cannot read: {exc.strerror}") from exc


@functools.lru_cache(maxsize=256)
def compile_globs(pattern: str) -> re.Pattern[str] | None:
    """A regex for an include/exclude pattern, or None when the pattern is empty (matches everything)."""
    pattern = pattern.strip()
    if not pattern:
        return None
    if _has_top_level_comma(pattern):
        pattern = "{" + pattern + "}"
    return re.compile(glob_to_regex(pattern), re.DOTALL)


def glob_to_regex(pattern: str) -> str:
    """gobwas/glob without separators: `*`/`**` any text, `?` one char, `[a-z]`/`[!a]` classes,
    `{a,b}` alternatives (nestable), `\\x` a literal x."""
    out: list[str] = []
    depth = 0
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        if char == "*":
            while i + 1 < len(pattern) and pattern[i + 1] == "*":
                i += 1
            out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "[":
            end = pattern.find("]", i + 2)
            if end == -1:
                out.append(re.escape(char))
            else:
                body = pattern[i + 1 : end]
                negate = body.startswith("!")
                body = body[1:] if negate else body
                body = body.replace("\\", "\\\\").replace("[", "\\[")
                out.append("[" + ("^" if negate else "") + body + "]")
                i = end
        elif char == "{":
            depth += 1
            out.append("(?:")
        elif char == "}" and depth:
            depth -= 1
            out.append(")")
        elif char == "," and depth:
            out.append("|")
        else:
            out.append(re.escape(char))
        i += 1
    if depth:
        raise RenderError(f"glob {pattern!r}: unclosed '{{'")
    return "".join(out)


def _has_top_level_comma(pattern: str) -> bool:
    depth = 0
    escaped = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            return True
    return False
