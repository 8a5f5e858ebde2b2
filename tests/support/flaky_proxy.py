"""A TCP proxy on 127.0.0.1 in front of a real service that can be switched, while it runs, to answer
every request with HTTP 503, to reset every connection, or to hang (accept, read, never answer).

Switching closes the connections it was forwarding, so a client's pooled keep-alive connection meets the
new behaviour on its next request too. One thread accepts; each connection gets its own threads.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
from typing import Literal

Mode = Literal["pass", "503", "reset", "hang"]

_UNAVAILABLE = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 12\r\n" \
               b"Connection: close\r\n\r\nunavailable\n"


class FlakyProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.mode: Mode = "pass"
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="flaky-proxy", daemon=True)
        self._thread.start()

    def switch(self, mode: Mode) -> None:
        with self._lock:
            self.mode = mode
            live, self._open = self._open, set()
        for sock in live:
            _close(sock)

    def stop(self) -> None:
        self._stopped.set()
        self.switch("pass")
        _close(self._listener)
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                mode = self.mode
                self._open.add(client)
            threading.Thread(target=self._serve, args=(client, mode), daemon=True).start()

    def _serve(self, client: socket.socket, mode: Mode) -> None:
        if mode == "reset":
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
            _close(client)
        elif mode == "503":
            with contextlib.suppress(OSError):
                _read_head(client)
                client.sendall(_UNAVAILABLE)
            _close(client)
        elif mode == "hang":
            with contextlib.suppress(OSError):
                while client.recv(65536):  # read whatever comes, answer nothing, until closed
                    pass
            _close(client)
        else:
            self._forward(client)

    def _forward(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            _close(client)
            return
        with self._lock:
            self._open.add(upstream)
        pair = {client: upstream, upstream: client}
        try:
            while True:
                ready, _, _ = select.select(list(pair), [], [], 1.0)
                if self._stopped.is_set():
                    return
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    pair[sock].sendall(data)
        except (OSError, ValueError):
            return
        finally:
            _close(client)
            _close(upstream)


def _read_head(sock: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 1 << 20:
        chunk = sock.recv(65536)
        if not chunk:
            return
        data += chunk


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
