"""The repository's example apps (examples/apps + examples/config) deployed into the session's control
plane, one copy per test: app names get the test's suffix and each app its own namespace, so tests
never see each other's apps.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.apps import GitOps
from tidecd_dev.tools import ensure

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDER_REPO = "http://git.tidecd.local/examples.git"
PLACEHOLDER_REPOS = "http://git.tidecd.local/*"


@dataclass
class Examples:
    gitops: GitOps
    apps: dict[str, str] = field(default_factory=dict)  # example name → this test's app name
    namespaces: dict[str, str] = field(default_factory=dict)  # example name → its namespace

    def sync_all(self, timeout: float = 240.0) -> None:
        """Reconcile every app (their automated policies sync them) until each is Synced and Healthy."""
        deadline = time.monotonic() + timeout
        pending = set(self.apps.values())
        while pending and time.monotonic() < deadline:
            for name in sorted(pending):
                self.gitops.reconcile(name)
                current = self.gitops.state(name)
                running = current.operation is not None and str(current.operation.phase) in ("Running",
                                                                                             "Terminating")
                if current.sync_status == "Synced" and current.health == "Healthy" and not running:
                    pending.discard(name)
            if pending:
                time.sleep(0.5)
        if pending:
            states = {n: (self.gitops.state(n).sync_status, self.gitops.state(n).health) for n in pending}
            raise AssertionError(f"example apps not Synced and Healthy after {timeout}s: {states}")


def deploy_examples(gitops: GitOps) -> Examples:
    ensure(["helm", "kustomize"])
    shutil.copytree(ROOT / "examples" / "apps", gitops.repo.workdir / "apps")
    gitops.repo.commit("examples")
    gitops.repo.push()
    found = Examples(gitops)
    repos = gitops.repo.url.rsplit("/", 1)[0] + "/*"
    for path in sorted((ROOT / "examples" / "config").glob("*.yaml")):
        text = path.read_text().replace(PLACEHOLDER_REPO, gitops.repo.url).replace(PLACEHOLDER_REPOS, repos)
        docs: list[Any] = [d for d in yaml.safe_load_all(text) if d]
        for doc in docs:
            if doc.get("kind") == "Application":
                original = doc["metadata"]["name"]
                doc["metadata"]["name"] = found.apps[original] = gitops.real(original)
                namespace = f"{gitops.namespace}-{doc['spec']['destination']['namespace']}"
                doc["spec"]["destination"]["namespace"] = found.namespaces[original] = namespace
        (gitops.config_dir / path.name).write_text(yaml.safe_dump_all(docs))
    return found


@pytest.fixture()
def examples(gitops: GitOps) -> Iterator[Examples]:
    """The three example apps, synced (their PreSync hook, waves, helm and kustomize included)."""
    found = deploy_examples(gitops)
    try:
        found.sync_all()
        yield found
    finally:
        from kubernetes import client

        core = client.CoreV1Api(gitops.kube.api)
        for namespace in found.namespaces.values():
            try:
                core.delete_namespace(namespace)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
