"""The bench's peer group: its measurement loop and its rows (no peer runs here)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from bench import peers as bench_peers

from tidecd_dev import peers


def test_measure_times_each_observation_and_the_tools_own_done() -> None:
    start = time.perf_counter()
    seen = {"a": 0.05, "b": 0.15}

    def at(seconds: float) -> bench_peers.Done:
        return lambda: time.perf_counter() - start >= seconds

    out = bench_peers.measure(lambda: at(0.25), {name: at(s) for name, s in seen.items()})
    assert 0.05 <= out["a"] < out["b"] < out["done"]
    assert out["done"] >= 0.25

    def blocking() -> None:
        time.sleep(0.1)

    assert bench_peers.measure(blocking, {})["done"] >= 0.1
    with pytest.raises(TimeoutError, match="b"):
        bench_peers.measure(lambda: None, {"b": lambda: False}, timeout=0.2)

    def failing() -> None:
        raise RuntimeError("trigger broke")

    with pytest.raises(RuntimeError, match="trigger broke"):
        bench_peers.measure(failing, {"never": lambda: False})


def test_a_peer_that_did_not_run_gets_rows_saying_why() -> None:
    results = bench_peers.Results()
    for measure in bench_peers.MEASURES:
        for tool in ("tidecd CLI", "tidecd warm function", "tidecd cold function", "Argo CD", "Flux"):
            for seconds in (1.0, 2.0, 3.0):
                results.add(tool, measure, seconds * (2 if tool == "Flux" else 1))
    results.broken["gitops-agent"] = "did not build: PeerError: proxy said 403"
    rows = bench_peers.rows(results)
    assert len(rows) == len(bench_peers.MEASURES) * 3 * 3
    agent = [r for r in rows if r.peer_name == "gitops-agent"]
    assert agent and all(r.peer is None and "proxy said 403" in r.notes for r in agent)
    flux = next(r for r in rows if r.peer_name == "Flux")
    assert (flux.tidecd, flux.peer, flux.ratio) == (2.0, 4.0, 0.5)


def test_the_matrix_shows_medians_and_says_why_a_peer_is_missing() -> None:
    results = bench_peers.Results()
    for seconds in (1.0, 3.0, 2.0):
        results.add("Flux", bench_peers.MEASURES[2], seconds)
    results.broken["Argo CD"] = "did not start: PeerError: redis exited"
    text = bench_peers.matrix(results)
    row = next(line for line in text.splitlines() if line.startswith(f"| {bench_peers.MEASURES[2]} |"))
    assert row.split(" | ")[5] == "2.00 s" and "not run" in row
    assert "Argo CD: did not start: PeerError: redis exited" in text


def test_the_matrix_records_how_each_peer_was_run(tmp_path: Path) -> None:
    results = bench_peers.Results()
    flux = bench_peers.FluxTool.__new__(bench_peers.FluxTool)
    flux.flux = peers.Flux("kubeconfig", tmp_path, concurrent=4, kustomize_concurrent=20)
    results.settings["Flux"] = flux.settings()
    results.settings["tidecd warm function"] = bench_peers.Tool().settings() or "its defaults"
    text = bench_peers.matrix(results)
    assert "Flux settings: source-controller --concurrent=4, kustomize-controller --concurrent=20" in text
    assert "tidecd warm function settings: its defaults" in text


def test_a_peer_that_failed_after_some_repetitions_keeps_its_numbers_and_says_so() -> None:
    results = bench_peers.Results()
    for tool in ("tidecd warm function", "Argo CD"):
        results.add(tool, bench_peers.MEASURES[0], 1.0 if tool == "Argo CD" else 0.5)
    results.broken["Argo CD"] = "failed in rep 2: TimeoutError: not reached"
    row = next(r for r in bench_peers.rows(results)
               if r.peer_name == "Argo CD" and r.name.startswith(bench_peers.MEASURES[0]) and "warm" in r.name)
    assert (row.tidecd, row.peer, row.ratio) == (0.5, 1.0, 0.5)
    assert "Argo CD failed in rep 2" in row.notes
