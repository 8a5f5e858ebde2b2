"""The peer runners' pure parts, tools.sh's peer entries, and the bench's peer measurement loop."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidecd_dev import netns
from tidecd_dev.peers import (
    AppStatus,
    FluxStatus,
    GitopsAgent,
    PeerError,
    _Follow,
    _port_of,
    ensure_built,
    install_config,
)

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
                      "operationState": {"phase": "Succeeded", "syncResult": {"revision": "old"}},
                      "reconciledAt": "2026-12-01T10:00:00Z",
                      "resources": [{}, {}], "conditions": [{"type": "ComparisonError", "message": "boom"}]}}
    assert AppStatus.of(app) == AppStatus("Synced", "Healthy", "abc", "Succeeded", "2026-12-01T10:00:00Z", 2,
                                          ("ComparisonError: boom",), operation_revision="old")
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


def test_follow_returns_only_complete_new_lines(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("old\n")
    follow = _Follow(log, from_end=True)
    assert follow.lines() == []
    with open(log, "a") as f:
        f.write("one\ntw")
    assert follow.lines() == ["one"]
    with open(log, "a") as f:
        f.write("o\n")
    assert follow.lines() == ["two"]
    assert _Follow(tmp_path / "missing.log").lines() == []


def test_gitops_agent_reads_its_tables_failures_and_last_phase(tmp_path: Path) -> None:
    agent = GitopsAgent("kubeconfig", tmp_path, "http://127.0.0.1:1/r.git")
    agent.stdout.write_text("RESOURCE  RESULT\nv1/ConfigMap/ns/a  created\n")
    (tmp_path / "gitops-agent.log").write_text(
        'I1201 sync_context.go:1293] "Updating operation state. phase:  -> Running, message: \'\'"\n'
        'I1201 sync_context.go:1293] "Updating operation state. phase: Running -> Failed, message: \'x\'"\n')
    assert (agent.syncs(), agent.failures(), agent.last_phase()) == (1, 0, "Failed")
    with open(tmp_path / "gitops-agent.log", "a") as f:
        f.write('E1201 main.go:197] "Failed to synchronize cluster state" err="boom"\n'
                'I1201 sync_context.go:1293] "Updating operation state. phase: Running -> Succeeded, m"\n')
    with open(agent.stdout, "a") as f:
        f.write("RESOURCE  RESULT\n")
    assert (agent.syncs(), agent.failures(), agent.last_phase()) == (2, 1, "Succeeded")


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


def test_resident_and_peak_sets_are_read_from_proc_and_zero_for_a_gone_process() -> None:
    """The scale bench's idle memory (VmRSS) and peak (VmHWM): this process holds some, a gone one none."""
    from tidecd_dev.peers import peak_rss, rss

    now, peak = rss(os.getpid()), peak_rss(os.getpid())
    assert 0 < now <= peak
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert rss(gone.pid) == peak_rss(gone.pid) == 0
