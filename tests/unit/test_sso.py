"""Single sign-on settings and logins without an issuer: argocd-cm's keys, local accounts, ID token claims."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml
from joserfc import jwt
from joserfc.jwk import OctKey, RSAKey

from tidecd.base.principal import Principal
from tidecd.clients import oidc
from tidecd.clients.store import MemoryStore
from tidecd.config.load import load_config
from tidecd.runtime import Runtime, Settings
from tidecd.ui import auth
from tidecd.usecases import login

OIDC = {"name": "Dex", "issuer": "https://dex.example/dex", "clientID": "tidecd", "cliClientID": "tidecd-cli",
        "clientSecret": "$oidc.clientSecret", "requestedScopes": ["profile", "email", "groups"],
        "requestedIDTokenClaims": {"groups": {"essential": True}}}


def write_cm(tmp_path: Path, data: dict[str, str], sealed: bool = True) -> Any:
    (tmp_path / "cm.yaml").write_text(yaml.safe_dump(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argocd-cm"}, "data": data}))
    if sealed:
        (tmp_path / "secret.yaml").write_text(yaml.safe_dump(
            {"apiVersion": "bitnami.com/v1alpha1", "kind": "SealedSecret",
             "metadata": {"name": "argocd-secret", "namespace": "argocd"},
             "spec": {"encryptedData": {"admin.password": "AgB..."}, "template": {"metadata": {}}}}))
    return load_config(tmp_path, strict=False)


def test_argocd_cm_sso_keys_are_read_as_argo_cd_writes_them(tmp_path: Path) -> None:
    config = write_cm(tmp_path, {"url": "https://cd.example.com/", "oidc.config": yaml.safe_dump(OIDC),
                                 "admin.enabled": "false", "accounts.bob": "login, apiKey", "accounts.ci": "apiKey",
                                 "accounts.old": "login", "accounts.old.enabled": "false"})
    assert config.problems == []
    sso = config.argo_settings.sso
    assert sso.url == "https://cd.example.com" and sso.oidc is not None
    assert (sso.oidc.issuer, sso.oidc.client_id, sso.oidc.client_secret_key) == (
        "https://dex.example/dex", "tidecd", "oidc.clientSecret")
    assert sso.oidc.requested_scopes[0] == "openid" and sso.oidc.groups_essential
    assert sso.oidc.audiences == ("tidecd", "tidecd-cli")
    assert sso.account("admin") is None and sso.account("bob") is not None
    assert sso.account("ci") is None and sso.account("old") is None and sso.account("nobody") is None
    assert sso.sealed_secret is not None and sso.secret_origin.endswith("secret.yaml")


def test_a_client_secret_in_the_configmap_is_refused_without_echoing_it(tmp_path: Path) -> None:
    config = write_cm(tmp_path, {"oidc.config": yaml.safe_dump({**OIDC, "clientSecret": "hunter2-plain"}),
                                 "admin.enabled": "maybe", "accounts.x": "login, fly"})
    text = "\n".join(config.problems)
    assert "oidc.config: clientSecret: expected a reference to a key of the sealed argocd-secret" in text
    assert "hunter2" not in text
    assert 'admin.enabled: expected "true" or "false"' in text
    assert "accounts.x: unknown capability 'fly'" in text
    bad = write_cm(tmp_path, {"oidc.config": "issuer: https://x\nclientId: typo\n"})
    assert any("clientId: unknown field" in p for p in bad.problems)
    assert any("clientID: required" in p for p in bad.problems)
    assert bad.argo_settings.sso.oidc is None


def runtime_with(tmp_path: Path, data: dict[str, str], secret: dict[str, str]) -> Runtime:
    config = write_cm(tmp_path, data)
    return Runtime(Settings(), MemoryStore(), _config=config, _argocd_secret=secret)


def test_local_accounts_log_in_with_their_bcrypt_hash_and_admin_enabled_is_honoured(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()
    secret = {"admin.password": hashed, "accounts.bob.password": hashed, "accounts.ci.password": hashed}
    runtime = runtime_with(tmp_path, {"accounts.bob": "login", "accounts.ci": "apiKey"}, secret)
    assert login.local(runtime, "admin", "pw").subject == "admin"
    assert login.local(runtime, "bob", "pw").via == "local"
    for user, password in (("bob", "nope"), ("ci", "pw"), ("nobody", "pw"), ("bob", "x" * 100), ("", "")):
        with pytest.raises(login.LoginRefused, match="^Invalid username or password.$"):
            login.local(runtime, user, password)
    off = runtime_with(tmp_path, {"admin.enabled": "false", "accounts.bob": "login"}, secret)
    with pytest.raises(login.LoginRefused):
        login.local(off, "admin", "pw")
    assert login.local(off, "bob", "pw").subject == "bob"


def test_the_principal_of_an_id_token_is_its_email_and_the_claims_of_the_rbac_scopes() -> None:
    claims = {"sub": "Cg1", "email": "a@x.io", "groups": ["dev", "ops", "dev"], "team": "red"}
    who = oidc.principal(claims)
    assert (who.subject, who.groups, who.via) == ("a@x.io", ("dev", "ops"), "oidc")
    assert oidc.principal(claims, ("groups", "email", "team")).groups == ("dev", "ops", "a@x.io", "red")
    assert oidc.principal({"sub": "Cg1", "preferred_username": "ann"}).subject == "ann"
    assert oidc.principal({"sub": "Cg1", "groups": "solo"}).groups == ("solo",)
    assert oidc.principal({"sub": "x", "groups": [1, "g"]}).groups == ("g",)  # as Argo CD: non-strings skipped
    bads: list[dict[str, Any]] = [{"sub": "x", "groups": ["g"] * 101}, {"sub": "x", "groups": ["g" * 300]},
                                  {"groups": []}]
    for bad in bads:
        with pytest.raises(oidc.LoginRefused):
            oidc.principal(bad)


def test_the_pkce_verifier_is_derived_from_the_state_and_the_key() -> None:
    one = oidc.pkce_verifier(b"k", "state-1")
    assert one == oidc.pkce_verifier(b"k", "state-1") and 43 <= len(one) <= 128
    assert one != oidc.pkce_verifier(b"k", "state-2") and one != oidc.pkce_verifier(b"other", "state-1")


def test_a_session_too_large_for_a_cookie_is_not_issued_and_never_read() -> None:
    tokens = auth.Tokens("", "", "server-key")
    groups = tuple(f"g{i:03}" + "x" * 60 for i in range(60))
    many = auth.new_session(tokens, auth.Role.READ, Principal("a@x.io", groups))
    assert len(many) > auth.MAX_COOKIE and auth.read_session(tokens, many) is None
    small = auth.new_session(tokens, auth.Role.READ, Principal("a@x.io", ("dev",), via="oidc"))
    read = auth.read_session(tokens, small)
    assert read is not None and read.principal == Principal("a@x.io", ("dev",), via="oidc")
    assert auth.read_session(auth.Tokens("", "", ""), small) is None  # no key: no session at all


class _Issuer(BaseHTTPRequestHandler):
    """A stand-in OIDC issuer's two documents: discovery and the key set (signing is the test's)."""

    documents: dict[str, bytes] = {}

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = self.documents.get(self.path)
        self.send_response(200 if body else 404)
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        return


@pytest.fixture()
def issuer() -> Iterator[tuple[str, Any]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Issuer)
    base = f"http://127.0.0.1:{server.server_address[1]}/dex"
    key = RSAKey.generate_key(2048, parameters={"kid": "k1"}, private=True)
    _Issuer.documents = {
        "/dex/.well-known/openid-configuration": json.dumps(
            {"issuer": base, "authorization_endpoint": base + "/auth", "token_endpoint": base + "/token",
             "jwks_uri": base + "/keys"}).encode(),
        "/dex/keys": json.dumps({"keys": [key.as_dict(private=False)]}).encode()}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    oidc.forget()
    try:
        yield base, key
    finally:
        server.shutdown()
        server.server_close()
        oidc.forget()


def test_an_id_token_is_checked_for_signature_issuer_audience_expiry_and_nonce(issuer: tuple[str, Any]) -> None:
    base, key = issuer
    now = int(time.time())
    good = {"iss": base, "aud": "tidecd", "sub": "Cg1", "email": "a@x.io", "groups": ["dev"], "exp": now + 300,
            "iat": now, "nonce": "n1"}

    def signed(claims: dict[str, Any], with_key: Any = key, alg: str = "RS256") -> str:
        return jwt.encode({"alg": alg, "kid": "k1"}, claims, with_key)

    claims = oidc.verify(base, signed(good), ("tidecd", "tidecd-cli"), nonce="n1")
    assert oidc.principal(claims).groups == ("dev",)
    assert oidc.verify(base, signed({**good, "aud": ["other", "tidecd-cli"]}), ("tidecd", "tidecd-cli"))["sub"]
    other_key = RSAKey.generate_key(2048, parameters={"kid": "k1"}, private=True)
    refusals = {
        "aud": signed({**good, "aud": "someone-else"}),
        "iss": signed({**good, "iss": "https://evil.example/dex"}),
        "exp": signed({**good, "exp": now - 3600}),
        "nonce": signed({**good, "nonce": "replayed"}),
        "signature": signed(good, other_key),
        "missing exp": signed({k: v for k, v in good.items() if k != "exp"}),
    }
    for why, token in refusals.items():
        with pytest.raises(oidc.LoginRefused, match="not accepted") as refused:
            oidc.verify(base, token, ("tidecd",), nonce="n1")
        assert token.split(".")[1] not in str(refused.value), why  # never the token itself
        assert why.split()[-1] in str(refused.value) or why == "signature" and "bad_signature" in str(refused.value)
    unsigned = signed(good, OctKey.import_key("x" * 32), alg="HS256")  # a key the issuer never published
    with pytest.raises(oidc.LoginRefused):
        oidc.verify(base, unsigned, ("tidecd",), nonce="n1")
    with pytest.raises(oidc.LoginRefused, match="not a signed JWT"):
        oidc.verify(base, "a.b", ("tidecd",))
    _Issuer.documents["/dex/.well-known/openid-configuration"] = json.dumps(
        {"issuer": "https://elsewhere", "authorization_endpoint": base + "/auth", "token_endpoint": base + "/t",
         "jwks_uri": base + "/keys"}).encode()
    oidc.forget()
    with pytest.raises(oidc.LoginRefused, match="names issuer 'https://elsewhere', not the configured"):
        oidc.provider(base)
