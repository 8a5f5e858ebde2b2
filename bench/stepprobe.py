"""The scale bench's reconcile instances, measured: each step's kind and CPU time, and a cProfile per kind.

`functions/main.py` as it is, with `tidecd.triggers.dispatch.run_step` wrapped: the Fleet starts its
reconcile instances with this file as their functions-framework source when `TIDECD_BENCH_STEPS` names a
folder. Each step appends one JSON line to `<folder>/steps-<pid>.jsonl` (its kind, wall and CPU seconds);
with `TIDECD_BENCH_PROFILE=1` each kind's calls also run under its own cProfile (timed in CPU seconds of
the process, so waits on the API server, git and the store do not count), written to
`<folder>/profile-<kind>-<pid>.pstats` (after every call: slow, so a profiled run's times are not the
measured ones). The kinds:

- `no-op`: answered by the quiet path (`Outcome.unchanged`);
- `first sync`: the step that ended an operation (`Outcome.deployed`);
- `health follow-up`: a continuation that ended none;
- `refresh`: any other step (a full comparison, an operation started but not ended, ...).

A continuation refused as early (HTTP 429) never reaches `run_step`: the Frontend counts those.

Each step's line also holds its store operations (`StoreCounter`: the local store's calls, classed as GCS
bills them), and the poll target's calls are measured alike into `<folder>/poll-<pid>.jsonl` (kind `poll`).
"""

from __future__ import annotations

import atexit
import cProfile
import importlib.util
import json
import math
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

KINDS = ("no-op", "first sync", "health follow-up", "refresh")
LIST_PAGE = 1000  # keys per listing request: GCS bills a listing per page


class StoreCounter:
    """Counts the store's calls in this process as GCS would bill them: class `A` (a write, a listing per
    1,000 keys), class `B` (a read), `deletes` (free). Only the outermost call counts (LocalStore.generations
    lists through `list`)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._depth = threading.local()

    def install(self, cls: Any) -> None:
        for name, klass in (("read", "B"), ("read_file", "B"), ("write", "A"), ("write_file", "A"),
                            ("delete", "deletes"), ("list", "A"), ("generations", "A")):
            if hasattr(cls, name):
                setattr(cls, name, self._wrap(getattr(cls, name), klass, listing=name in ("list", "generations")))

    def _wrap(self, method: Any, klass: str, *, listing: bool) -> Any:
        counter = self

        def counted(store: Any, *args: Any, **kwargs: Any) -> Any:
            depth = getattr(counter._depth, "n", 0)
            counter._depth.n = depth + 1
            try:
                result = method(store, *args, **kwargs)
            finally:
                counter._depth.n = depth
            if depth == 0:
                calls = max(1, math.ceil(len(result) / LIST_PAGE)) if listing else 1
                with counter._lock:
                    counter.counts[klass] += calls
            return result

        return counted

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {k: self.counts.get(k, 0) for k in ("A", "B", "deletes")}

    @staticmethod
    def since(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
        return {k: after[k] - before.get(k, 0) for k in after}


def kind_of(*, continuation: bool, unchanged: bool, deployed: bool) -> str:
    """Which path a step took, from its refresh and its outcome."""
    if unchanged:
        return "no-op"
    if deployed:
        return "first sync"
    if continuation:
        return "health follow-up"
    return "refresh"


class Probe:
    """Measures every step of this process into `folder`."""

    def __init__(self, folder: Path, *, profile: bool, store: StoreCounter | None = None) -> None:
        self.folder = folder
        self.store = store or StoreCounter()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.lines = (folder / f"steps-{os.getpid()}.jsonl").open("a", buffering=1)
        self.profile = profile
        self.stats: dict[str, Any] = {}  # kind → pstats.Stats of its calls so far

    def wrap(self, run_step: Any) -> Any:
        def measured(runtime: Any, refresh: Any, dispatcher: Any) -> Any:
            profiler = cProfile.Profile(time.process_time) if self.profile else None  # CPU, not waits
            wall, cpu, ops = time.monotonic(), time.process_time(), self.store.snapshot()
            if profiler is not None:
                profiler.enable()
            try:
                outcome = run_step(runtime, refresh, dispatcher)
            finally:
                if profiler is not None:
                    profiler.disable()
            kind = kind_of(continuation=refresh.continuation, unchanged=outcome.unchanged,
                           deployed=bool(outcome.deployed))
            self.lines.write(json.dumps({"at": round(time.time(), 3), "app": refresh.app, "kind": kind,
                                         "skipped": outcome.skipped,
                                         "wall": round(time.monotonic() - wall, 4),
                                         "cpu": round(time.process_time() - cpu, 4),
                                         "store": self.store.since(ops, self.store.snapshot()),
                                         "continue_after": outcome.continue_after}) + "\n")
            if profiler is not None:
                self._merge(kind, profiler)
            return outcome

        return measured

    def wrap_target(self, target: Any, kind: str) -> Any:
        """A functions-framework target measured as a whole (the poll): one line per call in
        `<folder>/<kind>-<pid>.jsonl` with its wall and CPU seconds and store operations."""
        import functools

        lines = (self.folder / f"{kind}-{os.getpid()}.jsonl").open("a", buffering=1)

        @functools.wraps(target)
        def measured(request: Any) -> Any:
            wall, cpu, ops = time.monotonic(), time.process_time(), self.store.snapshot()
            try:
                return target(request)
            finally:
                lines.write(json.dumps({"at": round(time.time(), 3), "kind": kind,
                                        "wall": round(time.monotonic() - wall, 4),
                                        "cpu": round(time.process_time() - cpu, 4),
                                        "store": self.store.since(ops, self.store.snapshot())}) + "\n")

        return measured

    def _merge(self, kind: str, profiler: cProfile.Profile) -> None:
        # pstats merges by adding: keep one Stats per kind, dump it now and then
        import pstats  # lazy: only a profiled run

        stats = self.stats.get(kind)
        if stats is None:
            self.stats[kind] = pstats.Stats(profiler)
        else:
            stats.add(profiler)
        self.dump(kind)  # after every call: the bench reads them while the instances still run

    def dump(self, only: str = "") -> None:
        for kind, stats in self.stats.items():
            if not only or kind == only:
                stats.dump_stats(str(self.folder / f"profile-{kind.replace(' ', '-')}-{os.getpid()}.pstats"))


def read_steps(folder: Path, kind: str = "steps") -> list[dict[str, Any]]:
    """Every step the instances recorded in `folder` (a line that is cut short is skipped); with `kind`
    `poll`, the poll target's calls."""
    steps: list[dict[str, Any]] = []
    for path in sorted(folder.glob(f"{kind}-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                steps.append(json.loads(line))
            except ValueError:
                continue
    return steps


def summary(steps: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per kind (and `all`): how many steps, their mean and p99 CPU seconds, and their mean wall seconds."""
    out: dict[str, dict[str, float]] = {}
    ran = [s for s in steps if not s.get("skipped")]
    for kind in ("all", *KINDS):
        of = ran if kind == "all" else [s for s in ran if s.get("kind") == kind]
        if not of:
            continue
        cpu = sorted(float(s["cpu"]) for s in of)
        out[kind] = {"steps": len(of), "cpu_mean": round(sum(cpu) / len(cpu), 4),
                     "cpu_p99": round(cpu[min(len(cpu) - 1, int(0.99 * len(cpu)))], 4),
                     "wall_mean": round(sum(float(s["wall"]) for s in of) / len(of), 4)}
    return out


def top(folder: Path, kind: str, limit: int = 15, *, own: bool = False) -> list[str]:
    """The `limit` functions with the most CPU time in `kind`'s profiles (their own time when `own`, else
    with what they call), one line each."""
    import pstats  # lazy: only a profiled run

    paths = sorted(folder.glob(f"profile-{kind.replace(' ', '-')}-*.pstats"))
    if not paths:
        return []
    stats = pstats.Stats(str(paths[0]))
    for path in paths[1:]:
        stats.add(str(path))
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2 if own else 3],  # type: ignore[attr-defined]
                  reverse=True)
    lines = []
    for (file, line, name), (_cc, calls, tottime, cumtime, _callers) in rows[:limit]:
        where = f"{Path(file).name}:{line}" if line else file
        lines.append(f"{cumtime:8.3f}s cum {tottime:8.3f}s own {calls:7d}× {name} ({where})")
    return lines


def _install() -> None:
    folder = os.environ.get("TIDECD_BENCH_STEPS", "")
    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("tidecd_function_main", root / "functions" / "main.py")
    assert spec is not None and spec.loader is not None
    main = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = main
    spec.loader.exec_module(main)
    globals().update({k: v for k, v in vars(main).items() if not k.startswith("__")})
    if folder:
        from tidecd.clients.store import LocalStore
        from tidecd.triggers import dispatch

        store = StoreCounter()
        store.install(LocalStore)
        probe = Probe(Path(folder), profile=os.environ.get("TIDECD_BENCH_PROFILE", "") == "1", store=store)
        dispatch.run_step = probe.wrap(dispatch.run_step)  # functions/main.py calls it as dispatch.run_step
        globals()["poll"] = probe.wrap_target(globals()["poll"], "poll")  # functions-framework looks it up here
        atexit.register(probe.dump)


if __name__ != "__main__" and os.environ.get("TIDECD_BENCH_STEPS") is not None:
    _install()
