"""Rendering an ApplicationSet's `template` for one parameter set, as Argo CD's ApplicationSet controller does.

Two forms, chosen by `spec.goTemplate`:
- **fasttemplate** (the default): every `{{ key }}` in a string is replaced by the flat parameter `key`
  (`path.basename`, `path[1]`, `metadata.labels.env`); a tag naming no parameter is left as it is.
- **Go templates** (`goTemplate: true`): every string is a Go template executed with the nested parameters
  as the dot (`{{ .path.basename }}`), with `goTemplateOptions` (`missingkey=error`); see `gotemplate`.

Strings are rendered one by one (map keys too), so a template can never produce YAML structure it did not
have, except through `templatePatch`: a Go template rendered as a whole, parsed as JSON when it starts with
`{` and as YAML otherwise (Argo CD's ConvertYAMLToJSON; JSON indented with tabs is not YAML), and merged over
the rendered template (maps merged key by key, anything else replaced, `null` removes a key), as Argo CD's
strategic merge of an Application (which has no merge keys on its lists) does.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from tidecd.base import limits
from tidecd.config.appset import gotemplate
from tidecd.config.appset.gotemplate import TemplateError

_TAG = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)


def fasttemplate(text: str, params: Mapping[str, Any]) -> str:
    """Argo CD's fasttemplate substitution: `{{ key }}` → params[key] (trimmed key); unknown tags are kept."""

    def one(match: re.Match[str]) -> str:
        key = match.group(1).strip()
        if not key or key not in params:
            return match.group()
        value = params[key]
        return value if isinstance(value, str) else gotemplate.to_text(value)

    return _TAG.sub(one, text)


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


class Renderer:
    """Renders strings for one ApplicationSet: Go templates or fasttemplate."""

    def __init__(self, go: bool, options: Sequence[str] = ()) -> None:
        self.go, self.options = go, tuple(options)
        if go:
            gotemplate.render("", {}, options=self.options)  # validates the options once

    def text(self, text: str, params: Mapping[str, Any]) -> str:
        if self.go:
            return gotemplate.render(text, params, options=self.options) if "{{" in text else text
        return fasttemplate(text, params)

    def value(self, value: Any, params: Mapping[str, Any], path: str = "") -> Any:
        """Every string in `value` rendered (keys of mappings too); errors name the dotted field."""
        if isinstance(value, str):
            try:
                return self.text(value, params)
            except TemplateError as exc:
                raise TemplateError(f"{path}: {exc}" if path else str(exc)) from None
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for key, item in value.items():
                where = f"{path}.{key}" if path else str(key)
                name = self.value(key, params, where) if isinstance(key, str) else key
                out[name] = self.value(item, params, where)
            return out
        if isinstance(value, list):
            return [self.value(item, params, f"{path}[{i}]") for i, item in enumerate(value)]
        return value


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


def apply_patch(doc: dict[str, Any], patch: str, params: Mapping[str, Any], options: Sequence[str]) -> dict[str, Any]:
    """`templatePatch`: rendered as one Go template, read as JSON or YAML, merged over the rendered template."""
    text = gotemplate.render(patch, params, options=options)
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
    return merged
