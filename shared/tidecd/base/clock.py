"""Time as a seam: the wall clock, a monotonic clock and the one short pause a step may take.

The sync engine never sleeps on its own: a reconcile step that polls health for a few seconds (at most its
budget) pauses through a `Clock`, and anything longer becomes a recorded continuation. Tests pass a
`FakeClock`, whose pauses only move its hands.
"""

from __future__ import annotations

import datetime
import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Unix seconds."""
        ...

    def monotonic(self) -> float: ...

    def pause(self, seconds: float) -> None:
        """Wait `seconds` (a short, bounded poll interval)."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def pause(self, seconds: float) -> None:
        threading.Event().wait(max(0.0, seconds))


class FakeClock:
    """A clock for tests: `pause` and `advance` move time forward instantly."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.t = start
        self.pauses: list[float] = []

    def now(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t

    def pause(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.t += max(0.0, seconds)

    def advance(self, seconds: float) -> None:
        self.t += seconds


SYSTEM = SystemClock()


def unix(iso: str) -> float:
    """Unix seconds of a time as the state writes it (`2026-01-02T03:04:05Z`, fractions too); 0.0 for ""
    or anything unreadable (a time never recorded reads as long ago)."""
    try:
        return datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
