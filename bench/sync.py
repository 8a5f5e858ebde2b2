"""Sync (issue 4): a 200-object app on the local control plane, tidecd vs `kubectl apply` vs kapp.

The app: a CRD with 19 custom resources, 30 Deployments, 30 Services and 120 ConfigMaps, all in wave 0.
Each tool, in each repetition, gets the same files in its own fresh namespace with its own CRD group
(CRDs are cluster-wide), so every cold sync starts from a cold cluster state. Per repetition and tool,
in turn: a cold sync, a no-op resync, and a one-object change (one ConfigMap value).

Fairness: tidecd's sync waits for the wave to become healthy (Deployments Available, with kwok) and
refreshes before and after; kubectl and kapp (`--wait=false`) return once applied. So each cold sync is
shown twice: "apply" compares tidecd's time without its health wait (timed inside the sync engine) to
the peer's apply alone; "until healthy" compares tidecd's whole call to the peer's apply followed by
`kubectl wait --for=condition=Available deployment --all`. kubectl cannot apply a CRD and its resources
in one call, so its cold apply is: the CRD, `kubectl wait` for Established, then the whole directory.
A probe first checks that tidecd can sync a CRD and its resources in one operation; if it cannot, every
tool gets its CRD pre-installed (untimed) and the probe's row says why. tidecd runs in this process (a
warm function instance); the peers are fresh CLI processes.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bench.fixtures import (
    Installation,
    Obj,
    Repo,
    application,
    configmap,
    crd,
    create_namespaces,
    file_layout,
    mixed_app,
    write_app,
    write_files,
)
from bench.harness import Bench, Row, median, say, sh, timed
from bench.probes import Measured, NotSynced, measured_reconcile
from tidecd.clients import tools
from tidecd.usecases.commands import SyncRequest

GROUP = "sync"
REPS = 3
CHANGED = "cm-000"


@dataclass
class Samples:
    """Per tool: seconds of each step, one entry per repetition."""

    apply: list[float] = field(default_factory=list)  # cold, without waiting for health
    healthy: list[float] = field(default_factory=list)  # cold, until Deployments are Available
    noop: list[float] = field(default_factory=list)
    noop_wait: list[float] = field(default_factory=list)  # tidecd: health wait inside the no-op sync
    change: list[float] = field(default_factory=list)
    writes: dict[str, list[str]] = field(default_factory=lambda: {"cold": [], "noop": [], "change": []})

    def summary(self) -> str:
        """The latest repetition, for progress lines."""
        return (f"apply {self.apply[-1]:.2f}s, until healthy {self.healthy[-1]:.2f}s, no-op {self.noop[-1]:.2f}s, "
                f"change {self.change[-1]:.2f}s")


def app_files(namespace: str, group: str, value: str = "v1") -> dict[str, list[Obj]]:
    objects = mixed_app(namespace, group=group, deployments=30, services=30, configmaps=120, widgets=19)
    if value != "v1":
        objects = [configmap(CHANGED, namespace, value) if o["metadata"]["name"] == CHANGED and
                   o["kind"] == "ConfigMap" else o for o in objects]
    files = file_layout(objects)
    if sum(len(docs) for docs in files.values()) != 200:
        raise AssertionError("the sync app must hold 200 objects")
    return files


class Peers:
    """kubectl and (where built) kapp against the bench's control plane."""

    def __init__(self, bench: Bench) -> None:
        cache = str(bench.dir("kubectl-cache"))
        self.kubectl = ["kubectl", "--kubeconfig", bench.kubeconfig, "--cache-dir", cache]
        self.kapp = _kapp()
        self.kubeconfig = bench.kubeconfig
        self.workdir = bench.dir("sync/peers")

    def wait_available(self, namespace: str) -> None:
        sh([*self.kubectl, "wait", "--for=condition=Available", "deployment", "--all", "-n", namespace,
             "--timeout=300s"])

    def kubectl_apply(self, directory: Path, *extra: str) -> None:
        sh([*self.kubectl, "apply", "--server-side", *extra, "-f", str(directory)])

    def install_crd(self, group: str) -> None:
        """Apply the Widget CRD of `group` and wait until it is served (untimed set-up)."""
        path = self.workdir / f"crd-{group}.yaml"
        path.write_text(yaml.safe_dump(crd(group)))
        sh([*self.kubectl, "apply", "--server-side", "-f", str(path)])
        sh([*self.kubectl, "wait", "--for=condition=Established", f"crd/widgets.{group}", "--timeout=60s"])

    def kubectl_cold(self, directory: Path, group: str) -> None:
        sh([*self.kubectl, "apply", "--server-side", "-f", str(directory / "00-crd.yaml")])
        sh([*self.kubectl, "wait", "--for=condition=Established", f"crd/widgets.{group}", "--timeout=60s"])
        self.kubectl_apply(directory)

    def kapp_deploy(self, app: str, namespace: str, directory: Path) -> None:
        assert self.kapp is not None
        sh([self.kapp, "deploy", "-a", app, "-n", namespace, "-f", str(directory), "-y", "--wait=false",
             "--kubeconfig", self.kubeconfig])


def _kapp() -> str | None:
    try:
        return tools.binary("kapp")
    except Exception:  # noqa: BLE001 - not built: the kapp rows say so
        return None


def run_tidecd(bench: Bench, inst: Installation, repo: Repo, rep: int, out: Samples, crd_first: Peers | None) -> None:
    name, namespace, group = f"sync-{rep}", f"bench-sync-tidecd-{rep}", f"r{rep}.tidecd.bench.io"
    add_app(inst, repo, name, namespace, group)
    if crd_first:
        crd_first.install_crd(group)

    def sync() -> Measured:
        return measured_reconcile(inst.runtime(), name, request=SyncRequest())

    cold = sync()
    out.apply.append(cold.without_wait)
    out.healthy.append(cold.seconds)
    noop = sync()
    out.noop.append(noop.seconds)
    out.noop_wait.append(noop.waited)
    for file, docs in app_files(namespace, group, value=f"v{rep + 2}").items():
        repo.write(f"{name}/{file}", docs)
    repo.commit_and_push(f"change {CHANGED} of {name}")
    change = sync()
    out.change.append(change.seconds)
    for key, m in (("cold", cold), ("noop", noop), ("change", change)):
        out.writes[key].append(f"{m.writes}={m.applies}a+{m.dry_runs}dr")
    say(f"sync: tidecd rep {rep}: cold {cold.seconds:.2f}s (health wait {cold.waited:.2f}s), "
        f"no-op {noop.seconds:.2f}s writes={noop.writes}, change {change.seconds:.2f}s writes={change.writes}")


def add_app(inst: Installation, repo: Repo, name: str, namespace: str, group: str) -> None:
    for file, docs in app_files(namespace, group).items():
        repo.write(f"{name}/{file}", docs)
    write_app(inst.config_dir, application(name, repo.url, name, namespace))
    repo.commit_and_push(f"add {name}")


def run_kubectl(bench: Bench, peers: Peers, rep: int, out: Samples, crd_first: bool,
                unvalidated: list[float]) -> None:
    namespace, group = f"bench-sync-kubectl-{rep}", f"r{rep}.kubectl.bench.io"
    directory = bench.dir(f"sync/kubectl-{rep}")
    write_files(directory, app_files(namespace, group))
    if crd_first:
        peers.install_crd(group)
        applied = timed(lambda: peers.kubectl_apply(directory))
    else:
        applied = timed(lambda: peers.kubectl_cold(directory, group))
    out.apply.append(applied)
    out.healthy.append(applied + timed(lambda: peers.wait_available(namespace)))
    out.noop.append(timed(lambda: peers.kubectl_apply(directory)))
    unvalidated.append(timed(lambda: peers.kubectl_apply(directory, "--validate=false")))
    _rewrite(directory, app_files(namespace, group, value=f"v{rep + 2}"))
    out.change.append(timed(lambda: peers.kubectl_apply(directory)))
    say(f"sync: kubectl rep {rep}: {out.summary()}")


def run_kapp(bench: Bench, peers: Peers, rep: int, out: Samples, crd_first: bool) -> None:
    name, namespace, group = f"sync-{rep}", f"bench-sync-kapp-{rep}", f"r{rep}.kapp.bench.io"
    directory = bench.dir(f"sync/kapp-{rep}")
    write_files(directory, app_files(namespace, group))
    if crd_first:
        peers.install_crd(group)
    applied = timed(lambda: peers.kapp_deploy(name, namespace, directory))
    out.apply.append(applied)
    out.healthy.append(applied + timed(lambda: peers.wait_available(namespace)))
    out.noop.append(timed(lambda: peers.kapp_deploy(name, namespace, directory)))
    _rewrite(directory, app_files(namespace, group, value=f"v{rep + 2}"))
    out.change.append(timed(lambda: peers.kapp_deploy(name, namespace, directory)))
    say(f"sync: kapp rep {rep}: {out.summary()}")


def probe_crd_in_one_sync(inst: Installation, repo: Repo) -> Row:
    """Can tidecd sync a CRD and its resources in one operation? If not, the timed runs pre-install CRDs."""
    name, namespace, group = "sync-crd-probe", "bench-sync-probe", "probe.tidecd.bench.io"
    add_app(inst, repo, name, namespace, group)
    try:
        m = measured_reconcile(inst.runtime(), name, request=SyncRequest())
    except NotSynced as exc:
        return Row(GROUP, "CRD + its resources in one sync", None,
                   notes=f"tidecd FAILED: {exc.why[:120]}. So below, every tool gets its CRD pre-installed, untimed")
    return Row(GROUP, "CRD + its resources in one sync", m.seconds, notes="tidecd OK: CRDs are part of the timed syncs")


def _rewrite(directory: Path, files: dict[str, list[Obj]]) -> None:
    shutil.rmtree(directory)
    write_files(directory, files)


def run(bench: Bench) -> list[Row]:
    peers = Peers(bench)
    inst = Installation(bench.dir("sync/installation"), bench.kubeconfig)
    repo = Repo(bench.git, "sync", bench.dir("sync/repo"))
    tools_run = ["tidecd", "kubectl"] + (["kapp"] if peers.kapp else [])
    create_namespaces(bench.kubeconfig, [f"bench-sync-{t}-{rep}" for t in tools_run for rep in range(REPS)])
    create_namespaces(bench.kubeconfig, ["bench-sync-probe"])
    probe = probe_crd_in_one_sync(inst, repo)
    crd_first = probe.tidecd is None
    samples = {t: Samples() for t in tools_run}
    unvalidated: list[float] = []  # kubectl no-op with --validate=false: its client-side validation's share
    for rep in range(REPS):  # tools take turns within each repetition, so noise hits all of them alike
        say(f"sync: repetition {rep + 1}/{REPS}")
        run_tidecd(bench, inst, repo, rep, samples["tidecd"], peers if crd_first else None)
        run_kubectl(bench, peers, rep, samples["kubectl"], crd_first, unvalidated)
        if peers.kapp:
            run_kapp(bench, peers, rep, samples["kapp"], crd_first)
    t = samples["tidecd"]
    extra = Row(GROUP, "no-op resync vs kubectl --validate=false", median(t.noop), median(unvalidated),
                "kubectl --validate=false", "kubectl's default validation costs it ~10s of client CPU per 200 objects")
    return [probe, *rows(samples), extra]


def rows(samples: dict[str, Samples]) -> list[Row]:
    t = samples["tidecd"]
    writes = {k: ", ".join(v) for k, v in t.writes.items()}
    out: list[Row] = []
    for peer in ("kubectl", "kapp"):
        p = samples.get(peer)
        if p is None:
            out.append(Row(GROUP, "kapp (all steps)", None, notes="kapp not built: bash scripts/tools.sh kapp"))
            continue
        label = "kubectl apply --server-side" if peer == "kubectl" else "kapp deploy --wait=false"
        out += [
            Row(GROUP, f"cold sync 200 obj, apply only vs {peer}", median(t.apply), median(p.apply), label,
                f"tidecd: reconcile(SyncRequest) minus its health wait; writes per rep (a=applies, dr=dry-runs): "
                f"{writes['cold']}"
                if peer == "kubectl" else "tidecd as above"),
            Row(GROUP, f"cold sync 200 obj, until healthy vs {peer}", median(t.healthy), median(p.healthy),
                f"{peer}+kubectl wait", "peer: apply, then kubectl wait Available (30 Deployments, kwok)"),
            Row(GROUP, f"no-op resync vs {peer}", median(t.noop), median(p.noop), peer,
                f"tidecd writes per rep (must be 0): {writes['noop']}; of tidecd's time, health wait (a GET per "
                f"object): {median(t.noop_wait):.2f}s" if peer == "kubectl" else ""),
            Row(GROUP, f"one-object change vs {peer}", median(t.change), median(p.change), peer,
                f"one ConfigMap value; tidecd writes per rep: {writes['change']}"
                if peer == "kubectl" else "peer re-applies the whole directory"),
        ]
    return out
