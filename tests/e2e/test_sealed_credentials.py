"""Sealed credentials end to end: private repos, a second cluster known only through a sealed secret,
SealedSecrets among an app's manifests, and no plaintext secret anywhere tidecd writes or prints.

Everything is real: the git server with basic auth, two API servers with their own CAs, `kubeseal --cert`,
the CLI as a subprocess. The sealing key is generated per module into a `keys/` directory.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import logging
import os
import subprocess
import sys
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.apps import GitOps, configmap
from tests.support.cluster import ensure_tools
from tests.support.gitserver import AuthGitServer, GitRepo
from tests.support.kubeseal import kubeseal_binary, run_kubeseal
from tidecd.base.constants import LABEL_SECRET_TYPE, SECRET_TYPE_CLUSTER, SECRET_TYPE_REPOSITORY
from tidecd.base.model import ResourceKey
from tidecd.clients.cluster import KubeCluster
from tidecd.clients.secrets import KeyPair, seal_secret
from tidecd.runtime import Runtime
from tidecd.state.app import AppState
from tidecd.usecases import api
from tidecd.usecases.commands import SyncRequest
from tidecd_dev.devcluster import DevCluster

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PASSTHROUGH = "tidecd.io/sealed-secrets"
TOKEN = "api-token-" + uuid.uuid4().hex
SEALED_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "sealedsecrets.bitnami.com"},
    "spec": {
        "group": "bitnami.com",
        "scope": "Namespaced",
        "names": {"kind": "SealedSecret", "listKind": "SealedSecretList", "plural": "sealedsecrets",
                  "singular": "sealedsecret"},
        "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                      "schema": {"openAPIV3Schema": {"type": "object",
                                                     "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}


# -- fixtures ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kubeseal() -> str:
    return kubeseal_binary()


@pytest.fixture(scope="module")
def second(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """A second API server with its own CA, reachable only through a sealed cluster secret."""
    ensure_tools(["etcd", "kube-apiserver"])
    dev = DevCluster(workdir=tmp_path_factory.mktemp("second-cluster"), kwok=False)
    try:
        dev.start()
        yield dev
    finally:
        dev.stop()


@pytest.fixture(scope="module")
def sealed_crd(cluster: DevCluster) -> None:
    """The SealedSecret CRD on the session cluster (no controller), so passthrough objects can be applied."""
    kube = KubeCluster.from_kubeconfig(str(cluster.kubeconfig))
    kube.apply(SEALED_CRD)
    key = ResourceKey("apiextensions.k8s.io", "CustomResourceDefinition", "", "sealedsecrets.bitnami.com")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        conditions = ((kube.get(key) or {}).get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            return
        time.sleep(0.2)
    pytest.fail("the SealedSecret CRD did not become Established within 60 s")


@pytest.fixture()
def private(git_server_auth: AuthGitServer, namespace: str, cluster: DevCluster, tmp_path: Path) -> GitOps:
    """Like `gitops`, but the app repository is on the git server that requires basic auth."""
    name = f"private-{uuid.uuid4().hex[:10]}"
    repo = GitRepo(git_server_auth, name, tmp_path / "work", clone_url=git_server_auth.auth_url(name))
    (tmp_path / "private").mkdir()
    return GitOps(repo, namespace, cluster, tmp_path / "private")


# -- helpers ----------------------------------------------------------------------------------------------


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


def repo_secret(url: str, username: str, password: str) -> dict[str, Any]:
    """An Argo CD repository Secret (the fields `source.credentials_for` reads)."""
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "private-repo", "namespace": "argocd",
                         "labels": {LABEL_SECRET_TYPE: SECRET_TYPE_REPOSITORY}},
            "type": "Opaque",
            "stringData": {"type": "git", "url": url, "username": username, "password": password}}


def cluster_config(dev: DevCluster) -> str:
    pki = dev.workdir / "pki"
    tls = {"caData": b64((pki / "ca.crt").read_bytes()), "certData": b64((pki / "admin.crt").read_bytes()),
           "keyData": b64((pki / "admin.key").read_bytes())}
    return json.dumps({"tlsClientConfig": tls})


def cluster_secret(dev: DevCluster, name: str) -> dict[str, Any]:
    """An Argo CD cluster Secret for `dev`, authenticating with its admin client certificate."""
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": f"cluster-{name}", "namespace": "argocd",
                         "labels": {LABEL_SECRET_TYPE: SECRET_TYPE_CLUSTER}},
            "type": "Opaque",
            "stringData": {"name": name, "server": dev.server, "config": cluster_config(dev)}}


def app_secret(name: str, namespace: str, **values: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "type": "Opaque", "stringData": dict(values)}


def write_config(gitops: GitOps, filename: str, doc: dict[str, Any]) -> None:
    (gitops.config_dir / filename).write_text(yaml.safe_dump(doc))


def annotate_app(gitops: GitOps, name: str, annotations: dict[str, str]) -> None:
    path = gitops.config_dir / f"{gitops.real(name)}.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["metadata"]["annotations"] = annotations
    path.write_text(yaml.safe_dump(doc))


def _sync() -> SyncRequest:
    return SyncRequest()


def unique_app(prefix: str = "app") -> str:
    """App names are unique per test: objects of earlier tests' namespaces (deleted asynchronously) still
    carry their app's label and tracking id, and an app lists its objects cluster-wide, as Argo CD does."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def runtime(gitops: GitOps, keys: Path) -> Runtime:
    return gitops.runtime(sealing_keys=str(keys), api_token=TOKEN)


def condition_text(state: AppState) -> str:
    return " | ".join(f"{c['type']}: {c['message']}" for c in state.conditions)


def assert_synced(state: AppState) -> None:
    assert state.operation is not None, condition_text(state)
    assert state.operation.phase == "Succeeded", state.operation.message
    assert state.sync_status == "Synced", [(str(r.key), r.status, r.diff) for r in state.resources]


def seal_with_kubeseal(kubeseal: str, cert: Path, secret: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """`kubeseal --cert`, offline, strict scope."""
    args = ["--cert", str(cert), "--scope", "strict", "-o", "yaml"]
    result = run_kubeseal(kubeseal, workdir, args, yaml.safe_dump(secret))
    assert result.returncode == 0, result.stderr
    sealed: dict[str, Any] = yaml.safe_load(result.stdout)
    assert sealed["kind"] == "SealedSecret"
    return sealed


# -- 1. repository credentials ----------------------------------------------------------------------------


def test_private_repo_syncs_with_sealed_repository_credentials(
    private: GitOps, git_server_auth: AuthGitServer, sealing: tuple[KeyPair, Path]
) -> None:
    pair, keys = sealing
    private.push({"app/cm.yaml": configmap("from-private-repo")})
    app = private.application(unique_app())
    sealed = seal_secret(repo_secret(private.repo.url, git_server_auth.username, git_server_auth.password),
                         pair.cert_pem)
    write_config(private, "repo.yaml", sealed)

    private.reconcile(app, request=_sync(), runtime=runtime(private, keys))

    state = private.state(app)
    assert_synced(state)
    assert private.live("ConfigMap", "from-private-repo") is not None


def test_private_repo_without_or_with_wrong_credentials_records_a_comparison_error(
    private: GitOps, git_server_auth: AuthGitServer, sealing: tuple[KeyPair, Path]
) -> None:
    pair, keys = sealing
    private.push({"app/cm.yaml": configmap("never-applied")})
    app = private.application(unique_app())

    private.reconcile(app, request=_sync(), runtime=runtime(private, keys))
    missing = private.state(app)

    wrong_password = "wrong-" + uuid.uuid4().hex
    sealed = seal_secret(repo_secret(private.repo.url, git_server_auth.username, wrong_password), pair.cert_pem)
    write_config(private, "repo.yaml", sealed)
    private.reconcile(app, request=_sync(), runtime=runtime(private, keys))
    wrong = private.state(app)

    for state in (missing, wrong):
        assert [c["type"] for c in state.conditions] == ["ComparisonError"], condition_text(state)
        message = state.conditions[0]["message"]
        assert private.repo.url in message and "authentication failed" in message, message
        assert git_server_auth.password not in message and wrong_password not in message
        assert b64(wrong_password) not in message
        assert state.sync_status == "Unknown"
    assert private.live("ConfigMap", "never-applied") is None


def test_repository_secret_sealed_by_real_kubeseal(
    private: GitOps, git_server_auth: AuthGitServer, sealing: tuple[KeyPair, Path], kubeseal: str,
    tmp_path: Path,
) -> None:
    _, keys = sealing
    private.push({"app/cm.yaml": configmap("via-kubeseal")})
    app = private.application(unique_app())
    secret = repo_secret(private.repo.url, git_server_auth.username, git_server_auth.password)
    write_config(private, "repo.yaml", seal_with_kubeseal(kubeseal, keys / "tls.crt", secret, tmp_path))

    private.reconcile(app, request=_sync(), runtime=runtime(private, keys))

    assert_synced(private.state(app))
    assert private.live("ConfigMap", "via-kubeseal") is not None


# -- 2. a second cluster known only through a sealed cluster secret --------------------------------------------


@pytest.mark.parametrize("by", ["name", "server"])
def test_destination_cluster_from_sealed_cluster_secret(
    gitops: GitOps, second: DevCluster, sealing: tuple[KeyPair, Path], by: str
) -> None:
    pair, keys = sealing
    cm_name = f"on-second-by-{by}"
    gitops.push({"app/cm.yaml": configmap(cm_name)})
    destination = {"name": "second"} if by == "name" else {"server": second.server}
    app = gitops.application(unique_app(), extra_spec={"destination": {**destination, "namespace": gitops.namespace}},
                       sync_options=["CreateNamespace=true"])
    write_config(gitops, "cluster.yaml", seal_secret(cluster_secret(second, "second"), pair.cert_pem))

    gitops.reconcile(app, request=_sync(), runtime=runtime(gitops, keys))

    assert_synced(gitops.state(app))
    other = KubeCluster.from_kubeconfig(str(second.kubeconfig))
    assert other.get(ResourceKey("", "ConfigMap", gitops.namespace, cm_name)) is not None
    assert gitops.live("ConfigMap", cm_name) is None  # not on the session cluster


def test_unknown_destination_cluster_without_its_secret_is_a_condition(
    gitops: GitOps, second: DevCluster, sealing: tuple[KeyPair, Path]
) -> None:
    _, keys = sealing
    gitops.push({"app/cm.yaml": configmap("nowhere")})
    app = gitops.application(unique_app(),
                             extra_spec={"destination": {"name": "second", "namespace": gitops.namespace}})

    gitops.reconcile(app, request=_sync(), runtime=runtime(gitops, keys))

    state = gitops.state(app)
    assert [c["type"] for c in state.conditions] == ["ComparisonError"]
    assert "'second'" in state.conditions[0]["message"]


def _broken(secret: dict[str, Any], variant: str, session: DevCluster) -> dict[str, Any]:
    fields = secret["stringData"]
    config = json.loads(fields["config"])
    if variant == "wrong-ca":  # another cluster's CA: TLS verification must fail
        config["tlsClientConfig"]["caData"] = b64((session.workdir / "pki" / "ca.crt").read_bytes())
    elif variant == "config-not-json":
        fields["config"] = "{not json"
    elif variant == "config-not-object":
        fields["config"] = "[]"
        return secret
    elif variant == "key-not-base64":
        config["tlsClientConfig"]["keyData"] = "%%% not base64 %%%"
    elif variant == "name-not-text":
        secret["data"] = {"name": b64(b"\xff\xfe\xfd")}
        del fields["name"]
    if variant != "config-not-json":
        fields["config"] = json.dumps(config)
    return secret


@pytest.mark.parametrize("variant", ["wrong-ca", "config-not-json", "config-not-object", "key-not-base64",
                                     "name-not-text"])
def test_broken_cluster_secret_is_a_condition_without_key_material(
    gitops: GitOps, second: DevCluster, cluster: DevCluster, sealing: tuple[KeyPair, Path], variant: str
) -> None:
    pair, keys = sealing
    gitops.push({"app/cm.yaml": configmap("broken-dest")})
    where = {"name": "second"} if variant == "name-not-text" else {"server": second.server}
    app = gitops.application(unique_app(), sync_options=["CreateNamespace=true"],
                             extra_spec={"destination": {**where, "namespace": gitops.namespace}})
    secret = _broken(cluster_secret(second, "second"), variant, cluster)
    write_config(gitops, "cluster.yaml", seal_secret(secret, pair.cert_pem))

    gitops.reconcile(app, request=_sync(), runtime=runtime(gitops, keys))

    state = gitops.state(app)
    assert [c["type"] for c in state.conditions] == ["ComparisonError"], condition_text(state)
    message = state.conditions[0]["message"]
    assert ("cluster-second" in message or second.server in message), message
    key_pem = (second.workdir / "pki" / "admin.key").read_bytes()
    for needle in [b64(key_pem), *_pem_body_lines(key_pem)]:
        assert needle not in message
    other = KubeCluster.from_kubeconfig(str(second.kubeconfig))
    assert other.get(ResourceKey("", "ConfigMap", gitops.namespace, "broken-dest")) is None
    assert gitops.live("ConfigMap", "broken-dest") is None


# -- 3. SealedSecrets among the app's manifests ----------------------------------------------------------


def test_sealed_secret_in_manifests_is_applied_as_a_plain_secret(
    gitops: GitOps, sealing: tuple[KeyPair, Path]
) -> None:
    pair, keys = sealing
    password, token = "db-" + uuid.uuid4().hex, "tok-" + uuid.uuid4().hex
    sealed = seal_secret(app_secret("db-creds", gitops.namespace, password=password, token=token), pair.cert_pem)
    gitops.push({"app/secret.yaml": sealed, "app/cm.yaml": configmap("beside-secret")})
    app = gitops.application(unique_app())

    gitops.reconcile(app, request=_sync(), runtime=runtime(gitops, keys))

    state = gitops.state(app)
    assert_synced(state)
    live = gitops.live("Secret", "db-creds")
    assert live is not None
    assert live["data"] == {"password": b64(password), "token": b64(token)}
    assert live.get("type") == "Opaque"
    assert {(r.kind, r.name) for r in state.resources} == {("Secret", "db-creds"), ("ConfigMap", "beside-secret")}


def test_sealed_secret_in_manifests_without_a_sealing_key_is_a_clear_condition(
    gitops: GitOps, sealing: tuple[KeyPair, Path]
) -> None:
    pair, _ = sealing
    sealed = seal_secret(app_secret("db-creds", gitops.namespace, password="x-" + uuid.uuid4().hex), pair.cert_pem)
    gitops.push({"app/secret.yaml": sealed, "app/cm.yaml": configmap("without-key")})
    app = gitops.application(unique_app())

    gitops.reconcile(app, request=_sync(), runtime=gitops.runtime())

    state = gitops.state(app)
    assert [c["type"] for c in state.conditions] == ["ComparisonError"], condition_text(state)
    message = state.conditions[0]["message"]
    assert f"SealedSecret {gitops.namespace}/db-creds" in message and "TIDECD_SEALING_KEYS" in message, message
    assert gitops.live("ConfigMap", "without-key") is None


@pytest.mark.parametrize("moved", ["name", "namespace"])
def test_strict_sealed_secret_copied_elsewhere_is_refused_and_nothing_is_applied(
    gitops: GitOps, sealing: tuple[KeyPair, Path], moved: str
) -> None:
    pair, keys = sealing
    password = "db-" + uuid.uuid4().hex
    sealed = seal_secret(app_secret("db-creds", gitops.namespace, password=password), pair.cert_pem)
    if moved == "name":
        sealed["metadata"]["name"] = "db-copy"
        where = f"{gitops.namespace}/db-copy"
    else:
        sealed["metadata"]["namespace"] = "default"
        where = "default/db-creds"
    gitops.push({"app/secret.yaml": sealed, "app/cm.yaml": configmap("not-partially-applied")})
    app = gitops.application(unique_app())

    gitops.reconcile(app, request=_sync(), runtime=runtime(gitops, keys))

    state = gitops.state(app)
    assert [c["type"] for c in state.conditions] == ["ComparisonError"], condition_text(state)
    message = state.conditions[0]["message"]
    assert f"SealedSecret {where}" in message and "strict scope" in message, message
    assert password not in message and b64(password) not in message
    assert state.operation is None or state.operation.phase == "Failed"
    assert gitops.live("ConfigMap", "not-partially-applied") is None
    assert gitops.live("Secret", "db-creds") is None
    assert gitops.live("Secret", "db-copy") is None


def test_passthrough_applies_the_sealed_secret_object_itself(
    gitops: GitOps, sealing: tuple[KeyPair, Path], sealed_crd: None
) -> None:
    pair, keys = sealing
    sealed = seal_secret(app_secret("kept-sealed", gitops.namespace, password="p-" + uuid.uuid4().hex),
                         pair.cert_pem)
    gitops.push({"app/secret.yaml": sealed, "app/cm.yaml": configmap("beside-sealed")})
    app = gitops.application(unique_app())
    annotate_app(gitops, app, {PASSTHROUGH: "passthrough"})

    gitops.reconcile(app, request=_sync(), runtime=runtime(gitops, keys))

    assert_synced(gitops.state(app))
    live = gitops.live("SealedSecret", "kept-sealed", "bitnami.com")
    assert live is not None
    assert live["spec"]["encryptedData"] == sealed["spec"]["encryptedData"]
    assert live["spec"]["template"]["metadata"]["name"] == "kept-sealed"
    assert gitops.live("Secret", "kept-sealed") is None  # no controller: nothing unsealed it
    assert gitops.live("ConfigMap", "beside-sealed") is not None


# -- 4. no plaintext anywhere ---------------------------------------------------------------------------------


def _store_texts(root: Path) -> list[tuple[str, bytes]]:
    """Every file under the store, with compressed payloads (snapshots) also decompressed."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        raw = path.read_bytes()
        found.append((str(path.relative_to(root)), raw))
        start = raw.find(b"\x1f\x8b")
        if start >= 0:
            with contextlib.suppress(OSError, EOFError, zlib.error):
                found.append((f"{path.relative_to(root)} (gunzipped)", gzip.decompress(raw[start:])))
    return found


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidecd.cli", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300, check=False)


def _cli_json(run: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The JSON document of `-o json` output (log lines, if any, come before it)."""
    start = run.stdout.find("\n{") + 1 if not run.stdout.startswith("{") else 0
    doc: dict[str, Any] = json.loads(run.stdout[start:])
    return doc


def _found(needles: dict[str, str], text: str) -> list[str]:
    return [name for name, needle in needles.items() if needle in text]


def _needles(**values: str) -> dict[str, str]:
    """Each secret in plain and base64 form."""
    out: dict[str, str] = {}
    for name, value in values.items():
        out[name] = value
        out[f"{name} (base64)"] = b64(value)
    return out


def _pem_body_lines(pem: bytes) -> list[str]:
    return [line for line in pem.decode().splitlines() if line and not line.startswith("-----")]


def test_no_plaintext_secret_in_logs_store_api_or_cli(
    private: GitOps, git_server_auth: AuthGitServer, second: DevCluster, sealing: tuple[KeyPair, Path],
    sealed_crd: None, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    pair, keys = sealing
    ns = private.namespace
    db_old, db_new = "db-old-" + uuid.uuid4().hex, "db-new-" + uuid.uuid4().hex
    api_key, kept = "key-" + uuid.uuid4().hex, "kept-" + uuid.uuid4().hex
    # Config: sealed repository credentials and a sealed cluster secret for the second cluster.
    write_config(private, "repo.yaml", seal_secret(
        repo_secret(private.repo.url, git_server_auth.username, git_server_auth.password), pair.cert_pem))
    write_config(private, "cluster.yaml", seal_secret(cluster_secret(second, "second"), pair.cert_pem))
    # App "creds" on the second cluster with a sealed Secret; "copied" refuses a moved strict secret;
    # "kept" passes its SealedSecret through to the session cluster.
    db = app_secret("db-creds", ns, password=db_old, apiKey=api_key)
    copied = seal_secret(app_secret("db-creds", ns, password=db_old), pair.cert_pem)
    copied["metadata"]["name"] = "db-copy"
    private.push({
        "creds/secret.yaml": seal_secret(db, pair.cert_pem), "creds/cm.yaml": configmap("creds-cm"),
        "copied/secret.yaml": copied, "copied/cm.yaml": configmap("copied-cm"),
        "kept/secret.yaml": seal_secret(app_secret("kept", ns, value=kept), pair.cert_pem),
        "kept/cm.yaml": configmap("kept-cm"),
    })
    creds, copied_app, kept_app = (private.real(unique_app(n)) for n in ("creds", "copied", "kept"))
    private.application(creds, path="creds", sync_options=["CreateNamespace=true"],
                        extra_spec={"destination": {"name": "second", "namespace": ns}})
    private.application(copied_app, path="copied")
    private.application(kept_app, path="kept")
    annotate_app(private, kept_app, {PASSTHROUGH: "passthrough"})

    for name in (creds, copied_app, kept_app):
        private.reconcile(name, request=_sync(), runtime=runtime(private, keys))
    assert_synced(private.state(creds))
    assert_synced(private.state(kept_app))
    assert "strict scope" in condition_text(private.state(copied_app))
    second_kube = KubeCluster.from_kubeconfig(str(second.kubeconfig))
    live_db = second_kube.get(ResourceKey("", "Secret", ns, "db-creds"))
    assert live_db is not None and live_db["data"]["password"] == b64(db_old)

    # Change the Secret's value in git: the refresh must show it out of sync, masked.
    db["stringData"]["password"] = db_new
    private.push({"creds/secret.yaml": seal_secret(db, pair.cert_pem)}, message="rotate db password")
    answers: list[str] = []
    rt = runtime(private, keys)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    refreshed = api.handle("GET", f"/api/v1/apps/{creds}", auth, b"", rt, query={"refresh": "true"})
    for path in (f"/api/v1/apps/{creds}", f"/api/v1/apps/{creds}/diff", f"/api/v1/apps/{creds}/history",
                 f"/api/v1/apps/{copied_app}", f"/api/v1/apps/{kept_app}/diff"):
        answer = api.handle("GET", path, auth, b"", rt)
        assert answer.status == 200, (path, answer.body)
        answers.append(json.dumps(answer.body))
    assert refreshed.status == 200 and refreshed.body["syncStatus"] == "OutOfSync", refreshed.body
    answers.append(json.dumps(refreshed.body))
    diff = json.loads(answers[1])
    [secret_diff] = [c for c in diff["changes"] if c["resource"] == f"Secret {ns}/db-creds"]
    assert "data.password" in secret_diff["message"].split(", "), secret_diff
    assert "data.apiKey" not in secret_diff["message"]

    env = {**os.environ, "TIDECD_CONFIG": str(private.config_dir), "TIDECD_STORE": str(private.store.root),
           "TIDECD_SEALING_KEYS": str(keys), "KUBECONFIG": str(private.dev.kubeconfig)}
    cli_runs = {
        "app get creds": _cli(["app", "get", creds, "-o", "json"], env),
        "app diff creds": _cli(["app", "diff", creds, "-o", "json"], env),
        "app diff creds (text)": _cli(["app", "diff", creds], env),
        "app get copied": _cli(["app", "get", copied_app, "-o", "json"], env),
        "app history creds": _cli(["app", "history", creds, "-o", "json"], env),
    }
    assert cli_runs["app get creds"].returncode == 0, cli_runs["app get creds"].stderr
    assert _cli_json(cli_runs["app get creds"])["syncStatus"] == "OutOfSync"
    assert cli_runs["app diff creds"].returncode == 1, cli_runs["app diff creds"].stderr  # out of sync
    assert [r["resource"] for r in _cli_json(cli_runs["app diff creds"])["changes"]] == [f"Secret {ns}/db-creds"]
    assert "strict scope" in json.dumps(_cli_json(cli_runs["app get copied"])["conditions"])
    assert "data.password" in cli_runs["app diff creds (text)"].stdout

    captured = capsys.readouterr()
    assert "reconciled" in captured.out + captured.err + caplog.text  # the capture did see tidecd's logs
    pki = second.workdir / "pki"
    key_pem = (pki / "admin.key").read_bytes()
    needles = _needles(repo_password=git_server_auth.password, db_old=db_old, db_new=db_new,
                       api_key=api_key, kept=kept, key_pem=key_pem.decode(),
                       cluster_config=cluster_config(second))
    needles.update({f"client key PEM line {i}": line for i, line in enumerate(_pem_body_lines(key_pem))})

    sources: list[tuple[str, str]] = [("stdout", captured.out), ("stderr", captured.err),
                                      ("log records", caplog.text),
                                      ("log args", "\n".join(repr(r.args) + repr(r.msg) for r in caplog.records))]
    sources += [(f"api answer {i}", text) for i, text in enumerate(answers)]
    for what, run in cli_runs.items():
        sources += [(f"cli {what} stdout", run.stdout), (f"cli {what} stderr", run.stderr)]
    store_files = _store_texts(private.store.root)
    assert any(name.startswith(f"state/apps/{creds}") for name, _ in store_files)
    assert any("gunzipped" in name for name, _ in store_files)  # the snapshot was looked into
    # Positive controls: the scan finds the secrets where they are meant to be (the live Secret, a kubeconfig).
    assert "db_old (base64)" in _found(needles, json.dumps(live_db))
    assert "key_pem (base64)" in _found(needles, second.kubeconfig.read_text())
    leaks = [f"{name} in {where}" for where, text in sources for name in _found(needles, text)]
    leaks += [f"{name} in store file {file}" for file, data in store_files
              for name in _found(needles, data.decode("latin-1"))]
    assert not leaks, leaks
