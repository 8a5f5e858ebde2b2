"""tidecd and the real `kubeseal` open each other's sealed secrets, in every scope, offline.

kubeseal seals with `--cert` and opens with `--recovery-unseal`; neither needs a cluster, but it still
reads a kubeconfig, so it gets a dummy one pointing at a closed port.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.kubeseal import kubeseal_binary, run_kubeseal
from tidecd.base.constants import SEALED_SCOPE_CLUSTER_WIDE, SEALED_SCOPE_NAMESPACE_WIDE
from tidecd.base.errors import SecretError
from tidecd.clients.secrets import KeyPair, Scope, generate_key, seal_secret, unseal, write_key_pair

pytestmark = pytest.mark.e2e

PASSWORD = "s3cret with spaces & ünïcode"
BLOB = bytes(range(256))
SCOPES = [Scope.STRICT, Scope.NAMESPACE_WIDE, Scope.CLUSTER_WIDE]


@pytest.fixture(scope="module")
def kubeseal() -> str:
    return kubeseal_binary()


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[KeyPair, Path]:
    folder = tmp_path_factory.mktemp("keys")
    pair = generate_key()
    write_key_pair(pair, folder / "tls.key", folder / "tls.crt")
    return pair, folder


def make_secret(**annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "repo-creds", "namespace": "argocd", "labels": {"team": "platform"}}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "data": {"blob": base64.b64encode(BLOB).decode()},
        "stringData": {"password": PASSWORD},
    }


def expected_data() -> dict[str, str]:
    return {"blob": base64.b64encode(BLOB).decode(), "password": base64.b64encode(PASSWORD.encode()).decode()}


@pytest.mark.parametrize("scope", SCOPES, ids=str)
def test_kubeseal_sealed_is_unsealed_by_tidecd(
    kubeseal: str, keys: tuple[KeyPair, Path], scope: Scope
) -> None:
    pair, folder = keys
    args = ["--cert", str(folder / "tls.crt"), "--scope", str(scope), "-o", "yaml"]
    result = run_kubeseal(kubeseal, folder, args, yaml.safe_dump(make_secret()))
    assert result.returncode == 0, result.stderr
    sealed = yaml.safe_load(result.stdout)
    assert sealed["kind"] == "SealedSecret"

    secret = unseal(sealed, [pair.private_pem])

    assert secret["data"] == expected_data()
    assert secret["metadata"]["name"] == "repo-creds" and secret["metadata"]["namespace"] == "argocd"
    assert secret["metadata"]["labels"] == {"team": "platform"}
    assert secret["type"] == "Opaque"


@pytest.mark.parametrize("scope", SCOPES, ids=str)
def test_tidecd_sealed_is_unsealed_by_kubeseal(
    kubeseal: str, keys: tuple[KeyPair, Path], scope: Scope
) -> None:
    pair, folder = keys
    sealed = seal_secret(make_secret(), pair.cert_pem, scope)
    args = ["--recovery-unseal", "--recovery-private-key", str(folder / "tls.key"), "-o", "yaml"]

    result = run_kubeseal(kubeseal, folder, args, yaml.safe_dump(sealed))

    assert result.returncode == 0, result.stderr
    secret = yaml.safe_load(result.stdout)
    assert secret["data"] == expected_data()
    assert secret["metadata"]["name"] == "repo-creds" and secret["metadata"]["namespace"] == "argocd"
    assert secret["metadata"]["labels"] == {"team": "platform"}
    wanted = {
        Scope.NAMESPACE_WIDE: SEALED_SCOPE_NAMESPACE_WIDE,
        Scope.CLUSTER_WIDE: SEALED_SCOPE_CLUSTER_WIDE,
    }
    annotations = secret["metadata"].get("annotations") or {}
    assert annotations == ({wanted[scope]: "true"} if scope in wanted else {})


def test_scope_from_annotations_and_json_output_match_kubeseal(
    kubeseal: str, keys: tuple[KeyPair, Path]
) -> None:
    """kubeseal's default (json, scope from the Secret's annotations) opens in tidecd, renamed or not."""
    pair, folder = keys
    source = make_secret(**{SEALED_SCOPE_NAMESPACE_WIDE: "true"})
    result = run_kubeseal(kubeseal, folder, ["--cert", str(folder / "tls.crt")], json.dumps(source))
    assert result.returncode == 0, result.stderr
    sealed = json.loads(result.stdout)
    assert sealed["metadata"]["annotations"] == {SEALED_SCOPE_NAMESPACE_WIDE: "true"}
    sealed["metadata"]["name"] = "renamed"
    assert unseal(sealed, [pair.private_pem])["data"] == expected_data()


def test_kubeseal_strict_secret_moved_is_refused_by_both(kubeseal: str, keys: tuple[KeyPair, Path]) -> None:
    pair, folder = keys
    args = ["--cert", str(folder / "tls.crt"), "--scope", "strict", "-o", "yaml"]
    result = run_kubeseal(kubeseal, folder, args, yaml.safe_dump(make_secret()))
    assert result.returncode == 0, result.stderr
    moved = yaml.safe_load(result.stdout)
    moved["metadata"]["namespace"] = "default"

    with pytest.raises(SecretError, match="SealedSecret default/repo-creds") as caught:
        unseal(moved, [pair.private_pem])
    assert PASSWORD not in str(caught.value)

    recovery = ["--recovery-unseal", "--recovery-private-key", str(folder / "tls.key"), "-o", "yaml"]
    refused = run_kubeseal(kubeseal, folder, recovery, yaml.safe_dump(moved))
    assert refused.returncode != 0


def test_tidecd_cert_from_keygen_is_accepted_by_kubeseal_after_rotation(
    kubeseal: str, keys: tuple[KeyPair, Path], tmp_path: Path
) -> None:
    """kubeseal seals with a rotated tidecd certificate; tidecd opens it with the whole key directory."""
    from tidecd.clients.secrets import active_certificate, load_private_keys, rotate_keys

    pair, folder = keys
    write_key_pair(pair, tmp_path / "tls.key", tmp_path / "tls.crt")
    new_key = rotate_keys(tmp_path)
    cert = tmp_path / "active.crt"
    cert.write_bytes(active_certificate(tmp_path))
    result = run_kubeseal(
        kubeseal, folder, ["--cert", str(cert), "-o", "yaml"], yaml.safe_dump(make_secret())
    )
    assert result.returncode == 0, result.stderr
    sealed = yaml.safe_load(result.stdout)

    assert unseal(sealed, load_private_keys(tmp_path))["data"] == expected_data()
    with pytest.raises(SecretError):
        unseal(sealed, [pair.private_pem])
    recovery = ["--recovery-unseal", "--recovery-private-key", str(new_key), "-o", "yaml"]
    opened = run_kubeseal(kubeseal, folder, recovery, result.stdout)
    assert opened.returncode == 0, opened.stderr
    assert yaml.safe_load(opened.stdout)["data"] == expected_data()
