"""Who owns a live object: tidecd's own marks, Argo CD's marks read only to stay away from them.

tidecd marks what it writes in its own names (never Argo CD's), so both tools can run on one cluster:

    label       tidecd.io/app: <app>                        cheap server-side selection (not proof)
    annotation  tidecd.io/tracking-id: <installation>:<app>:<group>/<kind>:<namespace>/<name>   (proof)

`<installation>` is `TIDECD_INSTALLATION_ID` (default `default`): two tidecd installations that share a
cluster must set different ids, and then never compare, prune or overwrite each other's objects. An object
whose mark names another installation, another app, or another object (a copy) is not this app's.

Argo CD's marks (`argocd.argoproj.io/tracking-id`, the `app.kubernetes.io/instance` label and
`argocd.argoproj.io/installation-id`) are never written, unless an Application opts in with the annotation
`tidecd.io/write-argocd-tracking: "true"` (for a cluster Argo CD has left for good; tidecd then writes the
tracking id and instance label Argo CD would write, beside its own marks). They are read:
- to refuse Argo CD's objects: an object carrying Argo CD's tracking id that tidecd's field manager did not
  write is Argo CD's (so is one whose `app.kubernetes.io/instance` label an Argo CD field manager wrote:
  its label tracking; the label alone is no mark, Helm charts set it too). It is never compared as
  tidecd's, pruned or overwritten (`claim` names the Argo CD Application), until `tidecd app adopt`
  moves it;
- to keep what an older tidecd wrote: before its own marks, tidecd wrote Argo CD's tracking id and
  instance label. Such an object (Argo CD's tracking id, written by field manager `tidecd` alone, per
  `metadata.managedFields`) still belongs to the tidecd app it names, and counts as this installation's;
  it compares OutOfSync ("ownership mark") until the next sync rewrites it: server-side apply then drops
  the old marks, since tidecd was their only manager. Nothing is orphaned and nothing of Argo CD's is taken.
"""

from __future__ import annotations

import copy
import enum
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidecd.base import constants
from tidecd.base.errors import ConfigError
from tidecd.base.model import Manifest, ResourceKey

INSTALLATION_ENV = "TIDECD_INSTALLATION_ID"
DEFAULT_INSTALLATION = "default"
_INSTALLATION = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$")
_LABEL_LIMIT = 63

# Argo CD's field managers: server-side apply (`ServerSideApply=true`) and its client-side apply (the
# application controller's own name, as the API server records an apply without a field manager).
ARGOCD_MANAGERS = frozenset({"argocd-controller", "argocd-application-controller"})


def installation_id(env: Mapping[str, str] | None = None) -> str:
    """This installation's id: `TIDECD_INSTALLATION_ID`, default `default` (read at each call)."""
    source = os.environ if env is None else env
    value = source.get(INSTALLATION_ENV, "").strip() or DEFAULT_INSTALLATION
    if not _INSTALLATION.match(value):
        raise ConfigError(f"{INSTALLATION_ENV}={value!r}: expected lowercase letters, digits, '-' or '.', "
                          "at most 63, starting and ending with a letter or digit")
    return value


def label_value(app: str) -> str:
    """The `tidecd.io/app` label value: the app's name, or (past 63 characters) a prefix and a hash."""
    if len(app) <= _LABEL_LIMIT:
        return app
    return app[:52].rstrip("-.") + "-" + hashlib.sha256(app.encode()).hexdigest()[:10]


def tracking_id(key: ResourceKey, app: str, installation: str | None = None) -> str:
    """tidecd's tracking id of `key` for `app`: `<installation>:<app>:<group>/<kind>:<namespace>/<name>`."""
    return f"{installation or installation_id()}:{key.tracking_id(app)}"


def argocd_tracking_id(key: ResourceKey, app: str) -> str:
    """Argo CD's tracking id, `<app>:<group>/<kind>:<namespace>/<name>` (`<app>` is `<namespace>_<name>`
    for an Application outside Argo CD's own namespace)."""
    return key.tracking_id(app)


@dataclass(frozen=True)
class Mark:
    """A parsed tracking id: who claims the object, and which object the claim is for."""

    app: str
    key: ResourceKey
    installation: str = ""


def parse_argocd(text: str) -> Mark | None:
    """Argo CD's `<app>:<group>/<kind>:<namespace>/<name>`, parsed as Argo CD parses it; None if malformed."""
    parts = text.split(":", 2)
    if len(parts) != 3:
        return None
    group_kind, where = parts[1].split("/"), parts[2].split("/")
    if len(group_kind) != 2 or len(where) != 2 or not parts[0]:
        return None
    return Mark(parts[0], ResourceKey(group_kind[0], group_kind[1], where[0], where[1]))


def parse(text: str) -> Mark | None:
    """tidecd's `<installation>:<app>:<group>/<kind>:<namespace>/<name>`; None if malformed."""
    installation, _, rest = text.partition(":")
    inner = parse_argocd(rest) if installation else None
    return Mark(inner.app, inner.key, installation) if inner else None


class Tool(enum.StrEnum):
    TIDECD = "tidecd"
    ARGOCD = "argocd"


@dataclass(frozen=True)
class Owner:
    """Who a live object belongs to."""

    tool: Tool
    app: str
    installation: str = ""
    legacy: bool = False  # an older tidecd's mark (Argo CD's names), rewritten by the next sync
    copied: bool = False  # the mark names another object: a copy, owned by no one

    def describe(self) -> str:
        if self.tool is Tool.ARGOCD:
            return (f"tracked by Argo CD Application {argocd_application(self.app)!r} "
                    f"({constants.ANNOTATION_ARGOCD_TRACKING_ID})")
        return f"owned by tidecd app {self.app!r}" + (
            f" of installation {self.installation!r}" if self.installation != installation_id() else "")


def argocd_application(instance: str) -> str:
    """The Argo CD Application an instance name means: `<namespace>_<name>` is `<namespace>/<name>`."""
    return instance.replace("_", "/", 1) if "_" in instance else instance


def _meta(obj: Manifest) -> dict[str, Any]:
    return obj.get("metadata") or {}


def _annotation(obj: Manifest, name: str) -> str:
    return str((_meta(obj).get("annotations") or {}).get(name) or "")


def field_managers(obj: Manifest, section: str, name: str) -> set[str]:
    """The field managers that own `metadata.<section>.<name>` (section: annotations or labels)."""
    owners = set()
    for entry in _meta(obj).get("managedFields") or []:
        fields = ((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get(f"f:{section}") or {}
        if f"f:{name}" in fields:
            owners.add(str(entry.get("manager", "")))
    return owners


def _written_by_tidecd(obj: Manifest, section: str, name: str) -> bool:
    return field_managers(obj, section, name) == {constants.FIELD_MANAGER}


def owner(live: Manifest) -> Owner | None:
    """Who owns `live`, from its marks (see the module docstring); None for an unmarked object."""
    key = ResourceKey.of(live)
    argo_text = _annotation(live, constants.ANNOTATION_ARGOCD_TRACKING_ID)
    argo = parse_argocd(argo_text) if argo_text else None
    ours_text = _annotation(live, constants.ANNOTATION_TRACKING_ID)
    ours = parse(ours_text) if ours_text else None
    argo_by_us = bool(argo_text) and _written_by_tidecd(live, "annotations", constants.ANNOTATION_ARGOCD_TRACKING_ID)
    if argo is not None and not argo_by_us:
        return Owner(Tool.ARGOCD, argo.app, copied=argo.key != key)
    if ours is not None:
        return Owner(Tool.TIDECD, ours.app, ours.installation, copied=ours.key != key)
    if argo is not None:  # Argo CD's names, written by tidecd alone: an older tidecd's mark
        return Owner(Tool.TIDECD, argo.app, installation_id(), legacy=True, copied=argo.key != key)
    instance = str((_meta(live).get("labels") or {}).get(constants.LABEL_INSTANCE) or "")
    if instance and field_managers(live, "labels", constants.LABEL_INSTANCE) & ARGOCD_MANAGERS:
        return Owner(Tool.ARGOCD, instance)  # Argo CD's label tracking (`application.resourceTrackingMethod`)
    return None


def owned_by(live: Manifest, app: str) -> bool:
    """True only when `live` carries this installation's mark for exactly this object and `app` (or an
    older tidecd's mark for them)."""
    found = owner(live)
    return (found is not None and found.tool is Tool.TIDECD and found.app == app and not found.copied
            and found.installation == installation_id())


def claim(live: Manifest, app: str) -> Owner | None:
    """Who else holds `live`, when `app` wants it: None when it is free (unmarked, or a copy's stale mark)
    or already `app`'s."""
    found = owner(live)
    if found is None or found.copied or owned_by(live, app):
        return None
    return found


def needs_remark(live: Manifest, app: str, *, argocd: bool = False) -> str:
    """Why `live` (owned by `app`) needs its marks written again, or "" when they are as they should be."""
    found = owner(live)
    if found is not None and found.legacy:
        return (f"ownership mark: written by an older tidecd as {constants.ANNOTATION_ARGOCD_TRACKING_ID}; "
                f"the next sync writes {constants.ANNOTATION_TRACKING_ID}")
    if argocd and _annotation(live, constants.ANNOTATION_ARGOCD_TRACKING_ID) != argocd_tracking_id(
            ResourceKey.of(live), app):
        return f"ownership mark: {constants.ANNOTATION_WRITE_ARGOCD_TRACKING} asks for Argo CD's tracking id"
    return ""


def writes_argocd_marks(annotations: Mapping[str, str]) -> bool:
    """The Application opted in to Argo CD's marks (`tidecd.io/write-argocd-tracking: "true"`)."""
    return annotations.get(constants.ANNOTATION_WRITE_ARGOCD_TRACKING, "").strip().lower() == "true"


def marked(obj: Manifest, app: str, *, argocd: bool = False, installation: str | None = None) -> Manifest:
    """A copy of `obj` with tidecd's marks for `app` (and Argo CD's, when the app opted in)."""

    out = copy.deepcopy(obj)
    key = ResourceKey.of(obj)
    meta = out.setdefault("metadata", {})
    labels = meta.setdefault("labels", {})
    annotations = meta.setdefault("annotations", {})
    labels[constants.LABEL_APP] = label_value(app)
    annotations[constants.ANNOTATION_TRACKING_ID] = tracking_id(key, app, installation)
    if argocd:
        labels[constants.LABEL_INSTANCE] = label_value(app)
        annotations[constants.ANNOTATION_ARGOCD_TRACKING_ID] = argocd_tracking_id(key, app)
    return out


def selector(app: str) -> str:
    """The label selector of `app`'s objects (a hint: the tracking id decides)."""
    return f"{constants.LABEL_APP}={label_value(app)}"


# The marks dropped before two objects are compared (they are checked on their own, `needs_remark`).
# `app.kubernetes.io/instance` is compared like any label: Helm charts set it, and tidecd no longer does.
MARK_ANNOTATIONS = (constants.ANNOTATION_TRACKING_ID, constants.ANNOTATION_ARGOCD_TRACKING_ID,
                    constants.ANNOTATION_ARGOCD_INSTALLATION_ID)
MARK_LABELS = (constants.LABEL_APP,)
