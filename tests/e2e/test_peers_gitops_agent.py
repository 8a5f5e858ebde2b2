"""The real gitops-agent v3.6.1 runner (`tidecd_dev.peers.GitopsAgent`), as `make bench-peers` drives it.

It syncs a CRD with a custom resource and a ConfigMap (a first sync that ends Failed is sent again: the
agent's first sync of a CRD can fail its custom resources), updates and prunes after `git pull` + POST, and
its API, hard-wired to 0.0.0.0, lives in a loopback-only network namespace. The agent is built with
scripts/tools.sh when missing (cached), never skipped.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.gitserver import GitRepo
from tidecd.base.model import ResourceKey
from tidecd.clients.cluster import KubeCluster
from tidecd_dev.gitserver import GitServer
from tidecd_dev.peers import GitopsAgent, ensure_built

pytestmark = pytest.mark.e2e


def _objects(namespace: str, group: str, value: str, *, with_widget: bool) -> str:
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    docs: list[dict[str, Any]] = [
        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
         "metadata": {"name": f"widgets.{group}"},
         "spec": {"group": group, "scope": "Namespaced",
                  "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                  "versions": [{"name": "v1", "served": True, "storage": True,
                                "schema": {"openAPIV3Schema": schema}}]}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "agent-config", "namespace": namespace},
         "data": {"value": value}}]
    if with_widget:
        docs.append({"apiVersion": f"{group}/v1", "kind": "Widget",
                     "metadata": {"name": "agent-widget", "namespace": namespace}, "spec": {"size": 1}})
    return yaml.safe_dump_all(docs)


@pytest.fixture()
def group(kubeconfig: str) -> Iterator[str]:
    """A CRD group of this test's own (CRDs are cluster-wide), its CRD deleted afterwards."""
    name = f"g{uuid.uuid4().hex[:8]}.agent.tidecd.io"
    yield name
    KubeCluster.from_kubeconfig(kubeconfig).delete(
        ResourceKey("apiextensions.k8s.io", "CustomResourceDefinition", "", f"widgets.{name}"))


def test_gitops_agent_syncs_a_crd_and_its_resources_updates_and_prunes(
        kubeconfig: str, git_server: GitServer, git_repo: GitRepo, namespace: str, group: str,
        tmp_path: Path) -> None:
    ensure_built("gitops-agent")
    kube = KubeCluster.from_kubeconfig(kubeconfig)
    git_repo.write("app/.keep", "")  # the agent starts on an empty app/ (as the bench starts it)
    git_repo.commit("empty")
    git_repo.push()
    with GitopsAgent(kubeconfig, tmp_path / "agent", git_repo.url, path="app", reach=[git_server.url],
                     default_namespace=namespace) as agent:
        agent_proc = next(p for p in agent.procs.procs if p.name == "gitops-agent")
        net_dev = Path(f"/proc/{agent_proc.proc.pid}/net/dev").read_text().splitlines()[2:]
        assert [line.split(":", 1)[0].strip() for line in net_dev] == ["lo"]

        git_repo.write("app/objects.yaml", _objects(namespace, group, "v1", with_widget=True))
        git_repo.commit("v1")
        git_repo.push()
        first = agent.pull()
        assert first == git_repo.git("rev-parse", "HEAD")
        took = agent.sync(timeout=180, attempts=3)
        assert took in (1, 2) and agent.last_phase() == "Succeeded"  # 2 when the first ended Failed
        assert kube.get(ResourceKey(group, "Widget", namespace, "agent-widget")) is not None
        cm = kube.get(ResourceKey("", "ConfigMap", namespace, "agent-config"))
        assert cm is not None and cm["data"] == {"value": "v1"}

        git_repo.write("app/objects.yaml", _objects(namespace, group, "v2", with_widget=False))
        git_repo.commit("v2, the Widget removed")
        git_repo.push()
        agent.pull()
        assert agent.sync(timeout=180, attempts=1) == 1
        cm = kube.get(ResourceKey("", "ConfigMap", namespace, "agent-config"))
        assert cm is not None and cm["data"] == {"value": "v2"}
        pruned = kube.get(ResourceKey(group, "Widget", namespace, "agent-widget"))  # deleted, or being deleted
        assert pruned is None or pruned["metadata"].get("deletionTimestamp"), pruned  # (foreground: GC ends it)
    assert all(p.proc.poll() is not None for p in [agent_proc])
