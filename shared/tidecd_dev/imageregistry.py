"""A real OCI registry for tests, the bench and demos: distribution's `registry` binary, images pushed by `crane`.

- `Registry(workdir, auth=...)` runs `registry serve` on a free port with filesystem storage: open,
  `auth="basic"` (htpasswd, bcrypt) or `auth="bearer"` (distribution's `token` auth, with the small
  `TokenServer` below as its realm: it checks basic credentials and signs RS256 JWTs that carry the
  certificate in `x5c`, which the registry verifies against its `rootcertbundle`).
- `CountingProxy(upstream)` forwards every request and counts them by kind (tags list, manifest, blob,
  token), which is how the bench shows one tags list per repository per tick.
- `push_image(...)` writes a one-layer OCI image layout (random content, chosen `created` time and
  platforms) and pushes it with `crane push`, so tags, digests and build times are whatever a test needs.

Dev tooling only: the product talks to registries over HTTP and never needs any of this.
"""

from __future__ import annotations

import base64
import collections
import datetime as dt
import hashlib
import io
import json
import os
import secrets
import subprocess
import tarfile
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

import requests

from tidecd.clients.tools import binary
from tidecd_dev.devcluster import free_port
from tidecd_dev.processes import stop_session

USERNAME = "robot"


def _wait(url: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            requests.get(url, timeout=1)
            return
        except requests.RequestException:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not start within {timeout:.0f}s")


class _Quiet(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's naming)
        pass


class _LoopbackServer:
    """An HTTP server on a free loopback port, served from a daemon thread between `start()` and `stop()`."""

    port: int
    _server: ThreadingHTTPServer
    _thread: threading.Thread

    def _listen(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.port = free_port()
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


# --- token server -----------------------------------------------------------------------------------------


class TokenServer(_LoopbackServer):
    """The realm of a bearer-auth registry: basic credentials in, a signed JWT for the asked scope out."""

    def __init__(self, workdir: Path, *, username: str, password: str, service: str = "tidecd-test-registry",
                 issuer: str = "tidecd-test-token") -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import NameOID

        self.username, self.password, self.service, self.issuer = username, password, service, issuer
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)])
        now = dt.datetime.now(dt.UTC)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(self.key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(days=1))
                .not_valid_after(now + dt.timedelta(days=30))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(self.key, hashes.SHA256()))
        self.cert_der = cert.public_bytes(serialization.Encoding.DER)
        self.cert_file = workdir / "token-cert.pem"
        self.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self.issued = 0
        self.refused = 0
        outer = self

        class Handler(_Quiet):
            def do_GET(self) -> None:  # noqa: N802
                outer._answer(self)

        self._listen(Handler)

    @property
    def realm(self) -> str:
        # A name, not an IP literal: crane refuses realms on loopback/private IP literals (SSRF guard).
        return f"http://localhost:{self.port}/token"

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        import hmac

        import jwt

        given = handler.headers.get("Authorization", "")
        user, password = "", ""
        if given.startswith("Basic "):
            user, _, password = base64.b64decode(given[6:]).decode().partition(":")
        if not (hmac.compare_digest(user, self.username) and hmac.compare_digest(password, self.password)):
            self.refused += 1
            handler.send_response(401)
            handler.send_header("WWW-Authenticate", 'Basic realm="token"')
            handler.end_headers()
            return
        query = parse_qs(urlsplit(handler.path).query)
        access = []
        for scope in query.get("scope", []):
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": user, "aud": self.service, "iat": now, "nbf": now - 5,
                  "exp": now + 300, "jti": uuid.uuid4().hex, "access": access}
        token = jwt.encode(claims, self.key, algorithm="RS256",
                           headers={"x5c": [base64.b64encode(self.cert_der).decode()]})
        self.issued += 1
        body = json.dumps({"token": token, "access_token": token, "expires_in": 300}).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)


# --- the registry -----------------------------------------------------------------------------------------


@dataclass
class Registry:
    """`registry serve` in `workdir`; `host` is `127.0.0.1:PORT` (plain HTTP: a loopback registry)."""

    workdir: Path
    auth: str = ""  # "", "basic" or "bearer"
    username: str = USERNAME
    password: str = field(default_factory=lambda: secrets.token_urlsafe(12))
    port: int = field(default_factory=free_port)
    token_server: TokenServer | None = None
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Registry:
        import yaml

        self.workdir.mkdir(parents=True, exist_ok=True)
        config: dict[str, Any] = {
            "version": 0.1, "log": {"level": "error", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self.workdir / "data")}, "delete": {"enabled": True}},
            "http": {"addr": self.host, "secret": secrets.token_hex(16)},
        }
        if self.auth == "basic":
            import bcrypt

            hashed = bcrypt.hashpw(self.password.encode(), bcrypt.gensalt(rounds=5)).decode()
            (self.workdir / "htpasswd").write_text(f"{self.username}:{hashed}\n")
            config["auth"] = {"htpasswd": {"realm": "tidecd-test", "path": str(self.workdir / "htpasswd")}}
        elif self.auth == "bearer":
            self.token_server = TokenServer(self.workdir, username=self.username, password=self.password).start()
            config["auth"] = {"token": {"realm": self.token_server.realm, "service": self.token_server.service,
                                        "issuer": self.token_server.issuer,
                                        "rootcertbundle": str(self.token_server.cert_file)}}
        (self.workdir / "config.yml").write_text(yaml.safe_dump(config))
        log = (self.workdir / "registry.log").open("ab")
        self._proc = subprocess.Popen([binary("registry"), "serve", str(self.workdir / "config.yml")],
                                      stdout=log, stderr=log, start_new_session=True)
        try:
            _wait(f"http://{self.host}/v2/")
        except RuntimeError:
            self.stop()
            log_text = (self.workdir / "registry.log").read_text()[-2000:]
            raise RuntimeError(f"registry did not start: {log_text}") from None
        return self

    def stop(self) -> None:
        if self._proc is not None:
            stop_session(self._proc)
        self._proc = None
        if self.token_server is not None:
            self.token_server.stop()
            self.token_server = None

    def __enter__(self) -> Registry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def docker_config(self) -> dict[str, Any]:
        """A `.dockerconfigjson` with this registry's credentials (for a pull secret), given to its token
        server's host too: tidecd sends a login only to the hosts it is configured for."""
        auth = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        hosts = [self.host] + ([urlsplit(self.token_server.realm).netloc] if self.token_server else [])
        return {"auths": {host: {"auth": auth} for host in hosts}}

    def crane_env(self) -> dict[str, str]:
        """The environment under which `crane` pushes with this registry's credentials."""
        folder = self.workdir / "docker-config"
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text(json.dumps(self.docker_config() if self.auth else {"auths": {}}))
        return {"DOCKER_CONFIG": str(folder)}


# --- a counting proxy -------------------------------------------------------------------------------------


class CountingProxy(_LoopbackServer):
    """Forwards to `upstream` (host:port) and counts requests: `tags` (tags lists), `manifests`, `blobs`."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.counts: collections.Counter[str] = collections.Counter()
        self.by_repository: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._session = requests.Session()
        outer = self

        class Handler(_Quiet):
            def do_GET(self) -> None:  # noqa: N802
                outer._forward(self, "GET")

            def do_HEAD(self) -> None:  # noqa: N802
                outer._forward(self, "HEAD")

        self._listen(Handler)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()
            self.by_repository.clear()

    def _forward(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        path = handler.path
        kind = ("tags" if "/tags/list" in path else "manifests" if "/manifests/" in path
                else "blobs" if "/blobs/" in path else "other")
        with self._lock:
            self.counts[kind] += 1
            if kind == "tags":
                self.by_repository[path.split("/v2/", 1)[-1].split("/tags/list", 1)[0]] += 1
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in ("host", "connection")}
        upstream = self._session.request(method, f"http://{self.upstream}{path}", headers=headers, timeout=30,
                                         allow_redirects=False)
        handler.send_response(upstream.status_code)
        for key, value in upstream.headers.items():
            if key.lower() not in ("connection", "transfer-encoding", "content-encoding", "content-length"):
                handler.send_header(key, value.replace(self.upstream, self.host))
        handler.send_header("Content-Length", str(len(upstream.content)))
        handler.end_headers()
        if method != "HEAD":
            handler.wfile.write(upstream.content)


# --- images -----------------------------------------------------------------------------------------------


def _blob(layout: Path, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _layer(seed: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        content = f"{seed}\n{secrets.token_hex(16)}\n".encode()
        info = tarfile.TarInfo("hello.txt")
        info.size, info.mtime = len(content), 0
        tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def push_image(ref: str, *, created: str = "", platforms: tuple[str, ...] = ("linux/amd64",),
               insecure: bool = True, index: bool | None = None, env: dict[str, str] | None = None) -> str:
    """Push a small random image (an index when several platforms, or `index=True`) as `ref`; its digest.

    `created` is the config's RFC 3339 build time (default: now). Uses `crane push` on an OCI layout."""
    when = created or dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    make_index = len(platforms) > 1 if index is None else index
    with tempfile.TemporaryDirectory(prefix="tidecd-image-") as tmp:
        layout = Path(tmp)
        (layout / "blobs" / "sha256").mkdir(parents=True)
        (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
        manifests = []
        for platform in platforms:
            os_name, arch, *variant = platform.split("/")
            layer = _blob(layout, _layer(f"{ref} {platform}"))
            diff_id = "sha256:" + hashlib.sha256((layout / "blobs" / "sha256" / layer["digest"][7:]).read_bytes()
                                                 ).hexdigest()
            config = {"created": when, "architecture": arch, "os": os_name,
                      "config": {"Labels": {"tidecd.test/ref": ref}},
                      "rootfs": {"type": "layers", "diff_ids": [diff_id]}}
            if variant:
                config["variant"] = variant[0]
            config_blob = _blob(layout, json.dumps(config).encode())
            manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config_blob},
                        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer}]}
            entry = {"mediaType": manifest["mediaType"], **_blob(layout, json.dumps(manifest).encode()),
                     "platform": {"os": os_name, "architecture": arch, **({"variant": variant[0]} if variant else {})}}
            manifests.append(entry)
        if make_index:
            image_index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                           "manifests": manifests}
            top = {"mediaType": image_index["mediaType"], **_blob(layout, json.dumps(image_index).encode())}
            (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))
        else:
            (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": manifests[:1]}))
        argv = [binary("crane"), "push", str(layout), ref]  # the layout's one descriptor: an image or an index
        if insecure:
            argv.append("--insecure")
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False,
                              env={**os.environ, **(env or {})})
        if proc.returncode != 0:
            raise RuntimeError(f"crane push {ref} failed: {proc.stderr.strip()[-500:]}")
        return proc.stdout.strip().rpartition("@")[2]


def crane(*args: str, insecure: bool = True, env: dict[str, str] | None = None) -> str:
    argv = [binary("crane"), *args] + (["--insecure"] if insecure else [])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise RuntimeError(f"crane {' '.join(args)} failed: {proc.stderr.strip()[-500:]}")
    return proc.stdout.strip()
