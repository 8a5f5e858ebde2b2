"""The poll use case (Cloud Scheduler every few minutes): find what changed in git and refresh only that.

One `ls-remote` per distinct repository (apps are grouped by their normalized repoURL; the config source
repo joins the group it belongs to; a helm chart repository costs one `index.yaml` call and an OCI
repository one tags call instead, and their "refs" are the chart versions and tags), compared with the
heads the previous tick saw (`RefCache`). An app is refreshed when the commit (or chart version) its
targetRevision resolves to moved, or its repository was never seen, or it was never reconciled at all
(no `state/apps/<app>.json`: a new app); when the config source itself moved, every app is refreshed
(its spec may have changed). Then the drift sweep: every automated or self-healing app not refreshed yet
is refreshed too, since drift happens in the cluster, not in git, and a reconcile with nothing changed
is cheap. Before both, any running operation whose next step is long overdue (`continuations/<app>`:
nothing ran for twice its expected delay) is resumed.

Written apps removed from the config source are deleted as their finalizer says (`usecases.deletion`),
found first and refreshed in the same tick.

Last, reverts (`usecases.revert`): an automatic rollback's revert is opened once its operation ended, and
each rollback waiting for its revert is checked: the restored tree on the branch lifts its hold, a closed
pull request is recorded.

The tick is time-bound (a function has a deadline): it stops dispatching after `max_seconds` and reports
what was left. New heads are saved after dispatching; a change-driven refresh that was cut off or could
not be handed over is kept in `state/poll-pending.json` and goes first in the next tick (holding back the
heads instead would make a tick that is always too short start over from the same apps forever).
"""

from __future__ import annotations

import hashlib
import itertools
import random
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import structlog

from tidecd import source as git
from tidecd.base.errors import TidecdError
from tidecd.clients import retention
from tidecd.clients.store import PreconditionFailed, read_json, write_json
from tidecd.config.argocd_settings import ArgoSettings
from tidecd.config.load import (
    Application,
    ApplicationSource,
    ConfigSourceRef,
    normalize_repo_url,
    parse_config_source,
    redact_repo_url,
)
from tidecd.source import charts
from tidecd.state.app import state_key
from tidecd.triggers import pending
from tidecd.triggers.dispatch import Dispatcher, Refresh
from tidecd.usecases import appsets, deletion, revert

if TYPE_CHECKING:
    from tidecd.runtime import Runtime

log = structlog.get_logger("tidecd.usecases.poll")
now_unix = time.time

LsRemote = Callable[[str, Any], dict[str, str]]
DRIFT_SWEEP = "drift sweep"
LS_REMOTE_WORKERS = 8
BATCH_SIZE = 8
PENDING = "state/poll-pending.json"
SWEEPS = "state/poll-sweeps.json"  # with argocd-cm timeout.reconciliation: when each app was last swept
SWEEP_SLACK = 15.0  # seconds: a tick a little early still counts (Cloud Scheduler is not exact)


@dataclass
class PollSummary:
    repos_checked: int = 0
    ls_remote_calls: int = 0
    apps_refreshed: list[str] = field(default_factory=list)  # because git changed (or they are new)
    drift_checked: list[str] = field(default_factory=list)  # refreshed by the drift sweep
    errors: list[str] = field(default_factory=list)
    elapsed: float = 0.0
    left: list[str] = field(default_factory=list)  # not dispatched: the time budget ran out
    config_changed: bool = False
    resumed: list[str] = field(default_factory=list)  # running operations whose continuation was lost
    expired: int = 0  # objects deleted by retention (local backend)
    appsets_changed: list[str] = field(default_factory=list)  # ApplicationSets whose generated apps changed
    rolling_started: list[str] = field(default_factory=list)  # RollingSync syncs started this tick (stepped now)
    reverts: dict[str, str] = field(default_factory=dict)  # rollbacks' reverts: app → opened | merged | closed
    deleting: list[str] = field(default_factory=list)  # written apps removed from the config source this tick


def _expire(runtime: Runtime, summary: PollSummary) -> None:
    """Retention in the local backend (GCS expires objects by lifecycle rules): at most 1,000 per tick."""

    try:
        summary.expired = len(retention.sweep(runtime.store).deleted)
    except TidecdError as exc:
        summary.errors.append(f"retention: {exc}")


@dataclass
class _Repo:
    """One distinct repository: every spelling of its URL, and its apps."""

    urls: set[str] = field(default_factory=set)
    apps: list[Application] = field(default_factory=list)
    config_ref: str = ""  # the config source's ref when the config source lives here
    refs: dict[str, str] | None = None  # this tick's ls-remote, None when it failed
    kind: str = charts.GIT  # or a chart repository: charts.HELM (index.yaml), charts.OCI (tags)
    chart: str = ""  # the chart of Argo CD's schemeless OCI form (part of the OCI repository)
    sources: dict[str, list[ApplicationSource]] = field(default_factory=dict)  # app → its sources here
    seen: dict[str, str] | None = None  # the refs the previous tick saved (None: not read)

    @property
    def url(self) -> str:
        return min(self.urls)  # one stable spelling for ls-remote and the ref cache


def poll(runtime: Runtime, dispatcher: Dispatcher, *, max_seconds: float = 120.0,
         jitter_seconds: float = 10.0, rng: random.Random | None = None,
         now: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
         ls_remote: LsRemote = git.ls_remote, batch_size: int = BATCH_SIZE) -> PollSummary:
    start, summary = now(), PollSummary()
    if jitter_seconds > 0:  # ticks of several installations (or retries) should not hit git in lockstep
        sleep((rng or random.Random()).uniform(0, jitter_seconds))  # noqa: S311 (jitter, not crypto)
    config_at = now_unix()  # no later than the config load: its commits are handed on with the refreshes
    try:
        config_source = parse_config_source(runtime.settings.config)
        ls_remote = _once_per_repo(ls_remote)
        _refresh_appsets(runtime, ls_remote, summary)
        summary.deleting = deletion.track(runtime, summary.errors)  # removed from git: deleted (the finalizer)
        config = runtime.config()
        apps = list(config.applications.values())
        summary.errors.extend(f"config source: {p}" for p in config.problems)  # everything else keeps working
        summary.errors.extend(f"config source: app {n} set aside: {m}" for n, m in sorted(config.invalid.items()))
    except TidecdError as exc:
        summary.errors.append(f"config source: {exc}")
        summary.elapsed = now() - start
        return summary
    repos = _group(apps, config_source)
    _ls_remote_all(runtime, repos, ls_remote, summary)
    reachable = {a.name for a in apps if all(repos[k].refs is not None for k in _keys_of(a))}
    pending, generation = _load_pending(runtime, summary)
    refreshes = {r.app: r for r in pending if r.app in reachable}
    first_repo = {a.name: next(iter(_keys_of(a)), "") for a in apps}
    for name, refresh in in_turns(_changes(runtime, repos, apps, summary), first_repo).items():
        refreshes.setdefault(name, refresh)
    for name in summary.rolling_started:
        refreshes.setdefault(name, Refresh(name, "RollingSync: its step's sync started"))
    for refresh in _lost_continuations(runtime, {a.name for a in apps}, now_unix(), summary):
        refreshes.setdefault(refresh.app, refresh)
    drift = [_drift(a, repos) for a in sorted(apps, key=lambda a: a.name)
             if (a.sync_policy.self_heal or a.sync_policy.automated) and a.name not in refreshes
             and a.name in reachable]
    drift, swept = _due_for_sweep(runtime, config.argo_settings, drift, summary)
    heads = tuple(sorted(runtime.config_heads.items()))  # each step loads the config at them, no ls-remote
    sent = [replace(r, config=heads, config_at=config_at) if heads else r for r in [*refreshes.values(), *drift]]
    undone = _dispatch(sent, dispatcher, batch_size, start, max_seconds, now, summary)
    if swept is not None:
        _save_sweep(runtime, swept, {r.app for r in drift if r.app not in undone}, summary)
    summary.apps_refreshed = sorted(n for n in refreshes if n not in undone)
    summary.drift_checked = sorted(r.app for r in drift if r.app not in undone)
    _save_heads(runtime, repos, summary)
    summary.reverts = revert.check_all(runtime, dispatcher, ls_remote)  # rollbacks waiting for their revert
    carried = [r for r in pending if r.app not in reachable and any(a.name == r.app for a in apps)]
    left = [*carried, *(r for r in refreshes.values() if r.app in undone)]  # carried: its repo failed
    if left != pending:  # an unchanged list costs no write
        _save_pending(runtime, left, generation, summary)
    _expire(runtime, summary)
    summary.elapsed = now() - start
    log.info("poll", repos=summary.repos_checked, ls_remote_calls=summary.ls_remote_calls,
             refreshed=summary.apps_refreshed, resumed=summary.resumed, drift_checked=len(summary.drift_checked),
             errors=len(summary.errors), left=len(summary.left), elapsed=round(summary.elapsed, 3))
    return summary


def _once_per_repo(ls_remote: LsRemote) -> LsRemote:
    """One ls-remote per repository per tick, shared by the ApplicationSet refresh and the change check."""
    seen: dict[str, dict[str, str]] = {}

    def once(url: str, credentials: Any) -> dict[str, str]:
        key = normalize_repo_url(url)
        if key not in seen:
            seen[key] = ls_remote(url, credentials)
        return seen[key]

    return once


def _refresh_appsets(runtime: Runtime, ls_remote: LsRemote, summary: PollSummary) -> None:
    """Before the tick looks at the apps: ApplicationSets evaluated, so a generated app for a directory
    pushed since the last tick is in the config (and refreshed as never reconciled) in this very tick."""

    try:
        found = appsets.refresh(runtime, ls_remote=ls_remote)
    except TidecdError as exc:
        summary.errors.append(f"ApplicationSets: {exc}")
        return
    summary.errors.extend(f"config source: {e}" for e in found.errors)
    summary.appsets_changed = found.changed
    summary.rolling_started = found.started


def _due_for_sweep(runtime: Runtime, settings: ArgoSettings, drift: list[Refresh],
                   summary: PollSummary) -> tuple[list[Refresh], tuple[dict[str, float], int] | None]:
    """argocd-cm `timeout.reconciliation` (+ `.jitter`): the drift sweep re-compares an app only when its last
    sweep is that old (0: never; unset: every tick, tidecd's default). Git changes are found every tick
    regardless. Returns the sweeps due and the sweep memory (times by app, generation) to update."""
    timeout = settings.reconciliation_timeout
    if timeout is None:
        return drift, None
    if timeout <= 0:
        return [], None
    try:
        found = read_json(runtime.store, SWEEPS)
    except TidecdError as exc:
        summary.errors.append(f"{SWEEPS}: {exc}")
        return drift, None
    doc, generation = found if found is not None else ({}, 0)
    recorded = doc.get("swept", {}) if isinstance(doc, dict) else {}
    times = {str(k): float(v) for k, v in recorded.items() if isinstance(v, int | float)} \
        if isinstance(recorded, dict) else {}
    jitter = settings.reconciliation_jitter or 0.0
    current = now_unix()

    def due(app: str) -> bool:
        spread = (int(hashlib.sha256(app.encode()).hexdigest()[:8], 16) % 1000) / 1000 * jitter
        return bool(current - times.get(app, 0.0) >= timeout + spread - SWEEP_SLACK)

    return [r for r in drift if due(r.app)], (times, generation)


def _save_sweep(runtime: Runtime, memory: tuple[dict[str, float], int], swept: set[str],
                summary: PollSummary) -> None:
    times, generation = memory
    if not swept:
        return
    current = now_unix()
    doc = {"swept": {**times, **{app: current for app in swept}}}
    _write_unless_overlapped(runtime, SWEEPS, doc, generation, summary, "kept")


def _drift(app: Application, repos: dict[str, _Repo]) -> Refresh:
    """A drift-sweep refresh carrying the head this tick resolved (a single-source git app), so its step
    needs no ls-remote of its own."""
    if app.sources or charts.kind_of(app.source) != charts.GIT:
        return Refresh(app.name, DRIFT_SWEEP)
    repo = repos[_key_of(app.source)]
    sha = _resolve(repo.refs or {}, app.source.target_revision, repo.url) or ""
    return Refresh(app.name, DRIFT_SWEEP, sha, resolved_at=now_unix() if len(sha) == 40 else 0.0)


def _key_of(source: ApplicationSource) -> str:
    """Sources of one repository share a key; a chart repository's key names its kind (and OCI chart)."""
    kind = charts.kind_of(source)
    if kind == charts.GIT:
        return normalize_repo_url(source.repo_url)
    return f"{kind}:{normalize_repo_url(source.repo_url)}:{_oci_chart(source)}"


def _oci_chart(source: ApplicationSource) -> str:
    return source.chart if charts.kind_of(source) == charts.OCI and "://" not in source.repo_url else ""


def _keys_of(app: Application) -> list[str]:
    return [_key_of(source) for source in app.all_sources]


def _lost_continuations(runtime: Runtime, names: set[str], now: float, summary: PollSummary) -> list[Refresh]:
    """Refreshes for apps whose recorded next step is long overdue (`tidecd.triggers.pending`): a process died or a
    message was dead-lettered; the step they lead to resumes the operation and schedules a new chain."""
    try:
        recorded = pending.continuations(runtime.store)
    except TidecdError as exc:
        summary.errors.append(f"listing {pending.CONTINUATIONS}: {exc}")
        return []
    lost = [c for c in recorded if c.app in names and c.overdue(now)]
    summary.resumed = [c.app for c in lost]
    return [Refresh(c.app, f"resume: continuation lost ({c.reason})"[:200]) for c in lost]


def _group(apps: Iterable[Application], config_source: Any) -> dict[str, _Repo]:
    repos: dict[str, _Repo] = {}
    for app in apps:
        for source in app.all_sources:  # a multi-source app joins the group of each of its sources
            repo = repos.setdefault(_key_of(source), _Repo(kind=charts.kind_of(source), chart=_oci_chart(source)))
            repo.urls.add(source.repo_url)
            if app.name not in repo.sources:
                repo.apps.append(app)
            repo.sources.setdefault(app.name, []).append(source)
    if isinstance(config_source, ConfigSourceRef):
        repo = repos.setdefault(normalize_repo_url(config_source.repo_url), _Repo())
        repo.urls.add(config_source.repo_url)
        repo.config_ref = config_source.ref
    return repos


def _ls_remote_all(runtime: Runtime, repos: dict[str, _Repo], ls_remote: LsRemote,
                   summary: PollSummary) -> None:
    """One ls-remote per repository, a few at a time; a failing repository is an error, the rest go on."""

    def one(repo: _Repo, credentials: Any) -> str:
        try:
            if repo.kind == charts.GIT:
                repo.refs = ls_remote(repo.url, credentials)
            else:
                repo.refs = charts.list_refs(repo.kind, repo.url, credentials, repo.chart, store=runtime.store)
            return ""
        except TidecdError as exc:
            return str(exc)
        except Exception as exc:  # a bug or a foreign error: name the repo, never echo the message
            return f"repository {redact_repo_url(repo.url)}: ls-remote failed ({type(exc).__name__})"

    ordered, credentials = [], []
    for key in sorted(repos):  # credentials first, in this thread: unsealing is cached, not thread-safe
        try:
            credentials.append(runtime.repo_credentials(repos[key].url))
            ordered.append(repos[key])
        except TidecdError as exc:
            summary.errors.append(f"repository {redact_repo_url(repos[key].url)}: credentials: {exc}")
    summary.repos_checked = len(repos)
    if ordered:
        with ThreadPoolExecutor(max_workers=min(LS_REMOTE_WORKERS, len(ordered))) as pool:
            errors = list(pool.map(one, ordered, credentials))
        summary.ls_remote_calls = len(ordered)
        summary.errors.extend(e for e in errors if e)


def _changes(runtime: Runtime, repos: dict[str, _Repo], apps: list[Application],
             summary: PollSummary) -> dict[str, Refresh]:
    """The refreshes git changes call for, by app."""
    cache = git.RefCache(runtime.store)
    known = _reconciled_apps(runtime, summary)
    refreshes: dict[str, Refresh] = {}
    for key in sorted(repos):
        repo = repos[key]
        if repo.refs is None:
            continue
        seen = _load_heads(cache, repo.url, summary)
        repo.seen = seen
        if repo.config_ref and _moved(seen, repo.refs, repo.config_ref, repo.url):
            summary.config_changed = True
            for app in apps:
                if all(repos[k].refs is not None for k in _keys_of(app)):
                    refreshes.setdefault(app.name, Refresh(app.name, "config source changed"))
        for app in sorted(repo.apps, key=lambda a: a.name):
            for source in repo.sources.get(app.name, [app.source]):
                if repo.kind != charts.GIT:
                    reason = _chart_why(seen, repo.refs, source, app.name in known)
                    if reason:
                        refreshes.setdefault(app.name, Refresh(app.name, reason))
                    continue
                reason = _why(seen, repo.refs, source.target_revision, repo.url, app.name in known)
                if reason:
                    sha = _resolve(repo.refs, source.target_revision, repo.url) or "" if not app.sources else ""
                    refreshes.setdefault(app.name, Refresh(app.name, reason, sha,
                                                           resolved_at=now_unix() if len(sha) == 40 else 0.0))
    return refreshes


def in_turns(refreshes: dict[str, Refresh], repo_of: dict[str, str]) -> dict[str, Refresh]:
    """The refreshes one app of each repository in turn, each repository's apps in their order. Sent one
    repository after another, a repository's first apps ran on every instance at once, and each fetched the
    same snapshot (4 fetches of each repository on 4 instances in the 1,000-app scenario); in turns, the
    first step of a repository has stored its snapshot before the next app of it is stepped."""
    groups: dict[str, list[str]] = {}
    for name in refreshes:
        groups.setdefault(repo_of.get(name, ""), []).append(name)
    turns = itertools.zip_longest(*groups.values())
    return {name: refreshes[name] for turn in turns for name in turn if name is not None}


def _moved(seen: dict[str, str], refs: dict[str, str], target: str, url: str) -> bool:
    """Did `target` resolve differently last tick (or was the repository never seen)?"""
    return not seen or _resolve(seen, target, url) != _resolve(refs, target, url)


def _why(seen: dict[str, str], refs: dict[str, str], target: str, url: str, reconciled: bool) -> str:
    """Why an app needs a refresh, "" when it does not."""
    if not seen:
        return "repository first seen"
    if _moved(seen, refs, target, url):
        new = _resolve(refs, target, url)
        return f"{target} moved to {new[:12]}" if new else f"{target} no longer resolves"
    return "" if reconciled else "never reconciled"


def _chart_why(seen: dict[str, str], refs: dict[str, str], source: ApplicationSource, reconciled: bool) -> str:
    """Why a chart app needs a refresh: the version (and digest) its targetRevision selects changed."""
    if not seen:
        return "repository first seen"
    before, now = charts.resolve_from_refs(source, seen), charts.resolve_from_refs(source, refs)
    if before != now:
        return f"{source.target_revision} now selects {now.split(':')[0]}" if now else \
            f"{source.target_revision} no longer resolves"
    return "" if reconciled else "never reconciled"


def _resolve(refs: dict[str, str], target: str, url: str) -> str | None:
    try:
        return git.resolve_revision(refs, target, url)
    except TidecdError:
        return None


def _load_heads(cache: git.RefCache, url: str, summary: PollSummary) -> dict[str, str]:
    try:
        return cache.load(url)
    except (TidecdError, ValueError, AttributeError) as exc:  # unreadable memory: treat as never seen
        summary.errors.append(f"{cache.key(url)}: unreadable, treated as never seen ({type(exc).__name__})")
        return {}


def _reconciled_apps(runtime: Runtime, summary: PollSummary) -> set[str]:
    """Names of apps with a state document (one list call, not one read per app)."""
    prefix, suffix = state_key("").removesuffix(".json"), ".json"  # state/apps/<app>.json
    try:
        return {k[len(prefix) : -len(suffix)] for k in runtime.store.list(prefix) if k.endswith(suffix)}
    except TidecdError as exc:
        summary.errors.append(f"listing {prefix}: {exc}")
        return set()


def _dispatch(refreshes: list[Refresh], dispatcher: Dispatcher, batch_size: int, start: float,
              max_seconds: float, now: Callable[[], float], summary: PollSummary) -> set[str]:
    """Hand the refreshes over in small batches until the time budget is spent; the apps not handed over."""
    undone: set[str] = set()
    for i in range(0, len(refreshes), max(1, batch_size)):
        if now() - start > max_seconds:
            summary.left = [r.app for r in refreshes[i:]]
            summary.errors.append(f"time budget of {max_seconds:g}s spent: {len(summary.left)} refreshes "
                                  "left for the next tick")
            undone.update(summary.left)
            break
        failures = dispatcher.dispatch(refreshes[i : i + batch_size])
        summary.errors.extend(f"app {app}: {message}" for app, message in sorted(failures.items()))
        undone.update(failures)
    return undone


def _save_heads(runtime: Runtime, repos: dict[str, _Repo], summary: PollSummary) -> None:
    cache = git.RefCache(runtime.store)
    for key in sorted(repos):
        repo = repos[key]
        if repo.refs is None or repo.refs == repo.seen:  # unchanged heads cost no write
            continue
        try:
            cache.save(repo.url, repo.refs)
        except TidecdError as exc:
            summary.errors.append(f"saving heads of {redact_repo_url(repo.url)}: {exc}")


def _load_pending(runtime: Runtime, summary: PollSummary) -> tuple[list[Refresh], int]:
    """Refreshes an earlier tick could not hand over, and the document's generation (0: none)."""
    try:
        found = read_json(runtime.store, PENDING)
    except TidecdError as exc:
        summary.errors.append(f"{PENDING}: {exc}")
        return [], -1
    if found is None:
        return [], 0
    doc, generation = found
    entries = doc.get("refreshes", []) if isinstance(doc, dict) else []
    return [Refresh(str(e.get("app")), str(e.get("reason", "")), str(e.get("revision", "")))
            for e in entries if isinstance(e, dict) and e.get("app")], generation


def _save_pending(runtime: Runtime, refreshes: list[Refresh], generation: int,
                  summary: PollSummary) -> None:
    """Written only if nobody else wrote since we read it (an overlapping tick)."""
    if generation < 0:
        return
    doc = {"refreshes": [{"app": r.app, "reason": r.reason, "revision": r.revision} for r in refreshes]}
    _write_unless_overlapped(runtime, PENDING, doc, generation, summary, "its list was kept")


def _write_unless_overlapped(runtime: Runtime, key: str, doc: dict[str, Any], generation: int,
                             summary: PollSummary, kept: str) -> None:
    """Write the poll's own record only if nobody wrote it since we read it: an overlapping tick's
    version wins and is `kept`; either way the tick goes on, with the problem in its summary."""
    try:
        write_json(runtime.store, key, doc, if_generation_match=generation)
    except PreconditionFailed:
        summary.errors.append(f"{key}: changed by an overlapping poll; {kept}")
    except TidecdError as exc:
        summary.errors.append(f"{key}: {exc}")
