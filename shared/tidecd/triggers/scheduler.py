"""The local stand-in for Pub/Sub: an in-process timer heap served by a few daemon threads.

Without `TIDECD_REFRESH_TOPIC` (the embedded mode: `make demo`, the functions under functions-framework on
a laptop) refreshes and continuations are jobs here, so a webhook or api answer returns at once and an
operation's next step runs when it is due, without any request held open. One job per key (an app) is
queued at a time: a second submit keeps the earlier due time, and a job due while the same key runs is
deferred until that run ends, so two steps of one app never run side by side in this process (the app's
lease still guards against other processes).

A job returns None when it is done, or a delay in seconds to run it again then (its lease was held).
It is process-global (`shared()`) and its threads are daemons: jobs still queued when the process exits
are lost, and `tidecd.triggers.pending`'s records let the poll and the next trigger pick them up.
"""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

log = structlog.get_logger("tidecd.triggers.scheduler")

Job = Callable[[], float | None]
WORKERS = 4


@dataclass(order=True)
class _Entry:
    due: float
    seq: int
    key: str = field(compare=False)


class LocalScheduler:
    def __init__(self, workers: int = WORKERS, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Condition()
        self._heap: list[_Entry] = []
        self._queued: dict[str, tuple[float, Job]] = {}  # key → (due, job), at most one per key
        self._running: set[str] = set()
        self._deferred: dict[str, tuple[float, Job]] = {}  # due while their key was running
        self._ready: queue.Queue[tuple[str, Job]] = queue.Queue()
        self._seq = itertools.count()
        self._threads = [threading.Thread(target=self._timer, name="tidecd-scheduler", daemon=True)]
        self._threads += [threading.Thread(target=self._worker, name=f"tidecd-step-{i}", daemon=True)
                          for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def submit(self, key: str, delay: float, job: Job) -> None:
        """Run `job` in `delay` seconds (or sooner, if a job of `key` is queued for sooner already)."""
        due = self.clock() + max(0.0, delay)
        with self._lock:
            if key in self._running:
                held = self._deferred.get(key)
                if held is None or due < held[0]:
                    self._deferred[key] = (due, job)
                return
            self._queue(key, due, job)

    def _queue(self, key: str, due: float, job: Job) -> None:
        held = self._queued.get(key)
        if held is not None and held[0] <= due:
            return
        self._queued[key] = (due, job)
        heapq.heappush(self._heap, _Entry(due, next(self._seq), key))
        self._lock.notify_all()

    def idle(self) -> bool:
        with self._lock:
            return not (self._queued or self._running or self._deferred)

    def wait_idle(self, timeout: float) -> bool:
        """Block until nothing is queued or running (tests and the CLI's exit); False on timeout."""
        deadline = time.monotonic() + timeout
        while not self.idle():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def pending(self) -> dict[str, float]:
        """Seconds until each queued key is due (negative: overdue)."""
        with self._lock:
            now = self.clock()
            return {key: due - now for key, (due, _) in self._queued.items()}

    # -- threads --------------------------------------------------------------------------------------

    def _timer(self) -> None:
        while True:
            with self._lock:
                while True:
                    self._drop_stale()
                    if self._heap and self._heap[0].due <= self.clock():
                        entry = heapq.heappop(self._heap)
                        due, job = self._queued.pop(entry.key)
                        self._running.add(entry.key)
                        break
                    timeout = (self._heap[0].due - self.clock()) if self._heap else None
                    self._lock.wait(timeout=timeout)
            self._ready.put((entry.key, job))

    def _drop_stale(self) -> None:
        """Heap entries a sooner submit of the same key replaced."""
        while self._heap:
            top = self._heap[0]
            held = self._queued.get(top.key)
            if held is not None and held[0] == top.due:
                return
            heapq.heappop(self._heap)

    def _worker(self) -> None:
        while True:
            key, job = self._ready.get()
            again: float | None = None
            try:
                again = job()
            except Exception as exc:  # a job's failure must not stop the scheduler
                log.warning("scheduled job failed", key=key, error=f"{type(exc).__name__}: {exc}"[:300])
            with self._lock:
                self._running.discard(key)
                if again is not None:
                    self._queue(key, self.clock() + again, job)
                deferred = self._deferred.pop(key, None)
                if deferred is not None:
                    self._queue(key, *deferred)


_shared: LocalScheduler | None = None
_shared_lock = threading.Lock()


def shared() -> LocalScheduler:
    """The process's scheduler, started on first use."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = LocalScheduler()
        return _shared
