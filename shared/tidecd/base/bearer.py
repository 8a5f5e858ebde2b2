"""The api's bearer token check, in constant time: used by the api routes and by `/metrics`.

Its own module, below every use case, so an edge like `metrics` can check a token without importing the
api use case (import-linter's layers).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping


def authorized(headers: Mapping[str, str], token: str) -> bool:
    """Constant-time bearer token check; no configured token means nobody is authorized."""
    if not token:
        return False
    given = headers.get("Authorization") or headers.get("authorization") or ""
    scheme, _, value = given.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())
