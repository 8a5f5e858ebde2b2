"""JWT tokens for CI: a project role's (`tidecd proj role create-token`) and a local account's
(`tidecd account generate-token`), listed and revocable. One implementation for both holders.

As Argo CD's: a JWT with a subject, its issue time (`iat`) and an id (`jti`). A project role's subject is
`proj:PROJECT:ROLE` and it acts with the role's policies and nothing else (`tidecd.usecases.authz`); a local
account's is `NAME:apiKey` (Argo CD's `sessionmanager` form) and it acts as the account `NAME`, under
`argocd-rbac-cm` (`p, NAME, ...`, `g, NAME, role:...`). The issued tokens are recorded per holder in the
store (project roles: `rbac/tokens/<project>/<role>.json`, Argo CD's `jwtTokens`; accounts:
`rbac/accounts/<name>/tokens.json`, Argo CD's argocd-secret `accounts.<name>.tokens`), each as id, iat, exp,
and a token is accepted only while its id is there: revoking removes it, and the next call with that token
is refused. A project token also needs its role in `spec.roles`; an account token needs its argocd-cm
entry declared, enabled and with the `apiKey` capability, checked at every call as Argo CD's `Parse` does,
so taking `apiKey` away or `accounts.NAME.enabled: "false"` stops the account's tokens at the next call.

Signed HS256 with PyJWT (no JOSE of our own) under a key kept in the store (`rbac/token-key`): 32 random
bytes, created once, create-only, so concurrent first calls agree, and sealed for the installation's
sealing key (kubeseal's hybrid encryption) when it has one, so reading the bucket is not enough to forge
a token; without sealing keys it is stored as it is. The token itself is shown once, to the caller who
created it, and never logged or recorded.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import time
import uuid
from dataclasses import dataclass
from typing import Any

import jwt
import structlog

from tidecd.base.errors import NotFound, PermanentError, SecretError, TidecdError
from tidecd.base.principal import ADMIN_SUBJECT, Principal
from tidecd.clients.secrets import open_bytes, seal_bytes
from tidecd.clients.store import PreconditionFailed, read_json, update_json
from tidecd.runtime import Runtime

KEY = "rbac/token-key"
LABEL = b"tidecd-project-token-key"  # the sealing label: this ciphertext opens as nothing else
_OPENED: dict[bytes, bytes] = {}  # the stored record → its key, opened once per warm instance
ISSUER = "tidecd"
ALGORITHM = "HS256"
ARGOCD_KEY = "server.secretkey"  # argocd-secret's key: Argo CD signs its own tokens (and sessions) with it
ARGOCD_ALGORITHMS = ["HS256", "HS384", "HS512"]  # Argo CD's Parse takes any HMAC signing method
API_KEY = "apiKey"  # Argo CD's account capability for tokens, and the suffix of an account token's subject
log = structlog.get_logger("tidecd.usecases.tokens")
MAX_TOKENS = 200  # per holder: Argo CD keeps them all in the AppProject or argocd-secret; a bound keeps it small


@dataclass(frozen=True)
class Holder:
    """Whose tokens: a project role or a local account. `subject` is the JWT's `sub`, `principal` who the
    token acts as, `records` the store key of its tokens, `label` how messages name it."""

    subject: str
    principal: str
    records: str
    label: str
    via: str


def role(runtime: Runtime, project: str, name: str) -> Holder:
    """The project role's holder; NotFound unless the role is in the project's `spec.roles`."""
    found = runtime.config().projects.get(project)
    if found is None:
        raise NotFound(f"project {project!r} not found")
    if not any(r.name == name for r in found.roles):
        raise NotFound(f"project {project!r} has no role {name!r} (spec.roles)")
    subject = f"proj:{project}:{name}"
    return Holder(subject, subject, f"rbac/tokens/{project}/{name}.json", f"project {project!r} role {name!r}",
                  "project-token")


def account(runtime: Runtime, name: str, *, issuing: bool = False) -> Holder:
    """The local account's holder; NotFound unless argocd-cm declares `accounts.NAME`. With `issuing`,
    a new token is asked for: the account must be enabled and have the `apiKey` capability (Argo CD's
    "account 'NAME' does not have apiKey capability")."""
    found = runtime.config().argo_settings.sso.accounts.get(name)
    if found is None and name == ADMIN_SUBJECT and issuing:  # the builtin admin: login only, in tidecd
        raise PermanentError(f"account {name!r} does not have {API_KEY} capability (the builtin admin logs in; "
                             f"declare an account for tokens: accounts.NAME: {API_KEY})")
    if found is None:
        raise NotFound(f"account {name!r} not found (argocd-cm declares accounts.NAME)")
    if issuing and API_KEY not in found.capabilities:
        raise PermanentError(f"account {name!r} does not have {API_KEY} capability (argocd-cm accounts.{name}: "
                             f"{', '.join(sorted(found.capabilities)) or 'none'}; add {API_KEY})")
    if issuing and not found.enabled:
        raise PermanentError(f"account {name!r} is disabled (argocd-cm accounts.{name}.enabled)")
    return Holder(f"{name}:{API_KEY}", name, f"rbac/accounts/{name}/tokens.json", f"account {name!r}",
                  "account-token")


def _key(runtime: Runtime) -> bytes:
    """The signing key: created once (create-only, so concurrent first calls agree), sealed for the
    installation's sealing key when it has one (the store then never holds it in the clear)."""
    keys = runtime.private_keys()
    blob = runtime.store.read(KEY)
    if blob is None:
        fresh = secrets.token_bytes(32)
        record = {"sealed": base64.b64encode(seal_bytes(keys, fresh, LABEL)).decode()} if keys else \
            {"plain": fresh.hex()}
        with contextlib.suppress(PreconditionFailed):  # another call created it first: use theirs
            runtime.store.write(KEY, json.dumps(record).encode(), if_generation_match=0)
        blob = runtime.store.read(KEY)
        if blob is None:
            raise PermanentError(f"the token signing key {KEY} could not be created in the store")
    opened = _OPENED.get(blob.data)
    if opened is None:
        record = json.loads(blob.data)
        if "sealed" in record:
            if not keys:
                raise SecretError(f"{KEY} is sealed, and this installation has no sealing keys (TIDECD_SEALING_KEYS)")
            opened = open_bytes(keys, base64.b64decode(record["sealed"]), LABEL, KEY)
        else:
            opened = bytes.fromhex(record["plain"])
        _OPENED.clear()  # one installation per process: keep only the current key
        _OPENED[blob.data] = opened
    return opened


def create(runtime: Runtime, holder: Holder, *, expires_in: float = 0,
           token_id: str = "") -> tuple[str, dict[str, Any]]:
    """A new token of the holder and its record (id, iat, exp; 0: never expires)."""
    now = int(time.time())
    record = {"id": token_id or str(uuid.uuid4()), "iat": now, "exp": int(now + expires_in) if expires_in else 0}
    claims: dict[str, Any] = {"sub": holder.subject, "iat": now, "jti": record["id"], "iss": ISSUER}
    if record["exp"]:
        claims["exp"] = record["exp"]

    def add(current: Any) -> dict[str, Any]:
        tokens = list((current or {}).get("tokens", []))
        if any(t.get("id") == record["id"] for t in tokens):
            raise PermanentError(f"{holder.label} has a token with id {record['id']!r} already")
        if len(tokens) >= MAX_TOKENS:
            raise PermanentError(f"{holder.label} has {MAX_TOKENS} tokens: revoke some first")
        return {"tokens": [*tokens, record]}

    update_json(runtime.store, holder.records, add)
    return jwt.encode(claims, _key(runtime), algorithm=ALGORITHM), record


def listed(runtime: Runtime, holder: Holder) -> list[dict[str, Any]]:
    """The holder's tokens that are valid (id, iat, exp), oldest first."""
    found = read_json(runtime.store, holder.records)
    return list(found[0].get("tokens", [])) if found else []


def revoke(runtime: Runtime, holder: Holder, token: str) -> dict[str, Any]:
    """Remove the token whose id (or iat, as Argo CD's `proj role delete-token` takes it) is `token`; its record."""
    removed: list[dict[str, Any]] = []

    def drop(current: Any) -> dict[str, Any]:
        tokens = list((current or {}).get("tokens", []))
        removed[:] = [t for t in tokens if token in (t.get("id"), str(t.get("iat")))]
        return {"tokens": [t for t in tokens if t not in removed]}

    update_json(runtime.store, holder.records, drop)
    if not removed:
        raise NotFound(f"{holder.label} has no token {token!r}")
    return removed[0]


def _holder_of(runtime: Runtime, subject: str) -> Holder | None:
    """The holder a valid token's subject names, while it may still use tokens; None otherwise."""
    parts = subject.split(":")
    try:
        if len(parts) == 3 and parts[0] == "proj":
            return role(runtime, parts[1], parts[2])
        if len(parts) == 2 and parts[1] == API_KEY:
            return account(runtime, parts[0], issuing=True)  # enabled, with apiKey: now, not when issued
    except (NotFound, PermanentError):
        return None
    return None


def verify(runtime: Runtime, token: str) -> Principal | None:
    """The principal of a valid, unrevoked token whose holder may still use it; None otherwise."""
    if len(token) > 4096:
        return None
    try:
        key = _key(runtime)
    except SecretError as exc:  # no token can be checked: each is refused, and the log says why
        log.error("tokens cannot be checked", error=str(exc))
        return None
    try:
        claims = jwt.decode(token, key, algorithms=[ALGORITHM], issuer=ISSUER,
                            options={"require": ["sub", "iat", "jti", "iss"]})
    except jwt.PyJWTError:
        return issued_by_argocd(runtime, token)
    holder = _holder_of(runtime, str(claims["sub"]))
    if holder is None or not any(t.get("id") == claims["jti"] for t in listed(runtime, holder)):
        return None
    return Principal(holder.principal, via=holder.via, token_id=str(claims["jti"]))


def issued_by_argocd(runtime: Runtime, token: str) -> Principal | None:
    """The principal of a token the migrated Argo CD issued, checked as its session manager's `Parse` does:
    signed (HMAC) with argocd-secret's `server.secretkey` (sealed in the config source), unexpired, and still
    listed where Argo CD lists it, so CI keeps working through a migration and removing the entry revokes it:
    - a project role's (`proj:PROJECT:ROLE`): in the AppProject's `spec.roles[].jwtTokens`, by id, or by iat
      when it has none (`tidecd import` folds Argo CD's `status.jwtTokensByRole` into the spec);
    - an account's (`NAME:apiKey`): in argocd-secret's `accounts.NAME.tokens`, the account enabled and with
      the `apiKey` capability now.
    None otherwise, and without a sealed argocd-secret or a `server.secretkey` in it."""
    try:
        secret = runtime.argocd_secret().get(ARGOCD_KEY, "")
    except TidecdError as exc:  # the sealed argocd-secret cannot be opened: no such token can be checked
        log.error("Argo CD's tokens cannot be checked", error=str(exc))
        return None
    if not secret:
        return None
    try:
        claims = jwt.decode(token, secret.encode(), algorithms=ARGOCD_ALGORITHMS, options={"require": ["sub", "iat"]})
    except jwt.PyJWTError:
        return None
    subject, token_id, iat = str(claims["sub"]), str(claims.get("jti") or ""), claims["iat"]
    if not isinstance(iat, int):
        return None
    parts = subject.split(":")
    if len(parts) == 3 and parts[0] == "proj":
        project = runtime.config().projects.get(parts[1])
        found = next((r for r in project.roles if r.name == parts[2]), None) if project else None
        if found is None or found.issued(iat, token_id) is None:
            return None
        return Principal(subject, via="project-token", token_id=token_id or str(iat))
    if len(parts) == 2 and parts[1] == API_KEY and token_id:
        if _holder_of(runtime, subject) is None:  # not declared, disabled, or no apiKey capability now
            return None
        listed_ids = {str(t.get("id")) for t in _argocd_account_tokens(runtime, parts[0])}
        return Principal(parts[0], via="account-token", token_id=token_id) if token_id in listed_ids else None
    return None


def _argocd_account_tokens(runtime: Runtime, account_name: str) -> list[dict[str, Any]]:
    """argocd-secret's `accounts.NAME.tokens`: Argo CD's JSON list of an account's tokens (id, iat, exp)."""
    try:
        tokens = json.loads(runtime.argocd_secret().get(f"accounts.{account_name}.tokens", "") or "[]")
    except ValueError:
        log.error("argocd-secret holds an unreadable token list", key=f"accounts.{account_name}.tokens")
        return []
    return [t for t in tokens if isinstance(t, dict)] if isinstance(tokens, list) else []
