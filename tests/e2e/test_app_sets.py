"""App of apps and ApplicationSets against the real control plane and git server.

- An app of apps with three children in two waves: the children become tidecd apps (no Application CR is
  applied), the wave-1 child starts only after both wave-0 children are Synced and Healthy, through the
  engine's own continuations and child refreshes (the local scheduler, as in `make demo`). Deleting a child
  from git prunes it: the child app prunes its objects (resources finalizer), then leaves the config.
- A git-directories ApplicationSet over 5 directories yields 5 apps; a pushed sixth directory is an app,
  refreshed, in the very next poll tick.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml

from tests.support import appset_cases
from tests.support.apps import GitOps, configmap
from tests.support.github_standin import GitHubStandIn
from tidecd.base.model import ResourceKey
from tidecd.generated import records as generated
from tidecd.runtime import Runtime
from tidecd.triggers.dispatch import DirectDispatcher, ManualDispatcher, Refresh
from tidecd.triggers.scheduler import LocalScheduler
from tidecd.usecases.appsets import refresh
from tidecd.usecases.commands import SyncRequest, start_operation
from tidecd.usecases.poll import poll
from tidecd_dev.peers import install_crds

pytestmark = pytest.mark.e2e

FINALIZER = "resources-finalizer.argocd.argoproj.io"


def child(gitops: GitOps, name: str, wave: int) -> dict[str, Any]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": gitops.real(name), "namespace": "argocd", "finalizers": [FINALIZER],
                         "annotations": {"argocd.argoproj.io/sync-wave": str(wave)}},
            "spec": {"project": "default",
                     "source": {"repoURL": gitops.repo.url, "targetRevision": "main", "path": f"apps/{name}"},
                     "destination": {"name": "in-cluster", "namespace": gitops.namespace},
                     "syncPolicy": {"automated": {"prune": True}}}}


def drive(runtime: Runtime, app: str, scheduler: LocalScheduler, timeout: float = 120.0) -> None:
    """Hand a refresh of `app` to the local scheduler and let every step it leads to run (children too)."""
    dispatcher = DirectDispatcher(lambda: Runtime(settings=runtime.settings, store=runtime.store),
                                  store=runtime.store, scheduler=scheduler)
    assert dispatcher.dispatch([Refresh(app, "test")]) == {}
    assert scheduler.wait_idle(timeout), f"steps still pending after {timeout}s: {scheduler.pending()}"


def test_app_of_apps_syncs_children_in_waves_and_prunes_a_child_deleted_from_git(gitops: GitOps) -> None:
    files: dict[str, Any] = {f"apps/{n}/cm.yaml": configmap(f"cm-{n}") for n in ("a", "b", "c")}
    files["root/children.yaml"] = [child(gitops, "a", 0), child(gitops, "b", 0), child(gitops, "c", 1)]
    gitops.push(files)
    root = gitops.application("root", path="root", automated={"prune": True})
    runtime = gitops.runtime()
    scheduler = LocalScheduler(workers=2)
    started = time.monotonic()
    drive(runtime, root, scheduler)
    elapsed = time.monotonic() - started

    parent = gitops.state("root")
    assert parent.operation is not None and parent.operation.phase == "Succeeded", parent.operation
    config = gitops.runtime().config()
    names = {gitops.real(n) for n in ("a", "b", "c")}
    assert names <= set(config.applications)
    assert {config.owners[n] for n in names} == {f"Application/{root}"}
    states = {n: gitops.state(n) for n in ("a", "b", "c")}
    for name, state in states.items():
        assert state.operation is not None and state.operation.phase == "Succeeded", (name, state.operation)
        assert (state.sync_status, state.health) == ("Synced", "Healthy"), name
        assert gitops.live("ConfigMap", f"cm-{name}") is not None
    wave0_done = max(states[n].operation.finished_at for n in ("a", "b"))  # type: ignore[union-attr]
    assert states["c"].operation.started_at >= wave0_done, "wave 1 started before wave 0 was Synced and Healthy"  # type: ignore[union-attr]
    waited = [r for r in parent.resources if r.kind == "Application"]
    assert len(waited) == 3 and all(r.health == "Healthy" for r in waited)
    assert elapsed < 120
    print(f"app of apps: parent and 3 children in 2 waves synced in {elapsed:.1f}s")

    # deleting a child from git: the parent prunes it, the child prunes its objects, then leaves
    gitops.push({"root/children.yaml": [child(gitops, "a", 0), child(gitops, "c", 1)]}, "drop child b")
    drive(runtime, root, scheduler)
    record = generated.load_records(runtime.store)[f"Application/{root}"]
    assert gitops.real("b") not in record["apps"]
    assert gitops.live("ConfigMap", "cm-b") is None
    assert gitops.live("ConfigMap", "cm-a") is not None
    after = gitops.runtime().config()
    assert gitops.real("b") not in after.applications and gitops.real("a") in after.applications


def test_a_child_may_not_widen_its_parents_project(gitops: GitOps) -> None:
    gitops.project({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "narrow"},
                    "spec": {"sourceRepos": [gitops.repo.url],
                             "destinations": [{"server": "*", "name": "*", "namespace": gitops.namespace}]}})
    wide = child(gitops, "wide", 0)
    wide["spec"]["destination"]["namespace"] = "kube-system"
    gitops.push({"apps/wide/cm.yaml": configmap("cm-wide"), "root/children.yaml": [wide]})
    root = gitops.application("root", path="root", project="narrow", automated={"prune": True})
    runtime = gitops.runtime()
    drive(runtime, root, LocalScheduler(workers=2))
    config = gitops.runtime().config()
    problem = config.invalid[gitops.real("wide")]
    assert "kube-system" in problem and "narrow" in problem, problem
    assert gitops.kube.get(ResourceKey("", "ConfigMap", "kube-system", "cm-wide")) is None
    assert gitops.state("root").operation.phase == "Succeeded"  # type: ignore[union-attr]


def directories_set(gitops: GitOps) -> dict[str, Any]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "metadata": {"name": "dirs"},
            "spec": {"goTemplate": True,
                     "generators": [{"git": {"repoURL": gitops.repo.url, "revision": "main",
                                             "directories": [{"path": "services/*"}]}}],
                     "template": {"metadata": {"name": "{{ .path.basename }}-" + gitops.namespace},
                                  "spec": {"project": "default",
                                           "source": {"repoURL": gitops.repo.url, "targetRevision": "main",
                                                      "path": "{{ .path.path }}"},
                                           "destination": {"name": "in-cluster", "namespace": gitops.namespace}}}}}


def test_git_directories_application_set_yields_an_app_per_directory_and_follows_pushes(gitops: GitOps) -> None:
    import yaml

    services = ["alpha", "bravo", "charlie", "delta", "echo"]
    gitops.push({f"services/{s}/cm.yaml": configmap(f"svc-{s}") for s in services})
    (gitops.config_dir / "appset.yaml").write_text(yaml.safe_dump(directories_set(gitops)))
    runtime = gitops.runtime()
    recorder = ManualDispatcher()
    started = time.monotonic()
    summary = poll(runtime, recorder, jitter_seconds=0)
    first_tick = time.monotonic() - started
    expected = {f"{s}-{gitops.namespace}" for s in services}
    assert summary.appsets_changed == ["dirs"], summary.errors
    assert expected <= {r.app for r in recorder.refreshes}
    config = gitops.runtime().config()
    assert expected == {n for n, o in config.owners.items() if o == "ApplicationSet/dirs"}
    assert "git directory services/charlie" in config.applications[f"charlie-{gitops.namespace}"].origin

    gitops.reconcile("charlie", SyncRequest())  # a generated app syncs like a written one
    assert gitops.live("ConfigMap", "svc-charlie") is not None
    assert gitops.state("charlie").sync_status == "Synced"

    recorder.refreshes.clear()
    gitops.push({"services/foxtrot/cm.yaml": configmap("svc-foxtrot")}, "a sixth service")
    started = time.monotonic()
    summary = poll(runtime, recorder, jitter_seconds=0)
    second_tick = time.monotonic() - started
    new = f"foxtrot-{gitops.namespace}"
    assert new in {r.app for r in recorder.refreshes}, summary
    assert new in gitops.runtime().config().applications
    start_operation(gitops.runtime(), new, SyncRequest())
    gitops.reconcile("foxtrot")
    assert gitops.live("ConfigMap", "svc-foxtrot") is not None
    print(f"appset poll ticks: first {first_tick:.2f}s (5 apps), after a push {second_tick:.2f}s (6 apps)")

    # a push webhook evaluates the ApplicationSets reading that repository at once (no poll tick needed)
    import hashlib
    import hmac
    import json

    from tidecd.usecases import webhook

    sha = gitops.push({"services/golf/cm.yaml": configmap("svc-golf")}, "a seventh service")
    body = json.dumps({"ref": "refs/heads/main", "after": sha, "repository": {
        "clone_url": gitops.repo.url, "default_branch": "main"}, "commits": []}).encode()
    headers = {"X-GitHub-Event": "push", "X-GitHub-Delivery": f"push-{sha[:8]}",
               "X-Hub-Signature-256": "sha256=" + hmac.new(b"hook", body, hashlib.sha256).hexdigest()}
    dispatched = ManualDispatcher()
    answer = webhook.handle(headers, body, gitops.runtime(webhook_secret="hook"), dispatched)
    golf = f"golf-{gitops.namespace}"
    assert answer.body["applicationsets"]["created"] == [golf], answer.body
    assert golf in answer.body["refreshed"] and golf in {r.app for r in dispatched.refreshes}

    # a directory removed from git: its app (given Argo CD's resources finalizer, the template names none) is
    # deleting, prunes what it owns through the ordinary sync, then leaves; the other apps' objects stay
    charlie = f"charlie-{gitops.namespace}"
    gitops.push({"services/charlie/cm.yaml": None}, "charlie is retired")
    summary = poll(gitops.runtime(), ManualDispatcher(), jitter_seconds=0)
    assert charlie in gitops.runtime().config().deleting, summary
    gitops.reconcile("charlie")
    assert gitops.live("ConfigMap", "svc-charlie") is None
    assert gitops.live("ConfigMap", "svc-foxtrot") is not None
    assert charlie not in gitops.runtime().config().applications


def test_pull_request_generator_through_pygithub_and_the_webhook(
        gitops: GitOps, github_standin: GitHubStandIn, webhook_examples: dict[str, list[dict[str, Any]]]) -> None:
    import copy
    import hashlib
    import hmac
    import json

    import yaml

    from tidecd.usecases import webhook
    from tidecd.usecases.appsets import refresh

    event = copy.deepcopy(next(e for e in webhook_examples["pull_request"] if e["action"] == "opened"))
    owner, repo = event["repository"]["full_name"].split("/")
    token_secret = {"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "gh", "labels": {"argocd.argoproj.io/secret-type": "github"}},
                    "stringData": {"token": "pr-token"}}
    prs = {"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "metadata": {"name": "previews"},
           "spec": {"goTemplate": True, "generators": [{"pullRequest": {"github": {"owner": owner, "repo": repo}}}],
                    "template": {"metadata": {"name": "pr-{{ .number }}-" + gitops.namespace},
                                 "spec": {"project": "default",
                                          "source": {"repoURL": gitops.repo.url, "path": "app",
                                                     "targetRevision": "{{ .head_sha }}"},
                                          "destination": {"name": "in-cluster", "namespace": gitops.namespace}}}}}
    (gitops.config_dir / "previews.yaml").write_text(yaml.safe_dump_all([token_secret, prs]))
    runtime = gitops.runtime(github_api_url=github_standin.base_url, webhook_secret="hook")
    summary = refresh(runtime)
    assert summary.changed == ["previews"], summary.errors
    pulls = github_standin.calls_to("pulls/list")
    assert len(pulls) == 1 and "pr-token" in (pulls[0].authorization or "")
    [name] = [n for n, o in gitops.runtime().config().owners.items() if o == "ApplicationSet/previews"]
    app = gitops.runtime().config().applications[name]
    assert name.startswith("pr-") and len(app.source.target_revision) == 40
    assert refresh(gitops.runtime(github_api_url=github_standin.base_url)).evaluated == []  # requeueAfterSeconds
    assert len(github_standin.calls_to("pulls/list")) == 1

    body = json.dumps(event).encode()
    headers = {"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "pr-1",
               "X-Hub-Signature-256": "sha256=" + hmac.new(b"hook", body, hashlib.sha256).hexdigest(),
               "Content-Type": "application/json"}
    answer = webhook.handle(headers, body, gitops.runtime(github_api_url=github_standin.base_url,
                                                          webhook_secret="hook"), ManualDispatcher())
    assert answer.body["applicationsets"]["evaluated"] == ["previews"], answer.body
    assert len(github_standin.calls_to("pulls/list")) == 2


def test_an_application_set_in_the_config_source_no_longer_stops_every_app(gitops: GitOps) -> None:
    """The opening-list bullet of issue 12: with an ApplicationSet (a bad one, even) next to a written app,
    the written app loads and syncs, and the problem names the file and the field."""
    import yaml

    gitops.push({"app/cm.yaml": configmap("plain")})
    app = gitops.application()
    bad = directories_set(gitops)
    bad["spec"]["generators"][0]["git"]["directories"] = [{"path": "services/*", "exlude": True}]
    (gitops.config_dir / "appset.yaml").write_text(yaml.safe_dump(bad))
    summary = poll(gitops.runtime(), ManualDispatcher(), jitter_seconds=0)
    assert app in summary.apps_refreshed
    assert any("appset.yaml: ApplicationSet/dirs: spec.generators[0].git.directories[0].exlude: unknown field" in e
               for e in summary.errors), summary.errors
    gitops.sync()
    assert gitops.live("ConfigMap", "plain") is not None


def test_cluster_decision_resource_reads_a_duck_typed_resource_on_the_cluster(gitops: GitOps, tmp_path: Any) -> None:
    """Generators-Cluster-Decision-Resource.md: the ConfigMap in the local cluster's argocd namespace names the
    duck-typed kind (a CRD installed here), its status list and match key; each decision naming a known
    cluster is an app, with the decision's own keys as parameters. An unknown cluster is skipped."""
    crd = tmp_path / "crd.yaml"
    crd.write_text(yaml.safe_dump(appset_cases.DUCK_CRD))
    install_crds(gitops.kube, [crd])
    suffix = gitops.namespace
    config_map = {**appset_cases.DUCK_CONFIGMAP, "metadata": {"name": f"placement-{suffix}", "namespace": "argocd"}}
    decision = {"apiVersion": f"{appset_cases.DUCK_GROUP}/v1", "kind": "PlacementDecision",
                "metadata": {"name": f"decision-{suffix}", "namespace": "argocd", "labels": {"run": suffix}},
                "status": {"decisions": [{"clusterName": "staging", "reason": "fits"}, {"clusterName": "nowhere"}]}}
    gitops.kube.apply_as({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "argocd"}}, "tidecd-test")
    made = [gitops.kube.apply_as(obj, "tidecd-test") for obj in (config_map, decision)]
    try:
        appset = {"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "metadata": {"name": "placed"},
                  "spec": {"goTemplate": True, "generators": [{"clusterDecisionResource": {
                      "configMapRef": f"placement-{suffix}", "labelSelector": {"matchLabels": {"run": suffix}}}}],
                      "template": {"metadata": {"name": "{{ .name }}-" + suffix, "annotations": {
                          "reason": "{{ .reason }}"}}, "spec": {
                              "project": "default", "source": {"repoURL": gitops.repo.url, "path": "apps"},
                              "destination": {"server": "{{ .server }}", "namespace": suffix}}}}}
        staging = next(s for s in appset_cases.CLUSTERS if s["stringData"]["name"] == "staging")
        (gitops.config_dir / "placed.yaml").write_text(yaml.safe_dump_all([appset, staging]))
        summary = refresh(gitops.runtime())
        assert not summary.errors, summary.errors
        record = generated.load_records(gitops.store)["ApplicationSet/placed"]
        assert sorted(record["apps"]) == [f"staging-{suffix}"]
        doc = record["apps"][f"staging-{suffix}"]["doc"]
        assert doc["spec"]["destination"]["server"] == "https://staging.example:6443"
        assert doc["metadata"]["annotations"] == {"reason": "fits"}
    finally:
        for obj in made:
            gitops.kube.delete(ResourceKey.of(obj))
