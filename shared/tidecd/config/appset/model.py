"""Reading an `ApplicationSet` document (argoproj.io/v1alpha1) strictly: every problem names the file, the
object and the dotted field, as for Applications (`tidecd.config.schema`).

Supported: `spec.generators` (list, clusters, git directories/files, matrix, merge, pullRequest with
github), `spec.template`, `spec.templatePatch`, `spec.goTemplate`, `spec.goTemplateOptions`,
`spec.syncPolicy.preserveResourcesOnDeletion` and `spec.syncPolicy.applicationsSync`. Read and ignored:
`status`, `preservedFields`, `ignoreApplicationDifferences`, `applyNestedSelectors` (tidecd applies
nested selectors always). Refused by name ("not implemented by tidecd"): `strategy` (progressive syncs)
and the other generators (scmProvider, clusterDecisionResource, plugin).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from tidecd.config.appset import generators
from tidecd.config.appset.gotemplate import TemplateError
from tidecd.config.appset.template import Renderer
from tidecd.config.schema import Keys, Node

APPLICATIONS_SYNC = ("create-only", "create-update", "create-delete", "sync")

_TOP = Keys(("apiVersion", "kind", "metadata", "spec", "status"))
_METADATA = Keys(("name", "namespace", "labels", "annotations", "finalizers", "uid", "resourceVersion",
                   "generation", "creationTimestamp", "managedFields"))
_SPEC = Keys(("generators", "template", "templatePatch", "goTemplate", "goTemplateOptions", "syncPolicy",
               "preservedFields", "ignoreApplicationDifferences", "applyNestedSelectors", "strategy"))
_SYNC_POLICY = Keys(("preserveResourcesOnDeletion", "applicationsSync"))
_TEMPLATE = Keys(("metadata", "spec"))
_TEMPLATE_META = Keys(("name", "namespace", "labels", "annotations", "finalizers"))


@dataclass(frozen=True)
class ApplicationSet:
    name: str
    origin: str  # the file it was loaded from
    generators: tuple[dict[str, Any], ...]
    template: dict[str, Any]  # {"metadata": {...}, "spec": {...}} as written (strings not rendered yet)
    template_patch: str = ""
    go_template: bool = False
    go_template_options: tuple[str, ...] = ()
    preserve_resources_on_deletion: bool = False
    applications_sync: str = "sync"

    @property
    def label(self) -> str:
        return f"ApplicationSet/{self.name}"

    def spec_hash(self) -> str:
        """What the generated documents follow from; `preserveResourcesOnDeletion` decides their finalizer, and
        the version tag re-evaluates records written before generated apps had Argo CD's finalizer."""
        text = json.dumps([self.generators, self.template, self.template_patch, self.go_template,
                           self.go_template_options, self.applications_sync, self.preserve_resources_on_deletion,
                           "finalizer-1"], sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def renderer(self) -> Renderer:
        return Renderer(self.go_template, self.go_template_options)


def parse_application_set(top: Node) -> ApplicationSet | None:
    """The ApplicationSet of one document; errors go to `top.errs` (None when there are any)."""
    before = len(top.errs.items)
    top.check_keys(_TOP)
    meta = top.child("metadata", _METADATA, required=True)
    name = meta.text("name", required=True) if meta is not None else ""
    if meta is not None:
        meta.pairs("labels")
        meta.pairs("annotations")
    spec = top.child("spec", _SPEC, required=True)
    if spec is None:
        return None
    if spec.data.get("strategy") is not None:
        spec.error("strategy", "Argo CD field strategy (progressive syncs) is not implemented by tidecd")
    go = spec.flag("goTemplate")
    options = spec.texts("goTemplateOptions")
    try:
        Renderer(go, options)
    except TemplateError as exc:
        spec.error("goTemplateOptions", str(exc))
    policy = spec.child("syncPolicy", _SYNC_POLICY)
    preserve, sync = False, "sync"
    if policy is not None:
        preserve = policy.flag("preserveResourcesOnDeletion")
        sync = policy.text("applicationsSync", "sync") or "sync"
        if sync not in APPLICATIONS_SYNC:
            policy.error("applicationsSync", f"{sync!r} is not one of {', '.join(APPLICATIONS_SYNC)}")
    template = _template(spec.child("template", _TEMPLATE, required=True))
    patch = spec.text("templatePatch")
    if patch and not go:
        spec.error("templatePatch", "needs goTemplate: true (as in Argo CD)")
    gens = spec.children("generators", generators.GENERATOR_KEYS)
    if "generators" not in spec.data:  # `generators: []` generates nothing, as in Argo CD
        spec.error("generators", "required field is missing")
    for node in gens:
        generators.validate(node)
    if len(top.errs.items) > before or template is None:
        return None
    return ApplicationSet(name=name, origin=top.errs.origin, generators=tuple(dict(n.data) for n in gens),
                          template=template, template_patch=patch, go_template=go,
                          go_template_options=options, preserve_resources_on_deletion=preserve,
                          applications_sync=sync)


def _template(node: Node | None) -> dict[str, Any] | None:
    if node is None:
        return None
    meta = node.child("metadata", _TEMPLATE_META)
    if meta is not None:
        meta.text("name")
    spec = node.get("spec", (dict,), "a mapping")
    return {"metadata": dict(node.data.get("metadata") or {}), "spec": dict(spec or {})}
