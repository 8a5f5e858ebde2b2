"""Reaching a git remote: credentials from Argo CD's repository Secrets, the endpoint they match on, the
dulwich client for a URL (HTTPS with basic auth or a token; SSH through an `ssh` binary) and the errors a
transport raises, turned into a SourceUnavailable that never carries a credential.

HTTPS (basic auth, or a token as password) is tested against a real git server. SSH URLs use dulwich's
subprocess vendor, i.e. an `ssh` binary on PATH (BatchMode, host keys checked unless `insecure`), with
the private key in a 0600 temp file for the call; tested with a stand-in `ssh`, as there is no sshd here.
Only https, http, ssh, `user@host:path` and git:// URLs are accepted: never local paths or file://.
"""

from __future__ import annotations

import contextlib
import functools
import re
import shlex
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from tidecd.base.constants import LABEL_SECRET_TYPE, SECRET_TYPE_REPO_CREDS, SECRET_TYPE_REPOSITORY
from tidecd.base.errors import ConfigError, SourceUnavailable
from tidecd.clients.secrets import text_fields
from tidecd.config.load import redact_repo_url

if TYPE_CHECKING:
    from dulwich.client import GitClient

__all__ = ["HTTP_TIMEOUT", "RepoCredentials", "credential_endpoint", "credentials_for", "git_client",
           "ssh_command", "transport_errors", "unavailable_error"]

HTTP_TIMEOUT = 60.0
_SCP_LIKE = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9][A-Za-z0-9.-]*:(?!//)[^:\s]")


# --- credentials -------------------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class RepoCredentials:
    """How to authenticate to one repository; `repr` never shows a secret."""

    username: str = ""
    password: str = ""
    ssh_private_key: str = ""
    insecure_ignore_host_key: bool = False
    known_hosts: str = ""
    force_http: bool = False  # `insecureOCIForceHttp: "true"`: an OCI registry over plain HTTP

    def __repr__(self) -> str:
        def mask(value: str) -> str:
            return "'***'" if value else "''"

        known = "'<set>'" if self.known_hosts else "''"
        return (
            f"RepoCredentials(username={self.username!r}, password={mask(self.password)}, "
            f"ssh_private_key={mask(self.ssh_private_key)}, "
            f"insecure_ignore_host_key={self.insecure_ignore_host_key}, "
            f"known_hosts={known})"
        )

    __str__ = __repr__

    @property
    def secrets(self) -> tuple[str, ...]:
        return tuple(s for s in (self.password, self.ssh_private_key) if s)


def credentials_for(repo_url: str, secrets: list[dict[str, Any]]) -> RepoCredentials | None:
    """Pick the credentials for `repo_url` from (unsealed) Argo CD repository Secrets.

    A `repository` Secret whose url equals the repo URL (after normalization) wins when it carries
    credentials; otherwise the `repo-creds` template with the longest matching URL prefix on the same
    host applies, as in Argo CD.
    """
    wanted = credential_endpoint(repo_url)
    exact: RepoCredentials | None = None
    best: tuple[int, RepoCredentials] | None = None
    for secret in secrets:
        kind = ((secret.get("metadata") or {}).get("labels") or {}).get(LABEL_SECRET_TYPE)
        if kind not in (SECRET_TYPE_REPOSITORY, SECRET_TYPE_REPO_CREDS):
            continue
        fields = _secret_fields(secret)
        url = credential_endpoint(fields.get("url", ""))
        if not url:
            continue
        creds = _credentials_from_fields(fields)
        if kind == SECRET_TYPE_REPOSITORY and url == wanted and _has_secret(creds):
            exact = exact or creds
        elif kind == SECRET_TYPE_REPO_CREDS and _prefix_matches(url, wanted) and (best is None or len(url) > best[0]):
            best = (len(url), creds)
    if exact is not None:
        return exact
    return best[1] if best else None


def _secret_fields(secret: dict[str, Any]) -> dict[str, str]:
    """The Secret's `data` (base64-decoded) overlaid with its `stringData`, as Kubernetes does."""
    return text_fields(secret, f"Secret {(secret.get('metadata') or {}).get('name', '?')}")


def _credentials_from_fields(fields: dict[str, str]) -> RepoCredentials:
    return RepoCredentials(
        username=fields.get("username", ""),
        password=fields.get("password", ""),
        ssh_private_key=fields.get("sshPrivateKey", ""),
        insecure_ignore_host_key=fields.get("insecure", "").strip().lower() == "true",
        force_http=fields.get("insecureOCIForceHttp", "").strip().lower() == "true",
    )


def _has_secret(creds: RepoCredentials) -> bool:
    return bool(creds.username or creds.password or creds.ssh_private_key)


def _prefix_matches(prefix: str, url: str) -> bool:
    """Argo CD's prefix match, but never across hosts (`https://git.x` must not match `git.x.evil`)."""
    return url.startswith(prefix) and _host(prefix) == _host(url)


# --- repository URLs ---------------------------------------------------------------------------------
# Object-store keys use config.repo_key (one key for every spelling of a repo). Credentials match on the
# endpoint instead, which keeps scheme and user: an SSH key Secret must not be picked for an https URL.


def credential_endpoint(url: str) -> str:
    """Lower-case, without http credentials, trailing `/` or `.git`; `git@h:p` as `ssh://git@h/p`."""
    url = url.strip()
    if _SCP_LIKE.match(url) and "://" not in url:
        user_host, _, path = url.partition(":")
        url = f"ssh://{user_host}/{path.lstrip('/')}"
    parts = urlsplit(url)
    if parts.scheme in ("http", "https") and "@" in parts.netloc:
        parts = parts._replace(netloc=parts.netloc.rpartition("@")[2])
    url = urlunsplit(parts).lower().rstrip("/")
    return url.removesuffix(".git")


def _host(endpoint: str) -> str:
    return urlsplit(endpoint).netloc.rpartition("@")[2]


def _check_scheme(repo_url: str) -> None:
    scheme = urlsplit(repo_url).scheme
    if any(c.isspace() for c in repo_url):
        raise ConfigError(f"repoURL {redact_repo_url(repo_url)!r} contains whitespace")
    if scheme in ("http", "https", "ssh", "git") or (_SCP_LIKE.match(repo_url) and "://" not in repo_url):
        return
    raise ConfigError(f"repoURL {redact_repo_url(repo_url)!r}: only https, http, ssh and git URLs are supported")


# --- the dulwich client ------------------------------------------------------------------------------


@contextlib.contextmanager
def git_client(repo_url: str, credentials: RepoCredentials | None) -> Iterator[tuple[GitClient, str]]:
    """A dulwich client for the URL; SSH key and known_hosts live in temp files for the call only."""
    # lazy: cold start (dulwich, urllib3 only when a repository is reached: the runtime loads this module)
    import urllib3
    from dulwich.client import default_urllib3_manager, get_transport_and_path

    _check_scheme(repo_url)
    creds = credentials or RepoCredentials()
    kwargs: dict[str, Any] = {}
    if urlsplit(repo_url).scheme in ("http", "https"):
        kwargs["pool_manager"] = default_urllib3_manager(
            None, timeout=HTTP_TIMEOUT, cert_reqs="CERT_NONE" if creds.insecure_ignore_host_key else None,
            pool_manager_cls=_pool(urllib3.PoolManager), proxy_manager_cls=_pool(urllib3.ProxyManager),
        )
        if creds.username or creds.password:
            kwargs["username"] = creds.username or "git"
            kwargs["password"] = creds.password
        yield get_transport_and_path(repo_url, **kwargs)
        return
    with tempfile.TemporaryDirectory(prefix="tidecd-ssh-") as tmp:
        kwargs["ssh_command"] = ssh_command(creds, Path(tmp))
        if creds.ssh_private_key:
            key_file = Path(tmp) / "id"
            key_file.touch(mode=0o600)
            key_file.write_text(creds.ssh_private_key.rstrip("\n") + "\n")
            kwargs["key_filename"] = str(key_file)
        yield get_transport_and_path(repo_url, **kwargs)


def _pool(cls: Callable[..., Any]) -> Any:
    """`cls` (a urllib3 pool manager) whose retries ignore `Retry-After`: urllib3 otherwise sleeps as long
    as a 429/503 asks, in the step, and a hostile server can ask for years. The step's own retry (the
    SourceUnavailable's delay) waits instead."""
    # lazy: cold start (urllib3 only when a repository is reached: the runtime loads this module on every trigger)
    import urllib3

    return functools.partial(cls, retries=urllib3.Retry(total=3, respect_retry_after_header=False))


def ssh_command(creds: RepoCredentials, tmp: Path) -> str:
    """The `ssh` command line: batch mode, and host keys checked unless the repo is marked insecure. The
    connection is bounded in time as the HTTP one is (`HTTP_TIMEOUT`): a server that does not answer, or
    stops answering mid-fetch, ends the `ssh` child (and the fetch, as SourceUnavailable) instead of
    holding the step until the function's own timeout."""
    alive = max(1, int(HTTP_TIMEOUT // 4))
    args = ["ssh", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", f"ConnectTimeout={int(HTTP_TIMEOUT)}",
            "-o", f"ServerAliveInterval={alive}", "-o", "ServerAliveCountMax=4"]
    if creds.insecure_ignore_host_key:
        args += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    elif creds.known_hosts:
        known = tmp / "known_hosts"
        known.write_text(creds.known_hosts.rstrip("\n") + "\n")
        args += ["-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known}"]
    else:
        args += ["-o", "StrictHostKeyChecking=yes"]
    return shlex.join(args)


def transport_errors() -> tuple[type[BaseException], ...]:
    # lazy: cold start (dulwich, urllib3: only when a repository is reached; the runtime loads this module)
    import urllib3.exceptions
    from dulwich.client import HTTPProxyUnauthorized, HTTPUnauthorized
    from dulwich.errors import GitProtocolError, NotGitRepository

    return (
        GitProtocolError,
        NotGitRepository,
        HTTPUnauthorized,
        HTTPProxyUnauthorized,
        urllib3.exceptions.HTTPError,
        OSError,
        ValueError,  # dulwich's parse of an answer that is not git's (an HTML page with a 200, a cut pkt-line)
        AssertionError,  # dulwich checks a pack's header and sideband channels with assert
        BufferError,  # and a pack cut or spliced mid-object can leave its buffer in use
    )


def unavailable_error(repo_url: str, exc: BaseException, credentials: RepoCredentials | None) -> SourceUnavailable:
    """A SourceUnavailable naming the repo, with no credential in the text."""
    # lazy: cold start (dulwich only when a repository is reached: the runtime loads this module on every trigger)
    from dulwich.client import HTTPProxyUnauthorized, HTTPUnauthorized
    from dulwich.errors import NotGitRepository

    if isinstance(exc, HTTPUnauthorized | HTTPProxyUnauthorized):
        reason = "authentication failed (check the repository credentials)"
    elif isinstance(exc, NotGitRepository):
        reason = "not found or not a git repository"
    elif isinstance(exc, ValueError | AssertionError | BufferError):
        said = str(exc).split(", got", 1)[0]  # dulwich quotes the line it got: the server's page, not repeated
        reason = "its answer is not git's protocol (a web page? check the URL): " + _scrub(said, credentials)[:120]
    else:
        reason = _scrub(f"{type(exc).__name__}: {exc}", credentials)
    return SourceUnavailable(f"repository {redact_repo_url(repo_url)} is unavailable: {reason}", delay=30.0)


def _scrub(text: str, credentials: RepoCredentials | None) -> str:
    text = re.sub(r"://[^/@\s]+@", "://", text)
    for secret in credentials.secrets if credentials else ():
        text = text.replace(secret, "***")
    return text[:300]
