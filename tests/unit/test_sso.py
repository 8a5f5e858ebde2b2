"""Single sign-on settings and logins without an issuer: argocd-cm's keys, local accounts, ID token claims."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml

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
