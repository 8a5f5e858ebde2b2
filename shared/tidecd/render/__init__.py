"""Rendering: from a repository checkout and an app's source to its desired manifests.

The tool is chosen as Argo CD chooses it: an explicit `helm`, `kustomize` or `directory` block wins;
otherwise a kustomization file means kustomize, a `Chart.yaml` means helm (when both are present Argo
CD's discovery ends on kustomize, and so do we), anything else is a directory of manifests. Before any
file is read the checkout is checked for symlinks leaving it and the app path must stay inside it.
Every result is checked the same way: each object has `apiVersion`, `kind` and `metadata.name`, and no
object is declared twice. A rendered revision is stored under `manifests/` and never rendered again.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import structlog

from tidecd.base import limits
from tidecd.base.errors import ConfigError, LimitExceeded, RenderError, UnsafePathError
from tidecd.base.model import Manifest
from tidecd.base.paths import check_tree, inside
from tidecd.clients import metrics
from tidecd.clients.store import ObjectStore, PreconditionFailed
from tidecd.config.load import ApplicationSource, DirectorySpec
from tidecd.render.buildenv import BuildEnv
from tidecd.render.confine import KustomizeChart, RemoteBase, RemoteRef, confine, parse_remote, rewrite_entries
from tidecd.render.directory import render_directory
from tidecd.render.documents import Document, check
from tidecd.render.helm import Dependencies, is_chart, render_helm
from tidecd.render.kustomize import is_kustomization, render_kustomize
from tidecd.render.overrides import SourceOverride, apply, read_source_files
from tidecd.render.tool import one_render, rendering, report_sandbox

__all__ = ["BuildEnv", "Dependencies", "KustomizeChart", "RemoteBase", "RemoteRef", "Tool", "choose_tool",
           "is_kustomization", "kustomize_app_dir", "kustomize_charts", "manifest_key", "parse_remote", "remote_bases",
           "render", "render_cached", "rewrite_entries"]

log = structlog.get_logger("tidecd.render")
CACHE_FORMAT = 3  # bump when the stored shape or the rendering rules change (3: the destination's capabilities)
_STORE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class Tool(enum.StrEnum):
    DIRECTORY = "Directory"
    KUSTOMIZE = "Kustomize"
    HELM = "Helm"


def render(checkout: Path, source: ApplicationSource, *, app_name: str, namespace: str,
           override: SourceOverride | None = None, value_refs: Mapping[str, Path] | None = None,
           build_env: BuildEnv | None = None, dependencies: Dependencies | None = None,
           charts: Mapping[str, Path] | None = None) -> list[Manifest]:
    """The app's desired objects, in the tool's (stable) output order.

    The app path's `.argocd-source*.yaml` files and then `override` (the image updater's `argocd`
    write-back) are applied to the source first (`render.overrides`). `value_refs` are the checkouts of a
    multi-source app's `ref` sources, for helm value files written `$<ref>/<path>`. `build_env` carries
    the project and this source's resolved revision; completed with the app's name, the destination
    namespace and the source's repoURL, path and targetRevision, it is Argo CD's build environment, which
    the tools substitute where Argo CD does (`render.buildenv`). `dependencies` complete a helm chart
    committed without its `charts/` (`render.helm.Dependencies`); `charts` are the fetched charts of a
    kustomization's `helmCharts` (`kustomize_charts`), by `KustomizeChart.target`.

    The time it takes counts against `TIDECD_MAX_RENDER_SECONDS`, with every other `render` call of the
    same `render_cached` render (a multi-source app's sources): a LimitExceeded names the file or tool
    run that was going on when it ran out (`render.tool`).
    """
    with rendering():
        return _render(checkout, source, app_name=app_name, namespace=namespace, override=override,
                       value_refs=value_refs, build_env=build_env, dependencies=dependencies, charts=charts)


def _render(checkout: Path, source: ApplicationSource, *, app_name: str, namespace: str,
            override: SourceOverride | None, value_refs: Mapping[str, Path] | None,
            build_env: BuildEnv | None, dependencies: Dependencies | None,
            charts: Mapping[str, Path] | None = None) -> list[Manifest]:
    env = (build_env or BuildEnv()).complete(app_name=app_name, namespace=namespace, repo_url=source.repo_url,
                                            path=source.path, target_revision=source.target_revision)
    if source.chart:
        raise RenderError(
            f"spec.source.chart {source.chart!r}: charts from helm repositories are not supported; "
            "commit the chart to git and point spec.source.path at it"
        )
    report_sandbox()  # once per process: whether tools get a network namespace, or only the checks guard
    check_tree(checkout)
    app_dir = inside(checkout, source.path or ".", what="spec.source.path")
    label = posixpath.normpath(source.path or ".")
    if not app_dir.is_dir():
        raise RenderError(f"spec.source.path {source.path!r} is not a directory in the repository")
    tool = choose_tool(app_dir, source)
    for where, from_file in read_source_files(app_dir, app_name, label):
        source = apply(source, tool.value, from_file, replace=True, what=where)
    source = apply(source, tool.value, override, replace=False)
    return check(_render_documents(checkout, app_dir, label, source, app_name=app_name, namespace=namespace,
                                   value_refs=value_refs, build_env=env, dependencies=dependencies,
                                   charts=charts))


def _render_documents(
    checkout: Path, app_dir: Path, label: str, source: ApplicationSource, *, app_name: str, namespace: str,
    build_env: BuildEnv, value_refs: Mapping[str, Path] | None = None, dependencies: Dependencies | None = None,
    charts: Mapping[str, Path] | None = None,
) -> list[Document]:
    tool = choose_tool(app_dir, source)
    if tool is Tool.HELM:
        return render_helm(checkout, label, app_dir, source.helm, app_name=app_name, namespace=namespace,
                           value_refs=value_refs, build_env=build_env, dependencies=dependencies)
    if tool is Tool.KUSTOMIZE:
        return render_kustomize(checkout, app_dir, source.kustomize, label=label, build_env=build_env, charts=charts)
    return render_directory(app_dir, source.directory or DirectorySpec(), label=label, checkout=checkout,
                            build_env=build_env)


def kustomize_charts(checkout: Path, source: ApplicationSource) -> list[KustomizeChart]:
    """The charts a kustomize source's `helmCharts` would make kustomize pull (argocd-cm enables helm):
    the step fetches them as chart snapshots and passes them to `render` as `charts`."""
    app_dir = kustomize_app_dir(checkout, source)
    return [] if app_dir is None else confine(checkout, app_dir, helm=True)


def kustomize_app_dir(checkout: Path, source: ApplicationSource) -> Path | None:
    """The source's directory when it renders with kustomize; None otherwise (or when `render` will refuse
    its path, naming the field)."""
    try:
        app_dir = inside(checkout, source.path or ".", what="spec.source.path")
    except UnsafePathError:
        return None
    if not app_dir.is_dir() or choose_tool(app_dir, source) is not Tool.KUSTOMIZE:
        return None
    return app_dir


def remote_bases(tree: Path, directory: Path) -> list[RemoteBase]:
    """The remote git bases the kustomizations reached from `directory` name (kustomize would clone them),
    every other entry checked to stay inside `tree` (`render.confine`): the step fetches them within the
    project's sourceRepos, places them in a private copy of `tree` and rewrites the entries to them."""
    found: list[RemoteBase] = []
    confine(tree, directory, helm=True, remotes=found)
    return found


def choose_tool(app_dir: Path, source: ApplicationSource) -> Tool:
    explicit = [
        tool
        for tool, spec in ((Tool.HELM, source.helm), (Tool.KUSTOMIZE, source.kustomize),
                           (Tool.DIRECTORY, source.directory))
        if spec is not None
    ]
    if len(explicit) > 1:
        names = ", ".join(t.name.lower() for t in explicit)
        raise RenderError(f"spec.source: more than one source type given ({names}); keep one")
    if explicit:
        return explicit[0]
    if is_kustomization(app_dir):
        return Tool.KUSTOMIZE
    if is_chart(app_dir):
        return Tool.HELM
    return Tool.DIRECTORY


def manifest_key(app_name: str, sha: str, source: ApplicationSource, namespace: str,
                 override: SourceOverride | None = None, build_env: BuildEnv | None = None) -> str:
    """`manifests/<app>/<sha>-<hash>.json`; the hash covers the source spec, destination namespace, image
    override and build environment (its project: a moved app renders `$ARGOCD_APP_PROJECT_NAME` anew; the
    destination's version and API versions: a CRD installed, or an upgraded cluster, renders helm anew)."""
    for what, value in (("application name", app_name), ("revision", sha)):
        if not _STORE_NAME.match(value):
            raise ConfigError(f"{what} {value!r} cannot name a cache entry")
    fields = {"source": source.spec_hash(), "namespace": namespace, "format": CACHE_FORMAT,
              "build": (build_env or BuildEnv()).digest()}
    if override:
        fields["override"] = override.digest()
    text = json.dumps(fields)
    return f"manifests/{app_name}/{sha}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"


def cached_manifests(store: ObjectStore, app_name: str, sha: str, source: ApplicationSource, *, namespace: str,
                     override: SourceOverride | None = None,
                     build_env: BuildEnv | None = None) -> list[Manifest] | None:
    """The manifests `render_cached` stored for exactly these inputs, or None when there are none (never
    rendered, an older format, corrupt, or refused: a stored refusal is the step's to report). Readers
    other than the step (the image updater) use this, so they find the entry by the same key the step
    wrote it under."""
    blob = store.read(manifest_key(app_name, sha, source, namespace, override, build_env))
    try:
        return _decode(blob.data) if blob is not None else None
    except (LimitExceeded, UnsafePathError):
        return None


def render_cached(
    store: ObjectStore,
    app_name: str,
    sha: str,
    source: ApplicationSource,
    render_fn: Callable[[], list[Manifest]],
    *,
    namespace: str,
    override: SourceOverride | None = None,
    build_env: BuildEnv | None = None,
) -> list[Manifest]:
    """The manifests of this revision from the store, calling `render_fn` only the first time.

    An entry carries the SHA-256 of its manifests: a corrupt one is detected and rendered again. A
    refusal that the content alone decides (over a limit, a path leaving the checkout) is stored too, with
    the limits in force, and raised again without rendering: the same input fails the same way, so a
    hostile revision costs one render, not one per trigger. Changing a limit renders it again. That holds
    for the render's time and memory limits too (`TIDECD_MAX_RENDER_SECONDS`, `..._MEMORY_BYTES`): all
    the `render.render` calls of `render_fn` share one time budget, and a render refused for taking too
    long is not tried again for the same input and limits, even though a less loaded machine might have
    made it: the limit is there so that a revision does not cost it on every trigger.
    `build_env` is the one `render_fn` renders with: it is part of the key.
    """
    key = manifest_key(app_name, sha, source, namespace, override, build_env)
    blob = store.read(key)
    if blob is not None and (cached := _decode(blob.data)) is not None:
        return cached
    try:
        with metrics.timed("render"), one_render():
            manifests = render_fn()
    except (LimitExceeded, UnsafePathError) as exc:
        kind = "LimitExceeded" if isinstance(exc, LimitExceeded) else "UnsafePathError"  # subclasses too
        refusal = {"format": CACHE_FORMAT, "refused": {"type": kind, "message": str(exc)},
                   "limits": _limits_key()}
        with contextlib.suppress(PreconditionFailed):
            store.write(key, json.dumps(refusal).encode(), if_generation_match=blob.generation if blob else 0)
        raise
    raw = json.dumps(manifests, separators=(",", ":")).encode()
    data = _HEADER % (CACHE_FORMAT, hashlib.sha256(raw).hexdigest().encode()) + raw + b"}"
    with contextlib.suppress(PreconditionFailed):  # another call stored the same revision meanwhile
        store.write(key, data, if_generation_match=blob.generation if blob else 0)
    return manifests


_HEADER = b'{"format":%d,"sha256":"%s","manifests":'
_CHECKED = re.compile(rb'^\{"format":(\d+),"sha256":"([0-9a-f]{64})","manifests":')


def _limits_key() -> dict[str, int]:
    return asdict(limits.current()) | asdict(limits.render_limits())


def _decode(data: bytes) -> list[Manifest] | None:
    """The cached manifests, or None for an entry we cannot use (corrupt, or an older format). A stored
    refusal is raised again while the limits are the ones it was decided under."""
    if (match := _CHECKED.match(data)) and (
            not data.endswith(b"}") or hashlib.sha256(data[match.end():-1]).hexdigest().encode() != match[2]):
        log.warning("manifest cache entry corrupt (checksum mismatch): rendering again")
        return None
    try:
        payload: Any = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(payload, dict) or payload.get("format") != CACHE_FORMAT:
        return None
    refused = payload.get("refused")
    if isinstance(refused, dict) and payload.get("limits") == _limits_key():
        error = LimitExceeded if refused.get("type") == "LimitExceeded" else UnsafePathError
        raise error(str(refused.get("message", "")))
    manifests = payload.get("manifests")
    if not isinstance(manifests, list) or not all(isinstance(m, dict) for m in manifests):
        return None
    return manifests
