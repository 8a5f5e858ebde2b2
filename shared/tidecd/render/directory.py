"""Plain manifests: the `.yaml`, `.yml` and `.json` files of an app directory, as Argo CD reads them.

Files are visited in Argo CD's walk order (names sorted within each directory). `recurse` descends into
subdirectories; `include` and `exclude` are globs matched against the path relative to the app
directory, where `*` also crosses `/`, `{a,b}` means either (Argo CD's gobwas/glob syntax), and a bare
`a,b` list is read as `{a,b}`. `.jsonnet` files are evaluated (see `tidecd.render.jsonnet`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tidecd.base import limits
from tidecd.base.errors import RenderError
from tidecd.base.globs import compile_glob
from tidecd.config.load import DirectorySpec
from tidecd.render.buildenv import BuildEnv
from tidecd.render.documents import Document, expand_lists, load_json, load_yaml
from tidecd.render.jsonnet import JSONNET_SUFFIX, render_jsonnet
from tidecd.render.tool import seconds_left

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json", JSONNET_SUFFIX)
SKIPPED_DIRS = frozenset({".git"})


def render_directory(app_dir: Path, spec: DirectorySpec, *, label: str = "",
                     checkout: Path | None = None, build_env: BuildEnv | None = None) -> list[Document]:
    """Every object in the app directory's manifest files; `label` prefixes file names in errors.
    `checkout` (the repository root; default the app directory) bounds jsonnet imports and libs;
    `build_env` is substituted in jsonnet's tlas and extVars (plain files are read as they are)."""
    docs: list[Document] = []
    for rel in manifest_files(app_dir, spec):
        source = f"{label}/{rel}" if label and label != "." else rel
        seconds_left(source)  # the render's time limit, checked between files (a jsonnet file is a child)
        if rel.endswith(JSONNET_SUFFIX):
            items = render_jsonnet(checkout or app_dir, app_dir, rel, spec.jsonnet, source=source,
                                   build_env=build_env)
            for index, item in enumerate(items, 1):
                docs.extend(expand_lists(Document(f"{source} (jsonnet) item {index}", item)))
            continue
        text = limits.read_text(app_dir / rel, source)
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


def compile_globs(pattern: str) -> re.Pattern[str] | None:
    """A regex for an include/exclude pattern (`tidecd.base.globs` without separators: `*` crosses `/`), or
    None when the pattern is empty (matches everything). A bare `a,b` list is read as `{a,b}`."""
    pattern = pattern.strip()
    if not pattern:
        return None
    if _has_top_level_comma(pattern):
        pattern = "{" + pattern + "}"
    try:
        return compile_glob(pattern)
    except ValueError as exc:
        raise RenderError(str(exc)) from exc


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
