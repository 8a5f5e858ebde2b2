"""Run ONE reconcile step in a child process, and freeze it at a chosen point so the parent can kill it.

    python -m tests.support.stepper '{"point": "hooks", "marker": "...", "app": "...", ...}'

Points: "dry-run" (the first server-side dry-run before any write), "mid-wave" (one object of a wave
applied, the next apply about to go out), "waiting" (the step's first health poll), "hooks" (a hook just
created, not yet recorded), "prune" (the first prune delete done), "none" (run the step to its end).
At the point the child writes `marker` and parks until the parent sends SIGKILL, or removes the marker
(then it goes on, e.g. after a SIGSTOP/SIGCONT that let its lease expire).
The wrappers only watch the real client's calls; nothing here changes what tidecd does.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

from tidecd.base import constants, logs
from tidecd.base.clock import SystemClock
from tidecd.base.model import ResourceKey
from tidecd.clients.cluster import KubeCluster
from tidecd.clients.store import LocalStore
from tidecd.runtime import Runtime, Settings
from tidecd.step import reconcile as engine


def main(raw: str) -> None:
    args = json.loads(raw)
    point, marker = str(args["point"]), Path(args["marker"])
    vars(engine)["LEASE_TTL"] = float(args.get("lease_ttl", vars(engine)["LEASE_TTL"]))
    applies = [0]
    stopped: list[str] = []
    lock = threading.Lock()

    def stop() -> None:
        if stopped:
            return
        stopped.append(point)
        marker.write_text(point)
        while marker.exists():  # parked here until the parent kills us, or removes the marker to go on
            threading.Event().wait(0.05)

    original_apply, original_delete = KubeCluster.apply, KubeCluster.delete

    def apply(self: KubeCluster, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        hook = constants.ANNOTATION_OPERATION in ((obj.get("metadata") or {}).get("annotations") or {})
        if point == "dry-run" and dry_run:
            stop()
        if point == "mid-wave" and not dry_run and not hook and obj.get("kind") != "Namespace":
            with lock:
                applies[0] += 1
                second = applies[0] >= 2
            if second:
                stop()
        result = original_apply(self, obj, dry_run=dry_run)
        if point == "hooks" and hook and not dry_run:
            stop()
        return result

    def delete(self: KubeCluster, key: ResourceKey, *, propagation: str = "Background") -> None:
        original_delete(self, key, propagation=propagation)
        if point == "prune" and key.kind == "ConfigMap":
            stop()

    class Clock(SystemClock):
        def pause(self, seconds: float) -> None:
            if point == "waiting":
                stop()
            super().pause(seconds)

    KubeCluster.apply = apply  # type: ignore[method-assign]
    KubeCluster.delete = delete  # type: ignore[method-assign]
    runtime = Runtime(settings=Settings(**args["settings"]), store=LocalStore(Path(args["settings"]["store"])))
    outcome = engine.reconcile(runtime, args["app"], clock=Clock(), budget=float(args.get("budget", 10.0)))
    print(json.dumps({"continue_after": outcome.continue_after, "skipped": outcome.skipped}))


if __name__ == "__main__":
    logs.configure()  # log lines to stderr, as the real entry points do: stdout carries only the result
    main(sys.argv[1])
