"""Bounds on what hostile input may cost: each checked before the work it guards, each configurable.

Repository content, config files and webhook bodies are written by people tidecd does not trust with
its memory or time. Every limit below has an environment variable (read at each use, so a test or a
function's settings can change it) and a default that no honest repository comes near:

    TIDECD_MAX_YAML_ALIAS_NODES  100000   nodes YAML aliases may add to one document (alias bombs)
    TIDECD_MAX_DEPTH             128      nesting of one YAML/JSON document (maps and lists)
    TIDECD_MAX_FILES             20000    files in one repository snapshot
    TIDECD_MAX_PATH_DEPTH        64       directories in one path of a snapshot
    TIDECD_MAX_SNAPSHOT_BYTES    1 GiB    uncompressed size of one snapshot
    TIDECD_MAX_FILE_BYTES        16 MiB   one manifest, values or kustomization file read for a render
    TIDECD_MAX_OBJECT_BYTES      1.5 MiB  one rendered object as JSON (etcd's own request limit)
    TIDECD_MAX_WEBHOOK_BYTES     25 MiB   one webhook body, whatever the transfer encoding
    TIDECD_MAX_API_BYTES         1 MiB    one api request body
    TIDECD_MAX_ARCHIVE_BYTES     256 MiB  expanded size of one chart archive or OCI artifact (all its layers)
    TIDECD_MAX_OCI_LAYERS        16       layers of one OCI artifact, counted in its manifest before any is fetched
    TIDECD_MAX_OCI_BYTES         256 MiB  total (compressed) size of one OCI artifact's layers, likewise
    TIDECD_MAX_HELM_INDEX_BYTES  64 MiB   one helm repository `index.yaml`, refused as it streams past it
    TIDECD_MAX_RENDER_SECONDS    120      wall time of one render: every tool run and jsonnet file of it, all
                                          sources of a multi-source app together (fetching not counted)
    TIDECD_MAX_RENDER_MEMORY_BYTES 1 GiB  memory one render child process (helm, kustomize, jsonnet, a tool
                                          they start) may allocate: its data segment (RLIMIT_DATA)
    TIDECD_MAX_RENDER_OUTPUT_BYTES 64 MiB what one render child may write (its output, any file: RLIMIT_FSIZE)

Exceeding a limit raises `LimitExceeded` (a PermanentError): the app gets a condition naming the file or
object and the variable that would raise the limit, its state is recorded, and retrying does not help.
A refusal met while rendering is stored under the render's input (`render.render_cached`: revision,
source spec, destination, override, build environment) with the limits in force, and the next trigger
raises it again without rendering, until the input or a limit changes. The three render limits are
`RenderLimits` (`render_limits()`), enforced by `render.tool.run_child`, the one way a render starts a
process; the others are `Limits` (`current()`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from tidecd.base.errors import ConfigError, LimitExceeded, RenderError

__all__ = ["LimitExceeded", "Limits", "RenderLimits", "check_depth", "check_yaml", "current", "load_yaml",
           "render_limits"]

_MiB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    yaml_alias_nodes: int = 100_000
    depth: int = 128
    files: int = 20_000
    path_depth: int = 64
    snapshot_bytes: int = 1024 * _MiB
    file_bytes: int = 16 * _MiB
    object_bytes: int = 1536 * 1024
    webhook_bytes: int = 25 * _MiB
    api_bytes: int = 1 * _MiB
    archive_bytes: int = 256 * _MiB
    oci_layers: int = 16
    oci_bytes: int = 256 * _MiB
    helm_index_bytes: int = 64 * _MiB

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Limits:
        return cls(**_settings(cls, env))


@dataclass(frozen=True)
class RenderLimits:
    """The limits of one render and its child processes (`render.tool.run_child` enforces them)."""

    render_seconds: int = 120
    render_memory_bytes: int = 1024 * _MiB
    render_output_bytes: int = 64 * _MiB

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> RenderLimits:
        return cls(**_settings(cls, env))


def _settings(cls: type[Any], env: dict[str, str] | None) -> dict[str, int]:
    """The fields of `cls` the environment sets (each a positive whole number, else a ConfigError)."""
    source = os.environ if env is None else env
    values: dict[str, int] = {}
    for item in fields(cls):
        name = env_name(item.name)
        text = source.get(name, "").strip()
        if not text:
            continue
        if not text.isdigit() or int(text) <= 0:
            raise ConfigError(f"{name}={text!r}: expected a positive whole number")
        values[item.name] = int(text)
    return values


_ENV_NAMES = {
    "yaml_alias_nodes": "TIDECD_MAX_YAML_ALIAS_NODES",
    "depth": "TIDECD_MAX_DEPTH",
    "files": "TIDECD_MAX_FILES",
    "path_depth": "TIDECD_MAX_PATH_DEPTH",
    "snapshot_bytes": "TIDECD_MAX_SNAPSHOT_BYTES",
    "file_bytes": "TIDECD_MAX_FILE_BYTES",
    "object_bytes": "TIDECD_MAX_OBJECT_BYTES",
    "webhook_bytes": "TIDECD_MAX_WEBHOOK_BYTES",
    "api_bytes": "TIDECD_MAX_API_BYTES",
    "archive_bytes": "TIDECD_MAX_ARCHIVE_BYTES",
    "oci_layers": "TIDECD_MAX_OCI_LAYERS",
    "oci_bytes": "TIDECD_MAX_OCI_BYTES",
    "helm_index_bytes": "TIDECD_MAX_HELM_INDEX_BYTES",
    "render_seconds": "TIDECD_MAX_RENDER_SECONDS",
    "render_memory_bytes": "TIDECD_MAX_RENDER_MEMORY_BYTES",
    "render_output_bytes": "TIDECD_MAX_RENDER_OUTPUT_BYTES",
}


def env_name(field_name: str) -> str:
    return _ENV_NAMES[field_name]


def current() -> Limits:
    """The limits in force now (the environment is read at each call: it is a handful of lookups)."""
    return Limits.from_env()


def render_limits() -> RenderLimits:
    """The render limits in force now (read at each call, as `current`)."""
    return RenderLimits.from_env()


def exceeded(what: str, limit_field: str, limit: int, unit: str = "") -> LimitExceeded:
    """`what` names the file or object; the message says which variable raises the limit."""
    shown = f"{limit:,}{unit}"
    return LimitExceeded(f"{what}: over the limit of {shown} ({env_name(limit_field)})")


# --- YAML ------------------------------------------------------------------------------------------------

# The one safe YAML loader base: libyaml's when PyYAML was built with it (several times faster). Every reader
# of YAML (config, manifests, kustomizations, helm indexes) loads with it or a subclass, after `check_yaml`.
SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_INDENT = re.compile(r"^[ \t?:-]*", re.MULTILINE)
_START = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_END = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def load_yaml(text: str, source: str, limits: Limits | None = None) -> Any:
    """One YAML document that tidecd did not write, read within the limits: `check_yaml` on the event
    stream first, then the safe loader. The one way such YAML is read; `yaml.YAMLError` (and the limits'
    LimitExceeded) go to the caller, which names what it was reading."""
    check_yaml(text, source, limits)
    return yaml.load(text, Loader=SafeLoader)  # noqa: S506 - a safe loader


def check_yaml(text: str, source: str, limits: Limits | None = None) -> None:
    """Refuse a YAML stream whose aliases would expand past the budget or whose nesting is too deep.

    PyYAML builds an alias as a shared reference, so a 433-byte "billion laughs" loads in microseconds:
    the blow-up comes later, when the objects are serialized or copied, and a very deep document makes
    libyaml's composer (C recursion) crash the process. Both are found on the event stream, which the
    parser produces without recursion, before anything is composed. A stream with no anchor and no
    possible deep nesting (a cheap upper bound from the text) skips that pass.
    """
    limits = limits or current()
    if "&" not in text and _depth_bound(text) <= limits.depth:
        return
    try:
        _scan_events(text, source, limits)
    except yaml.YAMLError:
        return  # the loader that follows reports the syntax error with its position


def _depth_bound(text: str) -> int:
    """An upper bound of the nesting depth: every flow opener, plus two levels per indentation column."""
    flow = text.count("[") + text.count("{")
    if flow > 1_000_000:
        return flow
    block = max((len(m) for m in _INDENT.findall(text)), default=0)
    return flow + 2 * block + 1


def _scan_events(text: str, source: str, limits: Limits) -> None:
    # Each open collection: [expanded node count, max depth below it, anchor]
    stack: list[list[Any]] = []
    anchors: dict[str, tuple[int, int]] = {}
    added = 0
    document = 0
    for event in yaml.parse(text, Loader=SafeLoader):
        if isinstance(event, yaml.DocumentStartEvent):
            document += 1
            anchors.clear()
            added = 0
        elif isinstance(event, _START):
            stack.append([1, 0, event.anchor])
            if len(stack) > limits.depth:
                raise exceeded(f"{source} document {document}: nesting depth", "depth", limits.depth)
        elif isinstance(event, _END):
            count, below, anchor = stack.pop()
            if anchor:
                anchors[anchor] = (count, below + 1)
            _add(stack, count, below + 1)
        elif isinstance(event, yaml.ScalarEvent):
            if event.anchor:
                anchors[event.anchor] = (1, 0)
            _add(stack, 1, 0)
        elif isinstance(event, yaml.AliasEvent):
            count, depth = anchors.get(event.anchor or "", (1, 0))
            added += count
            if added > limits.yaml_alias_nodes:
                raise exceeded(f"{source} document {document}: YAML aliases expand", "yaml_alias_nodes",
                               limits.yaml_alias_nodes, " nodes")
            if len(stack) + depth > limits.depth:
                raise exceeded(f"{source} document {document}: nesting depth (through an alias)", "depth",
                               limits.depth)
            _add(stack, count, depth)


def _add(stack: list[list[Any]], count: int, depth: int) -> None:
    if stack:
        top = stack[-1]
        top[0] += count
        top[1] = max(top[1], depth)


# --- already-parsed data (JSON) --------------------------------------------------------------------------


def check_depth(value: Any, source: str, limits: Limits | None = None) -> None:
    """Refuse a parsed JSON value nested deeper than the limit (walked without recursion)."""
    limit = (limits or current()).depth
    todo: list[tuple[Any, int]] = [(value, 0)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict | list):
            if depth + 1 > limit:
                raise exceeded(f"{source}: nesting depth", "depth", limit)
            children = item.values() if isinstance(item, dict) else item
            todo.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def read_text(path: Path, what: str) -> str:
    """A file of a checkout read for a render (manifest, values), refused past `file_bytes` before it is
    read; RenderError names `what` when it is not UTF-8 text or cannot be read."""
    bound = current()
    size = path.stat().st_size
    if size > bound.file_bytes:
        raise exceeded(f"{what} is {size:,} bytes", "file_bytes", bound.file_bytes, " bytes")
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise RenderError(f"{what}: not UTF-8 text (byte {exc.start})") from exc
    except OSError as exc:
        raise RenderError(f"{what}: cannot read: {exc.strerror}") from exc
