"""Retention: what the object store keeps, and for how long.

    TIDECD_RETAIN_DELIVERIES_DAYS  7    deliveries/<id>: a forge redelivers within hours, never after days
    TIDECD_RETAIN_SNAPSHOTS_DAYS   30   snapshots/: a cache; an expired one is fetched again when needed
                                        (also config-cache/: the loaded config by commit, loaded again)
    TIDECD_RETAIN_MANIFESTS_DAYS   30   manifests/: a cache; an expired one is rendered again when needed
    TIDECD_HISTORY_LIMIT           10   entries of state history per app (rollback targets)

In GCS the expiry is the bucket's own lifecycle rules, set by Terraform from the same numbers
(`infra/storage.tf`, variable `retention`), so no function pays for it. The local backend has no
lifecycle: `sweep` deletes expired objects by file age, at most `max_deletes` per call, and the poll
function calls it once per tick. Everything expired is either a cache or a record of the past: losing it
costs a refetch or a render, never a wrong decision (a delivery older than the retention is no longer a
redelivery anyone sends).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, fields
from pathlib import Path

from tidecd.base.errors import ConfigError
from tidecd.clients.store import LocalStore, ObjectStore, PreconditionFailed

DAY = 86_400.0
_ENV = {
    "deliveries_days": "TIDECD_RETAIN_DELIVERIES_DAYS",
    "snapshots_days": "TIDECD_RETAIN_SNAPSHOTS_DAYS",
    "manifests_days": "TIDECD_RETAIN_MANIFESTS_DAYS",
    "history_limit": "TIDECD_HISTORY_LIMIT",
}


@dataclass(frozen=True)
class Retention:
    deliveries_days: int = 7
    snapshots_days: int = 30
    manifests_days: int = 30
    history_limit: int = 10

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Retention:
        source = os.environ if env is None else env
        values: dict[str, int] = {}
        for item in fields(cls):
            name = _ENV[item.name]
            text = source.get(name, "").strip()
            if text:
                if not text.isdigit() or int(text) <= 0:
                    raise ConfigError(f"{name}={text!r}: expected a positive whole number")
                values[item.name] = int(text)
        return cls(**values)

    def prefixes(self) -> dict[str, float]:
        """Object prefix → maximum age in seconds."""
        return {"deliveries/": self.deliveries_days * DAY, "snapshots/": self.snapshots_days * DAY,
                "manifests/": self.manifests_days * DAY, "config-cache/": self.snapshots_days * DAY}


def history_limit() -> int:
    return Retention.from_env().history_limit


@dataclass
class SweepResult:
    deleted: list[str]
    more: bool  # stopped at max_deletes: the next sweep goes on


def sweep(store: ObjectStore, *, now: float | None = None, max_deletes: int = 1000,
          retention: Retention | None = None) -> SweepResult:
    """Delete objects older than their prefix's retention; a no-op for stores with lifecycle rules (GCS)."""
    if not isinstance(store, LocalStore):
        return SweepResult([], False)
    rules = (retention or Retention.from_env()).prefixes()
    now = time.time() if now is None else now
    deleted: list[str] = []
    for prefix, max_age in rules.items():
        folder = store.root / prefix.rstrip("/")
        for path in _files(folder):
            if len(deleted) >= max_deletes:
                return SweepResult(deleted, True)
            try:
                age = now - path.stat().st_mtime
            except FileNotFoundError:
                continue
            if age <= max_age:
                continue
            key = path.relative_to(store.root).as_posix()
            try:
                store.delete(key)
            except PreconditionFailed:
                continue
            deleted.append(key)
    return SweepResult(deleted, False)


def _files(folder: Path) -> list[Path]:
    out: list[Path] = []
    for top, _dirs, names in os.walk(folder):
        out.extend(Path(top) / name for name in names)
    return sorted(out)
