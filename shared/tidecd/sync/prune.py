"""Pruning: delete what the app's inventory holds but git no longer declares.

Only objects whose tracking id names this app are touched; `Prune=false` objects are reported, never
deleted. Deletion goes wave by wave, highest first, after every apply succeeded: `next_wave` picks the
candidates of the highest wave not pruned yet, and the operation (`sync.decide`) deletes the next wave only
once the objects the previous one deleted are gone, as gitops-engine waits for pruned objects pending
deletion. Each wave is one step; the waiting is a continuation.
"""

from __future__ import annotations

from collections.abc import Iterable

from tidecd.base.model import Action, ChangeEntry, ResourceKey
from tidecd.clients.cluster import ApiError, Cluster
from tidecd.sync.apply import explain, owned_by
from tidecd.sync.deletion import kept
from tidecd.sync.plan import prune_order, sync_options

PRUNE_DISABLED = "Prune=false"
# a candidate's result once its wave was pruned (deleted, kept, skipped, failed)
PRUNE_RESULTS = frozenset({Action.PRUNED, Action.PRUNE_SKIPPED, Action.SKIPPED, Action.FAILED})


def prune_candidates(inventory: Iterable[tuple[ResourceKey, int]],
                     desired: set[ResourceKey]) -> list[tuple[ResourceKey, int]]:
    return [(key, wave) for key, wave in inventory if key not in desired]


def next_wave(candidates: Iterable[tuple[ResourceKey, int]],
              done: set[ResourceKey]) -> tuple[tuple[tuple[ResourceKey, int], ...], bool]:
    """The candidates of the highest wave not pruned yet, and whether no lower wave is left after them."""
    left = [(key, wave) for key, wave in candidates if key not in done]
    if not left:
        return (), True
    top = max(wave for _, wave in left)
    return tuple((k, w) for k, w in left if w == top), all(w == top for _, w in left)


def prune(cluster: Cluster, app: str, candidates: list[tuple[ResourceKey, int]], *, enabled: bool,
          dry_run: bool, propagation: str = "Background", deleting: bool = False) -> list[ChangeEntry]:
    """Delete the candidates the app owns. `deleting`: the app itself is being deleted, so `Prune=false`
    does not keep an object, but what app deletion leaves alone does (`sync.deletion.kept`)."""
    entries = []
    for key in prune_order(candidates):
        try:
            live = cluster.get(key)
        except ApiError as exc:
            entries.append(ChangeEntry(key, Action.FAILED, f"prune: {explain(exc)}"))
            continue
        if live is None:
            continue
        if not owned_by(live, app):
            entries.append(ChangeEntry(key, Action.SKIPPED, "not owned by this app (tracking id differs)"))
        elif deleting and (why := kept(live)):
            entries.append(ChangeEntry(key, Action.SKIPPED, f"kept: {why}"))
        elif PRUNE_DISABLED in sync_options(live) and not deleting:
            entries.append(ChangeEntry(key, Action.PRUNE_SKIPPED, "Prune=false: kept, needs pruning by hand"))
        elif not enabled:
            entries.append(ChangeEntry(key, Action.PRUNE_SKIPPED, "requires pruning (sync with --prune)"))
        elif dry_run:
            entries.append(ChangeEntry(key, Action.PRUNED, "dry run"))
        else:
            try:
                cluster.delete(key, propagation=propagation)
            except ApiError as exc:
                entries.append(ChangeEntry(key, Action.FAILED, f"prune: {explain(exc)}"))
                continue
            entries.append(ChangeEntry(key, Action.PRUNED))
    return entries
