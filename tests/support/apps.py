"""An app under test: a git repo with manifests, a config dir declaring the Application, and a Runtime.

`gitops` gives each test a fresh namespace-scoped setup; `GitOps.reconcile()` runs the real reconcile use
case against the session's control plane and git server.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidecd.base.model import ChangeSet
from tidecd.clients.cluster import KubeCluster
from tidecd.clients.store import LocalStore
from tidecd.runtime import Runtime, Settings
from tidecd.state import app as app_state
from tidecd.step.reconcile import Outcome
from tidecd.triggers.dispatch import reconcile_step
from tidecd.usecases.commands import SyncRequest, start_operation
from tidecd_dev.devcluster import DevCluster


class GitOps:
    def __init__(self, repo: Any, namespace: str, cluster: DevCluster, tmp: Path) -> None:
        self.repo, self.namespace, self.dev = repo, namespace, cluster
        self.config_dir = tmp / "config"
        self.config_dir.mkdir()
        self.store = LocalStore(tmp / "store")
        self.kube = KubeCluster.from_kubeconfig(str(cluster.kubeconfig))

    def real(self, name: str) -> str:
        """App names are unique per test: ownership labels are cluster-wide, as in Argo CD, so two tests'
        apps of the same name would see (and prune) each other's objects."""
        suffix = f"-{self.namespace}"
        return name if name.endswith(suffix) else name + suffix

    def application(self, name: str = "app", *, path: str = "app", project: str = "default",
                    automated: dict[str, Any] | None = None, sync_options: list[str] | None = None,
                    extra_spec: dict[str, Any] | None = None, namespace: str | None = None,
                    source: dict[str, Any] | None = None, annotations: dict[str, str] | None = None,
                    **policy: Any) -> str:
        name = self.real(name)
        spec: dict[str, Any] = {
            "project": project,
            "source": {"repoURL": self.repo.url, "targetRevision": "main", "path": path, **(source or {})},
            "destination": {"name": "in-cluster", "namespace": namespace or self.namespace},
        }
        sync_policy: dict[str, Any] = dict(policy)
        if automated is not None:
            sync_policy["automated"] = automated
        if sync_options:
            sync_policy["syncOptions"] = sync_options
        if sync_policy:
            spec["syncPolicy"] = sync_policy
        spec.update(extra_spec or {})
        metadata: dict[str, Any] = {"name": name}
        if annotations:
            metadata["annotations"] = annotations
        doc = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": metadata, "spec": spec}
        (self.config_dir / f"{name}.yaml").write_text(yaml.safe_dump(doc))
        return name

    def project(self, doc: dict[str, Any]) -> None:
        (self.config_dir / f"project-{doc['metadata']['name']}.yaml").write_text(yaml.safe_dump(doc))

    def push(self, files: dict[str, Any], message: str = "change") -> str:
        """Write files (a dict or list of dicts becomes YAML; None removes the file), commit and push."""
        self.repo.write_files(files)
        sha = str(self.repo.commit(message))
        self.repo.push()
        return sha

    def runtime(self, **settings: Any) -> Runtime:
        values = {"config": str(self.config_dir), "store": str(self.store.root),
                  "kubeconfig": str(self.dev.kubeconfig), **settings}
        return Runtime(settings=Settings(**values), store=self.store)

    def reconcile(self, name: str = "app", request: SyncRequest | None = None, automate: bool = True,
                  runtime: Runtime | None = None, budget: float = 10.0, follow: bool = True) -> Outcome:
        """One reconcile as a user sees it: with `request`, start that operation; then step the app (as the
        scheduled continuations would) until no operation runs, or just once without `follow`. A scheduled
        retry is not followed. The returned outcome carries the changes of every step."""
        runtime = runtime or self.runtime()
        real = self.real(name)
        if request is not None:
            start_operation(runtime, real, request)
        changes = ChangeSet()
        while True:
            outcome = reconcile_step(runtime, real, automate=automate, budget=budget)  # as every caller: notified
            changes.entries.extend(outcome.changes.entries)
            op = outcome.state.operation if outcome.state else None
            running = op is not None and op.running
            if not follow or outcome.continue_after is None or (outcome.skipped and not running) or not running:
                return dataclasses.replace(outcome, changes=changes)
            time.sleep(min(outcome.continue_after, 1.0))

    def sync(self, name: str = "app", **kwargs: Any) -> Outcome:
        return self.reconcile(name, SyncRequest(**kwargs))

    def settle(self, name: str = "app", timeout: float = 90) -> Outcome:
        """Refresh until a step answers Synced and Healthy from the quiet record. A rollout's status writes
        change a Deployment's resourceVersion a few times after it first reads Healthy (its Progressing
        condition turns NewReplicaSetAvailable), so "Healthy once" is not yet "nothing changes"."""
        deadline = time.monotonic() + timeout
        while True:
            outcome = self.reconcile(name)
            state = outcome.state
            if outcome.unchanged and state is not None and state.sync_status == "Synced" and state.health == "Healthy":
                return outcome
            assert time.monotonic() < deadline, (state.sync_status, state.health, state.health_message) if state else ""
            time.sleep(0.5)

    def state(self, name: str = "app") -> app_state.AppState:
        return app_state.load(self.store, self.real(name))[0]

    def live(self, kind: str, name: str, group: str = "", namespace: str | None = None) -> dict[str, Any] | None:
        from tidecd.base.model import ResourceKey

        ns = self.namespace if namespace is None else namespace
        return self.kube.get(ResourceKey(group, kind, ns, name))


@pytest.fixture()
def gitops(git_repo: Any, namespace: str, cluster: DevCluster, tmp_path: Path) -> Iterator[GitOps]:
    yield GitOps(git_repo, namespace, cluster, tmp_path)


def deployment(name: str, replicas: int = 1, image: str = "nginx:1.27", *,
               annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Deployment written the way users write them: defaults omitted."""
    meta: dict[str, Any] = {"name": name}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": name, "image": image}]}}}}


def service(name: str, **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta,
            "spec": {"selector": {"app": name}, "ports": [{"port": 80}]}}


def configmap(name: str, data: dict[str, str] | None = None, *,
              annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data or {"k": "v"}}


def job(name: str, command: str = "true", fail: bool = False, *,
        annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Job; kwok completes its pod. With `fail`, its pod can never be scheduled and the Job controller
    fails it after a short active deadline (DeadlineExceeded), as a real failing hook would end."""
    meta: dict[str, Any] = {"name": name}
    if annotations:
        meta["annotations"] = dict(annotations)
    pod: dict[str, Any] = {"restartPolicy": "Never",
                           "containers": [{"name": "run", "image": "busybox:1.36", "command": ["sh", "-c", command]}]}
    spec: dict[str, Any] = {"backoffLimit": 0, "template": {"spec": pod}}
    if fail:
        pod["nodeSelector"] = {"tidecd.test/unschedulable": "true"}
        spec["activeDeadlineSeconds"] = 3
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


Factory = Callable[..., GitOps]
