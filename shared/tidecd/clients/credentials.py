"""Short-lived cluster credentials: an exec credential plugin, or the function's own Google identity.

A cluster Secret's `config` may name no long-lived token at all (Argo CD's formats):

- `execProviderConfig` {command, args, env, apiVersion, installHint}: run the plugin as kubectl does
  (`client.authentication.k8s.io` ExecCredential on stdout), use `status.token` and cache it until its
  `status.expirationTimestamp` (less a minute), then run the plugin again. The plugin gets PATH, HOME, the
  `env` of the config and `KUBERNETES_EXEC_INFO`, never the function's own environment (its sealing keys
  and tokens), and runs within bounds (`tidecd.base.child`): PLUGIN_SECONDS, PLUGIN_MEMORY_BYTES, and at
  most PLUGIN_OUTPUT_BYTES of output. A token answered with no expiry is kept until the API server refuses it.
- GKE through Workload Identity: `execProviderConfig` naming Argo CD's `argocd-k8s-auth gcp` or Google's
  `gke-gcloud-auth-plugin`, which the functions' image does not carry, is served in-process by google-auth's
  default credentials (the function's service account on Cloud Run, `GOOGLE_APPLICATION_CREDENTIALS`
  elsewhere): short-lived access tokens, refreshed by google-auth before they expire.
- `awsAuthConfig` (EKS) is not implemented: tidecd ships no AWS client, and says so naming the field.

Errors name the cluster Secret and the field; a plugin's output is never echoed (it holds the token), only
the end of its stderr.
"""

from __future__ import annotations

import datetime
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tidecd.base import child
from tidecd.base.errors import ClusterUnavailable, PermanentError

EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
GOOGLE_PLUGINS = ("argocd-k8s-auth gcp", "gke-gcloud-auth-plugin")  # served by google-auth in-process
GOOGLE_SCOPES = ("https://www.googleapis.com/auth/cloud-platform", "https://www.googleapis.com/auth/userinfo.email")
PLUGIN_SECONDS = 30.0
PLUGIN_MEMORY_BYTES = 512 * 2**20
PLUGIN_OUTPUT_BYTES = 1 * 2**20
EXPIRY_MARGIN = 60.0  # seconds before its expiry a token is asked for again (clock skew, a slow request)
STDERR_SHOWN = 300


class ClusterCredentialError(PermanentError):
    """A cluster Secret's credential settings cannot give a token: a malformed `execProviderConfig`, a
    plugin's answer that is no ExecCredential, or `awsAuthConfig` (not implemented)."""


class TokenSource(Protocol):
    """Where a cluster's bearer token comes from, asked before every request (cheap while cached)."""

    def token(self) -> str: ...

    def forget(self) -> None: ...


@dataclass(frozen=True)
class ExecConfig:
    """`execProviderConfig` of a cluster Secret, checked."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = EXEC_API_VERSIONS[1]
    install_hint: str = ""

    @property
    def google(self) -> bool:
        """A GKE plugin, served by google-auth instead of a process."""
        line = " ".join([os.path.basename(self.command), *self.args[:1]])
        return line in GOOGLE_PLUGINS or os.path.basename(self.command) == GOOGLE_PLUGINS[1]


def exec_config(raw: object, what: str) -> ExecConfig:
    """`execProviderConfig` as Argo CD writes it; a bad field is an error naming `what` and the field."""
    field = f"{what}: config.execProviderConfig"
    if not isinstance(raw, dict):
        raise ClusterCredentialError(f"{field}: expected an object")
    command, args, env = raw.get("command"), raw.get("args") or [], raw.get("env") or {}
    api_version = raw.get("apiVersion") or EXEC_API_VERSIONS[1]
    if not isinstance(command, str) or not command:
        raise ClusterCredentialError(f"{field}.command: expected the plugin's executable")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ClusterCredentialError(f"{field}.args: expected a list of strings")
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ClusterCredentialError(f"{field}.env: expected a mapping of strings")
    if api_version not in EXEC_API_VERSIONS:
        raise ClusterCredentialError(f"{field}.apiVersion: {str(api_version)[:80]!r}: expected one of "
                                     f"{', '.join(EXEC_API_VERSIONS)}")
    hint = raw.get("installHint")
    return ExecConfig(command=command, args=tuple(args), env=tuple(sorted(env.items())), api_version=api_version,
                      install_hint=hint if isinstance(hint, str) else "")


Runner = Callable[[Sequence[str], Mapping[str, str]], "Ran"]


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: bytes
    stderr: str


def run_plugin(argv: Sequence[str], env: Mapping[str, str]) -> Ran:
    """Run a credential plugin within PLUGIN_SECONDS, PLUGIN_MEMORY_BYTES and PLUGIN_OUTPUT_BYTES; its
    whole process group is killed when it passes the time."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        ended, returncode = child.run(argv, env=env, memory_bytes=PLUGIN_MEMORY_BYTES,
                                      output_bytes=PLUGIN_OUTPUT_BYTES + 1, seconds=PLUGIN_SECONDS, stdin=None,
                                      stdout=out, stderr=err)
        if not ended:
            raise ClusterUnavailable(f"{argv[0]}: no answer within {PLUGIN_SECONDS:.0f}s")
        out.seek(0)
        stdout = out.read(PLUGIN_OUTPUT_BYTES + 1)
        err.seek(max(0, os.fstat(err.fileno()).st_size - STDERR_SHOWN))
        return Ran(returncode, stdout, err.read().decode("utf-8", errors="replace").strip())


class ExecTokens:
    """The tokens of one exec plugin, cached until they expire (`invocations` counts the runs)."""

    def __init__(self, config: ExecConfig, what: str, *, run: Runner = run_plugin,
                 now: Callable[[], float] = time.time) -> None:
        self.config, self.what, self._run, self._now = config, what, run, now
        self._lock = threading.Lock()
        self._token, self._expires = "", 0.0
        self.invocations = 0

    def token(self) -> str:
        with self._lock:
            if not self._token or self._now() >= self._expires - EXPIRY_MARGIN:
                self._token, self._expires = self._fetch()
            return self._token

    def forget(self) -> None:
        """Drop the cached token (the API server refused it): the next request runs the plugin again."""
        with self._lock:
            self._token = ""

    def _fetch(self) -> tuple[str, float]:
        self.invocations += 1
        config, what = self.config, f"{self.what}: credential plugin {self.config.command}"
        info = {"apiVersion": config.api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tempfile.gettempdir(), **dict(config.env),
               "KUBERNETES_EXEC_INFO": json.dumps(info)}
        try:
            ran = self._run([config.command, *config.args], env)
        except OSError as exc:
            raise ClusterUnavailable(f"{what}: cannot run it: {exc.strerror}") from None
        if ran.returncode == child.CANNOT_RUN and ran.stderr.startswith(child.EXEC_FAILED):
            hint = f" ({config.install_hint.strip()[:200]})" if config.install_hint.strip() else ""
            raise ClusterCredentialError(f"{what}: {ran.stderr.removeprefix(child.EXEC_FAILED).strip()}{hint}")
        if ran.returncode != 0:
            said = f": {ran.stderr[-STDERR_SHOWN:]}" if ran.stderr else ""
            raise ClusterUnavailable(f"{what}: exit status {ran.returncode}{said}")
        return parse_exec_credential(ran.stdout, config.api_version, what)


def parse_exec_credential(stdout: bytes, api_version: str, what: str) -> tuple[str, float]:
    """(token, expiry as a Unix time; +inf when none) of a plugin's ExecCredential; never echoes it."""
    if len(stdout) > PLUGIN_OUTPUT_BYTES:
        raise ClusterCredentialError(f"{what}: answer over {PLUGIN_OUTPUT_BYTES} bytes")
    try:
        doc = json.loads(stdout)
    except ValueError:
        raise ClusterCredentialError(f"{what}: answer is not JSON (an ExecCredential expected)") from None
    if not isinstance(doc, dict) or doc.get("kind") != "ExecCredential":
        raise ClusterCredentialError(f"{what}: answer is not an ExecCredential")
    if doc.get("apiVersion") != api_version:
        raise ClusterCredentialError(f"{what}: answer's apiVersion {str(doc.get('apiVersion'))[:80]!r} is not "
                                     f"the configured {api_version}")
    status = doc.get("status")
    if not isinstance(status, dict):
        raise ClusterCredentialError(f"{what}: answer has no status")
    token = status.get("token")
    if not isinstance(token, str) or not token:
        extra = " (client certificates from a plugin are not implemented)" if status.get(
            "clientCertificateData") else ""
        raise ClusterCredentialError(f"{what}: answer has no status.token{extra}")
    stamp = status.get("expirationTimestamp")
    if not stamp:
        return token, float("inf")
    try:
        when = datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        raise ClusterCredentialError(f"{what}: status.expirationTimestamp {str(stamp)[:40]!r} is not "
                                     "an RFC 3339 time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return token, when.timestamp()


class GoogleTokens:
    """Access tokens of google-auth's credentials (by default the function's own identity), refreshed by
    google-auth when they are no longer valid (it treats a token as expired a few minutes early)."""

    def __init__(self, credentials: Any = None, request: Any = None) -> None:
        self._credentials, self._request = credentials, request
        self._lock = threading.Lock()

    def token(self) -> str:
        # lazy: cold start (google-auth only when a GKE cluster is reached)
        import google.auth
        import google.auth.exceptions
        import google.auth.transport.requests

        with self._lock:
            try:
                if self._credentials is None:
                    self._credentials, _ = google.auth.default(scopes=list(GOOGLE_SCOPES))
                if not self._credentials.valid:
                    self._credentials.refresh(self._request or google.auth.transport.requests.Request())
            except google.auth.exceptions.DefaultCredentialsError:
                raise ClusterCredentialError("GKE credentials: no Google identity found (on Cloud Run the "
                                             "function's service account; elsewhere set "
                                             "GOOGLE_APPLICATION_CREDENTIALS)") from None
            except google.auth.exceptions.GoogleAuthError as exc:
                raise ClusterUnavailable(f"GKE credentials: token refresh failed ({type(exc).__name__})") from None
            return str(self._credentials.token)

    def forget(self) -> None:
        """Nothing to drop: google-auth refreshes a token that is no longer valid."""


def token_source(settings: Mapping[str, Any], what: str) -> TokenSource | None:
    """The token source a cluster Secret's `config` asks for, None for a static token or certificate."""
    if settings.get("awsAuthConfig"):
        raise ClusterCredentialError(f"{what}: config.awsAuthConfig: EKS IAM authentication is not implemented "
                                     "by tidecd (no AWS client); use execProviderConfig with a plugin that "
                                     "prints an ExecCredential, or a bearerToken")
    raw = settings.get("execProviderConfig")
    if not raw:
        return None
    config = exec_config(raw, what)
    return GoogleTokens() if config.google else ExecTokens(config, what)
