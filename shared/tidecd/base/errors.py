"""The exception tree of tidecd: every public exception, each under Permanent or Temporary.

    TidecdError
    ├── PermanentError                  retrying will not help: events are acknowledged, HTTP answers 4xx
    │   ├── ConfigError                 a user-written file or field is wrong (names the file and field);
    │   │                             also a missing or broken kubeconfig (clients.cluster.KubeCluster)
    │   │   ├── source.versions.BadConstraint  a targetRevision that is no version or semver constraint
    │   │   ├── config.appset.gotemplate.values.TemplateError  an ApplicationSet template that cannot be parsed or run
    │   │   ├── config.appset.discovery.GeneratorError  a generator that cannot produce its parameters
    │   │   └── config.rbac.PolicyError  an argocd-rbac-cm or role policy casbin (so Argo CD) refuses
    │   ├── UnsafePathError             a path, symlink or archive member would leave a repository checkout
    │   │   └── clients.store.InvalidKey  an object-store key with `..`, empty or clashing segments
    │   ├── RenderError                 a manifest source could not be rendered
    │   ├── SourceRefused               a fetched chart or artifact differs from the digest it is pinned to
    │   ├── LimitExceeded               input over a configured bound (tidecd.base.limits): size, depth, aliases
    │   │   └── source.helmrepo.RefusedAnswer  a helm index over its limit, kept with its ETag to refuse it unread
    │   ├── ProjectViolation            desired objects break their AppProject's rules (lists each object)
    │   ├── project.impersonation.NoServiceAccount  sync impersonation on, no destinationServiceAccounts entry
    │   ├── SecretError                 a sealed secret cannot be sealed or opened (never includes the value)
    │   ├── NotFound                    an app, revision or history entry does not exist
    │   │   └── clients.registry.NotInRegistry  no such image repository, tag or platform (also a LookupError)
    │   ├── OperationInProgress         an operation of the app is running already (`.operation_id`)
    │   ├── SyncWindowClosed            the project's sync windows do not let this sync start now
    │   ├── PermissionDenied            RBAC (argocd-rbac-cm, project roles) refuses the caller this action
    │   ├── base.tools.MissingTool      a binary tidecd runs (helm, kustomize, gotemplate) is not installed
    │   ├── triggers.dispatch.BadRefreshMessage  a refresh message that cannot be decoded
    │   ├── clients.github.Rejected     GitHub refused a request (4xx other than rate limiting)
    │   ├── clients.gitlab.Refused      GitLab answered an error status (its message cut, never the token)
    │   ├── clients.gitlab.Malformed    a GitLab answer that is not what its API gives
    │   ├── clients.gitlab.TooMany      a GitLab listing longer than its limit
    │   ├── clients.oidc.LoginRefused   an OIDC answer or ID token that proves nobody (never includes the token)
    │   ├── usecases.preview.BadPullRequest  a pull_request payload without a field a preview needs
    │   ├── usecases.migrate.MigrationError  `tidecd import` cannot read Argo CD or write its output
    │   ├── usecases.audit.BadBatch     an audit batch (or GKE log entry) that is not one (names the field)
    │   ├── clients.pushauth.NotAnEnvelope  a Pub/Sub push body that is not a push envelope
    │   ├── images.writeback.PushDeclined  a git server's hook declined a push (a protected branch): not retried
    │   ├── config.cache.CacheFormatError  a cached config object that does not decode (the full load runs instead)
    │   ├── health.lua.ScriptError      a resource action's Lua script failed (a Lua error, a spent budget)
    │   ├── cli.exits.Failed            the answer a CLI command ends with: its message and exit code
    │   ├── clients.pushauth.PushRefused  a Pub/Sub push whose OIDC token is not the subscription's (no token in it)
    │   ├── usecases.registry_events.Refused  a registry notification answered 4xx (a bad proof, a malformed payload)
    │   ├── usecases.registry_events.Ignored  a well-formed registry notification that names no push
    │   ├── sync.adopt.AdoptRefused     `tidecd app adopt/release` would not be exact (names each object)
    │   ├── clients.cluster.UnknownKind  the API server serves no such group/kind
    │   ├── clients.cluster.ClusterTlsError  the API server's certificate does not verify against the CA data
    │   ├── clients.credentials.ClusterCredentialError  a cluster Secret's exec plugin or awsAuthConfig gives no token
    │   └── clients.cluster.ApiError ∧ PermanentError    the API server refused, and would refuse again:
    │       ├── clients.cluster.ApiBadRequest  400 (and any other 4xx not below)
    │       ├── clients.cluster.ApiUnauthorized  401 credentials not accepted
    │       ├── clients.cluster.ApiForbidden  403 RBAC forbids the verb
    │       ├── clients.cluster.ApiNotFound  404 no such object or namespace
    │       ├── clients.cluster.ApiTooLarge  413 request entity too large
    │       └── clients.cluster.ApiInvalid  422 fails validation (an immutable field: hint Replace=true)
    └── TemporaryError(delay)         may succeed later: retried, or continued, after `delay` seconds
        ├── SourceUnavailable           a repository could not be reached
        ├── ClusterUnavailable          the API server could not be reached (connection, timeout)
        ├── LeaseHeld                   another call is reconciling the same app
        ├── clients.oidc.IssuerUnavailable  the OIDC issuer could not be reached
        ├── triggers.dispatch.NotYet  a continuation delivered before its `notBefore` (answered 429)
        ├── clients.store.StoreUnavailable  the object store could not be reached or failed
        ├── clients.store.Contended     a document kept changing under `update_json`
        ├── clients.store.PreconditionFailed  a document changed since it was read (re-read and decide again)
        ├── clients.github.Unavailable  GitHub could not be reached or answered 5xx
        ├── clients.github.RateLimited  GitHub's rate limit is used up; `delay` lasts until its reset
        ├── clients.gitlab.Unreachable  GitLab could not be reached (connection, timeout, certificate)
        ├── clients.registry.RegistryUnavailable  an image registry could not be reached
        ├── images.writeback.PushRejected          the branch moved while committing a write-back
        ├── images.github_write.ContentsConflict  the file kept changing under a GitHub API write-back
        ├── notify.deliver.DeliveryFailed  a notification did not go through (retried with backoff)
        ├── clients.notifiers.SendFailed  a notification service was not reached or refused (service and host only)
        │   └── notify.services.BadMessage  the rendered message cannot be sent as it is (not retried)
        ├── clients.pubsub.PublishFailed  a Pub/Sub message did not reach its topic (type and code only)
        └── clients.cluster.ApiError ∧ TemporaryError    the API server refused for now:
            ├── clients.cluster.ApiConflict  409 changed meanwhile, or still being deleted
            ├── clients.cluster.ApiGone       410 a list position expired
            ├── clients.cluster.ApiTooManyRequests  429 throttled; `delay` is the server's Retry-After
            └── clients.cluster.ApiServerError  5xx the API server, an aggregated API or a webhook failed

`clients.cluster.ApiError` is the base of every refusal (`except ApiError`); `ApiError(key, status, reason, message)`
builds the subclass of that status. Each carries the server Status' reason and message (shortened), never
the request body. `disposition` below is the one table the entry points use: acknowledge, retry later, or
answer 4xx/5xx. Foreign exceptions are translated at the boundary (`raise ... from exc`) and never echo
request bodies, so no secret value can leak through an error message.
"""

from __future__ import annotations

from dataclasses import dataclass


class TidecdError(Exception):
    """Base of every error tidecd raises on purpose."""


class PermanentError(TidecdError):
    """An error that will not go away by retrying."""


class ConfigError(PermanentError):
    """A user-written configuration is invalid; the message names the file, object and field."""


class UnsafePathError(PermanentError):
    """A path would escape the repository checkout (`..`, absolute path, symlink, tar member)."""


class RenderError(PermanentError):
    """Manifests could not be rendered from the source."""


class LimitExceeded(PermanentError):
    """Input is over one of the bounds of `tidecd.base.limits`; the message names the file or object and the
    variable that raises the limit. Content-determined: the same input always fails the same way."""


class ProjectViolation(PermanentError):
    """Desired objects break the AppProject's rules; nothing was applied."""

    def __init__(self, project: str, violations: list[str]) -> None:
        self.project = project
        self.violations = violations
        super().__init__(f"project {project!r} forbids: " + "; ".join(violations))


class SecretError(PermanentError):
    """A sealed secret could not be sealed or unsealed."""


class SourceRefused(PermanentError):
    """A fetched chart or artifact failed verification (its digest differs from the one it was pinned to)."""


class NotFound(PermanentError):
    """The named app, revision or history entry does not exist."""


class OperationInProgress(PermanentError):
    """A new operation was asked for while one is running; `operation_id` names the running one."""

    def __init__(self, app: str, operation_id: str) -> None:
        self.app, self.operation_id = app, operation_id
        super().__init__(f"app {app!r}: operation {operation_id} is running")


class SyncWindowClosed(PermanentError):
    """A sync was asked for while the app's AppProject `syncWindows` block it (the message names the window)."""


class PermissionDenied(PermanentError):
    """The caller's principal may not do this (Argo CD's `permission denied: RESOURCE, ACTION, OBJECT`)."""


class TemporaryError(TidecdError):
    """An error that may go away; retry after `delay` seconds."""

    def __init__(self, message: str, delay: float = 5.0) -> None:
        super().__init__(message)
        self.delay = delay


class SourceUnavailable(TemporaryError):
    """A git repository could not be reached or read."""


class ClusterUnavailable(TemporaryError):
    """The Kubernetes API server could not be reached."""


class LeaseHeld(TemporaryError):
    """Another call holds the app's lease."""


@dataclass(frozen=True)
class Disposition:
    """What an entry point does with an error: the HTTP answer (status, code) and, for an event (a Pub/Sub
    push), whether to fail the call so it is redelivered (`retry`) or to acknowledge it; `delay` is the
    seconds after which a retry can help (HTTP `Retry-After`, a continuation), None when it cannot."""

    status: int
    code: str
    retry: bool
    delay: float | None = None


_DISPOSITIONS: tuple[tuple[type[BaseException], int, str], ...] = (  # first match wins: specific first
    (NotFound, 404, "not_found"),
    (OperationInProgress, 409, "conflict"),
    (SyncWindowClosed, 409, "sync_window"),
    (PermissionDenied, 403, "permission_denied"),
    (LeaseHeld, 409, "busy"),
    (PermanentError, 400, "bad_request"),
    (TemporaryError, 503, "unavailable"),
)


def disposition(exc: BaseException) -> Disposition:
    """The exception tree as acknowledge / retry later / answer 4xx-5xx. Anything outside the tree is a bug:
    500, retried (a redelivery may meet a fixed version; Pub/Sub's retry policy bounds it)."""
    for cls, status, code in _DISPOSITIONS:
        if isinstance(exc, cls):
            delay = exc.delay if isinstance(exc, TemporaryError) else None
            return Disposition(status, code, retry=isinstance(exc, TemporaryError), delay=delay)
    return Disposition(500, "internal", retry=True)
