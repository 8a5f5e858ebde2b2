"""Taking an app over from Argo CD in place (`tidecd app adopt`), and handing it back (`tidecd app release`).

Adopt moves ownership only. Nothing is deleted or created, every uid stays, and no spec changes. It
refuses, naming each object, unless all of these hold:
- the live objects are exactly the ones the Argo CD Application tracks: its `status.resources`, each
  carrying its tracking id (or, for label tracking, its instance label);
- tidecd's app declares exactly those objects, and a server-side dry-run of tidecd's apply changes
  nothing but the marks;
- Argo CD's automated sync is off, so Argo CD cannot stamp its marks back in the meantime.
Then, per object, two writes:
1. server-side apply of the desired object with tidecd's marks, as field manager `tidecd` with forced
   conflicts, so tidecd owns every field it declares. Fields owned by a manager that a
   `managedFieldsManagers` rule names are left out of this apply, so they keep their manager and the rule
   keeps working;
2. a JSON patch, guarded by a `test` of the resourceVersion, that removes Argo CD's marks
   (`argocd.argoproj.io/tracking-id`, `argocd.argoproj.io/installation-id`, the instance label) and the
   `managedFields` entries of Argo CD's field managers (`argocd-controller` for its server-side apply,
   `argocd-application-controller` for its client-side apply). tidecd is then the only applier, so
   removing a field from git later removes it from the object.
Argo CD's side is left to the user, and the exact step is printed: remove the Application's
`resources-finalizer.argocd.argoproj.io` finalizer, then delete the Application. Once the marks are gone,
even a cascading delete would find nothing of that Application's.

Release is the reverse, for rolling a migration back. The objects must be tidecd's, for exactly that app.
Argo CD's marks are written as Argo CD would write them, following `installationID` and
`application.resourceTrackingMethod` from `argocd-cm`, by Argo CD's server-side field manager. Then
tidecd's marks and its `managedFields` entry are removed.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tidecd.base import constants, ownership
from tidecd.base.errors import PermanentError
from tidecd.base.model import Action, ChangeEntry, Manifest, ResourceKey, SyncStatus
from tidecd.clients.cluster import ApiError
from tidecd.config.load import IgnoreDifference
from tidecd.diff import compare, drop_ignored

ARGOCD_SSA_MANAGER = "argocd-controller"  # Argo CD's ArgoCDSSAManager
TRACKING_METHODS = ("annotation", "label", "annotation+label")  # argocd-cm application.resourceTrackingMethod


class AdoptCluster(Protocol):
    """The cluster calls adopt and release make (`tidecd.clients.cluster.KubeCluster` is the real one)."""

    def get(self, key: ResourceKey) -> Manifest | None: ...

    def apply(self, obj: Manifest, *, dry_run: bool = False) -> Manifest: ...

    def apply_as(self, obj: Manifest, manager: str, *, dry_run: bool = False) -> Manifest: ...

    def json_patch(self, key: ResourceKey, operations: Sequence[Mapping[str, Any]]) -> Manifest: ...


class AdoptRefused(PermanentError):
    """Adopt or release would not be exact; `problems` names each object and what is wrong with it."""

    def __init__(self, what: str, problems: list[str]) -> None:
        super().__init__(f"{what} refused, nothing was changed:\n  " + "\n  ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class ArgoApp:
    """The Argo CD Application an app moves from or to: where it lives, and what its status tracks."""

    namespace: str
    name: str
    control_plane_namespace: str = "argocd"
    tracked: tuple[ResourceKey, ...] = ()
    automated: bool = False
    finalizers: tuple[str, ...] = ()

    @property
    def instance(self) -> str:
        """Argo CD's instance name in tracking ids: `<name>`, or `<namespace>_<name>` outside its namespace."""
        if self.namespace == self.control_plane_namespace:
            return self.name
        return f"{self.namespace}_{self.name}"

    @classmethod
    def of(cls, app: Manifest, control_plane_namespace: str = "argocd") -> ArgoApp:
        meta, status = app.get("metadata") or {}, app.get("status") or {}
        tracked = tuple(sorted(ResourceKey(str(r.get("group") or ""), str(r.get("kind", "")),
                                           str(r.get("namespace") or ""), str(r.get("name", "")))
                               for r in status.get("resources") or []))
        automated = ((app.get("spec") or {}).get("syncPolicy") or {}).get("automated")
        enabled = isinstance(automated, dict) and automated.get("enabled", True) is not False
        return cls(str(meta.get("namespace", control_plane_namespace)), str(meta.get("name", "")),
                   control_plane_namespace, tracked, enabled, tuple(meta.get("finalizers") or ()))


@dataclass(frozen=True)
class ArgoSettings:
    """What of `argocd-cm` decides how Argo CD marks objects."""

    tracking_method: str = "annotation"  # Argo CD 3.x's default
    installation_id: str = ""
    instance_label: str = constants.LABEL_INSTANCE

    @classmethod
    def of(cls, data: Mapping[str, str]) -> ArgoSettings:
        method = (data.get("application.resourceTrackingMethod") or "annotation").strip()
        return cls(method if method in TRACKING_METHODS else "annotation",
                   (data.get("installationID") or "").strip(),
                   (data.get("application.instanceLabelKey") or constants.LABEL_INSTANCE).strip())


@dataclass(frozen=True)
class Move:
    """One object to re-mark: what it is now, what tidecd's (or Argo CD's) apply makes of it."""

    key: ResourceKey
    live: Manifest
    applied: Manifest
    message: str


@dataclass(frozen=True)
class Plan:
    app: str
    argo: ArgoApp
    moves: tuple[Move, ...] = ()
    already: tuple[ResourceKey, ...] = ()  # re-marked by an earlier run
    notes: tuple[str, ...] = field(default_factory=tuple)

    def changes(self, *, done: bool) -> list[ChangeEntry]:
        suffix = "" if done else " (dry run)"
        return ([ChangeEntry(m.key, Action.CONFIGURED, m.message + suffix) for m in self.moves]
                + [ChangeEntry(k, Action.UNCHANGED, "already moved") for k in self.already])


# -- adopt ------------------------------------------------------------------------------------------------


def plan_adopt(cluster: AdoptCluster, app: str, argo: ArgoApp, desired: Mapping[ResourceKey, Manifest],
               ignore: Iterable[IgnoreDifference] = (), *, argocd_marks: bool = False) -> Plan:
    """Check that `app` can take `argo`'s objects over exactly (else AdoptRefused naming each object)."""
    ignore = list(ignore)
    problems: list[str] = []
    if argo.automated:
        problems.append(f"Argo CD Application {argo.namespace}/{argo.name}: automated sync is on, so Argo CD "
                        "would mark the objects again; turn it off first: " + disable_automated_command(argo))
    tracked = set(argo.tracked)
    for key in sorted(tracked - set(desired)):
        problems.append(f"{key}: Argo CD tracks it, but tidecd's app {app!r} does not declare it")
    for key in sorted(set(desired) - tracked):
        problems.append(f"{key}: declared by tidecd's app {app!r}, but not tracked by Argo CD Application "
                        f"{argo.namespace}/{argo.name} (its status.resources)")
    moves, already = [], []
    for key in sorted(set(desired) & tracked):
        live = cluster.get(key)
        if live is None:
            problems.append(f"{key}: tracked by Argo CD but not found in the cluster")
            continue
        if ownership.owned_by(live, app):
            already.append(key)
            continue
        who = ownership.owner(live)
        if who is None or who.tool is not ownership.Tool.ARGOCD or who.app != argo.instance or who.copied:
            what = who.describe() if who is not None and not who.copied else "carries no Argo CD mark of it"
            problems.append(f"{key}: {what}; expected Argo CD's mark of {argo.instance!r}")
            continue
        applied = keep_ignored(ownership.marked(desired[key], app, argocd=argocd_marks), live, ignore)
        try:
            predicted = cluster.apply(applied, dry_run=True)
        except Exception as exc:  # noqa: BLE001 - the API server's refusal, named with the object
            problems.append(f"{key}: server-side dry-run failed: {exc}")
            continue
        result = compare(key, live, predicted, ignore)
        if result.status is not SyncStatus.SYNCED:
            problems.append(f"{key}: differs from git ({', '.join(result.changed_paths)}); adopt moves ownership "
                            "only: sync it in Argo CD first, or make both sources agree")
            continue
        managers = sorted({str(e.get("manager")) for e in _managed(live)} & ownership.ARGOCD_MANAGERS)
        moves.append(Move(key, live, applied, "marks: + " + constants.ANNOTATION_TRACKING_ID + ", - "
                          + constants.ANNOTATION_ARGOCD_TRACKING_ID + "; field managers: "
                          + (", ".join(managers) or "none of Argo CD's") + f" -> {constants.FIELD_MANAGER}"))
    if problems:
        raise AdoptRefused(f"adopt of {app!r} from Argo CD Application {argo.namespace}/{argo.name}", problems)
    return Plan(app, argo, tuple(moves), tuple(already))


def adopt(cluster: AdoptCluster, plan: Plan, *, argocd_marks: bool = False,
          written: dict[ResourceKey, Manifest] | None = None) -> list[ChangeEntry]:
    """Re-mark each object of `plan` as tidecd's (two writes each, see the module docstring); `written`
    collects each re-marked object's resourceVersion."""
    entries = []
    for move in plan.moves:
        try:
            result = cluster.apply(move.applied)
            _same_object(move, result)
            drop = [] if argocd_marks else [("annotations", constants.ANNOTATION_ARGOCD_TRACKING_ID),
                                            ("labels", constants.LABEL_INSTANCE)]
            drop.append(("annotations", constants.ANNOTATION_ARGOCD_INSTALLATION_ID))
            final = _patch_marks(cluster, move.key, result, drop, ownership.ARGOCD_MANAGERS)
        except Exception as exc:  # noqa: BLE001 - reported per object; the others go on
            entries.append(ChangeEntry(move.key, Action.FAILED, f"adopt: {exc}"))
            continue
        if written is not None:
            written[move.key] = final
        entries.append(ChangeEntry(move.key, Action.CONFIGURED, move.message))
    return entries + [ChangeEntry(k, Action.UNCHANGED, "already moved") for k in plan.already]


# -- release ----------------------------------------------------------------------------------------------


def plan_release(cluster: AdoptCluster, app: str, argo: ArgoApp, desired: Mapping[ResourceKey, Manifest],
                 settings: ArgoSettings, ignore: Iterable[IgnoreDifference] = (),
                 inventory: Iterable[ResourceKey] = ()) -> Plan:
    """Check that `app`'s objects can go back to Argo CD exactly (else AdoptRefused naming each object)."""
    ignore = list(ignore)
    problems = [f"{key}: in tidecd's inventory of {app!r} but no longer declared; sync with prune first"
                for key in sorted(set(inventory) - set(desired))]
    moves, already = [], []
    for key, obj in sorted(desired.items()):
        live = cluster.get(key)
        if live is None:
            problems.append(f"{key}: declared by {app!r} but not in the cluster; sync it first")
            continue
        who = ownership.owner(live)
        if who is not None and who.tool is ownership.Tool.ARGOCD and who.app == argo.instance:
            already.append(key)
            continue
        if not ownership.owned_by(live, app):
            problems.append(f"{key}: {who.describe() if who else 'carries no ownership mark'}; "
                            f"expected tidecd's mark of {app!r}")
            continue
        applied = keep_ignored(argocd_marked(obj, argo.instance, settings), live, ignore)
        try:
            predicted = cluster.apply_as(applied, ARGOCD_SSA_MANAGER, dry_run=True)
        except Exception as exc:  # noqa: BLE001 - the API server's refusal, named with the object
            problems.append(f"{key}: server-side dry-run failed: {exc}")
            continue
        result = compare(key, live, predicted, ignore)
        if result.status is not SyncStatus.SYNCED:
            problems.append(f"{key}: differs from git ({', '.join(result.changed_paths)}); sync it in tidecd first")
            continue
        moves.append(Move(key, live, applied, f"marks: + {constants.ANNOTATION_ARGOCD_TRACKING_ID} "
                          f"({settings.tracking_method}), - {constants.ANNOTATION_TRACKING_ID}; field manager: "
                          f"{constants.FIELD_MANAGER} -> {ARGOCD_SSA_MANAGER}"))
    if problems:
        raise AdoptRefused(f"release of {app!r} to Argo CD Application {argo.namespace}/{argo.name}", problems)
    return Plan(app, argo, tuple(moves), tuple(already))


def release(cluster: AdoptCluster, plan: Plan) -> list[ChangeEntry]:
    entries = []
    for move in plan.moves:
        try:
            written = cluster.apply_as(move.applied, ARGOCD_SSA_MANAGER)
            _same_object(move, written)
            drop = [("annotations", constants.ANNOTATION_TRACKING_ID), ("labels", constants.LABEL_APP)]
            _patch_marks(cluster, move.key, written, drop, {constants.FIELD_MANAGER})
        except Exception as exc:  # noqa: BLE001 - reported per object; the others go on
            entries.append(ChangeEntry(move.key, Action.FAILED, f"release: {exc}"))
            continue
        entries.append(ChangeEntry(move.key, Action.CONFIGURED, move.message))
    return entries + [ChangeEntry(k, Action.UNCHANGED, "already moved") for k in plan.already]


def argocd_marked(obj: Manifest, instance: str, settings: ArgoSettings) -> Manifest:
    """`obj` marked as Argo CD marks it for `instance`, with its settings (argocd-cm)."""
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    if settings.tracking_method in ("annotation", "annotation+label"):
        notes = meta.setdefault("annotations", {})
        notes[constants.ANNOTATION_ARGOCD_TRACKING_ID] = ownership.argocd_tracking_id(ResourceKey.of(obj), instance)
        if settings.installation_id:
            notes[constants.ANNOTATION_ARGOCD_INSTALLATION_ID] = settings.installation_id
    if settings.tracking_method in ("label", "annotation+label"):
        meta.setdefault("labels", {})[settings.instance_label] = ownership.label_value(instance)
    return out


# -- reading Argo CD ----------------------------------------------------------------------------------------


def read_argo_app(cluster: AdoptCluster, ref: str, control_plane_namespace: str = "argocd") -> ArgoApp:
    """The Argo CD Application `ref` (`<name>` in Argo CD's namespace, or `<namespace>/<name>`)."""
    namespace, _, name = ref.rpartition("/")
    namespace = namespace or control_plane_namespace
    try:
        found = cluster.get(ResourceKey(constants.ARGO_GROUP, "Application", namespace, name))
    except Exception as exc:  # noqa: BLE001 - no Application kind served: no Argo CD on this cluster
        raise AdoptRefused("reading Argo CD", [f"Argo CD Application {namespace}/{name}: no Argo CD here ({exc})"]
                           ) from None
    if found is None:
        raise AdoptRefused("reading Argo CD", [f"Argo CD Application {namespace}/{name} not found"])
    return ArgoApp.of(found, control_plane_namespace)


def read_argo_settings(cluster: AdoptCluster, control_plane_namespace: str = "argocd") -> ArgoSettings:
    """`argocd-cm`'s tracking settings; Argo CD's defaults when there is none."""
    try:
        found = cluster.get(ResourceKey("", "ConfigMap", control_plane_namespace, "argocd-cm"))
    except Exception:  # noqa: BLE001 - unreadable: Argo CD's defaults
        found = None
    return ArgoSettings.of((found or {}).get("data") or {})


# -- the Argo CD side, as text to print --------------------------------------------------------------------


def argocd_steps_after_adopt(argo: ArgoApp) -> list[str]:
    """The exact commands that make Argo CD let go without cascading: finalizer off, then delete."""
    where = f"-n {argo.namespace} application {argo.name}"
    steps = []
    for index, name in enumerate(argo.finalizers):
        if name.startswith(constants.ARGOCD_RESOURCES_FINALIZER):
            patch = json.dumps([{"op": "test", "path": f"/metadata/finalizers/{index}", "value": name},
                                {"op": "remove", "path": f"/metadata/finalizers/{index}"}])
            steps.append(f"kubectl patch {where} --type json -p '{patch}'")
            break
    steps.append(f"kubectl delete {where}")
    return steps


def disable_automated_command(argo: ArgoApp) -> str:
    return (f"kubectl patch -n {argo.namespace} application {argo.name} --type json "
            "-p '[{\"op\": \"remove\", \"path\": \"/spec/syncPolicy/automated\"}]'")


# -- helpers ------------------------------------------------------------------------------------------------


def _managed(obj: Manifest) -> list[dict[str, Any]]:
    return list((obj.get("metadata") or {}).get("managedFields") or [])


def keep_ignored(obj: Manifest, live: Manifest, ignore: Iterable[IgnoreDifference]) -> Manifest:
    """`obj` without the fields the app's ignoreDifferences rules name (jsonPointers, managedFieldsManagers,
    jq paths): adopting never takes them from their managers, so the rules go on working afterwards."""
    rules = list(ignore)
    if not rules:
        return obj
    managed = _managed(live)
    return drop_ignored(copy.deepcopy(obj), ResourceKey.of(obj), rules, managed)


def _same_object(move: Move, written: Manifest) -> None:
    before, after = (move.live.get("metadata") or {}).get("uid"), (written.get("metadata") or {}).get("uid")
    if before != after:  # cannot happen with an apply; checked because the whole point is "same object"
        raise RuntimeError(f"uid changed from {before} to {after}")


def _patch_marks(cluster: AdoptCluster, key: ResourceKey, obj: Manifest, drop: list[tuple[str, str]],
                 managers: Iterable[str], attempts: int = 5) -> Manifest:
    """Drop marks and field managers, guarded by the resourceVersion read; when a controller wrote in
    between (a Deployment's status), read again and retry."""
    for attempt in range(attempts):
        try:
            return cluster.json_patch(key, _rewrite(obj, drop, remove_managers=managers))
        except ApiError as exc:
            if exc.status not in (409, 422) or attempt == attempts - 1:
                raise
        fresh = cluster.get(key)
        if fresh is None:
            raise RuntimeError("deleted while being re-marked")
        obj = fresh
    raise AssertionError("unreachable")


def _pointer(part: str) -> str:
    return part.replace("~", "~0").replace("/", "~1")


def _rewrite(obj: Manifest, drop: list[tuple[str, str]], *, remove_managers: Iterable[str]) -> list[dict[str, Any]]:
    """The JSON patch that drops marks and field managers of `obj`, guarded by its resourceVersion."""
    meta = obj.get("metadata") or {}
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/resourceVersion",
                                  "value": meta.get("resourceVersion")}]
    for section, name in drop:
        if name in (meta.get(section) or {}):
            ops.append({"op": "remove", "path": f"/metadata/{section}/{_pointer(name)}"})
    gone = set(remove_managers)
    kept = [e for e in _managed(obj) if e.get("manager") not in gone]
    if len(kept) != len(_managed(obj)):
        ops.append({"op": "replace", "path": "/metadata/managedFields", "value": kept or [{}]})
    return ops
