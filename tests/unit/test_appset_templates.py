"""ApplicationSet templating: Go templates and fasttemplate through the gotemplate helper (Go's text/template
and Sprig, as Argo CD runs them), templatePatch, and the helper's bounds."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidecd.config.appset import gotemplate
from tidecd.config.appset.gotemplate import TemplateError, go
from tidecd.config.appset.template import Renderer, apply_patch, flatten, merge


def render(template: str, data: dict[str, Any], options: Sequence[str] = ()) -> str:
    return Renderer(True, options).text(template, data)


def fasttemplate(template: str, params: dict[str, Any]) -> str:
    return Renderer(False).text(template, params)


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
    "{{ .env", "{{ if .env }}x", "{{ end }}", "{{ template \"x\" }}", "{{ env \"HOME\" }}",
    "{{ nosuch .env }}", "{{ .env.deeper }}", "{{ index .list 9 }}", "{{ else }}", "{{ }}",
])
def test_bad_templates_are_errors_not_crashes(template: str) -> None:
    with pytest.raises(TemplateError):
        render(template, DATA)


def test_output_and_time_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TemplateError, match="larger than 1048576 bytes"):
        render('{{ range 9000 }}{{ repeat 200 "y" }}{{ end }}', {})
    assert len(render('{{ range 5000 }}{{ repeat 200 "y" }}{{ end }}', {})) == 1_000_000
    monkeypatch.setattr(go, "SECONDS", 0.5)
    with pytest.raises(TemplateError, match="took more than"):
        render("{{ range 10000000000 }}{{ end }}", {})


def test_unknown_options_are_refused() -> None:
    with pytest.raises(TemplateError, match="goTemplateOptions"):
        render("x", {}, options=("nope=1",))


@pytest.mark.parametrize(("template", "expected"), [
    # issue 24: where the former Python engine differed from Go
    ('{{ if eq .nope "prod" }}P{{ else }}O{{ end }}', "O"),  # a missing field compares, it is not an error
    ('{{ "}}" }}-{{ `a}}b` }}-{{ "a`b" }}', "}}-a}}b-a`b"),
    ('{{ if eq .path.basename "web" }}{{ "{{ keep }}" }}{{ end }}', "{{ keep }}"),  # the Matrix page's example
    ("{{ slugify 10 false .name }}|{{ slugify .name }}", "my-app|my-app"),
    ('{{ dig "tier" "x" .labels }}|{{ dig "nope" "x" .labels }}', "front|x"),
    ("{{ base .path.path }} {{ dir .path.path }}", "web apps"),
    ('{{ fromYamlArray "[a, b]" }}', "[a b]"),
    ('{{ regexReplaceAll "[^a-z]+" .name "-" }}', "-y-pp"),
    ('{{ merge (dict "a" 1) (dict "a" 2 "b" 3) | toJson }}', '{"a":1,"b":3}'),
    ('{{ pick .labels "tier" }} {{ omit .labels "tier" }}', "map[tier:front] map[]"),
    ('{{ semverCompare ">=1.2.0" "1.10.0" }}', "true"),
    ("{{ mustToPrettyJson .list }}", "[\n  1,\n  2,\n  3\n]"),
    ("{{ .list }} {{ 1.5 }} {{ index .list 0 }}", "[1 2 3] 1.5 1"),  # JSON numbers are float64, as in Go
    ('{{ printf "%d" (index .list 0) }}', "%!d(float64=1)"),
])
def test_what_the_python_engine_got_wrong_now_matches_go(template: str, expected: str) -> None:
    assert render(template, DATA) == expected


@pytest.mark.parametrize(("function", "why"), [
    ("now", "reads the clock"), ('date "2006" 0', "reads the clock"), ("randAlphaNum 5", "is random"),
    ("uuidv4", "is random"), ('genPrivateKey "rsa"', "generates a key"), ('bcrypt "x"', "uses a random salt")])
def test_functions_that_change_every_evaluation_are_refused_by_name(function: str, why: str) -> None:
    name = function.split()[0]
    with pytest.raises(TemplateError, match=f"error calling {name}: {name} {why}.*every evaluation"):
        render("{{ " + function + " }}", DATA)


@pytest.mark.parametrize("function", ["env", "expandenv", "getHostByName"])
def test_functions_argo_cd_removes_are_not_defined(function: str) -> None:
    with pytest.raises(TemplateError, match=f'function "{function}" not defined'):
        render("{{ " + function + ' "x" }}', DATA)


def test_fasttemplate_keeps_a_lone_brace_but_refuses_an_unclosed_tag_after_a_tag() -> None:
    """valyala/fasttemplate, as Argo CD calls it: a line with no `{{..}}` is not a template; one that has
    a tag and then an unclosed `{{` is an error, never kept silently."""
    assert fasttemplate("a {{ b", {"b": "x"}) == "a {{ b"
    with pytest.raises(TemplateError, match='Cannot find end tag="}}"'):
        fasttemplate("{{b}} and {{ b", {"b": "x"})


def test_a_whole_value_is_one_helper_run(monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[int] = []
    real = go.render_batch

    def counted(items: Any, params: Any, **kw: Any) -> Any:
        runs.append(len(items))
        return real(items, params, **kw)

    monkeypatch.setattr(go, "render_batch", counted)
    renderer = Renderer(go=True)
    value = {"a": "{{ .env }}", "b": ["{{ .name }}", "plain", {"{{ .env }}-k": "{{ .path.path }}"}]}
    renderer.prefetch([(value, DATA), (value, {**DATA, "env": "dev"})])
    assert renderer.value(value, {**DATA, "env": "dev"}) == {
        "a": "dev", "b": ["My App", "plain", {"dev-k": "apps/web"}]}
    assert runs == [8]  # 4 templated strings x 2 parameter sets, in one run; `value` looked them up


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
    out = apply_patch(doc, patch, DATA, Renderer(go=True))
    assert out == {"metadata": {"name": "a", "labels": {"x": "1", "y": "2"}},
                   "spec": {"source": {"path": "p", "targetRevision": "prod"}}}


TEXT = st.text(alphabet=st.characters(blacklist_characters="{}", blacklist_categories=["Cs"]), max_size=30)


@settings(max_examples=30, deadline=None)
@given(TEXT)
def test_text_without_actions_renders_as_itself(text: str) -> None:
    assert render(text, DATA) == text
    assert fasttemplate(text, {"a": "b"}) == text


@settings(max_examples=30, deadline=None)
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


@settings(max_examples=30, deadline=None)
@given(st.text(max_size=60))
def test_arbitrary_text_never_crashes_the_parser(text: str) -> None:
    with contextlib.suppress(TemplateError):
        render(text, DATA)


def test_to_text_prints_like_go() -> None:
    assert gotemplate.to_text([1, "a"]) == "[1 a]"
    assert gotemplate.to_text({"b": 1, "a": True}) == "map[a:true b:1]"
    assert gotemplate.to_text(2.0) == "2"


def test_a_missing_helper_is_a_clear_error(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("TIDECD_BIN_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TemplateError, match="cannot render Go templates: gotemplate not found"):
        render("{{ .env }}", DATA)
    assert render("no action", DATA) == "no action"  # a string without `{{` needs no helper


@pytest.mark.parametrize(("script", "error"), [
    ("echo 'bad batch' >&2; exit 2", r"the gotemplate helper failed \(exit status 2\): bad batch"),
    ("echo not-json", "the gotemplate helper's answer is not its JSON"),
    ("echo '{\"results\": []}'", "answered for a different number of templates"),
    ("head -c 100 /dev/zero; sleep 30", "took more than 2s"),
])
def test_a_broken_helper_is_a_clear_error(script: str, error: str, tmp_path: Any,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    helper = tmp_path / "gotemplate"
    helper.write_text(f"#!/bin/sh\ncat >/dev/null\n{script}\n")
    helper.chmod(0o755)
    monkeypatch.setenv("TIDECD_BIN_DIR", str(tmp_path))
    monkeypatch.setattr(go, "SECONDS", 2.0)
    with pytest.raises(TemplateError, match=error):
        render("{{ .env }}", DATA)


def test_an_evaluation_renders_every_generator_in_one_helper_run(tmp_path: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.unit.test_appset_generators import FakeSources, appset
    from tidecd.config.appset.expand import expand

    runs: list[int] = []
    real = go.render_batch

    def counted(items: Any, params: Any, **kw: Any) -> Any:
        runs.append(len(items))
        return real(items, params, **kw)

    monkeypatch.setattr(go, "render_batch", counted)
    gens = [{"list": {"elements": [{"env": "a"}, {"env": "b"}]}}, {"list": {"elements": [{"env": "c"}]}}]
    out = expand(appset(gens, go=True, name="{{ .env }}-app", extra={"source": {
        "repoURL": "https://git.example/apps", "path": "{{ .env | upper }}"}}), FakeSources(tmp_path))
    assert sorted(out.apps) == ["a-app", "b-app", "c-app"], out.errors
    assert out.apps["c-app"].doc["spec"]["source"]["path"] == "C"
    assert len(runs) == 1, runs
