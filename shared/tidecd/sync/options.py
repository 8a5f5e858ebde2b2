"""App-level `syncPolicy.syncOptions`: every option Argo CD documents, and what tidecd does with it.

Argo CD's sync-options page lists the options below. Each is honoured (some because tidecd always behaves
that way), or reported as a condition on the app saying it is not supported: it is never silently
accepted and ignored. An option Argo CD does not know is reported the same way (Argo CD ignores it,
which hides typos). Per-object options given at app level are merged into every object's options by the
plan (`sync.plan.merged_options`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

# option (Name=value) → how tidecd honours it
HONOURED: Final[dict[str, str]] = {
    "CreateNamespace=true": "creates the destination namespace (with managedNamespaceMetadata)",
    "CreateNamespace=false": "the default",
    "Replace=true": "objects are replaced (PUT) on every sync; an immutable field fails it without Force=true",
    "Replace=false": "the default",
    "Force=true": "with Replace=true: an object whose replace an immutable field refuses is deleted and created again",
    "Force=false": "the default",
    "ServerSideApply=true": "tidecd always applies server-side",
    "ServerSideApply=false": "ignored: tidecd always applies server-side",
    "ClientSideApplyMigration=false": "tidecd never applied client-side: nothing to migrate",
    "ClientSideApplyMigration=true": "tidecd never applied client-side: nothing to migrate",
    "ApplyOutOfSyncOnly=true": "objects that compare Synced are left out of the sync (no write, no result)",
    "ApplyOutOfSyncOnly=false": "the default: every object is part of the sync (no-op applies left out)",
    "PruneLast=true": "tidecd always prunes after every wave has been applied",
    "PruneLast=false": "tidecd always prunes after every wave has been applied",
    "Validate=false": "fields the kind does not declare are dropped (kubectl apply --validate=false)",
    "Validate=true": "the default",
    "SkipDryRunOnMissingResource=true": "objects of kinds the cluster does not serve are not dry-run",
    "RespectIgnoreDifferences=true": "ignored fields keep their live values when syncing",
    "RespectIgnoreDifferences=false": "the default: a sync resets ignored fields to git",
    "PrunePropagationPolicy=foreground": "pruned objects are deleted with this propagation policy",
    "PrunePropagationPolicy=background": "pruned objects are deleted with this propagation policy",
    "PrunePropagationPolicy=orphan": "pruned objects are deleted with this propagation policy",
    "FailOnSharedResource=true": "an object another app owns fails the sync",
    "FailOnSharedResource=false": "the default",
}

NOT_SUPPORTED: Final[dict[str, str]] = {
    "Prune=confirm": "confirmation of prunes is not implemented; sync with --prune instead",
    "Delete=confirm": "confirmation of deletes is not implemented",
}

CONDITION: Final = "UnsupportedSyncOption"


def problems(options: Iterable[str]) -> list[str]:
    """One message per app-level option tidecd does not honour (empty when all are honoured)."""
    out = []
    for option in options:
        if option in HONOURED:
            continue
        reason = NOT_SUPPORTED.get(option)
        if reason is None:
            reason = "not a sync option Argo CD documents at app level"
        out.append(f"spec.syncPolicy.syncOptions: {option!r} is not supported by tidecd: {reason}")
    return out


def conditions(options: Iterable[str], at: str) -> list[dict[str, str]]:
    """App conditions (Argo CD's shape) for the options `problems` reports."""
    return [{"type": CONDITION, "message": message, "at": at} for message in problems(options)]


def prune_propagation(options: Iterable[str]) -> str:
    """The propagation policy of prune deletes (`PrunePropagationPolicy=...`); default background, as
    tidecd always pruned (Argo CD defaults to foreground)."""
    for option in options:
        name, _, value = option.partition("=")
        if name == "PrunePropagationPolicy" and value in ("foreground", "background", "orphan"):
            return value.capitalize()
    return "Background"
