"""Rendering ApplicationSet templates with Go's own `text/template` and Sprig: the `gotemplate` helper.

Argo CD renders ApplicationSet templates with Go's `text/template` and the Sprig version its go.mod pins
(v3.3.0 in v3.6.1); an interpreter written again in Python differs from it in corners users hit (issue 24).
`tools/gotemplate` is a small Go program built from those same modules by `scripts/tools.sh` and shipped
in the function package beside helm; this module runs it. One process renders a whole batch (every string
of an evaluation), because a start costs milliseconds and an ApplicationSet has hundreds of strings.

Bounded like a render: the helper runs under the trampoline of `tidecd.base.child` with a deadline
(`SECONDS`), a memory limit and an output limit, and caps each rendered string at `MAX_OUTPUT` itself.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from tidecd.base import child, tools
from tidecd.config.appset.gotemplate.values import MAX_OUTPUT, TemplateError

SECONDS = 10.0  # one batch: thousands of strings take well under a second
MEMORY_BYTES = 512 * 1024 * 1024
BATCH_OUTPUT_BYTES = 64 * 1024 * 1024  # the whole answer; each string stops at MAX_OUTPUT
STDERR_SHOWN = 2000


def render_batch(items: Sequence[tuple[str, int]], params: Sequence[Mapping[str, Any]], *, go: bool = True,
                 options: Sequence[str] = ()) -> list[str | TemplateError]:
    """Each (template, index of its parameter set) rendered, in order: its text, or a TemplateError with
    Argo CD's wording (the template is
    quoted, as Argo CD quotes it; the parameter values never are). Raises TemplateError when the helper
    cannot run, passes its limits or refuses the batch (a bad `goTemplateOptions`)."""
    if not items:
        return []
    batch = {"goTemplate": go, "options": list(options), "params": [dict(p) for p in params],
             "items": [{"template": t, "params": i} for t, i in items], "maxOutput": MAX_OUTPUT}
    return run(batch)


def run(batch: Mapping[str, Any]) -> list[str | TemplateError]:
    """One batch through the helper (any of its modes: ApplicationSet templates, or Argo CD Notifications'
    `expr` conditions and `notify` messages), answered item by item: its text, or a TemplateError. Raises
    TemplateError when the helper cannot run, passes its limits or refuses the batch."""
    items = batch.get("items") or []
    try:
        binary = tools.binary("gotemplate")
    except tools.MissingTool as exc:
        raise TemplateError(f"cannot render Go templates: {exc}") from None
    with tempfile.TemporaryFile() as given, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        given.write(json.dumps(batch, default=str).encode())  # a YAML date, should one come, as text
        given.seek(0)
        try:
            ended, returncode = child.run([binary], env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                                          memory_bytes=MEMORY_BYTES, output_bytes=BATCH_OUTPUT_BYTES + 1,
                                          seconds=SECONDS, stdin=given, stdout=out, stderr=err)
        except OSError as exc:
            raise TemplateError(f"cannot run the gotemplate helper: {exc.strerror}") from None
        if not ended:
            raise TemplateError(f"the templates took more than {SECONDS:g}s to render")
        if os.fstat(out.fileno()).st_size > BATCH_OUTPUT_BYTES:
            raise TemplateError(f"the rendered templates are larger than {BATCH_OUTPUT_BYTES} bytes")
        err.seek(max(0, os.fstat(err.fileno()).st_size - STDERR_SHOWN))
        said = err.read().decode("utf-8", errors="replace").strip()
        if returncode != 0:
            said = said.removeprefix(child.EXEC_FAILED).removeprefix("tidecd-gotemplate: ")
            raise TemplateError(f"the gotemplate helper failed (exit status {returncode}): {said[:500]}")
        out.seek(0)
        try:
            answer = json.loads(out.read())
            results = answer["results"]
        except (ValueError, KeyError, TypeError):
            raise TemplateError("the gotemplate helper's answer is not its JSON") from None
    if not isinstance(results, list) or len(results) != len(items):
        raise TemplateError("the gotemplate helper answered for a different number of templates")
    return [r["value"] if "value" in r else TemplateError(str(r.get("error", "unknown error"))) for r in results]
