"""The ApplicationSet oracle: Argo CD v3.6.1's own ApplicationSet controller and tidecd generate the Applications of
the same ApplicationSets (tests/support/appset_cases.py: list, clusters, git directories and files against the
local git server, matrix, merge, templatePatch, goTemplate options, syncPolicy, RollingSync, scmProvider gitlab
against the GitLab stand-in, both tools asking the same one), and each case's
Applications must agree, or the case must be an expected difference with its reason.

One set-up serves every case: the session's Argo CD (`argocd_session`) gets a second namespace, `appset-oracle`,
with its own argocd-cm, AppProject `default` and cluster Secrets, and an ApplicationSet controller watching only
it (no application controller does, so nothing generated is ever synced). All ApplicationSets are applied at
once; tidecd evaluates the same documents from a config source holding the same cluster Secrets.
`TIDECD_APPSET_ORACLE_DUMP=FILE` writes both sides of every case to FILE (JSON), to study a difference.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import appset_cases
from tests.support.cluster import release_argocd_finalizers
from tests.support.gitlab_standin import GitLabStandIn
from tests.support.gitserver import GitRepo
from tidecd.base.model import ResourceKey
from tidecd.clients.store import LocalStore
from tidecd.config.appset.expand import expand
from tidecd.config.appset.rolling import AppView, decide
from tidecd.runtime import Runtime, Settings
from tidecd.usecases.appsets import RuntimeSources
from tidecd_dev.devcluster import DevCluster
from tidecd_dev.gitserver import GitServer
from tidecd_dev.peers import ArgoCD, install_crds

pytestmark = pytest.mark.e2e

NAMESPACE = "appset-oracle"
SETTLE_TIMEOUT = 120.0
ROLLED_TIMEOUT = 30.0  # how long a poked RollingSync ApplicationSet may take to choose


@dataclass(frozen=True)
class Outcome:
    apps: dict[str, dict[str, Any]]  # name → normalized Application
    error: bool
    message: str = ""


@dataclass(frozen=True)
class Rolling:
    """A RollingSync ApplicationSet's first decision: each app's status, and the apps whose sync it started."""

    statuses: dict[str, str]
    started: frozenset[str]
    stepped: int = field(default=0, compare=False)  # how many apps a step selects


@dataclass(frozen=True)
class Results:
    tidecd: dict[str, Outcome]
    argo: dict[str, Outcome]
    rolling_tidecd: dict[str, Rolling]
    rolling_argo: dict[str, Rolling]
    seconds: dict[str, float]


def tidecd_outcomes(repo_url: str, gitlab: str, kubeconfig: str,
                    tmp: Path) -> tuple[dict[str, Outcome], dict[str, Rolling]]:
    config = tmp / "config"
    config.mkdir()
    for name, body in appset_cases.CASES:
        doc = appset_cases.document(name, body, repo_url, "argocd", gitlab)
        (config / f"appset-{name}.yaml").write_text(yaml.safe_dump(doc))
    for secret in appset_cases.CLUSTERS:
        (config / f"{secret['metadata']['name']}.yaml").write_text(
            yaml.safe_dump({**secret, "metadata": {**secret["metadata"], "namespace": "argocd"}}))
    runtime = Runtime(settings=Settings(config=str(config), store=str(tmp / "store"), kubeconfig=kubeconfig),
                      store=LocalStore(tmp / "store"))
    loaded = runtime.config()
    out = {name: Outcome({}, True, message) for name, message in loaded.invalid_appsets.items()}
    rolling: dict[str, Rolling] = {}
    sources = RuntimeSources(runtime)
    try:
        for name, appset in loaded.appsets.items():
            expansion = expand(appset, sources)
            apps = {n: appset_cases.normalized(g.doc) for n, g in expansion.apps.items()}
            out[name] = Outcome(apps, bool(expansion.errors), "; ".join(expansion.errors))
            if appset.rolling_steps is not None:  # new apps: no sync or health status yet, nothing running
                views = {n: AppView(dict(g.doc["metadata"].get("labels") or {}), synced=False, healthy=False,
                                    running=False) for n, g in expansion.apps.items()}
                statuses, start = decide(appset.rolling_steps, views, {})
                rolling[name] = Rolling({n: "Pending" if n in start else s[0] for n, s in statuses.items()},
                                        frozenset(start), sum(1 for s in statuses.values() if s[2] is not None))
    finally:
        sources.close()
    return out, rolling


def argo_items(argo: ArgoCD, plural: str) -> list[dict[str, Any]]:
    path = f"/apis/argoproj.io/v1alpha1/namespaces/{NAMESPACE}/{plural}"
    return list(argo.kube.kube.request("GET", path).get("items") or [])


def settled(appset: dict[str, Any]) -> bool:
    conditions = {c.get("type"): c for c in (appset.get("status") or {}).get("conditions") or []}
    return "True" in (conditions.get("ResourcesUpToDate", {}).get("status"),
                      conditions.get("ErrorOccurred", {}).get("status"))


def rolled(appset: dict[str, Any], count: int) -> bool:
    """Argo CD recorded a progressive-sync status for each of the `count` apps it generated (a reconcile after
    the one that created them) and chose some (not all Waiting)."""
    entries = (appset.get("status") or {}).get("applicationStatus") or []
    return len(entries) >= count and any(e.get("status") != "Waiting" for e in entries)


def poke(argo: ArgoCD, name: str, count: int) -> None:
    """Make Argo CD reconcile a RollingSync ApplicationSet again, as the application controller's first status
    write to its new apps would: Argo CD does not requeue an ApplicationSet for the apps it creates
    (getApplicationOwnsHandler's CreateFunc is false; list generators never requeue), only for an app's
    status change or a change of the ApplicationSet, and no application controller watches this namespace.
    An annotation is such a change (shouldRequeueForApplicationSet)."""
    argo.kube.merge_patch(ResourceKey("argoproj.io", "ApplicationSet", NAMESPACE, name),
                          {"metadata": {"annotations": {"tidecd.test/poke": str(count)}}})


def argo_outcomes(argo: ArgoCD, rolling_apps: dict[str, int]) -> tuple[dict[str, Outcome], dict[str, Rolling]]:
    """Wait until every ApplicationSet has settled (up to date, or an error) and its Applications stopped
    changing, then read them. A RollingSync one is poked (`poke`) every few seconds until it chose its first
    step's apps, or ROLLED_TIMEOUT passed."""
    names = {name for name, _ in appset_cases.CASES}
    deadline = time.monotonic() + SETTLE_TIMEOUT
    poked: dict[str, list[float]] = {}  # name → when it was poked
    while True:
        appsets = {a["metadata"]["name"]: a for a in argo_items(argo, "applicationsets")}
        waiting = sorted(n for n in names if n not in appsets or not settled(appsets[n]))
        for name in appset_cases.ROLLING_CASES:
            if name in waiting or rolled(appsets[name], rolling_apps.get(name, 0)):
                continue
            times, moment = poked.setdefault(name, []), time.monotonic()
            if times and moment - times[0] > ROLLED_TIMEOUT:
                continue  # Argo CD never chose: compared as it is
            waiting.append(name)
            if not times or moment - times[-1] > 3.0:
                poke(argo, name, len(times) + 1)
                times.append(moment)
        if not waiting:
            break
        assert time.monotonic() < deadline, f"Argo CD did not settle {waiting}: " \
                                            f"{argo.logs(f'applicationset-controller-{NAMESPACE}', 1500)}"
        time.sleep(0.3)
    last: list[str] = []
    while True:  # an error condition is written before the valid apps are: wait until the list holds still
        apps = argo_items(argo, "applications")
        now = sorted(f"{a['metadata']['name']}@{a['metadata']['resourceVersion']}" for a in apps)
        if now == last:
            break
        last = now
        time.sleep(1.0)
    out: dict[str, Outcome] = {}
    for name, appset in appsets.items():
        conditions = {c.get("type"): c for c in (appset.get("status") or {}).get("conditions") or []}
        error = conditions.get("ErrorOccurred", {})
        owned = {a["metadata"]["name"]: appset_cases.normalized(a) for a in apps
                 if any(o.get("name") == name for o in a["metadata"].get("ownerReferences") or [])}
        out[name] = Outcome(owned, error.get("status") == "True", str(error.get("message", "")))
    rolling = {}
    for name in appset_cases.ROLLING_CASES:
        entries = (appsets[name].get("status") or {}).get("applicationStatus") or []
        started = {a["metadata"]["name"] for a in apps
                   if a.get("operation") and a["metadata"]["name"] in out[name].apps}
        rolling[name] = Rolling({e["application"]: e["status"] for e in entries}, frozenset(started))
    return out, rolling


@pytest.fixture(scope="module")
def results(argocd_session: ArgoCD, cluster: DevCluster, git_server: GitServer, gitlab_session: GitLabStandIn,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Results]:
    tmp = tmp_path_factory.mktemp("appset-oracle")
    repo = GitRepo(git_server, f"appset-oracle-{uuid.uuid4().hex[:8]}", tmp / "work")
    for path, text in appset_cases.FILES.items():
        repo.write(path, text)
    repo.commit("appset oracle files")
    repo.push()
    argo = argocd_session
    gitlab = gitlab_session  # relayed into Argo CD's network namespace (argocd_session)
    gitlab.reset()
    appset_cases.gitlab_projects(gitlab)
    started = time.monotonic()
    argo.prepare_namespace(NAMESPACE)
    for secret in appset_cases.CLUSTERS:
        argo.apply({**secret, "metadata": {**secret["metadata"], "namespace": NAMESPACE}})
    crd = tmp / "duck-crd.yaml"
    crd.write_text(yaml.safe_dump(appset_cases.DUCK_CRD))
    install_crds(argo.kube.kube, [crd])
    for namespace in (NAMESPACE, "argocd"):  # Argo CD reads its own namespace; tidecd the local cluster's argocd
        for obj in (appset_cases.DUCK_CONFIGMAP, *appset_cases.DUCK_OBJECTS):
            argo.apply({**obj, "metadata": {**obj["metadata"], "namespace": namespace}})
    argo.start_applicationset_controller(NAMESPACE)
    for name, body in appset_cases.CASES:
        argo.apply(appset_cases.document(name, body, repo.url, NAMESPACE, gitlab.base_url))
    applied = time.monotonic()
    tidecd, rolling_tidecd = tidecd_outcomes(repo.url, gitlab.base_url, str(cluster.kubeconfig), tmp)
    evaluated = time.monotonic()
    argo_side, rolling_argo = argo_outcomes(argo, {n: r.stepped for n, r in rolling_tidecd.items()})
    done = time.monotonic()
    seconds = {"argo set-up and apply": applied - started, "tidecd evaluation": evaluated - applied,
               "argo settled after": done - applied}
    print(f"appset oracle: {len(appset_cases.CASES)} cases; " + ", ".join(f"{k} {v:.1f}s" for k, v in seconds.items()))
    if os.environ.get("TIDECD_APPSET_ORACLE_DUMP"):  # both sides of every case, to study a difference
        Path(os.environ["TIDECD_APPSET_ORACLE_DUMP"]).write_text(json.dumps({
            name: {"tidecd": json.loads(_shown(tidecd[name])), "argo": json.loads(_shown(argo_side[name]))}
            for name, _ in appset_cases.CASES} | {
            f"rolling:{name}": {"tidecd": repr(rolling_tidecd.get(name)), "argo": repr(rolling_argo.get(name))}
            for name in appset_cases.ROLLING_CASES}, indent=1, sort_keys=True))
    yield Results(tidecd, argo_side, rolling_tidecd, rolling_argo, seconds)
    gitlab.assert_clean()  # neither tool asked GitLab anything its documentation does not allow
    gitlab.reset()
    release_argocd_finalizers(argo.kube.kube, NAMESPACE)
    for name, _ in appset_cases.CASES:
        argo.kube.delete(ResourceKey("argoproj.io", "ApplicationSet", NAMESPACE, name))
    for app in argo_items(argo, "applications"):
        argo.kube.delete(ResourceKey("argoproj.io", "Application", NAMESPACE, app["metadata"]["name"]))
    for obj in (appset_cases.DUCK_CONFIGMAP, *appset_cases.DUCK_OBJECTS):
        argo.kube.delete(ResourceKey.of({**obj, "metadata": {**obj["metadata"], "namespace": "argocd"}}))


def _shown(outcome: Outcome) -> str:
    return json.dumps({"error": outcome.error, "message": outcome.message[:400], "apps": outcome.apps},
                      indent=1, sort_keys=True)


@pytest.mark.parametrize("name", [name for name, _ in appset_cases.CASES])
def test_tidecd_generates_what_argo_cd_generates(results: Results, name: str) -> None:
    ours, theirs = results.tidecd[name], results.argo[name]
    same = ours.apps == theirs.apps and ours.error == theirs.error
    if name in appset_cases.EXPECTED:
        assert not same, f"{name} now agrees with Argo CD: drop its EXPECTED entry ({appset_cases.EXPECTED[name]})"
        return
    assert same, f"{name}: tidecd\n{_shown(ours)}\nArgo CD\n{_shown(theirs)}"


@pytest.mark.parametrize("name", appset_cases.ROLLING_CASES)
def test_rolling_sync_chooses_what_argo_cd_chooses(results: Results, name: str) -> None:
    """The first decision of RollingSync over new apps: the first step's apps (at most maxUpdate of them) are
    chosen and their syncs started, every other app waits; both from the same steps and labels."""
    ours, theirs = results.rolling_tidecd[name], results.rolling_argo[name]
    if name in appset_cases.ROLLING_EXPECTED:
        assert ours != theirs, f"{name} now agrees with Argo CD: drop its ROLLING_EXPECTED entry " \
                               f"({appset_cases.ROLLING_EXPECTED[name]})"
        return
    assert ours == theirs, f"{name}: tidecd {ours}; Argo CD {theirs}"


def test_the_oracle_costs_little(results: Results) -> None:
    assert len(appset_cases.CASES) >= 50
    assert results.seconds["argo settled after"] < 90, results.seconds  # ~1-2 min of make test in all
