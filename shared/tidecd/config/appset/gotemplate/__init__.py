"""ApplicationSet templates rendered by Go's own `text/template` and Sprig, as Argo CD renders them.

Argo CD renders ApplicationSet templates with Go's `text/template` and the Sprig its go.mod pins
(`goTemplate: true`), or with valyala/fasttemplate (the default). tidecd had a Python interpreter of the
subset users write; compared template by template with Go it differed in about 4 of 10 (missing fields in
`eq`, `}}` inside string literals, JSON numbers, `slugify`'s arguments, 150 missing functions), so it was
replaced by the Go code itself: `go` runs the `gotemplate` helper (tools/gotemplate), built from the
module proxy at Argo CD's versions and shipped in the function package. `values` holds the error type,
the bounds and Go's `%v` of plain data (fasttemplate's flat parameters are written with it).
"""

from tidecd.config.appset.gotemplate.values import MAX_OUTPUT, TemplateError, to_text

__all__ = ["MAX_OUTPUT", "TemplateError", "to_text"]
