"""`tidecd keygen | seal | unseal | key rotate`: sealed secrets on the command line, flags like kubeseal's.

Every expected failure prints one line to stderr and exits 2. No message quotes the input: a YAML error
gives only its position, because the parser's own message would echo the offending line (maybe a value).
"""

from __future__ import annotations

import enum
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
import yaml

from tidecd.base.errors import TidecdError
from tidecd.clients import secrets
from tidecd.clients.secrets import Scope

KEYS_ENV = "TIDECD_SEALING_KEYS"


class OutputFormat(enum.StrEnum):
    YAML = "yaml"
    JSON = "json"


class _Usage(Exception):
    """A command-line mistake: shown as one line, exit 2."""


@contextmanager
def _one_line_errors() -> Iterator[None]:
    """Turn expected failures into `error: ...` on stderr and exit code 2, never a traceback."""

    try:
        yield
    except (TidecdError, _Usage) as exc:
        message = str(exc)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        message = f"input is not valid YAML or JSON{where}"
    except yaml.YAMLError:
        message = "input is not valid YAML or JSON"
    except UnicodeDecodeError:
        message = "input is not UTF-8 text"
    except OSError as exc:
        message = f"{exc.strerror or 'I/O error'}: {exc.filename}" if exc.filename else str(exc)
    except Exception as exc:  # noqa: BLE001 - a bug must not print a message that may quote a value
        message = f"unexpected {type(exc).__name__} (a bug in tidecd; the input was not echoed)"
    else:
        return
    typer.echo(f"error: {message.splitlines()[0] if message else 'failed'}", err=True)
    raise typer.Exit(2)


def _read_input(source: Path | None) -> str:
    if source is None or str(source) == "-":
        return typer.get_binary_stream("stdin").read().decode("utf-8")
    return source.read_text(encoding="utf-8")


def _documents(text: str, kind: str) -> list[dict[str, Any]]:
    """The objects of a YAML/JSON stream (a `List` is flattened); each must be a `kind`."""

    docs: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(text):
        if doc is None:
            continue
        if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            docs.extend(doc["items"])
        else:
            docs.append(doc)
    if not docs:
        raise _Usage(f"no {kind} found in the input")
    for index, doc in enumerate(docs, 1):
        if not isinstance(doc, dict) or doc.get("kind") != kind:
            found = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
            raise _Usage(f"document {index} of the input is a {found}, not a {kind}")
    return docs


def _render(docs: list[dict[str, Any]], fmt: OutputFormat) -> str:
    if fmt is OutputFormat.JSON:
        return "".join(json.dumps(doc, indent=2) + "\n" for doc in docs)

    return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False)


def _keys_dir(explicit: Path | None) -> Path | None:
    if explicit is not None:
        return explicit
    env = os.environ.get(KEYS_ENV)
    return Path(env) if env else None


def keygen(
    out_dir: Path = typer.Option(Path("."), "--out-dir", help="Directory to write the key pair into."),
    key_name: str = typer.Option("tls.key", "--key-name", help="File name of the private key."),
    cert_name: str = typer.Option("tls.crt", "--cert-name", help="File name of the certificate."),
    validity_days: int = typer.Option(3650, "--validity-days", help="Certificate lifetime in days."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing files."),
) -> None:
    """Make a sealing key pair (RSA 4096 + self-signed certificate), as the sealed-secrets controller does."""

    with _one_line_errors():
        key_path, cert_path = out_dir / key_name, out_dir / cert_name
        for path in (key_path, cert_path):
            if path.exists() and not force:
                raise _Usage(f"{path} exists; pass --force to overwrite it")
        out_dir.mkdir(parents=True, exist_ok=True)
        secrets.write_key_pair(secrets.generate_key(validity_days), key_path, cert_path)
    typer.echo(f"wrote {key_path} (keep it secret) and {cert_path} (give it to whoever seals)")


def seal(
    source: Path | None = typer.Argument(None, help="Secret YAML/JSON file; stdin when absent or '-'."),
    cert: Path | None = typer.Option(
        None, "--cert", help=f"Sealing certificate (PEM). Default: the active one in ${KEYS_ENV}."
    ),
    scope: Scope | None = typer.Option(
        None, "--scope", help="strict, namespace-wide or cluster-wide. Default: the Secret's annotations."
    ),
    fmt: OutputFormat = typer.Option(OutputFormat.YAML, "-o", "--format", help="Output format."),
    name: str | None = typer.Option(None, "--name", help="Override the Secret's name."),
    namespace: str | None = typer.Option(None, "-n", "--namespace", help="Override the Secret's namespace."),
) -> None:
    """Seal a Secret into a SealedSecret that kubeseal's controller and tidecd can open."""

    with _one_line_errors():
        if cert is not None:
            cert_pem = cert.read_bytes()
        elif (folder := _keys_dir(None)) is not None:
            cert_pem = secrets.active_certificate(folder)
        else:
            raise _Usage(f"no certificate: pass --cert FILE or set {KEYS_ENV}")
        docs = _documents(_read_input(source), "Secret")
        sealed = []
        for doc in docs:
            meta = doc.get("metadata") or {}
            if not isinstance(meta, dict):
                raise _Usage("metadata of the input Secret must be a mapping")
            meta = dict(meta)
            if name:
                meta["name"] = name
            if namespace:
                meta["namespace"] = namespace
            sealed.append(secrets.seal_secret({**doc, "metadata": meta}, cert_pem, scope))
        text = _render(sealed, fmt)
    typer.echo(text, nl=False)


def unseal(
    source: Path | None = typer.Argument(None, help="SealedSecret YAML/JSON file; stdin when absent or '-'."),
    key: list[Path] | None = typer.Option(None, "--key", help="Private key file (PEM); repeatable."),
    keys_dir: Path | None = typer.Option(
        None, "--keys-dir", help=f"Directory of private keys. Default: ${KEYS_ENV} when no --key."
    ),
    fmt: OutputFormat = typer.Option(OutputFormat.YAML, "-o", "--format", help="Output format."),
) -> None:
    """Open SealedSecrets and print the Secrets (recovery). The output holds secret values."""

    with _one_line_errors():
        private: list[bytes] = []
        for path in key or []:
            private.extend(secrets.load_private_keys_from_file(path))
        folder = keys_dir if keys_dir is not None else (None if key else _keys_dir(None))
        if folder is not None:
            private.extend(secrets.load_private_keys(folder))
        if not private:
            raise _Usage(f"no private key: pass --key FILE, --keys-dir DIR or set {KEYS_ENV}")
        docs = _documents(_read_input(source), "SealedSecret")
        text = _render([secrets.unseal(doc, private) for doc in docs], fmt)
    typer.echo(text, nl=False)


key_app = typer.Typer(no_args_is_help=True, help="Sealing key management.")


@key_app.command("rotate")
def rotate(
    directory: Path | None = typer.Option(None, "--dir", help=f"Key directory. Default: ${KEYS_ENV}."),
    validity_days: int = typer.Option(3650, "--validity-days", help="Certificate lifetime in days."),
) -> None:
    """Add a new sealing key; new secrets are sealed with it, old keys stay to open old secrets."""

    with _one_line_errors():
        folder = _keys_dir(directory)
        if folder is None:
            raise _Usage(f"no key directory: pass --dir DIR or set {KEYS_ENV}")
        path = secrets.rotate_keys(folder, validity_days=validity_days)
    typer.echo(f"wrote {path} and {path.with_suffix('.crt')}; it is now the active sealing key")


def register(app: typer.Typer) -> None:
    """Add the secret commands to the main `tidecd` app."""
    app.command("keygen")(keygen)
    app.command("seal")(seal)
    app.command("unseal")(unseal)
    app.add_typer(key_app, name="key")
