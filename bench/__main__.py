"""`python -m bench [GROUP ...]`: run the benchmark groups (all by default) and print one table.

Everything a run starts (git server, control plane, function processes) lives under one temp dir and is
stopped in `finally`, also on Ctrl-C or SIGTERM. A group that fails is reported as a row and the other
groups still run; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from bench import (
    cli,
    coldstart,
    diff,
    drift,
    functions,
    images,
    live,
    operations,
    peers,
    render,
    scale,
    scale_peers,
    sync,
    ui,
)
from bench.harness import Bench, Row, fmt_time, print_plain, print_table, say
from tidecd.base import logs

GROUPS: dict[str, Callable[[Bench], list[Row]]] = {
    "render": render.run,
    "diff": diff.run,
    "sync": sync.run,
    "functions": functions.run,
    "coldstart": coldstart.run,  # a cold instance's config load with and without the cache; each target's imports
    "drift": drift.run,  # someone's kubectl scale → restored: tidecd (audit webhook), Argo CD, Flux (issue 27)
    "images": images.run,
    "cli": cli.run,
    "ui": ui.run,
    "live": live.run,  # an open live page's cost per minute: polls of a version vs an SSE stream (issue 25)
    "operations": operations.run,
    "peers": peers.run,
    "scale": scale.run,  # 1,000 apps from cold, tidecd then Flux and Argo CD (`make bench-scale` runs only this)
}


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def isolate() -> str:
    """Run the rest of the bench in a network namespace of its own, whose only interface is loopback.

    The control plane, git server, functions and peers then listen where nothing outside can reach them,
    and the peers whose listeners are hard-wired to 0.0.0.0 (Argo CD's controller metrics, gitops-agent's
    API) need no relay. Needs root (or CAP_SYS_ADMIN); without it the peers get a namespace each, with relays.
    """
    from tidecd_dev import netns

    if netns.isolated():
        return "network: already in a loopback-only namespace"
    try:
        netns.unshare_net()
    except OSError as exc:
        return f"network: shared with the host ({exc}); the peers bound to 0.0.0.0 get a namespace each"
    return "network: the bench runs in a loopback-only network namespace of its own"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("groups", nargs="*", metavar="GROUP",
                        help=f"one or more of: {', '.join(GROUPS)} (default: all)")
    parser.add_argument("--plain", action="store_true", help="plain text table, one line per row")
    parser.add_argument("-v", "--verbose", action="store_true", help="tidecd's info logs on stderr too")
    args = parser.parse_args(argv)
    unknown = [g for g in args.groups if g not in GROUPS]
    if unknown:
        parser.error(f"unknown group(s) {', '.join(unknown)}; choose from {', '.join(GROUPS)}")
    chosen = args.groups or list(GROUPS)
    logs.configure(logging.INFO if args.verbose else logging.WARNING)  # on stderr: stdout is the table
    signal.signal(signal.SIGTERM, _on_sigterm)
    rows: list[Row] = []
    failed = False
    started = time.perf_counter()
    if "peers" in chosen:
        peers.prebuild()  # may fetch from the Go module proxy: before the network goes
    if "scale" in chosen:
        scale_peers.prebuild()
    if "drift" in chosen:
        drift.prebuild()
    say(isolate())
    bench = Bench(Path(tempfile.mkdtemp(prefix="tidecd-bench-")))
    try:
        for name in chosen:
            group_start = time.perf_counter()
            say(f"== {name}")
            try:
                rows += GROUPS[name](bench)
            except Exception as exc:  # one broken group must not hide the others' results
                failed = True
                traceback.print_exc(file=sys.stderr)
                rows.append(Row(name, "FAILED", None, notes=f"{type(exc).__name__}: {str(exc)[:300]}"))
            say(f"== {name} done in {fmt_time(time.perf_counter() - group_start)}")
    except KeyboardInterrupt:
        say("interrupted: cleaning up")
        failed = True
    finally:
        bench.close()
    title = (f"tidecd benchmarks ({fmt_time(time.perf_counter() - started)} total; ratio = tidecd / peer, "
             "medians of the same run)")
    if args.plain:
        print(title)
        print_plain(rows)
    else:
        print_table(rows, title=title)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
