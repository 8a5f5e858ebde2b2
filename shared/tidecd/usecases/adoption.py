"""The adopt and release use cases: render the app, read Argo CD, check exactly, re-mark, record.

`tidecd app adopt NAME` and `tidecd app release NAME` call these; the checks and writes themselves are in
`tidecd.sync.adopt` (see its docstring for what is checked and what is written). The Argo CD
Application and `argocd-cm` are read from the KUBECONFIG cluster (where Argo CD runs); the objects
from the app's destination. After an adopt, the app's inventory in tidecd's store lists the adopted
objects, so a later prune knows them. After a release, the inventory is empty.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidecd.base import ownership
from tidecd.base.model import ChangeEntry, Manifest, ResourceKey, SyncStatus
from tidecd.clients.cluster import KubeCluster
from tidecd.clients.store import PreconditionFailed
from tidecd.config.load import Application
from tidecd.diff import fingerprint, live_identity
from tidecd.runtime import Runtime
from tidecd.state import app as app_state
from tidecd.state.app import CachedComparison
from tidecd.step.desired import desired_of as rendered
from tidecd.sync import adopt as moves
from tidecd.sync import plan


@dataclass(frozen=True)
class Outcome:
    app: str
    argo: moves.ArgoApp
    changes: list[ChangeEntry]
    dry_run: bool
    steps: list[str] = field(default_factory=list)  # what the user does next, on the Argo CD side


def desired_of(runtime: Runtime, app: Application, cluster: KubeCluster) -> tuple[dict[ResourceKey, Manifest],
                                                                                 dict[ResourceKey, int]]:
    """The app's resources as the observe stage renders them (namespaces filled in), and their waves."""
    manifests = rendered(runtime, app, cluster).manifests
    waves = {t.key: t.wave for t in plan.plan(manifests) if not t.hook}
    return {ResourceKey.of(m): m for m in plan.resources(manifests)}, waves


def adopt_app(runtime: Runtime, name: str, *, dry_run: bool = False, argocd_namespace: str = "argocd",
              source: str = "") -> Outcome:
    """Take `name`'s objects over from the Argo CD Application `source` (default: the same name)."""
    app = runtime.app(name)
    cluster = runtime.cluster(app.destination)
    argo = moves.read_argo_app(_argo_cluster(runtime), source or name, argocd_namespace)
    desired, waves = desired_of(runtime, app, cluster)
    argocd_marks = ownership.writes_argocd_marks(dict(app.annotations))
    checked = moves.plan_adopt(cluster, name, argo, desired, app.ignore_differences, argocd_marks=argocd_marks)
    if dry_run:
        return Outcome(name, argo, checked.changes(done=False), True, moves.argocd_steps_after_adopt(argo))
    written: dict[ResourceKey, Manifest] = {}
    changes = moves.adopt(cluster, checked, argocd_marks=argocd_marks, written=written)
    # as after a sync: each re-marked object is exactly what tidecd's apply makes of it, so the next
    # comparison needs no dry-run for it (until something changes it)
    managers = any(rule.managed_fields_managers for rule in runtime.config().ignore_differences_of(app))
    cache = {str(k): CachedComparison(fingerprint(ownership.marked(desired[k], name, argocd=argocd_marks)),
                                      live_identity(final, all_managers=managers), SyncStatus.SYNCED)
             for k, final in written.items()}
    _record_inventory(runtime, name, {k: waves.get(k, 0) for k in desired}, cache)
    return Outcome(name, argo, changes, False, moves.argocd_steps_after_adopt(argo))


def release_app(runtime: Runtime, name: str, *, dry_run: bool = False, argocd_namespace: str = "argocd",
                target: str = "") -> Outcome:
    """Hand `name`'s objects back to the Argo CD Application `target` (default: the same name)."""
    app = runtime.app(name)
    cluster = runtime.cluster(app.destination)
    argo_cluster = _argo_cluster(runtime)
    ref = target or name
    namespace, _, short = ref.rpartition("/")
    argo = moves.ArgoApp(namespace or argocd_namespace, short, argocd_namespace)
    settings = moves.read_argo_settings(argo_cluster, argocd_namespace)
    desired, _ = desired_of(runtime, app, cluster)
    inventory = [k for k, _ in app_state.load(runtime.store, name)[0].inventory_keys()]
    checked = moves.plan_release(cluster, name, argo, desired, settings, app.ignore_differences, inventory)
    steps = [f"apply the Argo CD Application {argo.namespace}/{argo.name} again (its objects now carry its "
             f"marks: it shows them Synced), then remove {name!r} from tidecd's config source"]
    if dry_run:
        return Outcome(name, argo, checked.changes(done=False), True, steps)
    changes = moves.release(cluster, checked)
    _record_inventory(runtime, name, {}, {})
    return Outcome(name, argo, changes, False, steps)


def _argo_cluster(runtime: Runtime) -> KubeCluster:
    return KubeCluster.from_kubeconfig(runtime.settings.kubeconfig or None)


def _record_inventory(runtime: Runtime, name: str, items: dict[ResourceKey, int],
                      cache: dict[str, CachedComparison]) -> None:
    for _ in range(5):
        state, generation = app_state.load(runtime.store, name)
        state.set_inventory(sorted(items.items()))
        state.memo.comparisons = cache
        try:
            app_state.save(runtime.store, state, if_generation_match=generation)
        except PreconditionFailed:
            continue
        return
