"""Rendering an ApplicationSet's `template` for one parameter set, as Argo CD's ApplicationSet controller does.

Two forms, chosen by `spec.goTemplate`:
- **fasttemplate** (the default): every `{{ key }}` in a string is replaced by the flat parameter `key`
  (`path.basename`, `path[1]`, `metadata.labels.env`); a tag naming no parameter is left as it is, and a
  line with a `{{ .. }}` and an unclosed `{{` is an error, as valyala/fasttemplate makes it.
- **Go templates** (`goTemplate: true`): every string is a Go template executed with the nested parameters
  as the dot (`{{ .path.basename }}`), with `goTemplateOptions` (`missingkey=error`).

Both run in the `gotemplate` helper (Go, `tools/gotemplate`; `gotemplate.go` runs it), the code Argo CD runs.

Strings are rendered one by one (map keys too), so a template can never produce YAML structure it did not
have, except through `templatePatch`: a Go template rendered as a whole, parsed as JSON when it starts with
`{` and as YAML otherwise (Argo CD's ConvertYAMLToJSON; JSON indented with tabs is not YAML), and merged over
the rendered template (maps merged key by key, anything else replaced, `null` removes a key), as Argo CD's
strategic merge of an Application (which has no merge keys on its lists) does.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import yaml

from tidecd.base import limits
from tidecd.config.appset import gotemplate
from tidecd.config.appset.gotemplate import TemplateError, go


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested parameters as fasttemplate keys: `{"a": {"b": 1}}` → `{"a.b": "1"}` (lists as `a[0]` too)."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        elif isinstance(value, list):
            out[name] = gotemplate.to_text(value)
            for index, item in enumerate(value):
                if not isinstance(item, Mapping | list):
                    out[f"{name}[{index}]"] = gotemplate.to_text(item)
        else:
            out[name] = value if isinstance(value, str) else gotemplate.to_text(value)
    return out


GO_OPTIONS = ("missingkey=default", "missingkey=invalid", "missingkey=zero", "missingkey=error")


class Renderer:
    """Renders the strings of one ApplicationSet, Go templates or fasttemplate, with the Go helper.

    Both forms run in `tools/gotemplate` (Go's text/template and Sprig, valyala/fasttemplate), as Argo CD
    runs them: a Python interpreter of them differed from Go in about 4 templates of 10 of the differential
    corpus (tests/support/gotemplate_cases.py). A helper process renders a batch: `value` renders every
    string of a value at once, and `prefetch` renders every string of a whole evaluation (all parameter
    sets) in one process, after which `value` only looks its strings up."""

    def __init__(self, go: bool, options: Sequence[str] = ()) -> None:
        self.go, self.options = go, tuple(options)
        for option in self.options:
            if option not in GO_OPTIONS:
                raise TemplateError(f"goTemplateOptions: {option!r} is not one of {', '.join(GO_OPTIONS)}")
        self._done: dict[tuple[str, str], str | TemplateError] = {}

    def _key(self, text: str, params: Mapping[str, Any]) -> tuple[str, str]:
        return text, json.dumps(params, sort_keys=True, default=str)

    def _templated(self, text: str) -> bool:
        return "{{" in text

    def prefetch(self, pairs: Sequence[tuple[Any, Mapping[str, Any]]]) -> None:
        """Render every string of each (value, parameters) in one helper run, for `value` to look up."""
        wanted: dict[tuple[str, str], tuple[str, int]] = {}
        params: list[Mapping[str, Any]] = []
        for value, values in pairs:
            params.append(values)
            for text in _strings(value):
                key = self._key(text, values)
                if self._templated(text) and key not in self._done and key not in wanted:
                    wanted[key] = (text, len(params) - 1)
        if wanted:
            results = go.render_batch(list(wanted.values()), params, go=self.go, options=self.options)
            self._done.update(zip(wanted, results, strict=True))

    def text(self, text: str, params: Mapping[str, Any]) -> str:
        if not self._templated(text):
            return text
        key = self._key(text, params)
        if key not in self._done:
            self.prefetch([(text, params)])
        done = self._done[key]
        if isinstance(done, TemplateError):
            raise TemplateError(str(done))
        return done

    def value(self, value: Any, params: Mapping[str, Any], path: str = "") -> Any:
        """Every string in `value` rendered (keys of mappings too); errors name the dotted field."""
        self.prefetch([(value, params)])
        return self._value(value, params, path)

    def _value(self, value: Any, params: Mapping[str, Any], path: str) -> Any:
        if isinstance(value, str):
            try:
                return self.text(value, params)
            except TemplateError as exc:
                raise TemplateError(f"{path}: {exc}" if path else str(exc)) from None
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for key, item in value.items():
                where = f"{path}.{key}" if path else str(key)
                name = self._value(key, params, where) if isinstance(key, str) else key
                out[name] = self._value(item, params, where)
            return out
        if isinstance(value, list):
            return [self._value(item, params, f"{path}[{i}]") for i, item in enumerate(value)]
        return value


def _strings(value: Any) -> Iterator[str]:
    """Every string in `value`, the keys of its mappings included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str):
                yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def merge(base: Any, patch: Any) -> Any:
    """A JSON merge patch (RFC 7386): mappings merged key by key, `null` removes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(base) if isinstance(base, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def apply_patch(doc: dict[str, Any], patch: str, params: Mapping[str, Any], renderer: Renderer) -> dict[str, Any]:
    """`templatePatch`: rendered as one Go template, read as JSON or YAML, merged over the rendered template."""
    text = renderer.text(patch, params)
    if text.strip().startswith("{"):  # Argo CD's ConvertYAMLToJSON: a patch starting with `{` is JSON
        try:
            loaded = json.loads(text)
            limits.check_depth(loaded, "templatePatch")
        except (json.JSONDecodeError, RecursionError) as exc:
            where = f" (line {exc.lineno}, column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
            raise TemplateError("templatePatch: the rendered patch starts with '{' so it is read as JSON (as Argo "
                                f"CD reads it), and it is not JSON{where}") from None
        except ValueError as exc:
            raise TemplateError(f"templatePatch: {exc}") from exc
        return _merged(doc, loaded)
    try:
        loaded = limits.load_yaml(text, "templatePatch")
    except yaml.YAMLError as exc:
        raise TemplateError(f"templatePatch: the rendered patch is not YAML ({type(exc).__name__})") from exc
    except ValueError as exc:
        raise TemplateError(f"templatePatch: {exc}") from exc
    return _merged(doc, loaded)


def _merged(doc: dict[str, Any], loaded: Any) -> dict[str, Any]:
    if loaded is None:
        return doc
    if not isinstance(loaded, Mapping):
        raise TemplateError("templatePatch: the rendered patch must be a mapping")
    merged = merge(doc, loaded)
    assert isinstance(merged, dict)
    patch_meta, meta = loaded.get("metadata"), doc.get("metadata")
    patched = patch_meta.get("finalizers") if isinstance(patch_meta, Mapping) else None
    before = meta.get("finalizers") if isinstance(meta, Mapping) else None
    if isinstance(patched, list) and isinstance(before, list) and isinstance(merged.get("metadata"), dict):
        merged["metadata"]["finalizers"] = merged_scalars(before, patched)
    return merged


def merged_scalars(original: Sequence[Any], patch: Sequence[Any]) -> list[Any]:
    """A list of scalars whose patch strategy is `merge` (an object's `metadata.finalizers`) after Kubernetes'
    strategic merge patch, which Argo CD applies a templatePatch with: the union of both, so a patch can add
    a finalizer but not remove one (`finalizers: []` keeps the generated app's
    `resources-finalizer.argocd.argoproj.io`). The order is apimachinery's (mergeSortedSlice): the items only
    the original has, in its order, interleaved with the patch's items, in the patch's order; an item only
    the original has goes before a patch item when the original has both and holds it first."""
    patch_items = list(dict.fromkeys(patch))
    server_only = [item for item in dict.fromkeys(original) if item not in patch_items]
    position = {item: index for index, item in enumerate(original)}
    out: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(patch_items):
        if j >= len(patch_items):
            out.append(server_only[i])
            i += 1
        elif i >= len(server_only):
            out.append(patch_items[j])
            j += 1
        elif patch_items[j] in position and position[server_only[i]] < position[patch_items[j]]:
            out.append(server_only[i])
            i += 1
        else:
            out.append(patch_items[j])
            j += 1
    return out
