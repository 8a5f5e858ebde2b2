"""The step's part of an app's deletion: its hooks before and after the prune, then forgetting it.

`tidecd.sync.deletion` decides (its docstring has the stages); this module reads the deletion hooks' live
objects, creates and deletes them, records the stage (`generated.records.set_stage`) and asks for the next
step (`End.continue_after`) while something runs. The prune in between is the ordinary operation the step
runs for any app.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import structlog

from tidecd import health
from tidecd.base.model import HealthStatus, Manifest, ResourceKey
from tidecd.clients.cluster import ApiError
from tidecd.config.model import Application
from tidecd.generated import records as generated
from tidecd.step import observe
from tidecd.step.desired import DELETING_REVISION
from tidecd.sync import deletion, hooks
from tidecd.sync.apply import explain
from tidecd.sync.deletion import Stage

if TYPE_CHECKING:
    from tidecd.step.stepping import Step

log = structlog.get_logger("tidecd.step.deletion")
RECHECK_AFTER = 3.0  # a hook running, or objects going
RETRY_AFTER = 15.0  # a deletion hook failed: tried again, as Argo CD requeues the error
CONDITION = "DeletionError"


def desired(app: Application, sha: str, manifests: list[Manifest]) -> tuple[str, list[Manifest]]:
    """What an app being deleted desires: only its deletion hooks (whichever source rendered it)."""
    if not generated.is_deleting(app):
        return sha, manifests
    return DELETING_REVISION, [m for m in manifests if hooks.delete_hook_type(m)]


def before_prune(step: Step) -> bool:
    """Run the PreDelete hooks; True once they are done (or there are none, or the app is not being
    deleted) and the prune may go on."""
    app = step.eye.current.app
    if not generated.is_deleting(app) or generated.deletion_stage(app) != Stage.PRE_DELETE:
        return True
    declared = _declared(step, hooks.PRE_DELETE)
    if not declared:
        return True
    if not _hooks_done(step, hooks.PRE_DELETE, declared):
        return False
    _set_stage(step, Stage.RESOURCES)
    return True


def after_prune(step: Step) -> None:
    """Once nothing of the app is left: its PostDelete hooks, their cleanup, then the app is forgotten."""
    state, eye = step.state, step.eye
    op = state.operation
    if not generated.is_deleting(eye.current.app) or (op is not None and op.running):
        return
    remaining = [r.key for r in eye.comparison.resources
                 if (live := eye.view.live.get(r.key)) is not None and not deletion.kept(live)
                 and not hooks.delete_hook_type(live)]
    if remaining:  # still going (foreground), or its prune failed: the operation's retry goes on
        step.end.continue_after = RECHECK_AFTER if op is None or op.phase.value == "Succeeded" else RETRY_AFTER
        return
    stage = generated.deletion_stage(eye.current.app)
    if stage in (Stage.PRE_DELETE, Stage.RESOURCES):
        stage = Stage.POST_DELETE if _declared(step, hooks.POST_DELETE) else Stage.CLEANUP
        _set_stage(step, stage)
    if stage == Stage.POST_DELETE:
        if not _hooks_done(step, hooks.POST_DELETE, _declared(step, hooks.POST_DELETE)):
            return
        stage = Stage.CLEANUP
        _set_stage(step, stage)
    if _cleaned_up(step):
        _forget(step)


def _declared(step: Step, kind: str) -> dict[ResourceKey, Manifest]:
    """The deletion hooks of one kind the app's source declares, as placed (namespace defaulted); a hook
    named only by `generateName` (or not at all) gets one fixed name per app and kind, so a later step finds
    it."""
    out = {}
    for obj in step.eye.current.manifests:
        if hooks.delete_hook_type(obj) != kind:
            continue
        meta = obj.get("metadata") or {}
        if not meta.get("name"):  # generateName, or neither (Argo CD names such a hook too)
            obj = {**obj, "metadata": {**meta, "name": f"{meta.get('generateName') or step.ctx.name + '-'}"
                                                       f"{kind.lower()}"}}
        out[ResourceKey.of(obj)] = obj
    return out


def _live(step: Step, keys: list[ResourceKey]) -> dict[ResourceKey, Manifest | None]:
    return dict(observe.read(step.eye.current.cluster, keys))


def _outcomes(step: Step, live: Mapping[ResourceKey, Manifest | None]) -> dict[ResourceKey, HealthStatus]:
    scripts = step.eye.current.health_scripts
    out = {}
    for key, obj in live.items():
        if obj is None:
            continue
        outcome = health.hook_outcome(obj, scripts)
        out[key] = (HealthStatus.PROGRESSING if not outcome.finished
                    else HealthStatus.HEALTHY if outcome.succeeded else HealthStatus.DEGRADED)
    return out


def _hooks_done(step: Step, kind: str, declared: Mapping[ResourceKey, Manifest]) -> bool:
    """One step of a stage's hooks; True when they all succeeded."""
    cluster, name = step.eye.current.cluster, step.ctx.name
    live = _live(step, sorted(declared))
    found = deletion.run_hooks(kind, declared, live, _outcomes(step, live))
    if found is None:
        return True
    if isinstance(found, deletion.CreateHooks):
        for obj in found.objects:
            try:
                cluster.apply(hooks.delete_hook_object(obj, name))
            except ApiError as exc:
                step.problem(CONDITION, f"{kind} hook {ResourceKey.of(obj)}: {explain(exc)}", unknown=False)
                step.end.continue_after = RETRY_AFTER
                return False
        log.info("deletion hooks created", app=name, kind=kind, count=len(found.objects))
        step.end.continue_after = RECHECK_AFTER
    elif isinstance(found, deletion.HooksFailed):
        _delete(step, found.keys)  # a fixed hook runs again on the next try
        step.problem(CONDITION, found.message, unknown=False)
        step.end.continue_after = RETRY_AFTER
    else:
        step.end.continue_after = RECHECK_AFTER
    return False


def _cleaned_up(step: Step) -> bool:
    declared = {**_declared(step, hooks.PRE_DELETE), **_declared(step, hooks.POST_DELETE)}
    live = _live(step, sorted(declared))
    found = deletion.cleanup(live, _outcomes(step, live))
    if found is None:
        return True
    if isinstance(found, deletion.DeleteHooks):
        _delete(step, found.keys)
    step.end.continue_after = RECHECK_AFTER
    return False


def _delete(step: Step, keys: tuple[ResourceKey, ...]) -> None:
    for key in keys:
        try:
            step.eye.current.cluster.delete(key, propagation="Background")
        except ApiError as exc:
            log.warning("deletion hook not deleted", app=step.ctx.name, hook=str(key), error=explain(exc))


def _set_stage(step: Step, stage: Stage) -> None:
    owner = step.ctx.runtime.config().owners.get(step.ctx.name)
    if owner is not None:
        generated.set_stage(step.ctx.runtime.store, owner, step.ctx.name, stage.value)
        log.info("app deletion", app=step.ctx.name, stage=stage.value or "PreDelete")


def _forget(step: Step) -> None:
    """The app's objects and hooks are gone: it leaves its owner's record."""
    name = step.ctx.name
    owner = step.ctx.runtime.config().owners.get(name)
    if owner is None:
        return
    generated.forget(step.ctx.runtime.store, owner, name)
    log.info("app deleted", app=name, owner=owner)
