"""The desired objects of an app: rendered from its sources, unsealed, placed in namespaces, minus argocd-cm's
exclusions. One preamble for the step, the preview and the adoption, so neither can see other objects
than a sync would apply.

The render orchestration (git, chart and multi-source apps) lives here, in step/, rather than in render/:
it needs the source stage (ls-remote, checkouts, chart snapshots), the project's rules, the image
updater's override and the sealing keys, and render/ must stay independent of source/ and project/ (the
pure-stages contract). A Protocol for all of that was more than this move could carry; the seam tests use
is `Render` (a function of runtime, app, revision and warnings), which `Runtime.render` may replace.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import posixpath
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog

from tidecd import render
from tidecd import source as git
from tidecd.base.errors import PermanentError, RenderError, SecretError, UnsafePathError
from tidecd.base.model import Manifest, ResourceKey
from tidecd.base.paths import inside
from tidecd.clients.cluster import KubeCluster, UnknownKind
from tidecd.clients.secrets import unseal
from tidecd.config.argocd_settings import ArgoSettings
from tidecd.config.load import Application, ApplicationSource
from tidecd.generated import records as generated
from tidecd.images.state import render_override as image_override
from tidecd.project import rules
from tidecd.render.overrides import SourceOverride
from tidecd.runtime import Runtime
from tidecd.source import charts, dependencies, submodules
from tidecd.state import app as app_state
from tidecd.step import remotes
from tidecd.sync import hooks, plan

log = structlog.get_logger("tidecd.step.desired")


class Render(Protocol):
    """What the step renders with: (revision, manifests) of `app` at `revision` ("" follows its target);
    multi-source warnings are appended to `warnings`."""

    def __call__(self, runtime: Runtime, app: Application, revision: str = "",
                 warnings: list[str] | None = None) -> tuple[str, list[Manifest]]: ...


class Scopes(Protocol):
    """Whether a kind is namespaced: the cluster's discovery (`KubeCluster`), or a table where no cluster may
    be asked (a fork's preview, `tidecd.usecases.preview`)."""

    def is_namespaced(self, group: str, kind: str) -> bool: ...


@dataclass(frozen=True)
class Desired:
    """The desired objects as a sync applies them."""

    revision: str
    manifests: list[Manifest]
    namespaced: Callable[[str, str], bool]
    excluded: list[ResourceKey] = field(default_factory=list)
    warnings: tuple[str, ...] = ()


def place(cluster: Scopes, settings: ArgoSettings, app: Application, revision: str,
          manifests: list[Manifest], warnings: tuple[str, ...] = ()) -> Desired:
    """Rendered manifests as the sync applies them: namespaces filled in (or dropped for cluster-scoped
    kinds), argocd-cm's excluded kinds left out (and named)."""
    namespaced = scope_lookup(cluster, manifests)
    placed = with_namespaces(namespaced, manifests, app.destination.namespace)
    kept, excluded = without_excluded(settings, app, placed)
    return Desired(revision, kept, namespaced, excluded, warnings)


def desired_of(runtime: Runtime, app: Application, cluster: KubeCluster, revision: str = "") -> Desired:
    """Render and place: the preview's and the adoption's way to the objects a sync would apply."""
    warnings: list[str] = []
    sha, manifests = (runtime_render(runtime))(runtime, app, revision, warnings)
    return place(cluster, runtime.config().argo_settings, app, sha, manifests, tuple(warnings))


def runtime_render(runtime: Runtime) -> Render:
    """The runtime's renderer: a fake source a test passed to the Runtime, else `render_desired`."""
    return runtime.render if runtime.render is not None else render_desired


def render_desired(runtime: Runtime, app: Application, revision: str = "",
                   warnings: list[str] | None = None) -> tuple[str, list[Manifest]]:
    """The observe stage's render: (sha, manifests) of the app at `revision` (default: its targetRevision).

    The one place desired manifests come from; other sources extend this function. Warnings for the
    app's conditions (a multi-source RepeatedResourceWarning) are appended to `warnings`. A multi-source
    app's `revision` is each source's revision joined (`state.joined`; an empty or missing one follows
    that source's targetRevision), and so is the sha it returns (`revisions_of` splits it). An app being
    deleted (`tidecd.generated.records`) desires only its deletion hooks, rendered at its targetRevision
    (as Argo CD renders them): its objects are pruned."""
    if generated.is_deleting(app):
        try:
            manifests = _render_current(runtime, app, "", warnings)[1]
        except PermanentError as exc:  # its source is gone (a retired directory): no hooks to run, objects still go
            log.warning("deleting app: its source no longer renders, deleted without deletion hooks", app=app.name,
                        error=str(exc)[:300])
            return DELETING_REVISION, []
        return DELETING_REVISION, [m for m in manifests if hooks.delete_hook_type(m)]
    return _render_current(runtime, app, revision, warnings)


def _render_current(runtime: Runtime, app: Application, revision: str,
                    warnings: list[str] | None) -> tuple[str, list[Manifest]]:
    if app.sources:
        pinned = app_state.split_revisions(revision) or ([revision] if revision else [])
        sha, manifests, found = _render_multi(runtime, app, pinned)
        if warnings is not None:
            warnings.extend(found)
        return sha, manifests
    sha, manifests = _render_single(runtime, app, revision, image_override(runtime.store, app.name))
    return sha, _unseal(runtime, app, manifests)


def manifests_at(runtime: Runtime, app: Application, revision: str,
                 override: SourceOverride | None) -> list[Manifest]:
    """A single-source app's manifests at `revision` (a commit, or a chart's version) with this image
    override, still sealed: the step's cache entry, or rendered as the step renders it and stored for it. For readers
    besides the step (the image updater, a revert): their cache lookup misses whenever the key's build
    environment moved since the step rendered (a CRD installed changes the served API versions), and a
    miss must not read as "the app uses no such image"."""
    return _render_single(runtime, app, revision, override)[1]


def revisions_of(app: Application, sha: str) -> list[str]:
    """Each source's revision of a multi-source app from what `render_desired` returned ([] otherwise)."""
    return (app_state.split_revisions(sha) or [sha]) if app.sources and sha else []


DELETING_REVISION = "deleting"  # the revision of a generated app being removed


def _render_multi(runtime: Runtime, app: Application,
                  pinned: list[str]) -> tuple[str, list[Manifest], list[str]]:
    """`spec.sources`: every source resolved (a git commit or a chart version each), `ref` sources checked
    out for `$<ref>/...` value files, each renderable source rendered, and the results merged in order:
    an object declared by two sources is taken from the later one, with a RepeatedResourceWarning (as
    Argo CD). The revision returned is each source's revision joined (`state.joined`); a rollback pins
    each source to its revision in `pinned`."""
    resolved: list[tuple[ApplicationSource, Any, str | charts.ChartRef]] = []  # (source, creds, sha | chart)
    for index, source in enumerate(app.sources):
        creds = runtime.repo_credentials(source.repo_url)
        rev = pinned[index] if index < len(pinned) else ""
        if charts.kind_of(source) == charts.GIT:
            sha = rev or git.resolve_revision(git.ls_remote(source.repo_url, creds), source.target_revision,
                                              source.repo_url)
            resolved.append((source, creds, sha))
        else:
            resolved.append((source, creds, charts.resolve(source, creds, rev, store=runtime.store)))
    revisions = [r if isinstance(r, str) else r.version for _, _, r in resolved]
    combined = app_state.joined(revisions)
    key_text = json.dumps([[s.spec_hash(), r if isinstance(r, str) else r.cache_revision] for s, _, r in resolved])
    cache_revision = "multi-" + hashlib.sha256(key_text.encode()).hexdigest()[:40]
    namespace = app.destination.namespace

    permitted = _permitted_by_project(runtime, app)

    def render_now() -> list[Manifest]:
        with tempfile.TemporaryDirectory(prefix="tidecd-render-") as tmp, contextlib.ExitStack() as held:
            trees = []
            for index, (source, creds, rev) in enumerate(resolved):
                root = Path(tmp) / f"source-{index}"
                if isinstance(rev, str):  # a git source: the shared read-only tree of its commit
                    root = held.enter_context(submodules.tree(runtime.store, source.repo_url, rev,
                                                              runtime.repo_credentials, permitted))
                else:
                    pass_credentials = bool(source.helm and source.helm.pass_credentials)
                    git.extract(charts.ChartSnapshots(runtime.store).get_or_fetch(
                        rev, creds, pass_credentials=pass_credentials, credentials_for=runtime.repo_credentials,
                        permitted=permitted), root)
                trees.append(root)
            refs = {s.ref: trees[i] for i, (s, _, _) in enumerate(resolved) if s.ref}
            out: list[Manifest] = []
            for index, (source, _, rev) in enumerate(resolved):
                if not source.rendered:
                    continue
                if not isinstance(rev, str):
                    source = charts.render_source(source, rev, trees[index])
                try:
                    deps = chart_dependencies(runtime, app, source, trees[index]) if isinstance(rev, str) else None
                    tree = remotes.compose(runtime, source, trees[index], Path(tmp) / f"remotes-{index}", permitted)
                    fetched = kustomize_charts(runtime, app, source, tree, Path(tmp) / f"charts-{index}")
                    env = dataclasses.replace(build_env, revision=rev if isinstance(rev, str) else rev.version)
                    out += render.render(tree, source, app_name=app.name, namespace=namespace,
                                         value_refs=refs, dependencies=deps, charts=fetched, build_env=env)
                except RenderError as exc:
                    raise RenderError(f"spec.sources[{index}]: {exc}") from exc
            return out

    build_env = build_env_of(runtime, app, "")
    manifests = render.render_cached(runtime.store, app.name, cache_revision, app.source, render_now,
                                     namespace=namespace, build_env=build_env)
    merged, warnings = merge_sources(manifests)
    return combined, _unseal(runtime, app, merged), warnings


def spec_hash(app: Application) -> str:
    """What an automated sync of a revision records: the source's spec hash (every source's, multi-source)."""
    if not app.sources:
        return app.source.spec_hash()
    return ".".join(s.spec_hash()[:8] for s in app.sources)


def merge_sources(manifests: list[Manifest]) -> tuple[list[Manifest], list[str]]:
    """Later objects replace earlier ones of the same key (in the earlier one's place); one warning each."""
    by_key: dict[ResourceKey, int] = {}
    out: list[Manifest] = []
    warnings: list[str] = []
    for obj in manifests:
        key = ResourceKey.of(obj)
        if not key.name:  # generateName hooks are never the same object
            out.append(obj)
        elif key in by_key:
            out[by_key[key]] = obj
            warnings.append(f"{key} is declared by more than one source; the later source's object is used")
        else:
            by_key[key] = len(out)
            out.append(obj)
    return out, warnings


def _render_single(runtime: Runtime, app: Application, revision: str,
                   override: SourceOverride | None) -> tuple[str, list[Manifest]]:
    """(sha, manifests, still sealed); `override`: the image updater's `argocd` write-back (`image_override`)."""
    if charts.kind_of(app.source) != charts.GIT:
        return _render_chart(runtime, app, revision, override)
    creds = runtime.repo_credentials(app.source.repo_url)
    if revision:
        sha = revision
    else:
        refs = git.ls_remote(app.source.repo_url, creds)
        sha = git.resolve_revision(refs, app.source.target_revision, app.source.repo_url)
    namespace = app.destination.namespace

    def render_now() -> list[Manifest]:
        permitted = _permitted_by_project(runtime, app)
        with submodules.tree(runtime.store, app.source.repo_url, sha, runtime.repo_credentials,
                             permitted) as checkout, \
                tempfile.TemporaryDirectory(prefix="tidecd-charts-") as tmp:  # checked; submodules filled in
            root = remotes.compose(runtime, app.source, checkout, Path(tmp) / "remotes", permitted)
            return render.render(root, app.source, app_name=app.name, namespace=namespace, override=override,
                                 build_env=build_env, dependencies=chart_dependencies(runtime, app, app.source, root),
                                 charts=kustomize_charts(runtime, app, app.source, root, Path(tmp)))

    build_env = build_env_of(runtime, app, sha)  # Argo CD's build environment: project and revision
    manifests = render.render_cached(runtime.store, app.name, sha, app.source, render_now, namespace=namespace,
                                     override=override, build_env=build_env)
    return sha, manifests


def build_env_of(runtime: Runtime, app: Application, revision: str) -> render.BuildEnv:
    """What the repo server is told besides the source: the project, the revision, and the destination's
    version and served API versions (helm's `.Capabilities`, as Argo CD's controller passes them from its
    cluster cache). Discovery is cached per cluster (`KubeCluster.capabilities`), so a step that renders
    from the manifest cache asks nothing more. A runtime that may ask no cluster (a fork's preview)
    renders with helm's pinned default version and no API versions."""
    helm = runtime.config().argo_settings.kustomize_enable_helm
    try:
        cluster = runtime.cluster(app.destination)
    except PermanentError:  # no cluster for this runtime, or an unknown destination (the step names it)
        return render.BuildEnv(app.project, revision, kustomize_helm=helm)
    kube_version, api_versions = cluster.capabilities()
    return render.BuildEnv(app.project, revision, kube_version=kube_version, api_versions=api_versions,
                           kustomize_helm=helm)


def kustomize_charts(runtime: Runtime, app: Application, source: ApplicationSource, root: Path,
                     into: Path) -> dict[str, Path] | None:
    """The charts a kustomize source's `helmCharts` would make kustomize pull (argocd-cm's
    `kustomize.buildOptions: --enable-helm`), fetched by tidecd as chart snapshots from repositories the
    app's project permits and extracted under `into`: `KustomizeChart.target` → the chart's directory."""
    if not runtime.config().argo_settings.kustomize_enable_helm:
        return None
    found: dict[str, Path] = {}
    for index, chart in enumerate(render.kustomize_charts(root, source)):
        _, archive = dependencies.fetch_chart(chart.repo, chart.name, chart.version, runtime.store,
                                              runtime.repo_credentials, _permitted_by_project(runtime, app),
                                              what=chart.where)
        dest = into / f"chart-{index}"
        git.extract(archive, dest)
        tops = [p for p in dest.iterdir() if (p / "Chart.yaml").is_file()]
        if len(tops) != 1:
            raise RenderError(f"{chart.where}: the chart archive holds no single chart directory")
        found[chart.target] = tops[0]
    return found


def chart_dependencies(runtime: Runtime, app: Application, source: ApplicationSource,
                       root: Path) -> render.Dependencies | None:
    """What Argo CD's `helm dependency build` adds to a helm chart committed to git without its `charts/`:
    each dependency given by repository URL fetched as a chart snapshot (only from repositories the app's
    project permits; helm itself fetches nothing), each `file://` one taken from the checkout. None when
    the source renders no such chart (render then refuses what is wrong with it, naming the field)."""
    try:
        app_dir = inside(root, source.path or ".", what="spec.source.path")
        if not (app_dir / "Chart.yaml").is_file() or render.choose_tool(app_dir, source) is not render.Tool.HELM:
            return None
    except (UnsafePathError, RenderError):
        return None
    label = posixpath.normpath(source.path or ".")
    missing = dependencies.missing_in_directory(app_dir, label)
    if not missing:
        return None
    archives = dependencies.fetch_missing(missing, runtime.store, runtime.repo_credentials,
                                          _permitted_by_project(runtime, app), what=f"{label}/Chart.yaml")
    local = tuple((str(d["name"]), str(d["repository"])) for d in missing
                  if str(d.get("repository") or "").startswith("file://"))
    return render.Dependencies(tuple(archives), local)


def _permitted_by_project(runtime: Runtime, app: Application) -> Callable[[str], bool]:
    """Whether the app's project allows fetching from a repository (a chart dependency's)."""
    project = runtime.config().projects[app.project]
    return lambda url: rules.source_permitted(project, url)


def _render_chart(runtime: Runtime, app: Application, revision: str,
                  override: SourceOverride | None) -> tuple[str, list[Manifest]]:
    """A chart from a helm repository or an OCI registry (or a plain OCI artifact): (version, manifests)."""
    creds = runtime.repo_credentials(app.source.repo_url)
    ref = charts.resolve(app.source, creds, revision, store=runtime.store)
    namespace = app.destination.namespace
    pass_credentials = bool(app.source.helm and app.source.helm.pass_credentials)

    def render_now() -> list[Manifest]:
        archive = charts.ChartSnapshots(runtime.store).get_or_fetch(ref, creds, pass_credentials=pass_credentials,
                                                                    credentials_for=runtime.repo_credentials,
                                                                    permitted=_permitted_by_project(runtime, app))
        with tempfile.TemporaryDirectory(prefix="tidecd-render-") as tmp:
            git.extract(archive, Path(tmp))
            source = charts.render_source(app.source, ref, Path(tmp))
            return render.render(Path(tmp), source, app_name=app.name, namespace=namespace, override=override,
                                 build_env=build_env)

    build_env = build_env_of(runtime, app, ref.version)  # Argo CD's build environment: project and revision
    manifests = render.render_cached(runtime.store, app.name, ref.cache_revision, app.source, render_now,
                                     namespace=namespace, override=override, build_env=build_env)
    return ref.version, manifests


def _unseal(runtime: Runtime, app: Application, manifests: list[Manifest]) -> list[Manifest]:
    """SealedSecrets become plain Secrets (target clusters need no controller) unless the app opts out."""
    if app.annotation("tidecd.io/sealed-secrets") == "passthrough":
        return manifests
    sealed = [m for m in manifests if m.get("kind") == "SealedSecret"]
    if not sealed:
        return manifests
    keys = runtime.private_keys()
    if not keys:
        raise SecretError(f"{ResourceKey.of(sealed[0])}: cannot unseal: no sealing key is configured "
                          "(TIDECD_SEALING_KEYS)")
    out = []
    for obj in manifests:
        if obj.get("kind") == "SealedSecret":
            secret = unseal(obj, keys, default_namespace=app.destination.namespace)
            # keep sync annotations of the SealedSecret itself (waves, options)
            notes = {k: v for k, v in plan.annotations_of(obj).items() if k.startswith("argocd.argoproj.io/")}
            if notes:
                secret.setdefault("metadata", {}).setdefault("annotations", {}).update(notes)
            out.append(secret)
        else:
            out.append(obj)
    return out


def without_excluded(settings: ArgoSettings, app: Application,
                     manifests: list[Manifest]) -> tuple[list[Manifest], list[ResourceKey]]:
    """The manifests minus those argocd-cm excludes (Argo CD neither syncs nor prunes them), and their keys."""
    if not settings.exclusions and not settings.inclusions:
        return manifests, []
    cluster = app.destination.server or app.destination.name
    kept, dropped = [], []
    for obj in manifests:
        key = ResourceKey.of(obj)
        if settings.excluded(key.group, key.kind, cluster):
            dropped.append(key)
        else:
            kept.append(obj)
    return kept, sorted(dropped)


def scope_lookup(cluster: Scopes, manifests: list[Manifest]) -> Callable[[str, str], bool]:
    """Whether a (group, kind) is namespaced: from CRDs among the manifests first (their kinds are not
    served until this sync creates them), then from the cluster's discovery."""
    declared: dict[tuple[str, str], bool] = {}
    for obj in manifests:
        if obj.get("kind") == "CustomResourceDefinition":
            spec = obj.get("spec") or {}
            kind = (spec.get("names") or {}).get("kind", "")
            declared[(str(spec.get("group", "")), str(kind))] = bool(spec.get("scope", "Namespaced") == "Namespaced")

    def namespaced(group: str, kind: str) -> bool:
        if (group, kind) in declared:
            return declared[(group, kind)]
        try:
            return cluster.is_namespaced(group, kind)
        except UnknownKind:
            # as Argo CD: a kind the cluster does not serve is not a reason to stop comparing the app; it is
            # placed as namespaced (`with_namespaces`) and its comparison shows it OutOfSync and Missing
            return True

    return namespaced


def with_namespaces(namespaced: Callable[[str, str], bool], manifests: list[Manifest],
                     namespace: str) -> list[Manifest]:
    """Namespaced objects without a namespace go to the destination namespace; cluster-scoped ones lose it."""
    out = []
    for obj in manifests:
        key = ResourceKey.of(obj)
        try:
            is_namespaced = namespaced(key.group, key.kind)
        except UnknownKind:
            is_namespaced = True  # reported by the comparison as a kind the cluster does not serve
        meta = obj.get("metadata") or {}
        if is_namespaced and not meta.get("namespace") and namespace:
            obj = copy.deepcopy(obj)
            obj["metadata"]["namespace"] = namespace
        elif not is_namespaced and meta.get("namespace"):
            obj = copy.deepcopy(obj)
            del obj["metadata"]["namespace"]
        out.append(obj)
    return out
