"""The loopback-only network namespace the peers bound to 0.0.0.0 run in (`tidecd_dev.netns`), for real:
a process inside reaches the host's loopback services through the relay, listens on 0.0.0.0 unseen from
outside, and is reached from outside only through the exposed loopback port."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tidecd_dev.devcluster import free_port
from tidecd_dev.peers import _Processes

pytestmark = pytest.mark.e2e


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        body = b"hello from the host"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture()
def host_server() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()


def test_a_process_in_the_namespace_reaches_the_host_and_is_reached_only_by_the_relay(
        tmp_path: Path, host_server: int) -> None:
    inner = free_port()
    procs = _Processes(tmp_path)
    started: list[subprocess.Popen[bytes]] = []
    try:
        procs.isolate(forward=[host_server], expose=[inner])
        assert procs.holder is not None and procs.exposed[inner] != inner
        probe = ("import json, urllib.request; print(json.dumps({'dev': open('/proc/self/net/dev').read(), "
                 f"'body': urllib.request.urlopen('http://127.0.0.1:{host_server}/', timeout=10).read().decode()}}))")
        out = subprocess.run([sys.executable, "-m", "tidecd_dev.netns", "join", str(procs.holder.pid), "--",
                              sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
        seen = json.loads(out.stdout)
        assert [line.split(":")[0].strip() for line in seen["dev"].splitlines()[2:]] == ["lo"]
        assert seen["body"] == "hello from the host"

        started += [procs.holder, procs.spawn("listener", [sys.executable, "-m", "http.server", str(inner),
                                                            "--bind", "0.0.0.0"]).proc]  # noqa: S104 - inside
        procs.wait_http(inner, "/", "listener in the namespace", timeout=30)
        with urllib.request.urlopen(procs.url(inner, "/"), timeout=10) as resp:  # noqa: S310 - loopback
            assert resp.status == 200
        with socket.socket() as sock:  # its 0.0.0.0:inner is not a port of the host's namespace
            assert sock.connect_ex(("127.0.0.1", inner)) != 0
    finally:
        procs.stop()
    assert len(started) == 2 and all(p.poll() is not None for p in started)  # stop() reaped both
