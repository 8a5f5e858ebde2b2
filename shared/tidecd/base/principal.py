"""Who is asking: the one value that authentication produces and authorization consumes.

Every entry point (the api's bearer tokens, the dashboard's session, an OIDC login, a project role's JWT)
turns its proof into a `Principal`; RBAC (`tidecd.config.rbac`, `tidecd.usecases.authz`) decides on it and
the audit log and `initiatedBy.username` name it. Frozen and free of secrets, so it can travel between
stages and into logs. Below every layer, so the ui, the api, the CLI and the use cases share it.
"""

from __future__ import annotations

from dataclasses import dataclass

ADMIN_SUBJECT = "admin"  # Argo CD's builtin policy binds it: `g, admin, role:admin`
READONLY_SUBJECT = "readonly"  # tidecd binds it (`g, readonly, role:readonly`) for the read-only token


@dataclass(frozen=True)
class Principal:
    """A caller as Argo CD's RBAC sees one: the subject (a user name or email, `admin`, or a project role's
    `proj:PROJECT:ROLE`) and the groups its login carried (the OIDC claims named by `scopes`)."""

    subject: str
    groups: tuple[str, ...] = ()
    via: str = ""  # how it proved itself: "api-token", "session", "oidc", "project-token" (audit only)
    token_id: str = ""  # a project token's id (jti), so the audit log names the token, never its value

    @property
    def project_role(self) -> tuple[str, str] | None:
        """(project, role) for a project role's subject `proj:P:R`, as Argo CD splits it; else None."""
        parts = self.subject.split(":")
        return (parts[1], parts[2]) if len(parts) == 3 and parts[0] == "proj" else None

    @property
    def username(self) -> str:
        """What `initiatedBy.username` and the audit log show: the subject, and a token's id after it."""
        return f"{self.subject} (token {self.token_id})" if self.token_id else self.subject


ADMIN = Principal(ADMIN_SUBJECT, via="api-token")
READONLY = Principal(READONLY_SUBJECT, via="api-token")
AUTOMATED = Principal("automated", via="policy")  # the app's own syncPolicy: no person behind it
