"""Where a registry credential may go, on both paths that use the one OCI client: the chart/artifact source
(`source.oci`, through `source.charts`) and the image updater (`usecases.images`). Two small HTTP servers on
127.0.0.1: the registry, and "elsewhere" on another port (another origin) that the registry names as its
token realm, its tags `Link`, or a blob redirect. Elsewhere must never see a credential."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support import localhttp
from tests.unit.test_images import Sent, app_doc, make_runtime, rendered, results
from tidecd.clients.registry import Credentials, HttpRegistry, Repository, docker_config_auths
from tidecd.images import annotations as notes
from tidecd.source import charts, oci
from tidecd.source.git import RepoCredentials
from tidecd.usecases import images as update

USER, PASSWORD = "robot", "topsecret-0123"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
TOKEN = "tok-anonymous"


def _layer() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        data = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"
        info = tarfile.TarInfo("app/cm.yaml")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


LAYER = _layer()
LAYER_DIGEST = "sha256:" + hashlib.sha256(LAYER).hexdigest()
MANIFEST = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": LAYER_DIGEST,
                                  "size": 2},
                       "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                   "digest": LAYER_DIGEST, "size": len(LAYER)}]}).encode()


@dataclass
class Server:
    """One loopback HTTP server; `seen` is every (path, Authorization header) it was asked."""

    mode: str  # registry: "realm" (bearer realm elsewhere), "link" (basic auth, a tags Link elsewhere); or "elsewhere"
    peer: Server | None = None
    seen: list[tuple[str, str]] = field(default_factory=list)
    httpd: ThreadingHTTPServer | None = None

    @property
    def host(self) -> str:
        assert self.httpd is not None
        return f"127.0.0.1:{self.httpd.server_address[1]}"

    def answer(self, req: BaseHTTPRequestHandler) -> None:
        auth = req.headers.get("Authorization", "")
        self.seen.append((req.path, auth))
        if self.mode == "elsewhere":
            if req.path.startswith("/token"):
                _send(req, 200, json.dumps({"token": TOKEN}).encode())
            elif req.path.startswith("/blob"):
                _send(req, 200, LAYER)
            else:
                _send(req, 200, json.dumps({"tags": ["9.9.9"]}).encode())
            return
        assert self.peer is not None
        wanted = f"Bearer {TOKEN}" if self.mode == "realm" else BASIC
        if auth != wanted:
            challenge = (f'Bearer realm="http://{self.peer.host}/token",service="reg"' if self.mode == "realm"
                         else 'Basic realm="reg"')
            _send(req, 401, b"", {"WWW-Authenticate": challenge})
        elif "/tags/list" in req.path:
            link = f'<http://{self.peer.host}/v2/team/app/tags/list?last=1.0.1>; rel="next"'
            _send(req, 200, json.dumps({"tags": ["1.0.0", "1.0.1"]}).encode(),
                  {"Link": link} if self.mode == "link" else {})
        elif "/manifests/" in req.path:
            _send(req, 200, MANIFEST, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
        elif "/blobs/" in req.path:
            _send(req, 307, b"", {"Location": f"http://{self.peer.host}/blob/{LAYER_DIGEST}"})
        else:
            _send(req, 404, b"")

    def start(self) -> Server:
        self.httpd = localhttp.serve_get(self.answer)
        return self

    def stop(self) -> None:
        localhttp.stop(self.httpd)


def _send(req: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
    req.send_response(status)
    for key, value in (headers or {}).items():
        req.send_header(key, value)
    req.send_header("Content-Length", str(len(body)))
    req.end_headers()
    req.wfile.write(body)


@pytest.fixture(params=["realm", "link"])
def servers(request: pytest.FixtureRequest) -> Iterator[tuple[Server, Server]]:
    elsewhere = Server("elsewhere").start()
    registry = Server(str(request.param), peer=elsewhere).start()
    yield registry, elsewhere
    registry.stop()
    elsewhere.stop()


def _no_credentials_elsewhere(registry: Server, elsewhere: Server) -> None:
    assert all(auth == "" for _, auth in elsewhere.seen), elsewhere.seen
    if registry.mode == "realm":
        assert any(p.startswith("/token") for p, _ in elsewhere.seen)  # asked, anonymously
        assert (f"Bearer {TOKEN}" in {auth for _, auth in registry.seen})
    else:
        assert not any("/tags/list" in p for p, _ in elsewhere.seen)  # a Link to another origin is not followed
        assert BASIC in {auth for _, auth in registry.seen}  # the registry itself did get them


def test_chart_source_sends_no_credentials_to_another_origin(servers: tuple[Server, Server]) -> None:
    registry, elsewhere = servers
    url = f"oci://{registry.host}/team/app"
    creds = RepoCredentials(username=USER, password=PASSWORD)

    assert charts.list_refs(charts.OCI, url, creds) == {"1.0.0": "1.0.0", "1.0.1": "1.0.1"}
    archive, digest, is_chart = oci.fetch(oci.Registry(oci.parse(url), creds), "1.0.1")  # blob redirected away

    assert digest == "sha256:" + hashlib.sha256(MANIFEST).hexdigest() and not is_chart
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        assert tar.getnames() == ["app/cm.yaml"]
    assert any(p.startswith("/blob/") for p, _ in elsewhere.seen)
    _no_credentials_elsewhere(registry, elsewhere)


def test_image_updater_sends_no_credentials_to_another_origin(servers: tuple[Server, Server], tmp_path: Path) -> None:
    registry, elsewhere = servers
    image = f"{registry.host}/team/app"
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
              "metadata": {"name": "regcred", "namespace": "argocd"},
              "stringData": {".dockerconfigjson": json.dumps({"auths": {registry.host: {"username": USER,
                                                                                          "password": PASSWORD}}})}}
    runtime = make_runtime(tmp_path, [app_doc("web", {notes.IMAGE_LIST: f"web={image}:~1.0"})], [secret])
    rendered(runtime, "web", f"{image}:1.0.0")

    got = results(update.check(runtime, dispatcher=Sent()))  # the updater's own HttpRegistry

    assert got["web"].status == "updated" and got["web"].changes[0].new == "1.0.1", got["web"]
    _no_credentials_elsewhere(registry, elsewhere)


def test_a_realm_on_the_registry_origin_or_one_the_secret_names_gets_the_credentials() -> None:
    client = HttpRegistry()
    repo = Repository("127.0.0.1:5000", "team/app")
    creds = Credentials(USER, PASSWORD)
    assert client.may_carry(repo, "http://127.0.0.1:5000/token", creds)
    assert not client.may_carry(repo, "http://127.0.0.1:5001/token", creds)  # another port: another origin
    assert not client.may_carry(repo, "https://127.0.0.1:5000/token", creds)  # another scheme
    assert not client.may_carry(repo, "http://localhost:5000/token", creds)  # another host name
    also = docker_config_auths({"metadata": {"name": "s"}, "stringData": {".dockerconfigjson": json.dumps(
        {"auths": {"127.0.0.1:5000": {"username": USER, "password": PASSWORD},
                   "localhost:5001": {"username": USER, "password": PASSWORD},
                   "other.example": {"username": "someone", "password": "else"}}})}})["127.0.0.1:5000"]
    assert also.also_for == ("localhost:5001",) and client.may_carry(repo, "http://localhost:5001/token", also)
    hub = Repository("docker.io", "library/nginx")
    assert client.may_carry(hub, "https://auth.docker.io/token", creds)
    assert not client.may_carry(hub, "https://auth.example.com/token", creds)
