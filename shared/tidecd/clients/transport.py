"""How tidecd's Kubernetes clients send a call below HTTP: urllib3 retries nothing by itself
(`configuration`), each call goes with the timeout its deadline leaves (`clients.deadlines`) and is tried
again only where a new connection may help and the deadline allows (`send`), a server that let a step's
call time out is not asked again in that step, a certificate that does not verify is told apart from an
unreachable server (`tls_unverified`), and a failure is said in a few words (`reason`).

urllib3's default retried a call three times, each on a new connection: a GET to a paused API server took
75 s (a 60 s read timeout, then three 5 s connect timeouts), past any step's budget.
"""

from __future__ import annotations

import http.client
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from tidecd.base.errors import ClusterUnavailable
from tidecd.clients.deadlines import ApiTimeouts, api_time_left, current_api_deadline

if TYPE_CHECKING:
    from kubernetes.client import Configuration

T = TypeVar("T")

# Methods a second try cannot make do twice what the first did: a server-side apply (PATCH) of the same
# object is the same apply; POST is left out (a create may have been made before the connection dropped).
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "PATCH"})


def configuration() -> Configuration:
    """A Kubernetes client's settings before a kubeconfig fills them in: urllib3 retries nothing by itself."""
    # lazy: cold start (kubernetes only when a cluster is reached)
    from kubernetes.client import Configuration

    return Configuration(retries=False)


def send(method: str, timeouts: ApiTimeouts, attempt: Callable[[float], T], server: str) -> T:
    """`attempt(timeout)` with what the context's deadline leaves (`ApiTimeouts.timeout`); once more, on a
    new connection, when `another_try` allows it and the deadline is not past. A failure is raised as it
    came: the caller says what it means. Under a step's deadline, once a call to `server` timed out, the
    step's later calls to it fail at once (`ApiDeadline`)."""
    deadline = current_api_deadline()
    if deadline is not None and deadline.hung(server):
        raise ClusterUnavailable(f"API server {server} unreachable: timed out (an earlier call of this step)")

    def once() -> T:
        try:
            return attempt(timeouts.timeout(api_time_left()))
        except Exception as exc:
            if deadline is not None and timed_out(exc):
                deadline.timed_out(server)
            raise

    try:
        return once()
    except Exception as exc:
        left = api_time_left()
        if not (another_try(method, exc) and (left is None or left > 0)):
            raise
    return once()


def timed_out(exc: BaseException) -> bool:
    """The server did not answer in time (to connect, hand-shake or answer); a refused connection is not
    that, though urllib3 makes its NewConnectionError a ConnectTimeoutError."""
    # lazy: cold start (urllib3 only when a cluster is reached)
    from urllib3.exceptions import NewConnectionError
    from urllib3.exceptions import TimeoutError as Urllib3Timeout

    if tls_unverified(exc):
        return False
    return any(isinstance(e, TimeoutError | Urllib3Timeout) and not isinstance(e, NewConnectionError)
               for e in causes(exc))


def tls_unverified(exc: BaseException) -> bool:
    """The server answered the handshake with a certificate the client's CA data does not verify: a wrong
    CA, not an outage, so never waited out or tried again. It comes as `ssl.SSLCertVerificationError`
    inside urllib3's SSLError (or MaxRetryError), and the kubernetes client turns urllib3's SSLError into
    an `ApiException(status=0)` that keeps only its text (OpenSSL's CERTIFICATE_VERIFY_FAILED)."""
    chain = causes(exc)
    if any(isinstance(e, ssl.SSLCertVerificationError) for e in chain):
        return True
    return any("CERTIFICATE_VERIFY_FAILED" in f"{e!r} {getattr(e, 'reason', '')}" for e in chain)


def another_try(method: str, exc: BaseException) -> bool:
    """Is a failed call worth one more try on a new connection? Only an idempotent one whose connection the
    server closed before answering (reset, closed, broken pipe), as it does to a pooled connection it has
    dropped. Never after a timeout (a server that does not answer is not asked again), never after a
    certificate that does not verify (it will not verify on a new connection either)."""
    # lazy: cold start (urllib3 only when a cluster is reached)
    from urllib3.exceptions import ProtocolError

    chain = causes(exc)
    if method not in IDEMPOTENT or timed_out(exc) or tls_unverified(exc):
        return False
    return any(isinstance(e, ProtocolError) for e in chain) and any(
        isinstance(e, ConnectionResetError | BrokenPipeError | http.client.RemoteDisconnected) for e in chain)


def causes(exc: BaseException) -> list[BaseException]:
    """The error and what it wraps: urllib3 nests the socket's error (MaxRetryError → NewConnectionError →
    ConnectionRefusedError, or ProtocolError('Connection aborted.', RemoteDisconnected(...))); the kubernetes
    client's ApiException has a text `reason` and the urllib3 error it replaced as its context."""
    found, chain = exc, [exc]
    for _ in range(6):
        inner = next((e for e in (getattr(found, "reason", None), found.__cause__, found.__context__, *found.args)
                      if isinstance(e, BaseException)), None)
        if inner is None or inner in chain:
            break
        found = inner
        chain.append(found)
    return chain


def reason(exc: BaseException) -> str:
    """What went wrong below HTTP, in a few words ("connection refused", "timed out", ...): the class name
    of urllib3's wrapper alone says nothing. Only the kind is kept, never the request."""
    chain = causes(exc)
    text = " ".join(f"{type(e).__name__} {e}" for e in chain).lower()
    for marker, said in (("refused", "connection refused"), ("timed out", "timed out"),
                         ("timeout", "timed out"), ("reset", "connection reset"),
                         ("remotedisconnected", "connection closed by the server"),
                         ("aborted", "connection aborted"), ("name or service", "host not found")):
        if marker in text:
            return said
    return type(chain[-1]).__name__
