"""Real chart sources for tests: a helm repository (`helm package` + `helm repo index`, served over HTTP
by a small threaded server, with optional basic auth) and the OCI registry built by `scripts/tools.sh`
(`registry`), to which charts go with `helm push` and plain artifacts with the OCI distribution API."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import socket
import subprocess
import tarfile
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.support.cluster import ensure_tools
from tidecd.clients import tools


def helm_env(home: Path) -> dict[str, str]:
    return {**os.environ, "HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data")}


def write_chart(root: Path, name: str, version: str, templates: dict[str, str] | None = None,
                values: dict[str, Any] | None = None, dependencies: list[dict[str, str]] | None = None) -> Path:
    """A chart directory `root/name` (a ConfigMap template naming the version by default)."""
    chart = root / name
    (chart / "templates").mkdir(parents=True, exist_ok=True)
    meta: dict[str, Any] = {"apiVersion": "v2", "name": name, "version": version}
    if dependencies:
        meta["dependencies"] = dependencies
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta))
    (chart / "values.yaml").write_text(yaml.safe_dump(values or {"color": "red"}))
    for rel, text in (templates or {"cm.yaml": textwrap.dedent("""\
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: {{ .Release.Name }}-cm
            data:
              chart: {{ .Chart.Name }}
              version: {{ .Chart.Version | quote }}
              color: {{ .Values.color | quote }}
            """)}).items():
        (chart / "templates" / rel).write_text(text)
    return chart


def package(chart: Path, dest: Path, home: Path) -> Path:
    helm = tools.binary("helm")
    dest.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([helm, "package", str(chart), "-d", str(dest)], env=helm_env(home), capture_output=True,
                         text=True, timeout=120, check=True)
    return Path(out.stdout.strip().rsplit(" ", 1)[-1])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class HelmRepo:
    """A helm chart repository: a directory of packaged charts and its `index.yaml`, served over HTTP."""

    def __init__(self, root: Path, username: str = "", password: str = "") -> None:
        self.root, self.username, self.password = root, username, password
        self.root.mkdir(parents=True, exist_ok=True)
        self.home = root.parent / f"{root.name}-helm-home"
        self.requests: list[str] = []
        repo = self

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=str(repo.root), **kwargs)

            def do_GET(self) -> None:  # noqa: N802
                repo.requests.append(self.path)
                if repo.username:
                    expected = "Basic " + base64.b64encode(f"{repo.username}:{repo.password}".encode()).decode()
                    if self.headers.get("Authorization") != expected:
                        self.send_response(401)
                        self.send_header("WWW-Authenticate", 'Basic realm="charts"')
                        self.end_headers()
                        return
                super().do_GET()

            def translate_path(self, path: str) -> str:
                """`/charts/...` from the directory: the URL has a path, as real repositories often do."""
                path = path.split("?", 1)[0].removeprefix("/charts")
                return str(repo.root / path.lstrip("/"))

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/charts"

    def add(self, name: str, version: str, *, raw: bool = False, **chart: Any) -> Path:
        """Package a chart version into the repository and re-index it (as `helm repo index` does). With
        `raw` the archive is made with tarfile, so missing dependencies stay missing (helm package refuses)."""
        src = write_chart(self.root.parent / f"{self.root.name}-src" / f"{name}-{version}", name, version, **chart)
        if raw:
            tgz = self.root / f"{name}-{version}.tgz"
            with tarfile.open(tgz, "w:gz") as tar:
                tar.add(src, arcname=name)
        else:
            tgz = package(src, self.root, self.home)
        subprocess.run([tools.binary("helm"), "repo", "index", str(self.root), "--url", self.url],
                       env=helm_env(self.home), capture_output=True, text=True, timeout=120, check=True)
        return tgz

    def index_calls(self) -> int:
        return sum(1 for p in self.requests if p.endswith("/index.yaml"))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def helm_repo(tmp_path: Path) -> Iterator[HelmRepo]:
    ensure_tools(["helm"])
    repo = HelmRepo(tmp_path / "charts-served")
    yield repo
    repo.close()


@pytest.fixture(scope="session")
def session_helm_repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HelmRepo]:
    """One helm repository for the session: the real Argo CD's repo server (in its network namespace) reaches
    it, so a chart that depends on a repository chart (argocd-example-apps' helm-dependency) renders in both
    tools."""
    ensure_tools(["helm"])
    repo = HelmRepo(tmp_path_factory.mktemp("session-charts") / "charts-served")
    yield repo
    repo.close()


@pytest.fixture()
def private_helm_repo(tmp_path: Path) -> Iterator[HelmRepo]:
    ensure_tools(["helm"])
    repo = HelmRepo(tmp_path / "private-charts", username="charts-user", password="s3cret-" + os.urandom(4).hex())
    yield repo
    repo.close()


class Registry:
    """The distribution registry (`registry serve`) on a free loopback port, plain HTTP."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        config = workdir / "config.yml"
        config.write_text(yaml.safe_dump({
            "version": 0.1, "log": {"level": "error"},
            "storage": {"filesystem": {"rootdirectory": str(workdir / "data")}, "delete": {"enabled": True}},
            "http": {"addr": f"127.0.0.1:{self.port}"},
        }))
        self.process = subprocess.Popen([tools.binary("registry"), "serve", str(config)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                if requests.get(f"http://127.0.0.1:{self.port}/v2/", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.stop()
                raise RuntimeError("registry did not start")
            time.sleep(0.1)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def helm_push(self, tgz: Path, namespace: str, home: Path) -> None:
        subprocess.run([tools.binary("helm"), "push", str(tgz), f"oci://{self.host}/{namespace}", "--plain-http"],
                       env=helm_env(home), capture_output=True, text=True, timeout=120, check=True)

    def push_artifact(self, repository: str, tag: str, files: dict[str, str]) -> str:
        """A plain OCI artifact: one tar+gzip layer of `files`; returns the manifest digest."""
        layer = io.BytesIO()
        with tarfile.open(fileobj=layer, mode="w:gz") as tar:
            for name, text in sorted(files.items()):
                data = text.encode()
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
        config = b"{}"
        base = f"http://{self.host}/v2/{repository}"
        descriptors = []
        for blob, media in ((config, "application/vnd.oci.empty.v1+json"),
                            (layer.getvalue(), "application/vnd.oci.image.layer.v1.tar+gzip")):
            digest = "sha256:" + hashlib.sha256(blob).hexdigest()
            start = requests.post(f"{base}/blobs/uploads/", timeout=30)
            start.raise_for_status()
            location = start.headers["Location"]
            location = location if location.startswith("http") else f"http://{self.host}{location}"
            sep = "&" if "?" in location else "?"
            requests.put(f"{location}{sep}digest={digest}", data=blob, timeout=30,
                         headers={"Content-Type": "application/octet-stream"}).raise_for_status()
            descriptors.append({"mediaType": media, "digest": digest, "size": len(blob)})
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "artifactType": "application/vnd.example.manifests.v1", "config": descriptors[0],
                    "layers": [descriptors[1]]}
        body = json.dumps(manifest).encode()
        requests.put(f"{base}/manifests/{tag}", data=body, timeout=30,
                     headers={"Content-Type": str(manifest["mediaType"])}).raise_for_status()
        return "sha256:" + hashlib.sha256(body).hexdigest()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture(scope="session")
def oci_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    ensure_tools(["registry", "helm"])
    registry = Registry(tmp_path_factory.mktemp("registry"))
    yield registry
    registry.stop()
