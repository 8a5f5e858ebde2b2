"""Sealed secrets in Bitnami sealed-secrets' exact format, so `kubeseal --cert` and tidecd interoperate.

Each value is sealed on its own (`crypto.HybridEncrypt` upstream): a fresh 32-byte AES-256-GCM session key
encrypts the value under a zero nonce (safe: the key is used once), and RSA-OAEP (SHA-256, MGF1 SHA-256)
wraps the session key with the *scope label* as OAEP label. The label binds a value to where it may be
opened: `namespace/name` (strict), `namespace` (namespace-wide) or empty (cluster-wide), so a strict
secret copied under another name or namespace cannot be opened. Wire format, base64 (standard):

    uint16 big-endian len(rsa) ‖ rsa ciphertext ‖ aes-gcm ciphertext+tag

No error raised here contains a secret value or key material: messages name the object and the key only.
`cryptography` is imported inside the functions that need it, to keep cold starts cheap.
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime as dt
import enum
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidecd.base.constants import LAST_APPLIED, SEALED_SCOPE_CLUSTER_WIDE, SEALED_SCOPE_NAMESPACE_WIDE
from tidecd.base.errors import SecretError
from tidecd.base.model import Manifest

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric.padding import OAEP
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey, RSAPublicKey

SEALED_API_VERSION = "bitnami.com/v1alpha1"
SEALED_KIND = "SealedSecret"
MASK = "++++++++"
KEY_SIZE = 4096
SESSION_KEY_BYTES = 32
NONCE = bytes(12)
CERT_NAME = "sealed-secret"

# Annotations carrying a full copy of the object (values included): never copied into a template.
_LAST_APPLIED_ANNOTATIONS = (LAST_APPLIED, "kubecfg.ksonnet.io/last-applied-configuration")
_MAX_KEY_FILE = 1 << 20


class Scope(enum.StrEnum):
    """Where a sealed value may be opened (sealed-secrets' SealingScope)."""

    STRICT = "strict"
    NAMESPACE_WIDE = "namespace-wide"
    CLUSTER_WIDE = "cluster-wide"

    def label(self, namespace: str, name: str) -> bytes:
        """The OAEP label binding a value to its scope (upstream `EncryptionLabel`)."""
        if self is Scope.CLUSTER_WIDE:
            return b""
        if self is Scope.NAMESPACE_WIDE:
            return namespace.encode()
        return f"{namespace}/{name}".encode()


@dataclass(frozen=True)
class KeyPair:
    """A sealing key: PKCS#1 PEM private key (as the controller writes tls.key) and its certificate."""

    private_pem: bytes
    cert_pem: bytes


# ---------------------------------------------------------------------------------------------- keys


def generate_key(validity_days: int = 3650, *, now: dt.datetime | None = None) -> KeyPair:
    """An RSA-4096 key and a self-signed CA certificate, like the controller's (default TTL 10 years)."""
    # lazy: cold start (cryptography only when sealing or unsealing)
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    if validity_days <= 0:
        raise SecretError(f"certificate validity must be at least one day, got {validity_days}")
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_SIZE)
    start = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, CERT_NAME),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, CERT_NAME),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=validity_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(), critical=True)
        .sign(key, hashes.SHA256())
    )
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    return KeyPair(private_pem, cert.public_bytes(serialization.Encoding.PEM))


def _key_usage() -> x509.KeyUsage:
    # lazy: cold start (cryptography only when sealing or unsealing)
    from cryptography import x509

    return x509.KeyUsage(
        digital_signature=False,
        content_commitment=False,
        key_encipherment=True,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=False,
        encipher_only=False,
        decipher_only=False,
    )


def public_key_from_cert(cert_pem: bytes, *, now: dt.datetime | None = None) -> RSAPublicKey:
    """The RSA key of a sealing certificate, refusing one that is expired or not yet valid."""
    # lazy: cold start (cryptography only when sealing or unsealing)
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        raise SecretError("the sealing certificate is not a PEM X.509 certificate") from exc
    moment = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    if moment > cert.not_valid_after_utc:
        raise SecretError(f"the sealing certificate expired on {cert.not_valid_after_utc:%Y-%m-%d}; rotate keys")
    if moment < cert.not_valid_before_utc:
        raise SecretError(f"the sealing certificate is not valid before {cert.not_valid_before_utc:%Y-%m-%d}")
    key = cert.public_key()
    if not isinstance(key, RSAPublicKey):
        raise SecretError("the sealing certificate does not hold an RSA public key")
    return key


def _load_private_key(pem: bytes, what: str) -> RSAPrivateKey:
    # lazy: cold start (cryptography only when sealing or unsealing)
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    # The keys come from the operator's own key store (trusted), so skip OpenSSL's primality check:
    # it costs ~0.3 s of CPU per RSA-4096 key, paid on every unseal of every secret.
    try:
        key = load_pem_private_key(pem, password=None, unsafe_skip_rsa_key_validation=True)
    except (ValueError, TypeError) as exc:
        raise SecretError(f"{what} is not an unencrypted PEM private key") from exc
    if not isinstance(key, RSAPrivateKey):
        raise SecretError(f"{what} is not an RSA private key")
    return key


def _pem_blocks(text: bytes, marker: bytes) -> list[bytes]:
    """Every `-----BEGIN ...marker-----` block of a PEM bundle, in order."""
    blocks = []
    for part in text.split(b"-----BEGIN ")[1:]:
        header, _, rest = part.partition(b"-----")
        if not header.endswith(marker):
            continue
        end = rest.find(b"-----END " + header + b"-----")
        if end >= 0:
            blocks.append(b"-----BEGIN " + header + b"-----" + rest[:end] + b"-----END " + header + b"-----\n")
    return blocks


def _key_files(directory: Path) -> list[Path]:
    """Regular, non-hidden files of `directory`, newest first (mtime, then name)."""
    if not directory.is_dir():
        raise SecretError(f"sealing key directory {directory} does not exist")
    files = [p for p in directory.iterdir() if not p.name.startswith(".") and p.is_file()]
    return sorted(files, key=lambda p: (p.stat().st_mtime, p.name), reverse=True)


def _read_small(path: Path) -> bytes:
    if path.stat().st_size > _MAX_KEY_FILE:
        return b""
    return path.read_bytes()


def load_private_keys(directory: Path | str) -> list[bytes]:
    """Every RSA private key (PEM) in `directory`'s files, newest first; old keys stay usable after rotation.

    Files are recognised by content, not name (`*.key`, `*.pem`, or a Secret Manager mount with no suffix).
    """
    keys: list[bytes] = []
    for path in _key_files(Path(directory)):
        keys.extend(_keys_in(path))
    if not keys:
        raise SecretError(f"no PEM private key in sealing key directory {directory}")
    return keys


def _keys_in(path: Path) -> list[bytes]:
    blocks = _pem_blocks(_read_small(path), b"PRIVATE KEY")
    for block in blocks:
        _load_private_key(block, f"key file {path.name}")
    return blocks


def load_private_keys_from_file(path: Path | str) -> list[bytes]:
    """The RSA private keys (PEM) in one file, e.g. a `tls.key` backed up for recovery."""
    keys = _keys_in(Path(path))
    if not keys:
        raise SecretError(f"no PEM private key in {path}")
    return keys


def _write_private(path: Path, content: bytes, mode: int) -> None:
    """Write atomically (temp file + rename) so a reader never sees half a key."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
    os.replace(tmp, path)


def write_key_pair(pair: KeyPair, key_path: Path, cert_path: Path) -> None:
    """Write the private key (0600) first, then the certificate (0644)."""
    _write_private(key_path, pair.private_pem, 0o600)
    _write_private(cert_path, pair.cert_pem, 0o644)


def rotate_keys(directory: Path | str, *, validity_days: int = 3650, now: dt.datetime | None = None) -> Path:
    """Add a new sealing key `sealing-<UTC timestamp>.key` (+ `.crt`); older keys stay to open old secrets."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    moment = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    while (folder / f"sealing-{moment:%Y%m%dT%H%M%SZ}.key").exists():
        moment += dt.timedelta(seconds=1)
    stem = f"sealing-{moment:%Y%m%dT%H%M%SZ}"
    pair = generate_key(validity_days, now=now)
    key_path = folder / f"{stem}.key"
    write_key_pair(pair, key_path, folder / f"{stem}.crt")
    return key_path


def active_certificate(directory: Path | str) -> bytes:
    """The certificate (PEM) of the newest private key in `directory`: the one new secrets are sealed with."""
    # lazy: cold start (cryptography only when sealing or unsealing)
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

    folder = Path(directory)
    newest = _load_private_key(load_private_keys(folder)[0], f"newest key in {folder}")
    wanted = newest.public_key().public_numbers()
    for path in _key_files(folder):
        for block in _pem_blocks(_read_small(path), b"CERTIFICATE"):
            try:
                cert = x509.load_pem_x509_certificate(block)
            except ValueError:
                continue
            public = cert.public_key()
            if isinstance(public, RSAPublicKey) and public.public_numbers() == wanted:
                return cert.public_bytes(serialization.Encoding.PEM)
    raise SecretError(f"no certificate in {folder} matches its newest private key")


# ---------------------------------------------------------------------------------------- hybrid crypto


def hybrid_encrypt(public_key: RSAPublicKey, plaintext: bytes, label: bytes) -> bytes:
    """Upstream `crypto.HybridEncrypt`, byte for byte."""
    # lazy: cold start (cryptography only when sealing or unsealing)
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    session_key = os.urandom(SESSION_KEY_BYTES)
    wrapped = public_key.encrypt(session_key, _oaep(label))
    sealed = AESGCM(session_key).encrypt(NONCE, plaintext, None)
    return len(wrapped).to_bytes(2, "big") + wrapped + sealed


class _NoKeyOpens(Exception):
    """No private key unwraps the session key (wrong key, wrong label, or a damaged RSA part)."""


class _Damaged(Exception):
    """The session key unwrapped but the value failed authentication, or the framing is broken."""


def hybrid_decrypt(private_keys: list[RSAPrivateKey], ciphertext: bytes, label: bytes) -> bytes:
    """Upstream `crypto.HybridDecrypt`: try each key; raise _NoKeyOpens or _Damaged."""
    # lazy: cold start (cryptography only when sealing or unsealing)
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    if len(ciphertext) < 2:
        raise _Damaged("too short")
    rsa_len = int.from_bytes(ciphertext[:2], "big")
    if len(ciphertext) < rsa_len + 2:
        raise _Damaged("too short")
    wrapped, sealed = ciphertext[2 : rsa_len + 2], ciphertext[rsa_len + 2 :]
    for key in private_keys:
        try:
            session_key = key.decrypt(wrapped, _oaep(label))
        except ValueError:
            continue
        try:
            return AESGCM(session_key).decrypt(NONCE, sealed, None)
        except (InvalidTag, ValueError) as exc:
            raise _Damaged("authentication failed") from exc
    raise _NoKeyOpens()


def seal_bytes(private_keys: list[bytes], plaintext: bytes, label: bytes) -> bytes:
    """`plaintext` encrypted for the first sealing key (kubeseal's hybrid scheme): only a holder of that key
    opens it. For tidecd's own small secrets kept in the store, such as the project token signing key."""
    return hybrid_encrypt(_load_private_key(private_keys[0], "sealing key 1").public_key(), plaintext, label)


def open_bytes(private_keys: list[bytes], ciphertext: bytes, label: bytes, what: str) -> bytes:
    """The plaintext of `seal_bytes`, opened by any of the sealing keys; SecretError naming `what` else."""
    keys = [_load_private_key(pem, f"sealing key {i}") for i, pem in enumerate(private_keys, 1)]
    try:
        return hybrid_decrypt(keys, ciphertext, label)
    except _NoKeyOpens:
        raise SecretError(f"{what}: none of the sealing keys opens it (sealed for a key no longer held)") from None
    except _Damaged:
        raise SecretError(f"{what}: damaged (it does not authenticate)") from None


def _oaep(label: bytes) -> OAEP:
    # lazy: cold start (cryptography only when sealing or unsealing)
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    return padding.OAEP(mgf=padding.MGF1(hashes.SHA256()), algorithm=hashes.SHA256(), label=label or None)


# ---------------------------------------------------------------------------------------------- objects


def scope_of(meta: Mapping[str, Any]) -> Scope:
    """Scope from the annotations, cluster-wide winning over namespace-wide as upstream."""
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict):
        return Scope.STRICT
    if annotations.get(SEALED_SCOPE_CLUSTER_WIDE) == "true":
        return Scope.CLUSTER_WIDE
    if annotations.get(SEALED_SCOPE_NAMESPACE_WIDE) == "true":
        return Scope.NAMESPACE_WIDE
    return Scope.STRICT


def scope_annotations(annotations: Mapping[str, str], scope: Scope) -> dict[str, str]:
    """Upstream `UpdateScopeAnnotations`: drop both scope annotations, then set the one `scope` needs."""
    out = {k: v for k, v in annotations.items() if k not in (SEALED_SCOPE_NAMESPACE_WIDE, SEALED_SCOPE_CLUSTER_WIDE)}
    if scope is Scope.NAMESPACE_WIDE:
        out[SEALED_SCOPE_NAMESPACE_WIDE] = "true"
    elif scope is Scope.CLUSTER_WIDE:
        out[SEALED_SCOPE_CLUSTER_WIDE] = "true"
    return out


def _where(namespace: str, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


def _mapping(obj: Mapping[str, Any], field: str, what: str) -> dict[str, Any]:
    value = obj.get(field)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SecretError(f"{what}: {field} must be a mapping")
    return value


def _plain_values(secret: Manifest, what: str) -> dict[str, bytes]:
    """The Secret's values: `data` decoded from base64, then `stringData` (which wins, as in Kubernetes)."""
    values: dict[str, bytes] = {}
    for key, encoded in _mapping(secret, "data", what).items():
        if not isinstance(encoded, str):
            raise SecretError(f"{what}: data.{key} must be a base64 string")
        values[str(key)] = decode_value(encoded, f"{what}: data.{key}")
    for key, text in _mapping(secret, "stringData", what).items():
        if not isinstance(text, str):
            raise SecretError(f"{what}: stringData.{key} must be a string (quote it in YAML)")
        values[str(key)] = text.encode()
    return values


def decode_value(text: str, what: str) -> bytes:
    """One Secret `data` value: standard base64 with padding, newlines ignored like Go's StdEncoding. The one
    rule for every reader of Secrets; the SecretError names `what`, never the value."""
    try:
        return base64.b64decode(text.replace("\n", "").replace("\r", ""), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SecretError(f"{what} is not valid base64") from exc


def text_fields(secret: Manifest, what: str) -> dict[str, str]:
    """A Secret's values as text: `data` decoded (`decode_value`, then UTF-8) overlaid with `stringData`, as
    Kubernetes does. `what` names the Secret in errors (`cluster secret prod`)."""
    fields: dict[str, str] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            fields[str(key)] = decode_value(str(value), f"{what}: data.{key}").decode()
        except UnicodeDecodeError:
            raise SecretError(f"{what}: data.{key} is not base64-encoded text") from None
    fields.update({str(k): str(v) for k, v in (secret.get("stringData") or {}).items()})
    return fields


def _template_meta(meta: Mapping[str, Any], scope: Scope, what: str) -> dict[str, Any]:
    """What the Secret keeps in `spec.template.metadata`: name, namespace, labels, annotations (scope set)."""
    out: dict[str, Any] = {"name": meta["name"]}
    if meta.get("namespace"):
        out["namespace"] = meta["namespace"]
    if labels := _mapping(meta, "labels", what):
        out["labels"] = dict(labels)
    annotations = {k: v for k, v in _mapping(meta, "annotations", what).items() if k not in _LAST_APPLIED_ANNOTATIONS}
    annotations = scope_annotations(annotations, scope)
    if annotations:
        out["annotations"] = annotations
    return out


def seal_secret(
    secret: Manifest, cert_pem: bytes, scope: Scope | None = None, now: dt.datetime | None = None
) -> Manifest:
    """A SealedSecret manifest for a v1 Secret, as `kubeseal --cert` makes it.

    `scope` None keeps the scope the Secret's annotations ask for (strict by default).
    """
    if secret.get("kind") != "Secret" or secret.get("apiVersion", "v1") != "v1":
        raise SecretError(f"expected a v1 Secret, got {secret.get('apiVersion')}/{secret.get('kind')}")
    meta = _mapping(secret, "metadata", "Secret")
    name = str(meta.get("name") or "")
    namespace = str(meta.get("namespace") or "")
    if not name:
        raise SecretError("missing metadata.name in input Secret")
    what = f"Secret {_where(namespace, name)}"
    chosen = scope if scope is not None else scope_of(meta)
    if chosen is not Scope.CLUSTER_WIDE and not namespace:
        raise SecretError(f"{what} must declare metadata.namespace for scope {chosen}")
    values = _plain_values(secret, what)
    if not values:
        raise SecretError(f"{what} has no data or stringData; refusing to seal an empty Secret")
    public_key = public_key_from_cert(cert_pem, now=now)
    label = chosen.label(namespace, name)
    template: dict[str, Any] = {"metadata": _template_meta(meta, chosen, what)}
    if secret.get("type"):
        template["type"] = secret["type"]
    if secret.get("immutable") is not None:
        template["immutable"] = bool(secret["immutable"])
    sealed_meta: dict[str, Any] = {"name": name}
    if namespace:
        sealed_meta["namespace"] = namespace
    if annotations := scope_annotations({}, chosen):
        sealed_meta["annotations"] = annotations
    encrypted = {
        key: base64.b64encode(hybrid_encrypt(public_key, values[key], label)).decode() for key in sorted(values)
    }
    return {
        "apiVersion": SEALED_API_VERSION,
        "kind": SEALED_KIND,
        "metadata": sealed_meta,
        "spec": {"encryptedData": encrypted, "template": template},
    }


def unseal(sealed: Manifest, private_keys: list[bytes], *, default_namespace: str | None = None) -> Manifest:
    """The v1 Secret a SealedSecret stands for, trying every private key; all values or an error.

    `default_namespace` stands in for a SealedSecret written without `metadata.namespace` (it will be
    applied into the app's destination namespace).
    """
    if sealed.get("kind") != SEALED_KIND or sealed.get("apiVersion") != SEALED_API_VERSION:
        raise SecretError(f"expected a {SEALED_API_VERSION} SealedSecret, got {sealed.get('kind')}")
    meta = _mapping(sealed, "metadata", SEALED_KIND)
    name = str(meta.get("name") or "")
    namespace = str(meta.get("namespace") or default_namespace or "")
    what = f"SealedSecret {_where(namespace, name)}"
    if not name:
        raise SecretError("SealedSecret has no metadata.name")
    spec = _mapping(sealed, "spec", what)
    if "data" in spec:
        raise SecretError(f"{what} uses the deprecated spec.data format; reseal it with encryptedData")
    template = _mapping(spec, "template", what)
    if template.get("data"):
        raise SecretError(f"{what}: spec.template.data (templated values) is not supported")
    _mapping(template, "metadata", f"{what}: spec.template")
    encrypted = _mapping(spec, "encryptedData", what)
    scope = scope_of(meta)
    if scope is not Scope.CLUSTER_WIDE and not namespace:
        raise SecretError(f"{what} has no namespace; scope {scope} needs one")
    keys = [_load_private_key(pem, f"private key #{i + 1}") for i, pem in enumerate(private_keys)]
    if not keys:
        raise SecretError(f"cannot unseal {what}: no private key given")
    if not encrypted:
        raise SecretError(f"{what} has no spec.encryptedData")
    label = scope.label(namespace, name)
    hint = _moved_hint(template, namespace, name, scope)
    data = {
        key: _open_value(keys, value, label, f"{what}: encryptedData.{key}", hint)
        for key, value in sorted(encrypted.items())
    }
    return _secret_from(template, namespace, name, data)


def _open_value(keys: list[RSAPrivateKey], value: object, label: bytes, what: str, hint: str) -> str:
    """One value, base64 again; `what` names the object and key, never the value."""
    if not isinstance(value, str):
        raise SecretError(f"{what} must be a base64 string")
    ciphertext = decode_value(value, what)
    try:
        return base64.b64encode(hybrid_decrypt(keys, ciphertext, label)).decode()
    except _Damaged as exc:
        raise SecretError(f"{what} is damaged ({exc}); reseal it") from None
    except _NoKeyOpens:
        raise SecretError(
            f"{what}: no sealing key opens it for label {_scope_text(label)}: it was sealed with another "
            f"key, for another namespace or name, or it is damaged{hint}"
        ) from None


def _scope_text(label: bytes) -> str:
    if not label:
        return "cluster-wide"
    return f"{label.decode(errors='replace')!r}"


def _moved_hint(template: Mapping[str, Any], namespace: str, name: str, scope: Scope) -> str:
    meta = template.get("metadata") or {}  # a mapping: checked by unseal
    was_ns, was_name = str(meta.get("namespace") or namespace), str(meta.get("name") or name)
    if scope is Scope.STRICT and (was_ns, was_name) != (namespace, name):
        return f" (its template says {_where(was_ns, was_name)}: strict scope binds namespace and name)"
    if scope is Scope.NAMESPACE_WIDE and was_ns != namespace:
        return f" (its template says namespace {was_ns}: namespace-wide scope binds the namespace)"
    return ""


def _secret_from(template: Mapping[str, Any], namespace: str, name: str, data: dict[str, str]) -> Manifest:
    meta: dict[str, Any] = copy.deepcopy(template.get("metadata") or {})
    meta.pop("creationTimestamp", None)
    meta["name"] = name
    if namespace:
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    secret: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret", "metadata": meta}
    if template.get("type"):
        secret["type"] = template["type"]
    if template.get("immutable") is not None:
        secret["immutable"] = template["immutable"]
    secret["data"] = data
    return secret


# ---------------------------------------------------------------------------------------------- display


def redact(secret: Manifest, changed: frozenset[str] = frozenset()) -> Manifest:
    """A copy safe to show: every value (and the last-applied copy) masked with a fixed-length `++++++++`,
    keys kept, as Argo CD shows Secrets. Values named in `changed` (`data.password`) get a longer mask, so a
    diff still shows that they differ. Objects of another kind come back unchanged (a ConfigMap's data is
    not secret). The one masking of secret values: the diff, the api, the dashboard and the CLI use it.
    """
    out = copy.deepcopy(secret)
    return _mask(out, changed) if out.get("kind", "Secret") == "Secret" else out


def _mask(obj: dict[str, Any], changed: frozenset[str] = frozenset()) -> dict[str, Any]:
    for field in ("data", "stringData"):
        if isinstance(obj.get(field), dict):
            obj[field] = {k: MASK + "+" * (f"{field}.{k}" in changed) for k in obj[field]}
        elif obj.get(field) is not None:
            obj[field] = MASK
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if isinstance(annotations, dict):
        for name in _LAST_APPLIED_ANNOTATIONS:
            if name in annotations:
                annotations[name] = _mask_last_applied(annotations[name])
    return obj


def _mask_last_applied(text: object) -> str:
    try:
        inner = json.loads(str(text))
    except ValueError:
        return MASK
    if not isinstance(inner, dict):
        return MASK
    return json.dumps(_mask(inner), sort_keys=True, separators=(",", ":"))
