"""The real peer engines (Argo CD, Flux, gitops-agent) for e2e tests, from `tidecd_dev.peers`.

`argocd_built` builds Argo CD and redis with scripts/tools.sh when missing (cached; a missing build is
built, never skipped). `argocd` is one Argo CD per session (controller, repo-server, redis) against the
session control plane and git server, in the `argocd` namespace, with a long poll interval so only a
test's own refresh or sync triggers reconcile. Tests give their Applications names of their own (never a
tidecd app's name) and deploy into their own namespace.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tidecd_dev.devcluster import DevCluster
from tidecd_dev.gitserver import GitServer
from tidecd_dev.peers import ArgoCD, ensure_built


@pytest.fixture(scope="session")
def argocd_built() -> Path:
    ensure_built("redis-server")
    return ensure_built("argocd")


@pytest.fixture(scope="session")
def argocd(argocd_built: Path, cluster: DevCluster, git_server: GitServer,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArgoCD]:
    with ArgoCD(cluster.kubeconfig, tmp_path_factory.mktemp("argocd"), reach=[git_server.url]) as argo:
        yield argo
