"""Plans: what a pull request's preview said a sync would apply, kept so the sync can check it (issue 28).

One app's plan is the digest of its rendered objects, as the sync applies them (`step.desired.place`), and
the live resourceVersion of every object the plan changes ("" for one it would create), as the preview read
them. The preview keeps it with its result (`previews/<owner>/<repo>/<n>/apps/<app>.json`, or the config
source's `plan.json`: keyed by the pull request and its head sha). When the pull request merges, the plan of
the merged head is approved: `plans/approved/<app>/<digest>.json` (merging is the approval; branch
protection decides who may merge).

An app that requires a plan (the annotation `tidecd.io/require-plan: "true"` on the Application or on its
AppProject) syncs only rendered objects whose digest has an approved plan, and only while every object the
sync would write still has the resourceVersion the plan was computed against (an object the plan left alone
must not need writing). A rollback (`tidecd app rollback`: back to what was deployed) is not checked. When the live
objects moved, the sync applies nothing; the plan is computed again against the live objects
(`plans/replanned/<app>/<digest>.json`) and waits for a person (`/tidecd apply` on the pull request).

`plans/operations/<app>/<operation id>.json` ties an operation to the plan it applied (or refused), so the
notification of its end can update the pull request's check.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from tidecd.base.model import Manifest, ResourceKey
from tidecd.clients.store import ObjectStore, read_json, write_json

PREFIX = "plans/"
ANNOTATION_REQUIRE_PLAN = "tidecd.io/require-plan"
MAX_NAMED = 10  # objects named in a refusal; the rest are counted


def rendered_digest(manifests: Iterable[Manifest]) -> str:
    """sha256 over the rendered objects, independent of their order (each one as canonical JSON)."""
    canonical = sorted(json.dumps(m, sort_keys=True, separators=(",", ":"), default=str) for m in manifests)
    return hashlib.sha256("\n".join(canonical).encode()).hexdigest()


def resource_version(obj: Manifest | None) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    value = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    return str(value) if value else ""


@dataclass(frozen=True)
class AppPlan:
    """One app's plan: its rendered objects' digest and the live versions of what it changes."""

    app: str
    digest: str
    versions: tuple[tuple[ResourceKey, str], ...] = ()  # each object the plan changes, and its live version
    revision: str = ""  # what the preview rendered (the PR head, or the app's own revision)

    @classmethod
    def of(cls, app: str, manifests: Iterable[Manifest], touched: Iterable[ResourceKey],
           live: Mapping[ResourceKey, Manifest | None], revision: str) -> AppPlan:
        return cls(app, rendered_digest(manifests),
                   tuple((k, resource_version(live.get(k))) for k in sorted(set(touched))), revision)

    def to_json(self) -> dict[str, Any]:
        return {"app": self.app, "digest": self.digest, "revision": self.revision,
                "versions": [{"key": k.to_dict(), "resourceVersion": v} for k, v in self.versions]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AppPlan | None:
        """None for a document that is not a plan (an older preview result, a hand-edited file)."""
        try:
            versions = tuple((ResourceKey.from_dict(v["key"]), str(v.get("resourceVersion") or ""))
                             for v in data.get("versions") or ())
            return cls(str(data["app"]), str(data["digest"]), versions, str(data.get("revision") or ""))
        except (KeyError, TypeError, AttributeError):
            return None

    def moved(self, live: Mapping[ResourceKey, Manifest], out_of_sync: Iterable[ResourceKey]) -> list[str]:
        """What moved since the plan, among the objects a sync would write now (`out_of_sync`): one the plan
        changes whose live version differs (or that appeared or went away), and one the plan left alone.
        An object already as desired is written by no one, whatever its version: a sync of a plan applied
        before finds nothing moved. Empty when nothing moved."""
        planned, writes = dict(self.versions), set(out_of_sync)
        found = [f"{k} (planned at resourceVersion {v or 'absent'}, now {resource_version(live.get(k)) or 'absent'})"
                 for k, v in self.versions if k in writes and resource_version(live.get(k)) != v]
        found += [f"{k} (in sync when planned, changed since)" for k in sorted(writes) if k not in planned]
        return found

    def again(self, live: Mapping[ResourceKey, Manifest], out_of_sync: Iterable[ResourceKey]) -> AppPlan:
        """The same rendered objects planned against the live objects as they are now."""
        keys = {*dict(self.versions), *out_of_sync}
        return replace(self, versions=tuple((k, resource_version(live.get(k))) for k in sorted(keys)))


@dataclass(frozen=True)
class Approved:
    """A plan of a merged pull request: what it was computed for and where its check is."""

    plan: AppPlan
    repo: str  # owner/name on GitHub
    number: int
    head_sha: str
    context: str  # the commit status the plan was reported under, on `head_sha`
    merge_sha: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"plan": self.plan.to_json(), "repo": self.repo, "number": self.number, "head_sha": self.head_sha,
                "context": self.context, "merge_sha": self.merge_sha}

    @classmethod
    def from_json(cls, data: Any) -> Approved | None:
        if not isinstance(data, Mapping) or not isinstance(data.get("plan"), Mapping):
            return None
        plan = AppPlan.from_json(data["plan"])
        try:
            return None if plan is None else cls(plan, str(data["repo"]), int(data["number"]),
                                                 str(data["head_sha"]), str(data.get("context") or ""),
                                                 str(data.get("merge_sha") or ""))
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def where(self) -> str:
        return f"{self.repo}#{self.number} at {self.head_sha[:12]}"


def _key(folder: str, app: str, name: str) -> str:
    return f"{PREFIX}{folder}/{app}/{name}.json"


def approve(store: ObjectStore, approved: Approved) -> None:
    write_json(store, _key("approved", approved.plan.app, approved.plan.digest), approved.to_json())


def approved_plan(store: ObjectStore, app: str, digest: str) -> Approved | None:
    """The approved plan of `app` for rendered objects of `digest`; a re-plan a person approved since
    replaces it (same key)."""
    found = read_json(store, _key("approved", app, digest))
    return Approved.from_json(found[0]) if found else None


def record_replan(store: ObjectStore, approved: Approved, moved: list[str]) -> None:
    """A plan computed again after the live objects moved: kept for a person to approve (`approve_replan`)."""
    write_json(store, _key("replanned", approved.plan.app, approved.plan.digest),
               approved.to_json() | {"moved": moved[:MAX_NAMED]})


def replans_of(store: ObjectStore, repo: str, number: int) -> list[Approved]:
    """Every re-plan waiting for approval that came from the pull request `repo#number`."""
    out = []
    for key in store.list(f"{PREFIX}replanned/"):
        found = read_json(store, key)
        plan = Approved.from_json(found[0]) if found else None
        if plan is not None and (plan.repo.lower(), plan.number) == (repo.lower(), number):
            out.append(plan)
    return out


def approve_replan(store: ObjectStore, replanned: Approved) -> None:
    approve(store, replanned)
    store.delete(_key("replanned", replanned.plan.app, replanned.plan.digest))


def record_operation(store: ObjectStore, app: str, operation: str, approved: Approved, refused: str = "") -> None:
    write_json(store, _key("operations", app, operation), approved.to_json() | {"refused": refused})


def operation_plan(store: ObjectStore, app: str, operation: str) -> tuple[Approved, str] | None:
    """The plan an operation applied, and why it refused it ("" when it did not)."""
    if not operation:
        return None
    found = read_json(store, _key("operations", app, operation))
    approved = Approved.from_json(found[0]) if found else None
    return (approved, str(found[0].get("refused") or "")) if approved is not None and found else None


def describe_moved(moved: list[str]) -> str:
    shown = "; ".join(moved[:MAX_NAMED]) + (f"; and {len(moved) - MAX_NAMED} more" if len(moved) > MAX_NAMED else "")
    return f"the live objects moved since the plan was approved: {shown}"
