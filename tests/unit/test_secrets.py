"""Sealed secrets: Bitnami's wire format, scopes, refusals, key rotation, redaction and the CLI."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from cryptography.x509.oid import NameOID
from typer.testing import CliRunner

from tidecd.base.constants import LAST_APPLIED, SEALED_SCOPE_CLUSTER_WIDE, SEALED_SCOPE_NAMESPACE_WIDE
from tidecd.base.errors import SecretError
from tidecd.cli.secrets import register
from tidecd.clients.secrets import (
    MASK,
    KeyPair,
    Scope,
    active_certificate,
    generate_key,
    load_private_keys,
    load_private_keys_from_file,
    redact,
    rotate_keys,
    seal_secret,
    unseal,
    write_key_pair,
)

PASSWORD = "correct-horse-battery-staple"
TOKEN = b"\x00\xffbinary-token\x80"


@pytest.fixture(scope="session")
def pair() -> KeyPair:
    return generate_key()


@pytest.fixture(scope="session")
def other_pair() -> KeyPair:
    return generate_key(validity_days=30)


def make_secret(**annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "db",
            "namespace": "prod",
            "labels": {"argocd.argoproj.io/secret-type": "repository"},
            "annotations": {"team": "data", **annotations},
        },
        "type": "Opaque",
        "data": {"token": base64.b64encode(TOKEN).decode()},
        "stringData": {"password": PASSWORD},
    }


def expected_data() -> dict[str, str]:
    return {
        "password": base64.b64encode(PASSWORD.encode()).decode(),
        "token": base64.b64encode(TOKEN).decode(),
    }


def assert_no_secret(message: str) -> None:
    assert PASSWORD not in message
    assert base64.b64encode(PASSWORD.encode()).decode() not in message
    assert "PRIVATE KEY" not in message


# ------------------------------------------------------------------------------------------- key pair


def test_generate_key_is_rsa4096_self_signed_sealed_secret_cert(pair: KeyPair) -> None:
    assert pair.private_pem.startswith(b"-----BEGIN RSA PRIVATE KEY-----")
    key = load_pem_private_key(pair.private_pem, None, unsafe_skip_rsa_key_validation=True)
    assert isinstance(key, rsa.RSAPrivateKey) and key.key_size == 4096
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    assert cert.subject == cert.issuer
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "sealed-secret"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "sealed-secret"
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc).days == 3650
    public = cert.public_key()
    assert isinstance(public, rsa.RSAPublicKey)
    assert public.public_numbers() == key.public_key().public_numbers()


def test_generate_key_refuses_no_validity() -> None:
    with pytest.raises(SecretError, match="validity"):
        generate_key(validity_days=0)


# ------------------------------------------------------------------------------------ seal and unseal


@pytest.mark.parametrize(
    ("scope", "annotation"),
    [
        (Scope.STRICT, None),
        (Scope.NAMESPACE_WIDE, SEALED_SCOPE_NAMESPACE_WIDE),
        (Scope.CLUSTER_WIDE, SEALED_SCOPE_CLUSTER_WIDE),
    ],
)
def test_round_trip_in_each_scope(pair: KeyPair, scope: Scope, annotation: str | None) -> None:
    sealed = seal_secret(make_secret(), pair.cert_pem, scope)

    assert sealed["apiVersion"] == "bitnami.com/v1alpha1" and sealed["kind"] == "SealedSecret"
    assert sealed["metadata"]["name"] == "db" and sealed["metadata"]["namespace"] == "prod"
    assert sorted(sealed["spec"]["encryptedData"]) == ["password", "token"]
    template = sealed["spec"]["template"]
    assert template["type"] == "Opaque"
    assert template["metadata"]["labels"] == {"argocd.argoproj.io/secret-type": "repository"}
    scope_annotations = {annotation: "true"} if annotation else {}
    assert sealed["metadata"].get("annotations", {}) == scope_annotations
    assert template["metadata"]["annotations"] == {"team": "data", **scope_annotations}
    assert PASSWORD not in json.dumps(sealed)

    secret = unseal(sealed, [pair.private_pem])
    assert secret["apiVersion"] == "v1" and secret["kind"] == "Secret" and secret["type"] == "Opaque"
    assert secret["metadata"]["name"] == "db" and secret["metadata"]["namespace"] == "prod"
    assert secret["metadata"]["labels"] == {"argocd.argoproj.io/secret-type": "repository"}
    assert secret["data"] == expected_data()


def test_wire_format_is_bitnami_hybrid_encryption(pair: KeyPair) -> None:
    """Open a value by hand, step by step, as upstream HybridDecrypt does."""
    sealed = seal_secret(make_secret(), pair.cert_pem, Scope.STRICT)
    raw = base64.b64decode(sealed["spec"]["encryptedData"]["password"], validate=True)
    rsa_len = int.from_bytes(raw[:2], "big")
    assert rsa_len == 512
    key = load_pem_private_key(pair.private_pem, None, unsafe_skip_rsa_key_validation=True)
    assert isinstance(key, rsa.RSAPrivateKey)
    oaep = padding.OAEP(mgf=padding.MGF1(hashes.SHA256()), algorithm=hashes.SHA256(), label=b"prod/db")
    session_key = key.decrypt(raw[2 : 2 + rsa_len], oaep)
    assert len(session_key) == 32
    assert AESGCM(session_key).decrypt(bytes(12), raw[2 + rsa_len :], None) == PASSWORD.encode()


def test_each_value_gets_its_own_session_key(pair: KeyPair) -> None:
    one = seal_secret(make_secret(), pair.cert_pem)
    two = seal_secret(make_secret(), pair.cert_pem)
    assert one["spec"]["encryptedData"]["password"] != two["spec"]["encryptedData"]["password"]


def test_scope_comes_from_annotations_unless_given(pair: KeyPair) -> None:
    annotated = make_secret(**{SEALED_SCOPE_NAMESPACE_WIDE: "true"})
    sealed = seal_secret(annotated, pair.cert_pem)
    assert sealed["metadata"]["annotations"] == {SEALED_SCOPE_NAMESPACE_WIDE: "true"}

    forced = seal_secret(annotated, pair.cert_pem, Scope.STRICT)
    assert "annotations" not in forced["metadata"]
    assert SEALED_SCOPE_NAMESPACE_WIDE not in forced["spec"]["template"]["metadata"]["annotations"]
    forced["metadata"]["name"] = "renamed"
    with pytest.raises(SecretError):
        unseal(forced, [pair.private_pem])


def test_last_applied_copy_is_never_sealed_into_the_template(pair: KeyPair) -> None:
    secret = make_secret(**{LAST_APPLIED: json.dumps({"stringData": {"password": PASSWORD}})})
    sealed = seal_secret(secret, pair.cert_pem)
    assert LAST_APPLIED not in sealed["spec"]["template"]["metadata"]["annotations"]
    assert PASSWORD not in json.dumps(sealed)


def test_strict_secret_renamed_or_moved_is_refused(pair: KeyPair) -> None:
    sealed = seal_secret(make_secret(), pair.cert_pem, Scope.STRICT)
    renamed = copy.deepcopy(sealed)
    renamed["metadata"]["name"] = "db-copy"
    with pytest.raises(SecretError) as caught:
        unseal(renamed, [pair.private_pem])
    message = str(caught.value)
    assert "SealedSecret prod/db-copy" in message and "encryptedData.password" in message
    assert "template says prod/db" in message
    assert_no_secret(message)

    moved = copy.deepcopy(sealed)
    moved["metadata"]["namespace"] = "staging"
    with pytest.raises(SecretError, match="SealedSecret staging/db"):
        unseal(moved, [pair.private_pem])


def test_namespace_wide_allows_rename_but_not_move(pair: KeyPair) -> None:
    sealed = seal_secret(make_secret(), pair.cert_pem, Scope.NAMESPACE_WIDE)
    renamed = copy.deepcopy(sealed)
    renamed["metadata"]["name"] = "db-copy"
    secret = unseal(renamed, [pair.private_pem])
    assert secret["metadata"]["name"] == "db-copy" and secret["data"] == expected_data()

    moved = copy.deepcopy(sealed)
    moved["metadata"]["namespace"] = "staging"
    with pytest.raises(SecretError, match="SealedSecret staging/db"):
        unseal(moved, [pair.private_pem])


def test_cluster_wide_opens_anywhere(pair: KeyPair) -> None:
    secret = make_secret()
    del secret["metadata"]["namespace"]
    sealed = seal_secret(secret, pair.cert_pem, Scope.CLUSTER_WIDE)
    assert "namespace" not in sealed["metadata"]
    sealed["metadata"].update(name="other", namespace="elsewhere")
    opened = unseal(sealed, [pair.private_pem])
    assert opened["metadata"]["namespace"] == "elsewhere" and opened["data"] == expected_data()


def test_default_namespace_fills_in_for_a_sealed_secret_without_one(pair: KeyPair) -> None:
    sealed = seal_secret(make_secret(), pair.cert_pem, Scope.NAMESPACE_WIDE)
    del sealed["metadata"]["namespace"]
    with pytest.raises(SecretError, match="no namespace"):
        unseal(sealed, [pair.private_pem])
    assert unseal(sealed, [pair.private_pem], default_namespace="prod")["metadata"]["namespace"] == "prod"


@pytest.mark.parametrize("where", ["rsa", "aes", "tag"])
def test_flipped_ciphertext_byte_is_refused(pair: KeyPair, where: str) -> None:
    sealed = seal_secret(make_secret(), pair.cert_pem)
    raw = bytearray(base64.b64decode(sealed["spec"]["encryptedData"]["password"]))
    index = {"rsa": 100, "aes": 2 + 512 + 3, "tag": len(raw) - 1}[where]
    raw[index] ^= 0x01
    sealed["spec"]["encryptedData"]["password"] = base64.b64encode(bytes(raw)).decode()
    with pytest.raises(SecretError, match=r"SealedSecret prod/db: encryptedData\.password") as caught:
        unseal(sealed, [pair.private_pem])
    assert_no_secret(str(caught.value))


@pytest.mark.parametrize("value", ["not base64!", "QUJD=", "", "AAE="])
def test_malformed_or_truncated_value_is_refused(pair: KeyPair, value: str) -> None:
    sealed = seal_secret(make_secret(), pair.cert_pem)
    sealed["spec"]["encryptedData"]["token"] = value
    with pytest.raises(SecretError, match=r"encryptedData\.token"):
        unseal(sealed, [pair.private_pem])


def test_unseal_is_all_or_nothing(pair: KeyPair, other_pair: KeyPair) -> None:
    sealed = seal_secret(make_secret(), pair.cert_pem)
    foreign = seal_secret(make_secret(), other_pair.cert_pem)
    sealed["spec"]["encryptedData"]["token"] = foreign["spec"]["encryptedData"]["token"]
    with pytest.raises(SecretError, match=r"encryptedData\.token") as caught:
        unseal(sealed, [pair.private_pem])
    assert_no_secret(str(caught.value))


def test_unseal_tries_every_key(pair: KeyPair, other_pair: KeyPair) -> None:
    sealed = seal_secret(make_secret(), other_pair.cert_pem)
    assert unseal(sealed, [pair.private_pem, other_pair.private_pem])["data"] == expected_data()
    with pytest.raises(SecretError, match="no sealing key opens"):
        unseal(sealed, [pair.private_pem])
    with pytest.raises(SecretError, match="no private key"):
        unseal(sealed, [])


def test_expired_or_not_yet_valid_certificate_is_refused(pair: KeyPair) -> None:
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=3651)
    with pytest.raises(SecretError, match="expired"):
        seal_secret(make_secret(), pair.cert_pem, now=later)
    earlier = dt.datetime.now(dt.UTC) - dt.timedelta(days=1)
    with pytest.raises(SecretError, match="not valid before"):
        seal_secret(make_secret(), pair.cert_pem, now=earlier)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": "ConfigMap"}, "expected a v1 Secret"),
        ({"metadata": {"namespace": "prod"}}, "missing metadata.name"),
        ({"metadata": {"name": "db"}}, "must declare metadata.namespace"),
        ({"data": None, "stringData": None}, "empty Secret"),
        ({"data": {"token": "@@@"}}, r"Secret prod/db: data\.token is not valid base64"),
        ({"stringData": {"port": 5432}}, r"stringData\.port must be a string"),
    ],
)
def test_bad_input_secret_is_refused(pair: KeyPair, change: dict[str, Any], message: str) -> None:
    with pytest.raises(SecretError, match=message):
        seal_secret({**make_secret(), **change}, pair.cert_pem)


def test_malformed_metadata_is_an_error_not_a_crash(pair: KeyPair) -> None:
    secret = make_secret()
    secret["metadata"]["labels"] = ["not", "a", "mapping"]
    with pytest.raises(SecretError, match="labels must be a mapping"):
        seal_secret(secret, pair.cert_pem)
    sealed = seal_secret(make_secret(), pair.cert_pem)
    sealed["spec"]["template"]["metadata"] = "oops"
    with pytest.raises(SecretError, match="spec.template: metadata must be a mapping"):
        unseal(sealed, [pair.private_pem])


def test_garbage_certificate_and_key_are_refused(pair: KeyPair) -> None:
    with pytest.raises(SecretError, match="not a PEM X.509 certificate"):
        seal_secret(make_secret(), b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    sealed = seal_secret(make_secret(), pair.cert_pem)
    with pytest.raises(SecretError, match="private key #1 is not") as caught:
        unseal(sealed, [pair.cert_pem])
    assert "CERTIFICATE" not in str(caught.value)


def test_unseal_refuses_other_kinds_and_deprecated_data(pair: KeyPair) -> None:
    with pytest.raises(SecretError, match="expected a bitnami.com/v1alpha1 SealedSecret"):
        unseal(make_secret(), [pair.private_pem])
    sealed = seal_secret(make_secret(), pair.cert_pem)
    sealed["spec"]["data"] = "AAAA"
    with pytest.raises(SecretError, match="deprecated spec.data"):
        unseal(sealed, [pair.private_pem])


# ------------------------------------------------------------------------------------------------ keys


def _touch(path: Path, age_seconds: float) -> None:
    stamp = path.stat().st_mtime - age_seconds
    os.utime(path, (stamp, stamp))


def test_rotation_keeps_old_keys_and_switches_the_active_certificate(
    tmp_path: Path, pair: KeyPair, other_pair: KeyPair
) -> None:
    write_key_pair(pair, tmp_path / "tls.key", tmp_path / "tls.crt")
    write_key_pair(other_pair, tmp_path / "old.pem", tmp_path / "old.crt")
    (tmp_path / "README").write_text("not a key\n")
    _touch(tmp_path / "old.pem", 3600)
    assert load_private_keys(tmp_path) == [pair.private_pem, other_pair.private_pem]
    assert active_certificate(tmp_path) == pair.cert_pem
    old_sealed = seal_secret(make_secret(), active_certificate(tmp_path))

    new_key = rotate_keys(tmp_path)

    assert new_key.parent == tmp_path and new_key.name.startswith("sealing-") and new_key.suffix == ".key"
    assert new_key.with_suffix(".crt").is_file()
    assert new_key.stat().st_mode & 0o777 == 0o600
    keys = load_private_keys(tmp_path)
    assert len(keys) == 3 and keys[0] == new_key.read_bytes()
    new_cert = active_certificate(tmp_path)
    assert new_cert == new_key.with_suffix(".crt").read_bytes()
    new_sealed = seal_secret(make_secret(), new_cert)
    assert unseal(old_sealed, keys)["data"] == expected_data()
    assert unseal(new_sealed, keys)["data"] == expected_data()
    with pytest.raises(SecretError):
        unseal(new_sealed, [pair.private_pem, other_pair.private_pem])


def test_key_loading_errors(tmp_path: Path, pair: KeyPair) -> None:
    with pytest.raises(SecretError, match="does not exist"):
        load_private_keys(tmp_path / "missing")
    (tmp_path / "tls.crt").write_bytes(pair.cert_pem)
    with pytest.raises(SecretError, match="no PEM private key"):
        load_private_keys(tmp_path)
    with pytest.raises(SecretError, match="no PEM private key"):
        active_certificate(tmp_path)
    (tmp_path / "broken.key").write_bytes(b"-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n")
    with pytest.raises(SecretError, match="key file broken.key is not") as caught:
        load_private_keys(tmp_path)
    assert "AAAA" not in str(caught.value)


def test_active_certificate_needs_a_matching_certificate(tmp_path: Path, pair: KeyPair, other_pair: KeyPair) -> None:
    (tmp_path / "tls.key").write_bytes(pair.private_pem)
    (tmp_path / "tls.crt").write_bytes(other_pair.cert_pem)
    with pytest.raises(SecretError, match="no certificate"):
        active_certificate(tmp_path)


def test_one_file_may_hold_several_keys(tmp_path: Path, pair: KeyPair, other_pair: KeyPair) -> None:
    bundle = tmp_path / "backup.pem"
    bundle.write_bytes(pair.private_pem + pair.cert_pem + other_pair.private_pem)
    assert load_private_keys_from_file(bundle) == [pair.private_pem, other_pair.private_pem]


# ---------------------------------------------------------------------------------------------- redact


def test_redact_masks_every_value_with_a_fixed_mask() -> None:
    secret = make_secret(**{LAST_APPLIED: json.dumps(make_secret())})
    before = copy.deepcopy(secret)
    shown = redact(secret)
    assert secret == before
    assert shown["data"] == {"token": MASK} and shown["stringData"] == {"password": MASK}
    assert shown["metadata"]["labels"] == secret["metadata"]["labels"]
    assert_no_secret(json.dumps(shown))
    inner = json.loads(shown["metadata"]["annotations"][LAST_APPLIED])
    assert inner["stringData"] == {"password": MASK}
    broken = redact({"kind": "Secret", "metadata": {"annotations": {LAST_APPLIED: "{oops"}}})
    assert broken["metadata"]["annotations"][LAST_APPLIED] == MASK
    config_map = {"kind": "ConfigMap", "data": {"a": "b"}}
    assert redact(config_map) == config_map


def test_redact_masks_odd_shapes_too() -> None:
    shown = redact({"kind": "Secret", "data": "c2VjcmV0", "metadata": {"annotations": ["x"]}})
    assert shown["data"] == MASK
    inner = {"kind": "ConfigMap", "data": {"password": PASSWORD}}
    wrapped = redact({"kind": "Secret", "metadata": {"annotations": {LAST_APPLIED: json.dumps(inner)}}})
    assert_no_secret(json.dumps(wrapped))


def test_redact_hides_length() -> None:
    shown = redact({"kind": "Secret", "data": {"a": "QQ==", "b": base64.b64encode(b"x" * 500).decode()}})
    assert shown["data"]["a"] == shown["data"]["b"] == MASK


# ------------------------------------------------------------------------------------------------- CLI


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> typer.Typer:
    monkeypatch.delenv("TIDECD_SEALING_KEYS", raising=False)
    app = typer.Typer()
    register(app)
    return app


def test_cli_keygen_seal_unseal_round_trip(cli: typer.Typer, tmp_path: Path, pair: KeyPair) -> None:
    runner = CliRunner()
    write_key_pair(pair, tmp_path / "tls.key", tmp_path / "tls.crt")
    source = yaml.safe_dump(make_secret())

    sealed = runner.invoke(
        cli, ["seal", "--cert", str(tmp_path / "tls.crt"), "--scope", "namespace-wide"], input=source
    )
    assert sealed.exit_code == 0, sealed.stderr
    assert PASSWORD not in sealed.stdout
    doc = yaml.safe_load(sealed.stdout)
    assert doc["kind"] == "SealedSecret" and doc["metadata"]["annotations"] == {SEALED_SCOPE_NAMESPACE_WIDE: "true"}
    (tmp_path / "sealed.yaml").write_text(sealed.stdout)

    opened = runner.invoke(cli, ["unseal", "--key", str(tmp_path / "tls.key"), str(tmp_path / "sealed.yaml")])
    assert opened.exit_code == 0, opened.stderr
    assert yaml.safe_load(opened.stdout)["data"] == expected_data()

    as_json = runner.invoke(cli, ["unseal", "--keys-dir", str(tmp_path), "-o", "json"], input=sealed.stdout)
    assert as_json.exit_code == 0, as_json.stderr
    assert json.loads(as_json.stdout)["data"] == expected_data()


def test_cli_seal_overrides_name_and_namespace_and_reads_json(
    cli: typer.Typer, tmp_path: Path, pair: KeyPair, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_key_pair(pair, tmp_path / "tls.key", tmp_path / "tls.crt")
    monkeypatch.setenv("TIDECD_SEALING_KEYS", str(tmp_path))
    runner = CliRunner()
    args = ["seal", "--name", "api", "-n", "staging", "-o", "json"]
    result = runner.invoke(cli, args, input=json.dumps(make_secret()))
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["metadata"] == {"name": "api", "namespace": "staging"}
    assert doc["spec"]["template"]["metadata"]["name"] == "api"
    assert unseal(doc, [pair.private_pem])["data"] == expected_data()


def test_cli_keygen_and_key_rotate(cli: typer.Typer, tmp_path: Path) -> None:
    runner = CliRunner()
    made = runner.invoke(cli, ["keygen", "--out-dir", str(tmp_path), "--validity-days", "10"])
    assert made.exit_code == 0, made.stderr
    cert = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc).days == 10
    assert (tmp_path / "tls.key").stat().st_mode & 0o777 == 0o600

    again = runner.invoke(cli, ["keygen", "--out-dir", str(tmp_path)])
    assert again.exit_code == 2 and "exists" in again.stderr

    rotated = runner.invoke(cli, ["key", "rotate", "--dir", str(tmp_path)])
    assert rotated.exit_code == 0, rotated.stderr
    assert len(load_private_keys(tmp_path)) == 2
    assert active_certificate(tmp_path) != (tmp_path / "tls.crt").read_bytes()


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["seal"], "kind: Secret\n", "no certificate"),
        (["seal", "--cert", "/nonexistent/cert.pem"], "kind: Secret\n", "/nonexistent/cert.pem"),
        (["unseal"], "kind: SealedSecret\n", "no private key"),
        (["key", "rotate"], "", "no key directory"),
    ],
)
def test_cli_usage_errors_are_one_line_exit_2(cli: typer.Typer, args: list[str], stdin: str, message: str) -> None:
    result = CliRunner().invoke(cli, args, input=stdin)
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_cli_errors_never_echo_input(cli: typer.Typer, tmp_path: Path, pair: KeyPair) -> None:
    write_key_pair(pair, tmp_path / "tls.key", tmp_path / "tls.crt")
    runner = CliRunner()
    bad_yaml = f"kind: Secret\nstringData:\n  password: {PASSWORD}\n   bad: [indent\n"
    result = runner.invoke(cli, ["seal", "--cert", str(tmp_path / "tls.crt")], input=bad_yaml)
    assert result.exit_code == 2 and "not valid YAML" in result.stderr
    assert_no_secret(result.stderr + result.stdout)

    odd = runner.invoke(cli, ["seal", "--cert", str(tmp_path / "tls.crt")], input="kind: Secret\nmetadata: [1]\n")
    assert odd.exit_code == 2 and "mapping" in odd.stderr

    wrong_kind = runner.invoke(cli, ["seal", "--cert", str(tmp_path / "tls.crt")], input="kind: ConfigMap\n")
    assert wrong_kind.exit_code == 2 and "not a Secret" in wrong_kind.stderr

    sealed = seal_secret(make_secret(), pair.cert_pem)
    sealed["metadata"]["name"] = "moved"
    refused = runner.invoke(cli, ["unseal", "--keys-dir", str(tmp_path)], input=yaml.safe_dump(sealed))
    assert refused.exit_code == 2 and "SealedSecret prod/moved" in refused.stderr
    assert refused.stdout == ""
    assert_no_secret(refused.stderr)


def test_one_rule_decodes_secret_data_for_every_reader() -> None:
    """cluster, repository, github and notifications Secrets all decode `data` with secrets.text_fields."""
    from tidecd.clients import clustersecrets, github
    from tidecd.clients.secrets import text_fields
    from tidecd.source import gitremote

    secret = {"metadata": {"name": "s"}, "data": {"a": "aGVs\nbG8="}, "stringData": {"b": "plain"}}
    assert text_fields(secret, "Secret s") == {"a": "hello", "b": "plain"}
    broken = {"metadata": {"name": "s"}, "data": {"server": "!!s3cr3t!!"}}
    for read in (lambda: clustersecrets.secret_field(broken, "server"), lambda: gitremote._secret_fields(broken),
                 lambda: github._auth_of(broken, "")):
        with pytest.raises(SecretError, match=r"data\.server is not valid base64") as info:
            read()
        assert "s3cr3t" not in str(info.value)
