"""RollingSync (Argo CD's progressive syncs), carried out: record each generated app's `applicationStatus` and
start the syncs the strategy's steps allow now (the decision itself is `config.appset.rolling.decide`, pure).

Two callers ask, and neither waits:
- the ApplicationSet refresh (`usecases.appsets`: each poll tick, a push webhook, the api), for every
  ApplicationSet with RollingSync;
- the step of a generated app (`step.reconcile`), when the app the strategy chose (Pending or Progressing)
  has no operation running any more: its operation just ended, or a health follow-up just saw it settle. So
  the next apps start the moment the last app of a step turns Healthy, not at the next poll tick; the
  step hands the apps it started to its caller (`Outcome.refresh`), which steps them at once.

A sync the strategy starts is an explicit operation (`step.operation.record_operation`), as Argo CD sets
the `operation` field the way its UI does: sync windows apply as to a manual sync, and it prunes when
`defaultPrune` or the app's own `automated.prune` says so. An app whose sync cannot start (a closed window,
an operation already running) stays Pending and is asked again by the next trigger.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog

from tidecd.base.errors import TidecdError
from tidecd.config.appset import rolling
from tidecd.config.appset.model import ApplicationSet
from tidecd.config.model import Application, Config
from tidecd.generated import records as generated
from tidecd.images import state as images_state
from tidecd.state import app as app_state
from tidecd.step.operation import new_operation, record_operation, sync_window

if TYPE_CHECKING:
    from tidecd.runtime import Runtime

log = structlog.get_logger("tidecd.step.rolling")


def progress(runtime: Runtime, appset: ApplicationSet) -> tuple[list[str], list[str]]:
    """Record every generated app's `applicationStatus` and start the syncs the steps allow now: (the apps
    whose sync started, errors naming the ApplicationSet)."""
    errors: list[str] = []
    try:
        config = runtime.config()
        record = generated.load_records(runtime.store).get(appset.label) or {}
        views = {}
        for name in sorted(n for n, o in config.owners.items() if o == appset.label and n not in config.deleting):
            state = app_state.load(runtime.store, name)[0]
            views[name] = rolling.AppView(labels=dict(config.applications[name].labels),
                                          synced=state.sync_status == "Synced", healthy=state.health == "Healthy",
                                          running=state.operation is not None and state.operation.running)
    except TidecdError as exc:
        return [], [f"{appset.label}: RollingSync: {exc}"]
    statuses, start = rolling.decide(appset.rolling_steps or (), views, _previous(record))
    started = []
    for name in start:
        try:
            _start(runtime, config, config.applications[name], appset)
        except TidecdError as exc:  # a sync window, an operation already running: asked again next time
            statuses[name] = (rolling.PENDING, f"its sync could not start: {exc}", statuses[name][2])
            continue
        statuses[name] = (rolling.PROGRESSING, "its sync operation started", statuses[name][2])
        started.append(name)
    table = {n: {"status": s, "message": m, "step": "" if i is None else str(i + 1)}
             for n, (s, m, i) in statuses.items()}
    try:
        generated.update(runtime.store, appset.label, lambda r: {**r, "applicationStatus": table}
                         if r.get("apps") and r.get("applicationStatus") != table else None)
    except TidecdError as exc:
        errors.append(f"{appset.label}: recording its applicationStatus: {exc}")
    if started:
        log.info("RollingSync started syncs", appset=appset.name, apps=started)
    return started, errors


def _start(runtime: Runtime, config: Config, app: Application, appset: ApplicationSet) -> None:
    """One sync the strategy starts, as a person's would: sync windows apply, and it prunes when `defaultPrune`
    or the app's own `automated.prune` says so."""
    sync_window(config, app, manual=True)
    prune = appset.default_prune or app.sync_policy.prune
    record_operation(runtime.store, app.name, lambda: new_operation(app, prune=prune, initiated_by=appset.label))
    images_state.on_operation_started(runtime.store, app, rollback=False, revision="", dry_run=False, deployed_at="")


def after_step(runtime: Runtime, name: str, state: app_state.AppState | None) -> tuple[str, ...]:
    """The handover: when `name` is an app a RollingSync strategy chose (Pending or Progressing) and no
    operation of it runs now, ask its ApplicationSet's steps again; the apps whose sync started."""
    if state is None or (state.operation is not None and state.operation.running):
        return ()
    try:
        config = runtime.config()
        owner = config.owners.get(name, "")
        appset = config.appsets.get(generated.owner_name(owner)) \
            if generated.owner_kind(owner) == "ApplicationSet" else None
        if appset is None or appset.rolling_steps is None:
            return ()
        entry = _previous(generated.load_records(runtime.store).get(appset.label) or {}).get(name)
    except TidecdError as exc:
        log.warning("RollingSync handover skipped (the next refresh asks again)", app=name, error=str(exc))
        return ()
    if entry not in (rolling.PENDING, rolling.PROGRESSING):
        return ()
    started, errors = progress(runtime, appset)
    for error in errors:
        log.warning("RollingSync handover", app=name, error=error)
    return tuple(started)


def _previous(record: Mapping[str, Any]) -> dict[str, str]:
    return {n: str(e.get("status", "")) for n, e in (record.get("applicationStatus") or {}).items()
            if isinstance(e, dict)}
