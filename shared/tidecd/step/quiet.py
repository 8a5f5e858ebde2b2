"""The no-op fast path: a step whose inputs and live objects are those the last full comparison recorded
(`state.quiet`) keeps that comparison's result: nothing is re-compared, re-decided or written.

Two digests make the record: the inputs (whether automated sync may act, the revision, the rendered
objects, the app, its project, the argocd-cm settings, the image updater's sync marker) and the live
objects (each one's key, uid and resourceVersion, the kinds listed and those not served). Drift, a new
commit or a changed setting changes one of them, and the step compares in full.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from tidecd.base import constants
from tidecd.base.model import Manifest, ResourceKey
from tidecd.config.load import Application, AppProject, Config
from tidecd.generated import appofapps
from tidecd.generated import records as generated

VERSION = "1"  # bump when what the quiet record's digests cover changes


def live_digest(live: Mapping[ResourceKey, Manifest], kinds: list[tuple[str, str]],
                unserved: list[tuple[str, str]]) -> str:
    """A digest of the observed live objects: each one's key, uid and resourceVersion (any write to an object
    changes its resourceVersion), the kinds listed and those the cluster does not serve."""
    digest = hashlib.sha256(repr((kinds, unserved)).encode())
    for key in sorted(live):
        meta = live[key].get("metadata") or {}
        digest.update(f"\n{key}\0{meta.get('uid', '')}\0{meta.get('resourceVersion', '')}".encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class Inputs:
    """What the comparison and the decision start from, as the inputs digest covers it."""

    automate: bool
    revision: str
    marker: str  # the image updater's sync marker of this revision
    app: Application
    project: AppProject
    config: Config
    manifests: list[Manifest]


def inputs_digest(inputs: Inputs) -> str:
    """A digest of the inputs: a refresh-only step's "nothing to do" is not an automated step's."""
    app, config = inputs.app, inputs.config
    parts = [VERSION, str(inputs.automate), inputs.revision, inputs.marker, repr(app), repr(inputs.project),
             repr(config.argo_settings), repr(config.ignore_differences_of(app)),
             json.dumps(inputs.manifests, sort_keys=True, default=str)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def may_be_quiet(app: Application, project: AppProject, manifests: list[Manifest], *, running: bool,
                 rebuilt: bool, children: bool) -> bool:
    """Whether a no-op of this app may be answered from its quiet record: its status follows only from
    its rendered revision, its config and its own live objects (nothing time-dependent, no other app's
    state, no running operation)."""
    orphans = project.orphaned_resources
    return (not running and not rebuilt and not generated.is_deleting(app)
            and not project.sync_windows and not (orphans is not None and orphans.warn)
            and not app.annotation(constants.ANNOTATION_ADOPT_FROM_ARGOCD).strip()
            and not (children and any(appofapps.is_child_object(m) for m in manifests)))


def unchanged(quiet: Mapping[str, str], inputs: str, live: str = "") -> bool:
    """The quiet record holds these inputs (and, when given, this live digest)."""
    return bool(quiet) and quiet.get("inputs") == inputs and (not live or quiet.get("live") == live)


def record(inputs: str, live: str) -> dict[str, str]:
    """The quiet record of a settled step."""
    return {"inputs": inputs, "live": live}
