"""What each page shows, as plain values built from the config and the stored app states.

Pure functions of their inputs (no cluster, no HTTP), so every filter, count and link is unit-tested.
The resource tree, which needs the cluster, lives in `tree.py`.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode

from tidecd.base.constants import LABEL_SECRET_TYPE, SECRET_TYPE_CLUSTER
from tidecd.clients.store import LocalStore, MemoryStore, ObjectStore
from tidecd.config.load import Application, ApplicationSource, AppProject, Config, redact_repo_url
from tidecd.source import Snapshots
from tidecd.state import app as app_state

PAGE_SIZE = 50
SYNC_STATUSES = ("Synced", "OutOfSync", "Unknown")
HEALTH_STATUSES = ("Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown")
FILTERS = ("project", "sync", "health", "cluster", "namespace")
READ_CONCURRENCY = 16


@dataclass(frozen=True)
class OperationView:
    phase: str
    message: str
    step: str
    wave: str
    started_at: str
    finished_at: str
    initiated_by: str
    revision: str
    dry_run: bool
    prune: bool
    results: tuple[dict[str, Any], ...] = ()
    revisions: tuple[str, ...] = ()  # multi-source: each source's revision

    @property
    def running(self) -> bool:
        return self.phase in ("Running", "Terminating")


def operation_view(op: Any) -> OperationView | None:
    """The stored operation, whichever generation of the state schema wrote it (readers tolerate fields)."""
    if op is None:
        return None
    results = getattr(op, "results", None) or getattr(op, "resources", None) or []
    asked = getattr(op, "request", op)  # the request group (older schemas: flat on the operation)
    initiated = str(getattr(asked, "initiated_by", "") or ("automated" if getattr(asked, "automated", False) else ""))
    wave = getattr(op, "wave", None)
    phase = getattr(op, "phase", "")
    return OperationView(
        phase=str(getattr(phase, "value", phase)), message=str(getattr(op, "message", "")),
        step=str(getattr(op, "step", "") or ""), wave="" if wave is None else str(wave),
        started_at=str(getattr(op, "started_at", "")), finished_at=str(getattr(op, "finished_at", "") or ""),
        initiated_by=initiated, revision=str(getattr(op, "revision", "")),
        dry_run=bool(getattr(asked, "dry_run", False)), prune=bool(getattr(asked, "prune", False)),
        results=tuple(_result_dict(r) for r in results),
        revisions=tuple(str(r) for r in getattr(op, "revisions", None) or ()),
    )


def _result_dict(result: Any) -> dict[str, Any]:
    if hasattr(result, "to_json"):
        result = result.to_json()
    data: dict[str, Any] = dict(result) if isinstance(result, dict) else dict(vars(result))
    key = data.get("key")
    if isinstance(key, dict):
        data.setdefault("resource", _key_text(key))
    elif key is not None and not isinstance(key, str):
        data["resource"] = str(key)
    for name in ("phase", "status", "action", "hook_phase"):
        value = data.get(name)
        if value is not None:
            data[name] = str(getattr(value, "value", value))
    return data


def _key_text(key: Mapping[str, Any]) -> str:
    kind = f"{key.get('group')}/{key.get('kind')}" if key.get("group") else str(key.get("kind", ""))
    where = f"{key.get('namespace')}/{key.get('name')}" if key.get("namespace") else str(key.get("name", ""))
    return f"{kind} {where}"


@dataclass(frozen=True)
class AppRow:
    name: str
    project: str
    cluster: str
    namespace: str
    repo: str
    path: str
    target_revision: str
    revision: str
    sync: str
    health: str
    operation: OperationView | None
    error: str = ""
    reconciled_at: str = ""
    commit: str = ""  # the subject of the deployed commit, when its snapshot recorded one
    revisions: tuple[str, ...] = ()  # multi-source: each source's revision

    def matches(self, text: str) -> bool:
        hay = f"{self.name} {self.project} {self.cluster} {self.namespace} {self.repo} {self.path}".lower()
        return all(word in hay for word in text.lower().split())


def shown_app(app: Application) -> Application:
    """The app as a page shows it: every source's repoURL without its `user:password@`, redacted by
    `redact_repo_url` as the api, the CLI and the apps list show it. A page is given this copy, never the
    app itself, so no template can print a password whichever source field it reads."""
    def redacted(source: ApplicationSource) -> ApplicationSource:
        return replace(source, repo_url=redact_repo_url(source.repo_url))

    return replace(app, source=redacted(app.source), sources=tuple(redacted(s) for s in app.sources))


def destination_name(app: Application) -> str:
    return app.destination.name or app.destination.server


@dataclass(frozen=True)
class Summary:
    """What the apps page shows of one stored state (the rest of it is never parsed twice)."""

    sync: str = "Unknown"
    health: str = "Unknown"
    revision: str = ""
    reconciled_at: str = ""
    error: str = ""
    operation: OperationView | None = None
    revisions: tuple[str, ...] = ()

    @classmethod
    def of(cls, current: app_state.AppState) -> Summary:
        op = operation_view(current.operation)
        if op is not None:
            op = OperationView(op.phase, op.message[:300], op.step[:300], op.wave, op.started_at, op.finished_at,
                               op.initiated_by, op.revision, op.dry_run, op.prune, revisions=op.revisions)
        error = "; ".join(c.get("message", "") for c in current.conditions if c.get("type", "").endswith("Error"))
        return cls(current.sync_status, current.health, current.revision, current.memo.reconciled_at, error[:500], op,
                   tuple(current.revisions))


# (store, key) → (generation, summary): a warm instance parses a state again only when it changed.
_SUMMARIES: dict[tuple[str, str], tuple[int, Summary]] = {}
_SUMMARY_LIMIT = 50_000


def load_summaries(store: ObjectStore, names: Iterable[str]) -> dict[str, Summary]:
    """Every named app's summary, its state read concurrently (an object store answers in parallel)."""
    where = repr(store)
    if len(_SUMMARIES) > _SUMMARY_LIMIT:
        _SUMMARIES.clear()

    def one(name: str) -> Summary:
        key = app_state.state_key(name)
        blob = store.read(key)
        if blob is None:
            return Summary()
        cached = _SUMMARIES.get((where, key))
        if cached is not None and cached[0] == blob.generation:
            return cached[1]
        summary = Summary.of(app_state.AppState.from_json(json.loads(blob.data)))
        _SUMMARIES[(where, key)] = (blob.generation, summary)
        return summary

    ordered = list(names)
    if isinstance(store, LocalStore | MemoryStore):  # local reads: threads would only add GIL contention
        return {name: one(name) for name in ordered}
    with ThreadPoolExecutor(max_workers=READ_CONCURRENCY) as pool:
        return dict(zip(ordered, pool.map(one, ordered), strict=True))


def app_rows(config: Config, summaries: Mapping[str, Summary]) -> list[AppRow]:
    rows = []
    for name in sorted(config.applications):
        app, current = config.applications[name], summaries.get(name) or Summary()
        rows.append(AppRow(
            name=name, project=app.project, cluster=destination_name(app), namespace=app.destination.namespace,
            repo=redact_repo_url(app.source.repo_url), path=app.source.path,
            target_revision=app.source.target_revision, revision=current.revision, sync=current.sync,
            health=current.health, operation=current.operation, error=current.error,
            reconciled_at=current.reconciled_at, revisions=current.revisions,
        ))
    for name, problem in sorted(config.invalid.items()):
        rows.append(AppRow(name, "", "", "", "", "", "", "", "Unknown", "Unknown", None, error=problem))
    return sorted(rows, key=lambda r: r.name)


@dataclass(frozen=True)
class AppsPage:
    rows: list[AppRow]
    total: int
    matched: int
    page: int
    pages: int
    filters: dict[str, str]
    sync_counts: dict[str, int]
    health_counts: dict[str, int]
    choices: dict[str, list[str]] = field(default_factory=dict)

    def link(self, **changes: str | int) -> str:
        """This page's query with some filters changed (paging back to 1 unless `page` is given)."""
        query: dict[str, str | int] = {k: v for k, v in self.filters.items() if v}
        query.pop("page", None)
        for key, value in changes.items():
            if value in ("", None):
                query.pop(key, None)
            else:
                query[key] = value
        return "?" + urlencode(query) if query else "?"


def with_commits(store: ObjectStore, config: Config, rows: list[AppRow]) -> list[AppRow]:
    """The rows of one page with their commit subjects (one small read each, never a git fetch)."""

    snapshots = Snapshots(store)
    out = []
    for row in rows:
        app = config.applications.get(row.name)
        info = snapshots.commit(app.source.repo_url, row.revision) if app and row.revision else None
        out.append(replace(row, commit=info.get("subject", "")) if info else row)
    return out


def apps_page(rows: list[AppRow], query: Mapping[str, str]) -> AppsPage:
    filters = {name: query.get(name, "").strip()[:200] for name in (*FILTERS, "q")}
    chosen = [r for r in rows if _keep(r, filters)]
    try:
        page = max(1, int(query.get("page", "1")))
    except ValueError:
        page = 1
    pages = max(1, -(-len(chosen) // PAGE_SIZE))
    page = min(page, pages)
    choices = {
        "project": sorted({r.project for r in rows if r.project}),
        "cluster": sorted({r.cluster for r in rows if r.cluster}),
        "namespace": sorted({r.namespace for r in rows if r.namespace}),
    }
    sync_counts = Counter(r.sync for r in rows)
    health_counts = Counter(r.health for r in rows)
    return AppsPage(
        rows=chosen[(page - 1) * PAGE_SIZE: page * PAGE_SIZE], total=len(rows), matched=len(chosen), page=page,
        pages=pages, filters=filters, sync_counts={s: sync_counts.get(s, 0) for s in SYNC_STATUSES},
        health_counts={h: health_counts.get(h, 0) for h in HEALTH_STATUSES}, choices=choices,
    )


def _keep(row: AppRow, filters: Mapping[str, str]) -> bool:
    for name in FILTERS:
        wanted = filters.get(name, "")
        if wanted and getattr(row, name) != wanted:
            return False
    text = filters.get("q", "")
    return not text or row.matches(text)


# -- links to the source -------------------------------------------------------------------------------

_SCP = re.compile(r"^(?:ssh://)?git@(?P<host>[^:/]+)[:/](?P<path>.+)$")
_HTTP = re.compile(r"^https?://(?:[^@/]+@)?(?P<host>[^/]+)/(?P<path>.+)$")
_SHA = re.compile(r"^[0-9a-f]{7,64}$")


def commit_url(repo_url: str, sha: str) -> str:
    """The web page of commit `sha` when the repo is on GitHub or GitLab; "" for other hosts."""
    match = _SCP.match(repo_url) or _HTTP.match(repo_url)
    if not match or not _SHA.match(sha):
        return ""
    host, path = match.group("host").lower(), match.group("path").strip("/").removesuffix(".git")
    if not re.fullmatch(r"[A-Za-z0-9._~/-]+", path) or ".." in path:
        return ""
    if host in ("github.com", "www.github.com"):
        return f"https://github.com/{path}/commit/{sha}"
    if host == "gitlab.com" or host.startswith("gitlab."):
        return f"https://{host}/{path}/-/commit/{sha}"
    return ""


# -- projects and clusters ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ProjectView:
    name: str
    description: str
    source_repos: tuple[str, ...]
    destinations: tuple[str, ...]
    cluster_allow: str
    cluster_deny: str
    namespace_allow: str
    namespace_deny: str
    apps: tuple[str, ...]


def _kinds(kinds: Iterable[Any] | None, none: str) -> str:
    if kinds is None:
        return none
    items = [f"{k.group or 'core'}/{k.kind}" for k in kinds]
    return ", ".join(items) if items else "none"


def projects(config: Config) -> list[ProjectView]:
    users: dict[str, list[str]] = {}
    for app in config.applications.values():
        users.setdefault(app.project, []).append(app.name)
    out = []
    for name in sorted(config.projects):
        project: AppProject = config.projects[name]
        out.append(ProjectView(
            name=name, description=project.description,
            source_repos=tuple(redact_repo_url(r) for r in project.source_repos),
            destinations=tuple(f"{d.name or d.server} / {d.namespace}" for d in project.destinations),
            cluster_allow=_kinds(project.cluster_resource_whitelist, "none"),
            cluster_deny=_kinds(project.cluster_resource_blacklist, "none"),
            namespace_allow=_kinds(project.namespace_resource_whitelist, "all"),
            namespace_deny=_kinds(project.namespace_resource_blacklist, "none"),
            apps=tuple(sorted(users.get(name, []))),
        ))
    return out


@dataclass(frozen=True)
class ClusterView:
    name: str
    server: str
    source: str  # where tidecd learns how to reach it
    namespaces: tuple[str, ...]
    apps: tuple[str, ...]


def clusters(config: Config) -> list[ClusterView]:
    """Every destination the config names, with the apps deploying there; cluster secrets by name and
    server only (their credentials are never read for a page)."""

    known: dict[str, tuple[str, str]] = {}
    for secret in config.secrets:
        meta = secret.get("metadata") or {}
        labels = meta.get("labels") or (secret.get("spec", {}).get("template", {}).get("metadata", {})
                                        .get("labels") or {})
        if labels.get(LABEL_SECRET_TYPE) == SECRET_TYPE_CLUSTER:
            name = str(meta.get("name", ""))
            known[name] = (name, f"cluster secret {name} ({secret.get('kind', 'Secret')})")
    by_cluster: dict[str, list[Application]] = {}
    for app in config.applications.values():
        by_cluster.setdefault(destination_name(app), []).append(app)
    out = []
    for ident in sorted(set(by_cluster) | {n for n, _ in known.values()}):
        apps = by_cluster.get(ident, [])
        servers = sorted({a.destination.server for a in apps if a.destination.server})
        source = known.get(ident, ("", ""))[1] or ("KUBECONFIG of the functions" if ident in ("in-cluster", "")
                                                    else "no cluster secret names it")
        out.append(ClusterView(ident or "in-cluster", ", ".join(servers), source,
                               tuple(sorted({a.destination.namespace for a in apps})),
                               tuple(sorted(a.name for a in apps))))
    return out
