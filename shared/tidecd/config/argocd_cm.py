"""Argo CD's settings objects in a config source: `argocd-cm`, `argocd-rbac-cm` and the rest.

People bring their Argo CD install directory as it is, and it holds these ConfigMaps (and `argocd-secret`).
They are recognised by name, never "unsupported object": the parts tidecd honours are read into one frozen
`ArgoSettings` (see `tidecd.config.argocd_settings`), everything else becomes one notice line (reported once per
load, not per app per tick), saying why it is not honoured. A malformed honoured setting is a problem
naming the file, the ConfigMap and the key; it never stops the apps.

`argocd-secret` is read only as a SealedSecret (its sealed document is kept for the logins, see
`tidecd.config.sso`); a plain `argocd-secret` and `argocd-notifications-secret` are recognised and never
read: no value of theirs is kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from tidecd.base.jqpaths import compile_path
from tidecd.config import argocd_fields, notifications, rbac, sso
from tidecd.config import fields as config_fields
from tidecd.config.argocd_settings import ArgoSettings, IgnoreRule, ResourceFilter, gk_key
from tidecd.config.cmreader import ConfigMapReader
from tidecd.config.fields import IGNORED, NOT_IMPLEMENTED, SUPPORTED
from tidecd.config.schema import parse_duration, type_name

ARGOCD_CM = "argocd-cm"
SEALED_SECRET = "argocd-secret"  # noqa: S105 - a name: read as a SealedSecret only
CONFIG_MAPS: Mapping[str, str] = MappingProxyType({
    ARGOCD_CM: "",  # read key by key below
    rbac.RBAC_CM: "",  # read below: policy.csv and overlays, policy.default, policy.matchMode, scopes
    "argocd-cmd-params-cm": "flags of Argo CD's own components (controller, repo-server, server); tidecd's "
                            "functions are configured by environment variables (docs/configuration.md)",
    notifications.CONFIG_MAP: "",  # read by tidecd.config.notifications: triggers, templates, services, ...
    "argocd-ssh-known-hosts-cm": "tidecd fetches git over HTTPS; SSH known hosts are not used",
    "argocd-tls-certs-cm": "custom TLS certificates for repositories are not implemented by tidecd",
    "argocd-gpg-keys-cm": "GnuPG commit verification is not implemented by tidecd (see AppProject "
                          "signatureKeys)",
})
SECRETS: Mapping[str, str] = MappingProxyType({
    "argocd-secret": "a plain Secret is not read (it would put passwords in git): seal it, and tidecd reads "
                     "the SealedSecret's admin.password, accounts.NAME.password, server.secretkey and the "
                     "key oidc.config's clientSecret names",
    notifications.SECRET: "a plain Secret is not read (it would put credentials in git): seal it, and tidecd "
                          "opens the SealedSecret when a notification is delivered",
})

# argocd-cm keys tidecd reads; every other key gets a notice with the first matching reason below.
IMPERSONATION = "application.sync.impersonation.enabled"
IMPERSONATION_ENFORCED = "application.sync.impersonation.enforced"
HONOURED_KEYS = ("resource.customizations", "resource.exclusions", "resource.inclusions",
                 "timeout.reconciliation", "timeout.reconciliation.jitter", IMPERSONATION, IMPERSONATION_ENFORCED,
                 "kustomize.buildOptions")
HONOURED_PREFIXES = ("resource.customizations.health.", "resource.customizations.useOpenLibs.",
                     "resource.customizations.ignoreDifferences.")
_UI = "Argo CD's web UI settings: tidecd's dashboard has its own"
_TRACKING = "tidecd writes its own ownership marks, never Argo CD's (docs/argocd-compatibility.md, Ownership marks)"
NOT_HONOURED: tuple[tuple[str, str], ...] = (
    ("resource.customizations.actions.", "tidecd runs the Lua resource actions of Argo CD's bundled catalogue, or "
                                         "of TIDECD_RESOURCE_ACTIONS (a directory laid out as Argo CD's "
                                         "resource_customizations/), not actions from argocd-cm"),
    ("resource.customizations.ignoreResourceUpdates.", "tidecd keeps no watch cache: nothing to skip"),
    ("resource.ignoreResourceUpdatesEnabled", "tidecd keeps no watch cache: nothing to skip"),
    ("resource.customizations.knownTypeFields.", "tidecd diffs through a server-side dry-run, which knows "
                                                 "every field's type"),
    ("resource.manifest.", "tidecd keeps no cluster cache to compress"),
    ("resource.compareoptions", "not implemented by tidecd (status is never compared)"),
    ("resource.respectRBAC", "tidecd reads only the objects it manages"),
    ("resource.selectors", "tidecd reads only the objects it manages"),
    ("resource.sensitive.mask.annotations", "not implemented by tidecd (Secret data is always masked)"),
    ("resource.customLabels", _UI), ("resource.includeEventLabelKeys", "tidecd writes no Kubernetes events"),
    ("resource.excludeEventLabelKeys", "tidecd writes no Kubernetes events"),
    ("application.instanceLabelKey", _TRACKING), ("application.resourceTrackingMethod", _TRACKING),
    ("installationID", _TRACKING),
    ("kustomize.enable", "tidecd always renders kustomize"),
    ("kustomize.", "kustomize build options, versions and paths are not implemented by tidecd"),
    ("jsonnet.enable", "tidecd always renders jsonnet"), ("helm.enable", "tidecd always renders helm"),
    ("helm.valuesFileSchemes", "tidecd reads helm value files from the source's checkout only"),
    ("timeout.hard.reconciliation", "not implemented by tidecd (the poll and webhooks refresh apps)"),
    ("webhook.", "tidecd's webhook function has its own limits and no jitter"),
    ("application.sync.", "revision-sync privileges are not implemented by tidecd"),
    ("commit.", "the source hydrator is not implemented by tidecd"),
    ("sourceHydrator.", "the source hydrator is not implemented by tidecd"),
    ("cluster.inClusterEnabled", "tidecd's in-cluster destination is the KUBECONFIG of the functions"),
    ("repositories", "repositories are (sealed) Secrets labelled argocd.argoproj.io/secret-type in tidecd"),
    ("repository.credentials", "repositories are (sealed) Secrets labelled argocd.argoproj.io/secret-type"),
    ("globalProjects", "not implemented by tidecd"),
    ("statusbadge.", "status badges are not implemented by tidecd"),
    ("application.links", _UI), ("project.links", _UI), ("resource.links", _UI),
    ("application.allowedNodeLabels", _UI), ("extension.", _UI), ("exec.", _UI), ("server.", _UI),
    ("ui.", _UI), ("help.", _UI), ("ga.", _UI),
    ("users.", "anonymous access and session limits are not implemented by tidecd"),
    ("passwordPattern", "tidecd changes no passwords: bcrypt hashes are sealed in argocd-secret"),
    ("dex.", "tidecd runs no Dex: point oidc.config at your Dex or another OIDC issuer"),
    ("oidc.tls.", "not implemented by tidecd (the issuer's certificate is checked against the system's CAs)"),
    ("admin.", "not implemented by tidecd (only admin.enabled is read)"),
    ("accounts.", "not implemented by tidecd (accounts.NAME and accounts.NAME.enabled are read)"),
    ("additionalUrls", "not implemented by tidecd (one url)"),
)


HONOURED_WHAT: Mapping[str, str] = MappingProxyType({
    "resource.customizations": "the block form: `health.lua`, `health.lua.useOpenLibs` and `ignoreDifferences` "
                               "per group/Kind (split keys win, as in Argo CD)",
    "resource.customizations.health.<group>_<Kind>": "Lua health checks (tidecd.health runs them)",
    "resource.customizations.useOpenLibs.<group>_<Kind>": "Lua standard libraries for that health check",
    "resource.customizations.ignoreDifferences.<group>_<Kind>": "fields left out of every app's diff "
                                                                "(jsonPointers, jqPathExpressions, "
                                                                "managedFieldsManagers); `all` for every kind",
    "resource.exclusions": "kinds tidecd neither syncs nor prunes (globs over apiGroups, kinds, clusters)",
    "resource.inclusions": "only these kinds are synced and pruned",
    "timeout.reconciliation": "how often the poll's drift sweep re-compares an automated app (0: never)",
    "timeout.reconciliation.jitter": "spreads those sweeps per app",
    "kustomize.buildOptions": "`--enable-helm` only: `helmCharts` are inflated, each chart fetched by tidecd as a "
                              "snapshot from a repository the project permits (other options are not honoured)",
    "url": "the dashboard's external URL: the OIDC redirect URI is URL/ui/auth/callback",
    "oidc.config": "single sign-on for the dashboard and `tidecd login --sso` (authorization code with PKCE); "
                   "clientSecret as a $KEY of the sealed argocd-secret; groups from the ID token's claims",
    "admin.enabled": "\"false\" refuses the builtin admin's password login",
    "accounts.<name>": "local accounts (`login`: a password login with the bcrypt hash of the sealed "
                       "argocd-secret's accounts.NAME.password; `apiKey`: tokens from `tidecd account "
                       "generate-token`, kept in tidecd's store); accounts.NAME.enabled",
})


def table_rows() -> list[tuple[str, str, str]]:
    """(key, status, reason) of argocd-cm for docs/argocd-compatibility.md: what is read, and every
    not-honoured key family."""

    rows = [(key, SUPPORTED, what) for key, what in HONOURED_WHAT.items()]
    for prefix, reason in NOT_HONOURED:
        status = NOT_IMPLEMENTED if "not implemented" in reason else IGNORED
        rows.append((prefix + ("*" if prefix.endswith(".") else ""), status, reason))
    rows.append((f"ConfigMap/{notifications.CONFIG_MAP}", SUPPORTED,
                 "Argo CD Notifications: `trigger.*` (`when`/`oncePer` in expr), `template.*` (Go text/template "
                 "and Sprig), `service.*` (" + ", ".join(notifications.SERVICE_TYPES) + "), `defaultTriggers[.*]`, "
                 "`context`, `subscriptions` (tidecd.notify)"))
    rows.append((f"SealedSecret/{notifications.SECRET}", SUPPORTED,
                 "the `$key` values of the services' settings, opened in memory when a notification is delivered"))
    rows += [(f"ConfigMap/{name}", IGNORED, why) for name, why in CONFIG_MAPS.items() if why]
    rows += [(f"Secret/{name}", IGNORED, why) for name, why in SECRETS.items()]
    return rows


README_BEGIN = "<!-- argocd-fields:begin (generated: scripts/argocd_fields.py --readme) -->"
README_END = "<!-- argocd-fields:end -->"


def readme_block() -> str:
    """The field tables of docs/argocd-compatibility.md (Application, AppProject, argocd-cm), checked by a unit
    test."""

    cm = ["| argocd-cm key | tidecd | why |", "|---|---|---|"]
    cm += [f"| `{key}` | {status} | {reason} |" for key, status, reason in table_rows()]
    parts = [README_BEGIN,
             f"Generated from Argo CD {argocd_fields.ARGOCD_VERSION}'s CRDs (every `spec` field; `spec.sources[]` has "
             "the fields of `spec.source`). *ignored*: accepted, no effect; *not implemented*: the app (or the "
             "project's apps) is set aside with \"Argo CD field X is not implemented by tidecd\" unless the field "
             "holds its default value. A field Argo CD does not have is an \"unknown field\".",
             "", "<details><summary>Application</summary>", "", config_fields.markdown_table("Application"), "",
             "</details>", "", "<details><summary>AppProject</summary>", "",
             config_fields.markdown_table("AppProject"), "", "</details>", "",
             "<details><summary>argocd-cm and the other settings objects</summary>", "", "\n".join(cm), "",
             "</details>", README_END]
    return "\n".join(parts)


def recognised(doc: Any) -> str:
    """`ConfigMap/argocd-cm` (the object's label) when `doc` is one of Argo CD's settings objects, else ""."""
    if not isinstance(doc, dict):
        return ""
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if doc.get("kind") == "SealedSecret" and str(doc.get("apiVersion", "")).startswith("bitnami.com/") \
            and name in (SEALED_SECRET, notifications.SECRET):
        return f"SealedSecret/{name}"
    if doc.get("apiVersion") != "v1" or doc.get("kind") not in ("ConfigMap", "Secret"):
        return ""
    known = CONFIG_MAPS if doc["kind"] == "ConfigMap" else SECRETS
    return f"{doc['kind']}/{name}" if isinstance(name, str) and name in known else ""


def _reason(key: str) -> str:
    for prefix, reason in NOT_HONOURED:
        if key == prefix or (prefix.endswith(".") and key.startswith(prefix)):
            return reason
    return "not a setting tidecd knows"


def honoured(key: str) -> bool:
    return key in HONOURED_KEYS or key.startswith(HONOURED_PREFIXES) or sso.handles(key)


def read(objects: Iterable[tuple[Any, str]], problems: list[str]) -> ArgoSettings:
    """The settings of the recognised objects (`(document, origin file)` pairs); problems are appended."""
    notices: list[str] = []
    argocd_cm: tuple[Mapping[str, Any], str] | None = None
    rbac_cm: rbac.RbacConfig | None = None
    sealed: tuple[Mapping[str, Any], str] | None = None
    notify: dict[str, tuple[Mapping[str, Any], str]] = {}  # the notifications ConfigMap and sealed Secret
    for doc, origin in objects:
        label = recognised(doc)
        name = label.partition("/")[2]
        if label in (f"SealedSecret/{notifications.SECRET}", f"ConfigMap/{notifications.CONFIG_MAP}"):
            if label in notify:
                problems.append(f"{origin}: {label}: defined more than once (also in {notify[label][1]}); "
                                "only the first is read")
            else:
                notify[label] = (doc, origin)
        elif label.startswith("SealedSecret/"):
            if sealed is not None:
                problems.append(f"{origin}: {label}: defined more than once (also in {sealed[1]}); "
                                "only the first is read")
            else:
                sealed = (MappingProxyType(doc), origin)
        elif label.startswith("Secret/"):
            notices.append(f"{origin}: {label}: {SECRETS[name]}")
        elif name == rbac.RBAC_CM:
            rbac_cm = _read_rbac_cm(doc, origin, rbac_cm, problems, notices)
        elif name != ARGOCD_CM:
            count = len(doc.get("data") or {}) if isinstance(doc.get("data"), dict) else 0
            notices.append(f"{origin}: {label}: {count} setting(s) not honoured: {CONFIG_MAPS[name]}")
        elif argocd_cm is not None:
            problems.append(f"{origin}: {label}: defined more than once (also in {argocd_cm[1]}); "
                            "only the first is read")
        else:
            data = doc.get("data")
            if data is not None and not isinstance(data, dict):
                problems.append(f"{origin}: {label}: data: expected a mapping, got {type_name(data)}")
                data = {}
            argocd_cm = (data or {}, origin)
    settings = ArgoSettings(notices=tuple(notices)) if argocd_cm is None else \
        _read_argocd_cm(argocd_cm[0], argocd_cm[1], notices, problems)
    if sealed is not None:
        settings = replace(settings, sso=replace(settings.sso, sealed_secret=sealed[0], secret_origin=sealed[1]))
    return replace(settings, rbac=rbac_cm or rbac.NO_RBAC, notifications=_notifications(notify, problems))


def _notifications(found: Mapping[str, tuple[Mapping[str, Any], str]],
                   problems: list[str]) -> notifications.NotificationsConfig:
    config = notifications.NO_NOTIFICATIONS
    if (cm := found.get(f"ConfigMap/{notifications.CONFIG_MAP}")) is not None:
        data = cm[0].get("data")
        if data is not None and not isinstance(data, dict):
            problems.append(f"{cm[1]}: ConfigMap/{notifications.CONFIG_MAP}: data: expected a mapping, "
                            f"got {type_name(data)}")
            data = {}
        config = notifications.read(data or {}, cm[1], problems)
    if (secret := found.get(f"SealedSecret/{notifications.SECRET}")) is not None:
        config = replace(config, sealed_secret=MappingProxyType(dict(secret[0])), secret_origin=secret[1])
    return config


def _read_rbac_cm(doc: Mapping[str, Any], origin: str, earlier: rbac.RbacConfig | None, problems: list[str],
                  notices: list[str]) -> rbac.RbacConfig | None:
    """argocd-rbac-cm's policy, checked as Argo CD checks it; a broken one is a problem naming the file and
    the key, and tidecd then answers with the builtin roles only (nobody gains rights from a typo)."""
    label = f"{origin}: ConfigMap/{rbac.RBAC_CM}"
    if earlier is not None:
        problems.append(f"{label}: defined more than once (also in {earlier.origin}); only the first is read")
        return earlier
    data = doc.get("data") or {}
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        problems.append(f"{label}: data: expected a mapping of strings")
        return rbac.RbacConfig(origin=origin)
    notices += [f"{label}: {key}: not honoured by tidecd: not a key of argocd-rbac-cm" for key in sorted(data)
                if not rbac.honoured(key)]
    try:
        config = rbac.from_config_map(data, origin)
        rbac.validate(config.policy_csv)
    except rbac.PolicyError as exc:
        problems.append(f"{label}: {str(exc).removeprefix(label + ': ')}")
        return rbac.RbacConfig(origin=origin)
    return config


def _read_argocd_cm(data: Mapping[str, Any], origin: str, notices: list[str],
                    problems: list[str]) -> ArgoSettings:
    reader = ConfigMapReader(origin, ARGOCD_CM, problems)
    health: dict[str, str] = {}
    open_libs: set[str] = set()
    ignores: dict[str, IgnoreRule] = {}
    values: dict[str, str] = {}
    for key, value in data.items():
        if not isinstance(value, str):
            reader.error(str(key), f"expected a string, got {type_name(value)}")
        elif honoured(str(key)):
            values[str(key)] = value
        else:
            notices.append(f"{origin}: ConfigMap/{ARGOCD_CM}: {key}: not honoured by tidecd: {_reason(str(key))}")
    if "resource.customizations" in values:  # the block form first: split keys win, as in Argo CD
        _block_form(reader, values["resource.customizations"], health, open_libs, ignores)
    for key, value in sorted(values.items()):
        kind, _, group_kind = key.removeprefix("resource.customizations.").partition(".")
        if not key.startswith(HONOURED_PREFIXES):
            continue
        gk = _split_key(reader, key, group_kind)
        if gk is None:
            continue
        if kind == "health":
            health[gk] = value
        elif kind == "useOpenLibs":
            if value.strip().lower() == "true":
                open_libs.add(gk)
        elif (rule := _ignore_rule(reader, key, reader.yaml(key, value))) is not None:
            ignores[gk] = rule
    enable_helm = _kustomize_options(values.get("kustomize.buildOptions", ""), origin, notices)
    login = sso.read({k: v for k, v in values.items() if sso.handles(k)}, reader.error,
                     lambda key, why: notices.append(f"{origin}: ConfigMap/{ARGOCD_CM}: {key}: {why}"), reader.yaml)
    return ArgoSettings(
        sso=login, health_lua=MappingProxyType(health), health_lua_open_libs=frozenset(open_libs),
        ignore_differences=MappingProxyType(ignores),
        exclusions=_filters(reader, "resource.exclusions", values.get("resource.exclusions")),
        inclusions=_filters(reader, "resource.inclusions", values.get("resource.inclusions")),
        reconciliation_timeout=_seconds(reader, "timeout.reconciliation", values.get("timeout.reconciliation")),
        reconciliation_jitter=_seconds(reader, "timeout.reconciliation.jitter",
                                       values.get("timeout.reconciliation.jitter")),
        notices=tuple(notices), origin=origin,
        sync_impersonation=_boolean(reader, IMPERSONATION, values.get(IMPERSONATION), False),
        impersonation_enforced=_boolean(reader, IMPERSONATION_ENFORCED, values.get(IMPERSONATION_ENFORCED), True),
        kustomize_enable_helm=enable_helm)


def _kustomize_options(options: str, origin: str, notices: list[str]) -> bool:
    """Whether `kustomize.buildOptions` enables helm; each other option is noticed as not honoured."""
    words = options.split()
    if other := [word for word in words if word != "--enable-helm"]:
        notices.append(f"{origin}: ConfigMap/{ARGOCD_CM}: kustomize.buildOptions: {' '.join(other)}: not honoured by "
                       "tidecd (only --enable-helm)")
    return "--enable-helm" in words


def _boolean(reader: ConfigMapReader, key: str, value: str | None, default: bool) -> bool:
    """`"true"`/`"false"` (Argo CD parses these with strconv.ParseBool); anything else is an error naming the
    key, and the default holds."""
    if value is None or value.strip() == "":
        return default
    text = value.strip().lower()
    if text in ("true", "1", "t"):
        return True
    if text in ("false", "0", "f"):
        return False
    reader.error(key, f"{value!r}: expected \"true\" or \"false\"")
    return default


def _split_key(reader: ConfigMapReader, key: str, group_kind: str) -> str | None:
    """`<group>_<Kind>` or `<Kind>` (core group) → `"group/Kind"`; `all` stays `all` (ignoreDifferences)."""
    if group_kind == "all" and key.startswith("resource.customizations.ignoreDifferences."):
        return "all"
    parts = group_kind.split("_")
    if len(parts) == 2 and all(parts):
        return gk_key(parts[0], parts[1])
    if len(parts) == 1 and group_kind:
        return gk_key("", group_kind)
    reader.error(key, "expected resource.customizations.<type>.<group>_<Kind> (or .<Kind> for the core group)")
    return None


def _block_form(reader: ConfigMapReader, text: str, health: dict[str, str], open_libs: set[str],
                ignores: dict[str, IgnoreRule]) -> None:
    key = "resource.customizations"
    block = reader.yaml(key, text)
    if block is None:
        return
    if not isinstance(block, dict):
        reader.error(key, f"expected a mapping of group/Kind to customizations, got {type_name(block)}")
        return
    for name, override in block.items():
        where = f"{key}.{name}"
        if not isinstance(name, str) or not isinstance(override, dict):
            reader.error(where, "expected a mapping (health.lua, ignoreDifferences, ...)")
            continue
        gk = name if "/" in name else gk_key("", name)
        if isinstance(script := override.get("health.lua"), str):
            health[gk] = script
        if override.get("health.lua.useOpenLibs") is True:
            open_libs.add(gk)
        diff = override.get("ignoreDifferences")
        if isinstance(diff, str):
            diff = reader.yaml(f"{where}.ignoreDifferences", diff)
        if diff is not None and (rule := _ignore_rule(reader, f"{where}.ignoreDifferences", diff)) is not None:
            ignores[gk] = rule


def _ignore_rule(reader: ConfigMapReader, key: str, value: Any) -> IgnoreRule | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        reader.error(key, f"expected a mapping (jsonPointers, jqPathExpressions, managedFieldsManagers), "
                          f"got {type_name(value)}")
        return None
    pointers = reader.texts(key, value.get("jsonPointers"), "jsonPointers")
    for pointer in pointers:
        if not pointer.startswith("/"):
            reader.error(key, f"jsonPointers: {pointer!r} is not a JSON pointer (must start with '/')")
    expressions = reader.texts(key, value.get("jqPathExpressions"), "jqPathExpressions")
    if expressions:

        for expression in expressions:
            try:
                compile_path(expression)
            except ValueError as exc:
                reader.error(key, f"jqPathExpressions: {exc}")
    return IgnoreRule(json_pointers=pointers, jq_path_expressions=expressions,
                      managed_fields_managers=reader.texts(key, value.get("managedFieldsManagers"),
                                                           "managedFieldsManagers"))


def _filters(reader: ConfigMapReader, key: str, text: str | None) -> tuple[ResourceFilter, ...]:
    if text is None:
        return ()
    entries = reader.yaml(key, text)
    if entries is None:
        return ()
    if not isinstance(entries, list):
        reader.error(key, f"expected a list of {{apiGroups, kinds, clusters}}, got {type_name(entries)}")
        return ()
    out = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            reader.error(f"{key}[{i}]", f"expected a mapping, got {type_name(entry)}")
            continue
        out.append(ResourceFilter(api_groups=reader.texts(f"{key}[{i}]", entry.get("apiGroups"), "apiGroups"),
                                  kinds=reader.texts(f"{key}[{i}]", entry.get("kinds"), "kinds"),
                                  clusters=reader.texts(f"{key}[{i}]", entry.get("clusters"), "clusters")))
    return tuple(out)


def _seconds(reader: ConfigMapReader, key: str, text: str | None) -> float | None:
    if text is None:
        return None
    seconds = parse_duration(text)
    if seconds is None:
        reader.error(key, f'{text!r} is not a duration such as "180s" or "3m"')
    return seconds
