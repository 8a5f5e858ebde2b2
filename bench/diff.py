"""Diff (issue 3): refreshing a synced 500-object app, cold vs warm comparison cache, vs `kubectl diff`.

A refresh (reconcile with automate=False) compares every desired object with the live one through a
server-side dry-run, unless the app's comparison cache says that neither the desired object nor the live
resourceVersion changed since the last comparison. Cold: the cache is emptied first (500 dry-runs);
warm: nothing changed since the last refresh (no dry-run at all). The peer, `kubectl diff --server-side`
on the same files, dry-runs every object every time.
"""

from __future__ import annotations

from bench.fixtures import Installation, Repo, application, create_namespaces, file_layout, mixed_app, write_app
from bench.harness import Bench, Row, median, say, sh, spread, timed
from bench.probes import Measured, measured_reconcile
from tidecd.state import app as app_state
from tidecd.usecases.commands import SyncRequest

GROUP = "diff"
REPS = 3
APP, NAMESPACE = "diff", "bench-diff"


def run(bench: Bench) -> list[Row]:
    inst = Installation(bench.dir("diff/installation"), bench.kubeconfig)
    repo = Repo(bench.git, "diff", bench.dir("diff/repo"))
    create_namespaces(bench.kubeconfig, [NAMESPACE])
    for name, docs in file_layout(mixed_app(NAMESPACE, deployments=50, services=100, configmaps=350)).items():
        repo.write(f"app/{name}", docs)
    write_app(inst.config_dir, application(APP, repo.url, "app", NAMESPACE))
    repo.commit_and_push("500 objects")
    say("diff: syncing the 500-object app (setup, not timed)")
    synced = measured_reconcile(inst.runtime(), APP, request=SyncRequest())
    say(f"diff: setup sync took {synced.seconds:.1f}s")
    kubectl = ["kubectl", "--kubeconfig", bench.kubeconfig, "--cache-dir", str(bench.dir("kubectl-cache")),
               "diff", "--server-side", "-f", str(repo.workdir / "app")]
    cold: list[Measured] = []
    warm: list[Measured] = []
    peer: list[float] = []
    diff_lines = 0
    for rep in range(REPS):
        say(f"diff: repetition {rep + 1}/{REPS}")
        _forget_comparisons(inst)
        cold.append(measured_reconcile(inst.runtime(), APP, automate=False))
        warm.append(measured_reconcile(inst.runtime(), APP, automate=False))

        def kubectl_diff() -> None:
            nonlocal diff_lines
            diff_lines = len(sh(kubectl, ok=(0, 1)).stdout.splitlines())  # exit 1: differences found

        peer.append(timed(kubectl_diff))
    cold_s, warm_s = [m.seconds for m in cold], [m.seconds for m in warm]
    dry = ", ".join(str(m.dry_runs) for m in cold)
    return [
        Row(GROUP, "refresh 500 obj, cold comparison cache", median(cold_s), median(peer),
            "kubectl diff --server-side", f"dry-runs per rep: {dry}; kubectl diff printed {diff_lines} lines"),
        Row(GROUP, "refresh 500 obj, warm comparison cache", median(warm_s), median(peer),
            "kubectl diff --server-side",
            f"dry-runs per rep: {', '.join(str(m.dry_runs) for m in warm)}; writes: "
            f"{', '.join(str(m.writes) for m in warm)}; {spread(warm_s)}"),
        Row(GROUP, "refresh 500 obj, warm vs cold cache", median(warm_s), median(cold_s), "cold cache",
            "same run, same app: what the cache saves"),
    ]


def _forget_comparisons(inst: Installation) -> None:
    """Empty the app's comparison cache, as for an app never compared before (or after a cache loss)."""
    state, generation = app_state.load(inst.store, APP)
    state.memo.comparisons = {}
    app_state.save(inst.store, state, if_generation_match=generation)
