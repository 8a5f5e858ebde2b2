"""Applications tidecd generates: from ApplicationSets and from app-of-apps parents, joined to the config.

Both owners keep what they generated in one record each in the object store:

    state/generated/applicationset-<name>.json   written by the ApplicationSet refresh (poll, webhook)
    state/generated/application-<parent>.json    written by the parent's sync (its Application objects)

    {"owner": "ApplicationSet/<name>", "apps": {"<app>": {"doc": {...Application...}, "generator": "...",
     "deleting": false}}, "projects": {"<name>": {...AppProject...}}, "errors": [...], ...}

`merge` reads the records into a loaded `Config`: every document is validated like a written one (errors
set aside that app only, naming the owner and the generator), an app may not shadow a written app or
project, and a child of an app of apps must stay within its parent's project (its source repository and
destination must be allowed there too: a child never widens what its parent may do).

Under an ApplicationSet's RollingSync strategy a generated app's automated sync is held (Argo CD turns
autosync off on them): the strategy's steps start its syncs, and the record keeps each app's
`applicationStatus` (Waiting, Pending, Progressing, Healthy) between triggers.

Removal, as Argo CD's finalizer does it: an app no longer generated (or whose owner is gone) with the
`resources-finalizer.argocd.argoproj.io` finalizer (and, for ApplicationSets, without
`preserveResourcesOnDeletion`) stays in the config as *deleting*: it desires nothing but its deletion
hooks, and its deletion (`tidecd.step.deletion`) runs its PreDelete hooks, prunes what it owns through the
ordinary engine (wave by wave, highest first, with the finalizer's propagation: foreground, or background
for `.../background`), runs its PostDelete hooks, and once nothing is left its record entry is dropped
(`forget`). The entry's `stage` says how far it got. Without the finalizer it leaves the config at once and
its objects are left alone.

Apps written in the config source are deleted the same way: `track_written` (each poll tick) keeps the
last spec of every written app that has the finalizer in `state/written-apps.json`; one that is gone from
the config source (not set aside, its file not unreadable, its team source loaded) moves to the record
`Config/removed` as deleting. `tidecd app delete` (`tidecd.usecases.deletion`) puts an app there with the
cascade it was asked for.
An ApplicationSet removed with RollingSync and `deletionOrder: Reverse` (its record says so) has its apps
removed one step at a time, the last step first: only the apps its refresh flagged *deleting* are deleting,
the others stay (their automated sync held) until the steps after theirs are gone.
An ApplicationSet removed under `applicationsSync: create-only|create-update` leaves its record `orphaned`:
its apps stay as they are (Argo CD removes their owner references instead of deleting them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from tidecd.base.constants import ARGO_VERSION
from tidecd.base.errors import TidecdError
from tidecd.clients.store import ObjectStore, PreconditionFailed, read_json, write_json
from tidecd.config.cache import decode_app, encode_app
from tidecd.config.model import Application, AppProject, Config, SyncPolicy
from tidecd.config.schema import PARSERS, Errors, Node
from tidecd.project import rules

PREFIX = "state/generated/"
FINALIZERS = ("resources-finalizer.argocd.argoproj.io", "resources-finalizer.argocd.argoproj.io/background",
              "resources-finalizer.argocd.argoproj.io/foreground")
BACKGROUND_FINALIZER = "resources-finalizer.argocd.argoproj.io/background"
ANNOTATION_DELETING = "tidecd.io/deleting"
ANNOTATION_STAGE = "tidecd.io/deletion-stage"  # how far the deletion got (`tidecd.sync.deletion.Stage`)
REMOVED = "Config/removed"  # written apps removed from the config source (or by `tidecd app delete`)
WRITTEN = "state/written-apps.json"  # the last spec of each written app with the resources finalizer
MAX_DEPTH = 5  # app of apps of apps ...
ATTEMPTS = 8


def record_key(owner: str) -> str:
    kind, _, name = owner.partition("/")
    return f"{PREFIX}{kind.lower()}-{name}.json"


def owner_kind(owner: str) -> str:
    return owner.partition("/")[0]


def owner_name(owner: str) -> str:
    return owner.partition("/")[2]


def cascades(doc: Mapping[str, Any]) -> bool:
    """Whether removing this Application deletes its objects (Argo CD's resources finalizer)."""
    return bool(cascade_of((doc.get("metadata") or {}).get("finalizers") or []))


def cascade_of(finalizers: Any) -> str:
    """The propagation of the deletion Argo CD's resources finalizer asks for: "foreground" (the plain
    finalizer or `.../foreground`), "background" (`.../background`), or "" (none: objects are orphaned)."""
    names = [f for f in finalizers if isinstance(f, str)] if isinstance(finalizers, list | tuple) else []
    if BACKGROUND_FINALIZER in names:
        return "background"
    return "foreground" if any(f in FINALIZERS for f in names) else ""


def set_stage(store: ObjectStore, owner: str, app: str, stage: str) -> None:
    """Record how far a deleting app's deletion got."""

    def change(record: dict[str, Any]) -> dict[str, Any] | None:
        apps = dict(record.get("apps") or {})
        entry = apps.get(app)
        if not isinstance(entry, dict) or entry.get("stage", "") == stage:
            return None
        apps[app] = {**entry, "stage": stage}
        return {**record, "apps": apps}

    update(store, owner, change)


def load_records(store: ObjectStore) -> dict[str, dict[str, Any]]:
    """Every record by owner (one list call, one read per owner)."""
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(store.list(PREFIX)):
        if not key.endswith(".json"):
            continue
        found = read_json(store, key)
        if found is None or not isinstance(found[0], dict) or not isinstance(found[0].get("owner"), str):
            continue
        out[found[0]["owner"]] = found[0]
    return out


def update(store: ObjectStore, owner: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]) -> bool:
    """Read-modify-write of one record with a generation precondition; `change` returns the new record, or
    None for "no change"; an empty record (no apps, no projects, no errors) is deleted. True if written."""
    key = record_key(owner)
    for _ in range(ATTEMPTS):
        found = read_json(store, key)
        current, generation = (found if found is not None else ({"owner": owner, "apps": {}}, 0))
        if not isinstance(current, dict):
            current = {"owner": owner, "apps": {}}
        new = change(dict(current))
        if new is None or new == current:
            return False
        new["owner"] = owner
        try:
            if not new.get("apps") and not new.get("projects") and not new.get("errors"):
                if generation:
                    store.delete(key, if_generation_match=generation)
                return True
            write_json(store, key, new, if_generation_match=generation)
            return True
        except PreconditionFailed:
            continue
    raise PreconditionFailed(f"{key}: kept changing")


def forget(store: ObjectStore, owner: str, app: str) -> None:
    """Drop a deleted app's entry (its objects are gone)."""

    def change(record: dict[str, Any]) -> dict[str, Any] | None:
        apps = dict(record.get("apps") or {})
        if app not in apps:
            return None
        del apps[app]
        return {**record, "apps": apps}

    update(store, owner, change)


# --------------------------------------------------------------------------------------------------
# Joining the records to a loaded config


def merge(base: Config, records: Mapping[str, Mapping[str, Any]]) -> Config:
    """A new Config: `base` plus every generated app and project (see the module docstring)."""
    config = dataclasses.replace(
        base, applications=dict(base.applications), projects=dict(base.projects), invalid=dict(base.invalid),
        problems=list(base.problems), owners=dict(base.owners), deleting=set(base.deleting))
    written_apps, written_projects = set(base.applications) | set(base.invalid), set(base.projects)
    pending = dict(records)
    for _ in range(MAX_DEPTH):  # a child's own children join once the child is in
        progressed = False
        for owner in sorted(pending):
            if not _owner_known(config, owner) and not _owner_gone(config, owner, pending):
                continue
            _merge_record(config, pending.pop(owner), owner, written_apps, written_projects)
            progressed = True
        if not progressed:
            break
    for owner, record in sorted(pending.items()):  # an owner set aside itself: keep its apps set aside too
        for name in sorted(record.get("apps") or {}):
            if name not in written_apps:
                config.invalid.setdefault(name, f"{owner} is set aside, so is what it generated")
    return config


def _owner_known(config: Config, owner: str) -> bool:
    if owner == REMOVED:
        return True
    name = owner_name(owner)
    if owner_kind(owner) == "ApplicationSet":
        return name in config.appsets
    return name in config.applications


def _owner_gone(config: Config, owner: str, pending: Mapping[str, Any]) -> bool:
    """The owner is neither defined nor set aside (nor still to come from another record): its apps go."""
    name = owner_name(owner)
    if owner_kind(owner) == "ApplicationSet":
        return name not in config.invalid_appsets
    if name in config.invalid:
        return False
    return not any(name in (r.get("apps") or {}) for r in pending.values())


def _merge_record(config: Config, record: Mapping[str, Any], owner: str, written_apps: set[str],
                  written_projects: set[str]) -> None:
    gone = not _owner_known(config, owner) and not record.get("orphaned")  # orphaned: its apps stay, unowned
    reverse = record.get("deletionOrder") == "Reverse"
    appset = config.appsets.get(owner_name(owner)) if owner_kind(owner) == "ApplicationSet" else None
    preserve = bool(getattr(appset, "preserve_resources_on_deletion", False))
    parent = config.applications.get(owner_name(owner)) if owner_kind(owner) == "Application" else None
    config.problems.extend(str(e) for e in record.get("errors") or [])
    if owner == REMOVED:
        _merge_removed(config, record, written_apps)
        return
    for name, doc in sorted((record.get("projects") or {}).items()):
        if gone:
            break
        project = _parse(doc, f"{owner} manifests", "AppProject", config)
        if project is None:
            continue
        if not isinstance(project, AppProject) or name in written_projects or name in config.projects:
            config.problems.append(f"{owner} manifests: AppProject/{name}: metadata.name: a project of that name "
                                   "is already defined; the generated one is ignored")
            continue
        config.projects[name] = project
    for name, entry in sorted((record.get("apps") or {}).items()):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("doc"), Mapping):
            continue
        origin = f"{owner} ({entry.get('generator') or 'generated'})"
        if name in written_apps or name in config.applications:
            config.problems.append(f"{origin}: Application/{name}: metadata.name: an app of that name is already "
                                   "defined; the generated one is ignored")
            continue
        # deletionOrder Reverse: the refresh flags the apps of one step at a time (`usecases.appsets`)
        deleting = bool(entry.get("deleting")) or (gone and not reverse)
        if deleting and (preserve or not cascades(entry["doc"])):
            continue  # leaves at once; its objects are left alone (no finalizer)
        problems: list[str] = []
        app = _parse(entry["doc"], origin, "Application", config, problems)
        if not isinstance(app, Application):
            config.invalid[name] = "; ".join(problems) or f"{origin}: Application/{name}: invalid"
            continue
        if app.project not in config.projects:
            config.invalid[name] = (f"{origin}: Application/{name}: spec.project: project {app.project!r} is not "
                                    "defined in the config source")
            continue
        if parent is not None and not deleting and (violations := _widens(config, parent, app)):
            config.invalid[name] = f"{origin}: Application/{name}: " + "; ".join(violations)
            continue
        if deleting:
            app = _deleting(app, entry)
            config.deleting.add(name)
        elif (getattr(appset, "rolling_steps", None) is not None or gone) and app.sync_policy.automated:
            # RollingSync (`step.rolling`) starts its syncs, never itself; nor while its owner is deleted step by step
            app = dataclasses.replace(app, sync_policy=dataclasses.replace(app.sync_policy, automated=False,
                                                                           self_heal=False))
        config.applications[name] = app
        config.owners[name] = owner


def _parse(doc: Any, origin: str, kind: str, config: Config, problems: list[str] | None = None) -> object:
    if not isinstance(doc, Mapping) or (doc.get("apiVersion"), doc.get("kind")) != (ARGO_VERSION, kind):
        if problems is not None:
            problems.append(f"{origin}: expected an {ARGO_VERSION} {kind}")
        return None
    errors: list[str] = []
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    item = PARSERS[(ARGO_VERSION, kind)](Node(dict(doc), "", Errors(origin, f"{kind}/{name}", errors)))
    if errors:
        if problems is not None:
            problems.extend(errors)
        else:
            config.problems.extend(errors)
        return None
    return item


def _widens(config: Config, parent: Application, child: Application) -> list[str]:
    """What a child of an app of apps does that its parent's project does not allow."""

    scope = config.projects.get(parent.project)
    if scope is None:
        return [f"spec.project: the parent's project {parent.project!r} is not defined"]
    found = [f"{p} (the parent {parent.name}'s project {scope.name!r} does not allow it)"
             for p in rules.check_source(scope, child) + rules.check_destination(scope, child.destination)]
    return found


def _merge_removed(config: Config, record: Mapping[str, Any], written_apps: set[str]) -> None:
    """Written apps removed from the config source, still deleting their objects (a name written again is
    the written app: `track_written` drops its entry at the next tick)."""
    for name, entry in sorted((record.get("apps") or {}).items()):
        if not isinstance(entry, Mapping) or name in written_apps or name in config.applications:
            continue
        app = decode_app(entry.get("app"))
        if app is None or app.name != name:
            config.invalid[name] = (f"{REMOVED}: Application/{name}: its last spec cannot be read; its deletion "
                                    "waits (delete it again with `tidecd app delete`)")
            continue
        if app.project not in config.projects:
            config.invalid[name] = (f"{app.origin}: Application/{name}: spec.project: project {app.project!r} is not "
                                    "defined in the config source, so its deletion waits")
            continue
        config.applications[name] = _deleting(app, entry)
        config.owners[name] = REMOVED
        config.deleting.add(name)


def _deleting(app: Application, entry: Mapping[str, Any]) -> Application:
    """An app being removed: it desires only its deletion hooks and prunes everything it owns, automatically,
    with the propagation of its finalizer (or of `tidecd app delete --cascade`)."""
    cascade = str(entry.get("cascade") or cascade_of(app.finalizers) or "foreground")
    options = tuple(o for o in app.sync_policy.sync_options if not o.startswith("PrunePropagationPolicy="))
    policy = SyncPolicy(automated=True, prune=True, self_heal=False, allow_empty=True,
                        sync_options=(*options, f"PrunePropagationPolicy={cascade}"), retry=app.sync_policy.retry)
    return dataclasses.replace(app, sync_policy=policy, annotations=(
        *app.annotations, (ANNOTATION_DELETING, "true"), (ANNOTATION_STAGE, str(entry.get("stage") or ""))))


def deletion_stage(app: Application) -> str:
    return app.annotation(ANNOTATION_STAGE)


def is_deleting(app: Application) -> bool:
    return app.annotation(ANNOTATION_DELETING) == "true"


def safe_load_records(store: ObjectStore, problems: list[str]) -> dict[str, dict[str, Any]]:
    try:
        return load_records(store)
    except TidecdError as exc:
        problems.append(f"{PREFIX}: cannot read generated apps: {exc}")
        return {}


# --------------------------------------------------------------------------------------------------
# Written apps: their removal from the config source


def track_written(store: ObjectStore, config: Config, source: str) -> list[str]:
    """Keep the last spec of each written app that has the resources finalizer, and move those the config
    source no longer declares to `REMOVED` as deleting; the apps newly deleting. An app is never taken for
    removed while it may only be unreadable: set aside, its file among the load's problems, its team source
    not loaded, or the config source itself changed (`source`: its display)."""
    found = read_json(store, WRITTEN)
    known, generation = found if found is not None and isinstance(found[0], dict) else ({}, 0)
    kept = {n: e for n, e in (known.get("apps") or {}).items() if isinstance(e, dict)}
    same_source = known.get("source") in (None, source)
    written = {n: a for n, a in config.applications.items() if n not in config.owners}
    removed = []
    if same_source:
        unavailable = {t.name for t in config.team_sources
                       if any(f"team config source {t.name!r}" in p and "could not be loaded" in p
                              for p in config.problems)}
        for name, entry in sorted(kept.items()):
            origin = str(entry.get("origin") or "")
            if (name in written or name in config.invalid or entry.get("team", "") in unavailable
                    or (origin and any(origin in p for p in config.problems))):
                continue
            removed.append(name)
    doc = {"source": source, "apps": {name: written_entry(app, config.teams.get(name, ""))
                                      for name, app in sorted(written.items()) if cascade_of(app.finalizers)}}
    for name in removed:
        mark_removed(store, name, kept[name], "")

    def back(record: dict[str, Any]) -> dict[str, Any] | None:  # written again: it is the written app
        apps = record.get("apps") or {}
        return {**record, "apps": {n: e for n, e in apps.items() if n not in written}} if set(apps) & set(written) \
            else None

    update(store, REMOVED, back)
    if doc != known:
        write_json(store, WRITTEN, doc, if_generation_match=generation)
    return removed


def mark_removed(store: ObjectStore, name: str, entry: Mapping[str, Any], cascade: str) -> None:
    """Put a written app in `REMOVED` as deleting (its last spec in `entry["app"]`); `cascade` overrides its
    finalizer's propagation ("foreground", "background")."""

    def change(record: dict[str, Any]) -> dict[str, Any] | None:
        apps = dict(record.get("apps") or {})
        old = apps.get(name)
        if isinstance(old, dict) and old.get("deleting"):  # already deleting: its stage goes on
            return {**record, "apps": {**apps, name: {**old, "cascade": cascade}}} if cascade else None
        apps[name] = {"app": entry.get("app"), "origin": entry.get("origin", ""), "deleting": True,
                      **({"cascade": cascade} if cascade else {})}
        return {**record, "apps": apps}

    update(store, REMOVED, change)


def written_entry(app: Application, team: str = "") -> dict[str, Any]:
    """What `mark_removed` needs of a written app."""
    return {"app": encode_app(app), "origin": app.origin, "team": team}


def untrack(store: ObjectStore, name: str) -> None:
    """Forget a written app's last spec (`tidecd app delete --cascade=orphan`: its removal deletes nothing)."""
    found = read_json(store, WRITTEN)
    if found is None or not isinstance(found[0], dict) or name not in (found[0].get("apps") or {}):
        return
    doc, generation = found
    apps = {n: e for n, e in (doc.get("apps") or {}).items() if n != name}
    write_json(store, WRITTEN, {**doc, "apps": apps}, if_generation_match=generation)
