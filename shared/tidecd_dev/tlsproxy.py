"""A TLS front for a local plain-HTTP function, so the dev API server's audit webhook backend can reach it.

client-go sends a kubeconfig's bearer token only over TLS: an audit backend pointed at
`http://127.0.0.1:8081/audit` posts its batches without `Authorization`, and tidecd refuses them (401), as
it should. In the cloud the function's URL is HTTPS. Locally this process listens with TLS, on a
certificate of the control plane's own CA, and forwards each request as it came (method, path, headers,
body) to the plain-HTTP upstream, then relays the answer.

    python -m tidecd_dev.tlsproxy --port 9443 --upstream http://127.0.0.1:8081 --cert C --key K
"""

from __future__ import annotations

import argparse
import http.server
import ssl
import sys
import urllib.error
import urllib.request

MAX_BODY = 64 * 1024 * 1024  # a dev proxy, but never unbounded
HOP_BY_HOP = {"host", "connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
              "proxy-authorization", "proxy-connection"}


def handler(upstream: str) -> type[http.server.BaseHTTPRequestHandler]:
    class Forward(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            self.forward()

        def do_GET(self) -> None:  # noqa: N802
            self.forward()

        def forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self.send_error(413, "body too large for the dev TLS proxy")
                return
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            request = urllib.request.Request(upstream.rstrip("/") + self.path, data=body,  # noqa: S310 - http only
                                             method=self.command, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 - loopback upstream
                    status, data, kind = answer.status, answer.read(), answer.headers.get("Content-Type", "")
            except urllib.error.HTTPError as refused:
                status, data, kind = refused.code, refused.read(), refused.headers.get("Content-Type", "")
            except OSError as exc:
                self.send_error(502, f"upstream {upstream} unreachable: {type(exc).__name__}")
                return
            self.send_response(status)
            self.send_header("Content-Type", kind or "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
            pass  # the upstream logs what it answered

    return Forward


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidecd_dev.tlsproxy", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="the plain-HTTP base URL, e.g. http://127.0.0.1:8081")
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    args = parser.parse_args(argv)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), handler(args.upstream))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
