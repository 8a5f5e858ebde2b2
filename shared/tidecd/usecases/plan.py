"""One plan per pull request, for every repository tidecd reads, and the approval the sync checks (issue 28).

The preview (`tidecd.usecases.preview`) previews a pull request to an app's source. This module adds:
- **The config source.** A pull request to the repository, branch and path `TIDECD_CONFIG` names (the one
  holding Applications, AppProjects, ApplicationSets and argocd-cm) gets one job, `kind=plan`: the config is
  loaded at the head, its ApplicationSets are evaluated (`config.appset.expand`, as the ApplicationSet
  refresh does), and the apps compared with the installation's: added, removed, changed, with their spec
  changes. Each added or changed app (at most `MAX_PLAN_APPS`; the comment says when cut) is previewed
  under the head's config by the preview's own `preview_app`: the rendered diff per object against the live
  cluster by server-side dry-run (admission refusals included), the project's rules, the sync windows that
  would hold an automated sync, the hooks a sync would run. A removed app lists the objects it owns. One
  commit status (`tidecd/plan`) and one upserted comment (`plan_text`). A fork's pull request to the
  config source is not planned (the head's config would decide which credentials and clusters are used):
  its comment says so.
- **Every source of an app.** A pull request to any source of a multi-source app (chart values in another
  repository, a `ref` source) renders that source at the head and every other at its own target
  (`pr_revision`).
- **Approval.** Each preview result carries the app's plan (`tidecd.state.plans`). When the pull request
  merges, the plans of its merged head are approved (`approve_merged`); a re-plan made after the live
  objects moved is approved by a maintainer's `/tidecd apply` comment (`on_apply_command`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog

from tidecd.base.constants import ANNOTATION_MANIFEST_GENERATE_PATHS
from tidecd.base.errors import TidecdError
from tidecd.base.model import Manifest, ResourceKey
from tidecd.base.paths import inside
from tidecd.clients import github as gh
from tidecd.clients.store import read_json, write_json
from tidecd.config.load import (
    Application,
    ApplicationSource,
    Config,
    ConfigSourceRef,
    Destination,
    load_config,
    normalize_repo_url,
    parse_config_source,
)
from tidecd.diff import compare
from tidecd.runtime import Runtime
from tidecd.state import app as app_state
from tidecd.state import plans
from tidecd.usecases import forks
from tidecd.usecases.plan_text import ConfigPlan, plan_marker, render_plan
from tidecd.usecases.preview_text import AppPreview

log = structlog.get_logger("tidecd.usecases.plan")

CONFIG_JOB = "config-source"  # the `app` of the config source's job (its `kind` sets it apart from an app's)
MAX_PLAN_APPS = 20
STATUS_CONTEXT = "tidecd/plan"
APPLY_COMMAND = "/tidecd apply"
MAX_REMOVED_OBJECTS = 30

PreviewApp = Callable[[Runtime, Application, str], AppPreview]
"""The preview's `preview_app` (render under a runtime's config, compare with the live cluster), passed in."""


# --- which revision of each source a pull request previews ----------------------------------------------


def pr_revision(app: Application, head_sha: str, repo_urls: Iterable[str]) -> str:
    """The revision to preview `app` at for a pull request of `repo_urls` at `head_sha`: the head for a
    single-source app; for a multi-source one, the head for each source in the pull request's repository
    and "" (its own target) for the others, joined as the step joins them."""
    if not app.sources:
        return head_sha
    urls = set(repo_urls)
    return app_state.joined([head_sha if normalize_repo_url(s.repo_url) in urls else "" for s in app.sources])


# --- what the preview records of a plan -------------------------------------------------------------------


def hooks_of(manifests: Iterable[Manifest]) -> tuple[str, ...]:
    """The hooks a sync would run, as "PreSync Job/ns/name" (a generateName hook by its prefix)."""
    from tidecd.sync import plan as sync_plan  # lazy: cold start (the sync stage, in the job only)

    out = []
    for obj in manifests:
        phases = sync_plan.hook_phases(obj)
        if not phases:
            continue
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or f"{sync_plan.generate_name_of(obj)}*")
        where = f"{meta.get('namespace')}/{name}" if meta.get("namespace") else name
        out.append(f"{','.join(p.value for p in phases)} {obj.get('kind', '')}/{where}")
    return tuple(sorted(out))


# --- approval ---------------------------------------------------------------------------------------------


def approve_merged(runtime: Runtime, repo: gh.Repo, number: int, head_sha: str, merge_sha: str) -> list[str]:
    """The plans of the merged head become the approved ones: every app's preview result of this head and
    the config source's plan. Returns the apps whose plan was approved."""
    folder = f"previews/{repo.owner}/{repo.name}/{number}/"
    results: list[tuple[AppPreview, str]] = []
    for key in runtime.store.list(folder + "apps/"):
        found = read_json(runtime.store, key)
        if found and isinstance(found[0], dict):
            result = AppPreview.from_json(found[0])
            results.append((result, f"tidecd/preview/{result.app}"))
    found = read_json(runtime.store, folder + "plan.json")
    if found and isinstance(found[0], dict):
        results += [(r, STATUS_CONTEXT) for r in ConfigPlan.from_json(found[0]).results]
    approved = []
    for result, context in results:
        if result.head_sha != head_sha or result.plan is None or result.failed:
            continue
        plans.approve(runtime.store, plans.Approved(result.plan, repo.full_name, number, head_sha, context, merge_sha))
        approved.append(result.app)
    log.info("plans approved", pull_request=f"{repo.full_name}#{number}", head=head_sha[:12], apps=approved)
    return sorted(approved)


def on_apply_command(runtime: Runtime, repo: gh.Repo, number: int, association: str, who: str
                     ) -> tuple[int, dict[str, Any]]:
    """`/tidecd apply` by a maintainer: the re-plans of this pull request (made when the live objects
    moved before its sync) become the approved plans; the next sync applies them."""
    if association not in forks.TRUSTED_ASSOCIATIONS:
        return 200, {"ignored": f"{APPLY_COMMAND!r} by {who or 'someone'} ({association or 'no association'}) "
                                f"refused: only {', '.join(sorted(forks.TRUSTED_ASSOCIATIONS))} may approve"}
    waiting = plans.replans_of(runtime.store, repo.full_name, number)
    for replanned in waiting:
        plans.approve_replan(runtime.store, replanned)
    log.info("re-plans approved", pull_request=f"{repo.full_name}#{number}", by=who, apps=len(waiting))
    return 200, {"approved": sorted(r.plan.app for r in waiting), "pull_request": number}


# --- the config source's plan -----------------------------------------------------------------------------


def config_source_app(runtime: Runtime) -> Application | None:
    """The config source as an app that follows its repository, branch and path, so that the webhook's own
    matching (`preview.Select`: repository, base branch, changed files) says whether a pull request touches
    it. None when the config source is a directory."""
    source = parse_config_source(runtime.settings.config)
    if not isinstance(source, ConfigSourceRef):
        return None
    narrow = () if source.path == "." else ((ANNOTATION_MANIFEST_GENERATE_PATHS, f"/{source.path}"),)
    return Application(CONFIG_JOB, "default", ApplicationSource(source.repo_url, source.path, source.ref),
                       Destination(), annotations=narrow)


def head_config(runtime: Runtime, head_sha: str) -> Config:
    """The config source at the pull request's head, its ApplicationSets evaluated as the refresh does, and
    the apps of apps the installation knows (their records, as `Runtime.config`)."""
    # lazy: cold start (git, the ApplicationSet generators: in the job only, never in the webhook's answer)
    from tidecd.config.appset.expand import expand
    from tidecd.generated import records as generated
    from tidecd.source import checkouts, gitremote
    from tidecd.usecases.appsets import RuntimeSources

    source = parse_config_source(runtime.settings.config)
    assert isinstance(source, ConfigSourceRef)
    creds = gitremote.credentials_for(source.repo_url, runtime.plain_secrets_unsealed_later())
    with checkouts.tree(runtime.store, source.repo_url, head_sha, creds) as root:
        base = load_config(inside(root, source.path, what="TIDECD_CONFIG path"), display=str(source), strict=False)
    records: dict[str, dict[str, Any]] = {}
    sources = RuntimeSources(runtime)
    try:
        for appset in base.appsets.values():
            expansion = expand(appset, sources)
            records[appset.label] = {"owner": appset.label, "errors": expansion.errors, "apps": {
                g.name: {"doc": g.doc, "generator": g.generator} for g in expansion.apps.values()}}
    finally:
        sources.close()
    problems: list[str] = []
    for owner, record in generated.safe_load_records(runtime.store, problems).items():
        if generated.owner_kind(owner) == "Application":
            records[owner] = record
    return generated.merge(base, records)


def spec_doc(app: Application) -> dict[str, Any]:
    """The app as the diff shows it: its fields without where it was read from, and without the empty ones
    (an unset helm section is no change to show)."""
    return _doc("Application", app)


def _set_only(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {k: _set_only(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in (None, "", [], {})}
    if isinstance(value, list):
        return [_set_only(v) for v in value]
    return value


def compare_configs(base: Config, head: Config) -> tuple[list[str], list[str], dict[str, str]]:
    """(added, removed, changed: name → spec diff) between the installation's apps and the head's. An app
    whose AppProject changed is changed too (its rules and sync windows), with the project's diff."""
    added = sorted(set(head.applications) - set(base.applications))
    removed = sorted(set(base.applications) - set(head.applications) - set(head.invalid))
    changed = {}
    for name in sorted(set(base.applications) & set(head.applications)):
        app = head.applications[name]
        was, now = spec_doc(base.applications[name]), spec_doc(app)
        diffs = [compare(ResourceKey("argoproj.io", "Application", "", name), was, now, sides=("base", "head")).text
                 ] if was != now else []
        before, after = base.projects.get(app.project), head.projects.get(app.project)
        if before != after and before is not None and after is not None:
            key = ResourceKey("argoproj.io", "AppProject", "", app.project)
            diffs.append(compare(key, _doc("AppProject", before), _doc("AppProject", after), sides=("base", "head"))
                         .text)
        if diffs:
            changed[name] = "\n".join(diffs)
    return added, removed, changed


def _doc(kind: str, value: Any) -> dict[str, Any]:
    fields = json.loads(json.dumps(dataclasses.asdict(dataclasses.replace(value, origin="")), default=str))
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": kind, "metadata": {"name": value.name},
            "spec": _set_only(fields)}


def config_plan(runtime: Runtime, head_sha: str, preview_app: PreviewApp) -> ConfigPlan:
    """The config source's plan at `head_sha` (see the module docstring). Never raises for a head that
    cannot be loaded: the plan then holds the error."""
    try:
        head = head_config(runtime, head_sha)
    except TidecdError as exc:
        return ConfigPlan(head_sha, errors=(f"the config source at the head: {exc}",))
    return plan_configs(runtime, runtime.config(), head, head_sha, preview_app)


def plan_configs(runtime: Runtime, base: Config, head: Config, head_sha: str, preview_app: PreviewApp) -> ConfigPlan:
    """The plan of moving from the installation's config `base` to the head's `head`: each added or changed
    app (at most MAX_PLAN_APPS) previewed under the head's config, each removed app with what it owns."""
    added, removed, changed = compare_configs(base, head)
    errors = tuple(f"Application {name}: {why}" for name, why in sorted(head.invalid.items())
                   if base.invalid.get(name) != why) + tuple(p for p in head.problems if p not in base.problems)
    planned = [*added, *changed][:MAX_PLAN_APPS]
    runner = runtime.with_config(head)
    results = []
    for name in planned:
        try:
            results.append(preview_app(runner, head.applications[name], ""))
        except TidecdError as exc:
            results.append(AppPreview(name, head_sha, errors=(str(exc),)))
    results = [dataclasses.replace(r, head_sha=head_sha) for r in results]
    gone = tuple((name, _owned(runtime, name)) for name in removed)
    return ConfigPlan(head_sha, tuple(added), gone, tuple(sorted(changed.items())), tuple(results),
                      len(added) + len(changed) - len(planned), errors)


def _owned(runtime: Runtime, app: str) -> tuple[str, ...]:
    try:
        state = app_state.load(runtime.store, app)[0]
    except TidecdError:
        return ()
    return tuple(str(k) for k, _ in state.inventory_keys())[:MAX_REMOVED_OBJECTS]


def run_config_job(runtime: Runtime, job: Mapping[str, Any], preview_app: PreviewApp) -> None:
    """The config source's plan of one pull-request head: store it, post `tidecd/plan`, upsert the comment.
    The mode is the stored request's (the webhook's decision). Never raises."""
    repo, number, sha = gh.Repo(str(job["owner"]), str(job["repo"])), int(job["number"]), str(job["head_sha"])
    folder = f"previews/{repo.owner}/{repo.name}/{number}/"
    try:
        request = read_json(runtime.store, folder + "request.json")
        if request is None or request[0].get("head_sha") != sha:
            log.info("plan skipped: the PR moved on", head=sha[:12])
            return
        if request[0].get("mode") == forks.Mode.FULL.value:
            result = config_plan(runtime, sha, preview_app)
        else:
            result = ConfigPlan(sha, errors=("a fork's change to the config source is not planned: the config at "
                                             "its head would choose the credentials and clusters a plan uses",))
        write_json(runtime.store, folder + "plan.json", result.to_json())
        log.info("config plan done", head=sha[:12], summary=result.summary())
        client = gh.client_for(runtime.secrets(), runtime.store, runtime.settings.github_api_url or gh.DEFAULT_API_URL)
        if client is None:
            return
        client.status(repo, sha, "failure" if result.failed else "success", STATUS_CONTEXT, result.summary(),
                      runtime.settings.public_url)
        client.comment(repo, number, plan_marker(repo, number), render_plan(repo, number, result))
    except Exception as exc:  # noqa: BLE001 - a plan never breaks anything else
        log.warning("config plan failed", head=sha[:12], error=type(exc).__name__, detail=str(exc)[:300])


def config_job(pr_owner: str, pr_repo: str, number: int, head_sha: str) -> dict[str, Any]:
    return {"kind": "plan", "app": CONFIG_JOB, "owner": pr_owner, "repo": pr_repo, "number": number,
            "head_sha": head_sha, "at": time.time()}
