"""`tidecd import` of a running, real Argo CD v3.6.1 (issue 18, migration tooling).

Argo CD (`tidecd_dev.peers.ArgoCD`, built by scripts/tools.sh when missing, cached) runs in a namespace of
its own with 3 Applications, 1 AppProject of the test's (beside `default`), 1 repository Secret (the
credentials of the git server that requires basic auth) and 1 cluster Secret (the control plane again, by
its own URL and admin client certificate). It syncs them all. Then:

- `tidecd import` (the CLI, a subprocess) reads it with read verbs only: the resourceVersion of every object
  in Argo CD's namespace is the same before and after, and no object gained a field manager of the import;
- the config source it writes loads strictly, and no plaintext value of either Secret is in the output tree
  or in the temp directory the import ran with;
- the handover, as the README describes it: Argo CD's automated sync is turned off, and tidecd, given only
  the imported config source (`--adopt`: each app annotated `tidecd.io/adopt-from-argocd`) and its sealing
  key, takes the objects over in place: the same uids, the same fields as Argo CD made them (and as git
  says), tidecd's marks instead of Argo CD's; Argo CD's Applications are deleted without their finalizer
  and nothing is deleted; a later push reaches the cluster through tidecd alone.

A second, quicker test runs the CLI against Argo CD's CRDs alone (no controller, so nothing else writes):
broken objects are reported by name and field with exit code 1 while the rest is written, and a second
run into the same directory is refused.

Part of the Argo CD suite (`make test` runs it; Argo CD's build is part of the setup, never a skip).
"""

from __future__ import annotations

import base64
import json
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

from tests.support.cluster import release_argocd_finalizers, track_namespace
from tests.support.gitserver import AuthGitServer, GitRepo
from tidecd.base.constants import LABEL_SECRET_TYPE
from tidecd.base.model import ResourceKey
from tidecd.clients.cluster import KubeCluster
from tidecd.clients.secrets import generate_key, write_key_pair
from tidecd.clients.store import LocalStore
from tidecd.config.load import load_config
from tidecd.runtime import Runtime, Settings
from tidecd.step.reconcile import reconcile
from tidecd_dev.devcluster import DevCluster
from tidecd_dev.peers import ArgoCD, install_crds, share_dir

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
TIDECD = [sys.executable, "-m", "tidecd.cli"]
CLUSTER_NAME = "target"


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def manifests(namespace: str, app: str) -> list[dict[str, Any]]:
    """Each app's objects: a ConfigMap, plus a Deployment (app a) or a Service (app b)."""
    docs: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": f"{app}-settings", "namespace": namespace,
                                                "labels": {"tier": app}},
                                   "data": {"app": app, "greeting": f"hello from {app}"}}]
    if app == "a":
        docs.append({"apiVersion": "apps/v1", "kind": "Deployment",
                     "metadata": {"name": "a-web", "namespace": namespace},
                     "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "a-web"}},
                              "template": {"metadata": {"labels": {"app": "a-web"}},
                                           "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}})
    if app == "b":
        docs.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "b-svc", "namespace": namespace},
                     "spec": {"selector": {"app": "b"}, "ports": [{"port": 8080, "targetPort": 80}]}})
    return docs


def project_of(value: Any, shape: Any) -> Any:
    """`value` cut down to the fields `shape` (a manifest) names: what both tools were asked to make."""
    if isinstance(shape, dict) and isinstance(value, dict):
        return {k: project_of(value.get(k), v) for k, v in shape.items()}
    if isinstance(shape, list) and isinstance(value, list):
        return [project_of(v, s) for v, s in zip(value, shape, strict=False)]
    return value


def live_state(kube: KubeCluster, docs: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for doc in docs:
        key = ResourceKey.of(doc)
        live = kube.get(key)
        out[str(key)] = None if live is None else {"fields": project_of(live, doc),
                                                   "uid": live["metadata"]["uid"]}
    return out


def argo_namespace_versions(kube: KubeCluster, namespace: str) -> dict[str, str]:
    """resourceVersion of every object the import could touch in Argo CD's namespace."""
    versions = {}
    for group, kind in (("argoproj.io", "Application"), ("argoproj.io", "AppProject"), ("", "Secret"),
                        ("", "ConfigMap")):
        for obj in kube.list(group, kind, namespace=namespace):
            versions[f"{kind}/{obj['metadata']['name']}"] = obj["metadata"]["resourceVersion"]
    return versions


def managers(kube: KubeCluster, namespace: str) -> set[str]:
    found = set()
    for group, kind in (("argoproj.io", "Application"), ("argoproj.io", "AppProject"), ("", "Secret")):
        for obj in kube.list(group, kind, namespace=namespace):
            found |= {m.get("manager", "") for m in obj["metadata"].get("managedFields") or []}
    return found


def quiet_versions(kube: KubeCluster, namespace: str, timeout: float = 60.0) -> dict[str, str]:
    """Argo CD's controller writes status for a while after a sync: wait until nothing changes for 3 s."""
    deadline = time.monotonic() + timeout
    before = argo_namespace_versions(kube, namespace)
    while time.monotonic() < deadline:
        time.sleep(3)
        now = argo_namespace_versions(kube, namespace)
        if now == before:
            return now
        before = now
    pytest.fail(f"Argo CD's namespace kept changing for {timeout:.0f} s")


def sync_with_tidecd(runtime: Runtime, name: str, timeout: float = 180.0) -> Any:
    """Step the app as its continuations would, until its automated sync (of a new revision) finished."""
    deadline = time.monotonic() + timeout
    while True:
        outcome = reconcile(runtime, name, automate=True, budget=10.0)
        op = outcome.state.operation if outcome.state else None
        if op is not None and not op.running and outcome.state and outcome.state.sync_status == "Synced":
            return outcome.state
        if time.monotonic() > deadline:
            pytest.fail(f"tidecd did not finish syncing {name} within {timeout:.0f} s: "
                        f"{outcome.state.conditions if outcome.state else None}")
        time.sleep(min(outcome.continue_after or 0.5, 1.0))


def settle_with_tidecd(runtime: Runtime, name: str, timeout: float = 120.0) -> Any:
    """Reconcile until the app is Synced with no operation running (an adopted app needs no sync)."""
    deadline = time.monotonic() + timeout
    while True:
        outcome = reconcile(runtime, name, automate=True, budget=10.0)
        state = outcome.state
        op = state.operation if state else None
        if state is not None and state.sync_status == "Synced" and (op is None or not op.running):
            return state
        if time.monotonic() > deadline:
            pytest.fail(f"{name} did not settle Synced within {timeout:.0f} s: "
                        f"{state.conditions if state else None}")
        time.sleep(min(outcome.continue_after or 0.5, 1.0))


@pytest.fixture()
def argo_namespace(kubeconfig: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """Argo CD's namespace for one test; its Argo CD is stopped by the end, so the finalizers on the
    Applications and AppProjects left in it are dropped before the namespace is deleted."""
    name = f"argocd-import-{uuid.uuid4().hex[:6]}"
    track_namespace(name, request.node.nodeid)
    yield name
    kube = KubeCluster.from_kubeconfig(kubeconfig)
    release_argocd_finalizers(kube, name)
    kube.delete(ResourceKey("", "Namespace", "", name))


def test_import_of_a_running_argocd_syncs_to_the_same_state(
        argocd_built: Path, cluster: DevCluster, git_server_auth: AuthGitServer, namespace: str,
        argo_namespace: str, tmp_path: Path) -> None:
    kube = KubeCluster.from_kubeconfig(str(cluster.kubeconfig))
    suffix = uuid.uuid4().hex[:6]
    apps = {f"imp-a-{suffix}": "a", f"imp-b-{suffix}": "b", f"imp-c-{suffix}": "c"}
    project = f"team-{suffix}"

    repo_name = f"import-{suffix}"
    repo = GitRepo(git_server_auth, repo_name, tmp_path / "work", clone_url=git_server_auth.auth_url(repo_name))
    desired: list[dict[str, Any]] = []
    for app in apps.values():
        docs = manifests(namespace, app)
        desired += docs
        repo.write(f"apps/{app}/objects.yaml", yaml.safe_dump_all(docs))
    sha = repo.commit("three apps")
    repo.push()

    pki = cluster.workdir / "pki"
    password = git_server_auth.password
    cluster_config = json.dumps({"tlsClientConfig": {"caData": b64((pki / "ca.crt").read_bytes()),
                                                     "certData": b64((pki / "admin.crt").read_bytes()),
                                                     "keyData": b64((pki / "admin.key").read_bytes())}})
    key_body = (pki / "admin.key").read_text().splitlines()[1]  # a line of the private key itself
    plaintexts = [password, b64(password), key_body, json.loads(cluster_config)["tlsClientConfig"]["keyData"]]

    def secret(name: str, kind: str, values: dict[str, str]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": name, "namespace": argo_namespace, "labels": {LABEL_SECRET_TYPE: kind}},
                "stringData": values}

    def application(name: str, app: str) -> dict[str, Any]:
        destination = ({"name": CLUSTER_NAME, "namespace": namespace} if app == "c"
                       else {"server": "https://kubernetes.default.svc", "namespace": namespace})
        return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": name, "namespace": argo_namespace},
                "spec": {"project": project if app != "a" else "default",
                         "source": {"repoURL": repo.url, "targetRevision": "main", "path": f"apps/{app}"},
                         "destination": destination,
                         "syncPolicy": {"automated": {"prune": True, "selfHeal": True},
                                        "retry": {"limit": 2, "backoff": {"duration": "5s"}}}}}

    with ArgoCD(cluster.kubeconfig, tmp_path / "argocd", namespace=argo_namespace,
                reach=[git_server_auth.url]) as argo:
        argo.apply(secret(f"repo-{suffix}", "repository",
                          {"type": "git", "url": repo.url, "username": git_server_auth.username,
                           "password": password}))
        argo.apply(secret(f"cluster-{suffix}", "cluster",
                          {"name": CLUSTER_NAME, "server": cluster.server, "config": cluster_config}))
        argo.apply({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
                    "metadata": {"name": project, "namespace": argo_namespace},
                    "spec": {"sourceRepos": [repo.url],
                             "destinations": [{"server": "*", "namespace": namespace}],
                             "roles": [{"name": "ci", "policies": [f"p, proj:{project}:ci, applications, sync, "
                                                                   f"{project}/*, allow"]}]}})
        for name, app in apps.items():
            argo.apply(application(name, app))
        for name in apps:
            status = argo.wait_status(name, revision=sha, timeout=240)
            assert (status.sync, status.health) == ("Synced", "Healthy"), status
        by_argo = live_state(kube, desired)
        assert all(by_argo.values()), by_argo

        # -- import, while Argo CD runs ---------------------------------------------------------------------
        pair = generate_key()
        keys = tmp_path / "keys"
        keys.mkdir()
        write_key_pair(pair, keys / "tls.key", keys / "tls.crt")
        out, temp = tmp_path / "imported", tmp_path / "import-tmp"
        temp.mkdir()
        before = quiet_versions(kube, argo_namespace)
        managers_before = managers(kube, argo_namespace)
        started = time.monotonic()
        env = {**os.environ, "TMPDIR": str(temp), "HOME": str(temp), "KUBECONFIG": str(cluster.kubeconfig)}
        result = subprocess.run([*TIDECD, "import", "--namespace", argo_namespace, "--out", str(out),
                                 "--cert", str(keys / "tls.crt"), "--adopt"], env=env, capture_output=True, text=True,
                                timeout=120, check=False, cwd=tmp_path)
        took = time.monotonic() - started
        assert result.returncode == 0, result.stdout + result.stderr
        print(f"\n[import] tidecd import of 3 apps, 2 projects, 2 Secrets: {took:.2f} s (CLI subprocess)")
        assert argo_namespace_versions(kube, argo_namespace) == before, "the import changed Argo CD's objects"
        assert managers(kube, argo_namespace) == managers_before

        # -- what it wrote --------------------------------------------------------------------------------
        config = load_config(out)  # strict: any problem raises
        assert sorted(config.applications) == sorted(apps)
        assert sorted(config.projects) == sorted(["default", project])
        assert sorted(s["kind"] for s in config.secrets) == ["SealedSecret", "SealedSecret"]
        report = (out / "IMPORT-REPORT.md").read_text()
        assert result.stdout.startswith(report.rstrip("\n")[:200])
        assert f"AppProject/{project}: spec.roles" not in report  # honoured: tidecd's RBAC reads project roles
        assert [(r.name, r.policies) for r in config.projects[project].roles] == [
            ("ci", (f"p, proj:{project}:ci, applications, sync, {project}/*, allow",))]
        assert "## Not converted (0)" in report
        # argocd-secret is sealed when it holds login keys, else the report says there was nothing to seal
        assert (out / "settings" / "argocd-secret.yaml").is_file() or (
            f"Secret/{argo_namespace}/argocd-secret: not imported: it holds none of the keys" in report), report
        written = [p for base in (out, temp) for p in base.rglob("*") if p.is_file()]
        assert any(p.suffix == ".yaml" for p in written)
        for path in written:
            data = path.read_bytes()
            for plain in plaintexts:
                assert plain.encode() not in data, f"plaintext of a Secret in {path}"
        assert password not in result.stdout + result.stderr

        # -- the handover: Argo CD stops syncing, tidecd adopts in place, Argo CD lets go ---------------------
        for name in apps:
            argo.kube.merge_patch(argo.key(name), {"spec": {"syncPolicy": {"automated": None}}})
        store = LocalStore(tmp_path / "store")
        runtime = Runtime(settings=Settings(config=str(out), store=str(store.root),
                                            kubeconfig=str(cluster.kubeconfig), sealing_keys=str(keys)), store=store)
        for name in apps:
            state = settle_with_tidecd(runtime, name)
            assert state.sync_status == "Synced", (name, [(str(r.key), r.status) for r in state.resources],
                                                   state.conditions)
        by_tidecd = live_state(kube, desired)
        assert by_tidecd == by_argo  # the same objects (uids) with the same fields: adopted in place
        for doc in desired:
            assert by_tidecd[str(ResourceKey.of(doc))]["fields"] == doc  # and what git says
            marks = (kube.get(ResourceKey.of(doc)) or {})["metadata"].get("annotations") or {}
            assert "tidecd.io/tracking-id" in marks and "argocd.argoproj.io/tracking-id" not in marks, marks
        for name in apps:
            argo.delete_application(name, keep_resources=True)  # the step adopt prints: finalizer off, delete
        deadline = time.monotonic() + 60
        while any(argo.application(name) for name in apps):
            assert time.monotonic() < deadline, "Argo CD's Applications were not deleted"
            time.sleep(0.5)
        assert live_state(kube, desired) == by_argo  # Argo CD let go and deleted nothing

    # -- tidecd alone now: a push reaches the cluster -------------------------------------------------------
    changed = manifests(namespace, "a")
    changed[0]["data"]["greeting"] = "hello from tidecd"
    repo.write("apps/a/objects.yaml", yaml.safe_dump_all(changed))
    repo.commit("a: greeting")
    repo.push()
    name_a = next(name for name, app in apps.items() if app == "a")
    state = sync_with_tidecd(runtime, name_a)
    assert state.operation is not None and state.operation.phase == "Succeeded", state.operation
    live = kube.get(ResourceKey.of(changed[0]))
    assert live is not None and live["data"]["greeting"] == "hello from tidecd"
    assert live["metadata"]["uid"] == by_argo[str(ResourceKey.of(changed[0]))]["uid"]

def apply_crds(kube: KubeCluster) -> None:
    """Argo CD's CRDs from its module (tools.sh copies them beside the binary), Established."""
    install_crds(kube, sorted((share_dir("argocd") / "crds").glob("*.yaml")))


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
         "data": {"timeout.reconciliation": "300s", "statusbadge.enabled": "true"}},
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
    assert "ConfigMap/argocd-cm: data.statusbadge.enabled: not imported" in report  # a key tidecd does not have
    config = load_config(out)
    assert sorted(config.applications) == ["api", "web"]
    assert config.argo_settings.reconciliation_timeout == 300.0
    assert [s["metadata"]["name"] for s in config.secrets] == ["repo"]
    for path in [p for base in (out, temp) for p in base.rglob("*") if p.is_file()]:
        assert password.encode() not in path.read_bytes() and b64(password).encode() not in path.read_bytes()

    again = run()
    assert again.returncode == 2 and "is not empty; pass --force" in again.stderr
