"""Who may do what: every api call, dashboard page and action, and CLI command, decided by Argo CD's RBAC.

`authenticate` turns a request's proof into a `Principal`: the admin bearer token is `admin` (Argo CD's
builtin `g, admin, role:admin`), the read-only one `readonly` (bound here to `role:readonly`), a project
role's JWT (`tidecd.usecases.tokens`) its `proj:PROJECT:ROLE`, a local account's JWT the account's name,
an ID token of argocd-cm's OIDC issuer (`tidecd.usecases.login`) the person it names, with the groups of
its `groups` claim. `allowed` then asks Argo CD's question with Argo CD's answer (`tidecd.config.rbac`):
`argocd-rbac-cm`'s policy, the builtin roles and, for an object of a project (`project/app`), that
project's roles as the runtime policy; the subject first (with `policy.default`), then each of the
principal's groups that some `g` line names, as Argo CD's `EnforceClaims` does. A project token answers
only for its own project.

A local account's own tokens and details are its own business, as Argo CD's `ensureHasAccountPermission`
has it: the account itself, logged in locally (a password login or one of its tokens, never SSO), may; any
other principal needs `accounts, ACTION, NAME` (`account_allowed`).

tidecd adds one resource Argo CD has not: `audit` (`get`, the audit log), granted to `role:admin`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tidecd.base.bearer import authorized
from tidecd.base.errors import NotFound, PermissionDenied
from tidecd.base.principal import ADMIN, READONLY, READONLY_SUBJECT, Principal
from tidecd.config import rbac
from tidecd.config.load import Application, AppProject, Config
from tidecd.runtime import Runtime
from tidecd.state import auditlog

# What tidecd's own tokens and resources add to every policy.
TIDECD_POLICY = f"g, {READONLY_SUBJECT}, role:readonly\np, role:admin, audit, get, *, allow"
AUDIT = "audit"
ACCOUNTS = "accounts"
LOCAL_PROOFS = ("local", "account-token")  # Argo CD's "issued by the session manager": not SSO, not a bearer


def authenticate(runtime: Runtime, headers: Mapping[str, str]) -> Principal | None:
    """The principal a request's `Authorization: Bearer ...` proves, or None."""
    settings = runtime.settings
    if authorized(headers, settings.api_token):
        return ADMIN
    if authorized(headers, settings.api_readonly_token):
        return READONLY
    given = (headers.get("Authorization") or headers.get("authorization") or "").partition(" ")
    if given[0].lower() == "bearer" and given[2].count(".") == 2:
        # lazy: cold start (PyJWT only when a JWT is presented)
        from tidecd.usecases import login, tokens

        own_token = tokens.verify(runtime, given[2].strip())  # a project role's or a local account's
        if own_token is not None:
            return own_token
        try:  # an ID token of argocd-cm's OIDC issuer (`tidecd login --sso`): the person and their groups
            return login.bearer(runtime, given[2].strip())
        except login.LoginRefused:
            return None
    return None


def app_object(app: Application) -> str:
    """Argo CD's RBAC object of an app: `project/name`."""
    return f"{app.project}/{app.name}"


def _project(config: Config, resource: str, obj: str) -> AppProject | None:
    """The project a request is about, as Argo CD's `getProjectFromRequest` finds it."""
    if resource in rbac.PROJECT_SCOPED and "/" in obj:
        return config.projects.get(obj.split("/")[0])
    if resource == rbac.PROJECTS:
        return config.projects.get(obj)
    return None


def allowed(config: Config, principal: Principal, resource: str, action: str, obj: str) -> bool:
    """Argo CD's answer for this principal (see the module docstring)."""
    project = _project(config, resource, obj)
    runtime_policy = rbac.project_policy(project.name, project.roles) if project else ""
    policy = rbac.of_config(config.argo_settings.rbac, runtime_policy, extra=TIDECD_POLICY)
    own = principal.project_role
    if own is not None:
        return project is not None and project.name == own[0] and any(r.name == own[1] for r in project.roles) \
            and policy.enforce(principal.subject, resource, action, obj)
    if policy.enforce(principal.subject, resource, action, obj):
        return True
    grouped = policy.grouped()
    return any(policy.enforce(group, resource, action, obj) for group in principal.groups if group in grouped)


def account_allowed(config: Config, principal: Principal, action: str, name: str) -> bool:
    """May `principal` `action` (get, update) the local account `name` (see the module docstring)?"""
    if principal.subject == name and principal.via in LOCAL_PROOFS:
        return True
    return allowed(config, principal, ACCOUNTS, action, name)


def require_account(runtime: Runtime, principal: Principal, action: str, name: str) -> None:
    """PermissionDenied (recorded in the audit log) unless `principal` may `action` the account `name`."""
    if not account_allowed(runtime.config(), principal, action, name):
        auditlog.record(runtime.store, principal, ACCOUNTS, action, name, allowed=False, detail="permission denied")
        raise PermissionDenied(f"permission denied: {ACCOUNTS}, {action}, {name}, sub: {principal.subject}")


def require(runtime: Runtime, principal: Principal, resource: str, action: str, obj: str) -> None:
    """PermissionDenied (recorded in the audit log) unless `principal` may."""
    if not allowed(runtime.config(), principal, resource, action, obj):
        auditlog.record(runtime.store, principal, resource, action, obj, allowed=False, detail="permission denied")
        raise PermissionDenied(f"permission denied: {resource}, {action}, {obj}, sub: {principal.subject}")


def app_for(runtime: Runtime, principal: Principal, name: str, action: str = "get") -> Application:
    """The app `name` when the principal may `action` it. One it may not even see is NotFound, as an app that
    does not exist (its existence is not told); one it sees but may not act on is PermissionDenied."""
    app = runtime.app(name)
    obj = app_object(app)
    config = runtime.config()
    if not allowed(config, principal, rbac.APPLICATIONS, "get", obj):
        auditlog.record(runtime.store, principal, rbac.APPLICATIONS, action, obj, allowed=False,
                        detail="permission denied (the app is not visible to this principal)")
        raise NotFound(f"app {name!r} not found")
    if action != "get":
        require(runtime, principal, rbac.APPLICATIONS, action, obj)
    return app


def visible(config: Config, principal: Principal, names: Iterable[str]) -> list[str]:
    """The apps of `names` the principal may see (lists, searches, counts)."""
    out = []
    for name in names:
        app = config.applications.get(name)
        if app is not None and allowed(config, principal, rbac.APPLICATIONS, "get", app_object(app)):
            out.append(name)
    return out


def done(runtime: Runtime, principal: Principal, resource: str, action: str, obj: str, detail: str = "") -> None:
    """Record an action that was allowed and carried out."""
    auditlog.record(runtime.store, principal, resource, action, obj, allowed=True, detail=detail)
