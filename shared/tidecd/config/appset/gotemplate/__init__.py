"""A small, safe interpreter for the subset of Go's `text/template` that ApplicationSet templates use.

Argo CD renders ApplicationSet templates with Go's `text/template` plus Sprig's functions when
`goTemplate: true`. Jinja2 (already a dependency) was the first candidate to build on, but its scoping and
filters differ from Go's where it matters here (the dot is rebound by `range`/`with`, a pipeline passes its
value as the *last* argument, a missing key prints `<no value>` or fails with `missingkey=error`), so a
translation would be wrong in corner cases users hit. This module interprets the subset directly:

    {{ .path.basename }}  {{ index .path.segments 1 }}  {{ .name | upper }}  {{ printf "%s-%d" .a 3 }}
    {{ if eq .env "prod" }}..{{ else if .x }}..{{ else }}..{{ end }}   {{ range $i, $v := .list }}..{{ end }}
    {{ with .values }}..{{ end }}   {{ $x := .a }}   {{- trimmed -}}   {{/* comments */}}

Safe by construction: values are plain JSON data (dicts, lists, strings, numbers); there is no attribute
access on Python objects, no `define`/`template`/`block`, and every template is bounded (its length, the
output size, the number of loop iterations, nesting). Functions: Go's builtins (`and or not len index eq
ne lt le gt ge print printf println slice`) and a Sprig-like set listed in `FUNCTIONS`. Errors are
`TemplateError` with a short message; they never echo values of the data.

The interpreter is four modules: `values` (the data, truth, `%v`, the error and the bounds), `parse` (lexing
and parsing into a tree), `execute` (running the tree) and `functions` (the function table).
"""

from tidecd.config.appset.gotemplate.execute import render
from tidecd.config.appset.gotemplate.functions import FUNCTIONS
from tidecd.config.appset.gotemplate.parse import parse
from tidecd.config.appset.gotemplate.values import (
    MAX_DEPTH,
    MAX_ITERATIONS,
    MAX_OUTPUT,
    MAX_TEMPLATE,
    MISSING,
    NO_VALUE,
    TemplateError,
    to_text,
    truth,
)

__all__ = ["FUNCTIONS", "MAX_DEPTH", "MAX_ITERATIONS", "MAX_OUTPUT", "MAX_TEMPLATE", "MISSING", "NO_VALUE",
           "TemplateError", "parse", "render", "to_text", "truth"]
