"""What tidecd does with each of Argo CD's Application and AppProject fields: supported, ignored, or not
implemented, against the generated list of Argo CD's real fields (`tidecd.config.argocd_fields`).

The strict reader (`tidecd.config.schema`) asks `classify` about a field it does not read:
- ignored: accepted silently (read-only fields such as `status` and what `kubectl get -o yaml` adds, or
  fields whose effect tidecd has anyway or that only Argo CD's own UI/API uses); the reason is in
  docs/argocd-compatibility.md.
- not implemented: a real Argo CD field tidecd does not implement. The app (or the project's apps) is set
  aside with "Argo CD field X is not implemented by tidecd", never "unknown field", which is kept for typos.
The field table of docs/argocd-compatibility.md is generated from `table_rows` and checked by a unit test, so
neither drifts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from tidecd.config import argocd_fields

SUPPORTED, IGNORED, NOT_IMPLEMENTED = "supported", "ignored", "not implemented"

_READ_ONLY = "read-only: Argo CD's controller writes it; tidecd keeps its own status in the object store"
# Server-set metadata (`kubectl get -o yaml`), accepted and ignored on every object tidecd reads.
READ_ONLY_METADATA: Final = frozenset({
    "uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "selfLink",
    "deletionTimestamp", "deletionGracePeriodSeconds", "ownerReferences", "generateName",
})

# path → reason; a path covers everything under it. Application paths under `spec.sources[]` are looked up
# as `spec.source` (the same fields).
_APP_IGNORED: Mapping[str, str] = MappingProxyType({
    "status": _READ_ONLY,
    "operation": "an operation requested through Argo CD's API; start a sync with `tidecd app sync` or the api",
    "spec.info": "shown by Argo CD's UI only",
    "spec.revisionHistoryLimit": "tidecd keeps the last 10 revisions of every app",
    "spec.source.helm.version": "tidecd renders with Helm 3 (`v3` is the only version Argo CD 3 accepts)",
})
_APP_NOT_IMPLEMENTED: Mapping[str, str] = MappingProxyType({
    "spec.sourceHydrator": "the source hydrator",
    "spec.source.plugin": "config management plugins",
    "spec.source.tagPrefix": "OCI tag prefixes",
    "spec.source.directory.disableExtensionFilter": "reading files of every extension",
    "spec.source.kustomize.apiVersions": "kustomize apiVersions",
    "spec.source.kustomize.kubeVersion": "kustomize kubeVersion",
    "spec.source.kustomize.ignoreMissingComponents": "ignoring missing kustomize components",
    "spec.source.kustomize.labelIncludeTemplates": "kustomize labels on templates",
    "spec.source.kustomize.labelWithoutSelector": "kustomize labels without selectors",
    "spec.source.kustomize.version": "kustomize versions (argocd-cm kustomize.version.*)",
    "spec.syncPolicy.retry.refresh": "refreshing the source between retries",
})
_PROJECT_IGNORED: Mapping[str, str] = MappingProxyType({
    "status": _READ_ONLY,
    "spec.syncWindows[].description": "a comment",
    "spec.syncWindows[].syncOverrun": "tidecd checks windows when a sync starts; a running sync always finishes",
})
_PROJECT_NOT_IMPLEMENTED: Mapping[str, str] = MappingProxyType({
    "spec.signatureKeys": "GnuPG commit verification (the project's apps are set aside rather than "
                          "synced unverified)",
    "spec.sourceIntegrity": "GnuPG commit verification (the project's apps are set aside rather than "
                            "synced unverified)",
    "spec.permitOnlyProjectScopedClusters": "project-scoped clusters",
    "spec.clusterResourceWhitelist[].name": "object names in resource lists",
    "spec.clusterResourceBlacklist[].name": "object names in resource lists",
})

TABLES: Mapping[str, tuple[frozenset[str], Mapping[str, str], Mapping[str, str]]] = MappingProxyType({
    "Application": (argocd_fields.APPLICATION, _APP_IGNORED, _APP_NOT_IMPLEMENTED),
    "AppProject": (argocd_fields.APPPROJECT, _PROJECT_IGNORED, _PROJECT_NOT_IMPLEMENTED),
})
_INDEX = re.compile(r"\[\d+\]")


def field_path(path: str) -> str:
    """`spec.sources[2].helm` → `spec.sources[].helm`, the form of the generated list."""
    return _INDEX.sub("[]", path)


def _within(path: str, table: Mapping[str, str]) -> str | None:
    for prefix, reason in table.items():
        if path == prefix or path.startswith((prefix + ".", prefix + "[]")):
            return reason
    return None


def classify(kind: str, path: str) -> tuple[str, str]:
    """(status, reason) of a field tidecd's reader does not read: IGNORED, NOT_IMPLEMENTED, or ("", "")
    when Argo CD has no such field (a typo: "unknown field")."""
    known, ignored, missing = TABLES.get(kind, (frozenset(), {}, {}))
    path = field_path(path)
    if path not in known:
        return "", ""
    lookup = path.replace("spec.sources[]", "spec.source", 1) if kind == "Application" else path
    if (reason := _within(lookup, ignored)) is not None:
        return IGNORED, reason
    return NOT_IMPLEMENTED, _within(lookup, missing) or "not implemented"


def not_implemented_message(path: str, reason: str) -> str:
    return f"Argo CD field {field_path(path)} is not implemented by tidecd ({reason})"


def table_rows(kind: str) -> list[tuple[str, str, str]]:
    """(path, status, reason) for every Argo CD field of `kind` under `spec` (and the top-level keys), the
    field table; a field whose parent is already ignored or not implemented is folded into the parent."""
    known, ignored, missing = TABLES[kind]
    rows: list[tuple[str, str, str]] = []
    folded: list[str] = []
    for path in sorted(known):
        if path.startswith("spec.sources[]") or path in ("apiVersion", "kind", "metadata", "spec"):
            continue  # spec.sources[] has the fields of spec.source
        if any(path.startswith((p + ".", p + "[]")) for p in folded):
            continue
        if (reason := _within(path, ignored)) is not None:
            rows.append((path, IGNORED, reason))
            folded.append(path)
        elif (reason := _within(path, missing)) is not None:
            rows.append((path, NOT_IMPLEMENTED, reason))
            folded.append(path)
        else:
            rows.append((path, SUPPORTED, ""))
    return rows


def markdown_table(kind: str) -> str:
    """The docs table of `kind`'s fields (see `table_rows`)."""
    lines = [f"| {kind} field | tidecd | why |", "|---|---|---|"]
    lines += [f"| `{path}` | {status} | {reason} |" for path, status, reason in table_rows(kind)]
    return "\n".join(lines)
