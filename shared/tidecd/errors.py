"""The exception tree of tidecd.

    TidecdError
    ├── PermanentError          retrying will not help: the entry point gives up and reports it
    │   ├── ConfigError         a user-written file or field is wrong (names the file and field)
    │   ├── UnsafePathError     a path, symlink or archive member would leave a repository checkout
    │   ├── RenderError         a manifest source could not be rendered
    │   ├── LimitExceeded       input over a configured bound (tidecd.limits): size, depth, aliases
    │   ├── ProjectViolation    desired objects break their AppProject's rules (lists each object)
    │   ├── SecretError         a sealed secret cannot be sealed or opened (never includes the value)
    │   ├── NotFound            an app, revision or history entry does not exist
    │   └── OperationInProgress an operation of the app is running already (`.operation_id`)
    └── TemporaryError(delay)   may succeed later: the entry point retries after `delay` seconds
        ├── SourceUnavailable   a repository could not be reached
        ├── ClusterUnavailable  the API server could not be reached
        └── LeaseHeld           another call is reconciling the same app

Foreign exceptions are translated at the boundary (`raise ... from exc`) and never echo request bodies,
so no secret value can leak through an error message.
"""

from __future__ import annotations


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
    """Input is over one of the bounds of `tidecd.limits`; the message names the file or object and the
    variable that raises the limit. Content-determined: the same input always fails the same way."""


class ProjectViolation(PermanentError):
    """Desired objects break the AppProject's rules; nothing was applied."""

    def __init__(self, project: str, violations: list[str]) -> None:
        self.project = project
        self.violations = violations
        super().__init__(f"project {project!r} forbids: " + "; ".join(violations))


class SecretError(PermanentError):
    """A sealed secret could not be sealed or unsealed."""


class NotFound(PermanentError):
    """The named app, revision or history entry does not exist."""


class OperationInProgress(PermanentError):
    """A new operation was asked for while one is running; `operation_id` names the running one."""

    def __init__(self, app: str, operation_id: str) -> None:
        self.app, self.operation_id = app, operation_id
        super().__init__(f"app {app!r}: operation {operation_id} is running")


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
