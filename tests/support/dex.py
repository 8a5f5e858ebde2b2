"""Dex, the OIDC provider Argo CD bundles, as the issuer of the single sign-on tests.

Built from the Go module proxy by `scripts/tools.sh dex` (on demand, like the peers: the fixture builds it
the first time). `Dex.start` writes a config (memory storage, the password database with the given users,
Dex's mock connector, which logs in "Kilgore Trout" with the group `authors`, and the given static clients)
and serves it on a free loopback port.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import bcrypt
import pytest
import requests
import yaml

from tidecd.clients.tools import cache_dir
from tidecd_dev.devcluster import free_port
from tidecd_dev.processes import stop_session

ROOT = Path(__file__).resolve().parents[2]
MOCK_USER = ("kilgore@kilgore.trout", ("authors",))  # what Dex's mockCallback connector logs in


def dex_binary() -> Path:
    binary = cache_dir() / "bin" / "dex"
    if not binary.exists():
        done = subprocess.run(["bash", str(ROOT / "scripts" / "tools.sh"), "dex"], capture_output=True, text=True,
                              timeout=1800, check=False)
        if done.returncode != 0 or not binary.exists():
            pytest.fail(f"scripts/tools.sh dex failed ({done.returncode}): {done.stderr[-3000:]}")
    return binary


@dataclass
class Client:
    id: str
    secret: str = ""  # "" for a public client (the CLI's)
    redirect_uris: list[str] = field(default_factory=list)


@dataclass
class Dex:
    workdir: Path
    users: dict[str, str]  # email -> password
    clients: list[Client]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}/dex"

    def config(self) -> dict[str, object]:
        return {
            "issuer": self.issuer,
            "storage": {"type": "memory"},
            "web": {"http": f"127.0.0.1:{self.port}"},
            "logger": {"level": "info"},
            "oauth2": {"skipApprovalScreen": True},
            "expiry": {"idTokens": "10m"},
            "enablePasswordDB": True,
            "staticPasswords": [
                {"email": email, "username": email.partition("@")[0], "userID": str(uuid.uuid4()),
                 "hash": bcrypt.hashpw(password.encode(), bcrypt.gensalt(10)).decode()}
                for email, password in self.users.items()],
            "connectors": [{"type": "mockCallback", "id": "mock", "name": "Example"}],
            "staticClients": [
                {"id": c.id, "name": c.id, **({"secret": c.secret} if c.secret else {"public": True}),
                 **({"redirectURIs": c.redirect_uris} if c.redirect_uris else {})}
                for c in self.clients],
        }

    def start(self) -> Dex:
        config = self.workdir / "dex.yaml"
        config.write_text(yaml.safe_dump(self.config()))
        log = self.workdir / "dex.log"
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([str(dex_binary()), "serve", str(config)], stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(self.issuer + "/.well-known/openid-configuration", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"dex did not start: {log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None:
            stop_session(self.proc)
            self.proc = None
