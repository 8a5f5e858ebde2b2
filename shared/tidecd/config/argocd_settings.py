"""The part of Argo CD's settings ConfigMaps (`argocd-cm` and friends) that tidecd honours, as one frozen value.

`tidecd.config.argocd_cm` reads the ConfigMaps of a config source into an `ArgoSettings`; the loaded `Config` carries
it as `config.argo_settings`, and the stages that use a setting read it from there:

- `health_lua`: `resource.customizations.health.<group>_<Kind>` (and `health.lua` of the block form
  `resource.customizations`), keyed `"group/Kind"` with an empty group for the core group (`"/Service"`,
  `"apps/Deployment"`, `"cert-manager.io/Certificate"`); a key may be a glob as in Argo CD
  (`"*.crossplane.io/*"`). Value: the Lua script text.
- `ignore_differences`: `resource.customizations.ignoreDifferences.<group>_<Kind>`, same keys, plus `"all"`.
- `exclusions` / `inclusions`: `resource.exclusions` / `resource.inclusions` (globs over group, kind, cluster).
- `reconciliation_timeout`: `timeout.reconciliation` in seconds (0 turns periodic refresh off), None when unset.
- `sso`: `url`, `oidc.config`, `admin.enabled`, `accounts.*` and the sealed argocd-secret (`tidecd.config.sso`).
- `notifications`: argocd-notifications-cm and the sealed argocd-notifications-secret (`tidecd.config.notifications`).
- `notices`: one line per setting tidecd recognises but does not honour, reported once per load.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from tidecd.base.globs import glob_match
from tidecd.config.notifications import NO_NOTIFICATIONS, NotificationsConfig
from tidecd.config.rbac import NO_RBAC, RbacConfig
from tidecd.config.sso import SsoSettings


def _empty() -> Mapping[str, str]:
    return MappingProxyType({})


def _empty_rules() -> Mapping[str, IgnoreRule]:
    return MappingProxyType({})


def gk_key(group: str, kind: str) -> str:
    """The key of `health_lua` / `ignore_differences`: `"group/Kind"`, `"/Kind"` for the core group."""
    return f"{group}/{kind}"


def lookup(table: Mapping[str, str], group: str, kind: str) -> str | None:
    """The entry of a `"group/Kind"` table for (group, kind): an exact key first, then the first glob key
    (sorted) that matches, as Argo CD's `GetResourceOverrides` falls back to wildcard keys."""
    exact = table.get(gk_key(group, kind))
    if exact is not None:
        return exact
    for key in sorted(table):
        key_group, slash, key_kind = key.rpartition("/")
        if slash and ("*" in key or "?" in key) and glob_match(key_group, group) and glob_match(key_kind, kind):
            return table[key]
    return None


@dataclass(frozen=True)
class IgnoreRule:
    """One `ignoreDifferences` customization: fields of every object of a kind (or of all kinds)."""

    json_pointers: tuple[str, ...] = ()
    jq_path_expressions: tuple[str, ...] = ()
    managed_fields_managers: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResourceFilter:
    """One entry of `resource.exclusions` / `resource.inclusions`: an empty list matches everything."""

    api_groups: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    clusters: tuple[str, ...] = ()

    def matches(self, group: str, kind: str, cluster: str = "") -> bool:
        def any_of(patterns: tuple[str, ...], value: str) -> bool:
            return not patterns or any(glob_match(p, value) for p in patterns)

        return any_of(self.api_groups, group) and any_of(self.kinds, kind) and (
            not cluster or any_of(self.clusters, cluster))


@dataclass(frozen=True)
class ArgoSettings:
    """What tidecd honours of `argocd-cm` (see the module docstring); the default is "nothing set"."""

    health_lua: Mapping[str, str] = field(default_factory=_empty)
    health_lua_open_libs: frozenset[str] = frozenset()  # keys whose script may use Lua's standard libraries
    ignore_differences: Mapping[str, IgnoreRule] = field(default_factory=_empty_rules)
    exclusions: tuple[ResourceFilter, ...] = ()
    inclusions: tuple[ResourceFilter, ...] = ()
    reconciliation_timeout: float | None = None
    reconciliation_jitter: float | None = None
    notices: tuple[str, ...] = ()  # recognised, not honoured: reported once per load
    origin: str = ""  # the file argocd-cm came from
    rbac: RbacConfig = NO_RBAC  # argocd-rbac-cm: who may do what (tidecd.config.rbac, tidecd.usecases.authz)
    sso: SsoSettings = field(default_factory=SsoSettings)  # who may log in (tidecd.config.sso)
    # application.sync.impersonation.enabled / .enforced: syncs act as the project's destination
    # ServiceAccounts (tidecd.project.impersonation); enforced: no matching entry fails the sync
    sync_impersonation: bool = False
    impersonation_enforced: bool = True
    # kustomize.buildOptions holds --enable-helm: kustomizations may inflate `helmCharts` (charts fetched by
    # tidecd as snapshots, `render.kustomize`); kustomize's other build options are not honoured
    kustomize_enable_helm: bool = False
    # argocd-notifications-cm and the sealed argocd-notifications-secret (tidecd.config.notifications)
    notifications: NotificationsConfig = NO_NOTIFICATIONS

    def __deepcopy__(self, memo: dict[int, object]) -> ArgoSettings:
        return self  # immutable (its mappings are read-only views)

    def excluded(self, group: str, kind: str, cluster: str = "") -> bool:
        """Whether tidecd leaves objects of this kind alone (Argo CD: neither compared, synced nor pruned).

        `cluster` is the destination's server URL; empty matches any `clusters` list."""
        if any(f.matches(group, kind, cluster) for f in self.exclusions):
            return True
        return bool(self.inclusions) and not any(f.matches(group, kind, cluster) for f in self.inclusions)

    def ignore_rules(self, group: str, kind: str) -> tuple[IgnoreRule, ...]:
        """The customizations for this kind: its own (exact key, else a matching glob), then `all`."""
        out = []
        own = self.ignore_differences.get(gk_key(group, kind))
        if own is None:
            for key in sorted(self.ignore_differences):
                key_group, slash, key_kind = key.rpartition("/")
                if slash and ("*" in key or "?" in key) and glob_match(key_group, group) \
                        and glob_match(key_kind, kind):
                    own = self.ignore_differences[key]
                    break
        if own is not None:
            out.append(own)
        if (every := self.ignore_differences.get("all")) is not None:
            out.append(every)
        return tuple(out)

    def health_script(self, group: str, kind: str) -> str | None:
        return lookup(self.health_lua, group, kind)


NO_SETTINGS = ArgoSettings()
