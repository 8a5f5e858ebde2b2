"""`tidecd import` against Argo CD's real CRDs (issue 18, migration tooling).

Argo CD's CRDs (from its module: scripts/tools.sh copies them beside the binary it builds, cached; never a
skip) on the session control plane, with Applications, AppProjects, Secrets and argocd-cm created in a
namespace of the test's, and no controller, so nothing else writes there. The CLI (a subprocess) reports
each broken object by name and field and exits 1 while the rest is written and loads strictly; the
resourceVersion of every object in that namespace is unchanged; no Secret value is in the output or in
the temp directory it ran with; a second run into the same directory is refused (exit 2).
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidecd.cluster import KubeCluster
from tidecd.config import load_config
from tidecd.constants import LABEL_SECRET_TYPE
from tidecd.model import ResourceKey
from tidecd.secrets import generate_key, write_key_pair
from tidecd_dev.devcluster import DevCluster
from tidecd_dev.peers import share_dir

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
TIDECD = [sys.executable, "-m", "tidecd.cli"]
CLUSTER_NAME = "target"


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def argo_namespace_versions(kube: KubeCluster, namespace: str) -> dict[str, str]:
    """resourceVersion of every object the import could touch in Argo CD's namespace."""
    versions = {}
    for group, kind in (("argoproj.io", "Application"), ("argoproj.io", "AppProject"), ("", "Secret"),
                        ("", "ConfigMap")):
        for obj in kube.list(group, kind, namespace=namespace):
            versions[f"{kind}/{obj['metadata']['name']}"] = obj["metadata"]["resourceVersion"]
    return versions


@pytest.fixture()
def argo_namespace(kubeconfig: str) -> Iterator[str]:
    name = f"argocd-import-{uuid.uuid4().hex[:6]}"
    yield name
    KubeCluster.from_kubeconfig(kubeconfig).delete(ResourceKey("", "Namespace", "", name))


def apply_crds(kube: KubeCluster) -> None:
    """Argo CD's CRDs from its module (tools.sh copies them beside the binary), Established."""
    names = []
    for path in sorted((share_dir("argocd") / "crds").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                kube.apply(doc)
                names.append(doc["metadata"]["name"])
    deadline = time.monotonic() + 60
    for name in names:
        key = ResourceKey("apiextensions.k8s.io", "CustomResourceDefinition", "", name)
        while not any(c.get("type") == "Established" and c.get("status") == "True"
                      for c in ((kube.get(key) or {}).get("status") or {}).get("conditions") or []):
            assert time.monotonic() < deadline, f"CRD {name} not Established"
            time.sleep(0.2)
    kube.resources(refresh=True)


def test_import_reports_bad_objects_by_name_and_changes_nothing(
        argocd_built: Path, cluster: DevCluster, argo_namespace: str, tmp_path: Path) -> None:
    kube = KubeCluster.from_kubeconfig(str(cluster.kubeconfig))
    apply_crds(kube)
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": argo_namespace}})
    password = "pw-" + uuid.uuid4().hex

    def app(name: str, **spec: Any) -> dict[str, Any]:
        body = {"project": "default", "destination": {"server": "https://kubernetes.default.svc", "namespace": "x"},
                "source": {"repoURL": "https://git.example.com/org/apps.git", "path": name}, **spec}
        return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": name, "namespace": argo_namespace,
                             "finalizers": ["resources-finalizer.argocd.argoproj.io"]},
                "spec": body, "status": {"sync": {"status": "Synced"}, "health": {"status": "Healthy"}},
                "operation": {"sync": {"revision": "HEAD"}}}

    plugin = app("plugged")
    plugin["spec"]["source"]["plugin"] = {"name": "cdk8s"}
    objects: list[dict[str, Any]] = [
        {"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
         "metadata": {"name": "default", "namespace": argo_namespace},
         "spec": {"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}],
                  "clusterResourceWhitelist": [{"group": "*", "kind": "*"}]}},
        app("web", revisionHistoryLimit=3), app("api"), plugin, app("lost", project="nowhere"),
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"name": "repo", "namespace": argo_namespace, "labels": {LABEL_SECRET_TYPE: "repository"}},
         "stringData": {"url": "https://git.example.com/org/apps.git", "password": password, "project": "p"}},
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"name": "local", "namespace": argo_namespace, "labels": {LABEL_SECRET_TYPE: "cluster"}},
         "stringData": {"name": "local", "server": "https://kubernetes.default.svc", "config": "{}"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argocd-cm", "namespace": argo_namespace},
         "data": {"timeout.reconciliation": "300s", "url": "https://argocd.example.com"}},
    ]
    for obj in objects:
        kube.apply(obj)
    before = argo_namespace_versions(kube, argo_namespace)
    temp, out = tmp_path / "tmp", tmp_path / "out"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "KUBECONFIG": str(cluster.kubeconfig)}
    keys = tmp_path / "keys"
    keys.mkdir()
    pair = generate_key()
    write_key_pair(pair, keys / "tls.key", keys / "tls.crt")
    env["TIDECD_SEALING_KEYS"] = str(keys)  # the active certificate of the key directory, no --cert

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run([*TIDECD, "import", "-n", argo_namespace, "--out", str(out)], env=env, text=True,
                              capture_output=True, timeout=120, check=False)

    result = run()
    assert result.returncode == 1, result.stdout + result.stderr
    assert argo_namespace_versions(kube, argo_namespace) == before
    report = (out / "IMPORT-REPORT.md").read_text()
    assert "## Not converted (2)" in report, report
    assert "Application/plugged: spec.source.plugin: not converted: a config-management plugin" in report
    assert "Application/lost: spec.project: not converted: AppProject 'nowhere' does not exist" in report
    assert f"Secret/{argo_namespace}/local: data.server: not imported: https://kubernetes.default.svc" in report
    assert "Application/web: spec.revisionHistoryLimit: kept, ignored by tidecd" in report
    assert f"Secret/{argo_namespace}/repo: data.project: kept (sealed), not honoured" in report
    assert "ConfigMap/argocd-cm: data.url: not imported" in report
    config = load_config(out)
    assert sorted(config.applications) == ["api", "web"]
    assert config.argo_settings.reconciliation_timeout == 300.0
    assert [s["metadata"]["name"] for s in config.secrets] == ["repo"]
    for path in [p for base in (out, temp) for p in base.rglob("*") if p.is_file()]:
        assert password.encode() not in path.read_bytes() and b64(password).encode() not in path.read_bytes()

    again = run()
    assert again.returncode == 2 and "is not empty; pass --force" in again.stderr
