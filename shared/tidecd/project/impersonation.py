"""Sync impersonation: which ServiceAccount a sync acts as (Argo CD's `destinationServiceAccounts`).

With argocd-cm `application.sync.impersonation.enabled: "true"`, every write of a sync (its up-front
server-side dry-run, applies, hooks, prunes) is sent with `Impersonate-User:
system:serviceaccount:NS:SA`, so the cluster's RBAC for that ServiceAccount, not the cluster Secret's
rights, bounds what an app can change. The cluster Secret's identity then needs only to read and to
`impersonate` ServiceAccounts.

Matching is Argo CD's (`deriveServiceAccountToImpersonate`): the project's entries in order, the first whose
`server` glob matches the destination's server URL and whose `namespace` glob matches the app's destination
namespace wins. `defaultServiceAccount` is `NAME` (in the destination namespace) or `NAMESPACE:NAME`. No
match fails the sync with Argo CD's message when `application.sync.impersonation.enforced` is true (its
default); when it is false the sync acts with the cluster Secret's own rights.
"""

from __future__ import annotations

from tidecd.base.errors import PermanentError
from tidecd.base.globs import compile_glob
from tidecd.config.argocd_settings import ArgoSettings
from tidecd.config.model import SERVICE_ACCOUNT_DISALLOWED, AppProject


class NoServiceAccount(PermanentError):
    """Impersonation is on and enforced, and no `destinationServiceAccounts` entry matches the destination
    (or the matching entry names no usable ServiceAccount)."""


def _matches(pattern: str, value: str, what: str) -> bool:
    """Argo CD's `glob.Match` (no separator: `*` crosses `/` and `.`)."""
    try:
        return compile_glob(pattern).fullmatch(value) is not None
    except ValueError:
        raise NoServiceAccount(f"failed to find a matching service account to impersonate: invalid glob "
                               f"pattern for destination {what}: {pattern!r}") from None


def service_account(project: AppProject, server: str, namespace: str) -> str:
    """The user a sync to (`server`, `namespace`) impersonates, `system:serviceaccount:NS:NAME`; raises
    NoServiceAccount when no entry matches."""
    for item in project.destination_service_accounts:
        if _matches(item.server, server, "server") and _matches(item.namespace, namespace, "namespace"):
            account = item.default_service_account.strip()
            if not account or any(c in account for c in SERVICE_ACCOUNT_DISALLOWED):
                raise NoServiceAccount(f"failed to find a matching service account to impersonate: default "
                                       f"service account contains invalid chars {account!r}")
            if ":" in account:  # NAMESPACE:NAME, a ServiceAccount of another namespace
                return f"system:serviceaccount:{account}"
            if not namespace:  # Argo CD falls back to the Application's namespace, which tidecd apps lack
                raise NoServiceAccount(f"failed to find a matching service account to impersonate: the app has "
                                       f"no destination namespace, so name the service account as "
                                       f"NAMESPACE:{account}")
            return f"system:serviceaccount:{namespace}:{account}"
    raise NoServiceAccount(f"failed to find a matching service account to impersonate: no matching service "
                           f"account found for destination server {server} and namespace {namespace}")


def sync_user(settings: ArgoSettings, project: AppProject, server: str, namespace: str) -> str:
    """Whom a sync acts as: "" for the cluster Secret's own identity (impersonation off, or not enforced
    and nothing matches), else the ServiceAccount user."""
    if not settings.sync_impersonation:
        return ""
    try:
        return service_account(project, server, namespace)
    except NoServiceAccount:
        if settings.impersonation_enforced:
            raise
        return ""
