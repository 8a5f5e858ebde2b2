"""Chart sources (helm repositories and OCI registries) as snapshots, the way git commits are.

`resolve` turns an app's source into a `ChartRef`: the chart, the version its `targetRevision` selects,
and the digest that pins it (the index's archive digest, or the OCI manifest digest). The version is the
app's revision in status and history, as in Argo CD; rollback re-syncs it. The archive is fetched once,
verified, and kept in the object store at `snapshots/<repo-key>/charts/<name>-<version>-<digest>.tgz`;
every later render of that version reads it from there. Chart dependencies the archive lacks are fetched
into it first (`source.dependencies`, what `helm dependency build` does), so `helm template` then renders
the extracted chart with no network, exactly as a chart committed to git.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tidecd.base.errors import RenderError, SourceRefused, TidecdError
from tidecd.clients.store import ObjectStore, PreconditionFailed
from tidecd.config.load import ApplicationSource, repo_key
from tidecd.source import helmrepo, oci

if TYPE_CHECKING:
    from tidecd.source.git import RepoCredentials

GIT, HELM, OCI = "git", "helm", "oci"
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def kind_of(source: ApplicationSource) -> str:
    """`oci` for oci:// (or schemeless + chart) sources, `helm` for a chart from a repository, else `git`."""
    if oci.is_oci(source.repo_url, source.chart):
        return OCI
    return HELM if source.chart else GIT


@dataclass(frozen=True)
class ChartRef:
    kind: str
    repo_url: str  # the repository (helm) or the OCI repository of the chart/artifact
    name: str
    version: str  # what `targetRevision` selected: the app's revision
    digest: str  # sha256 hex: helm archive digest ("" when the index has none) or OCI manifest digest
    chart: bool = True  # False: a plain OCI artifact of manifests

    @property
    def cache_revision(self) -> str:
        """A store-safe name of this exact content (version and digest), for the manifest cache."""
        return _SAFE.sub("_", f"{self.version}-{self.digest.removeprefix('sha256:')[:16] or 'nodigest'}")


def oci_ref(source: ApplicationSource) -> oci.OciRef:
    return oci.parse(source.repo_url, source.chart if "://" not in source.repo_url else "")


def list_refs(kind: str, repo_url: str, credentials: RepoCredentials | None, chart: str = "", *,
              store: ObjectStore | None = None) -> dict[str, str]:
    """What the poll remembers of a chart repository: one index (helm) or tags (OCI) call. With a `store`,
    a helm index is parsed once per content across processes (`helmrepo.fetch_index`)."""
    if kind == HELM:
        return helmrepo.refs_of(helmrepo.fetch_index(repo_url, credentials, store=store))
    registry = oci.Registry(oci.parse(repo_url, chart), credentials, plain_http=_force_http(credentials))
    return {tag: tag for tag in registry.tags()}


def resolve_from_refs(source: ApplicationSource, refs: dict[str, str]) -> str | None:
    """The version (helm) or tag (OCI) `targetRevision` selects among remembered refs; None if none."""
    # lazy: cold start (semver only when a chart version is chosen: a git-only poll never loads it)
    from tidecd.source.versions import BadConstraint, best_version

    try:
        if kind_of(source) == HELM:
            prefix = f"{source.chart}@"
            versions = [k[len(prefix):] for k in refs if k.startswith(prefix)]
            best = best_version(versions, source.target_revision)
            return f"{best}:{refs[prefix + best]}" if best else None
        return oci.resolve_tag(list(refs), source.target_revision, source.repo_url)
    except (BadConstraint, ValueError, LookupError, TidecdError):
        return None


def resolve(source: ApplicationSource, credentials: RepoCredentials | None, revision: str = "", *,
            store: ObjectStore | None = None) -> ChartRef:
    """The chart (or artifact) and version the source selects now; `revision` (a version from history)
    pins it instead of `targetRevision`. With a `store`, a helm index is parsed once per content across
    processes; without one, once per content in this process (`helmrepo.fetch_index`)."""
    target = revision or source.target_revision
    if kind_of(source) == HELM:
        index = helmrepo.fetch_index(source.repo_url, credentials, store=store)
        entry = helmrepo.choose(index, source.chart, target, source.repo_url)
        return ChartRef(HELM, source.repo_url, entry.name, entry.version, entry.digest)
    ref = oci_ref(source)
    registry = oci.Registry(ref, credentials, plain_http=_force_http(credentials))
    tag = target if target.startswith("sha256:") else None
    if tag is None:
        try:
            registry.manifest(target)  # an exact tag: no tags list needed
            tag = target
        except Exception:  # noqa: BLE001 - not a tag: a constraint over the tags
            tag = oci.resolve_tag(registry.tags(), target, ref.url)
    manifest, digest = registry.manifest(tag)
    is_chart = any(isinstance(d, dict) and d.get("mediaType") == oci.HELM_CHART_LAYER
                   for d in manifest.get("layers", []))
    return ChartRef(OCI, ref.url, ref.name, tag, digest, chart=is_chart)


def _force_http(credentials: RepoCredentials | None) -> bool:
    return bool(credentials is not None and credentials.force_http)


class ChartSnapshots:
    """Chart archives in the object store, fetched and verified at most once per name, version and digest."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    @staticmethod
    def key(ref: ChartRef) -> str:
        return f"snapshots/{repo_key(ref.repo_url)}/charts/{_SAFE.sub('_', ref.name)}-{ref.cache_revision}.tgz"

    def get_or_fetch(self, ref: ChartRef, credentials: RepoCredentials | None = None, *,
                     pass_credentials: bool = False,
                     credentials_for: Callable[[str], RepoCredentials | None] | None = None,
                     permitted: Callable[[str], bool] = lambda _url: False) -> bytes:
        """The stored archive; fetched (verified, dependencies added) and stored the first time. Its
        expanded size (with its dependencies', or all of an artifact's layers) is bounded by
        `TIDECD_MAX_ARCHIVE_BYTES`, counted as it streams: a refusal is a LimitExceeded, nothing stored."""
        key = self.key(ref)
        if (blob := self.store.read(key)) is not None:
            return blob.data
        if ref.kind == HELM:
            entry = helmrepo.ChartVersion(ref.name, ref.version, ref.digest, ())
            index = helmrepo.fetch_index(ref.repo_url, credentials, store=self.store)
            entry = next((v for v in index.get(ref.name, []) if v.version == ref.version), entry)
            if entry.digest != ref.digest:
                raise SourceRefused(f"chart {ref.name} {ref.version}: the index changed its digest; "
                                        "refusing the new archive")
            data = helmrepo.download(ref.repo_url, entry, credentials, pass_credentials=pass_credentials)
        else:
            registry = oci.Registry(oci.parse(ref.repo_url), credentials, plain_http=_force_http(credentials))
            data, digest, _ = oci.fetch(registry, ref.digest)
            if digest != ref.digest:
                raise SourceRefused(f"{ref.repo_url}: manifest digest changed while fetching")
        if ref.chart:
            # lazy: cold start (chart dependencies, ~3 ms: a poll loads this module but never snapshots a chart)
            from tidecd.source.dependencies import with_dependencies

            data = with_dependencies(data, credentials_for or (lambda _url: None), permitted,
                                     what=f"chart {ref.name} {ref.version}")
        with contextlib.suppress(PreconditionFailed):  # a racing caller stored the same verified bytes
            self.store.write(key, data, if_generation_match=0)
        return data


def render_source(source: ApplicationSource, ref: ChartRef, checkout: Path) -> ApplicationSource:
    """The source to render from the extracted archive: the chart's directory (helm packages it under one
    top-level directory), or the artifact's `path`."""
    if not ref.chart:
        return replace(source, chart="")
    tops = [p for p in checkout.iterdir() if p.is_dir() and (p / "Chart.yaml").is_file()]
    if len(tops) != 1:
        raise RenderError(f"chart {ref.name} {ref.version}: the archive holds no single chart directory")
    return replace(source, chart="", path=tops[0].name, directory=None, kustomize=None)
