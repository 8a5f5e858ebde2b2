"""A small real git smart-HTTP server: bare repositories under a root, served by `git http-backend`.

Tests and `make demo` need a git remote that behaves like GitHub (clone, fetch, ls-remote, push, basic
auth, protocol v2) without a network. Running git's own CGI backend keeps the protocol real; this module
only adds the HTTP plumbing, optional basic auth and per-repo request counters that tests and benchmarks
read (one `ls-remote` = one `info/refs?service=git-upload-pack`).

Run it in a thread (`GitServer(root).start()`) or as `python -m tidecd_dev.gitserver --root DIR --port P`.
This module needs the `git` binary; the rest of tidecd does not.
"""

from __future__ import annotations

import argparse
import base64
import collections
import gzip
import hmac
import logging
import os
import re
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

log = logging.getLogger(__name__)

# Request kinds counted per repository.
LS_REMOTE = "ls-remote"  # GET info/refs?service=git-upload-pack: every fetch, clone or ls-remote starts here
LS_REFS = "ls-refs"  # protocol v2 POST git-upload-pack with command=ls-refs
UPLOAD_PACK = "upload-pack"  # POST git-upload-pack that fetches objects
PUSH_REFS = "push-refs"  # GET info/refs?service=git-receive-pack
RECEIVE_PACK = "receive-pack"  # POST git-receive-pack: a push
OTHER = "other"

MAX_BODY = 512 * 1024 * 1024
_REPO_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$")


def http_backend() -> str:
    """Path of `git http-backend` (in git's exec path, not on $PATH)."""
    exec_path = subprocess.run(["git", "--exec-path"], check=True, capture_output=True, text=True).stdout.strip()
    backend = Path(exec_path) / "git-http-backend"
    if not backend.exists():
        raise FileNotFoundError(f"git-http-backend not found in {exec_path}")
    return str(backend)


def classify(path: str, query: str, body: bytes) -> tuple[str, str]:
    """(repo name without `.git`, request kind) of one request, for the counters."""
    endpoints = (("/info/refs", ""), ("/git-upload-pack", UPLOAD_PACK), ("/git-receive-pack", RECEIVE_PACK))
    for suffix, kind in endpoints:
        if path.endswith(suffix):
            repo = _repo_of(path[: -len(suffix)])
            if not kind:
                service = dict(p.partition("=")[::2] for p in query.split("&")).get("service", "")
                kind = {"git-upload-pack": LS_REMOTE, "git-receive-pack": PUSH_REFS}.get(service, OTHER)
            elif kind == UPLOAD_PACK and b"command=ls-refs" in body[:64]:
                kind = LS_REFS
            return repo, kind
    return _repo_of(path.split("/objects/")[0].split("/HEAD")[0]), OTHER


def _repo_of(path: str) -> str:
    name = path.strip("/")
    return name[: -len(".git")] if name.endswith(".git") else name


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._serve()

    def do_POST(self) -> None:  # noqa: N802
        self._serve()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        log.debug("gitserver: " + format, *args)

    def _serve(self) -> None:
        user = self._authenticate()
        if user is None:
            self._reply(401, [("WWW-Authenticate", 'Basic realm="git"')], b"authentication required\n")
            return
        try:
            body = self._read_body()
        except ValueError as exc:
            self._reply(400, [], f"{exc}\n".encode())
            return
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        if "/../" in path + "/" or "\x00" in path:
            self._reply(400, [], b"bad path\n")
            return
        self.server.owner.count(*classify(path, parts.query, body))
        status, headers, payload = self._run_backend(path, parts.query, body, user)
        self._reply(status, headers, payload)

    def _authenticate(self) -> str | None:
        """The user name, "" when the server has no auth, None when refused."""
        expected = self.server.owner.credentials
        if expected is None:
            return ""
        scheme, _, encoded = self.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            username, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except ValueError:
            return None
        user_ok = hmac.compare_digest(username.encode(), expected[0].encode())
        password_ok = hmac.compare_digest(password.encode(), expected[1].encode())
        return username if (sep and user_ok and password_ok) else None

    def _read_body(self) -> bytes:
        if self.command != "POST":
            return b""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = self._read_chunked()
        else:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                raise ValueError("request body too large")
            body = self.rfile.read(length)
        if self.headers.get("Content-Encoding", "").lower() in ("gzip", "x-gzip"):
            body = gzip.decompress(body)
        return body

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        total = 0
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            total += size
            if total > MAX_BODY:
                raise ValueError("request body too large")
            chunks.append(self.rfile.read(size))
            self.rfile.readline()

    def _run_backend(self, path: str, query: str, body: bytes, user: str) -> tuple[int, list[tuple[str, str]], bytes]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.server.owner.root),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_PROJECT_ROOT": str(self.server.owner.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": self.client_address[0],
            "REMOTE_USER": user or "anonymous",
        }
        if protocol := self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = protocol
        proc = subprocess.run([self.server.owner.backend], input=body, env=env, capture_output=True, timeout=600)
        if proc.stderr:
            log.debug("git http-backend: %s", proc.stderr.decode(errors="replace").strip())
        return _parse_cgi(proc.stdout)

    def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


def _parse_cgi(output: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    """Split CGI output into (status, headers, body)."""
    crlf, lf = output.find(b"\r\n\r\n"), output.find(b"\n\n")
    if crlf >= 0 and (lf < 0 or crlf < lf):
        head, body = output[:crlf], output[crlf + 4 :]
    elif lf >= 0:
        head, body = output[:lf], output[lf + 2 :]
    else:
        return 502, [], b"bad gateway: no CGI headers\n"
    status, headers = 200, []
    for line in head.decode("latin-1").splitlines():
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = int(value.strip().split()[0])
        elif name.lower() not in ("content-length", "connection", "transfer-encoding"):
            headers.append((name.strip(), value.strip()))
    return status, headers, body


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: GitServer

    def handle_error(self, request: object, client_address: object) -> None:
        """Clients drop connections (e.g. after a 401); that is not worth a traceback on stderr."""
        log.debug("gitserver: connection from %s failed", client_address, exc_info=True)


class GitServer:
    """Serves bare repositories `<root>/<name>.git` at `http://127.0.0.1:<port>/<name>.git`."""

    def __init__(
        self,
        root: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        if (username is None) != (password is None):
            raise ValueError("give both username and password, or neither")
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.credentials = (username, password) if username is not None and password is not None else None
        self.backend = http_backend()
        self._counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self._lock = threading.Lock()
        self._host = host
        self._httpd = _Server((host, port), _Handler)
        self._httpd.owner = self
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def repo_url(self, name: str) -> str:
        return f"{self.url}/{_repo_of(name)}.git"

    def create_repo(self, name: str, *, default_branch: str = "main") -> str:
        """Create (or keep) the bare repository `name` and return its URL."""
        name = _repo_of(name)
        if not _REPO_NAME.match(name) or ".." in name:
            raise ValueError(f"invalid repository name {name!r}")
        path = self.root / f"{name}.git"
        if not (path / "HEAD").exists():
            _git("init", "--quiet", "--bare", f"--initial-branch={default_branch}", str(path))
        for key, value in (
            ("http.receivepack", "true"),
            ("uploadpack.allowAnySHA1InWant", "true"),
            ("uploadpack.allowFilter", "true"),
            ("receive.denyDeleteCurrent", "false"),
        ):
            _git("--git-dir", str(path), "config", key, value)
        return self.repo_url(name)

    def count(self, repo: str, kind: str) -> None:
        with self._lock:
            self._counts[(repo, kind)] += 1

    def requests(self, repo: str, kind: str) -> int:
        """How many requests of `kind` (LS_REMOTE, UPLOAD_PACK, ...) repository `repo` received."""
        with self._lock:
            return self._counts[(_repo_of(repo), kind)]

    def counts(self, repo: str) -> dict[str, int]:
        with self._lock:
            return {kind: n for (name, kind), n in self._counts.items() if name == _repo_of(repo)}

    def reset_counts(self) -> None:
        with self._lock:
            self._counts.clear()

    def start(self) -> GitServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="gitserver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def serve_forever(self) -> None:
        self._httpd.serve_forever()


def _git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tidecd_dev.gitserver", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="directory holding <name>.git repos")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--create", action="append", default=[], metavar="NAME", help="create this repo")
    parser.add_argument("--username", help="require HTTP basic auth with this user")
    parser.add_argument(
        "--password-env", default="TIDECD_GIT_PASSWORD", help="variable holding the password (not argv)"
    )
    args = parser.parse_args(argv)
    password = os.environ.get(args.password_env) if args.username else None
    if args.username and not password:
        parser.error(f"--username needs the password in ${args.password_env!s}")
    server = GitServer(args.root, host=args.host, port=args.port, username=args.username, password=password)
    for name in args.create:
        print(server.create_repo(name), flush=True)
    print(f"serving {server.root} at {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._httpd.server_close()


def wait_until_serving(url: str, timeout: float = 10.0) -> None:
    """Block until something answers at `url` (for callers that start the module as a process)."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).close()  # noqa: S310 (local http only)
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


if __name__ == "__main__":
    main()
