"""ApplicationSet templating: the Go template subset, fasttemplate, templatePatch."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidecd.config.appset import gotemplate
from tidecd.config.appset.gotemplate import TemplateError, render
from tidecd.config.appset.template import Renderer, apply_patch, fasttemplate, flatten, merge

DATA: dict[str, Any] = {"path": {"path": "apps/web", "basename": "web", "segments": ["apps", "web"]},
                        "env": "prod", "list": [1, 2, 3], "name": "My App", "labels": {"tier": "front"}}


@pytest.mark.parametrize(("template", "expected"), [
    ("{{.path.basename}}", "web"),
    ("{{ .path.path }}-x", "apps/web-x"),
    ("{{ index .path.segments 1 }}", "web"),
    ('{{ .name | lower | replace " " "-" }}', "my-app"),
    ('{{ if eq .env "prod" }}P{{ else if .x }}X{{ else }}O{{ end }}', "P"),
    ('{{ if eq .env "dev" }}P{{ else if .list }}X{{ else }}O{{ end }}', "X"),
    ('{{ if eq .env "dev" }}P{{ else if .nope }}X{{ else }}O{{ end }}', "O"),
    ("{{ range $i, $v := .list }}{{ $i }}={{ $v }},{{ end }}", "0=1,1=2,2=3,"),
    ("{{ range .list }}[{{ . }}]{{ else }}none{{ end }}", "[1][2][3]"),
    ("{{ range .nothing }}x{{ else }}none{{ end }}", "none"),
    ("{{ .missing }}", "<no value>"),
    ('{{ printf "%s-%d" .env 3 }}', "prod-3"),
    ('a  {{- " b " -}}  c', "a b c"),
    ("{{ with .labels }}{{ .tier }}{{ end }}", "front"),
    ("{{ (index .path.segments 0) | upper }}", "APPS"),
    ("{{ $x := .env }}{{ $x }}{{ $.name }}", "prodMy App"),
    ('{{ default "d" .nope }}/{{ default "d" .env }}', "d/prod"),
    ("{{ toJson .labels }}", '{"tier":"front"}'),
    ("{{ len .list }} {{ and .env .name }} {{ or .nope .env }}", "3 My App prod"),
    ("{{/* a comment */}}x", "x"),
    ('{{ trunc 2 .env }} {{ hasPrefix "pr" .env }} {{ ternary "y" "n" true }}', "pr true y"),
    ("{{ .name | normalize }}", "my-app"),
    ('{{ .path.basename | quote }}', '"web"'),
    ("{{ add 1 2 }} {{ sub 5 3 }}", "3 2"),
    ("{{ b64enc .env | b64dec }}", "prod"),
    ('{{ dict "a" 1 | toJson }}', '{"a":1}'),
])
def test_go_templates_render_like_go(template: str, expected: str) -> None:
    assert render(template, DATA) == expected


def test_missingkey_error_names_the_key() -> None:
    with pytest.raises(TemplateError, match="nope"):
        render("{{ .nope }}", DATA, options=["missingkey=error"])
    assert render("{{ .env }}", DATA, options=["missingkey=error"]) == "prod"


@pytest.mark.parametrize("template", [
    "{{ .env", "{{ if .env }}x", "{{ end }}", "{{ define \"x\" }}{{ end }}", "{{ template \"x\" }}",
    "{{ nosuch .env }}", "{{ .env.deeper }}", "{{ index .list 9 }}", "{{ else }}", "{{ }}",
])
def test_bad_templates_are_errors_not_crashes(template: str) -> None:
    with pytest.raises(TemplateError):
        render(template, DATA)


def test_output_and_loops_are_bounded() -> None:
    with pytest.raises(TemplateError, match="iterations"):
        render("{{ range 20000 }}x{{ end }}", {})
    with pytest.raises(TemplateError, match="output"):
        render('{{ range 9000 }}{{ repeat 200 "y" }}{{ end }}', {})


def test_unknown_options_are_refused() -> None:
    with pytest.raises(TemplateError, match="goTemplateOptions"):
        render("x", {}, options=["nope=1"])


def test_fasttemplate_replaces_known_tags_and_keeps_unknown_ones() -> None:
    params = {"path.basename": "web", "path[0]": "apps", "name": "n"}
    assert fasttemplate("{{path.basename}}-{{ path[0] }}-{{unknown}}", params) == "web-apps-{{unknown}}"


def test_flatten_gives_fasttemplate_keys() -> None:
    assert flatten({"a": {"b": 1}, "l": ["x", "y"], "s": "t"}) == {
        "a.b": "1", "l": "[x y]", "l[0]": "x", "l[1]": "y", "s": "t"}


def test_renderer_renders_every_string_and_names_the_field() -> None:
    renderer = Renderer(go=True)
    out = renderer.value({"metadata": {"name": "{{ .env }}-app"}, "spec": {"list": ["{{ .path.basename }}", 3]}},
                         DATA)
    assert out == {"metadata": {"name": "prod-app"}, "spec": {"list": ["web", 3]}}
    with pytest.raises(TemplateError, match=r"spec\.list\[0\]"):
        renderer.value({"spec": {"list": ["{{ .env"]}}, DATA)


def test_template_patch_merges_over_the_template() -> None:
    doc = {"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"source": {"path": "p"}, "project": "default"}}
    patch = "spec:\n  source:\n    targetRevision: {{ .env }}\n  project: null\nmetadata:\n  labels: {y: '2'}\n"
    out = apply_patch(doc, patch, DATA, ())
    assert out == {"metadata": {"name": "a", "labels": {"x": "1", "y": "2"}},
                   "spec": {"source": {"path": "p", "targetRevision": "prod"}}}


TEXT = st.text(alphabet=st.characters(blacklist_characters="{}", blacklist_categories=["Cs"]), max_size=30)


@given(TEXT)
def test_text_without_actions_renders_as_itself(text: str) -> None:
    assert render(text, DATA) == text
    assert fasttemplate(text, {"a": "b"}) == text


@given(st.dictionaries(st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True), TEXT, max_size=5))
def test_every_key_of_the_data_renders_its_value(data: dict[str, str]) -> None:
    for key, value in data.items():
        assert render("{{ ." + key + " }}", data) == value
        assert fasttemplate("{{" + key + "}}", data) == value


@given(st.recursive(st.dictionaries(st.sampled_from("abc"), st.integers(0, 3), max_size=3),
                    lambda inner: st.dictionaries(st.sampled_from("abc"), inner, max_size=3), max_leaves=8),
       st.dictionaries(st.sampled_from("abc"), st.integers(0, 3), max_size=3))
def test_merge_keeps_every_patched_value(base: dict[str, Any], patch: dict[str, Any]) -> None:
    out = merge(base, patch)
    for key, value in patch.items():
        assert out[key] == value
    for key in base:
        assert key in out


@given(st.text(max_size=60))
def test_arbitrary_text_never_crashes_the_parser(text: str) -> None:
    with contextlib.suppress(TemplateError):
        render(text, DATA)


def test_to_text_prints_like_go() -> None:
    assert gotemplate.to_text([1, "a"]) == "[1 a]"
    assert gotemplate.to_text({"b": 1, "a": True}) == "map[a:true b:1]"
    assert gotemplate.to_text(2.0) == "2"
