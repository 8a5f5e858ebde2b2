"""The real Argo CD v3.6.1 runner (`tidecd_dev.peers.ArgoCD`): it syncs, prunes and stays off open interfaces.

Part of the Argo CD suite (issue 18): the `argocd` fixture builds Argo CD with scripts/tools.sh when it is
missing (cached), so this test never skips.
"""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

import psutil
import pytest
import yaml

from tests.support.gitserver import GitRepo
from tidecd.base.model import ResourceKey
from tidecd.clients.cluster import KubeCluster
from tidecd_dev.peers import ArgoCD

pytestmark = pytest.mark.e2e


def _objects(namespace: str, value: str, *, with_deployment: bool) -> str:
    docs: list[dict[str, object]] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argo-config", "namespace": namespace},
         "data": {"value": value}}]
    if with_deployment:
        docs.append({"apiVersion": "apps/v1", "kind": "Deployment",
                     "metadata": {"name": "argo-web", "namespace": namespace},
                     "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "argo-web"}},
                              "template": {"metadata": {"labels": {"app": "argo-web"}},
                                           "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}})
    return yaml.safe_dump_all(docs)


def test_argocd_syncs_updates_and_prunes_on_refresh(argocd: ArgoCD, git_repo: GitRepo, namespace: str,
                                                    kubeconfig: str) -> None:
    kube = KubeCluster.from_kubeconfig(kubeconfig)
    app = f"argo-smoke-{uuid.uuid4().hex[:6]}"  # never a tidecd app's name
    git_repo.write("apps/objects.yaml", _objects(namespace, "v1", with_deployment=True))
    first = git_repo.commit("v1")
    git_repo.push()

    argocd.apply_application(app, git_repo.url, "apps", namespace)
    status = argocd.wait_status(app, revision=first)
    assert (status.sync, status.health, status.resources) == ("Synced", "Healthy", 2)
    cm = kube.get(ResourceKey("", "ConfigMap", namespace, "argo-config"))
    assert cm is not None and cm["data"] == {"value": "v1"}
    deployment = kube.get(ResourceKey("apps", "Deployment", namespace, "argo-web"))
    assert deployment is not None
    assert deployment["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"].startswith(f"{app}:")

    git_repo.write("apps/objects.yaml", _objects(namespace, "v2", with_deployment=False))
    second = git_repo.commit("v2, Deployment removed")
    git_repo.push()
    argocd.refresh(app)  # the natural trigger; automated sync with prune does the rest
    status = argocd.wait_status(app, revision=second)
    assert status.resources == 1
    cm = kube.get(ResourceKey("", "ConfigMap", namespace, "argo-config"))
    assert cm is not None and cm["data"] == {"value": "v2"}
    assert kube.get(ResourceKey("apps", "Deployment", namespace, "argo-web")) is None

    argocd.delete_application(app, keep_resources=True)
    assert kube.get(ResourceKey("", "ConfigMap", namespace, "argo-config")) is not None


def test_argocd_listeners_are_not_on_the_hosts_interfaces(argocd: ArgoCD) -> None:
    """The controller's metrics listener is hard-wired to 0.0.0.0: it must live in a loopback-only namespace."""
    controller = next(p for p in argocd.procs.procs if p.name == "application-controller")
    net_dev = Path(f"/proc/{controller.proc.pid}/net/dev").read_text().splitlines()[2:]
    assert [line.split(":", 1)[0].strip() for line in net_dev] == ["lo"]
    metrics_port = argocd.metrics_port
    assert argocd.procs.exposed[metrics_port] != metrics_port, "relayed out on another port"
    with socket.socket() as sock:  # the controller's own port is not open in this (the host's) namespace
        assert sock.connect_ex(("127.0.0.1", metrics_port)) != 0
    own = {c.laddr.port for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN
           and c.laddr.ip not in ("127.0.0.1", "::1")}
    assert metrics_port not in own
