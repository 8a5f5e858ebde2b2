"""The peer runners' pure parts, tools.sh's peer entries, and the bench's peer measurement loop."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

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
