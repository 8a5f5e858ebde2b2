"""A real local Kubernetes control plane for tests and the demo, the way controller-runtime's envtest runs one.

etcd and kube-apiserver on free loopback ports with freshly generated certificates and an admin kubeconfig;
with `kwok=True` also kube-controller-manager, kube-scheduler and kwok with a fake Node, so Deployments
become Available and Jobs complete without any container runtime. Everything lives in one directory and
every process is tracked by pid, so `stop()` leaves nothing behind.

Beside the admin (a client certificate) a second person can act: `alice@example.com`, a static token user
with the admin's rights (`user_kubeconfig`), so a test or the demo can make a change someone else made.
With `audit_webhook` (a URL, tidecd's webhook function's `/audit`) the API server sends its audit events
there, the way a production cluster's audit webhook backend does: the writes of `AUDIT_POLICY` (Metadata
level, no leases or events), in batches at most `AUDIT_MAX_WAIT` old, with the bearer token in
`audit_token` (give it to tidecd as TIDECD_AUDIT_TOKEN). client-go sends a token only over TLS, so a
plain-HTTP URL (a local function) gets a TLS front of the control plane's CA (`tidecd_dev.tlsproxy`).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tidecd.clients.tools import binary, cache_dir
from tidecd_dev.processes import alive, stop_pid

KWOK_NODE = "kwok-node-0"
KWOK_STAGES = Path(__file__).with_name("kwok_stages.yaml")
# Pod annotations the stages in KWOK_STAGES read: how long until a pod is Ready / a Job's pod ends.
READY_AFTER = "tidecd.test/ready-after"
COMPLETE_AFTER = "tidecd.test/complete-after"
FAIL_AFTER = "tidecd.test/fail-after"

USER = "alice@example.com"  # the second person (a static token user in group system:masters)
AUDIT_MAX_WAIT = "200ms"  # a batch of audit events leaves the API server at most this long after its first
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [
        {"level": "None", "userGroups": ["system:nodes"]},
        {"level": "None", "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]},
                                        {"group": "", "resources": ["events"]},
                                        {"group": "events.k8s.io", "resources": ["events"]}]},
        {"level": "Metadata", "verbs": ["create", "update", "patch", "delete"]},
        {"level": "None"},
    ],
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class DevCluster:
    """One control plane in `workdir`; `start()` then `stop()`, or use as a context manager."""

    workdir: Path
    kwok: bool = False
    pids: dict[str, int] = field(default_factory=dict)
    api_port: int = 0
    audit_webhook: str = ""  # the URL the API server posts its audit batches to ("": no audit backend)
    audit_proxy_port: int = 0  # the TLS front of a plain-HTTP `audit_webhook` (`tidecd_dev.tlsproxy`)

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def user_kubeconfig(self) -> Path:
        """A kubeconfig acting as `USER` (a token), not as the admin."""
        return self.workdir / "kubeconfig-user"

    @property
    def audit_token(self) -> str:
        """The bearer token the audit backend sends ("" without `audit_webhook`)."""
        path = self.workdir / "pki" / "audit-token"
        return path.read_text().strip() if path.exists() else ""

    @property
    def pod_log(self) -> Path:
        """The log kwok serves for every container (CRI lines: `TIME stdout F TEXT`): kwok runs no containers,
        so a test writes here what a container would have printed (`kwok` ClusterLogs)."""
        return self.workdir / "pod.log"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def __enter__(self) -> DevCluster:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            _write_pki(self.workdir / "pki")
            self._start_etcd()
            self._start_apiserver()
            self._write_kubeconfig()
            self._wait_ready(timeout)
            if self.kwok:
                self._start_kwok_stack()
                self._wait_kwok_ready(timeout)
            self.save_state()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """End every process this cluster started (by pid) and remove its directory."""
        for name in reversed(list(self.pids)):
            stop_pid(self.pids[name])
        self.pids.clear()
        _remove_tree(self.workdir)

    def save_state(self) -> None:
        state = {"pids": self.pids, "api_port": self.api_port, "kwok": self.kwok, "audit_webhook": self.audit_webhook,
                 "audit_proxy_port": self.audit_proxy_port}
        (self.workdir / "state.json").write_text(json.dumps(state))

    @classmethod
    def load(cls, workdir: Path) -> DevCluster:
        state = json.loads((workdir / "state.json").read_text())
        return cls(workdir=workdir, kwok=state["kwok"], pids=state["pids"], api_port=state["api_port"],
                   audit_webhook=state.get("audit_webhook", ""), audit_proxy_port=state.get("audit_proxy_port", 0))

    def is_running(self) -> bool:
        return bool(self.pids) and all(alive(pid) for pid in self.pids.values())

    # -- processes -------------------------------------------------------------------------------------

    def _port(self) -> int:
        """A free port, never the audit webhook's: that one was handed out before its server listens."""
        taken = urllib.parse.urlsplit(self.audit_webhook).port if self.audit_webhook else None
        while (port := free_port()) == taken:
            pass
        return port

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child process
        proc = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, **(env or {})},
        )
        log.close()
        self.pids[name] = proc.pid
        self.save_state()

    def _start_etcd(self) -> None:
        client, peer = self._port(), self._port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        self._spawn("etcd", [
            binary("etcd"), "--data-dir", str(self.workdir / "etcd"), "--name", "default",
            "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"default=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync", "--log-level", "warn",
        ])

    def stop_apiserver(self) -> None:
        """Stop only the API server (failure tests); `start_apiserver` brings it back on the same port."""
        stop_pid(self.pids.pop("kube-apiserver"))

    def pause_apiserver(self) -> None:
        """Freeze the API server (SIGSTOP; failure tests): its port stays open and the kernel still accepts
        connections, but nothing answers, as a hung or overloaded server. `resume_apiserver` lets it go on."""
        os.kill(self.pids["kube-apiserver"], signal.SIGSTOP)

    def resume_apiserver(self) -> None:
        os.kill(self.pids["kube-apiserver"], signal.SIGCONT)

    def start_apiserver(self, timeout: float = 60.0) -> None:
        self._start_apiserver(port=self.api_port)
        self._wait_ready(timeout)

    def _start_apiserver(self, port: int = 0) -> None:
        pki = self.workdir / "pki"
        self.api_port = port or self._port()
        self._spawn("kube-apiserver", [
            binary("kube-apiserver"), "--etcd-servers", self.etcd_url,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--secure-port", str(self.api_port),
            "--tls-cert-file", str(pki / "apiserver.crt"), "--tls-private-key-file", str(pki / "apiserver.key"),
            "--client-ca-file", str(pki / "ca.crt"), "--authorization-mode", "RBAC",
            "--service-cluster-ip-range", "10.0.0.0/24", "--allow-privileged=true",
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(pki / "sa.pub"),
            "--service-account-signing-key-file", str(pki / "sa.key"),
            "--enable-priority-and-fairness=false", "--profiling=false", "-v", "0",
            "--token-auth-file", str(pki / "tokens.csv"), *self._audit_args(),
            # kwok's node answers pods/log at its InternalIP (its name resolves nowhere)
            "--kubelet-preferred-address-types", "InternalIP",
        ])

    def _audit_args(self) -> list[str]:
        """The audit webhook backend's flags, its policy and kubeconfig written beside the certificates."""
        if not self.audit_webhook:
            return []
        pki = self.workdir / "pki"
        token = self.audit_token or secrets.token_hex(16)
        _private(pki / "audit-token", token)
        (pki / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        target = urllib.parse.urlsplit(self.audit_webhook)
        server: dict[str, str] = {"server": self.audit_webhook}
        if target.scheme == "http":  # client-go sends a token only over TLS: a TLS front of the CA's own
            if "audit-proxy" not in self.pids or not alive(self.pids["audit-proxy"]):
                self.audit_proxy_port = self.audit_proxy_port or self._port()
                self._spawn("audit-proxy", [
                    sys.executable, "-m", "tidecd_dev.tlsproxy", "--port", str(self.audit_proxy_port),
                    "--upstream", f"http://{target.netloc}", "--cert", str(pki / "apiserver.crt"),
                    "--key", str(pki / "apiserver.key")], env={"PYTHONPATH": str(Path(__file__).parents[1])})
            server = {"server": f"https://127.0.0.1:{self.audit_proxy_port}{target.path}",
                      "certificate-authority-data": base64.b64encode((pki / "ca.crt").read_bytes()).decode()}
        _private(pki / "audit-webhook.kubeconfig", yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "tidecd",
            "clusters": [{"name": "tidecd", "cluster": server}],
            "users": [{"name": "tidecd", "user": {"token": token}}],
            "contexts": [{"name": "tidecd", "context": {"cluster": "tidecd", "user": "tidecd"}}],
        }))
        return ["--audit-policy-file", str(pki / "audit-policy.yaml"),
                "--audit-webhook-config-file", str(pki / "audit-webhook.kubeconfig"),
                "--audit-webhook-mode", "batch", "--audit-webhook-batch-max-wait", AUDIT_MAX_WAIT,
                "--audit-webhook-initial-backoff", "1s"]

    def _start_kwok_stack(self) -> None:
        pki, kc = self.workdir / "pki", str(self.kubeconfig)
        self._spawn("kube-controller-manager", [
            binary("kube-controller-manager"), "--kubeconfig", kc, "--leader-elect=false",
            "--bind-address", "127.0.0.1", "--secure-port", str(self._port()),
            "--root-ca-file", str(pki / "ca.crt"), "--service-account-private-key-file", str(pki / "sa.key"),
            "--use-service-account-credentials=false", "--authentication-kubeconfig", kc,
            "--authorization-kubeconfig", kc, "--controllers", "*,-nodeipam,-service-lb-controller",
        ])
        self._spawn("kube-scheduler", [
            binary("kube-scheduler"), "--kubeconfig", kc, "--leader-elect=false",
            "--bind-address", "127.0.0.1", "--secure-port", str(self._port()),
            "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
        ])
        kubelet_port = self._port()
        self.pod_log.write_text("")
        (self.workdir / "kwok-logs.yaml").write_text(yaml.safe_dump(_cluster_logs(self.pod_log)))
        self._spawn("kwok", [
            # On a loaded machine kwok's heartbeat lags; a 40 s node lease keeps the fake node Ready.
            binary("kwok"), "--kubeconfig", kc, "--manage-all-nodes=true", "--node-lease-duration-seconds", "40",
            # kwok's kubelet endpoint (TLS: the API server proxies pods/log to it over https), on the node's
            # status as its port, so `kubectl logs` and tidecd's logs reach it
            "--server-address", f"127.0.0.1:{kubelet_port}", "--node-ip", "127.0.0.1",
            "--node-port", str(kubelet_port), "--tls-cert-file", str(pki / "apiserver.crt"),
            "--tls-private-key-file", str(pki / "apiserver.key"),
            # pod stages with delays a test asks for by annotation (tidecd.test/ready-after, ...); every
            # container's log is POD_LOG's lines (`pod_log`)
            "--config", str(KWOK_STAGES), "--config", str(self.workdir / "kwok-logs.yaml"),
        ])

    # -- readiness -------------------------------------------------------------------------------------

    def _get(self, path: str) -> tuple[int, bytes]:
        return self._request("GET", path)

    def _request(self, method: str, path: str, body: object = None) -> tuple[int, bytes]:
        pki = self.workdir / "pki"
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method,  # noqa: S310
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:  # noqa: S310
                return int(resp.status), bytes(resp.read())
        except urllib.error.HTTPError as exc:
            return int(exc.code), b""

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                if self._get("/readyz")[0] == 200:
                    return
            except (OSError, ssl.SSLError):
                pass
            time.sleep(0.2)
        raise TimeoutError(f"kube-apiserver not ready after {timeout}s; see {self.workdir}/kube-apiserver.log")

    def _wait_kwok_ready(self, timeout: float) -> None:
        """Register the fake Node and wait until kwok reports it Ready and the default ServiceAccount exists."""
        status, _ = self._request("POST", "/api/v1/nodes", _fake_node_manifest())
        if status not in (201, 409):
            raise RuntimeError(f"could not register the fake node {KWOK_NODE}: HTTP {status}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            status, body = self._get(f"/api/v1/nodes/{KWOK_NODE}")
            ready = status == 200 and any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in json.loads(body).get("status", {}).get("conditions", [])
            )
            if ready and self._get("/api/v1/namespaces/default/serviceaccounts/default")[0] == 200:
                return
            time.sleep(0.3)
        raise TimeoutError(f"kwok node not Ready after {timeout}s; see {self.workdir}/kwok.log")

    def _check_alive(self) -> None:
        for name, pid in self.pids.items():
            if not alive(pid):
                tail = (self.workdir / f"{name}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{name} exited during start:\n{tail}")

    def _write_kubeconfig(self) -> None:
        pki = self.workdir / "pki"
        self.kubeconfig.write_text(render_kubeconfig(
            self.server, (pki / "ca.crt").read_bytes(), (pki / "admin.crt").read_bytes(),
            (pki / "admin.key").read_bytes(), name="tidecd-dev",
        ))
        config = yaml.safe_load(render_kubeconfig(self.server, (pki / "ca.crt").read_bytes(), b"", b"",
                                                  name="tidecd-dev-user"))
        config["users"][0]["user"] = {"token": (pki / "user-token").read_text().strip()}
        _private(self.user_kubeconfig, yaml.safe_dump(config))


def render_kubeconfig(server: str, ca: bytes, cert: bytes, key: bytes, *, name: str) -> str:
    """A kubeconfig embedding its certificates, so it works from any directory."""
    import base64

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": b64(ca)}}],
        "users": [{"name": name, "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
    })


def _cluster_logs(path: Path) -> dict[str, object]:
    """kwok's ClusterLogs: every pod's every container logs the file `path`."""
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs", "metadata": {"name": "every-pod"},
            "spec": {"selector": {}, "logs": [{"logsFile": str(path), "follow": False}]}}


def _fake_node_manifest() -> dict[str, object]:
    capacity = {"cpu": "32", "memory": "256Gi", "pods": "1000"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": KWOK_NODE, "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "labels": {"type": "kwok", "kubernetes.io/hostname": KWOK_NODE}},
        "status": {"allocatable": capacity, "capacity": capacity},
    }


# -- certificates ----------------------------------------------------------------------------------------


def _write_pki(pki: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import NameOID

    pki.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)

    def key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    def name(cn: str, org: str | None = None) -> x509.Name:
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        if org:
            attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
        return x509.Name(attrs)

    def build(subject: x509.Name, public: object, issuer: x509.Name, signer: ec.EllipticCurvePrivateKey,
              *, ca: bool = False, sans: list[x509.GeneralName] | None = None, client: bool = False) -> bytes:
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
                   .public_key(public).serial_number(x509.random_serial_number())  # type: ignore[arg-type]
                   .not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(days=30))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        if not ca:
            usage = x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH if client else x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
            builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        return builder.sign(signer, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name("tidecd-dev-ca")
    (pki / "ca.crt").write_bytes(build(ca_name, ca_key.public_key(), ca_name, ca_key, ca=True))
    (pki / "ca.key").write_bytes(key_pem(ca_key))

    server_key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [
        x509.DNSName("localhost"), x509.DNSName("kubernetes"), x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
    ]
    (pki / "apiserver.crt").write_bytes(build(name("kube-apiserver"), server_key.public_key(), ca_name, ca_key,
                                              sans=sans))
    (pki / "apiserver.key").write_bytes(key_pem(server_key))

    admin_key = ec.generate_private_key(ec.SECP256R1())
    (pki / "admin.crt").write_bytes(build(name("admin", "system:masters"), admin_key.public_key(), ca_name,
                                          ca_key, client=True))
    (pki / "admin.key").write_bytes(key_pem(admin_key))

    user_token = secrets.token_hex(16)  # USER's: a static token with the admin's rights
    _private(pki / "user-token", user_token)
    _private(pki / "tokens.csv", f'{user_token},{USER},{USER.split("@")[0]},"system:masters"\n')

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (pki / "sa.key").write_bytes(key_pem(sa_key))
    (pki / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


# -- process helpers -------------------------------------------------------------------------------------


def _private(path: Path, text: str) -> None:
    """A file only its owner reads (tokens, kubeconfigs with a token)."""
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(text)


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def default_workdir(name: str = "dev") -> Path:
    """Where `tidecd dev cluster up` keeps a named cluster."""
    return cache_dir() / "clusters" / name
