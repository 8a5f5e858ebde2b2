"""Who may log in, as argocd-cm says: `url`, `oidc.config`, `admin.enabled` and the local `accounts.*`.

Argo CD's users configure single sign-on in argocd-cm, and tidecd reads the same keys so an install
directory keeps working: `oidc.config` names the issuer and client, its `clientSecret` is a `$key`
reference into `argocd-secret` (as in Argo CD), `admin.enabled: "false"` turns the builtin admin off, and
`accounts.NAME: apiKey, login` declares a local account. The secrets themselves (the OIDC client secret,
bcrypt password hashes, `server.secretkey`) live in `argocd-secret`, which tidecd reads only as a
SealedSecret: a plain Secret would put them in git. The sealed document is kept here as it is (ciphertext);
`tidecd.runtime` opens it in memory when a login needs it.

`dex.config` is a notice: tidecd runs no Dex of its own; point `oidc.config` at your Dex (or any issuer).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

OIDC_KEYS = ("name", "issuer", "clientID", "clientSecret", "cliClientID", "requestedScopes",
             "requestedIDTokenClaims", "allowedAudiences")
# oidc.config keys Argo CD has that tidecd accepts and does not act on (one notice each)
OIDC_NOT_HONOURED = ("logoutURL", "rootCA", "enablePKCEAuthentication", "enableUserInfoGroups", "userInfoPath",
                     "userInfoCacheExpiration", "skipAudienceCheckWhenTokenHasNoAudience", "domainHint",
                     "insecureSkipVerify", "refreshTokenThreshold", "azure")
CAPABILITIES = ("login", "apiKey")
DEFAULT_SCOPES = ("openid", "profile", "email", "groups")  # Argo CD's default requestedScopes
_ACCOUNT = re.compile(r"^accounts\.([A-Za-z0-9._-]+?)(\.enabled)?$")
_SECRET_REF = re.compile(r"^\$([A-Za-z0-9._-]+)$")


@dataclass(frozen=True)
class OidcConfig:
    """`oidc.config`: the issuer the dashboard and `tidecd login --sso` send people to."""

    name: str
    issuer: str
    client_id: str
    cli_client_id: str = ""  # `tidecd login --sso` uses it (a public client); else client_id
    client_secret_key: str = ""  # the argocd-secret key `clientSecret: $KEY` names; "" for a public client
    requested_scopes: tuple[str, ...] = DEFAULT_SCOPES
    groups_essential: bool = False  # requestedIDTokenClaims.groups.essential: asked of the issuer
    allowed_audiences: tuple[str, ...] = ()  # default: clientID and cliClientID, as Argo CD

    @property
    def audiences(self) -> tuple[str, ...]:
        """The `aud` values an ID token may carry to be accepted (Argo CD's `allowedAudiences` default)."""
        return self.allowed_audiences or tuple(a for a in (self.client_id, self.cli_client_id) if a)


@dataclass(frozen=True)
class Account:
    """`accounts.NAME`: a local account; `login` lets it log in with its password, `apiKey` use tokens."""

    name: str
    capabilities: frozenset[str]
    enabled: bool = True


def _no_accounts() -> Mapping[str, Account]:
    return MappingProxyType({})


@dataclass(frozen=True)
class SsoSettings:
    """The login settings of argocd-cm, plus the sealed argocd-secret (ciphertext, never opened here)."""

    url: str = ""  # argocd-cm `url`: the dashboard's external URL (the OIDC redirect URI is url + /ui/auth/callback)
    oidc: OidcConfig | None = None
    admin_enabled: bool = True
    accounts: Mapping[str, Account] = field(default_factory=_no_accounts)
    sealed_secret: Mapping[str, Any] | None = None  # SealedSecret/argocd-secret as written
    secret_origin: str = ""

    def account(self, name: str) -> Account | None:
        """The local account `name` may log in as: the builtin admin (unless `admin.enabled: "false"`)
        or an enabled `accounts.NAME` with the `login` capability."""
        if name == "admin":
            return Account("admin", frozenset({"login"})) if self.admin_enabled else None
        found = self.accounts.get(name)
        return found if found and found.enabled and "login" in found.capabilities else None

    def password_key(self, name: str) -> str:
        """The argocd-secret key of an account's bcrypt hash, as Argo CD names it."""
        return "admin.password" if name == "admin" else f"accounts.{name}.password"


KEYS = ("url", "oidc.config", "admin.enabled")


def handles(key: str) -> bool:
    return key in KEYS or bool(_ACCOUNT.match(key))


def read(values: Mapping[str, str], error: Callable[[str, str], None], notice: Callable[[str, str], None],
         parse_yaml: Callable[[str, str], object]) -> SsoSettings:
    """The SSO keys of argocd-cm (`values`: those `handles` accepted); `error(key, message)` records a
    problem naming the key, `notice(key, why)` a setting accepted and not acted on."""
    accounts: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        found = _ACCOUNT.match(key)
        if not found:
            continue
        entry = accounts.setdefault(found.group(1), {"capabilities": None, "enabled": True})
        if found.group(2):
            entry["enabled"] = _boolean(key, value, error, default=True)
        else:
            caps = [c.strip() for c in value.split(",") if c.strip()]
            unknown = [c for c in caps if c not in CAPABILITIES]
            if unknown:
                error(key, f"unknown capability {unknown[0]!r}; expected a list of {', '.join(CAPABILITIES)}")
            entry["capabilities"] = frozenset(c for c in caps if c in CAPABILITIES)
    declared = {}
    for name, entry in accounts.items():
        if entry["capabilities"] is None:
            error(f"accounts.{name}.enabled", f"account {name!r} is not declared (add accounts.{name}: login)")
        elif name == "admin":
            error(f"accounts.{name}", "the builtin admin is configured with admin.enabled, not accounts.admin")
        else:
            declared[name] = Account(name, entry["capabilities"], entry["enabled"])
    url = values.get("url", "").strip().rstrip("/")
    if url and not re.match(r"^https?://[^/\s]+(/[^\s]*)?$", url):
        error("url", f"expected an http(s) URL, got {url[:100]!r}")
        url = ""
    oidc = _oidc(values["oidc.config"], error, notice, parse_yaml) if "oidc.config" in values else None
    return SsoSettings(url=url, oidc=oidc, accounts=MappingProxyType(declared),
                       admin_enabled=_boolean("admin.enabled", values.get("admin.enabled"), error, default=True))


def _boolean(key: str, value: str | None, error: Callable[[str, str], None], *, default: bool) -> bool:
    if value is None:
        return default
    text = value.strip().lower()
    if text not in ("true", "false"):
        error(key, f'expected "true" or "false", got {value[:40]!r}')
        return default
    return text == "true"


def _oidc(text: str, error: Callable[[str, str], None], notice: Callable[[str, str], None],
          parse_yaml: Callable[[str, str], object]) -> OidcConfig | None:
    key = "oidc.config"
    doc = parse_yaml(key, text)
    if doc is None:
        return None
    if not isinstance(doc, dict):
        error(key, f"expected a mapping, got {type(doc).__name__}")
        return None
    for name in doc:
        if name in OIDC_NOT_HONOURED:
            notice(f"{key}: {name}", "not honoured by tidecd")
        elif name not in OIDC_KEYS:
            error(key, f"{name}: unknown field (Argo CD's oidc.config has {', '.join(OIDC_KEYS)})")
    strings = {}
    for name in ("name", "issuer", "clientID", "clientSecret", "cliClientID"):
        value = doc.get(name, "")
        if not isinstance(value, str):
            error(key, f"{name}: expected a string, got {type(value).__name__}")
            value = ""
        strings[name] = value.strip()
    for required in ("issuer", "clientID"):
        if not strings[required]:
            error(key, f"{required}: required")
    issuer = strings["issuer"]
    if issuer and not re.match(r"^https?://[^/\s]+", issuer):
        error(key, f"issuer: expected an http(s) URL, got {issuer[:100]!r}")
    secret = strings["clientSecret"]
    secret_key = ""
    if secret:
        ref = _SECRET_REF.match(secret)
        if ref is None:
            # never echo the value: it may be the secret itself
            error(key, "clientSecret: expected a reference to a key of the sealed argocd-secret, such as "
                       "$oidc.clientSecret: a client secret written into a ConfigMap is not sealed"
                       + (" ($SECRET:KEY references to other Secrets are not implemented by tidecd)"
                          if secret.startswith("$") else ""))
        else:
            secret_key = ref.group(1)
    scopes = _strings(doc, "requestedScopes", error) or DEFAULT_SCOPES
    if "openid" not in scopes:
        scopes = ("openid", *scopes)
    claims = doc.get("requestedIDTokenClaims") or {}
    groups_essential = False
    if not isinstance(claims, dict):
        error(key, "requestedIDTokenClaims: expected a mapping of claim names")
    else:
        groups = claims.get("groups")
        groups_essential = isinstance(groups, dict) and groups.get("essential") is True
    if not (issuer and strings["clientID"]):
        return None
    return OidcConfig(name=strings["name"] or "SSO", issuer=issuer.rstrip("/"), client_id=strings["clientID"],
                      cli_client_id=strings["cliClientID"], client_secret_key=secret_key,
                      requested_scopes=scopes, groups_essential=groups_essential,
                      allowed_audiences=_strings(doc, "allowedAudiences", error))


def _strings(doc: Mapping[str, Any], name: str, error: Callable[[str, str], None]) -> tuple[str, ...]:
    value = doc.get(name)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        error("oidc.config", f"{name}: expected a list of strings")
        return ()
    return tuple(value)
