"""The conformance suite (issue 23): Argo CD's own e2e cases, each run through the real Argo CD v3.6.1 and
through tidecd on the same control plane, compared.

`tests/support/conformance_cases.py` holds the cases (each with the Go test it ports),
`tests/support/example_cases.py` Argo CD's example apps (argoproj/argocd-example-apps, `ex-` and the example's
directory), and `tests/support/conformance.py` the harness: every case's app starts at once in both tools, Argo CD in a
namespace of its own and tidecd in another, and both sides are observed when all are done. A case agrees
when the normalised live objects, the operation's phase and per-resource results, and the sync and health
status are the same. `KNOWN` lists the cases that still differ, which aspects, and why; a known case
fails when it differs in more than those aspects, and the run prints each known case that now agrees (drop
its row, and its line in docs/argocd-compatibility.md, then).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.test_health_crds import crd
from tests.support.charts import HelmRepo
from tests.support.cluster import release_argocd_finalizers, track_namespace
from tests.support.conformance import LISTED, Case, Outcome, Suite, live_objects, placeholders
from tests.support.conformance_cases import CASES
from tests.support.example_cases import CHARTS, EXAMPLE_CASES
from tests.support.gitserver import GitRepo
from tests.support.peers import application_names, delete_applications
from tidecd.base.model import ResourceKey
from tidecd.clients.cluster import KubeCluster
from tidecd_dev.devcluster import DevCluster
from tidecd_dev.gitserver import GitServer
from tidecd_dev.peers import ArgoCD

pytestmark = pytest.mark.e2e


@dataclass(frozen=True)
class Known:
    """A difference still open: the aspects that differ, and why (docs/argocd-compatibility.md says it too)."""

    aspects: frozenset[str]
    reason: str


def known(reason: str, *aspects: str) -> Known:
    return Known(frozenset(aspects), reason)


KNOWN: dict[str, Known] = {
    "unnamed-resource": known("a non-hook object without a name makes the app Unknown (ComparisonError) and is "
                              "never sent to the cluster; Argo CD shows it OutOfSync/Missing and fails its sync at "
                              "the dry-run", "health", "resources", "results", "sync"),
}


ALL = CASES + EXAMPLE_CASES
ROLLOUTS = "rollouts.argoproj.io"  # Argo Rollouts' CRD, for blue-green (no Rollouts controller runs)


def selected_cases() -> list[Case]:
    """`TIDECD_CONFORMANCE_CASES=a,b` runs only those cases (a name no case has is an error); all by default.
    (ex-pre-post-sync builds on ex-kustomize-guestbook's directory: select both.)"""
    wanted = [n.strip() for n in os.environ.get("TIDECD_CONFORMANCE_CASES", "").split(",") if n.strip()]
    unknown = sorted(set(wanted) - {c.name for c in ALL})
    if unknown:
        raise ValueError(f"TIDECD_CONFORMANCE_CASES names no case: {unknown}")
    return [c for c in ALL if not wanted or c.name in wanted]


SELECTED = selected_cases()


def rollouts_served(kube: KubeCluster, key: ResourceKey, timeout: float = 60.0) -> bool:
    """Argo Rollouts' CRD established (for blue-green); True when this call created it (it goes at the end).
    One another test is still deleting is waited out first."""
    deadline = time.monotonic() + timeout
    created = False
    while time.monotonic() < deadline:
        live = kube.get(key)
        if live is None:
            kube.apply(crd("argoproj.io", "Rollout", "rollouts", "v1alpha1"))
            created = True
        elif not live["metadata"].get("deletionTimestamp") and any(
                c.get("type") == "Established" and c.get("status") == "True"
                for c in (live.get("status") or {}).get("conditions") or []):
            return created
        time.sleep(0.2)
    raise AssertionError(f"CRD {key.name} not established within {timeout:.0f} s")


@dataclass(frozen=True)
class Run:
    suite: Suite
    outcomes: dict[str, Outcome]
    seconds: float


@pytest.fixture(scope="module")
def conformance(argocd_session: ArgoCD, cluster: DevCluster, git_server: GitServer, session_helm_repo: HelmRepo,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    workdir = tmp_path_factory.mktemp("conformance")
    repo = GitRepo(git_server, f"conformance-{uuid.uuid4().hex[:8]}", workdir / "repo")
    kube = KubeCluster.from_kubeconfig(str(cluster.kubeconfig))
    crd_key = ResourceKey("apiextensions.k8s.io", "CustomResourceDefinition", "", ROLLOUTS)
    ours = rollouts_served(kube, crd_key)
    for chart in CHARTS:
        if not (session_helm_repo.root / f"{chart['name']}-{chart['version']}.tgz").exists():
            session_helm_repo.add(**chart)
    suite = Suite(SELECTED, argo=argocd_session, kube=kube, kubeconfig=str(cluster.kubeconfig), repo=repo,
                  workdir=workdir, charts_url=session_helm_repo.url, kinds=(*LISTED, ("argoproj.io", "Rollout")))
    for ns in suite.namespaces:
        track_namespace(ns, "tests/e2e/test_argocd_conformance_oracle.py")
    start = time.monotonic()
    try:
        outcomes = suite.run()
        took = time.monotonic() - start
        print(f"\nconformance: {len(SELECTED)} cases in {took:.1f} s (rounds: "
              f"{', '.join(f'{t:.1f}' for t in suite.timings)} s)")
        if report := os.environ.get("TIDECD_CONFORMANCE_REPORT"):  # every difference in full, as JSON
            Path(report).write_text(json.dumps({o.case.name: {**o.differences(), "notes": o.notes()}
                                                for o in outcomes}, indent=1))
        for outcome in outcomes:
            print(f"  {outcome.case.name}: {sorted(outcome.differences()) or 'agrees'}")
        yield Run(suite, {o.case.name: o for o in outcomes}, took)
    finally:
        apps = {c.app for c in SELECTED}  # and the children an app of apps made (`<parent>-<child>`)
        delete_applications(argocd_session, {n for n in application_names(argocd_session)
                                             if n in apps or any(n.startswith(f"{a}-") for a in apps)})
        for ns in sorted(suite.namespaces):
            release_argocd_finalizers(kube, ns)
            kube.delete(ResourceKey("", "Namespace", "", ns))
        if ours:
            kube.delete(crd_key)


@pytest.mark.parametrize("name", [c.name for c in SELECTED])
def test_case_agrees_with_argocd(conformance: Run, name: str) -> None:
    outcome = conformance.outcomes[name]
    differences = outcome.differences()
    shown = "\n".join(f"  {aspect}: {text}" for aspect, text in sorted(differences.items()))
    if name in KNOWN:  # a known difference may close (a fix landed): then drop its row; it must not grow
        assert set(differences) <= set(KNOWN[name].aspects), (
            f"{name} ({outcome.case.go_test}): expected to differ at most in {sorted(KNOWN[name].aspects)} "
            f"({KNOWN[name].reason}); differs in:\n{shown or '  nothing'}")
    else:
        assert not differences, f"{name} ({outcome.case.go_test}) differs from Argo CD:\n{shown}"


def test_the_suite_holds_at_least_40_agreeing_cases() -> None:
    names = [c.name for c in ALL]
    assert len(names) == len(set(names)), "case names must be unique"
    assert set(KNOWN) <= set(names), sorted(set(KNOWN) - set(names))
    assert len([c.name for c in CASES if c.name not in KNOWN]) >= 40


def test_no_rendered_manifest_holds_an_argocd_placeholder(conformance: Run) -> None:
    """Issue 23: no case deploys `$ARGOCD_...` text that Argo CD would have substituted: not in any manifest
    tidecd rendered for the suite, nor in any live object of either tool's namespaces."""
    suite = conformance.suite
    live = [obj for objects in live_objects(suite.kube, suite.namespaces).values() for obj in objects.values()]
    assert (suite.store.root / "manifests").is_dir()
    assert live
    assert placeholders(suite.store.root, live) == []
