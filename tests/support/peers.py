"""The real peer engines (Argo CD, Flux, gitops-agent) for e2e tests, from `tidecd_dev.peers`.

`argocd_built` builds Argo CD and redis with scripts/tools.sh when missing (cached; a missing build is
built, never skipped). `argocd_session` is one Argo CD per session (controller, repo-server, redis) against
the session control plane, git server and helm repository (`session_helm_repo`), in the `argocd`
namespace, with a long poll interval so only a test's own refresh or sync triggers reconcile. Tests give
their Applications names of their own (never a tidecd app's name) and deploy into their own namespace.

`argocd` is that Argo CD for one test: at the test's end, before its namespace goes, the Applications the
test left are deleted while Argo CD still runs, their finalizers dropped first (so nothing cascades into a
namespace being deleted, and nothing stays held by a finalizer no one will remove); the session's teardown
does the same for every Application before it stops Argo CD.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.charts import HelmRepo
from tests.support.cluster import release_argocd_finalizers
from tests.support.gitlab_standin import GitLabStandIn
from tidecd_dev.devcluster import DevCluster
from tidecd_dev.gitserver import GitServer
from tidecd_dev.peers import ArgoCD, ensure_built


@pytest.fixture(scope="session")
def argocd_built() -> Path:
    ensure_built("redis-server")
    return ensure_built("argocd")


def application_names(argo: ArgoCD) -> set[str]:
    return {app["metadata"]["name"] for app in argo.kube.kube.list("argoproj.io", "Application",
                                                                  namespace=argo.namespace)}


def delete_applications(argo: ArgoCD, names: set[str], timeout: float = 60.0) -> None:
    """Delete `names` (Applications of `argo`'s namespace) without cascading, and wait until they are gone."""
    if not names:
        return
    release_argocd_finalizers(argo.kube.kube, argo.namespace)
    for name in sorted(names):
        argo.kube.delete(argo.key(name))
    deadline = time.monotonic() + timeout
    while left := names & application_names(argo):
        if time.monotonic() > deadline:
            raise AssertionError(f"Argo CD Applications {sorted(left)} not deleted after {timeout:.0f} s")
        time.sleep(0.2)


@pytest.fixture(scope="session")
def argocd_session(argocd_built: Path, cluster: DevCluster, git_server: GitServer, session_helm_repo: HelmRepo,
                   gitlab_session: GitLabStandIn, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArgoCD]:
    # the GitLab stand-in too: the ApplicationSet oracle's scmProvider cases (tests/e2e/test_appset_oracle.py)
    reach = [git_server.url, session_helm_repo.url, gitlab_session.base_url]
    with ArgoCD(cluster.kubeconfig, tmp_path_factory.mktemp("argocd"), reach=reach) as argo:
        yield argo
        delete_applications(argo, application_names(argo))
        release_argocd_finalizers(argo.kube.kube, argo.namespace)  # AppProjects too


@pytest.fixture()
def argocd(argocd_session: ArgoCD, namespace: str) -> Iterator[ArgoCD]:
    """The session's Argo CD; the Applications this test created are deleted before `namespace` is."""
    before = application_names(argocd_session)
    yield argocd_session
    delete_applications(argocd_session, application_names(argocd_session) - before)
