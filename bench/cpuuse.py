"""CPU used on this machine during a timed window, whole and by component (issue 30: is a scale run bound by
the two cores, and by whose work?).

The machine's busy time comes from /proc/stat, so it holds everything, short-lived processes included (the
hypervisor's steal apart: on a shared virtual machine the two cores are not all ours). The
components come from each process's /proc/PID/stat: its own CPU time plus that of the children it reaped
(git's server-side processes are the bench's children), named by what the process is (the control plane's
binaries, a tidecd function instance by its target, each peer's controllers). A process that exits inside
the window unreaped is in the machine's figure only; the rest is shown as "unattributed".
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from tidecd_dev.processes import proc_stat

TICKS = os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")

# comm (/proc/PID/comm, at most 15 letters) → component
_BY_COMM = {
    "kube-apiserver": "kube-apiserver", "etcd": "etcd", "kube-controller": "kube-controller-manager",
    "kube-scheduler": "kube-scheduler", "kwok": "kwok", "fake-gcs-server": "fake-gcs-server",
    "source-controll": "Flux source-controller", "kustomize-contr": "Flux kustomize-controller",
    "redis-server": "Argo CD redis", "git": "git (server side)", "git-upload-pack": "git (server side)",
    "git-http-backen": "git (server side)", "helm": "helm", "kustomize": "kustomize", "java": "Pub/Sub emulator",
}


@dataclass(frozen=True)
class Snapshot:
    """The machine's busy CPU seconds and each process's (own + reaped children's), at one moment."""

    at: float  # time.monotonic()
    busy: float
    stolen: float  # the hypervisor's steal: time these cores wanted to run and were not let
    processes: dict[int, tuple[str, float]]  # pid → (component, CPU seconds)


@dataclass(frozen=True)
class CpuUse:
    """What a window used: wall seconds, the machine's busy CPU seconds, and the share of it per component."""

    wall: float
    cpus: int
    busy: float
    stolen: float
    by_component: dict[str, float]

    @property
    def utilisation(self) -> float:
        """Busy time over what the cores gave in the window, less what the hypervisor took (1.0: saturated)."""
        capacity = self.wall * self.cpus - self.stolen
        return self.busy / capacity if capacity > 0 else 0.0

    def text(self, top: int = 9) -> str:
        ranked = list(self.by_component.items())[:top]  # largest first (`between`)
        shown = ", ".join(f"{name} {seconds:.0f}" for name, seconds in ranked if seconds >= 0.5)
        return (f"{self.busy:.0f} CPU-s busy in {self.wall:.0f} s on {self.cpus} cores, {self.stolen:.0f} more "
                f"stolen by the hypervisor ({self.utilisation:.0%} of what was left); CPU-s by component: {shown}")

    def to_json(self) -> dict[str, object]:
        return {"wall": round(self.wall, 1), "cpus": self.cpus, "busy": round(self.busy, 1),
                "stolen": round(self.stolen, 1),
                "utilisation": round(self.utilisation, 3),
                "by_component": {k: round(v, 1) for k, v in self.by_component.items()}}


def machine_busy() -> tuple[float, float]:
    """CPU seconds of all cores since boot, busy (user, nice, system, irq, softirq; guest is in user) and
    stolen by the hypervisor (a virtual machine's cores are not all its own), from /proc/stat's first line."""
    fields = [int(x) for x in (PROC / "stat").read_text().splitlines()[0].split()[1:]] + [0] * 8
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq) / TICKS, steal / TICKS


def component(pid: int, comm: str, argv: list[str], environ: bytes) -> str:
    """What a process is, in a word or two; "" for one that is not of a run's making."""
    if pid == os.getpid():
        return "the bench process (git server, push bridge, front end, ingress stand-in, watchers)"
    if comm in _BY_COMM:
        return _BY_COMM[comm]
    if "functions_framework" in argv and "--target" in argv:
        return f"tidecd {argv[argv.index('--target') + 1]} instances"
    if _is_argocd(argv):
        for item in environ.split(b"\0"):
            if item.startswith(b"ARGOCD_BINARY_NAME="):
                return "Argo CD " + item.split(b"=", 1)[1].decode(errors="replace").removeprefix("argocd-")
        return "Argo CD"
    if "gitops-agent" in comm:
        return "gitops-agent"
    return ""


def _is_argocd(argv: list[str]) -> bool:
    """Every Argo CD component is the one `argocd` binary, told apart by ARGOCD_BINARY_NAME."""
    return bool(argv) and Path(argv[0]).name == "argocd"


def snapshot() -> Snapshot:
    processes: dict[int, tuple[str, float]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            comm, fields = proc_stat(entry)
            argv = [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
            environ = (entry / "environ").read_bytes() if _is_argocd(argv) else b""
        except OSError:  # gone meanwhile, or not ours to read
            continue
        ticks = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        name = component(pid, comm, argv, environ) or "other processes"
        processes[pid] = (name, ticks / TICKS)
    return Snapshot(time.monotonic(), *machine_busy(), processes)


def between(before: Snapshot, after: Snapshot) -> CpuUse:
    """The window from `before` to `after`. A process new in `after` counts whole (it started in it)."""
    by_component: dict[str, float] = {}
    for pid, (name, seconds) in after.processes.items():
        earlier = before.processes.get(pid)
        used = seconds - (earlier[1] if earlier and earlier[0] == name else 0.0)
        if used > 0:
            by_component[name] = by_component.get(name, 0.0) + used
    busy = after.busy - before.busy
    by_component["unattributed (exited unreaped, kernel)"] = max(0.0, busy - sum(by_component.values()))
    ranked = dict(sorted(by_component.items(), key=lambda kv: -kv[1]))  # largest first
    return CpuUse(after.at - before.at, os.cpu_count() or 1, busy, after.stolen - before.stolen, ranked)
