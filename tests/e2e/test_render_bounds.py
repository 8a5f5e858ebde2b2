"""The render's bounds through the whole step (issue 29, "Bounds everywhere"), against the session's control
plane, git server and store, with the real jsonnet and helm: a repository of slow jsonnet files is refused
by the total render time, a chart whose template allocates without end by the memory limit. Each refusal is
the app's condition naming the variable, measured in wall time and peak RSS, and the next trigger does not
render again until the revision changes.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.apps import GitOps
from tidecd.config.load import JsonnetSpec
from tidecd.render import jsonnet, tool

pytestmark = pytest.mark.e2e
MiB = 1024 * 1024

# A loop in constant memory (tailstrict): only time.
SLOW = ("local loop(n, acc) = if n == 0 then acc else loop(n - 1, acc + 1) tailstrict;\n"
        "{apiVersion: 'v1', kind: 'ConfigMap', metadata: {name: 'slow-%d'}, data: {n: '' + loop(%d, 0)}}\n")
GREEDY_TEMPLATE = """\
{{- $keep := list }}
{{- range until (int .Values.megabytes) }}
{{- $keep = append $keep (repeat 1048576 "x") }}
{{- end }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: greedy
data:
  count: {{ len $keep | quote }}
"""


def counted_children(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The render children started after this call (jsonnet files and tool runs), by what they render."""
    started: list[str] = []
    real = tool.run_child

    def counted(argv: Any, *, what: str, **kwargs: Any) -> tool.Finished:
        started.append(what)
        return real(argv, what=what, **kwargs)

    monkeypatch.setattr(tool, "run_child", counted)
    monkeypatch.setattr(jsonnet, "run_child", counted)
    return started


def condition(gitops: GitOps) -> str:
    found = [c["message"] for c in gitops.state().conditions if c["type"] == "ComparisonError"]
    assert found, gitops.state().conditions
    return found[0]


def rounds_taking(seconds: float, tmp: Path) -> int:
    """How many rounds of SLOW take about `seconds` on this machine now (it is shared: measured, not assumed)."""
    (tmp / "probe.jsonnet").write_text(SLOW % (0, 50_000))
    fastest = float("inf")
    for _ in range(2):  # the quieter moment: under load the files then run longer, never shorter, than asked
        start = time.monotonic()
        jsonnet.render_jsonnet(tmp, tmp, "probe.jsonnet", JsonnetSpec(), source="probe")
        fastest = min(fastest, time.monotonic() - start)
    return max(1000, int(50_000 * seconds / fastest))


def test_slow_jsonnet_files_are_refused_by_the_total_render_time_once(gitops: GitOps, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight files of about a quarter of the limit each: none near it alone (a file may run four times slower
    than measured on this shared machine and still fit), together twice past the render's 5 s."""
    limit = 5
    rounds = rounds_taking(limit / 4, tmp_path)
    monkeypatch.setenv("TIDECD_MAX_RENDER_SECONDS", str(limit))
    gitops.push({f"app/slow-{n}.jsonnet": SLOW % (n, rounds) for n in range(8)})
    gitops.application()
    children = counted_children(monkeypatch)

    start = time.monotonic()
    gitops.reconcile()
    took = time.monotonic() - start
    message = condition(gitops)
    print(f"\nrefused after {took:.2f}s (limit {limit}s, {len(children)} jsonnet files started): {message}")
    assert message.endswith(f"render time: over the limit of {limit} s (TIDECD_MAX_RENDER_SECONDS)"), message
    assert "app/slow-" in message, "the condition names the file being rendered"
    assert took < limit + 4, took  # the limit, plus the step's own work (ls-remote, checkout, store)
    assert len(children) >= 2, "files that each fit were rendered: the bound is the render's total"

    started = len(children)
    for _ in range(2):  # the next triggers find the stored refusal: no render, the same condition
        start = time.monotonic()
        gitops.reconcile()
        again = time.monotonic() - start
        assert len(children) == started, children
        assert again < 2.5, again
        assert condition(gitops) == message

    gitops.push({**{f"app/slow-{n}.jsonnet": None for n in range(1, 8)},
                 "app/slow-0.jsonnet": SLOW % (0, 1000)}, "fast now")  # a new input: rendered again
    gitops.reconcile()
    assert children[started:] == ["app/slow-0.jsonnet (jsonnet)"], children
    assert not [c for c in gitops.state().conditions if c["type"] == "ComparisonError"], gitops.state().conditions


@dataclass
class PeakRss:
    """The highest VmHWM (peak resident set) of any descendant of this process named `name`, sampled while
    it runs: the kernel keeps each process's high-water mark, so a sample shortly before it ends is exact."""

    name: str
    peak: int = 0
    seen: set[int] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        me = psutil.Process(os.getpid())
        while not self.stop.is_set():
            for child in me.children(recursive=True):
                try:
                    if child.name() != self.name:
                        continue
                    status = Path(f"/proc/{child.pid}/status").read_text()
                except (psutil.Error, OSError):
                    continue
                for line in status.splitlines():
                    if line.startswith("VmHWM:"):
                        self.peak = max(self.peak, int(line.split()[1]) * 1024)
                        self.seen.add(child.pid)
            time.sleep(0.002)


@contextmanager
def peak_rss(name: str) -> Iterator[PeakRss]:
    peak = PeakRss(name)
    sampler = threading.Thread(target=peak.sample, daemon=True)
    sampler.start()
    try:
        yield peak
    finally:
        peak.stop.set()
        sampler.join()


def test_a_chart_that_allocates_without_end_is_refused_by_the_memory_limit_once(
        gitops: GitOps, monkeypatch: pytest.MonkeyPatch) -> None:
    bound = 256 * MiB
    monkeypatch.setenv("TIDECD_MAX_RENDER_MEMORY_BYTES", str(bound))
    gitops.push({"chart/Chart.yaml": "apiVersion: v2\nname: greedy\nversion: 0.1.0\n",
                 "chart/values.yaml": "megabytes: 1024\n",  # 1 GiB of strings kept: about 1.1 GB RSS unbounded
                 "chart/templates/cm.yaml": GREEDY_TEMPLATE})
    gitops.application(path="chart")
    children = counted_children(monkeypatch)

    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    start = time.monotonic()
    with peak_rss("helm") as helm:
        gitops.reconcile()
    took = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    message = condition(gitops)
    print(f"\nhelm peak RSS {helm.peak / MiB:.0f} MiB (limit {bound // MiB} MiB) in {took:.2f}s; "
          f"largest child of this process {after / MiB:.0f} MiB (before {before / MiB:.0f} MiB): {message}")
    assert message.endswith("helm template chart: memory: over the limit of 268,435,456 bytes "
                            "(TIDECD_MAX_RENDER_MEMORY_BYTES)"), message
    assert helm.seen and 0 < helm.peak <= bound + 32 * MiB, helm  # the data limit, plus the binary's pages
    assert after <= max(before, bound + 32 * MiB), (before, after)  # the kernel's count of every child agrees
    assert took < 20, took

    started = len(children)
    gitops.reconcile()
    assert len(children) == started, "the stored refusal: helm is not run again for the same input"
    assert condition(gitops) == message

    gitops.push({"chart/values.yaml": "megabytes: 4\n"}, "modest now")
    gitops.reconcile()
    assert len(children) == started + 1, children
    assert not [c for c in gitops.state().conditions if c["type"] == "ComparisonError"], gitops.state().conditions
