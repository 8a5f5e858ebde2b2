"""bench/cpuuse.py: the machine's CPU in a window, by component (issue 30's scale runs)."""

from __future__ import annotations

import os
import subprocess
import sys

from bench import cpuuse


def test_a_reaped_childs_cpu_is_its_parents_and_within_the_machines() -> None:
    before = cpuuse.snapshot()
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(6_000_000))"], check=True)
    use = cpuuse.between(before, cpuuse.snapshot())
    mine = next(seconds for name, seconds in use.by_component.items() if name.startswith("the bench process"))
    assert 0.2 <= mine <= use.busy + 0.05, use
    # /proc/stat counts in ticks, and the two snapshots' clock readings are not the counters' own moments:
    # a tick per core at each end is within the measure
    assert 0 < use.busy <= use.wall * use.cpus + 2 * use.cpus / cpuuse.TICKS, use
    assert "CPU-s busy" in use.text()


def test_processes_are_named_by_what_they_are() -> None:
    assert cpuuse.component(1, "kube-apiserver", ["/x/kube-apiserver"], b"") == "kube-apiserver"
    assert cpuuse.component(1, "python", [sys.executable, "-m", "functions_framework", "--target", "reconcile"],
                            b"") == "tidecd reconcile instances"
    assert cpuuse.component(1, "argocd", ["/c/argocd", "--redis", "x"],
                            b"HOME=/\0ARGOCD_BINARY_NAME=argocd-repo-server\0") == "Argo CD repo-server"
    assert cpuuse.component(1, "bash", ["bash"], b"") == ""
    assert cpuuse.component(os.getpid(), "python", [], b"").startswith("the bench process")
