"""A network namespace whose only interface is loopback, for peers that listen on 0.0.0.0 hard-wired.

Argo CD's application controller serves its metrics on 0.0.0.0 and gitops-agent its API on 0.0.0.0, with
no flag to bind them elsewhere. They must never listen on an open interface, so they run in a namespace of
their own, while still reaching the control plane and the git server on the host's loopback:

    python -m tidecd_dev.netns hold --ready FILE --forward 6443 --forward 8418 --expose 19001

unshares a new network namespace (root, or `unshare -rn` rights), brings its `lo` up and then relays:
`--forward P` listens on 127.0.0.1:P *inside* and connects each connection to 127.0.0.1:P of the namespace
it started in (so kubeconfigs and repo URLs stay the same, TLS names included); `--expose P` listens on a
free 127.0.0.1 port *outside* and connects to 127.0.0.1:P inside (the chosen ports are written to the ready
file). A relay thread switches into the outer namespace with setns(2), which is per thread, only to create
its outbound socket. The holder dies with its parent (PR_SET_PDEATHSIG).

    python -m tidecd_dev.netns join PID -- CMD ARGS...

runs CMD inside holder PID's namespace (setns, then exec; it dies with its parent too). When the calling
process already lives in a loopback-only namespace (`make bench` runs the whole bench in one), no holder is
needed: `isolated()` says so and peers start directly.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import json
import os
import signal
import socket
import struct
import sys
import threading
from pathlib import Path

CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_LIBC = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def interfaces() -> list[str]:
    """The network interfaces of the calling process's namespace (/proc/self/net/dev is per namespace)."""
    lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    return [line.split(":", 1)[0].strip() for line in lines if ":" in line]


def isolated() -> bool:
    """True when this process's network namespace has no interface but loopback."""
    return interfaces() == ["lo"]


def unshare_net() -> None:
    """Move the calling thread (call it before starting threads) into a new namespace with `lo` up."""
    _check(_LIBC.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
    loopback_up()


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))


def setns(fd: int) -> None:
    _check(_LIBC.setns(fd, CLONE_NEWNET), "setns(CLONE_NEWNET)")


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    _check(_LIBC.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")


# -- relays ------------------------------------------------------------------------------------------------


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(262144):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def _relay(client: socket.socket, port: int, outer_ns: int | None) -> None:
    """Connect to 127.0.0.1:port (in `outer_ns` when given) and copy both ways until both sides close."""
    try:
        if outer_ns is not None:
            setns(outer_ns)  # this thread only; the socket keeps the namespace it was made in
        upstream = socket.create_connection(("127.0.0.1", port), timeout=10)
        upstream.settimeout(None)
    except OSError:
        client.close()
        return
    for sock in (client, upstream):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
    back.start()
    _pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _serve(listener: socket.socket, port: int, outer_ns: int | None) -> None:
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_relay, args=(client, port, outer_ns), daemon=True).start()


def _listen(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    return sock


def hold(ready: Path, forward: list[int], expose: list[int]) -> int:
    die_with_parent()
    outer_ns = os.open("/proc/self/ns/net", os.O_RDONLY)
    outside = {port: _listen(0) for port in expose}  # made before unsharing: they stay on the outer loopback
    unshare_net()
    inside = {port: _listen(port) for port in forward}
    for port, listener in inside.items():
        threading.Thread(target=_serve, args=(listener, port, outer_ns), daemon=True).start()
    for port, listener in outside.items():
        threading.Thread(target=_serve, args=(listener, port, None), daemon=True).start()
    exposed = {str(port): listener.getsockname()[1] for port, listener in outside.items()}
    tmp = ready.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "expose": exposed}))
    tmp.rename(ready)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.wait(3600):
        pass
    return 0


def join(pid: int, command: list[str]) -> int:
    die_with_parent(signal.SIGKILL)
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    setns(fd)
    os.close(fd)
    os.execvp(command[0], command)  # noqa: S606 - exec of the caller's own command, argv form
    return 127  # not reached


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidecd_dev.netns", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hold", help="create the namespace, relay ports, stay until SIGTERM")
    h.add_argument("--ready", type=Path, required=True, help="JSON file written once serving")
    h.add_argument("--forward", type=int, action="append", default=[], help="inside 127.0.0.1:P -> outside")
    h.add_argument("--expose", type=int, action="append", default=[], help="outside free port -> inside P")
    j = sub.add_parser("join", help="exec a command inside a holder's namespace")
    j.add_argument("pid", type=int)
    j.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.cmd == "hold":
        return hold(args.ready, args.forward, args.expose)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("join needs a command after --")
    return join(args.pid, command)


if __name__ == "__main__":
    sys.exit(main())
