"""The bad-input corpus at the boundaries: the Kubernetes API, kubeconfigs, api bodies, unknown apps.

Each Kubernetes API failure class is produced by the real API server, not a stand-in:
- 401: a cluster secret with a token the server does not know;
- 403: a ServiceAccount token (TokenRequest) whose RBAC allows nothing but reading ConfigMaps in its own
  namespace;
- 404: a destination namespace that does not exist;
- 409 and 429: a real admission webhook (HTTPS on loopback, registered for the test's namespace only) that
  refuses with that code; the API server answers with it and the webhook's message;
- 413: a 30 MB ConfigMap (the server accepts about 3 MiB);
- 422: an invalid label value, and a Service whose immutable clusterIP changes (the hint: Replace=true,Force=true);
- 5xx: a webhook with failurePolicy Fail that cannot be reached (the server's own 500);
- TLS: a cluster secret whose CA is not the server's.
Each case asserts the message (the object's key and the server's Status message, no request body), that
nothing of the bad app was applied, that the good app still reconciles, and that an automated sync with a
retry policy retries temporary failures only (409, 429, 5xx), never permanent ones.
"""

from __future__ import annotations

import base64
import datetime as dt
import http.server
import ipaddress
import json
import re
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.apps import GitOps, configmap, service
from tidecd.base.constants import LABEL_SECRET_TYPE, SECRET_TYPE_CLUSTER
from tidecd.base.model import ResourceKey
from tidecd.clients.secrets import KeyPair, seal_secret
from tidecd.state.app import AppState
from tidecd_dev.devcluster import DevCluster

ANSWER = "reliability.tidecd.io/answer"  # label the webhook reads: the HTTP code it refuses with
RETRY = {"limit": 3, "backoff": {"duration": "1s", "factor": 2, "maxDuration": "5s"}}


# -- fixtures -----------------------------------------------------------------------------------------------


def _self_signed(host: str) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) for an IP address, valid now."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


@dataclass
class Webhook:
    url: str
    ca: bytes
    seen: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def webhook_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    """A validating admission webhook that refuses every object it is sent with the code its label names."""
    cert, key = _self_signed("127.0.0.1")
    folder = tmp_path_factory.mktemp("webhook")
    (folder / "tls.crt").write_bytes(cert)
    (folder / "tls.key").write_bytes(key)
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            request = review["request"]
            obj = request.get("object") or {}
            code = int(((obj.get("metadata") or {}).get("labels") or {}).get(ANSWER, "400"))
            seen.append(f"{request['operation']} {obj.get('kind')} {(obj.get('metadata') or {}).get('name')}")
            reason = {409: "Conflict", 429: "TooManyRequests"}.get(code, "BadRequest")
            body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
                "uid": request["uid"], "allowed": False,
                "status": {"code": code, "reason": reason, "message": f"reliability webhook says {code}"}}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "tls.crt", folder / "tls.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Webhook(f"https://127.0.0.1:{server.server_address[1]}/validate", cert, seen)
    finally:
        server.shutdown()
        server.server_close()


def b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def register_webhook(gitops: GitOps, url: str, ca: bytes) -> str:
    """A ValidatingWebhookConfiguration for ConfigMaps of the test's namespace that carry the ANSWER label."""
    name = f"reliability-{gitops.namespace}"
    gitops.kube.apply({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "refuse.reliability.tidecd.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail", "timeoutSeconds": 5, "clientConfig": {"url": url, "caBundle": b64(ca)},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                       "resources": ["configmaps"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": gitops.namespace}},
            "objectSelector": {"matchExpressions": [{"key": ANSWER, "operator": "Exists"}]},
        }],
    })
    return name


def cluster_secret(name: str, server: str, config: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": f"cluster-{name}", "namespace": "argocd",
                         "labels": {LABEL_SECRET_TYPE: SECRET_TYPE_CLUSTER}},
            "type": "Opaque", "stringData": {"name": name, "server": server, "config": json.dumps(config)}}


def restricted_token(gitops: GitOps) -> str:
    """A real ServiceAccount token that may only get/list/watch ConfigMaps in the test's namespace."""
    ns = gitops.namespace
    kube = gitops.kube
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "restricted", "namespace": ns}})
    kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "read-configmaps", "namespace": ns},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]})
    kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "restricted-reads", "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-configmaps"},
                "subjects": [{"kind": "ServiceAccount", "name": "restricted", "namespace": ns}]})
    answer = kube.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/restricted/token",
                          body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                "spec": {"expirationSeconds": 3600}})
    return str(answer["status"]["token"])


# -- the cases ----------------------------------------------------------------------------------------------


@dataclass
class Ctx:
    gitops: GitOps
    dev: DevCluster
    pair: KeyPair
    webhook: Webhook
    tmp: Path
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    def seal(self, name: str, server: str, config: dict[str, Any]) -> None:
        doc = seal_secret(cluster_secret(name, server, config), self.pair.cert_pem)
        (self.gitops.config_dir / f"cluster-{name}.yaml").write_text(yaml.safe_dump(doc))

    @property
    def ca(self) -> str:
        return b64((self.dev.workdir / "pki" / "ca.crt").read_bytes())


@dataclass
class Case:
    expect: str  # regex over the bad app's conditions and its operation's message
    temporary: bool  # retried by an automated sync with a retry policy
    files: dict[str, Any] = field(default_factory=dict)
    prepare: Callable[[Ctx], dict[str, Any]] | None = None  # returns extra spec for the bad app
    env: dict[str, str] = field(default_factory=dict)
    first: dict[str, Any] | None = None  # files synced (and applied) before the bad revision


def labelled(name: str, code: int) -> dict[str, Any]:
    obj = configmap(name)
    obj["metadata"]["labels"] = {ANSWER: str(code)}
    return obj


def _unknown_token(ctx: Ctx) -> dict[str, Any]:
    ctx.seal("stranger", ctx.dev.server, {"bearerToken": "not-a-token-the-server-knows",
                                          "tlsClientConfig": {"caData": ctx.ca}})
    return {"destination": {"name": "stranger", "namespace": ctx.gitops.namespace}}


def _restricted(ctx: Ctx) -> dict[str, Any]:
    ctx.seal("restricted", ctx.dev.server, {"bearerToken": restricted_token(ctx.gitops),
                                            "tlsClientConfig": {"caData": ctx.ca}})
    return {"destination": {"name": "restricted", "namespace": ctx.gitops.namespace}}


def _missing_namespace(ctx: Ctx) -> dict[str, Any]:
    return {"destination": {"name": "in-cluster", "namespace": f"missing-{ctx.gitops.namespace}"}}


def _webhook(ctx: Ctx) -> dict[str, Any]:
    name = register_webhook(ctx.gitops, ctx.webhook.url, ctx.webhook.ca)
    ctx.cleanups.append(lambda: ctx.gitops.kube.delete(
        ResourceKey("admissionregistration.k8s.io", "ValidatingWebhookConfiguration", "", name)))
    return {}


def _webhook_down(ctx: Ctx) -> dict[str, Any]:
    name = register_webhook(ctx.gitops, "https://127.0.0.1:9/validate", ctx.webhook.ca)  # nothing listens
    ctx.cleanups.append(lambda: ctx.gitops.kube.delete(
        ResourceKey("admissionregistration.k8s.io", "ValidatingWebhookConfiguration", "", name)))
    return {}


def _wrong_ca(ctx: Ctx) -> dict[str, Any]:
    other_ca, _ = _self_signed("127.0.0.1")
    pki = ctx.dev.workdir / "pki"
    ctx.seal("wrong-ca", ctx.dev.server, {"tlsClientConfig": {
        "caData": b64(other_ca), "certData": b64((pki / "admin.crt").read_bytes()),
        "keyData": b64((pki / "admin.key").read_bytes())}})
    return {"destination": {"name": "wrong-ca", "namespace": ctx.gitops.namespace}}


NS = r"t-[0-9a-f]{10}"
CASES: dict[str, Case] = {
    "401 a token the API server does not know": Case(
        files={"bad/cm.yaml": configmap("bad-cm")}, prepare=_unknown_token, temporary=False,
        expect=r"Unauthorized \(check the credentials of the cluster secret or kubeconfig\)"),
    "403 RBAC allows the token only reads": Case(
        files={"bad/cm.yaml": configmap("bad-cm")}, prepare=_restricted, temporary=False,
        expect=r'User "system:serviceaccount:' + NS + r':restricted" cannot (list|patch) resource "configmaps"'),
    "404 the destination namespace does not exist": Case(
        files={"bad/cm.yaml": configmap("bad-cm")}, prepare=_missing_namespace, temporary=False,
        expect=r'ConfigMap missing-' + NS + r'/bad-cm: .*namespaces "missing-' + NS + r'" not found'),
    "409 the API server answers Conflict": Case(
        files={"bad/cm.yaml": labelled("bad-cm", 409)}, prepare=_webhook, temporary=True,
        expect=r'ConfigMap ' + NS + r'/bad-cm: admission webhook "refuse\.reliability\.tidecd\.io" denied the '
               r'request: reliability webhook says 409'),
    "413 a 30 MB object": Case(
        files={"bad/huge.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad-huge}\ndata:\n  blob: "
                                + "x" * (30 * 10**6) + "\n"}, temporary=False,  # YAML text: no slow dump
        env={"TIDECD_MAX_OBJECT_BYTES": str(64 * 2**20), "TIDECD_MAX_FILE_BYTES": str(64 * 2**20)},
        expect=r"ConfigMap " + NS + r"/bad-huge: .*[Rr]equest entity too large"),
    "422 an invalid label value": Case(
        files={"bad/cm.yaml": {**configmap("bad-cm"), "metadata": {"name": "bad-cm", "labels": {"x": "no spaces!"}}}},
        temporary=False, expect=r"ConfigMap " + NS + r"/bad-cm: .*metadata\.labels: Invalid value"),
    "422 an immutable Service clusterIP (hint Replace=true,Force=true)": Case(
        first={"bad/svc.yaml": service("bad-svc")}, files={"bad/svc.yaml": "CLUSTER_IP"}, temporary=False,
        expect=r"Service " + NS + r"/bad-svc: .*(immutable|may not change).*"
               r"add the sync options Replace=true,Force=true"),
    "429 the API server answers TooManyRequests": Case(
        files={"bad/cm.yaml": labelled("bad-cm", 429)}, prepare=_webhook, temporary=True,
        expect=r'ConfigMap ' + NS + r'/bad-cm: admission webhook "refuse\.reliability\.tidecd\.io" denied the '
               r'request: reliability webhook says 429'),
    "5xx an admission webhook that cannot be reached": Case(
        files={"bad/cm.yaml": labelled("bad-cm", 400)}, prepare=_webhook_down, temporary=True,
        expect=r'ConfigMap ' + NS + r'/bad-cm: Internal error occurred: failed calling webhook '
               r'"refuse\.reliability\.tidecd\.io"'),
    "TLS the cluster secret's CA is not the server's": Case(
        files={"bad/cm.yaml": configmap("bad-cm")}, prepare=_wrong_ca, temporary=False,
        expect=r"API server https://127\.0\.0\.1:\d+: TLS verification failed \(check the cluster's CA data\)"),
}


def _moved_cluster_ip(gitops: GitOps) -> str:
    live = gitops.live("Service", "bad-svc")
    assert live is not None, "the first revision's Service was applied"
    ip = str(live["spec"]["clusterIP"])
    moved = ".".join([*ip.split(".")[:3], str((int(ip.split(".")[3]) + 7) % 250 + 1)])
    obj = service("bad-svc")
    obj["spec"].update({"clusterIP": moved, "clusterIPs": [moved]})
    return yaml.safe_dump(obj)


def _messages(state: AppState) -> str:
    texts = [f"{c['type']}: {c['message']}" for c in state.conditions]
    if state.operation is not None:
        texts.append(f"operation {state.operation.phase}: {state.operation.message}")
    return " | ".join(texts)


@pytest.mark.parametrize("name", list(CASES))
def test_api_failure(name: str, gitops: GitOps, cluster: DevCluster, sealing: tuple[KeyPair, Path],
                     webhook_server: Webhook, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    case = CASES[name]
    pair, keys = sealing
    ctx = Ctx(gitops, cluster, pair, webhook_server, tmp_path)
    for variable, value in case.env.items():
        monkeypatch.setenv(variable, value)
    try:
        _run_case(case, ctx, keys)
    finally:
        for cleanup in ctx.cleanups:
            cleanup()


def _run_case(case: Case, ctx: Ctx, keys: Path) -> None:
    gitops = ctx.gitops
    gitops.push({"good/cm.yaml": configmap("good-cm"), **(case.first or {})})
    good = gitops.application("good", path="good", automated={"prune": True})
    extra = case.prepare(ctx) if case.prepare else {}
    bad = gitops.application("bad", path="bad", automated={"prune": True}, retry=RETRY, extra_spec=extra)
    runtime = gitops.runtime(sealing_keys=str(keys))
    if case.first:
        gitops.reconcile("bad", runtime=runtime)
        assert gitops.state("bad").sync_status == "Synced", _messages(gitops.state("bad"))
    files = {k: (_moved_cluster_ip(gitops) if v == "CLUSTER_IP" else v) for k, v in case.files.items()}
    gitops.push(files)
    before = {k: v for k, v in _bad_objects(gitops).items()}
    outcome = gitops.reconcile("bad", runtime=runtime)
    state = gitops.state("bad")
    text = _messages(state)
    assert re.search(case.expect, text), text
    assert "xxxxxxxxxx" not in text, "no request body in the message"
    assert _bad_objects(gitops) == before, "nothing of the bad revision was applied"
    # retries only where they help: an automated sync with a retry policy
    op = state.operation
    if op is None:  # refused while comparing (credentials, TLS, RBAC on list): no operation, nothing scheduled
        assert not case.temporary and outcome.continue_after is None, text
    else:
        assert op.request.automated and op.phase == "Failed", text
        if case.temporary:
            assert op.retry.next_attempt_at > 0 and outcome.continue_after is not None, f"temporary, so retried: {text}"
        else:
            assert op.retry.next_attempt_at == 0 and not op.retry.retryable, f"permanent, so not retried: {text}"
            gitops.reconcile("bad", runtime=runtime)
            again = gitops.state("bad").operation
            assert again is not None and again.id == op.id, "no new automated attempt of the same revision"
    gitops.reconcile("good", runtime=runtime)
    assert gitops.state("good").sync_status == "Synced", _messages(gitops.state("good"))
    assert gitops.live("ConfigMap", "good-cm") is not None
    assert bad and good


def _bad_objects(gitops: GitOps) -> dict[str, str]:
    """Every bad-* object of the test's namespace and its resourceVersion."""
    found = {}
    for kind in ("ConfigMap", "Service"):
        for obj in gitops.kube.list("", kind, namespace=gitops.namespace):
            meta = obj["metadata"]
            if meta["name"].startswith("bad-"):
                found[f"{kind}/{meta['name']}"] = str(meta.get("resourceVersion"))
    return found




# -- kubeconfigs, api bodies, unknown apps, diff --server ---------------------------------------------------


def _session_secret(ctx: Ctx) -> dict[str, Any]:
    """The good app reaches the cluster through a cluster secret, so the bad app alone uses the kubeconfig."""
    pki = ctx.dev.workdir / "pki"
    ctx.seal("session", ctx.dev.server, {"tlsClientConfig": {
        "caData": ctx.ca, "certData": b64((pki / "admin.crt").read_bytes()),
        "keyData": b64((pki / "admin.key").read_bytes())}})
    return {"destination": {"name": "session", "namespace": ctx.gitops.namespace}}


@pytest.mark.parametrize("variant", ["missing", "broken"])
def test_a_missing_or_broken_kubeconfig_is_one_line(variant: str, gitops: GitOps, cluster: DevCluster,
                                                    sealing: tuple[KeyPair, Path], webhook_server: Webhook,
                                                    tmp_path: Path) -> None:
    pair, keys = sealing
    ctx = Ctx(gitops, cluster, pair, webhook_server, tmp_path)
    gitops.push({"good/cm.yaml": configmap("good-cm"), "bad/cm.yaml": configmap("bad-cm")})
    gitops.application("good", path="good", automated={"prune": True}, extra_spec=_session_secret(ctx))
    gitops.application("bad", path="bad", automated={"prune": True})
    kubeconfig = tmp_path / "kubeconfig"
    if variant == "broken":
        kubeconfig.write_text("apiVersion: v1\nclusters: [unclosed\nusers:\n- token: s3cr3t-token\n")
    runtime = gitops.runtime(sealing_keys=str(keys), kubeconfig=str(kubeconfig))
    outcome = gitops.reconcile("bad", runtime=runtime)
    state = gitops.state("bad")
    [condition] = [c for c in state.conditions if c["type"] == "ComparisonError"]
    what = "not found" if variant == "missing" else r"not valid YAML \(line \d+\)"
    assert re.fullmatch(rf"kubeconfig {re.escape(str(kubeconfig))}: {what}", condition["message"]), condition
    assert "s3cr3t" not in json.dumps(state.conditions) and outcome.continue_after is None
    assert state.operation is None and _bad_objects(gitops) == {}
    gitops.reconcile("good", runtime=runtime)
    assert gitops.state("good").sync_status == "Synced", _messages(gitops.state("good"))


def _api(runtime: Any, method: str, path: str, body: bytes = b"") -> Any:
    from tidecd.triggers.dispatch import ManualDispatcher
    from tidecd.usecases import api

    return api.handle(method, "/api/v1" + path, {"Authorization": "Bearer t", "Content-Type": "application/json"},
                      body, runtime, dispatcher=ManualDispatcher())


def test_bad_api_bodies_are_json_errors_naming_the_field_and_change_nothing(gitops: GitOps) -> None:
    gitops.push({"good/cm.yaml": configmap("good-cm"), "bad/cm.yaml": configmap("bad-cm")})
    gitops.application("good", path="good", automated={"prune": True})
    bad = gitops.application("bad", path="bad")
    runtime = gitops.runtime(api_token="t")
    nested = b'{"resources": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    for body, expect in [
        (b'{"resources": [1, 2]}', r"request body: resources\[0\]: 1 is not of type 'string'"),
        (nested, r"the request body is nested deeper than \d+ levels \(TIDECD_MAX_DEPTH\)"),
        (b'{"prune": "yes"}', r"request body: prune: 'yes' is not of type 'boolean'"),
        (b"{not json", r"not valid JSON|JSON"),
    ]:
        answer = _api(runtime, "POST", f"/apps/{bad}/sync", body)
        assert answer.status == 400, (body[:40], answer.body)
        assert set(answer.body) == {"error", "message"} and json.dumps(answer.body), answer.body
        assert re.search(expect, answer.body["message"]), (body[:40], answer.body)
    assert gitops.state("bad").operation is None, "no operation was started"
    assert _bad_objects(gitops) == {}
    gitops.reconcile("good", runtime=runtime)
    assert gitops.state("good").sync_status == "Synced"


def test_an_unknown_app_creates_nothing(gitops: GitOps) -> None:
    gitops.push({"good/cm.yaml": configmap("good-cm")})
    gitops.application("good", path="good", automated={"prune": True})
    runtime = gitops.runtime(api_token="t")
    for method, path in [("GET", "/apps/nope?refresh=true"), ("POST", "/apps/nope/sync"),
                         ("POST", "/apps/nope/refresh"), ("GET", "/apps/nope/history")]:
        route, _, query = path.partition("?")
        from tidecd.triggers.dispatch import ManualDispatcher
        from tidecd.usecases import api

        answer = api.handle(method, "/api/v1" + route, {"Authorization": "Bearer t"}, b"{}", runtime,
                            query=dict([query.split("=")]) if query else None, dispatcher=ManualDispatcher())
        assert answer.status == 404 and answer.body["error"] == "not_found", (path, answer.body)
        assert "nope" in answer.body["message"], answer.body
    assert gitops.store.list("state/apps/nope") == [] and gitops.store.list("leases/nope") == []
    gitops.reconcile("good", runtime=runtime)
    assert gitops.state("good").sync_status == "Synced"


def test_diff_through_a_running_api_is_a_fresh_comparison(gitops: GitOps, tmp_path: Path) -> None:
    """`tidecd app diff --server URL` compares again (the stored state said Synced; the cluster drifted)."""
    import os

    from typer.testing import CliRunner

    from tests.support.functions import Function
    from tidecd.cli import app as cli

    gitops.push({"good/cm.yaml": configmap("good-cm", {"k": "git"})})
    good = gitops.application("good", path="good", automated={"prune": True})
    gitops.reconcile("good")
    assert gitops.state("good").sync_status == "Synced"
    live = gitops.live("ConfigMap", "good-cm")
    assert live is not None
    gitops.kube.request("PATCH", f"/api/v1/namespaces/{gitops.namespace}/configmaps/good-cm",
                        body={"data": {"k": "edited by hand"}}, content_type="application/merge-patch+json")
    env = {**os.environ, "TIDECD_CONFIG": str(gitops.config_dir), "TIDECD_STORE": str(gitops.store.root),
           "KUBECONFIG": str(gitops.dev.kubeconfig), "TIDECD_API_TOKEN": "t"}
    function = Function("api", env, tmp_path)
    try:
        shown = CliRunner().invoke(cli, ["app", "diff", good, "--server", function.url, "--token", "t"])
    finally:
        function.stop()
    assert shown.exit_code == 1, shown.output  # out of sync, like `kubectl diff`
    assert f"ConfigMap {gitops.namespace}/good-cm" in shown.output and "edited by hand" in shown.output, shown.output
    assert gitops.state("good").sync_status == "OutOfSync"


def test_every_api_route_refuses_a_missing_or_wrong_token(gitops: GitOps) -> None:
    from tidecd.triggers.dispatch import ManualDispatcher
    from tidecd.usecases import api

    gitops.push({"good/cm.yaml": configmap("good-cm"), "bad/cm.yaml": configmap("bad-cm")})
    gitops.application("good", path="good", automated={"prune": True})
    bad = gitops.application("bad", path="bad")
    runtime = gitops.runtime(api_token="right-token")
    routes = [("GET", "/apps"), ("GET", f"/apps/{bad}"), ("GET", f"/apps/{bad}/diff"), ("GET", f"/apps/{bad}/history"),
              ("POST", f"/apps/{bad}/sync"), ("POST", f"/apps/{bad}/refresh"), ("POST", f"/apps/{bad}/rollback"),
              ("DELETE", f"/apps/{bad}/operation"), ("POST", "/images/check"), ("POST", f"/apps/{bad}/images/unpin")]
    for method, path in routes:
        for headers in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": "Basic right-token"}):
            answer = api.handle(method, "/api/v1" + path, headers, b"{}", runtime, dispatcher=ManualDispatcher())
            assert answer.status == 401 and answer.body["error"] == "unauthorized", (method, path, answer.body)
            assert "right-token" not in json.dumps(answer.body)
    assert gitops.store.list(f"state/apps/{bad}") == [] and _bad_objects(gitops) == {}
    gitops.reconcile("good", runtime=runtime)
    assert gitops.state("good").sync_status == "Synced"
