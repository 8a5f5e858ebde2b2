"""Project role tokens for CI: `tidecd proj role create-token PROJECT ROLE`, listed and revocable.

As Argo CD's: a JWT whose subject is `proj:PROJECT:ROLE`, with its issue time (`iat`) and an id (`jti`),
acting with the role's policies and nothing else (`tidecd.usecases.authz`). The role must be in the
project's `spec.roles`; the issued tokens are recorded per role in the store (`rbac/tokens/<project>/<role>.json`,
Argo CD's `jwtTokens`: id, iat, exp), and a token is accepted only while its id is there: revoking
removes it, and the next call with that token is refused.

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
from typing import Any

import jwt
import structlog

from tidecd.base.errors import NotFound, PermanentError, SecretError
from tidecd.base.principal import Principal
from tidecd.clients.secrets import open_bytes, seal_bytes
from tidecd.clients.store import PreconditionFailed, read_json, update_json
from tidecd.config.load import AppProject
from tidecd.runtime import Runtime

KEY = "rbac/token-key"
LABEL = b"tidecd-project-token-key"  # the sealing label: this ciphertext opens as nothing else
_OPENED: dict[bytes, bytes] = {}  # the stored record → its key, opened once per warm instance
ISSUER = "tidecd"
ALGORITHM = "HS256"
log = structlog.get_logger("tidecd.usecases.tokens")
MAX_TOKENS = 200  # per role: Argo CD keeps them all in the AppProject; a bound keeps the record small


def _records(project: str, role: str) -> str:
    return f"rbac/tokens/{project}/{role}.json"


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


def _role(runtime: Runtime, project: str, role: str) -> AppProject:
    found = runtime.config().projects.get(project)
    if found is None:
        raise NotFound(f"project {project!r} not found")
    if not any(r.name == role for r in found.roles):
        raise NotFound(f"project {project!r} has no role {role!r} (spec.roles)")
    return found


def create(runtime: Runtime, project: str, role: str, *, expires_in: float = 0,
           token_id: str = "") -> tuple[str, dict[str, Any]]:
    """A new token of the role and its record (id, iat, exp; 0: never expires)."""
    _role(runtime, project, role)
    now = int(time.time())
    record = {"id": token_id or str(uuid.uuid4()), "iat": now, "exp": int(now + expires_in) if expires_in else 0}
    claims: dict[str, Any] = {"sub": f"proj:{project}:{role}", "iat": now, "jti": record["id"], "iss": ISSUER}
    if record["exp"]:
        claims["exp"] = record["exp"]

    def add(current: Any) -> dict[str, Any]:
        tokens = list((current or {}).get("tokens", []))
        if any(t.get("id") == record["id"] for t in tokens):
            raise PermanentError(f"project {project!r} role {role!r} has a token with id {record['id']!r} already")
        if len(tokens) >= MAX_TOKENS:
            raise PermanentError(f"project {project!r} role {role!r} has {MAX_TOKENS} tokens: revoke some first")
        return {"tokens": [*tokens, record]}

    update_json(runtime.store, _records(project, role), add)
    return jwt.encode(claims, _key(runtime), algorithm=ALGORITHM), record


def listed(runtime: Runtime, project: str, role: str) -> list[dict[str, Any]]:
    """The role's tokens that are valid (id, iat, exp), oldest first."""
    _role(runtime, project, role)
    found = read_json(runtime.store, _records(project, role))
    return list(found[0].get("tokens", [])) if found else []


def revoke(runtime: Runtime, project: str, role: str, token: str) -> dict[str, Any]:
    """Remove the token whose id (or iat, as Argo CD's `delete-token` takes it) is `token`; its record."""
    _role(runtime, project, role)
    removed: list[dict[str, Any]] = []

    def drop(current: Any) -> dict[str, Any]:
        tokens = list((current or {}).get("tokens", []))
        removed[:] = [t for t in tokens if token in (t.get("id"), str(t.get("iat")))]
        return {"tokens": [t for t in tokens if t not in removed]}

    update_json(runtime.store, _records(project, role), drop)
    if not removed:
        raise NotFound(f"project {project!r} role {role!r} has no token {token!r}")
    return removed[0]


def verify(runtime: Runtime, token: str) -> Principal | None:
    """The principal of a valid, unrevoked token of a role that still exists; None otherwise."""
    if len(token) > 4096:
        return None
    try:
        key = _key(runtime)
    except SecretError as exc:  # no token can be checked: each is refused, and the log says why
        log.error("project tokens cannot be checked", error=str(exc))
        return None
    try:
        claims = jwt.decode(token, key, algorithms=[ALGORITHM], issuer=ISSUER,
                            options={"require": ["sub", "iat", "jti", "iss"]})
    except jwt.PyJWTError:
        return None
    parts = str(claims["sub"]).split(":")
    if len(parts) != 3 or parts[0] != "proj":
        return None
    project, role = parts[1], parts[2]
    try:
        records = listed(runtime, project, role)
    except NotFound:
        return None
    if not any(t.get("id") == claims["jti"] for t in records):
        return None
    return Principal(str(claims["sub"]), via="project-token", token_id=str(claims["jti"]))
