"""One evaluation of an ApplicationSet: generators → parameter sets → Application documents.

`expand` renders the template for each parameter set (the generator's own `template` merged over the
ApplicationSet's, then `templatePatch`) and returns the Application documents by name, each with the
generator that produced it as its origin. A problem sets aside only what it concerns: a parameter set whose
rendering fails, a name generated twice (every app of that name, as Argo CD's validateGeneratedApplications
does), an app whose destination names no known cluster (as Argo CD's GetDestinationCluster refuses it), each
reported with the dotted field; a generator
that fails (an unreachable repository, a bad file) fails the whole evaluation, and the caller keeps what
was generated before (Argo CD keeps the Applications of an ApplicationSet in error).

A `templatePatch` is rendered from generator parameters (a file in git, a pull request's branch), so it
may not change the generated app's `spec.project`: Argo CD does not support `spec.project` in a
templatePatch (its applyTemplatePatch puts the template's project back silently) and its API refuses a
templated project. The app whose patch would move it to another project is set aside with an error naming
the ApplicationSet and the field (a deliberate difference: the rest of such a patch is not applied
unnoticed); its destination is then checked against the template's project like any app's (`project.rules`
at reconcile).

Under RollingSync a generated app's `automated` sync is written `enabled: false`, as Argo CD writes it.

`apply_policy` applies `syncPolicy.applicationsSync` to the new evaluation and the previous one:
create-only keeps every existing app as it was, create-update never removes, create-delete never updates,
sync (the default) does all three.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidecd.base.constants import ARGO_VERSION, ARGOCD_RESOURCES_FINALIZER
from tidecd.config.appset.generators import IN_CLUSTER, ClusterInfo, Evaluator, GeneratorError, Params, Sources
from tidecd.config.appset.gotemplate import TemplateError
from tidecd.config.appset.model import ApplicationSet
from tidecd.config.appset.template import Renderer, apply_patch, merge
from tidecd.config.model import DNS_NAME


@dataclass(frozen=True)
class Generated:
    name: str
    doc: dict[str, Any]  # an Application document, as if written in the config source
    generator: str  # e.g. "spec.generators[0].git: git directory apps/web at 1a2b3c4d5e6f"


@dataclass
class Expansion:
    apps: dict[str, Generated] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # each names the file, the ApplicationSet and the field
    failed: bool = False  # a generator failed: keep what was generated before


def expand(appset: ApplicationSet, sources: Sources) -> Expansion:
    out = Expansion()
    renderer = appset.renderer()
    evaluator = Evaluator(sources, renderer)
    where = f"{appset.origin}: {appset.label}"
    seen: dict[str, str] = {}
    known: list[list[ClusterInfo]] = []

    def clusters() -> list[ClusterInfo]:  # read once, and only if an app names a cluster other than the local one
        if not known:
            known.append(sources.clusters())
        return known[0]

    evaluated: list[tuple[str, list[Params]]] = []
    for index, gen in enumerate(appset.generators):
        path = f"spec.generators[{index}]"
        try:
            evaluated.append((path, evaluator.run(gen, path)))
        except (GeneratorError, TemplateError) as exc:
            out.errors.append(f"{where}: {exc}")
            out.failed = True
    everything = [p for _, found in evaluated for p in found]
    try:  # every string of every parameter set in one helper run; the loop below looks them up
        renderer.prefetch([(_template(appset, p), p.values) for p in everything]
                          + [(appset.template_patch, p.values) for p in everything if appset.template_patch])
    except TemplateError as exc:
        out.errors.append(f"{where}: spec.template: {exc}")
        out.failed = True
        return out
    for path, found in evaluated:
        for params in found:
            label = f"{path} ({params.origin})"
            try:
                doc = _application(appset, params, renderer)
            except TemplateError as exc:
                out.errors.append(f"{where}: {label}: {exc}")
                continue
            name = (doc.get("metadata") or {}).get("name")
            if not isinstance(name, str) or not DNS_NAME.fullmatch(name):
                shown = repr(name)[:80] if isinstance(name, str) else "missing"
                out.errors.append(f"{where}: {label}: spec.template.metadata.name: rendered name {shown} is not a "
                                  "valid Application name")
                continue
            if name in seen:  # Argo CD's validateGeneratedApplications: errors by name, so both go
                if name in out.apps:
                    del out.apps[name]
                    out.errors.append(f"{where}: {seen[name]}: spec.template.metadata.name: {name!r} is generated "
                                      f"again by {label}: every app of that name is set aside (as in Argo CD)")
                continue
            seen[name] = label
            try:
                problem = _destination_problem(doc["spec"].get("destination"), clusters)
            except GeneratorError as exc:  # the cluster Secrets cannot be read: keep what was generated before
                out.errors.append(f"{where}: {exc}")
                out.failed = True
                return out
            if problem:
                out.errors.append(f"{where}: {label}: spec.template.spec.destination: {problem}; this app is set "
                                  "aside (as in Argo CD)")
                continue
            doc["metadata"].pop("namespace", None)  # Argo CD's `argocd`: not a destination
            out.apps[name] = Generated(name, doc, label)
    return out


def _application(appset: ApplicationSet, params: Params, renderer: Renderer) -> dict[str, Any]:
    """One parameter set's Application document: the template rendered, then the finalizer, the templatePatch
    and the RollingSync hold applied in Argo CD's order. Raises TemplateError."""
    rendered = renderer.value(_template(appset, params), params.values, "spec.template")
    assert isinstance(rendered, dict)
    meta = rendered.get("metadata")
    doc: dict[str, Any] = {"apiVersion": ARGO_VERSION, "kind": "Application",
                           "metadata": copy.deepcopy(meta) if isinstance(meta, dict) else {},
                           "spec": copy.deepcopy(rendered.get("spec") or {})}
    _finalizer(doc, appset, params.values)
    if appset.template_patch:
        doc = _patched(doc, appset, params.values, renderer)
    _rolling_hold(doc, appset)
    return doc


def _destination_problem(destination: Any, clusters: Callable[[], list[ClusterInfo]]) -> str:
    """Why Argo CD's validateGeneratedApplications (GetDestinationCluster) refuses a generated app's destination,
    or "": exactly one of `server` (a known cluster's URL, trailing '/' ignored, or the local cluster's) and
    `name` (one known cluster's name, or `in-cluster` when no Secret takes that name)."""
    dest = destination if isinstance(destination, dict) else {}
    server, name = str(dest.get("server") or ""), str(dest.get("name") or "")
    if server and name:
        return f"names both a server ({server!r}) and a cluster name ({name!r})"
    if not server and not name:
        return "names no server and no cluster name"
    if server:
        wanted = server.rstrip("/")
        if wanted == IN_CLUSTER[1] or any(c.server.rstrip("/") == wanted for c in clusters()):
            return ""
        return f"no cluster has the server {server!r} (add its cluster Secret to the config source)"
    servers = {c.server.rstrip("/") for c in clusters() if c.name == name}
    if not servers and name == IN_CLUSTER[0]:
        return ""
    if len(servers) > 1:
        return f"{len(servers)} clusters are named {name!r}"
    return "" if servers else f"no cluster is named {name!r} (add its cluster Secret to the config source)"


def _finalizer(doc: dict[str, Any], appset: ApplicationSet, params: dict[str, Any]) -> None:
    """Argo CD's RenderTemplateParams gives a generated app `resources-finalizer.argocd.argoproj.io` when its
    template names no finalizer and `preserveResourcesOnDeletion` is off, so removing the app (no longer
    generated, or its ApplicationSet deleted) deletes its objects. Like Argo CD, an empty parameter set
    returns the template as written (no finalizer added); a templatePatch, applied after, may change it."""
    if appset.preserve_resources_on_deletion or not params or doc["metadata"].get("finalizers"):
        return
    doc["metadata"]["finalizers"] = [ARGOCD_RESOURCES_FINALIZER]


def _rolling_hold(doc: dict[str, Any], appset: ApplicationSet) -> None:
    """Under RollingSync, Argo CD writes a generated app whose automated sync is on with `automated.enabled:
    false` (its prune and the rest kept): the strategy's steps start its syncs instead."""
    policy = doc["spec"].get("syncPolicy")
    automated = policy.get("automated") if isinstance(policy, dict) else None
    if appset.rolling_steps is not None and isinstance(automated, dict) and automated.get("enabled") is not False:
        automated["enabled"] = False


def _template(appset: ApplicationSet, params: Params) -> dict[str, Any]:
    return appset.template if params.template is None else merge(appset.template, params.template)


def _patched(doc: dict[str, Any], appset: ApplicationSet, params: dict[str, Any],
             renderer: Renderer) -> dict[str, Any]:
    template = {"metadata": doc["metadata"], "spec": doc["spec"]}
    project = doc["spec"].get("project")
    patched = apply_patch(template, appset.template_patch, params, renderer)
    spec = patched.get("spec")
    after = spec.get("project") if isinstance(spec, dict) else None
    if after != project:
        shown = repr(after)[:80] if after is not None else "nothing"
        raise TemplateError(f"spec.templatePatch: sets spec.project to {shown} (the template's is {project!r}): "
                            "a templatePatch may not change the project (as in Argo CD); this app is set aside")
    return {"apiVersion": ARGO_VERSION, "kind": "Application", "metadata": patched.get("metadata") or {},
            "spec": patched.get("spec") or {}}


def apply_policy(policy: str, new: dict[str, dict[str, Any]], old: dict[str, dict[str, Any]]) -> tuple[
        dict[str, dict[str, Any]], set[str]]:
    """(the apps to keep, by name → entry, and the names to delete) under `applicationsSync`.

    Entries are the stored form: {"doc": ..., "generator": ...}."""
    may_update = policy in ("sync", "create-update")
    may_delete = policy in ("sync", "create-delete")
    kept: dict[str, dict[str, Any]] = {}
    for name, entry in new.items():
        kept[name] = entry if name not in old or may_update else old[name]
    removed = {n for n in old if n not in new}
    if not may_delete:
        kept.update({n: old[n] for n in removed})
        removed = set()
    return kept, removed
