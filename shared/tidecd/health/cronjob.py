"""CronJob health: Suspended when suspended, Degraded when its last run did not succeed.

The status keeps only `lastScheduleTime` (when the newest run was started) and `lastSuccessfulTime` (when a
run last completed successfully): with no run active, a success older than the newest schedule means the
newest run failed (or was deleted before it finished).
"""

from __future__ import annotations

from datetime import datetime

from tidecd.base.model import HealthResult, HealthStatus, Manifest
from tidecd.health._fields import get, items, text


def check(obj: Manifest) -> HealthResult:
    if get(obj, "spec", "suspend") is True:
        return HealthResult(HealthStatus.SUSPENDED, "CronJob is suspended")
    scheduled = _time(text(obj, "status", "lastScheduleTime"))
    if scheduled is None:
        return HealthResult(HealthStatus.HEALTHY, "CronJob has not run yet")
    if items(obj, "status", "active"):
        return HealthResult(HealthStatus.HEALTHY, "CronJob is running a job")
    succeeded = _time(text(obj, "status", "lastSuccessfulTime"))
    if succeeded is None or succeeded < scheduled:
        return HealthResult(HealthStatus.DEGRADED, "CronJob's last run, scheduled at "
                            f"{text(obj, 'status', 'lastScheduleTime')}, did not complete successfully")
    return HealthResult(HealthStatus.HEALTHY, "CronJob's last run succeeded")


def _time(value: str) -> datetime | None:
    """An RFC 3339 timestamp as the API server writes it (`2024-05-01T10:00:00Z`), or None."""
    try:
        return datetime.fromisoformat(value) if value else None
    except ValueError:
        return None
