"""What every benchmark shares: result rows, timing, the table, and the services and processes of a run.

One `Bench` per run owns a temporary directory, one git server and (started on first use) one local
control plane with kwok; `close()` ends every process it started, by pid, and removes the directory, also
after a failure or Ctrl-C.
"""

from __future__ import annotations

import compileall
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidecd_dev.devcluster import DevCluster
from tidecd_dev.gitserver import GitServer
from tidecd_dev.processes import stop_session

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Row:
    """One line of the table; times in seconds, `None` when not measured (the ratio is then blank)."""

    group: str
    name: str
    tidecd: float | None
    peer: float | None = None
    peer_name: str = ""
    notes: str = ""

    @property
    def ratio(self) -> float | None:
        if self.tidecd is None or not self.peer:
            return None
        return self.tidecd / self.peer


def say(message: str) -> None:
    """Progress on stderr, so the table on stdout stays clean."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@contextmanager
def progress_bar() -> Iterator[Callable[[str, int, int], None]]:
    """`with progress_bar() as progress: progress(stage, done, total)`: one rich bar per stage, kept on
    screen when the run ends (the scale bench's stages: repos, apps synced, the peers' apps)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=False) as bar:
        tasks: dict[str, Any] = {}

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done)

        yield progress


# -- timing --------------------------------------------------------------------------------------------


@contextmanager
def stopwatch() -> Iterator[list[float]]:
    """`with stopwatch() as t: ...` then `t[0]` is the elapsed wall time in seconds."""
    out: list[float] = []
    start = time.perf_counter()
    try:
        yield out
    finally:
        out.append(time.perf_counter() - start)


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def spread(values: Sequence[float]) -> str:
    """`n=5, 0.12–0.19s`: how many samples and their range, for the notes."""
    return f"n={len(values)}, {fmt_time(min(values))}–{fmt_time(max(values))}"


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f}µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f}ms"
    return f"{seconds:.2f}s"


def fmt_ratio(ratio: float | None) -> str:
    if ratio is None:
        return "—"
    return f"{ratio:.3f}×" if ratio < 0.1 else f"{ratio:.2f}×"


# -- the table -----------------------------------------------------------------------------------------


def print_table(rows: Sequence[Row], *, title: str = "tidecd benchmarks") -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # pragma: no cover - rich is a dependency, plain text is the fallback
        print_plain(rows)
        return
    table = Table(title=title, show_lines=False)
    for header, justify in (("group", "left"), ("benchmark", "left"), ("tidecd", "right"), ("peer", "right"),
                            ("ratio", "right"), ("notes", "left")):
        table.add_column(header, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for row in rows:
        peer = fmt_time(row.peer) + (f" ({row.peer_name})" if row.peer_name and row.peer is not None else "")
        table.add_row(row.group, row.name, fmt_time(row.tidecd), peer, fmt_ratio(row.ratio), row.notes)
    Console(width=max(160, shutil.get_terminal_size((160, 40)).columns)).print(table)


def print_plain(rows: Sequence[Row]) -> None:
    cells = [("group", "benchmark", "tidecd", "peer", "ratio", "notes")]
    for row in rows:
        peer = fmt_time(row.peer) + (f" ({row.peer_name})" if row.peer_name and row.peer is not None else "")
        cells.append((row.group, row.name, fmt_time(row.tidecd), peer, fmt_ratio(row.ratio), row.notes))
    widths = [max(len(c[i]) for c in cells) for i in range(5)]
    for cell in cells:
        print("  ".join(c.ljust(w) for c, w in zip(cell[:5], widths, strict=True)) + "  " + cell[5])


# -- services and processes ----------------------------------------------------------------------------


def precompile() -> None:
    """The library's bytecode, as the function archive ships it (scripts/package.sh), so the function
    instances the bench starts from this checkout load what a deployed cold instance loads. Where
    PYTHONDONTWRITEBYTECODE is set (this machine's shells set it) no import writes a .pyc, and every cold
    process compiled each changed or new module again: 0.3-0.4 s of a cold reconcile process's imports.
    Timestamp .pyc (Python's default): an edited source is compiled again, never run stale."""
    compileall.compile_dir(REPO_ROOT / "shared" / "tidecd", quiet=1)
    compileall.compile_file(REPO_ROOT / "functions" / "main.py", quiet=1)


@dataclass
class Bench:
    """The run's shared services: a temp dir, a git server, one control plane, tracked subprocesses."""

    root: Path
    git: GitServer = field(init=False)
    _dev: DevCluster | None = None
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        precompile()
        self.git = GitServer(self.root / "git").start()

    def dir(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def cluster(self) -> DevCluster:
        """The run's control plane (etcd, kube-apiserver, controllers, kwok), started on first use."""
        if self._dev is None:
            say("starting the local control plane with kwok")
            dev = _BenchCluster(self.root / "cluster", kwok=True)
            self._dev = dev  # set first: a failed start still gets stopped by close()
            dev.start()
            say(f"control plane ready at {dev.server}")
        return self._dev

    @property
    def kubeconfig(self) -> str:
        return str(self.cluster().kubeconfig)

    def spawn(self, args: list[str], *, env: dict[str, str], log: Path,
              cwd: Path = REPO_ROOT) -> subprocess.Popen[bytes]:
        """A long-running helper process in its own session, ended by `close()`."""
        with open(log, "ab") as out:
            proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self._procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        stop_session(proc, grace=5.0)
        if proc in self._procs:
            self._procs.remove(proc)

    def close(self) -> None:
        for proc in reversed(self._procs):
            stop_session(proc, grace=5.0)
        self._procs.clear()
        if self._dev is not None:
            self._dev.stop()
            self._dev = None
        self.git.stop()
        if os.environ.get("TIDECD_BENCH_KEEP"):  # debugging: keep the run's logs and work dirs
            say(f"kept {self.root} (TIDECD_BENCH_KEEP)")
            return
        shutil.rmtree(self.root, ignore_errors=True)


class _BenchCluster(DevCluster):
    """DevCluster with a controller-manager as Kubernetes' own scale tests run it.

    The controller-manager's client is held to 20 requests a second by default. At 1,000 apps every
    Deployment waits for the deployment controller's ReplicaSet and status writes (and every Service for
    its EndpointSlice) behind that limit: the scale run was paced by it, about 4.7 apps a second whatever
    the tool or its instances (4 or 6 reconcile instances: 217 s and 214 s, the machine 68% busy, 0.63 s
    of a 0.86 s step spent waiting for health). Kubernetes' scalability jobs run it with
    `--kube-api-qps=100 --kube-api-burst=100` (CONTROLLER_MANAGER_TEST_ARGS); so does every bench here,
    for every tool alike (they share this control plane).
    """

    CONTROLLER_MANAGER_QPS = ("--kube-api-qps", "100", "--kube-api-burst", "100")

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        if name == "kube-controller-manager":
            args = [*args, *self.CONTROLLER_MANAGER_QPS]
        super()._spawn(name, args, env)


def sh(args: Sequence[str], *, ok: Sequence[int] = (0,), env: dict[str, str] | None = None,
        cwd: Path | None = None, timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
    """Run a peer tool; a failure raises with its stderr tail (the bench must not time an error)."""
    proc = subprocess.run(list(args), capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout,
                          check=False)
    if proc.returncode not in ok:
        tail = (proc.stderr or proc.stdout)[-1500:]
        raise RuntimeError(f"{args[0]} {' '.join(args[1:3])} ... exited {proc.returncode}:\n{tail}")
    return proc
