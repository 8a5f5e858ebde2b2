"""The scale bench's step measurements (bench/stepprobe.py): each step's kind, and the CPU summary."""

from __future__ import annotations

import json
from pathlib import Path

from bench import stepprobe
from bench.scale import cpu_text


def test_each_step_is_named_by_the_path_it_took() -> None:
    assert stepprobe.kind_of(continuation=False, unchanged=True, deployed=False) == "no-op"
    assert stepprobe.kind_of(continuation=False, unchanged=False, deployed=True) == "first sync"
    assert stepprobe.kind_of(continuation=True, unchanged=False, deployed=True) == "first sync"
    assert stepprobe.kind_of(continuation=True, unchanged=False, deployed=False) == "health follow-up"
    assert stepprobe.kind_of(continuation=False, unchanged=False, deployed=False) == "refresh"


def test_the_summary_is_per_kind_and_leaves_out_skipped_steps(tmp_path: Path) -> None:
    lines = [{"kind": "first sync", "cpu": 0.2, "wall": 0.5}, {"kind": "first sync", "cpu": 0.4, "wall": 1.5},
             {"kind": "no-op", "cpu": 0.01, "wall": 0.02},
             {"kind": "refresh", "cpu": 9.0, "wall": 9.0, "skipped": "already running"}]
    (tmp_path / "steps-1.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + '\n{"cut sh')
    steps = stepprobe.read_steps(tmp_path)
    assert len(steps) == 4  # the line cut short by a killed instance is left out
    summary = stepprobe.summary(steps)
    assert summary["all"] == {"steps": 3, "cpu_mean": 0.2033, "cpu_p99": 0.4, "wall_mean": 0.6733}
    assert summary["first sync"]["cpu_mean"] == 0.3 and summary["no-op"]["steps"] == 1
    assert "refresh" not in summary
    assert cpu_text(summary) == ("no-op: 1 steps, CPU 0.010/0.010s mean/p99, wall 0.020s; "
                                 "first sync: 2 steps, CPU 0.300/0.400s mean/p99, wall 1.000s")
    assert cpu_text({}) == "not measured"
