"""Short-lived cluster credentials: exec plugin tokens cached until they expire, the ExecCredential checks,
the bounds on the plugin, and the google-auth path with a credentials object passed in."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tidecd.base.errors import ClusterUnavailable
from tidecd.clients import credentials
from tidecd.clients.cluster import client_for_secret
from tidecd.clients.credentials import (
    ClusterCredentialError,
    ExecConfig,
    ExecTokens,
    GoogleTokens,
    Ran,
    exec_config,
    parse_exec_credential,
    run_plugin,
    token_source,
)

V1 = "client.authentication.k8s.io/v1"
T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def answer(token: str, expires: str | None = None, api_version: str = V1) -> bytes:
    status: dict[str, Any] = {"token": token}
    if expires:
        status["expirationTimestamp"] = expires
    return json.dumps({"apiVersion": api_version, "kind": "ExecCredential", "status": status}).encode()


class Plugin:
    """A stand-in runner: each run answers a new token valid for `lifetime` seconds from the fake clock."""

    def __init__(self, lifetime: float) -> None:
        self.lifetime, self.now, self.envs = lifetime, T0, list[Mapping[str, str]]()

    def __call__(self, argv: Sequence[str], env: Mapping[str, str]) -> Ran:
        self.envs.append(env)
        import datetime

        until = datetime.datetime.fromtimestamp(self.now + self.lifetime, datetime.UTC)
        return Ran(0, answer(f"token-{len(self.envs)}", until.strftime("%Y-%m-%dT%H:%M:%SZ")), "")


def test_a_token_is_cached_until_a_minute_before_it_expires_then_the_plugin_runs_again() -> None:
    plugin = Plugin(lifetime=600)
    tokens = ExecTokens(ExecConfig("my-plugin", ("get",), (("TEAM", "a"),), V1), "cluster secret prod",
                        run=plugin, now=lambda: plugin.now)
    assert [tokens.token() for _ in range(5)] == ["token-1"] * 5 and tokens.invocations == 1
    plugin.now += 600 - credentials.EXPIRY_MARGIN - 1
    assert tokens.token() == "token-1"
    plugin.now += 2
    assert tokens.token() == "token-2" and tokens.invocations == 2
    tokens.forget()  # the API server refused it (401): asked anew
    assert tokens.token() == "token-3"
    env = plugin.envs[0]
    assert env["TEAM"] == "a" and json.loads(env["KUBERNETES_EXEC_INFO"])["apiVersion"] == V1
    assert not any(key.startswith("TIDECD_") for key in env)


def test_a_token_without_expiry_is_kept() -> None:
    assert parse_exec_credential(answer("t"), V1, "x") == ("t", float("inf"))
    token, until = parse_exec_credential(answer("t", "2027-01-15T08:00:00Z"), V1, "x")
    assert until == T0


@pytest.mark.parametrize(("stdout", "expect"), [
    (b"token please", "answer is not JSON"),
    (json.dumps({"kind": "Secret"}).encode(), "not an ExecCredential"),
    (answer("t", api_version="client.authentication.k8s.io/v1beta1"), "is not the configured"),
    (json.dumps({"apiVersion": V1, "kind": "ExecCredential", "status": {"clientCertificateData": "x"}}).encode(),
     "client certificates from a plugin are not implemented"),
    (answer("t", "next tuesday"), "is not an RFC 3339 time"),
])
def test_a_bad_answer_is_an_error_naming_the_plugin_never_the_token(stdout: bytes, expect: str) -> None:
    with pytest.raises(ClusterCredentialError, match=expect) as caught:
        parse_exec_credential(stdout, V1, "cluster secret prod: credential plugin p")
    assert str(caught.value).startswith("cluster secret prod: credential plugin p: ")
    assert "token please" not in str(caught.value)


def test_the_config_is_checked_field_by_field() -> None:
    with pytest.raises(ClusterCredentialError, match=r"cluster secret prod: config.execProviderConfig.args"):
        exec_config({"command": "p", "args": "get"}, "cluster secret prod")
    with pytest.raises(ClusterCredentialError, match=r"execProviderConfig.apiVersion: 'v2'"):
        exec_config({"command": "p", "apiVersion": "v2"}, "cluster secret prod")
    with pytest.raises(ClusterCredentialError, match=r"config.awsAuthConfig: EKS IAM authentication is not"):
        token_source({"awsAuthConfig": {"clusterName": "prod"}}, "cluster secret prod")
    assert token_source({"bearerToken": "x"}, "s") is None
    assert isinstance(token_source({"execProviderConfig": {"command": "argocd-k8s-auth", "args": ["gcp"]}}, "s"),
                      GoogleTokens)
    assert isinstance(token_source({"execProviderConfig": {"command": "/usr/bin/gke-gcloud-auth-plugin"}}, "s"),
                      GoogleTokens)
    assert isinstance(token_source({"execProviderConfig": {"command": "argocd-k8s-auth", "args": ["aws"]}}, "s"),
                      ExecTokens)


def test_the_real_plugin_runs_bounded_and_a_missing_one_names_its_install_hint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDECD_SEALING_KEYS", "a private key")  # the function's environment stays its own
    script = tmp_path / "plugin.py"
    script.write_text("import json, os, sys\n"
                      "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',"
                      " 'status': {'token': os.environ['TEAM'] + '-' + str('TIDECD_SEALING_KEYS' in os.environ)}}))\n")
    config = ExecConfig(sys.executable, (str(script),), (("TEAM", "blue"),), V1)
    assert ExecTokens(config, "s").token() == "blue-False"
    missing = ExecConfig("no-such-plugin", (), (), V1, "install it with: apt-get install no-such-plugin")
    with pytest.raises(ClusterCredentialError, match=r"s: credential plugin no-such-plugin: cannot run "
                                                     r"no-such-plugin: No such file or directory \(install it"):
        ExecTokens(missing, "s").token()
    failing = ExecConfig(sys.executable, ("-c", "import sys; sys.exit('denied by policy')"), (), V1)
    with pytest.raises(ClusterUnavailable, match="exit status 1: denied by policy"):
        ExecTokens(failing, "s").token()
    hungry = run_plugin([sys.executable, "-c", "x = bytearray(2 * 1024**3)"], {"PATH": "/usr/bin"})
    assert hungry.returncode != 0 and "MemoryError" in hungry.stderr


def test_the_plugin_is_stopped_at_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(credentials, "PLUGIN_SECONDS", 0.5)
    with pytest.raises(ClusterUnavailable, match="no answer within"):
        run_plugin([sys.executable, "-c", "import time; time.sleep(30)"], {"PATH": "/usr/bin"})


class FakeGoogle:
    """google-auth's credentials interface: `valid`, `token`, `refresh(request)`."""

    def __init__(self) -> None:
        self.refreshes, self.valid, self.token = 0, False, ""

    def refresh(self, request: object) -> None:
        self.refreshes += 1
        self.valid, self.token = True, f"ya29.access-{self.refreshes}"


def test_google_tokens_are_refreshed_when_no_longer_valid() -> None:
    fake = FakeGoogle()
    tokens = GoogleTokens(fake, request=object())
    assert tokens.token() == "ya29.access-1" and tokens.token() == "ya29.access-1" and fake.refreshes == 1
    fake.valid = False  # google-auth says so a few minutes before the expiry
    assert tokens.token() == "ya29.access-2"


def test_a_cluster_secret_with_a_plugin_signs_each_request_with_the_current_token() -> None:
    secret = {"metadata": {"name": "prod"}, "stringData": {
        "name": "prod", "server": "https://prod.example:6443",
        "config": json.dumps({"execProviderConfig": {"command": "argocd-k8s-auth", "args": ["gcp"]}})}}
    client = client_for_secret(secret)
    fake = FakeGoogle()
    from tidecd.clients import cluster

    cluster._TOKENS[id(client)][1]._credentials = fake  # type: ignore[attr-defined]
    first = client.configuration.auth_settings()["BearerToken"]["value"]
    fake.valid = False
    second = client.configuration.auth_settings()["BearerToken"]["value"]
    assert (first, second) == ("Bearer ya29.access-1", "Bearer ya29.access-2")


def test_no_google_identity_is_a_clear_error_and_a_failed_refresh_is_temporary(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import google.auth
    import google.auth.exceptions

    def nobody(**_: object) -> None:
        raise google.auth.exceptions.DefaultCredentialsError("no credentials")  # type: ignore[no-untyped-call]

    monkeypatch.setattr(google.auth, "default", nobody)
    with pytest.raises(ClusterCredentialError, match="no Google identity found"):
        GoogleTokens().token()

    class Failing(FakeGoogle):
        def refresh(self, request: object) -> None:
            raise google.auth.exceptions.RefreshError("metadata server said no")  # type: ignore[no-untyped-call]

    with pytest.raises(ClusterUnavailable, match=r"token refresh failed \(RefreshError\)") as caught:
        GoogleTokens(Failing(), request=object()).token()
    assert "metadata server" not in str(caught.value)
