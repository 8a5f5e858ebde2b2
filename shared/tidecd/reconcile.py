"""The reconcile use case: refresh one app (source → render → live → diff → health) and sync when asked.

Called by the reconcile function (Pub/Sub in the cloud, a direct call locally), the api and the CLI. Two
calls for the same app at once must not both sync: the first takes the app's lease, the second returns
"already running" without touching the cluster.
"""

from __future__ import annotations

import copy
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from tidecd import health, render
from tidecd import source as git
from tidecd import state as app_state
from tidecd.cluster import ApiError, KubeCluster, UnknownKind, managed_selector
from tidecd.config import Application, AppProject
from tidecd.diff import Comparison, ResourceDiff, compare, fingerprint
from tidecd.errors import ClusterUnavailable, PermanentError, ProjectViolation, TemporaryError, TidecdError
from tidecd.model import Action, ChangeSet, HealthResult, HealthStatus, Manifest, ResourceKey, SyncStatus
from tidecd.runtime import Runtime
from tidecd.store import acquire_lease, release_lease
from tidecd.sync import operation, plan
from tidecd.sync.apply import owned_by, owner_of, with_ownership

log = structlog.get_logger("tidecd.reconcile")
LEASE_TTL = 600.0
DRY_RUN_CONCURRENCY = 8


@dataclass(frozen=True)
class SyncRequest:
    """An explicit sync (CLI, api, rollback); automated syncs are decided by the app's policy."""

    prune: bool = False
    dry_run: bool = False
    resources: frozenset[ResourceKey] | None = None
    revision: str = ""  # a sha from history (rollback); empty means the app's targetRevision
    rollback: bool = False


@dataclass
class Outcome:
    """What one reconcile call did."""

    app: str
    state: app_state.AppState | None
    skipped: str = ""  # e.g. "already running"
    synced: bool = False
    changes: ChangeSet = field(default_factory=ChangeSet)


def reconcile(runtime: Runtime, name: str, *, request: SyncRequest | None = None, reason: str = "",
              automate: bool = True, wave_timeout: float = 300.0) -> Outcome:
    """Refresh `name`; sync when `request` asks or (with `automate`) when its sync policy does."""
    holder = uuid.uuid4().hex
    if not acquire_lease(runtime.store, name, holder, LEASE_TTL):
        log.info("reconcile skipped", app=name, reason="already running")
        current, _ = app_state.load(runtime.store, name)
        return Outcome(name, current, skipped="already running")
    try:
        return _Reconciler(runtime, name, request, reason, automate, wave_timeout).run()
    finally:
        release_lease(runtime.store, name, holder)


class _Reconciler:
    def __init__(self, runtime: Runtime, name: str, request: SyncRequest | None, reason: str, automate: bool,
                 wave_timeout: float) -> None:
        self.runtime, self.name, self.request, self.reason = runtime, name, request, reason
        self.automate = automate
        self.wave_timeout = wave_timeout
        self.state, self.generation = app_state.load(runtime.store, name)

    def run(self) -> Outcome:
        outcome = Outcome(self.name, self.state)
        try:
            app = self.runtime.app(self.name)
            project = self.runtime.config().projects[app.project]
            self._check_project_scope(project, app)
            sha, manifests = self._desired(app)
            cluster = self.runtime.cluster(app.destination)
            namespaced = scope_lookup(cluster, manifests)
            manifests = _with_namespaces(namespaced, manifests, app.destination.namespace)
            comparison, live = self._compare(cluster, app, manifests)
            self._record(app, sha, comparison, live)
            if self._should_sync(app, sha):
                outcome.synced = True
                outcome.changes = self._sync(cluster, app, project, sha, manifests, comparison, live, namespaced)
                comparison, live = self._compare(cluster, app, manifests)
                self._record(app, sha, comparison, live)
        except TemporaryError as exc:
            self._condition("ComparisonError", str(exc), unknown=True)
        except PermanentError as exc:
            self._condition("ComparisonError" if not isinstance(exc, ProjectViolation) else "InvalidSpecError",
                            str(exc), unknown=True)
        self.state.reconciled_at = app_state.now_iso()
        self.generation = app_state.save(self.runtime.store, self.state)
        log.info("reconciled", app=self.name, reason=self.reason, sync=self.state.sync_status,
                 health=self.state.health, revision=self.state.revision[:12])
        return outcome

    # -- desired state --------------------------------------------------------------------------------

    def _check_project_scope(self, project: AppProject, app: Application) -> None:
        from tidecd import project as rules

        problems = rules.check_source(project, app) + rules.check_destination(project, app.destination)
        if problems:
            raise ProjectViolation(project.name, problems)

    def _desired(self, app: Application) -> tuple[str, list[Manifest]]:
        creds = self.runtime.repo_credentials(app.source.repo_url)
        if self.request and self.request.revision:
            sha = self.request.revision
        else:
            refs = git.ls_remote(app.source.repo_url, creds)
            sha = git.resolve_revision(refs, app.source.target_revision, app.source.repo_url)
        namespace = app.destination.namespace

        def render_now() -> list[Manifest]:
            tarball = git.Snapshots(self.runtime.store).get_or_fetch(app.source.repo_url, sha, creds)
            with tempfile.TemporaryDirectory(prefix="tidecd-render-") as tmp:
                git.extract(tarball, Path(tmp))
                return render.render(Path(tmp), app.source, app_name=app.name, namespace=namespace)

        manifests = render.render_cached(self.runtime.store, app.name, sha, app.source, render_now,
                                         namespace=namespace)
        return sha, self._unseal(app, manifests)

    def _unseal(self, app: Application, manifests: list[Manifest]) -> list[Manifest]:
        """SealedSecrets become plain Secrets (target clusters need no controller) unless the app opts out."""
        if app.annotation("tidecd.io/sealed-secrets") == "passthrough":
            return manifests
        sealed = [m for m in manifests if m.get("kind") == "SealedSecret"]
        if not sealed:
            return manifests
        from tidecd.errors import SecretError
        from tidecd.secrets import unseal

        keys = self.runtime.private_keys()
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

    # -- live state and comparison --------------------------------------------------------------------

    def _compare(self, cluster: KubeCluster, app: Application,
                 manifests: list[Manifest]) -> tuple[Comparison, dict[ResourceKey, Manifest]]:
        desired = {ResourceKey.of(m): m for m in plan.resources(manifests)}
        live = self._live(cluster, app, desired)
        cache = self.state.comparison_cache
        new_cache: dict[str, list[object]] = {}

        def one(item: tuple[ResourceKey, Manifest]) -> ResourceDiff:
            key, obj = item
            owned = with_ownership(obj, app.name)
            current = live.get(key)
            if current is not None and (other := owner_of(current)) not in (None, app.name):
                return ResourceDiff(key, SyncStatus.OUT_OF_SYNC, error=f"owned by app {other!r}")
            rv = (current or {}).get("metadata", {}).get("resourceVersion", "")
            cache_key, print_ = str(key), [fingerprint(owned), rv]
            hit = cache.get(cache_key)
            if current is not None and hit and hit[:2] == print_:
                new_cache[cache_key] = hit
                return ResourceDiff(key, SyncStatus(hit[2]), tuple(hit[3]), hit[4])
            result = self._compare_one(cluster, app, key, owned, current)
            if current is not None and not result.error:
                new_cache[cache_key] = [*print_, result.status.value, list(result.changed_paths), result.text]
            return result

        with ThreadPoolExecutor(max_workers=DRY_RUN_CONCURRENCY) as pool:
            results = list(pool.map(one, sorted(desired.items())))
        for key, obj in sorted(live.items()):
            if key not in desired and owned_by(obj, app.name) and not _ignores_extraneous(obj):
                results.append(compare(key, obj, None))
        self.state.comparison_cache = new_cache
        return Comparison(results), live

    def _compare_one(self, cluster: KubeCluster, app: Application, key: ResourceKey, owned: Manifest,
                     current: Manifest | None) -> ResourceDiff:
        if current is None:
            return compare(key, None, owned)
        try:
            predicted = cluster.apply(owned, dry_run=True)
        except (ApiError, UnknownKind) as exc:
            return ResourceDiff(key, SyncStatus.OUT_OF_SYNC, (".",), error=f"dry-run failed: {exc}")
        return compare(key, current, predicted, app.ignore_differences)

    def _live(self, cluster: KubeCluster, app: Application,
              desired: dict[ResourceKey, Manifest]) -> dict[ResourceKey, Manifest]:
        """The app's objects: listed by ownership label per kind, then fetched one by one if unlabelled."""
        live: dict[ResourceKey, Manifest] = {}
        kinds = {(k.group, k.kind) for k in desired} | {(k.group, k.kind) for k, _ in self.state.inventory_keys()}
        for group, kind in sorted(kinds):
            try:
                for obj in cluster.list(group, kind, label_selector=managed_selector(app.name)):
                    live[ResourceKey.of(obj)] = obj
            except UnknownKind:
                continue
        for key in desired:
            if key not in live:
                try:
                    found = cluster.get(key)
                except UnknownKind:
                    found = None
                if found is not None:
                    live[key] = found
        return live

    def _record(self, app: Application, sha: str, comparison: Comparison,
                live: dict[ResourceKey, Manifest]) -> None:
        statuses, assessed = [], []
        for res in comparison.resources:
            result: HealthResult | None = None
            if not res.requires_pruning:
                result = health.assess(live.get(res.key))
                assessed.append((res.key, result))
            statuses.append(app_state.ResourceStatus(
                res.key.group, res.key.kind, res.key.namespace, res.key.name, res.status.value,
                result.status.value if result else "", result.message if result else "",
                list(res.changed_paths), res.requires_pruning, res.text or res.error,
            ))
        roll = health.app_health(assessed)
        self.state.sync_status, self.state.revision = comparison.status.value, sha
        self.state.health = roll.value
        self.state.health_message = next((f"{k}: {r.message}" for k, r in assessed if r and r.status is roll
                                          and r.message), "")
        self.state.resources = statuses
        self.state.conditions = [c for c in self.state.conditions if c["type"] == "SyncError"]

    def _condition(self, kind: str, message: str, *, unknown: bool) -> None:
        self.state.conditions = [{"type": kind, "message": message, "at": app_state.now_iso()}]
        if unknown:
            self.state.sync_status = SyncStatus.UNKNOWN.value
        log.warning("reconcile problem", app=self.name, condition=kind, message=message)

    # -- sync -----------------------------------------------------------------------------------------

    def _should_sync(self, app: Application, sha: str) -> bool:
        if self.request is not None:
            return True
        policy = app.sync_policy
        if not self.automate or not policy.automated or self.state.automated_disabled:
            return False
        if self.state.sync_status == SyncStatus.SYNCED.value:
            return False
        marker = f"{sha}:{app.source.spec_hash()}"
        op = self.state.operation
        if op is not None and op.automated and op.phase == "Failed" and op.revision == sha:
            limit = policy.retry.limit if policy.retry else 0
            return op.retry_count < limit and time.time() >= op.next_attempt_at
        return self.state.auto_synced != marker or policy.self_heal

    def _sync(self, cluster: KubeCluster, app: Application, project: AppProject, sha: str,
              manifests: list[Manifest], comparison: Comparison, live: dict[ResourceKey, Manifest],
              namespaced: Callable[[str, str], bool]) -> ChangeSet:
        from tidecd import project as rules

        request = self.request or SyncRequest(prune=app.sync_policy.prune)
        automated = self.request is None
        op = app_state.Operation("Running", "", sha, app_state.now_iso(), automated=automated,
                                 dry_run=request.dry_run, prune=request.prune)
        previous = self.state.operation
        if automated and previous and previous.automated and previous.revision == sha and previous.phase == "Failed":
            op.retry_count = previous.retry_count + 1
        self.state.operation = op
        if not request.dry_run:
            self.generation = app_state.save(self.runtime.store, self.state)
        options = set(app.sync_policy.sync_options)
        try:
            rules.enforce(project, app, manifests, namespaced)
            target_ns = ResourceKey("", "Namespace", "", app.destination.namespace)
            if ("CreateNamespace=true" in options and app.destination.namespace and not request.dry_run
                    and cluster.get(target_ns) is None):
                cluster.apply({"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": app.destination.namespace}})
            settings = operation.SyncSettings(
                prune=request.prune or (automated and app.sync_policy.prune), dry_run=request.dry_run,
                only=request.resources,
                wave_timeout=self.wave_timeout,
            )
            out_of_sync = {r.key for r in comparison.resources if r.status is not SyncStatus.SYNCED}
            healthy = {key for key, obj in live.items()
                       if (h := health.assess(obj)) is None or h.status is HealthStatus.HEALTHY}
            result = operation.run(cluster, app.name, manifests, inventory=self.state.inventory_keys(),
                                   out_of_sync=out_of_sync, live=set(live), healthy=healthy, settings=settings)
        except (TidecdError, ApiError) as exc:
            result = operation.OperationResult(False, str(exc))
            if isinstance(exc, ClusterUnavailable):
                result.message += " (nothing pruned; will retry)"
        op.phase = "Succeeded" if result.succeeded else "Failed"
        op.message, op.finished_at = result.message, app_state.now_iso()
        op.resources = [e.to_dict() for e in result.changes.entries]
        if not request.dry_run:
            self.state.set_inventory(result.inventory)
            self.state.add_history(sha, op.phase, app.source.path, app.source.target_revision)
            if automated and result.succeeded:
                self.state.auto_synced = f"{sha}:{app.source.spec_hash()}"
            if not result.succeeded and automated and app.sync_policy.retry:
                backoff = app.sync_policy.retry.backoff
                delay = min(backoff.duration_seconds * backoff.factor ** op.retry_count,
                            backoff.max_duration_seconds)
                op.next_attempt_at = time.time() + delay
            if request.rollback:
                self.state.automated_disabled = True
            elif not automated and not request.revision:
                self.state.automated_disabled = False
        self._remember_writes(app, manifests, result.written)
        log.info("sync finished", app=app.name, phase=op.phase, message=op.message, automated=automated,
                 changes=sum(1 for e in result.changes.entries if e.action is not Action.UNCHANGED))
        return result.changes


    def _remember_writes(self, app: Application, manifests: list[Manifest], written: dict[ResourceKey, str]) -> None:
        """An object just applied is, until something else changes it, exactly what a dry-run of the same
        apply would predict: record it as Synced so the comparison after the sync needs no dry-run for it."""
        for obj in plan.resources(manifests):
            key = ResourceKey.of(obj)
            if key in written:
                owned = with_ownership(obj, app.name)
                self.state.comparison_cache[str(key)] = [fingerprint(owned), written[key],
                                                         SyncStatus.SYNCED.value, [], ""]


def _ignores_extraneous(obj: Manifest) -> bool:
    return "IgnoreExtraneous" in plan.annotations_of(obj).get("argocd.argoproj.io/compare-options", "")


def scope_lookup(cluster: KubeCluster, manifests: list[Manifest]) -> Callable[[str, str], bool]:
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
        return cluster.is_namespaced(group, kind)

    return namespaced


def _with_namespaces(namespaced: Callable[[str, str], bool], manifests: list[Manifest],
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
