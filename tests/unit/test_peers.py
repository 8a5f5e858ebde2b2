"""The peer runners' pure parts, tools.sh's peer entries, and the bench's peer measurement loop."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from bench import peers as bench_peers

from tidecd_dev import netns
from tidecd_dev.peers import AppStatus, FluxStatus, PeerError, _port_of, ensure_built, install_config

ROOT = Path(__file__).resolve().parents[2]


def test_install_config_keeps_configmaps_and_secrets_in_the_namespace(tmp_path: Path) -> None:
    docs = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argocd-cm"}},
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "argocd-secret"}},
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "argocd-server"}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "x"}}]
    path = tmp_path / "install.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    out = install_config(path, "argo-x")
    assert [(d["kind"], d["metadata"]["name"], d["metadata"]["namespace"]) for d in out] == [
        ("ConfigMap", "argocd-cm", "argo-x"), ("Secret", "argocd-secret", "argo-x")]
    path.write_text(yaml.safe_dump_all(docs[1:]))
    with pytest.raises(PeerError, match="argocd-cm"):
        install_config(path, "argo-x")


def test_app_status_flattens_argo_cds_status() -> None:
    app = {"status": {"sync": {"status": "Synced", "revision": "abc"}, "health": {"status": "Healthy"},
                      "operationState": {"phase": "Succeeded"}, "reconciledAt": "2026-12-01T10:00:00Z",
                      "resources": [{}, {}], "conditions": [{"type": "ComparisonError", "message": "boom"}]}}
    assert AppStatus.of(app) == AppStatus("Synced", "Healthy", "abc", "Succeeded", "2026-12-01T10:00:00Z", 2,
                                          ("ComparisonError: boom",))
    assert AppStatus.of({}).sync == ""


def test_flux_status_is_ready_only_for_the_current_generation() -> None:
    obj: dict[str, Any] = {"metadata": {"generation": 2},
           "status": {"observedGeneration": 2, "lastAppliedRevision": "main@sha1:abc123",
                      "lastHandledReconcileAt": "17.5", "conditions": [{"type": "Ready", "status": "True"}]}}
    st = FluxStatus.of(obj)
    assert (st.ready, st.sha, st.handled) == (True, "abc123", "17.5")
    obj["metadata"]["generation"] = 3
    assert not FluxStatus.of(obj).ready
    repo = {"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "artifact": {"revision": "main@sha1:f"}}}
    assert (FluxStatus.of(repo).ready, FluxStatus.of(repo).sha) == (False, "f")


def test_peers_reach_only_loopback_urls() -> None:
    assert _port_of("https://127.0.0.1:6443") == 6443
    assert _port_of("http://localhost/repo.git") == 80
    with pytest.raises(PeerError, match="only 127.0.0.1"):
        _port_of("https://10.1.2.3:6443")


def test_ensure_built_refuses_unknown_names() -> None:
    with pytest.raises(ValueError, match="unknown peer"):
        ensure_built("kubectl")


def test_interfaces_are_read_from_this_namespace() -> None:
    names = netns.interfaces()
    assert "lo" in names
    assert netns.isolated() == (names == ["lo"])


def _tools(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    env.pop("TIDECD_TOOLS_LOCKED", None)
    return subprocess.run(["bash", str(ROOT / "scripts" / "tools.sh"), *args], env=env, capture_output=True,
                          text=True, check=False, timeout=60)


def test_tools_sh_knows_the_peers_pinned_and_opt_in(tmp_path: Path) -> None:
    proc = _tools(tmp_path, "--check", "peers")
    assert proc.returncode == 1
    for line in ("missing gitops-agent v3.6.1", "missing source-controller v1.9.6",
                 "missing kustomize-controller v1.9.6", "missing argocd v3.6.1"):
        assert line in proc.stderr
    script = (ROOT / "scripts" / "tools.sh").read_text()
    default = next(line for line in script.splitlines() if line.startswith("DEFAULT_TOOLS=")).split("=", 1)[1]
    assert set(default.strip('"').split()).isdisjoint(
        {"argocd", "gitops-agent", "source-controller", "kustomize-controller", "redis-server"})
    bogus = _tools(tmp_path, "--check", "not-a-tool")
    assert bogus.returncode != 0 and "unknown tool: not-a-tool" in bogus.stderr


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
