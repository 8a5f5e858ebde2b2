"""From YAML/JSON text to checked manifests: the one parser every renderer's output goes through.

Each object carries its origin (`base/app.yaml document 2 item 1`) so that an error about it names the file
and document the user has to fix. YAML is read as Kubernetes' Go reader reads it: timestamps stay strings
(so the result is plain JSON), and `kind: *List` objects are expanded into their items.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import yaml

from tidecd.base import limits
from tidecd.base.errors import RenderError
from tidecd.base.model import Manifest, ResourceKey

_TIMESTAMP = "tag:yaml.org,2002:timestamp"


class ManifestLoader(limits.SafeLoader):  # type: ignore[misc]
    """Safe loader whose output is JSON-shaped: no datetime, no bytes."""


ManifestLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
    for first, resolvers in limits.SafeLoader.yaml_implicit_resolvers.items()
}


def _scalar_as_text(loader: Any, node: yaml.Node) -> str:
    return str(loader.construct_scalar(node))


def _binary_as_base64(loader: Any, node: yaml.Node) -> str:
    """`!!binary` as Kubernetes carries `[]byte` in JSON: base64 text, whitespace removed."""
    text = str(loader.construct_scalar(node))
    return base64.b64encode(base64.b64decode("".join(text.split()))).decode()


ManifestLoader.add_constructor(_TIMESTAMP, _scalar_as_text)
ManifestLoader.add_constructor("tag:yaml.org,2002:binary", _binary_as_base64)


@dataclass(frozen=True)
class Document:
    """One rendered object and where it came from (for error messages)."""

    origin: str
    obj: Manifest


def load_yaml(text: str, source: str, *, start: int = 1) -> list[Document]:
    """Every non-empty document of a YAML stream; `source` names the file (or tool output) in errors,
    `start` is the number of its first document. Alias bombs and deep nesting are refused first."""
    limits.check_yaml(text, source)
    try:
        raw = list(yaml.load_all(text, Loader=ManifestLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise RenderError(f"{source}{where}: invalid YAML: {exc.problem or exc.context}") from exc
    except yaml.YAMLError as exc:
        raise RenderError(f"{source}: invalid YAML: {exc}") from exc
    return _documents(raw, source, start)


def load_json(text: str, source: str) -> list[Document]:
    """A `.json` file: one object (or a `*List` of objects)."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RenderError(f"{source} line {exc.lineno} column {exc.colno}: invalid JSON: {exc.msg}") from exc
    except RecursionError:
        raise limits.exceeded(f"{source}: nesting depth", "depth", limits.current().depth) from None
    limits.check_depth(raw, source)
    return _documents([raw], source, 1)


def _documents(raw: list[Any], source: str, start: int) -> list[Document]:
    out: list[Document] = []
    for number, doc in enumerate(raw, start=start):
        if doc is None:
            continue  # an empty document (`---` twice, or only comments)
        origin = f"{source} document {number}"
        if not isinstance(doc, dict):
            raise RenderError(f"{origin}: expected a mapping (a Kubernetes object), got {_type_name(doc)}")
        out.extend(expand_lists(Document(origin, doc)))
    return out


def expand_lists(doc: Document) -> list[Document]:
    """`kind: List` (or any `*List` with an `items` array) becomes its items, as kubectl and Argo CD do."""
    kind = doc.obj.get("kind")
    items = doc.obj.get("items")
    if not (isinstance(kind, str) and kind.endswith("List") and isinstance(items, list)):
        return [doc]
    out: list[Document] = []
    for index, item in enumerate(items, start=1):
        origin = f"{doc.origin} item {index}"
        if not isinstance(item, dict):
            raise RenderError(f"{origin}: expected a mapping (a Kubernetes object), got {_type_name(item)}")
        out.extend(expand_lists(Document(origin, item)))
    return out


HOOK_ANNOTATIONS = ("argocd.argoproj.io/hook", "helm.sh/hook")


def check(docs: list[Document]) -> list[Manifest]:
    """The objects, once each has an identity, none is over the object size limit, and no object is
    declared twice. A hook may have `metadata.generateName` instead of a name, or neither (the sync names
    it per operation, as Argo CD: `<generateName><revision>-<phase>-<time>`)."""
    seen: dict[ResourceKey, str] = {}
    bound = limits.current()
    for doc in docs:
        _check_identity(doc)
        _check_size(doc, bound)
        key = ResourceKey.of(doc.obj)
        if not key.name:  # a hook the sync names: two of them with one generateName would collide
            key = ResourceKey(key.group, key.kind, key.namespace, (doc.obj["metadata"].get("generateName") or "") + "*")
        if key in seen:
            raise RenderError(f"{key} is declared twice: in {seen[key]} and in {doc.origin}")
        seen[key] = doc.origin
    return [doc.obj for doc in docs]


def _check_size(doc: Document, bound: limits.Limits) -> None:
    size = len(json.dumps(doc.obj, separators=(",", ":")))
    if size > bound.object_bytes:
        key = ResourceKey.of(doc.obj)
        raise limits.exceeded(f"{key} ({doc.origin}) is {size:,} bytes as JSON", "object_bytes",
                              bound.object_bytes, " bytes")


def _check_identity(doc: Document) -> None:
    for field in ("apiVersion", "kind"):
        value = doc.obj.get(field)
        if not isinstance(value, str) or not value:
            raise RenderError(f"{doc.origin}: object has no {field}")
    meta = doc.obj.get("metadata")
    if not isinstance(meta, dict):
        raise RenderError(f"{doc.origin}: {doc.obj['kind']} has no metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        generate = meta.get("generateName")
        annotations = meta.get("annotations")
        hook = isinstance(annotations, dict) and any(a in annotations for a in HOOK_ANNOTATIONS)
        if name is not None or not hook:
            raise RenderError(f"{doc.origin}: {doc.obj['kind']} has no metadata.name" + (
                "" if name is not None or not generate else
                ": only hooks (argocd.argoproj.io/hook) may have just metadata.generateName"))
        if generate is not None and not isinstance(generate, str):
            raise RenderError(f"{doc.origin}: {doc.obj['kind']}: metadata.generateName is not a string")
        name = generate or "(named by the sync)"  # Argo CD names a hook with neither: <revision>-<phase>-<time>
    namespace = meta.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise RenderError(f"{doc.origin}: {doc.obj['kind']} {name}: metadata.namespace is not a string")


def _type_name(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )
