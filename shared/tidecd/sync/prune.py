"""Pruning: delete what the app's inventory holds but git no longer declares.

Only objects whose tracking id names this app are touched; `Prune=false` objects are reported, never
deleted. Deletion goes in reverse wave order, after every apply succeeded.
"""

from __future__ import annotations

from collections.abc import Iterable

from tidecd.base.model import Action, ChangeEntry, ResourceKey
from tidecd.clients.cluster import ApiError, Cluster
from tidecd.sync.apply import explain, owned_by
from tidecd.sync.plan import prune_order, sync_options

PRUNE_DISABLED = "Prune=false"


def prune_candidates(inventory: Iterable[tuple[ResourceKey, int]],
                     desired: set[ResourceKey]) -> list[tuple[ResourceKey, int]]:
    return [(key, wave) for key, wave in inventory if key not in desired]


def prune(cluster: Cluster, app: str, candidates: list[tuple[ResourceKey, int]], *, enabled: bool,
          dry_run: bool, propagation: str = "Background") -> list[ChangeEntry]:
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
        elif PRUNE_DISABLED in sync_options(live):
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
