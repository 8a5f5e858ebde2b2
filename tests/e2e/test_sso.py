"""Single sign-on against a real OIDC provider: Dex (built from the module proxy), the real api function
(functions-framework) and Debian's chromium. The config source holds argocd-cm (`url`, `oidc.config`,
`admin.enabled`, `accounts.*`) and a SealedSecret argocd-secret (the OIDC client secret, bcrypt hashes,
`server.secretkey`), as an Argo CD user writes them; no api token is set, so every session is signed with
`server.secretkey`."""

from __future__ import annotations

import base64
import json
import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import requests
import yaml

from tests.support.dex import MOCK_USER, Client, Dex
from tests.support.functions import ROOT, Function
from tidecd.base.principal import Principal
from tidecd.clients.secrets import KeyPair, seal_secret
from tidecd.ui import auth
from tidecd_dev.devcluster import free_port

ALICE, ALICE_PASSWORD = "alice@example.com", "alice-dex-password"
ADMIN_PASSWORD, BOB_PASSWORD = "admin-local-password", "bob-local-password"
CLIENT_SECRET = "dex-client-secret-do-not-show"
SERVER_KEY = "server-secret-key-for-sessions"


@dataclass
class Installation:
    base: str
    dex: Dex
    config: Path
    function: Function

    def argocd_cm(self, **extra: str) -> None:
        oidc = {"name": "Dex", "issuer": self.dex.issuer, "clientID": "tidecd", "cliClientID": "tidecd-cli",
                "clientSecret": "$oidc.clientSecret", "requestedScopes": ["openid", "profile", "email", "groups"],
                "requestedIDTokenClaims": {"groups": {"essential": True}}}
        data = {"url": self.base, "oidc.config": yaml.safe_dump(oidc), "accounts.bob": "login",
                "accounts.ci": "apiKey", **extra}
        (self.config / "argocd-cm.yaml").write_text(yaml.safe_dump(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argocd-cm", "namespace": "argocd"},
             "data": data}))


def _hash(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(10)).decode()


@pytest.fixture()
def installation(sealing: tuple[KeyPair, Path], tmp_path: Path) -> Iterator[Installation]:
    pair, keys = sealing
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    dex = Dex(tmp_path, {ALICE: ALICE_PASSWORD},
              [Client("tidecd", CLIENT_SECRET, [f"{base}/ui/auth/callback"]), Client("tidecd-cli")]).start()
    config = tmp_path / "config"
    config.mkdir()
    (config / "app.yaml").write_text(yaml.safe_dump(
        {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "guestbook"},
         "spec": {"project": "default", "source": {"repoURL": "https://git.example/guestbook.git", "path": "deploy",
                                                   "targetRevision": "main"},
                  "destination": {"name": "in-cluster", "namespace": "guestbook"}}}))
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "argocd-secret", "namespace": "argocd"},
              "stringData": {"oidc.clientSecret": CLIENT_SECRET, "server.secretkey": SERVER_KEY,
                             "admin.password": _hash(ADMIN_PASSWORD), "accounts.bob.password": _hash(BOB_PASSWORD)}}
    (config / "argocd-rbac-cm.yaml").write_text(yaml.safe_dump(  # alice, and the group authors, see `default`
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argocd-rbac-cm", "namespace": "argocd"},
         "data": {"policy.csv": f"p, {ALICE}, applications, get, default/*, allow\n"
                                f"p, role:readers, applications, get, default/*, allow\ng, authors, role:readers\n"}}))
    (config / "argocd-secret.yaml").write_text(yaml.safe_dump(seal_secret(secret, pair.cert_pem)))
    env = {**os.environ, "TIDECD_CONFIG": str(config), "TIDECD_STORE": str(tmp_path / "store"),
           "TIDECD_SEALING_KEYS": str(keys), "PYTHONPATH": str(ROOT / "shared") + os.pathsep + str(ROOT)}
    for name in ("TIDECD_API_TOKEN", "TIDECD_API_READONLY_TOKEN"):
        env.pop(name, None)
    found = Installation(base, dex, config, None)  # type: ignore[arg-type]
    found.argocd_cm()
    try:
        found.function = Function("api", env, tmp_path, port=port)
        yield found
    finally:
        if found.function is not None:
            found.function.stop()
        dex.stop()


def session_payload(context: Any) -> dict[str, Any]:
    cookie = next(c["value"] for c in context.cookies() if c["name"] == auth.COOKIE)
    encoded = cookie.split(".")[1]
    payload: dict[str, Any] = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
    return payload


def dex_password_login(page: Any, email: str, password: str) -> None:
    """Dex's own pages: the connector choice, then its login form."""
    page.wait_for_selector("text=Log in with Email")
    page.click("text=Log in with Email")
    page.fill("input[name=login]", email)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")


def test_a_person_logs_in_through_dex_and_the_session_names_them(browser: Any, installation: Installation) -> None:
    context = browser.new_context()
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(installation.base + "/ui/")
    assert "/ui/login" in page.url
    page.click("a[data-sso]")
    assert page.url.startswith(installation.dex.issuer)  # at Dex
    assert "code_challenge_method=S256" in page.url and "nonce=" in page.url
    dex_password_login(page, ALICE, ALICE_PASSWORD)
    page.wait_for_url(re.compile(r"/ui/$"))
    assert page.locator("[data-subject]").inner_text() == ALICE
    assert page.locator("tr[data-app='guestbook']").count() == 1  # the app list
    payload = session_payload(context)
    assert (payload["s"], payload["g"], payload["v"], payload["r"]) == (ALICE, [], "oidc", "read")
    assert payload["e"] <= time.time() + 600 + 5  # no longer than Dex's 10-minute ID token
    cookie = next(c for c in context.cookies() if c["name"] == auth.COOKIE)
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert CLIENT_SECRET not in page.content()

    # The session is refused once tampered with or expired; the same cookie, untouched, is accepted.
    def status(value: str) -> int:
        answer = requests.get(installation.base + "/ui/", cookies={auth.COOKIE: value}, allow_redirects=False,
                              timeout=30)
        return answer.status_code

    assert status(cookie["value"]) == 200
    body, _, signature = cookie["value"].rpartition(".")
    forged = dict(payload, g=["admins"], r="admin")
    forged_body = "v2." + base64.urlsafe_b64encode(json.dumps(forged).encode()).decode().rstrip("=")
    assert status(f"{forged_body}.{signature}") == 303
    assert status(body[:-2] + ("A" if body[-2] != "A" else "B") + body[-1] + "." + signature) == 303
    keyed = auth.Tokens("", "", SERVER_KEY)
    expired = auth.new_session(keyed, auth.Role.READ, Principal(ALICE, (), via="oidc"), now=time.time() - 13 * 3600)
    assert status(expired) == 303
    assert status(auth.new_session(keyed, auth.Role.READ, Principal(ALICE, (), via="oidc"))) == 200  # the key is it
    context.close()


def test_groups_come_from_the_id_token(browser: Any, installation: Installation) -> None:
    context = browser.new_context()
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(installation.base + "/ui/login")
    page.click("a[data-sso]")
    page.click("text=Log in with Example")  # Dex's mock connector: Kilgore Trout, group "authors"
    page.wait_for_url(re.compile(r"/ui/$"))
    email, groups = MOCK_USER
    assert page.locator("[data-subject]").inner_text() == email
    assert page.locator("[data-subject]").get_attribute("data-groups") == ",".join(groups)
    payload = session_payload(context)
    assert (payload["s"], tuple(payload["g"])) == (email, groups)
    context.close()


def test_a_callback_without_this_browsers_login_is_refused(installation: Installation) -> None:
    answer = requests.get(installation.base + "/ui/auth/callback?code=abc&state=forged", timeout=30,
                          allow_redirects=False)
    assert answer.status_code == 400 and "Set-Cookie" not in answer.headers
    assert "was not started here" in answer.text


def test_local_accounts_and_admin_enabled(browser: Any, installation: Installation) -> None:
    def log_in(username: str, password: str) -> tuple[Any, Any]:
        context = browser.new_context()
        context.set_default_timeout(30_000)
        page = context.new_page()
        page.goto(installation.base + "/ui/login")
        page.fill("form[data-local] input[name=username]", username)
        page.fill("form[data-local] input[name=password]", password)
        page.click("form[data-local] button[type=submit]")
        page.wait_for_load_state()
        return context, page

    context, page = log_in("admin", ADMIN_PASSWORD)
    assert page.url.endswith("/ui/") and page.locator("[data-subject]").inner_text() == "admin"
    assert page.locator("[data-role=admin]").count() == 1
    context.close()
    context, page = log_in("bob", "wrong")
    assert "/ui/login" in page.url and "Invalid username or password" in page.content()
    context.close()
    context, page = log_in("ci", "anything")  # apiKey only: no password login
    assert "Invalid username or password" in page.content()
    context.close()

    installation.argocd_cm(**{"admin.enabled": "false"})
    context, page = log_in("admin", ADMIN_PASSWORD)
    assert "/ui/login" in page.url and "Invalid username or password" in page.content()
    assert not [c for c in context.cookies() if c["name"] == auth.COOKIE]
    context.close()
    context, page = log_in("bob", BOB_PASSWORD)
    assert page.url.endswith("/ui/") and page.locator("[data-subject]").inner_text() == "bob"
    assert page.locator("[data-role=read]").count() == 1
    context.close()


def cli_login(browser: Any, installation: Installation, env: dict[str, str], connector: str = "email") -> str:
    """`tidecd login --sso`, its browser step driven here through Dex; the CLI's output."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tidecd.cli", "login", "--server", installation.base, "--sso",
                             "--sso-port", str(port), "--no-browser"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        url = ""
        deadline = time.monotonic() + 60
        while not url and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if line.startswith(installation.dex.issuer):
                url = line.strip()
        assert url, "the CLI printed no authorization URL"
        assert "client_id=tidecd-cli" in url and "code_challenge=" in url
        assert f"redirect_uri=http%3A%2F%2Flocalhost%3A{port}%2Fauth%2Fcallback" in url
        context = browser.new_context()
        context.set_default_timeout(30_000)
        page = context.new_page()
        page.goto(url)
        if connector == "email":
            dex_password_login(page, ALICE, ALICE_PASSWORD)
        else:
            page.click("text=Log in with Example")
        page.wait_for_selector("text=you may close this window")
        context.close()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    return out


def test_cli_login_sso_through_the_browser(browser: Any, installation: Installation, tmp_path: Path) -> None:
    cli_config = tmp_path / "cli" / "cli.json"
    env = {**os.environ, "TIDECD_CLI_CONFIG": str(cli_config),
           "PYTHONPATH": str(ROOT / "shared") + os.pathsep + str(ROOT)}
    env.pop("TIDECD_API_TOKEN", None)
    out = cli_login(browser, installation, env)
    assert f"Logged in to {installation.base} as {ALICE}" in out
    assert stat.S_IMODE(cli_config.stat().st_mode) == 0o600
    kept = json.loads(cli_config.read_text())["servers"][installation.base]
    assert kept["via"] == "sso" and kept["token"].count(".") == 2

    # The kept ID token is alice's through the api: argocd-rbac-cm lets her see the app, not sync it.
    listed = subprocess.run([sys.executable, "-m", "tidecd.cli", "app", "list", "--server", installation.base],
                            env=env, capture_output=True, text=True, timeout=120, check=False)
    assert listed.returncode == 0 and "guestbook" in listed.stdout, listed.stderr
    refused = requests.post(installation.base + "/api/v1/apps/guestbook/sync", timeout=30, json={},
                            headers={"Authorization": f"Bearer {kept['token']}"})
    assert refused.status_code == 403 and ALICE in refused.json()["message"]
    broken = kept["token"][:-4] + ("AAAA" if not kept["token"].endswith("AAAA") else "BBBB")
    assert requests.get(installation.base + "/api/v1/apps", timeout=30,
                        headers={"Authorization": f"Bearer {broken}"}).status_code == 401

    # `--token` keeps a token only after a call proves it; `logout` forgets it.
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tidecd.cli", *args, "--server", installation.base], env=env,
                              capture_output=True, text=True, timeout=120, check=False)

    bogus = cli("login", "--token", "not-a-token")
    assert bogus.returncode == 2 and "refused the token (401)" in bogus.stderr
    assert json.loads(cli_config.read_text())["servers"][installation.base]["token"] == kept["token"]
    assert cli("logout").returncode == 0 and json.loads(cli_config.read_text())["servers"] == {}
    assert cli("app", "list").returncode != 0  # nothing kept: refused
    again = cli("login", "--token", kept["token"])
    assert again.returncode == 0, again.stderr
    assert json.loads(cli_config.read_text())["servers"][installation.base]["via"] == "token"

    # Kilgore is in no policy line; his ID token's group `authors` is (g, authors, role:readers).
    out = cli_login(browser, installation, env, connector="mock")
    assert f"as {MOCK_USER[0]} (groups: authors)" in out
    token = json.loads(cli_config.read_text())["servers"][installation.base]["token"]
    apps = requests.get(installation.base + "/api/v1/apps", timeout=30, headers={"Authorization": f"Bearer {token}"})
    assert apps.status_code == 200 and [a["name"] for a in apps.json()["apps"]] == ["guestbook"]
    rbac = installation.config / "argocd-rbac-cm.yaml"
    rbac.write_text(rbac.read_text().replace("g, authors, role:readers", "g, others, role:readers"))  # not his
    apps = requests.get(installation.base + "/api/v1/apps", timeout=30, headers={"Authorization": f"Bearer {token}"})
    assert apps.status_code == 200 and apps.json()["apps"] == []
