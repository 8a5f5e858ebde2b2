"""The scale scenario's peer side (bench/scale_peers.py, tidecd_dev.scale_peers): its manifests, when each
peer's object counts as done, and its rows (no peer runs here; `make bench-scale` runs them)."""

from __future__ import annotations

import math

import pytest
from bench import scale as bench_scale
from bench import scale_peers as bench_sp

from tidecd_dev import scale
from tidecd_dev import scale_peers as sp

SCENARIO = scale.Scenario(apps=6, repos=3)
URLS = {repo: f"http://127.0.0.1:9/{repo}.git" for repo in SCENARIO.repo_names()}


def kustomization(name: str, *, ready: str = "True", generation: int = 2, observed: int = 2,
                  applied: str = "main@sha1:abc", message: str = "Applied revision: main@sha1:abc") -> sp.Obj:
    status: sp.Obj = {"observedGeneration": observed,
                      "conditions": [{"type": "Reconciling", "status": "False"},
                                     {"type": "Ready", "status": ready, "message": message}]}
    if applied:
        status["lastAppliedRevision"] = applied
    return {"kind": "Kustomization", "metadata": {"name": name, "generation": generation}, "status": status}


def application(name: str, sync: str = "Synced", health: str = "Healthy", phase: str = "Succeeded",
                revision: str = "abc") -> sp.Obj:
    status: sp.Obj = {"sync": {"status": sync, "revision": revision}, "health": {"status": health}}
    if phase:
        status["operationState"] = {"phase": phase}
    return {"kind": "Application", "metadata": {"name": name}, "status": status}


def test_flux_gets_a_source_per_repo_and_a_waiting_kustomization_per_app_in_its_own_namespaces() -> None:
    sources, kustomizations = sp.flux_objects(SCENARIO, URLS, "flux-scale")
    assert [s["metadata"]["name"] for s in sources] == SCENARIO.repo_names()
    assert {s["spec"]["url"] for s in sources} == set(URLS.values())
    assert len(kustomizations) == SCENARIO.apps
    k = kustomizations[4]  # app-0004 lives in repo 4 % 3 = r01
    assert k["metadata"] == {"name": "flux-app-0004", "namespace": "flux-scale"}
    assert k["spec"]["sourceRef"] == {"kind": "GitRepository", "name": "scale-r01"}
    assert k["spec"]["path"] == "./apps/app-0004" and k["spec"]["targetNamespace"] == "flux-scale-r01"
    assert k["spec"]["wait"] is True and k["spec"]["prune"] is True and k["spec"]["interval"] == "1h"
    assert sp.collection_path(k) == "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/flux-scale/kustomizations"
    assert sp.collection_path(sources[0]).endswith("/namespaces/flux-scale/gitrepositories")


def test_argo_cd_gets_an_automated_application_per_app_with_its_own_names() -> None:
    apps = sp.argo_applications(SCENARIO, URLS, "argocd-scale")
    names = [a["metadata"]["name"] for a in apps]
    assert names == [f"argo-{app}" for app in SCENARIO.app_names()]
    spec = apps[2]["spec"]
    assert spec["source"] == {"repoURL": URLS["scale-r02"], "targetRevision": "main", "path": "apps/app-0002"}
    assert spec["destination"]["namespace"] == "argo-scale-r02"
    assert spec["syncPolicy"] == {"automated": {"prune": True}}
    assert sp.collection_path(apps[0]) == "/apis/argoproj.io/v1alpha1/namespaces/argocd-scale/applications"
    with pytest.raises(ValueError, match="ConfigMap"):
        sp.collection_path({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"namespace": "x"}})


def test_a_kustomization_is_done_only_ready_at_its_generation_with_a_revision_applied() -> None:
    assert sp.kustomization_done(kustomization("a"))
    assert not sp.kustomization_done(kustomization("a", ready="False", message="health check failed"))
    assert not sp.kustomization_done(kustomization("a", ready="Unknown"))
    assert not sp.kustomization_done(kustomization("a", observed=1))  # Ready of the previous generation
    assert not sp.kustomization_done(kustomization("a", applied=""))
    assert not sp.kustomization_done({"kind": "Kustomization", "metadata": {"name": "new", "generation": 1}})
    assert "health check failed" in sp.kustomization_state(kustomization("a", ready="False",
                                                                         message="health check failed"))


def test_an_application_is_done_synced_and_healthy_after_a_succeeded_sync() -> None:
    assert sp.application_done(application("a"))
    assert not sp.application_done(application("a", health="Progressing"))  # Ingress without an address yet
    assert not sp.application_done(application("a", sync="OutOfSync"))
    assert not sp.application_done(application("a", phase="Running"))
    assert not sp.application_done(application("a", phase=""))  # compared, never synced
    assert not sp.application_done(application("a", revision=""))
    assert not sp.application_done({"kind": "Application", "metadata": {"name": "new"}})
    assert sp.application_state(application("a", health="Progressing")).startswith("Synced/Progressing/Succeeded")


def test_readiness_keeps_the_first_time_each_tracked_object_was_done() -> None:
    ready = sp.Readiness(frozenset({"a", "b"}), sp.application_done, sp.application_state)
    ready.observe(application("a", health="Progressing"), 10.0)
    ready.observe(application("other"), 10.5)  # not tracked (the warm-up app)
    assert ready.done == {} and not ready.complete
    ready.observe(application("a"), 11.0)
    ready.observe(application("a"), 12.0)  # later events do not move it
    assert ready.done == {"a": 11.0}
    assert ready.stragglers() == ["b: never seen"]
    ready.observe(application("b", sync="OutOfSync", phase="Running"), 12.5)
    assert ready.stragglers()[0].startswith("b: OutOfSync/Healthy/Running")
    assert not ready.wait(0.05, every=0.01)
    ready.observe(application("b"), 13.0)
    seen: list[int] = []
    assert ready.complete and ready.wait(1.0, progress=seen.append) and seen == [2]

    def died() -> None:
        raise RuntimeError("controller exited")

    half = sp.Readiness(frozenset({"x"}), sp.application_done)
    with pytest.raises(RuntimeError, match="exited"):
        half.wait(5.0, alive=died)


def tidecd_measured() -> bench_scale.Measured:
    m = bench_scale.Measured(apps=6, repos=3, workers=4, total=60.0, per_app=[10.0, 20.0, 30.0, 40.0, 50.0, 60.0])
    m.peak_rss = [100 * 2**20, 110 * 2**20]
    m.api = scale.ApiCalls(total=600, on_app_kinds=120, writes_on_app_kinds=24, dry_runs=24, by_verb={"APPLY": 48})
    m.git_per_repo = {"ls-remote": 2, "upload-pack": 1}
    m.store_bytes = 3 * 2**20
    return m


def test_rows_give_tidecd_over_each_peer_and_say_why_a_peer_has_no_numbers() -> None:
    flux = bench_sp.PeerMeasured("Flux", 6, 3, total=120.0, created=2.0, per_app=[40.0, 60.0, 80.0, 90.0, 100.0,
                                                                                   120.0],
                                 rss={"source-controller": 80 * 2**20, "kustomize-controller": 150 * 2**20},
                                 idle_rss={"source-controller": 70 * 2**20, "kustomize-controller": 140 * 2**20},
                                 api=scale.ApiCalls(1200, 240, 24, 0, {"APPLY": 24}),
                                 git_per_repo={"ls-remote": 1, "upload-pack": 1}, load="3.0/2.0/1.0",
                                 per_app_own=[30.0, 35.0, 40.0])
    argo = bench_sp.PeerMeasured("Argo CD", 6, 3, broken="did not build: PeerError: go failed")
    rows = bench_sp.rows(tidecd_measured(), [flux, argo])
    total = next(r for r in rows if r.name.startswith("6 apps") and r.peer_name == "Flux")
    assert total.tidecd == 60.0 and total.peer == 120.0 and total.ratio == 0.5
    assert "load 3.0/2.0/1.0" in total.notes and "--concurrent=20" in total.notes
    p50 = next(r for r in rows if r.name == "per app p50, vs Flux")
    assert "own creation: p50 35.0s, p99 40.0s" in p50.notes
    p99 = next(r for r in rows if r.name == "per app p99, vs Flux")
    assert (p99.tidecd, p99.peer) == (60.0, 120.0)
    assert "kustomize-controller: 150 MiB" in next(r.notes for r in rows if r.name == "peak RSS, vs Flux")
    idle = next(r.notes for r in rows if r.name == "idle memory held for 6 apps, vs Flux")
    assert "kustomize-controller: 140 MiB (sum 210 MiB" in idle
    assert "tidecd 0 MiB (no process between events; the store holds 3.0 MiB for its 6 apps)" in idle
    held = next(r.notes for r in bench_scale.rows(tidecd_measured()) if r.name == "memory held between events")
    assert held.startswith("0 MiB resident") and "3.0 MiB for 6 apps" in held
    api = next(r.notes for r in rows if r.name == "API calls per app, vs Flux")
    assert "Flux 40.0 on the app's 4 kinds" in api and "tidecd 20.0 on the app's 4 kinds" in api
    broken = [r for r in rows if r.peer_name == "Argo CD"]
    assert len(broken) == 1 and broken[0].peer is None and "did not build" in broken[0].notes


def test_a_peer_that_timed_out_has_no_total_and_says_how_far_it_got() -> None:
    late = bench_sp.PeerMeasured("Argo CD", 6, 3, per_app=[5.0, 6.0],
                                 missed=["2/6 done after 900s", "argo-app-0002: OutOfSync/Missing/Running"])
    (total, *_rest) = bench_sp.rows(None, [late])
    assert total.peer is None and total.ratio is None
    assert "NOT ALL DONE: 2/6 done after 900s" in total.notes
    assert late.to_json()["p50"] == scale.percentile([5.0, 6.0], 50) and math.isnan(late.to_json()["total"])


def test_argo_phases_split_the_wait_for_a_sync_from_the_sync_itself() -> None:
    def op(started: str, finished: str | None) -> sp.Obj:
        state: sp.Obj = {"phase": "Succeeded", "startedAt": started}
        if finished:
            state["finishedAt"] = finished
        return {"metadata": {"name": "a"}, "status": {"operationState": state}}

    clock = sp._unix("2026-12-01T18:00:00Z")
    assert clock is not None and sp._unix("not a time") is None
    phases = sp.argo_phases([op("2026-12-01T18:00:10Z", "2026-12-01T18:00:12Z"),
                             op("2026-12-01T18:00:30Z", "2026-12-01T18:00:36Z"),
                             op("2026-12-01T18:00:20Z", None), {"metadata": {"name": "never"}}], clock)
    assert phases["until sync started p50"] == 20.0 and phases["until sync started p99"] == 30.0
    assert phases["sync operation p50"] in (2.0, 6.0) and phases["sync operation p99"] == 6.0
    assert sp.argo_phases([], clock) == {}


def test_flux_phases_come_from_the_kustomizations_own_history() -> None:
    def ks(first: str | None, took: str, total: int = 1) -> sp.Obj:
        entry: sp.Obj = {"lastReconciledDuration": took, "totalReconciliations": total}
        if first:
            entry["firstReconciled"] = first
        return {"metadata": {"name": "a"}, "status": {"history": [entry]}}

    clock = sp._unix("2026-12-01T18:00:00Z")
    assert clock is not None
    phases = sp.flux_phases([ks("2026-12-01T18:00:12Z", "2s"), ks("2026-12-01T18:00:36Z", "6.5s"),
                             ks("2026-12-01T18:00:40Z", "850ms", total=3), ks(None, "1s"),
                             {"metadata": {"name": "never"}}], clock)
    assert phases == {"until sync started p50": scale.percentile([10.0, 29.5], 50), "until sync started p99": 29.5,
                      "sync operation p50": scale.percentile([2.0, 6.5], 50), "sync operation p99": 6.5}
    assert sp._duration("1h2m3.5s") == 3723.5 and sp._duration("850ms") == 0.85 and sp._duration("soon") is None
    assert sp.flux_phases([], clock) == {}


def test_tidecd_phases_split_the_wait_for_a_first_step_from_the_rest() -> None:
    from bench.scale import phases

    from tidecd_dev.frontend import Invocation

    def call(app: str, at: float, status: int = 204) -> Invocation:
        return Invocation(app, at, 0.0, 0.1, status, 0, False)

    calls = [call("a", 5.0), call("a", 9.0), call("b", 3.0, status=429), call("b", 7.0)]
    found = phases(calls, {"a": 1012.0, "b": 1010.0}, 1000.0, 1000.0)
    assert found == {"until sync started p50": scale.percentile([5.0, 7.0], 50), "until sync started p99": 7.0,
                     "sync operation p50": scale.percentile([7.0, 3.0], 50), "sync operation p99": 7.0}
