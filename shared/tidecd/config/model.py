"""The typed form of what users write: Argo CD `Application` and `AppProject` (argoproj.io/v1alpha1), the
subset tidecd honours, and the `Config` one config source declares.

Data only: `tidecd.config.schema` reads documents into these dataclasses and `tidecd.config.load` loads a config
source with it; every later stage reads them (through `tidecd.config.load`, which re-exports every name here).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from tidecd.base.constants import (
    SECRET_TYPE_CLUSTER,
    SECRET_TYPE_GITHUB,
    SECRET_TYPE_NOTIFICATIONS,
    SECRET_TYPE_REPO_CREDS,
    SECRET_TYPE_REPOSITORY,
    SECRET_TYPE_SCM_CREDS,
)
from tidecd.config.argocd_settings import NO_SETTINGS, ArgoSettings
from tidecd.config.rbac import ProjectRole

SECRET_TYPES = (SECRET_TYPE_CLUSTER, SECRET_TYPE_REPOSITORY, SECRET_TYPE_REPO_CREDS, SECRET_TYPE_GITHUB,
                SECRET_TYPE_NOTIFICATIONS, SECRET_TYPE_SCM_CREDS)
DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?")  # an object name; also a label value (<= 63)


@dataclass(frozen=True)
class JsonnetVar:
    """One jsonnet top-level argument or external variable; `code` means the value is jsonnet code."""

    name: str
    value: str
    code: bool = False


@dataclass(frozen=True)
class JsonnetSpec:
    tlas: tuple[JsonnetVar, ...] = ()
    ext_vars: tuple[JsonnetVar, ...] = ()
    libs: tuple[str, ...] = ()  # library directories, relative to the repository root


@dataclass(frozen=True)
class DirectorySpec:
    recurse: bool = False
    include: str = ""
    exclude: str = ""
    jsonnet: JsonnetSpec = JsonnetSpec()


@dataclass(frozen=True)
class KustomizeSpec:
    name_prefix: str = ""
    name_suffix: str = ""
    images: tuple[str, ...] = ()
    common_labels: tuple[tuple[str, str], ...] = ()
    common_annotations: tuple[tuple[str, str], ...] = ()
    force_common_labels: bool = False
    force_common_annotations: bool = False
    common_annotations_envsubst: bool = False  # Argo CD's build environment substituted in their values
    namespace: str = ""
    replicas: tuple[tuple[str, int], ...] = ()
    patches: tuple[str, ...] = ()  # each patch as JSON text (a kustomize `patches` entry)
    components: tuple[str, ...] = ()


@dataclass(frozen=True)
class HelmParameter:
    name: str
    value: str
    force_string: bool = False


@dataclass(frozen=True)
class HelmSpec:
    release_name: str = ""
    value_files: tuple[str, ...] = ()
    values: str = ""  # YAML text; `valuesObject`, which wins over `values` as in Argo CD, is dumped to it
    parameters: tuple[HelmParameter, ...] = ()
    file_parameters: tuple[tuple[str, str], ...] = ()  # (name, path in the repository)
    skip_crds: bool = False
    ignore_missing_value_files: bool = False
    pass_credentials: bool = False
    namespace: str = ""  # overrides the destination namespace for `helm template`
    skip_schema_validation: bool = False  # --skip-schema-validation
    skip_tests: bool = False  # --skip-tests
    kube_version: str = ""  # --kube-version (default: tidecd's KUBE_VERSION)
    api_versions: tuple[str, ...] = ()  # --api-versions, each


@dataclass(frozen=True)
class ApplicationSource:
    repo_url: str
    path: str = "."
    target_revision: str = "HEAD"
    directory: DirectorySpec | None = None
    kustomize: KustomizeSpec | None = None
    helm: HelmSpec | None = None
    chart: str = ""
    ref: str = ""  # multi-source: this source's files are `$<ref>/...` for the helm value files of others
    name: str = ""

    @property
    def rendered(self) -> bool:
        """False for a multi-source `ref` source without path or chart: only its files are used."""
        return not (self.ref and not self.path and not self.chart)

    def spec_hash(self) -> str:
        """Stable hash of everything that shapes the render (the manifest cache key)."""
        text = json.dumps(asdict(self), sort_keys=True, default=list)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Destination:
    server: str = ""
    name: str = ""
    namespace: str = ""


@dataclass(frozen=True)
class Backoff:
    """Argo CD defaults: duration 5s, factor 2, maxDuration 3m."""

    duration_seconds: float = 5.0
    factor: float = 2.0
    max_duration_seconds: float = 180.0


@dataclass(frozen=True)
class Retry:
    limit: int = 0  # Argo CD: a negative limit retries forever
    backoff: Backoff = Backoff()


@dataclass(frozen=True)
class SyncPolicy:
    automated: bool = False
    prune: bool = False
    self_heal: bool = False
    sync_options: tuple[str, ...] = ()
    retry: Retry | None = None
    allow_empty: bool = False  # automated sync may prune down to zero objects
    # `managedNamespaceMetadata`: set on the namespace CreateNamespace=true creates
    namespace_labels: tuple[tuple[str, str], ...] = ()
    namespace_annotations: tuple[tuple[str, str], ...] = ()

    def has_option(self, option: str) -> bool:
        return option in self.sync_options


@dataclass(frozen=True)
class IgnoreDifference:
    group: str = ""
    kind: str = ""
    name: str = ""
    namespace: str = ""
    json_pointers: tuple[str, ...] = ()
    managed_fields_managers: tuple[str, ...] = ()
    jq_path_expressions: tuple[str, ...] = ()
    # argocd-cm customizations: `group` and `kind` are globs and "" is the core group only (an app's own
    # rules treat an empty group or kind as any)
    from_settings: bool = False


@dataclass(frozen=True)
class Application:
    name: str
    project: str
    source: ApplicationSource
    destination: Destination
    sync_policy: SyncPolicy = SyncPolicy()
    ignore_differences: tuple[IgnoreDifference, ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    origin: str = ""  # the file it was loaded from, for error messages
    sources: tuple[ApplicationSource, ...] = ()  # `spec.sources` (multi-source); `source` is then the first
    labels: tuple[tuple[str, str], ...] = ()  # metadata.labels: what `tidecd app list -l key=value` selects on
    # metadata.finalizers: Argo CD's resources finalizer decides whether removing the app deletes its objects
    finalizers: tuple[str, ...] = ()

    @property
    def all_sources(self) -> tuple[ApplicationSource, ...]:
        return self.sources or (self.source,)

    def annotation(self, name: str, default: str = "") -> str:
        return dict(self.annotations).get(name, default)


@dataclass(frozen=True)
class ProjectDestination:
    """One allowed (or, with a `!` prefix, denied) destination; every field is a glob."""

    server: str = "*"
    name: str = ""
    namespace: str = "*"


# Characters Argo CD refuses in a defaultServiceAccount (a glob or a path there is a misconfiguration).
SERVICE_ACCOUNT_DISALLOWED = "!*[]{}\\/"


@dataclass(frozen=True)
class DestinationServiceAccount:
    """One `spec.destinationServiceAccounts` entry: syncs to a matching destination act as this
    ServiceAccount when argocd-cm enables sync impersonation (`tidecd.project.impersonation`). `server` and
    `namespace` are globs; `default_service_account` is `NAME` (in the app's destination namespace) or
    `NAMESPACE:NAME`."""

    server: str
    namespace: str
    default_service_account: str


@dataclass(frozen=True)
class GroupKind:
    group: str  # "" is the core group; globs allowed
    kind: str


@dataclass(frozen=True)
class SyncWindow:
    """One AppProject `syncWindows` entry (see `tidecd.project.windows` for Argo CD's rules)."""

    kind: str  # "allow" or "deny"
    schedule: str  # cron, five fields (or a descriptor such as @daily)
    duration_seconds: float
    applications: tuple[str, ...] = ()  # globs over app names
    namespaces: tuple[str, ...] = ()  # globs over the destination namespace
    clusters: tuple[str, ...] = ()  # globs over the destination server or name
    manual_sync: bool = False  # manual syncs are let through while this window is active
    time_zone: str = "UTC"
    and_operator: bool = False  # match only when every non-empty list matches (else any)
    index: int = 0  # its position in spec.syncWindows, for messages


@dataclass(frozen=True)
class OrphanIgnore:
    group: str = ""  # globs, as Argo CD
    kind: str = ""
    name: str = ""


@dataclass(frozen=True)
class OrphanedResources:
    """`orphanedResources`: objects in the app's destination namespace that no app manages."""

    warn: bool = False  # an OrphanedResourceWarning condition listing them
    ignore: tuple[OrphanIgnore, ...] = ()


@dataclass(frozen=True)
class AppProject:
    """An AppProject, with Argo CD's semantics for absent fields (see `project.py`).

    A user-written project with no `sourceRepos` or `destinations` allows none. A project with no
    `clusterResourceWhitelist` (None) or an empty one allows no cluster-scoped kind; a project with no
    `namespaceResourceWhitelist` (None) allows every namespaced kind, an empty one (`[]`) allows none.
    Blacklists always beat whitelists.
    """

    name: str
    source_repos: tuple[str, ...] = ("*",)
    destinations: tuple[ProjectDestination, ...] = (ProjectDestination(),)
    cluster_resource_whitelist: tuple[GroupKind, ...] | None = None
    cluster_resource_blacklist: tuple[GroupKind, ...] = ()
    namespace_resource_whitelist: tuple[GroupKind, ...] | None = None
    namespace_resource_blacklist: tuple[GroupKind, ...] = ()
    origin: str = ""
    description: str = ""
    sync_windows: tuple[SyncWindow, ...] = ()
    orphaned_resources: OrphanedResources | None = None  # None: not monitored
    annotations: tuple[tuple[str, str], ...] = ()  # metadata.annotations (`tidecd.io/require-plan`)
    roles: tuple[ProjectRole, ...] = ()  # spec.roles: who may do what with the project's apps (config.rbac)
    # spec.destinationServiceAccounts: whom a sync acts as when impersonation is on (project.impersonation)
    destination_service_accounts: tuple[DestinationServiceAccount, ...] = ()
    source_namespaces: tuple[str, ...] = ()  # spec.sourceNamespaces: the team config sources it admits (config.teams)


# Argo CD creates `default` allowing everything, cluster-scoped kinds included, unless it is redefined.
DEFAULT_PROJECT = AppProject(
    name="default",
    source_repos=("*",),
    destinations=(ProjectDestination(server="*", namespace="*"),),
    cluster_resource_whitelist=(GroupKind("*", "*"),),
)


@dataclass(frozen=True)
class TeamSource:
    """A team's config source, named by the main config source's ConfigMap `tidecd-config-sources`: its
    name plays the role of an Argo CD app namespace (`tidecd.config.teams`)."""

    name: str
    spec: str  # a directory or REPO_URL#REF:PATH, as TIDECD_CONFIG
    origin: str = ""  # the file that names it


@dataclass
class Config:
    """Everything one config source declares."""

    applications: dict[str, Application] = field(default_factory=dict)
    projects: dict[str, AppProject] = field(default_factory=lambda: {"default": DEFAULT_PROJECT})
    secrets: list[dict[str, Any]] = field(default_factory=list)  # (sealed) cluster/repository Secrets
    # Applications that failed validation, name → every error: one bad app must not stop the others.
    invalid: dict[str, str] = field(default_factory=dict)
    # Problems that set aside no application by name (an unknown kind, a bad Secret, a file that could
    # not be read at all): reported by `app list`, the api and the webhook, while every app keeps working.
    problems: list[str] = field(default_factory=list)
    # What tidecd honours of argocd-cm (health Lua, ignoreDifferences, exclusions, timeout.reconciliation)
    argo_settings: ArgoSettings = NO_SETTINGS
    # ApplicationSets (`tidecd.config.appset.model.ApplicationSet`) by name, and those set aside (name → errors)
    appsets: dict[str, Any] = field(default_factory=dict)
    invalid_appsets: dict[str, str] = field(default_factory=dict)
    # Generated apps (`tidecd.generated.records`): app name → owner, `ApplicationSet/<name>` or `Application/<parent>`
    owners: dict[str, str] = field(default_factory=dict)
    deleting: set[str] = field(default_factory=set)  # generated apps being removed (their objects pruned first)
    team_sources: tuple[TeamSource, ...] = ()  # the teams' config sources the main one names (config.teams)
    teams: dict[str, str] = field(default_factory=dict)  # app name → the team source defining it (none: main)

    def project_of(self, app: Application) -> AppProject:
        return self.projects[app.project]

    def ignore_differences_of(self, app: Application) -> tuple[IgnoreDifference, ...]:
        """The app's ignoreDifferences, then argocd-cm's `resource.customizations.ignoreDifferences.*`."""
        return app.ignore_differences + settings_ignores(self.argo_settings)


def settings_ignores(settings: ArgoSettings) -> tuple[IgnoreDifference, ...]:
    out = []
    for key, rule in sorted(settings.ignore_differences.items()):
        group, _, kind = ("*", "", "*") if key == "all" else key.rpartition("/")
        out.append(IgnoreDifference(group=group, kind=kind, json_pointers=rule.json_pointers,
                                    managed_fields_managers=rule.managed_fields_managers,
                                    jq_path_expressions=rule.jq_path_expressions, from_settings=True))
    return tuple(out)


ConfigItem = Application | AppProject | dict[str, Any]  # one parsed document: app, project or raw Secret
