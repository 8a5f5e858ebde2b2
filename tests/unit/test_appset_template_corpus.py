"""The template corpus (tests/support/gotemplate_cases.py, 300 templates under both option sets) through
the production path: the Renderer's one batched helper run must give, template for template, what one
helper run per template gives (Argo CD parses and executes every string on its own, from a fresh clone of
its base template), so batching can never leak state (`slugify`'s options, `tpl`'s depth, variables) from
one string to the next. The Python engine this replaced differed from Go on 244 of these 602 renders."""

from __future__ import annotations

import pytest

from tests.support.gotemplate_cases import OPTIONS, PARAMS, templates
from tidecd.config.appset.gotemplate import TemplateError, go
from tidecd.config.appset.template import Renderer


def outcome(renderer: Renderer, text: str) -> str:
    try:
        return "ok: " + renderer.text(text, PARAMS)
    except TemplateError as exc:
        return "error: " + str(exc)


@pytest.mark.parametrize("options", OPTIONS, ids=["default", "missingkey=error"])
def test_the_batch_renders_each_template_as_a_run_of_its_own(options: tuple[str, ...]) -> None:
    corpus = templates()
    assert len(corpus) >= 300
    batched = Renderer(True, options)
    batched.prefetch([(corpus, PARAMS)])
    for text in corpus:
        alone = go.render_batch([(text, 0)], [PARAMS], options=options)[0]
        expected = "error: " + str(alone) if isinstance(alone, TemplateError) else "ok: " + alone
        assert outcome(batched, text) == expected, text


def test_the_corpus_answers_as_argo_cd_documents() -> None:
    renderer = Renderer(True, ("missingkey=error",))
    renderer.prefetch([(templates(), PARAMS)])
    assert outcome(renderer, "{{index .path.segments 1}}") == "ok: web"
    assert outcome(renderer, "{{ .path.basenameNormalized }}") == "ok: web"
    assert outcome(renderer, '{{ if eq .path.basename "web" }}{{ "{{ keep }}" }}{{ end }}') == "ok: {{ keep }}"
    assert outcome(renderer, "{{ .branch | lower | replace \"/\" \"-\" }}-{{ .number }}") == \
        "ok: feature-jira-123_add-thing-42"
    assert outcome(renderer, "{{ slugify 10 false .branch }}") == "ok: feature-ji"
    assert outcome(renderer, "{{ .replicas }} {{ .big }} {{ .float }}") == "ok: 3 1e+21 2"
    assert outcome(renderer, "{{ .missing }}").startswith("error: ")
    assert "map has no entry for key \"missing\"" in outcome(renderer, "{{ .missing }}")
    assert outcome(renderer, "{{ uuidv4 }}").endswith("tidecd does not offer it")
