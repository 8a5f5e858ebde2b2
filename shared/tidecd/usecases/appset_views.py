"""What an ApplicationSet generates, shown to people: `tidecd appset generate FILE|NAME`, the api's
`/applicationsets` routes and the dashboard's ApplicationSets page all answer from here.

`generate` evaluates one ApplicationSet now, with the refresh's own path (`config.appset.expand` through
`usecases.appsets.RuntimeSources`), and compares what it yields with what is recorded
(`generated.records`) under the ApplicationSet's `applicationsSync`: the apps it would add, change and
remove, and those the policy keeps as they are. It writes nothing: a preview, as Argo CD's
`argocd appset generate`. A manifest (FILE) is read by the config loader itself, so a bad field is named
by the file, the object and the field, as when the config source loads; its generated apps are checked
against the config source's projects.

RBAC as Argo CD's ApplicationSet service: `applicationsets, get` on `PROJECT/NAME` (the template's
project) to see an ApplicationSet; `applicationsets, create` to generate from a manifest, whose template's
project must be set, not templated, and defined (Argo CD's Generate asks the same); only the generated apps
the caller may `applications, get` are listed.
"""

from __future__ import annotations

import copy
import dataclasses
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import yaml

from tidecd.base.errors import NotFound, PermanentError, TidecdError
from tidecd.base.model import ResourceKey, Response
from tidecd.base.principal import Principal
from tidecd.config import rbac
from tidecd.config.appset.expand import Expansion, apply_policy, expand
from tidecd.config.appset.model import ApplicationSet
from tidecd.config.load import Config, load_config
from tidecd.diff import compare
from tidecd.generated import records as generated
from tidecd.state import app as app_state
from tidecd.usecases import api, authz
from tidecd.usecases.appsets import RuntimeSources

if TYPE_CHECKING:
    from tidecd.runtime import Runtime

MAX_MANIFEST = 1 << 20  # a manifest to generate from: 1 MiB of YAML is far more than any ApplicationSet


def project_of(appset: ApplicationSet) -> str:
    """The ApplicationSet's RBAC project, as Argo CD's `RBACName`: the template's `spec.project` (a templated
    one cannot be known before generating: `*`, which only a policy over every project matches)."""
    project = (appset.template.get("spec") or {}).get("project")
    return project if isinstance(project, str) and project and "{{" not in project else "*"


def may_see(config: Config, principal: Principal, appset: ApplicationSet, action: str = "get") -> bool:
    return authz.allowed(config, principal, rbac.APPLICATIONSETS, action, f"{project_of(appset)}/{appset.name}")


def _visible_doc(config: Config, principal: Principal, name: str, doc: Mapping[str, Any]) -> bool:
    project = str((doc.get("spec") or {}).get("project") or "default")
    return authz.allowed(config, principal, rbac.APPLICATIONS, "get", f"{project}/{name}")


def _app_item(name: str, doc: Mapping[str, Any], generator: str) -> dict[str, Any]:
    spec = doc.get("spec") or {}
    source: Mapping[str, Any] = spec.get("source") or next(iter(spec.get("sources") or []), {}) or {}
    dest = spec.get("destination") or {}
    return {"name": name, "project": str(spec.get("project") or "default"),
            "repoURL": str(source.get("repoURL") or ""), "path": str(source.get("path") or source.get("chart") or ""),
            "targetRevision": str(source.get("targetRevision") or ""),
            "destination": str(dest.get("name") or dest.get("server") or ""), "namespace": str(dest.get("namespace")
                                                                                               or ""),
            "generator": generator, "manifest": yaml.safe_dump(dict(doc), sort_keys=False)}


def compare_records(appset: ApplicationSet, expansion: Expansion, record: Mapping[str, Any]) -> dict[str, Any]:
    """What recording `expansion` would do to `record` under `applicationsSync` (pure; see the module
    docstring): added, changed (name → the Application's diff), removed, kept by the policy, unchanged.
    A failed evaluation changes nothing, as the refresh keeps what was generated before."""
    old = {n: e for n, e in (record.get("apps") or {}).items() if isinstance(e, dict) and not e.get("deleting")}
    new: dict[str, dict[str, Any]] = {g.name: {"doc": g.doc, "generator": g.generator}
                                      for g in expansion.apps.values()}
    out: dict[str, Any] = {"added": [], "changed": {}, "removed": [], "kept": [], "unchanged": []}
    if expansion.failed:
        out["kept"] = sorted(old)
        return out
    kept, gone = apply_policy(appset.applications_sync, new, old)
    for name in sorted(set(old) | set(new)):
        if name in gone:
            out["removed"].append(name)
        elif name not in old:
            out["added"].append(name)
        elif old[name]["doc"] == (new.get(name) or {}).get("doc"):
            out["unchanged"].append(name)
        elif name not in new or kept[name] is old[name]:
            out["kept"].append(name)  # the policy keeps it as it was (create-only, create-update, create-delete)
        else:
            key = ResourceKey("argoproj.io", "Application", "", name)
            sides = ("recorded", "generated")
            out["changed"][name] = compare(key, old[name]["doc"], new[name]["doc"], sides=sides).text
    return out


def generate(runtime: Runtime, principal: Principal, appset: ApplicationSet, config: Config) -> dict[str, Any]:
    """Evaluate `appset` now and compare it with its record (writes nothing)."""
    sources = RuntimeSources(runtime)
    try:
        try:
            expansion = expand(appset, sources)
        except TidecdError as exc:
            expansion = Expansion(errors=[f"{appset.origin}: {appset.label}: {exc}"], failed=True)
    finally:
        sources.close()
    errors = list(expansion.errors) + _set_aside(config, appset, expansion)
    record = generated.load_records(runtime.store).get(appset.label) or {}
    diff = compare_records(appset, expansion, record)
    shown = {n for n, g in expansion.apps.items() if _visible_doc(config, principal, n, g.doc)}
    recorded = {n: e.get("doc") or {} for n, e in (record.get("apps") or {}).items() if isinstance(e, dict)}
    shown |= {n for n, d in recorded.items() if _visible_doc(config, principal, n, d)}
    diff = {k: ({n: t for n, t in v.items() if n in shown} if isinstance(v, dict) else [n for n in v if n in shown])
            for k, v in diff.items()}
    return {"applicationSet": appset.name, "origin": appset.origin, "applicationsSync": appset.applications_sync,
            "failed": expansion.failed, "errors": errors,
            "applications": [_app_item(g.name, g.doc, g.generator) for n, g in sorted(expansion.apps.items())
                             if n in shown],
            "diff": diff}


def _set_aside(config: Config, appset: ApplicationSet, expansion: Expansion) -> list[str]:
    """Why generated apps would be set aside once recorded: each is joined to the config by the records' own
    `merge`, as the refresh's record is (every field validated, its project defined, no written app shadowed),
    in place of what the ApplicationSet generated before."""
    base = dataclasses.replace(config, appsets={**config.appsets, appset.name: appset}, applications={
        n: a for n, a in config.applications.items() if config.owners.get(n) != appset.label},
        invalid={n: p for n, p in config.invalid.items() if n not in expansion.apps}, problems=[])
    record = {"owner": appset.label, "apps": {g.name: {"doc": copy.deepcopy(g.doc), "generator": g.generator}
                                              for g in expansion.apps.values()}}
    merged = generated.merge(base, {appset.label: record})
    found = [merged.invalid[n] for n in sorted(expansion.apps) if n in merged.invalid]
    return [f"{appset.origin}: {e}" for e in [*found, *merged.problems]]


def read_manifest(text: str, filename: str) -> ApplicationSet:
    """The one ApplicationSet of a manifest, read by the config loader (errors name `filename`, the object
    and the field)."""
    if len(text.encode()) > MAX_MANIFEST:
        raise PermanentError(f"{filename}: larger than {MAX_MANIFEST} bytes")
    posix = PurePosixPath(filename or "applicationset.yaml")
    base = posix.name if posix.suffix in (".yaml", ".yml", ".json") else f"{posix.name or 'manifest'}.yaml"
    with tempfile.TemporaryDirectory(prefix="tidecd-appset-file-") as tmp:
        (Path(tmp) / base).write_text(text, encoding="utf-8")
        parent = str(posix.parent) if str(posix.parent) not in ("", ".") else ""
        loaded = load_config(Path(tmp), display=parent, strict=False)
    bad = [f"ApplicationSet/{n}: {p}" if filename not in p else p for n, p in sorted(loaded.invalid_appsets.items())]
    if bad:
        raise PermanentError("; ".join(bad))
    if len(loaded.appsets) != 1:
        others = "; ".join(loaded.problems)[:2000]
        raise PermanentError(f"{filename}: expected one argoproj.io/v1alpha1 ApplicationSet, found "
                             f"{len(loaded.appsets)}" + (f" ({others})" if others else ""))
    found: ApplicationSet = next(iter(loaded.appsets.values()))
    return found


def summaries(runtime: Runtime, principal: Principal) -> list[dict[str, Any]]:
    """Every ApplicationSet the caller may see, with its generated apps (those it may see: their sync and
    health as recorded) and its errors, from the records and the loaded config."""
    config = runtime.config()
    records = generated.safe_load_records(runtime.store, [])
    out = []
    for _, appset in sorted(config.appsets.items()):
        if may_see(config, principal, appset):
            out.append(_summary(runtime, principal, config, appset, records.get(appset.label) or {}))
    if authz.allowed(config, principal, rbac.APPLICATIONSETS, "get", "*/*"):
        for name, problem in sorted(config.invalid_appsets.items()):
            out.append({"name": name, "origin": "", "applicationsSync": "", "apps": [], "errors": [problem],
                        "invalid": True})
    return out


def _summary(runtime: Runtime, principal: Principal, config: Config, appset: ApplicationSet,
             record: Mapping[str, Any]) -> dict[str, Any]:
    owned = sorted(n for n, o in config.owners.items() if o == appset.label)
    apps = []
    progress = record.get("applicationStatus") or {}
    for name in authz.visible(config, principal, owned):
        state = app_state.load(runtime.store, name)[0]
        apps.append({"name": name, "sync": str(state.sync_status), "health": str(state.health),
                     "generator": config.applications[name].origin, "deleting": name in config.deleting})
        if appset.rolling_steps is not None and isinstance(progress.get(name), dict):  # RollingSync's status
            apps[-1]["applicationStatus"] = {k: str(progress[name].get(k, "")) for k in ("status", "message", "step")}
    invalid = [{"name": n, "error": config.invalid[n]} for n in sorted(record.get("apps") or {})
               if n in config.invalid and authz.allowed(config, principal, rbac.APPLICATIONSETS, "get", "*/*")]
    return {"name": appset.name, "origin": appset.origin, "applicationsSync": appset.applications_sync,
            "strategy": "AllAtOnce" if appset.rolling_steps is None else "RollingSync", "apps": apps,
            "invalidApps": invalid, "errors": [str(e) for e in record.get("errors") or []],
            "failed": bool(record.get("failed"))}


def _named(runtime: Runtime, principal: Principal, name: str) -> tuple[Config, ApplicationSet]:
    config = runtime.config()
    appset = config.appsets.get(name)
    if appset is None or not may_see(config, principal, appset):
        if name in config.invalid_appsets and authz.allowed(config, principal, rbac.APPLICATIONSETS, "get", "*/*"):
            raise PermanentError(f"ApplicationSet {name!r} is set aside: {config.invalid_appsets[name]}")
        raise NotFound(f"applicationset {name!r} not found")
    return config, appset


# -------------------------------------------------------------------------------------------------
# The api's routes (registered on `tidecd.usecases.api`'s table when that module loads)


@api.route("POST", "/applicationsets/generate", body="AppSetGenerateRequest")
def generate_manifest(runtime: Runtime, _: str, payload: dict[str, Any], __: Mapping[str, str]) -> Response:
    filename = str(payload.get("file") or "applicationset.yaml")
    appset = read_manifest(str(payload["manifest"]), filename)
    config = runtime.config()
    where = f"{appset.origin}: {appset.label}: spec.template.spec.project"
    if project_of(appset) == "*":  # as Argo CD's Generate (validateAppSet), before RBAC
        raise PermanentError(f"{where}: must be set and not templated to generate through the api (as Argo CD)")
    authz.require(runtime, api.principal(), rbac.APPLICATIONSETS, "create", f"{project_of(appset)}/{appset.name}")
    if project_of(appset) not in config.projects:  # as Argo CD's checkCreatePermissions
        raise PermanentError(f"{where}: project {project_of(appset)!r} is not defined in the config source")
    return Response(200, generate(runtime, api.principal(), appset, config))


@api.route("GET", "/applicationsets")
def list_appsets(runtime: Runtime, _: str, __: dict[str, Any], ___: Mapping[str, str]) -> Response:
    return Response(200, {"applicationSets": summaries(runtime, api.principal())})


@api.route("GET", "/applicationsets/(?P<name>[^/]+)/generate")
def generate_named(runtime: Runtime, name: str, _: dict[str, Any], __: Mapping[str, str]) -> Response:
    config, appset = _named(runtime, api.principal(), name)
    return Response(200, generate(runtime, api.principal(), appset, config))


@api.route("GET", "/applicationsets/(?P<name>[^/]+)")
def get_appset(runtime: Runtime, name: str, _: dict[str, Any], __: Mapping[str, str]) -> Response:
    config, appset = _named(runtime, api.principal(), name)
    records = generated.safe_load_records(runtime.store, [])
    return Response(200, _summary(runtime, api.principal(), config, appset, records.get(appset.label) or {}))
