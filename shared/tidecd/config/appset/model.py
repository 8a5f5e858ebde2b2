"""Reading an `ApplicationSet` document (argoproj.io/v1alpha1) strictly: every problem names the file, the
object and the dotted field, as for Applications (`tidecd.config.schema`).

Supported: `spec.generators` (list, clusters, git directories/files, matrix, merge, pullRequest with
github), `spec.template`, `spec.templatePatch`, `spec.goTemplate`, `spec.goTemplateOptions`,
`spec.syncPolicy.preserveResourcesOnDeletion`, `spec.syncPolicy.applicationsSync` and `spec.strategy`
(`AllAtOnce`, or `RollingSync` with its steps, `maxUpdate` and `defaultPrune`: `config.appset.rolling`;
`deletionOrder: Reverse` removes the apps of a deleted RollingSync ApplicationSet step by step, the last
first, as Argo CD does; with AllAtOnce it changes nothing, as in Argo CD). Read and ignored:
`status`, `preservedFields`, `ignoreApplicationDifferences`, `applyNestedSelectors` (tidecd applies
nested selectors always). Refused by name ("not implemented by tidecd"): the other generators
(scmProvider, clusterDecisionResource, plugin).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tidecd.config.appset.rolling import OPERATORS, Expression, Step
from tidecd.config.schema import Keys, Node

if TYPE_CHECKING:
    from tidecd.config.appset.template import Renderer

APPLICATIONS_SYNC = ("create-only", "create-update", "create-delete", "sync")

_TOP = Keys(("apiVersion", "kind", "metadata", "spec", "status"))
_METADATA = Keys(("name", "namespace", "labels", "annotations", "finalizers", "uid", "resourceVersion",
                   "generation", "creationTimestamp", "managedFields"))
_SPEC = Keys(("generators", "template", "templatePatch", "goTemplate", "goTemplateOptions", "syncPolicy",
               "preservedFields", "ignoreApplicationDifferences", "applyNestedSelectors", "strategy"))
_SYNC_POLICY = Keys(("preserveResourcesOnDeletion", "applicationsSync"))
_STRATEGY = Keys(("type", "rollingSync", "deletionOrder"))
_ROLLING = Keys(("steps", "defaultPrune"))
_STEP = Keys(("matchExpressions", "maxUpdate"))
_EXPRESSION = Keys(("key", "operator", "values"))
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
    rolling_steps: tuple[Step, ...] | None = None  # None: AllAtOnce; RollingSync: its steps, in order
    default_prune: bool = False  # RollingSync `defaultPrune`: its syncs prune
    reverse_deletion: bool = False  # RollingSync with `deletionOrder: Reverse`: removed step by step, last first

    @property
    def label(self) -> str:
        return f"ApplicationSet/{self.name}"

    def spec_hash(self) -> str:
        """What the generated documents follow from; `preserveResourcesOnDeletion` decides their finalizer, and
        the version tag re-evaluates records written before generated apps had Argo CD's finalizer."""
        text = json.dumps([self.generators, self.template, self.template_patch, self.go_template,
                           self.go_template_options, self.applications_sync, self.preserve_resources_on_deletion,
                           "finalizer-1", "rolling-enabled-1", self.rolling_steps is not None],
                          sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def renderer(self) -> Renderer:
        from tidecd.config.appset.template import Renderer  # lazy: cold start (as in `parse_application_set`)

        return Renderer(self.go_template, self.go_template_options)


def parse_application_set(top: Node) -> ApplicationSet | None:
    """The ApplicationSet of one document; errors go to `top.errs` (None when there are any)."""
    # Every config load and cache decode imports this module for the type; only ApplicationSets need these.
    # lazy: cold start (the generators and templates only for a config with ApplicationSets)
    from tidecd.config.appset import generators
    from tidecd.config.appset.gotemplate import TemplateError
    from tidecd.config.appset.template import Renderer

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
    strategy = spec.child("strategy", _STRATEGY)
    steps, default_prune = _strategy(strategy)
    reverse = steps is not None and strategy is not None and strategy.data.get("deletionOrder") == "Reverse"
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
                          applications_sync=sync, rolling_steps=steps, default_prune=default_prune,
                          reverse_deletion=reverse)


def _strategy(node: Node | None) -> tuple[tuple[Step, ...] | None, bool]:
    """`spec.strategy`: (None, False) for AllAtOnce, else RollingSync's steps and `defaultPrune`."""
    if node is None:
        return None, False
    kind = node.text("type", "AllAtOnce") or "AllAtOnce"
    order = node.text("deletionOrder", "AllAtOnce") or "AllAtOnce"
    if order not in ("AllAtOnce", "Reverse"):
        node.error("deletionOrder", f"{order!r} is not one of AllAtOnce, Reverse")
    rolling = node.child("rollingSync", _ROLLING)
    if kind == "AllAtOnce":
        return None, False
    if kind != "RollingSync":
        node.error("type", f"{kind!r} is not one of AllAtOnce, RollingSync")
        return None, False
    if rolling is None:
        node.error("rollingSync", "required field is missing (type RollingSync)")
        return (), False
    steps = []
    for step in rolling.children("steps", _STEP):
        expressions = []
        for expr in step.children("matchExpressions", _EXPRESSION):
            operator = expr.text("operator", required=True)
            if operator and operator not in OPERATORS:
                expr.error("operator", f"{operator!r} is not one of {', '.join(OPERATORS)} (as in Argo CD)")
            expressions.append(Expression(expr.text("key", required=True), operator, expr.texts("values")))
        steps.append(Step(tuple(expressions), _max_update(step)))
    return tuple(steps), rolling.flag("defaultPrune")


def _max_update(step: Node) -> int | str | None:
    value = step.get("maxUpdate", (int, str), "an integer or a percent such as 10%")
    if isinstance(value, str):
        number = value[:-1] if value.endswith("%") else ""
        if not number.isdigit():
            step.error("maxUpdate", f"{value!r} is neither an integer nor a percent such as 10%")
            return None
    elif isinstance(value, int) and value < 0:
        step.error("maxUpdate", "must not be negative")
        return None
    return value


def _template(node: Node | None) -> dict[str, Any] | None:
    if node is None:
        return None
    meta = node.child("metadata", _TEMPLATE_META)
    if meta is not None:
        meta.text("name")
    spec = node.get("spec", (dict,), "a mapping")
    return {"metadata": dict(node.data.get("metadata") or {}), "spec": dict(spec or {})}
