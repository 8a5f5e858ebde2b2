"""Argo CD's RBAC as Argo CD has it: `argocd-rbac-cm`, the builtin roles, casbin with Argo CD's own model.

A policy written for Argo CD must mean the same here, so nothing is reinterpreted: the model below is
Argo CD's `assets/model.conf`, the builtin policy its `assets/builtin-policy.csv`, and the enforcement
follows `util/rbac/rbac.go`:

- the policy is the builtin one, then `policy.csv`, then every `policy.*.csv` overlay in key order, then
  (for a request about a project's object) that project's roles (`runtime` policy);
- `policy.default` is tried first, as the subject; then the subject itself;
- `policy.matchMode` `glob` (gobwas/glob without separators: `*` crosses `/`) or `regex` (Go's
  `regexp.MatchString`: unanchored) decides how resources, actions and objects match;
- an effect other than `allow`/`deny` neither allows nor denies (casbin).

Project roles (`spec.roles`) become Argo CD's `ProjectPoliciesString`: each role may `get` its project,
has its own `policies`, and each of its `groups` is bound to it. Casbin (pycasbin) evaluates; this module
only reads the text, builds enforcers (cached per policy text) and answers `enforce`. It is pure: no
store, no clock, no I/O, so the CLI's `admin rbac can` and the api share it.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any

import yaml

from tidecd.base.errors import ConfigError
from tidecd.base.globs import compile_glob

if TYPE_CHECKING:
    import casbin

MODEL_CONF = """\
[request_definition]
r = sub, res, act, obj

[policy_definition]
p = sub, res, act, obj, eft

[role_definition]
g = _, _

[policy_effect]
e = some(where (p.eft == allow)) && !some(where (p.eft == deny))

[matchers]
m = g(r.sub, p.sub) && globOrRegexMatch(r.res, p.res) && globOrRegexMatch(r.act, p.act) \
&& globOrRegexMatch(r.obj, p.obj)
"""

BUILTIN_POLICY = """\
p, role:readonly, applications, get, */*, allow
p, role:readonly, applicationsets, get, */*, allow
p, role:readonly, certificates, get, *, allow
p, role:readonly, clusters, get, *, allow
p, role:readonly, repositories, get, *, allow
p, role:readonly, write-repositories, get, *, allow
p, role:readonly, projects, get, *, allow
p, role:readonly, accounts, get, *, allow
p, role:readonly, gpgkeys, get, *, allow
p, role:readonly, logs, get, */*, allow

p, role:admin, applications, create, */*, allow
p, role:admin, applications, update, */*, allow
p, role:admin, applications, update/*, */*, allow
p, role:admin, applications, delete, */*, allow
p, role:admin, applications, delete/*, */*, allow
p, role:admin, applications, sync, */*, allow
p, role:admin, applications, rollback, */*, allow
p, role:admin, applications, override, */*, allow
p, role:admin, applications, action/*, */*, allow
p, role:admin, applicationsets, get, */*, allow
p, role:admin, applicationsets, create, */*, allow
p, role:admin, applicationsets, update, */*, allow
p, role:admin, applicationsets, delete, */*, allow
p, role:admin, certificates, create, *, allow
p, role:admin, certificates, update, *, allow
p, role:admin, certificates, delete, *, allow
p, role:admin, clusters, create, *, allow
p, role:admin, clusters, update, *, allow
p, role:admin, clusters, delete, *, allow
p, role:admin, repositories, create, *, allow
p, role:admin, repositories, update, *, allow
p, role:admin, repositories, delete, *, allow
p, role:admin, write-repositories, create, *, allow
p, role:admin, write-repositories, update, *, allow
p, role:admin, write-repositories, delete, *, allow
p, role:admin, projects, create, *, allow
p, role:admin, projects, update, *, allow
p, role:admin, projects, delete, *, allow
p, role:admin, accounts, update, *, allow
p, role:admin, gpgkeys, create, *, allow
p, role:admin, gpgkeys, delete, *, allow
p, role:admin, exec, create, */*, allow
p, role:admin, exec, debug, */*, allow

g, role:admin, role:readonly
g, admin, role:admin
"""

RBAC_CM = "argocd-rbac-cm"
POLICY_CSV, POLICY_DEFAULT, MATCH_MODE, SCOPES = "policy.csv", "policy.default", "policy.matchMode", "scopes"
HONOURED_KEYS = (POLICY_CSV, POLICY_DEFAULT, MATCH_MODE, SCOPES)
GLOB, REGEX = "glob", "regex"
DEFAULT_SCOPES = ("groups",)
MAX_POLICY_BYTES = 1 << 20  # a policy is text people write: a megabyte is far beyond any real one

# Argo CD's resources and actions (util/rbac); project-scoped resources name objects `project/name`.
APPLICATIONS, APPLICATIONSETS, PROJECTS, CLUSTERS = "applications", "applicationsets", "projects", "clusters"
PROJECT_SCOPED = frozenset({APPLICATIONS, APPLICATIONSETS, "logs", "exec", CLUSTERS, "repositories"})


class PolicyError(ConfigError):
    """A policy casbin (and so Argo CD) refuses: the message names the line."""


@dataclass(frozen=True)
class RbacConfig:
    """What `argocd-rbac-cm` says (the default: no ConfigMap, only the builtin roles)."""

    policy_csv: str = ""  # policy.csv, then every policy.*.csv overlay in key order (Argo CD's PolicyCSV)
    default_role: str = ""  # policy.default
    match_mode: str = GLOB  # policy.matchMode
    scopes: tuple[str, ...] = DEFAULT_SCOPES  # the claims whose values are groups
    origin: str = ""  # the file the ConfigMap came from ("" when there is none)


NO_RBAC = RbacConfig()


@dataclass(frozen=True)
class IssuedToken:
    """One `spec.roles[].jwtTokens` entry: a token Argo CD issued for the role (`argocd proj role
    create-token`). tidecd accepts such a token while it is listed here (`usecases.tokens`)."""

    iat: int
    id: str = ""
    exp: int = 0  # 0: never expires


@dataclass(frozen=True)
class ProjectRole:
    """One AppProject `spec.roles` entry."""

    name: str
    description: str = ""
    policies: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    jwt_tokens: tuple[IssuedToken, ...] = ()  # the tokens Argo CD issued, as listed in git

    def issued(self, iat: int, token_id: str) -> IssuedToken | None:
        """The listed token with this id, or with this iat when the token has no id: Argo CD's
        `GetJWTToken`, so deleting the entry from git revokes the token."""
        return next((t for t in self.jwt_tokens if (t.id == token_id if token_id else t.iat == iat)), None)


def honoured(key: str) -> bool:
    """Whether tidecd reads this argocd-rbac-cm key (the rest is reported, not used)."""
    return key in HONOURED_KEYS or (key.startswith("policy.") and key.endswith(".csv"))


def policy_csv(data: Mapping[str, Any]) -> str:
    """Argo CD's `PolicyCSV`: `policy.csv` first, then each `policy.*.csv` key in sorted order."""
    parts = [str(data.get(POLICY_CSV) or "")]
    parts += [str(data[k] or "") for k in sorted(data) if k.startswith("policy.") and k.endswith(".csv")
              and k != POLICY_CSV]
    return "\n".join(parts)


def from_config_map(data: Mapping[str, Any], origin: str = "") -> RbacConfig:
    """The settings of an `argocd-rbac-cm`'s `data` (values are strings; `scopes` a YAML list)."""
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    if data.get(SCOPES):
        loaded = yaml.safe_load(str(data[SCOPES]))
        if not isinstance(loaded, list) or not all(isinstance(s, str) for s in loaded):
            raise PolicyError(f"{origin}: ConfigMap/{RBAC_CM}: data.scopes: expected a list of claim names "
                              f"such as [groups, email], got {str(data[SCOPES])[:80]!r}")
        scopes = tuple(loaded)
    text = policy_csv(data)
    if len(text.encode()) > MAX_POLICY_BYTES:
        raise PolicyError(f"{origin}: ConfigMap/{RBAC_CM}: the policy is over {MAX_POLICY_BYTES:,} bytes")
    mode = str(data.get(MATCH_MODE) or "")
    return RbacConfig(policy_csv=text, default_role=str(data.get(POLICY_DEFAULT) or ""),
                      match_mode=REGEX if mode == REGEX else GLOB, scopes=scopes, origin=origin)


def from_file_text(text: str, origin: str) -> RbacConfig:
    """`argocd admin settings rbac can --policy-file`: a ConfigMap YAML when it reads as one, else CSV."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        doc = None
    if isinstance(doc, dict) and ("data" in doc or doc.get("kind") == "ConfigMap"):
        data = doc.get("data") or {}
        if not isinstance(data, dict):
            raise PolicyError(f"{origin}: data: expected a mapping")
        return from_config_map({str(k): "" if v is None else str(v) for k, v in data.items()}, origin)
    return RbacConfig(policy_csv=text, origin=origin)


def project_policy(project: str, roles: Iterable[ProjectRole]) -> str:
    """Argo CD's `ProjectPoliciesString`: the runtime policy a request about this project's objects adds."""
    lines: list[str] = []
    for role in roles:
        subject = f"proj:{project}:{role.name}"
        lines.append(f"p, {subject}, projects, get, {project}, allow")
        lines.extend(role.policies)
        lines.extend(f"g, {group}, {subject}" for group in role.groups)
    return "\n".join(lines)


def role_policy_problems(project: str, role: ProjectRole) -> list[str]:
    """Argo CD's checks of a role's policies: its own subject, an object of its own project, known effect."""
    problems = []
    subject = f"proj:{project}:{role.name}"
    for i, line in enumerate(role.policies):
        tokens = [t.strip() for t in line.split(",")]
        if len(tokens) != 6 or tokens[0] != "p":
            problems.append(f"policies[{i}]: {line!r}: expected 'p, {subject}, RESOURCE, ACTION, OBJECT, EFFECT'")
        elif tokens[1] != subject:
            problems.append(f"policies[{i}]: subject {tokens[1]!r} must be {subject!r}")
        elif tokens[2] != PROJECTS and not tokens[4].startswith(f"{project}/"):
            problems.append(f"policies[{i}]: object {tokens[4]!r} must be of this project ({project}/...)")
        elif tokens[5] not in ("allow", "deny"):
            problems.append(f"policies[{i}]: effect {tokens[5]!r} must be allow or deny")
    return problems


def parse_lines(text: str, where: str = "policy") -> list[list[str]]:
    """The policy's lines as tokens, as Argo CD's adapter reads them (CSV, leading spaces trimmed, `#`
    comments); a line casbin would refuse is a PolicyError naming it."""
    rows = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            tokens = next(csv.reader([line], skipinitialspace=True))
        except csv.Error as exc:
            raise PolicyError(f"{where}: line {number}: {line[:120]!r}: {exc}") from None
        if len(tokens) < 2 or not tokens[0] or tokens[0] not in ("p", "g"):
            raise PolicyError(f"{where}: line {number}: invalid RBAC policy: {line[:120]!r}")
        rows.append(tokens)
    return rows


def _enforcer_of(rows: list[list[str]], match: Any) -> casbin.Enforcer:
    """A casbin enforcer with Argo CD's model over these policy rows, `match` as `globOrRegexMatch`.

    casbin is imported here, on the first decision, not with this module: reading a config (every
    trigger's cold start) needs the policy's types, and casbin's import is about a tenth of a second."""
    # lazy: cold start (casbin only for a decision; tests/unit/test_coldstart.py)
    import casbin
    from casbin.model import Model

    model = Model()
    model.load_model_from_text(MODEL_CONF)
    found = casbin.Enforcer(model, _lines_adapter()(rows))
    found.add_function("globOrRegexMatch", match)
    return found


@cache
def _lines_adapter() -> type[Any]:
    """Casbin's adapter over policy texts, loaded in order (builtin, user, runtime) as Argo CD's does (a
    class made on first use: casbin's base class is imported lazily, see `_enforcer_of`)."""
    # lazy: cold start (as in `_enforcer_of`)
    from casbin import persist
    from casbin.model import Model

    class Lines(persist.Adapter):  # type: ignore[misc]  # pycasbin is untyped
        def __init__(self, rows: list[list[str]]) -> None:
            self.rows = rows

        def load_policy(self, model: Model) -> None:
            for tokens in self.rows:
                model.model[tokens[0][:1]][tokens[0]].policy.append(tokens[1:])

    return Lines


@lru_cache(maxsize=4096)
def _glob(pattern: str) -> re.Pattern[str] | None:
    try:
        return compile_glob(pattern)
    except ValueError:
        return None


@lru_cache(maxsize=4096)
def _regex(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except re.error:
        return None


def glob_or_regex(mode: str) -> Any:
    """The `globOrRegexMatch` function: gobwas/glob without separators (a pattern that does not compile
    matches nothing), or Go's `regexp.MatchString` (a search, not anchored)."""
    def match(value: str, pattern: str) -> bool:
        if mode == REGEX:
            compiled = _regex(pattern)
            return compiled is not None and compiled.search(value) is not None
        compiled = _glob(pattern)
        return compiled is not None and compiled.fullmatch(value) is not None
    return match


@lru_cache(maxsize=64)
def enforcer(builtin: str, user: str, runtime: str, mode: str) -> casbin.Enforcer:
    """A casbin enforcer over these policy texts (cached: a request pays for building it once per text)."""
    rows = []
    for where, text in (("builtin policy", builtin), ("policy.csv", user), ("project roles", runtime)):
        rows += parse_lines(text, where)
    for tokens in rows:
        if tokens[0] == "p" and len(tokens) != 6:
            raise PolicyError(f"invalid RBAC policy: {', '.join(tokens)[:120]!r}: expected "
                              "'p, SUBJECT, RESOURCE, ACTION, OBJECT, EFFECT'")
        if tokens[0] == "g" and len(tokens) != 3:
            raise PolicyError(f"invalid RBAC policy: {', '.join(tokens)[:120]!r}: expected 'g, SUBJECT, ROLE'")
    return _enforcer_of(rows, glob_or_regex(mode))


@lru_cache(maxsize=1024)
def narrowed(builtin: str, user: str, runtime: str, mode: str, subject: str, resource: str,
             action: str) -> casbin.Enforcer | None:
    """An enforcer holding only the rules that can decide a request of `subject` on this resource and
    action: those whose subject is the subject or one of its roles (casbin's `g` closure) and whose
    resource and action match; every `g` line stays. The matcher ANDs these three terms, so a dropped rule
    could never match: the answers are the full enforcer's, while a list of a thousand apps asks casbin
    about one or two rules per app instead of every rule. None when no rule is left (nothing allows)."""
    full = enforcer(builtin, user, runtime, mode)
    closure = {subject, *full.get_implicit_roles_for_user(subject)}
    match = glob_or_regex(mode)
    rows = [["p", *rule] for rule in full.get_policy()
            if rule[0] in closure and match(resource, rule[1]) and match(action, rule[2])]
    if not rows:
        return None
    rows += [["g", *rule] for rule in full.get_grouping_policy()]
    return _enforcer_of(rows, match)


def validate(text: str) -> None:
    """Argo CD's `ValidatePolicy`: a PolicyError when casbin cannot load the text."""
    enforcer("", text, "", GLOB)


@dataclass(frozen=True)
class Policy:
    """The policies one decision consults: the builtin one (unless left out), the user's, and the runtime
    (project roles) one, with the default role and the match mode."""

    user: str = ""
    runtime: str = ""
    default_role: str = ""
    match_mode: str = GLOB
    builtin: str = BUILTIN_POLICY

    def enforce(self, subject: str, resource: str, action: str, obj: str) -> bool:
        """Argo CD's `enforce`: the default role first, then the subject."""
        for who in (self.default_role, subject) if self.default_role else (subject,):
            found = narrowed(self.builtin, self.user, self.runtime, self.match_mode, who, resource, action)
            if found is not None and found.enforce(who, resource, action, obj):
                return True
        return False

    def grouped(self) -> frozenset[str]:
        """The first member of every `g` line: the only groups worth asking about (Argo CD prefilters)."""
        rows = enforcer(self.builtin, self.user, self.runtime, self.match_mode).get_grouping_policy()
        return frozenset(row[0] for row in rows if row)


def of_config(config: RbacConfig, runtime: str = "", *, extra: str = "") -> Policy:
    """The Policy of an installation's argocd-rbac-cm; `extra` lines are appended to the user policy."""
    user = "\n".join(t for t in (config.policy_csv, extra) if t)
    return Policy(user=user, runtime=runtime, default_role=config.default_role, match_mode=config.match_mode)


def groups_of(claims: Mapping[str, Any], scopes: Iterable[str]) -> tuple[str, ...]:
    """Argo CD's `GetScopeValues`: each scope's claim, a string or a list of strings, as groups."""
    out: list[str] = []
    for scope in scopes:
        value = claims.get(scope)
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, list):
            out.extend(v for v in value if isinstance(v, str))
    return tuple(out)


# `argocd admin settings rbac can`: the short names it accepts, and what each resource's actions are.
RESOURCE_ALIASES: Mapping[str, str] = {
    "account": "accounts", "app": APPLICATIONS, "apps": APPLICATIONS, "application": APPLICATIONS,
    "applicationsets": APPLICATIONSETS, "cert": "certificates", "certs": "certificates",
    "certificate": "certificates", "cluster": CLUSTERS, "extension": "extensions", "gpgkey": "gpgkeys",
    "key": "gpgkeys", "log": "logs", "logs": "logs", "exec": "exec", "proj": PROJECTS, "projs": PROJECTS,
    "project": PROJECTS, "repo": "repositories", "repos": "repositories", "repository": "repositories",
}
_CRUD = {"create": False, "get": False, "update": False, "delete": False}
_CRD = {"create": False, "get": False, "delete": False}
ACTIONS: Mapping[str, Mapping[str, bool]] = {  # resource → action → whether it may carry a /path
    "accounts": {"create": False, "update": False},
    APPLICATIONS: {"create": False, "get": False, "update": True, "delete": True, "action": True,
                   "override": False, "sync": False},
    APPLICATIONSETS: _CRUD, "certificates": _CRD, CLUSTERS: _CRUD, "extensions": {"invoke": False},
    "gpgkeys": _CRD, "logs": {"get": False}, "exec": {"create": False}, PROJECTS: _CRUD, "repositories": _CRUD,
}


def check_request(resource: str, action: str) -> None:
    """`--strict`: a PolicyError unless the resource is Argo CD's and the action one of its actions."""
    actions = ACTIONS.get(resource)
    if actions is None:
        raise PolicyError(f"'{resource}' is not a valid resource name")
    name, slash, _ = action.partition("/")
    if name not in actions or (slash and not actions[name]):
        raise PolicyError(f"'{action}' is not a valid action for {resource}")


def can(config: RbacConfig, subject: str, action: str, resource: str, obj: str = "", *,
        default_role: str = "", use_builtin: bool = True, strict: bool = True) -> bool:
    """`argocd admin settings rbac can` with `--policy-file`: the same resolution of short resource names,
    the same `*/*` for a project-scoped resource asked about without an object, the same answer."""
    validate(config.policy_csv)
    real = RESOURCE_ALIASES.get(resource, resource)
    if strict:
        check_request(real, action)
    if real in PROJECT_SCOPED and obj in ("", "*"):
        obj = "*/*"
    policy = Policy(user=config.policy_csv, default_role=default_role or config.default_role,
                    match_mode=config.match_mode, builtin=BUILTIN_POLICY if use_builtin else "")
    return policy.enforce(subject, real, action, obj)
