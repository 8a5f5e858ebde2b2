"""AppProject `syncWindows`: when an app may start a sync, with Argo CD's rules (`SyncWindows.CanSync`).

- The windows that apply to an app are those whose `applications` (app name), `namespaces` (destination
  namespace) or `clusters` (destination server or name) globs match it: any list matching, or with
  `andOperator` every non-empty list.
- A window is active from each time its cron `schedule` fires (in its `timeZone`, default UTC) for
  `duration`.
- No matching window: every sync may start. An active `deny` window blocks every sync (deny wins over
  allow), except a manual one when every active deny window has `manualSync`. Otherwise an active `allow`
  window lets it through; when allow windows exist but none is active, syncs are blocked, except a manual one
  when one of those allow windows has `manualSync`.

tidecd checks the windows when an operation starts (automated or manual, rollbacks included): an operation
already running finishes. A blocked automated sync is not an error: the app carries a `SyncWindowBlocked`
condition and the next poll after the window opens starts it. Pure functions over a given time.
"""

from __future__ import annotations

import datetime
import zoneinfo
from dataclasses import dataclass

from tidecd.base.globs import compile_glob
from tidecd.config.model import AppProject, Destination, SyncWindow

CONDITION = "SyncWindowBlocked"


def describe(window: SyncWindow) -> str:
    """Argo CD's short form, as `argocd app get` prints assigned windows: `deny:0 2 * * *:1h`."""
    return f"{window.kind}:{window.schedule}:{_duration_text(window.duration_seconds)}"


def _duration_text(seconds: float) -> str:
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(f"{n}{u}" for n, u in ((hours, "h"), (minutes, "m"), (secs, "s")) if n) or "0s"


def _glob(pattern: str, value: str) -> bool:
    try:
        return compile_glob(pattern).fullmatch(value) is not None
    except ValueError:
        return pattern == value


def matches(window: SyncWindow, app_name: str, destination: Destination) -> bool:
    checks = []
    if window.applications:
        checks.append(any(_glob(p, app_name) for p in window.applications))
    if window.clusters:
        checks.append(any(_glob(p, destination.server) or _glob(p, destination.name) for p in window.clusters))
    if window.namespaces:
        checks.append(any(_glob(p, destination.namespace) for p in window.namespaces))
    if not checks:
        return False
    return all(checks) if window.and_operator else any(checks)


def last_start(window: SyncWindow, now: datetime.datetime) -> datetime.datetime | None:
    """When the window last opened at or before `now`, within one `duration` (None: it is not active)."""
    # lazy: cold start (croniter only for a sync window)
    from croniter import croniter

    zone = zoneinfo.ZoneInfo(window.time_zone or "UTC")
    since = (now - datetime.timedelta(seconds=window.duration_seconds)).astimezone(zone)
    start: datetime.datetime = croniter(window.schedule, since).get_next(datetime.datetime)
    return start if start < now else None


def active(window: SyncWindow, now: datetime.datetime) -> bool:
    return last_start(window, now) is not None


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    message: str = ""  # why it is blocked (or which window let a manual sync through)


def can_sync(project: AppProject, app_name: str, destination: Destination, *, manual: bool,
             now: datetime.datetime | None = None) -> Verdict:
    """Whether a sync of the app may start now (Argo CD's `CanSync(isManual)`)."""
    now = now or datetime.datetime.now(datetime.UTC)
    windows = [w for w in project.sync_windows if matches(w, app_name, destination)]
    if not windows:
        return Verdict(True)
    on = [w for w in windows if active(w, now)]
    what = "manual sync" if manual else "automated sync"
    denies = [w for w in on if w.kind == "deny"]
    if denies:
        if manual and all(w.manual_sync for w in denies):
            return Verdict(True, f"manual sync allowed by {describe(denies[0])} (manualSync)")
        return Verdict(False, f"{what} blocked by the active deny window {describe(denies[0])} of project "
                              f"{project.name!r}")
    if any(w.kind == "allow" for w in on):
        return Verdict(True)
    allows = [w for w in windows if w.kind == "allow"]
    if allows:
        if manual and any(w.manual_sync for w in allows):
            return Verdict(True, "manual sync allowed outside the allow windows (manualSync)")
        listed = ", ".join(describe(w) for w in allows)
        return Verdict(False, f"{what} blocked: outside every allow window of project {project.name!r} "
                              f"({listed})")
    return Verdict(True)
