"""Observe: what the app is (`Target`), what is live (`Listing`), and how the two compare (`Compared`).

Every function here reads the cluster and returns a value; none writes to the cluster or the store. The
comparison is the one the sync decides from: the preview (`usecases.preview`) and the adoption call the same
functions, so neither can see a different difference than a sync would act on. An object's comparison is a
server-side dry-run of tidecd's own apply, cached by the live object's identity (`state.comparison_cache`):
an unchanged object is not dry-run again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from tidecd import health
from tidecd.base import constants, ownership
from tidecd.base.errors import TemporaryError
from tidecd.base.model import HealthStatus, Manifest, ResourceKey, SyncStatus
from tidecd.clients.cluster import ApiError, KubeCluster, UnknownKind, managed_selector
from tidecd.clients.deadlines import in_context
from tidecd.config.load import Application, AppProject, Config
from tidecd.diff import Comparison, ResourceDiff, compare, fingerprint, live_identity
from tidecd.generated.appofapps import ChildCluster
from tidecd.state.app import CachedComparison
from tidecd.step.desired import Desired
from tidecd.step.quiet import live_digest
from tidecd.sync import plan
from tidecd.sync.apply import applied, conflict, explain, namespace_metadata_stale, owned_by, with_ownership
from tidecd.sync.hooks import delete_hook_type

CONCURRENCY = 8  # concurrent cluster calls of one step (dry-runs, applies, gets)

T = TypeVar("T")
R = TypeVar("R")
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def pool() -> ThreadPoolExecutor:
    """The process's pool for a step's concurrent cluster calls (dry-runs, applies, gets), CONCURRENCY
    threads, started once: a pool per call started ~16 threads per step, 0.1 s of a 1 s step on a busy
    machine (cProfile of the 1,000-app scenario). Its tasks never submit to it, so it cannot deadlock."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=CONCURRENCY, thread_name_prefix="tidecd-step")
        return _POOL


def each(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """`fn` over `items` on the step's pool, in order, each in a copy of the step's context: its cluster
    calls keep the step's deadline (`clients.deadlines`), which a pool thread would not otherwise see."""
    return list(pool().map(in_context(fn), items))


@dataclass(frozen=True)
class Target:
    """The app as this step sees it: its spec and project, the settings, the cluster it goes to (the
    app-of-apps view when Applications become child apps) and what it desires, planned."""

    app: Application
    project: AppProject
    config: Config
    cluster: KubeCluster
    children: ChildCluster | None
    desired: Desired
    tasks: tuple[plan.Task, ...] = ()

    @property
    def name(self) -> str:
        return self.app.name

    @property
    def manifests(self) -> list[Manifest]:
        return self.desired.manifests

    @property
    def hook_keys(self) -> set[ResourceKey]:
        """The hooks' keys, the deletion hooks' too: none is one of the app's resources."""
        return {t.key for t in self.tasks if t.hook} | {ResourceKey.of(m) for m in self.manifests
                                                       if delete_hook_type(m)}

    @property
    def health_scripts(self) -> Mapping[str, str]:
        """argocd-cm's Lua health checks (`resource.customizations.health.*`), which come before built-ins."""
        return self.config.argo_settings.health_lua

    @property
    def argocd_marks(self) -> bool:
        """The app opted in to Argo CD's marks beside tidecd's (`tidecd.io/write-argocd-tracking`)."""
        return ownership.writes_argocd_marks(dict(self.app.annotations))

    def excluded_kind(self, key: ResourceKey) -> bool:
        """argocd-cm `resource.exclusions`/`inclusions`: tidecd leaves objects of this kind alone (no prune)."""
        return excluded_kind(self.config, self.app, key)

    def identity(self, live: Manifest) -> str:
        """The comparison cache's key for a live object (`diff.live_identity`)."""
        return identity(self.config, self.app, live)

    def planned(self, naming: plan.HookNaming) -> Target:
        """The target with its tasks: the app's per-object sync options, generateName hooks named by `naming`."""
        tasks = plan.plan(self.manifests, app_options=self.app.sync_policy.sync_options, naming=naming)
        return dataclasses.replace(self, tasks=tuple(tasks))


def excluded_kind(config: Config, app: Application, key: ResourceKey) -> bool:
    destination = app.destination
    return config.argo_settings.excluded(key.group, key.kind, destination.server or destination.name)


def identity(config: Config, app: Application, live: Manifest) -> str:
    rules = config.ignore_differences_of(app)
    return live_identity(live, all_managers=any(rule.managed_fields_managers for rule in rules))


@dataclass(frozen=True)
class Listing:
    """The app's live objects, the kinds listed for them, those the cluster does not serve, and a digest of
    it all (the quiet record's live half)."""

    live: Mapping[ResourceKey, Manifest]
    kinds: tuple[tuple[str, str], ...] = ()
    unserved: tuple[tuple[str, str], ...] = ()
    digest: str = ""


def listing(live: Mapping[ResourceKey, Manifest], kinds: Iterable[tuple[str, str]],
            unserved: Iterable[tuple[str, str]]) -> Listing:
    kinds, unserved = tuple(kinds), tuple(unserved)
    return Listing(dict(live), kinds, unserved, live_digest(live, list(kinds), list(unserved)))


def list_live(cluster: KubeCluster, app: str, desired: Iterable[ResourceKey], inventory: Iterable[ResourceKey],
              excluded: Callable[[ResourceKey], bool]) -> Listing:
    """The app's objects: listed by ownership label per kind, then fetched one by one if unlabelled. Both
    go through the step's pool: an app of 200 new objects made its 200 GETs one after another before its
    sync could start (`bench peers`, "all objects exist"; docs/testing.md)."""
    desired, inventory = list(desired), [k for k in inventory if not excluded(k)]
    kinds = sorted({(k.group, k.kind) for k in desired} | {(k.group, k.kind) for k in inventory})

    def list_kind(kind: tuple[str, str]) -> list[Manifest] | None:
        try:
            return cluster.list(*kind, label_selector=managed_selector(app))
        except UnknownKind:
            return None

    listed = each(list_kind, kinds)
    unserved = [kind for kind, found in zip(kinds, listed, strict=True) if found is None]
    live = {ResourceKey.of(obj): obj for found in listed for obj in found or ()}
    # unlabelled: desired objects not created yet (or someone else's), and inventory objects an older
    # tidecd marked with Argo CD's names (tidecd.base.ownership), which keep their app until the next sync
    unlabelled = read(cluster, [key for key in [*desired, *inventory] if key not in live])
    live.update((key, found) for key, found in unlabelled if found is not None)
    return listing(live, kinds, unserved)


@dataclass(frozen=True)
class Compared:
    """The comparison of desired and live, the comparison cache it leaves, and the objects another owner
    claims (never compared as this app's: a condition names the owner)."""

    comparison: Comparison
    cache: Mapping[str, CachedComparison]
    claimed: tuple[str, ...] = ()


def compare_all(cluster: KubeCluster, app: Application, config: Config, manifests: list[Manifest],
                live: Mapping[ResourceKey, Manifest], *, hooks: frozenset[ResourceKey] = frozenset(),
                cache: Mapping[str, CachedComparison] | None = None) -> Compared:
    """Each desired object against its live one (a dry-run of tidecd's apply, unless the cache knows this
    live object and desired fingerprint), then the app's live objects nothing desires any more, hooks left
    out (`plan.is_hook`: a finished hook an earlier operation named is not extraneous, as in Argo CD)."""
    desired = {ResourceKey.of(m): m for m in plan.resources(manifests)}
    cache = cache or {}
    new_cache: dict[str, CachedComparison] = {}
    rules = config.ignore_differences_of(app)
    ignores = hashlib.sha256(repr(rules).encode()).hexdigest()[:8] if rules else ""
    argocd_marks = ownership.writes_argocd_marks(dict(app.annotations))
    claimed: list[str] = []

    def one(item: tuple[ResourceKey, Manifest]) -> ResourceDiff:
        key, obj = item
        owned = with_ownership(obj, app.name, argocd=argocd_marks)
        current = live.get(key)
        if current is not None and (other := conflict(current, app.name)):
            claimed.append(f"{key}: {other}")
            return ResourceDiff(key, SyncStatus.OUT_OF_SYNC, error=other)
        if current is not None and (remark := ownership.needs_remark(current, app.name, argocd=argocd_marks)):
            return ResourceDiff(key, SyncStatus.OUT_OF_SYNC, ("metadata.annotations",), remark)
        seen = identity(config, app, current) if current is not None else ""
        cache_key, print_ = str(key), fingerprint(owned) + ignores  # a changed ignore rule re-compares
        hit = cache.get(cache_key)
        if current is not None and hit and (hit.fingerprint, hit.live) == (print_, seen):
            new_cache[cache_key] = hit
            return ResourceDiff(key, hit.status, hit.changed, hit.text)
        result = compare_one(cluster, key, owned, current, rules,
                             plan.merged_options(app.sync_policy.sync_options, obj))
        if current is not None and not result.error:
            new_cache[cache_key] = CachedComparison(print_, seen, result.status, tuple(result.changed_paths),
                                                    result.text)
        return result

    results = each(one, sorted(desired.items()))
    for key, obj in sorted(live.items()):
        if key not in desired and key not in hooks and not plan.is_hook(obj) and owned_by(obj, app.name) \
                and not excluded_kind(config, app, key):
            results.append(dataclasses.replace(compare(key, obj, None), ignore_extraneous=_ignores_extraneous(obj)))
    return Compared(Comparison(results), new_cache, tuple(sorted(claimed)))


def compare_one(cluster: KubeCluster, key: ResourceKey, owned: Manifest, current: Manifest | None,
                rules: tuple[Any, ...], options: frozenset[str] = frozenset()) -> ResourceDiff:
    """One object: created when not live, else live against the server's dry-run of the apply (as its sync
    options make it: `Validate=false`)."""
    if current is None:
        return compare(key, None, owned)
    try:
        predicted = applied(cluster, owned, options, dry_run=True)
    except ApiError as exc:
        return ResourceDiff(key, SyncStatus.OUT_OF_SYNC, (".",), error=f"dry-run failed: {explain(exc)}",
                            temporary=isinstance(exc, TemporaryError))
    except UnknownKind as exc:
        return ResourceDiff(key, SyncStatus.OUT_OF_SYNC, (".",), error=f"dry-run failed: {exc}")
    return compare(key, current, predicted, rules)


def comparison_of(cluster: KubeCluster, app: Application, config: Config,
                  manifests: list[Manifest]) -> tuple[Comparison, frozenset[ResourceKey]]:
    """What a sync of `manifests` would change now (no cache, no inventory; new objects dry-run as well): the
    preview's question. A live object no app owns (unmarked, or a copy's stale mark) that `manifests`
    declares would be taken over by a sync; the preview may not show it, so it is neither dry-run nor
    compared: its key comes back apart (`free`), and the comparison holds only objects this app owns,
    objects it would create, and another owner's objects as an error naming that owner."""
    keys = [ResourceKey.of(m) for m in plan.resources(manifests)]
    found = list_live(cluster, app.name, keys, (), lambda key: excluded_kind(config, app, key))
    free = frozenset(key for key, obj in found.live.items()
                     if not owned_by(obj, app.name) and ownership.claim(obj, app.name) is None)
    live = {key: obj for key, obj in found.live.items() if key not in free}
    compared = compare_all(cluster, app, config, [m for m in manifests if ResourceKey.of(m) not in free], live)
    desired = {ResourceKey.of(m): m for m in plan.resources(manifests)}
    argocd = ownership.writes_argocd_marks(dict(app.annotations))

    def dry_run_new(diff: ResourceDiff) -> ResourceDiff:
        """A new object dry-run too, as a sync's first step does: the preview shows admission refusals. A
        namespace or kind the same sync would create first (404) is not a refusal."""
        if not diff.missing or diff.key not in desired:
            return diff
        try:
            applied(cluster, with_ownership(desired[diff.key], app.name, argocd=argocd),
                    plan.merged_options(app.sync_policy.sync_options, desired[diff.key]), dry_run=True)
        except ApiError as exc:
            if exc.status != 404:
                return dataclasses.replace(diff, error=f"dry-run failed: {explain(exc)}",
                                           temporary=isinstance(exc, TemporaryError))
        except UnknownKind:
            pass
        return diff

    return Comparison(list(pool().map(dry_run_new, compared.comparison.resources))), free


def read(cluster: KubeCluster, keys: Iterable[ResourceKey]) -> list[tuple[ResourceKey, Manifest | None]]:
    """The objects as they are now (None: gone, or a kind no longer served), read concurrently."""
    wanted = list(dict.fromkeys(keys))
    if not wanted:
        return []

    def get(key: ResourceKey) -> tuple[ResourceKey, Manifest | None]:
        try:
            return key, cluster.get(key)
        except UnknownKind:
            return key, None

    return each(get, wanted)


def missing_namespaces(cluster: KubeCluster, tasks: Iterable[plan.Task], live: Mapping[ResourceKey, Manifest],
                       create_namespace: str) -> frozenset[str]:
    """Namespaces the desired objects (or CreateNamespace=true) name that do not exist."""
    wanted = {t.key.namespace for t in tasks if t.key.namespace}
    if create_namespace:
        wanted.add(create_namespace)
    missing = set()
    for ns in sorted(wanted):
        key = ResourceKey("", "Namespace", "", ns)
        if key in live:
            continue
        if cluster.get(key) is None:
            missing.add(ns)
    return frozenset(missing)


def namespace_stale(target: Target, namespace: str) -> frozenset[ResourceKey]:
    """CreateNamespace=true's namespace, when it exists and the app's `managedNamespaceMetadata` does not
    hold on it (`sync.apply.namespace_metadata_stale`); else nothing. Not read when the app sets no metadata,
    nor when the namespace is one of the app's own objects (git's Namespace wins: Argo CD creates none)."""
    policy = target.app.sync_policy
    labels, annotations = dict(policy.namespace_labels), dict(policy.namespace_annotations)
    key = ResourceKey("", "Namespace", "", namespace)
    if not namespace or not (labels or annotations) \
            or any(t.key == key for t in target.tasks):
        return frozenset()
    return frozenset({key}) if namespace_metadata_stale(target.cluster.get(key), labels, annotations) else frozenset()


def unserved(cluster: KubeCluster, tasks: Iterable[plan.Task]) -> frozenset[tuple[str, str]]:
    """The (group, kind) of desired objects the cluster does not serve now."""
    return frozenset(gk for gk in {(t.key.group, t.key.kind) for t in tasks} if not _served(cluster, *gk))


def settled(live: Manifest | None, scripts: Mapping[str, str]) -> bool:
    """The live object reads Healthy or has no health: reading it again would tell nothing."""
    if live is None:
        return False
    assessed = health.assess(live, scripts)
    return assessed is None or assessed.status is HealthStatus.HEALTHY


def orphans(target: Target, at: str) -> dict[str, str] | None:
    """AppProject `orphanedResources.warn`: a condition listing what no app manages in the namespace."""
    wanted = target.project.orphaned_resources
    namespace = target.app.destination.namespace
    if wanted is None or not wanted.warn or not namespace:
        return None
    # lazy: cold start (project.orphans, ~1.3 ms on every api and step call: only projects that warn of orphans)
    from tidecd.project import orphans as finder

    def list_kind(group: str, kind: str) -> list[Manifest]:
        if target.excluded_kind(ResourceKey(group, kind, "", "")):
            return []
        try:
            return target.cluster.list(group, kind, namespace=namespace)
        except (UnknownKind, ApiError):
            return []

    kinds = set(finder.KINDS) | {(t.key.group, t.key.kind) for t in target.tasks if t.key.namespace}
    found = finder.find(list_kind, kinds, wanted)
    if not found:
        return None
    return {"type": finder.CONDITION, "message": finder.message(namespace, found), "at": at}


def _served(cluster: KubeCluster, group: str, kind: str) -> bool:
    try:
        cluster.resource(group, kind)
    except UnknownKind:
        return False
    return True


def _ignores_extraneous(obj: Manifest) -> bool:
    options = plan.annotations_of(obj).get(constants.ANNOTATION_COMPARE_OPTIONS, "")
    return constants.COMPARE_IGNORE_EXTRANEOUS in options
