"""Apply exactly the plan: the step's check of an app that requires one (`tidecd.state.plans`).

Before an operation's first write (its namespace or its dry-run), an app with `tidecd.io/require-plan:
"true"` (on the Application, or on its AppProject) goes on only when
- its rendered objects, as this sync would apply them, have the digest of an approved plan (the plan of a
  merged pull request, computed by the preview), and
- every object the sync would write still has the resourceVersion the plan was computed against, and
  none is one the plan left alone (an object already as desired is written by no one: a sync of a plan
  applied before goes on).
A rollback operation (back to what was deployed before, asked by a person) is not checked.
Otherwise the operation fails before any write with a message naming what moved (or that no approved plan
matches). When the live objects moved, the same rendered objects are planned again against the live ones
and kept for a person to approve (`/tidecd apply` on the pull request); the plan's check on the pull
request says so (`tidecd.notify.deliver`, from the operation recorded here).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

import structlog

from tidecd.base.model import Manifest, ResourceKey
from tidecd.clients.store import ObjectStore
from tidecd.config.load import Application, AppProject
from tidecd.state import plans

log = structlog.get_logger("tidecd.step.plangate")
CONDITION = "PlanMismatch"


def requires_plan(app: Application, project: AppProject) -> bool:
    """The annotation on the Application, else on its AppProject ("true", any case)."""
    value = app.annotation(plans.ANNOTATION_REQUIRE_PLAN) or dict(project.annotations).get(
        plans.ANNOTATION_REQUIRE_PLAN, "")
    return value.strip().lower() == "true"


def check(store: ObjectStore, app: Application, project: AppProject, operation: str, manifests: list[Manifest],
          live: Mapping[ResourceKey, Manifest], out_of_sync: Iterable[ResourceKey]) -> str:
    """"" when the operation may write; else why it may not (it then fails before any write). Records which
    plan the operation applies (or refused), and a re-plan when the live objects moved."""
    if not requires_plan(app, project):
        return ""
    digest = plans.rendered_digest(manifests)
    approved = plans.approved_plan(store, app.name, digest)
    if approved is None:
        return (f"app {app.name!r} requires an approved plan ({plans.ANNOTATION_REQUIRE_PLAN}) and none matches "
                f"its rendered objects (digest {digest[:12]}): merge a pull request tidecd planned, with nothing "
                "else merged in between")
    drifted = list(out_of_sync)
    moved = approved.plan.moved(live, drifted)
    if not moved:
        plans.record_operation(store, app.name, operation, approved)
        log.info("plan applies", app=app.name, plan=approved.where, digest=digest[:12], operation=operation)
        return ""
    message = (f"{plans.describe_moved(moved)} (plan of {approved.where}); nothing applied. Planned again "
               "against the live objects: comment `/tidecd apply` on the pull request to approve the new plan")
    plans.record_replan(store, dataclasses.replace(approved, plan=approved.plan.again(live, drifted)), moved)
    plans.record_operation(store, app.name, operation, approved, message)
    log.warning("plan refused: live objects moved", app=app.name, plan=approved.where, moved=len(moved),
                operation=operation)
    return message
