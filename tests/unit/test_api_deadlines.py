"""Kubernetes API calls have deadlines (issue 29, Build 5): each call of a reconcile step is given what is left
of the step's budget (within a floor and a ceiling), a call outside a step a fixed timeout, and urllib3
retries nothing by itself. A paused API server used to hold a GET for 75 s (a 60 s read timeout, then
urllib3's three hidden retries, each a 5 s connect timeout on a new connection).

The derivation is pure; the calls go through the real kubernetes client and urllib3 to real sockets on
loopback: a listener that never answers (a paused server: the kernel still completes the handshake), a
server that answers once and then hangs on the pooled connection, one that drops the pooled connection, and
a TLS server whose certificate the client's CA data does not verify (permanent: not an outage).
"""

from __future__ import annotations

import http.server
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tidecd.base.errors import ClusterUnavailable, ConfigError, disposition
from tidecd.clients import transport
from tidecd.clients.cluster import ClusterTlsError, KubeCluster, unreachable
from tidecd.clients.deadlines import (
    API_TIMEOUT,
    API_TIMEOUT_CEILING,
    API_TIMEOUT_FLOOR,
    ApiTimeouts,
    api_deadline,
    api_time_left,
    in_context,
)
from tidecd.clients.secrets import generate_key

# -- the derivation ---------------------------------------------------------------------------------------


def test_outside_a_step_a_call_gets_the_fixed_timeout() -> None:
    assert api_time_left() is None
    assert ApiTimeouts().timeout(None) == API_TIMEOUT == 30.0


@pytest.mark.parametrize(("left", "expected"), [
    (8.0, 8.0),  # what is left of the budget
    (2.5, 2.5),
    (0.3, API_TIMEOUT_FLOOR),  # at the deadline: the floor, so the last read can still be answered
    (-4.0, API_TIMEOUT_FLOOR),  # past it (a slow render): still the floor, never 0 or negative
    (500.0, API_TIMEOUT_CEILING),  # a long budget: never more than the ceiling
])
def test_in_a_step_a_call_gets_what_is_left_within_floor_and_ceiling(left: float, expected: float) -> None:
    assert ApiTimeouts().timeout(left) == expected


def test_the_deadline_follows_the_block_and_is_restored_after_it() -> None:
    with api_deadline(10.0) as deadline:
        left = api_time_left()
        assert left is not None and 9.0 < left <= 10.0
        assert api_time_left(now=deadline.at - 3.0) == pytest.approx(3.0)
        with api_deadline(1.0):
            inner = api_time_left()
            assert inner is not None and inner <= 1.0
        assert (api_time_left() or 0) > 1.0
    assert api_time_left() is None


def test_a_pool_thread_keeps_the_callers_deadline_only_when_handed_the_context() -> None:
    with ThreadPoolExecutor(max_workers=2) as pool, api_deadline(10.0):
        handed = list(pool.map(in_context(lambda _: api_time_left()), range(4)))
        bare = list(pool.map(lambda _: api_time_left(), range(2)))
    assert all(left is not None and 0 < left <= 10.0 for left in handed)
    assert bare == [None, None]


def test_settings_come_from_the_environment() -> None:
    env = {"TIDECD_API_TIMEOUT": "12", "TIDECD_API_TIMEOUT_FLOOR": "0.5", "TIDECD_API_TIMEOUT_CEILING": "20"}
    assert ApiTimeouts.from_env(env) == ApiTimeouts(12.0, 0.5, 20.0)
    assert ApiTimeouts.from_env({}) == ApiTimeouts()


@pytest.mark.parametrize(("env", "named"), [
    ({"TIDECD_API_TIMEOUT": "forever"}, "TIDECD_API_TIMEOUT="),
    ({"TIDECD_API_TIMEOUT_FLOOR": "0"}, "TIDECD_API_TIMEOUT_FLOOR"),
    ({"TIDECD_API_TIMEOUT_FLOOR": "30", "TIDECD_API_TIMEOUT_CEILING": "10"}, "TIDECD_API_TIMEOUT_CEILING"),
])
def test_a_bad_setting_is_one_clear_error_naming_it(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        ApiTimeouts.from_env(env)


# -- real calls against servers that misbehave ---------------------------------------------------------------

FAST = ApiTimeouts(fixed=1.0, floor=0.3, ceiling=5.0)
SLACK = 0.7  # scheduling on a busy two-core machine


class Server:
    """An HTTP/1.1 server on loopback answering `/version`; `mode` says what it does to later requests:
    "answer", "hang" (read the request, answer nothing until the test ends), or "drop" (close the connection
    without an answer, once). It counts connections and requests."""

    def __init__(self) -> None:
        self.mode = "answer"
        self.connections = self.requests = 0
        self.release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                outer.connections += 1
                super().setup()

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                self._answer()

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._answer()

            def _answer(self) -> None:
                outer.requests += 1
                if outer.mode == "hang":
                    outer.release.wait(30)
                    self.close_connection = True
                    return
                if outer.mode == "drop":
                    outer.mode = "answer"
                    self.close_connection = True
                    return
                body = b'{"gitVersion": "v1.31.0"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.port = self.httpd.server_address[1]

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def server() -> Iterator[Server]:
    found = Server()
    try:
        yield found
    finally:
        found.close()


def cluster_at(port: int) -> KubeCluster:
    from kubernetes.client import ApiClient

    configuration = transport.configuration()  # as tidecd builds every client: urllib3 retries nothing by itself
    configuration.host = f"http://127.0.0.1:{port}"
    return KubeCluster(ApiClient(configuration), name="test", timeouts=FAST)


def timed_failure(cluster: KubeCluster, method: str = "GET") -> tuple[float, str]:
    started = time.monotonic()
    with pytest.raises(ClusterUnavailable) as caught:
        cluster.request(method, "/version", body={} if method == "POST" else None)
    return time.monotonic() - started, str(caught.value)


def test_a_paused_server_fails_a_new_connection_at_the_steps_deadline() -> None:
    with socket.socket() as listener:  # listens, never accepts: the kernel completes the handshake
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        cluster = cluster_at(listener.getsockname()[1])
        with api_deadline(1.5):
            took, message = timed_failure(cluster)
        assert 1.3 <= took <= 1.5 + SLACK, took
        assert "timed out" in message
        took, _ = timed_failure(cluster)  # outside a step: the fixed timeout
        assert 0.9 <= took <= FAST.fixed + SLACK, took
        with api_deadline(-1.0):  # past the deadline: the floor, not an instant failure
            took, _ = timed_failure(cluster)
        assert FAST.floor - 0.1 <= took <= FAST.floor + SLACK, took


def test_once_a_call_timed_out_the_steps_later_calls_to_that_server_fail_at_once(server: Server) -> None:
    """The calls a step's pool had queued drain at once instead of each waiting out the floor (and holding
    the pool from the next step)."""
    other = cluster_at(server.port)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        cluster = cluster_at(listener.getsockname()[1])
        with api_deadline(1.0):
            first, _ = timed_failure(cluster)
            with ThreadPoolExecutor(max_workers=4) as pool:
                later = list(pool.map(in_context(lambda _: timed_failure(cluster)), range(8)))
            assert other.request("GET", "/version") == {"gitVersion": "v1.31.0"}  # another server is asked
        assert 0.9 <= first <= 1.0 + SLACK, first
        assert all(took < 0.2 and "an earlier call of this step" in said for took, said in later), later
        with api_deadline(1.0):  # the next step asks again
            again, message = timed_failure(cluster)
        assert again >= 0.9 and "earlier" not in message


def test_a_refused_connection_does_not_mark_the_server_as_hanging() -> None:
    with socket.socket() as placeholder:  # a port nobody listens on
        placeholder.bind(("127.0.0.1", 0))
        cluster = cluster_at(placeholder.getsockname()[1])
        with api_deadline(5.0) as deadline:
            _, message = timed_failure(cluster)
            assert "connection refused" in message
            assert not deadline.hung(cluster.server)


def test_a_server_that_hangs_on_a_pooled_connection_is_not_asked_again(server: Server) -> None:
    cluster = cluster_at(server.port)
    assert cluster.request("GET", "/version") == {"gitVersion": "v1.31.0"}
    server.mode = "hang"
    with api_deadline(1.2):
        took, message = timed_failure(cluster)
    assert took <= 1.2 + SLACK, took
    assert "timed out" in message
    assert (server.connections, server.requests) == (1, 2)  # no hidden retry on a new connection


def test_a_dropped_pooled_connection_is_tried_once_more_on_a_new_one(server: Server) -> None:
    cluster = cluster_at(server.port)
    assert cluster.request("GET", "/version") == {"gitVersion": "v1.31.0"}
    server.mode = "drop"
    with api_deadline(5.0):
        assert cluster.request("GET", "/version") == {"gitVersion": "v1.31.0"}
    assert (server.connections, server.requests) == (2, 3)


def test_a_create_whose_connection_dropped_is_not_sent_twice(server: Server) -> None:
    cluster = cluster_at(server.port)
    assert cluster.request("GET", "/version") == {"gitVersion": "v1.31.0"}
    server.mode = "drop"
    _, message = timed_failure(cluster, "POST")
    assert "closed by the server" in message or "reset" in message or "aborted" in message, message
    assert server.requests == 2


def test_a_certificate_the_ca_data_does_not_verify_is_a_tls_error_at_once_never_an_outage(
        tmp_path: Any) -> None:
    """A cluster secret with another cluster's CA: each call fails in its handshake, at once, as the
    permanent ClusterTlsError; it is not tried again on a new connection, not counted as unreachable, and
    does not mark the server as hanging (the step's later calls say the same TLS error)."""
    served, trusted = generate_key(1), generate_key(1)  # the server's certificate, and another CA
    (tmp_path / "tls.crt").write_bytes(served.cert_pem)
    (tmp_path / "tls.key").write_bytes(served.private_pem)
    (tmp_path / "ca.crt").write_bytes(trusted.cert_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    handshakes: list[str] = []

    def serve(listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed: the test ended
            try:
                with context.wrap_socket(conn, server_side=True):
                    handshakes.append("completed")
            except (ssl.SSLError, OSError):
                handshakes.append("refused by the client")

    from kubernetes.client import ApiClient

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        threading.Thread(target=serve, args=(listener,), daemon=True).start()
        configuration = transport.configuration()
        configuration.host = f"https://127.0.0.1:{listener.getsockname()[1]}"
        configuration.ssl_ca_cert = str(tmp_path / "ca.crt")
        cluster = KubeCluster(ApiClient(configuration), name="test", timeouts=FAST)
        errors = []
        with api_deadline(5.0) as deadline:
            for _ in range(2):
                started = time.monotonic()
                with pytest.raises(ClusterTlsError) as caught:
                    cluster.request("GET", "/version")
                errors.append((time.monotonic() - started, caught.value))
            assert not deadline.hung(cluster.server)
        waited = time.monotonic() + 2.0  # the server's side of the second handshake ends a moment later
        while len(handshakes) < 2 and time.monotonic() < waited:
            time.sleep(0.02)
        listener.shutdown(socket.SHUT_RDWR)
    for took, error in errors:
        assert str(error) == f"API server {cluster.server}: TLS verification failed (check the cluster's CA data)"
        assert took < 1.0, took
        assert not unreachable(error) and not disposition(error).retry
    assert handshakes == ["refused by the client"] * 2, handshakes  # one connection per call: no second try
