"""Strict reading of user-written documents (Application, AppProject, credential Secrets) into the
dataclasses of `tidecd.config.model` (the loader, `tidecd.config.load`, calls it per document).

Table-driven: each mapping lists the fields it allows (and the Argo CD fields tidecd refuses by name), and
typed reads record an error naming the dotted field instead of raising, so one pass reports every problem
of a document. Values of Secrets are never echoed.
"""

from __future__ import annotations

import difflib
import json
import re
import zoneinfo
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, TypeVar, overload

import yaml

from tidecd.base.constants import ARGO_VERSION, LABEL_SECRET_TYPE
from tidecd.base.jqpaths import compile_path
from tidecd.config import fields as config_fields
from tidecd.config import rbac
from tidecd.config.model import (
    DNS_NAME,
    SECRET_TYPES,
    SERVICE_ACCOUNT_DISALLOWED,
    Application,
    ApplicationSource,
    AppProject,
    Backoff,
    ConfigItem,
    Destination,
    DestinationServiceAccount,
    DirectorySpec,
    GroupKind,
    HelmParameter,
    HelmSpec,
    IgnoreDifference,
    JsonnetSpec,
    JsonnetVar,
    KustomizeSpec,
    OrphanedResources,
    OrphanIgnore,
    ProjectDestination,
    Retry,
    SyncPolicy,
    SyncWindow,
)
from tidecd.config.rbac import IssuedToken, ProjectRole

# ---------------------------------------------------------------------------------------------------
# Typed reading of one user object


_V = TypeVar("_V")  # the types a field is checked to be
_W = TypeVar("_W")


@dataclass
class Errors:
    origin: str
    obj: str
    items: list[str]
    kind: str = ""  # Application or AppProject: which of Argo CD's field lists applies

    def __post_init__(self) -> None:
        if not self.kind:  # "Application/guestbook" or "Application (document 2)"
            self.kind = self.obj.split("/", 1)[0].split(" ", 1)[0]

    def add(self, path: str, message: str) -> None:
        where = f"{path}: " if path else ""
        self.items.append(f"{self.origin}: {self.obj}: {where}{message}")

    def ignored(self, path: str, reason: str) -> None:
        """A real Argo CD field accepted and ignored (`config_fields`); a hook for reports such as the import's."""


@dataclass(frozen=True)
class Keys:
    """The fields one mapping may hold; `unsupported` are Argo CD fields tidecd refuses by name."""

    allowed: tuple[str, ...]
    unsupported: tuple[str, ...] = ()


def type_name(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
             dict: "a mapping", type(None): "null"}
    return names.get(type(value), type(value).__name__)


class Node:
    """One mapping of a user object at a dotted path: typed reads that record errors, never raise."""

    def __init__(self, data: Mapping[str, Any], path: str, errs: Errors) -> None:
        self.data, self.path, self.errs = data, path, errs

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, message: str) -> None:
        self.errs.add(self.at(key) if key else self.path, message)

    def check_keys(self, keys: Keys) -> Node:
        for key in self.data:
            if not isinstance(key, str):
                self.errs.add(self.path, f"field name {key!r} is not a string")
            elif key in keys.unsupported:
                self.error(key, "not supported by tidecd")
            elif key not in keys.allowed:
                self._not_read(key, keys)
        return self

    def _not_read(self, key: str, keys: Keys) -> None:
        """A field this reader does not read: ignored, a real Argo CD field not implemented, or a typo."""
        if self.path == "metadata" and key in config_fields.READ_ONLY_METADATA:
            return  # what `kubectl get -o yaml` adds
        status, reason = config_fields.classify(self.errs.kind, self.at(key))
        if status == config_fields.IGNORED:
            self.errs.ignored(self.at(key), reason)
            return
        if status == config_fields.NOT_IMPLEMENTED:
            if self.data[key] in (None, False, "", [], {}):  # set to its default: it changes nothing
                self.errs.ignored(self.at(key), "set to its default value")
                return
            self.error(key, config_fields.not_implemented_message(self.at(key), reason))
            return
        close = difflib.get_close_matches(key, keys.allowed, n=1)
        self.error(key, "unknown field" + (f" (did you mean {close[0]}?)" if close else ""))

    @overload
    def get(self, key: str, types: tuple[type[_V]], expected: str, required: bool = False) -> _V | None: ...

    @overload
    def get(self, key: str, types: tuple[type[_V], type[_W]], expected: str,
            required: bool = False) -> _V | _W | None: ...

    def get(self, key: str, types: tuple[type, ...], expected: str, required: bool = False) -> object:
        """The field when it is one of `types` (a bool is no number); None, with the error recorded, otherwise."""
        value = self.data.get(key)
        if value is None:
            if required:
                self.error(key, "required field is missing")
            return None
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            self.error(key, f"expected {expected}, got {type_name(value)}")
            return None
        return value

    def text(self, key: str, default: str = "", *, required: bool = False) -> str:
        value = self.get(key, (str,), "a string", required)
        if required and value == "":
            self.error(key, "must not be empty")
        return default if value is None else str(value)

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.get(key, (bool,), "a boolean (true or false)")
        return default if value is None else bool(value)

    def number(self, key: str, default: float) -> float:
        value = self.get(key, (int, float), "a number")
        return default if value is None else float(value)

    def integer(self, key: str, default: int) -> int:
        value = self.get(key, (int,), "an integer")
        return default if value is None else int(value)

    def texts(self, key: str) -> tuple[str, ...]:
        items = self.get(key, (list,), "a list of strings") or []
        for i, item in enumerate(items):
            if not isinstance(item, str):
                self.error(f"{key}[{i}]", f"expected a string, got {type_name(item)}")
        return tuple(item for item in items if isinstance(item, str))

    def pairs(self, key: str) -> tuple[tuple[str, str], ...]:
        mapping = self.get(key, (dict,), "a mapping of strings") or {}
        for name, value in mapping.items():
            if not isinstance(value, str):
                self.error(f"{key}.{name}", f"expected a string, got {type_name(value)}")
        return tuple(sorted((str(k), v) for k, v in mapping.items() if isinstance(v, str)))

    def child(self, key: str, keys: Keys, *, required: bool = False) -> Node | None:
        value = self.get(key, (dict,), "a mapping", required)
        return None if value is None else Node(value, self.at(key), self.errs).check_keys(keys)

    def children(self, key: str, keys: Keys) -> list[Node]:
        nodes = []
        for i, item in enumerate(self.get(key, (list,), "a list") or []):
            if isinstance(item, dict):
                nodes.append(Node(item, self.at(f"{key}[{i}]"), self.errs).check_keys(keys))
            else:
                self.error(f"{key}[{i}]", f"expected a mapping, got {type_name(item)}")
        return nodes


_TOP = Keys(("apiVersion", "kind", "metadata", "spec"))
_METADATA = Keys(("name", "namespace", "labels", "annotations", "finalizers"))
_APP_SPEC = Keys(("project", "source", "sources", "destination", "syncPolicy", "ignoreDifferences"))
_SOURCE = Keys(("repoURL", "targetRevision", "path", "chart", "directory", "kustomize", "helm", "ref", "name"))
_REF = re.compile(r"^[A-Za-z0-9_-]+$")
_DIRECTORY = Keys(("recurse", "include", "exclude", "jsonnet"))
_JSONNET = Keys(("tlas", "extVars", "libs"))
_JSONNET_VAR = Keys(("name", "value", "code"))
_KUSTOMIZE = Keys(("namePrefix", "nameSuffix", "images", "commonLabels", "commonAnnotations",
                    "forceCommonLabels", "forceCommonAnnotations", "namespace", "replicas", "patches",
                    "components", "commonAnnotationsEnvsubst"))
_KUSTOMIZE_REPLICA = Keys(("name", "count"))
_HELM = Keys(("releaseName", "valueFiles", "values", "valuesObject", "parameters", "fileParameters",
               "passCredentials", "ignoreMissingValueFiles", "skipCrds", "namespace", "skipSchemaValidation",
               "skipTests", "kubeVersion", "apiVersions"))
_HELM_PARAMETER = Keys(("name", "value", "forceString"))
_HELM_FILE_PARAMETER = Keys(("name", "path"))
_MANAGED_NAMESPACE = Keys(("labels", "annotations"))
_DESTINATION = _PROJECT_DESTINATION = Keys(("server", "name", "namespace"))
_SYNC_POLICY = Keys(("automated", "syncOptions", "retry", "managedNamespaceMetadata"))
_AUTOMATED = Keys(("prune", "selfHeal", "allowEmpty", "enabled"))
_RETRY = Keys(("limit", "backoff"))
_BACKOFF = Keys(("duration", "factor", "maxDuration"))
_IGNORE = Keys(("group", "kind", "name", "namespace", "jsonPointers", "managedFieldsManagers",
                 "jqPathExpressions"))
_PROJECT_SPEC = Keys(("description", "sourceRepos", "destinations", "clusterResourceWhitelist",
                       "clusterResourceBlacklist", "namespaceResourceWhitelist",
                       "namespaceResourceBlacklist", "syncWindows", "orphanedResources", "roles",
                       "destinationServiceAccounts", "sourceNamespaces"))
_DESTINATION_SERVICE_ACCOUNT = Keys(("server", "namespace", "defaultServiceAccount"))
_ROLE = Keys(("name", "description", "policies", "groups", "jwtTokens"))
_ISSUED_TOKEN = Keys(("iat", "id", "exp"))
_GROUP_KIND = Keys(("group", "kind"))
_SYNC_WINDOW = Keys(("kind", "schedule", "duration", "applications", "namespaces", "clusters", "manualSync",
                      "timeZone", "andOperator"))
_ORPHANED = Keys(("warn", "ignore"))
_ORPHAN_IGNORE = Keys(("group", "kind", "name"))


# ---------------------------------------------------------------------------------------------------
# Application


Pairs = tuple[tuple[str, str], ...]


def _metadata(top: Node) -> tuple[str, Pairs, Pairs]:
    """Name, labels (the CLI's `app list -l`) and annotations; namespace (Argo CD's `argocd`) and finalizers
    are checked here (an Application's finalizers are kept: they decide what its deletion deletes)."""
    meta = top.child("metadata", _METADATA, required=True)
    if meta is None:
        return "", (), ()
    name = meta.text("name", required=True)
    if name and not DNS_NAME.fullmatch(name):
        meta.error("name", f"{name!r} is not a valid name (lowercase letters, digits, '-' and '.', "
                           "at most 63 characters)")
    meta.text("namespace")
    labels = meta.pairs("labels")
    meta.texts("finalizers")
    return name, labels, meta.pairs("annotations")


def _parse_application(top: Node) -> Application | None:
    name, labels, annotations = _metadata(top.check_keys(_TOP))
    spec = top.child("spec", _APP_SPEC, required=True)
    if spec is None:
        return None
    project = spec.text("project", "default") or "default"  # Argo CD: an empty project means `default`
    sources = tuple(s for s in (_source(n, multi=True) for n in spec.children("sources", _SOURCE)) if s)
    if spec.data.get("sources") is not None:
        _check_sources(spec, sources)
    # Argo CD: with `sources`, `source` is ignored
    source = sources[0] if sources else _source(spec.child("source", _SOURCE, required=True))
    destination = _destination(spec.child("destination", _DESTINATION, required=True))
    sync_policy = _sync_policy(spec.child("syncPolicy", _SYNC_POLICY))
    ignores = tuple(_ignore_difference(n) for n in spec.children("ignoreDifferences", _IGNORE))
    if source is None or destination is None:
        return None
    return Application(name=name, project=project, source=source, destination=destination,
                       sync_policy=sync_policy, ignore_differences=ignores, annotations=annotations,
                       origin=top.errs.origin, sources=sources, labels=labels,
                       finalizers=tuple(f for f in (top.data.get("metadata") or {}).get("finalizers") or ()
                                        if isinstance(f, str)))


def _check_sources(spec: Node, sources: tuple[ApplicationSource, ...]) -> None:
    if not sources:
        spec.error("sources", "must list at least one source")
    refs = [s.ref for s in sources if s.ref]
    for ref in sorted({r for r in refs if refs.count(r) > 1}):
        spec.error("sources", f"ref {ref!r} is used by more than one source")
    if sources and not any(s.rendered for s in sources):
        spec.error("sources", "every source is a ref source (no path or chart): nothing to render")


def _source(node: Node | None, *, multi: bool = False) -> ApplicationSource | None:
    if node is None:
        return None
    ref = node.text("ref")
    if ref and not multi:
        node.error("ref", "only sources of spec.sources can have a ref")
    if ref and not _REF.match(ref):
        node.error("ref", f"{ref!r}: use letters, digits, '-' and '_'")
    default_path = "" if ref and not node.data.get("chart") else "."
    path = node.text("path", default_path) or default_path
    if PurePosixPath(path).is_absolute() or ".." in PurePosixPath(path).parts:
        node.error("path", "must be a relative path inside the repository")
    tools = [k for k in ("directory", "kustomize", "helm") if node.data.get(k) is not None]
    if len(tools) > 1:
        node.error("", f"set at most one of directory, kustomize and helm (found {', '.join(tools)})")
    return ApplicationSource(
        repo_url=node.text("repoURL", required=True), path=path,
        target_revision=node.text("targetRevision", "HEAD") or "HEAD", chart=node.text("chart"), ref=ref,
        name=node.text("name"),
        directory=_directory(node.child("directory", _DIRECTORY)),
        kustomize=_kustomize(node.child("kustomize", _KUSTOMIZE)),
        helm=_helm(node.child("helm", _HELM)))


def _directory(node: Node | None) -> DirectorySpec | None:
    if node is None:
        return None
    return DirectorySpec(recurse=node.flag("recurse"), include=node.text("include"),
                         exclude=node.text("exclude"), jsonnet=_jsonnet(node.child("jsonnet", _JSONNET)))


def _jsonnet(node: Node | None) -> JsonnetSpec:
    if node is None:
        return JsonnetSpec()
    libs = node.texts("libs")
    for i, lib in enumerate(libs):
        if PurePosixPath(lib).is_absolute() or ".." in PurePosixPath(lib).parts:
            node.error(f"libs[{i}]", "must be a relative path inside the repository")

    def variables(key: str) -> tuple[JsonnetVar, ...]:
        return tuple(JsonnetVar(name=n.text("name", required=True), value=n.text("value"), code=n.flag("code"))
                     for n in node.children(key, _JSONNET_VAR))

    return JsonnetSpec(tlas=variables("tlas"), ext_vars=variables("extVars"), libs=libs)


def _kustomize(node: Node | None) -> KustomizeSpec | None:
    if node is None:
        return None
    replicas = []
    for n in node.children("replicas", _KUSTOMIZE_REPLICA):
        count = n.get("count", (int, str), "an integer", required=True)
        if isinstance(count, str) and not count.isdigit():
            n.error("count", f"{count!r} is not an integer")
            count = None
        replicas.append((n.text("name", required=True), int(count or 0)))
    patches = []
    for i, patch in enumerate(node.get("patches", (list,), "a list of patches") or []):
        if not isinstance(patch, dict):
            node.error(f"patches[{i}]", f"expected a mapping, got {type_name(patch)}")
        elif not isinstance(patch.get("patch"), str) and not isinstance(patch.get("path"), str):
            node.error(f"patches[{i}]", "set patch (inline text) or path")
        elif isinstance(patch.get("path"), str) and (PurePosixPath(patch["path"]).is_absolute()):
            node.error(f"patches[{i}].path", "must be a relative path inside the repository")
        else:
            patches.append(json.dumps(patch, sort_keys=True))
    return KustomizeSpec(name_prefix=node.text("namePrefix"), name_suffix=node.text("nameSuffix"),
                         images=node.texts("images"), common_labels=node.pairs("commonLabels"),
                         common_annotations=node.pairs("commonAnnotations"),
                         force_common_labels=node.flag("forceCommonLabels"),
                         force_common_annotations=node.flag("forceCommonAnnotations"),
                         common_annotations_envsubst=node.flag("commonAnnotationsEnvsubst"),
                         namespace=node.text("namespace"), replicas=tuple(replicas), patches=tuple(patches),
                         components=node.texts("components"))


def _helm(node: Node | None) -> HelmSpec | None:
    if node is None:
        return None
    if isinstance(node.data.get("values"), dict):
        node.error("values", "expected a string (YAML text); use valuesObject for a mapping")
        values = ""
    else:
        values = node.text("values")
    values_object = node.get("valuesObject", (dict,), "a mapping")
    if values_object is not None:  # Argo CD: valuesObject wins over values when both are set
        values = yaml.safe_dump(values_object, sort_keys=False, default_flow_style=False)
    parameters = tuple(_helm_parameter(n) for n in node.children("parameters", _HELM_PARAMETER))
    file_parameters = []
    for n in node.children("fileParameters", _HELM_FILE_PARAMETER):
        name, path = n.text("name", required=True), n.text("path", required=True)
        if "://" in path or ".." in PurePosixPath(path.lstrip("/")).parts:
            n.error("path", "must be a path inside the repository")
        file_parameters.append((name, path))
    return HelmSpec(release_name=node.text("releaseName"), value_files=node.texts("valueFiles"),
                    values=values, parameters=parameters, file_parameters=tuple(file_parameters),
                    skip_crds=node.flag("skipCrds"), ignore_missing_value_files=node.flag("ignoreMissingValueFiles"),
                    pass_credentials=node.flag("passCredentials"), namespace=node.text("namespace"),
                    skip_schema_validation=node.flag("skipSchemaValidation"), skip_tests=node.flag("skipTests"),
                    kube_version=node.text("kubeVersion"), api_versions=node.texts("apiVersions"))


def _helm_parameter(node: Node) -> HelmParameter:
    return HelmParameter(name=node.text("name", required=True), value=node.text("value"),
                         force_string=node.flag("forceString"))


def _destination(node: Node | None) -> Destination | None:
    if node is None:
        return None
    server, name = node.text("server"), node.text("name")
    if bool(server) == bool(name):
        node.error("", "set exactly one of server and name")
    return Destination(server=server, name=name, namespace=node.text("namespace"))


_SYNC_OPTION = re.compile(r"[A-Za-z][A-Za-z0-9]*=\S+")


def _sync_policy(node: Node | None) -> SyncPolicy:
    if node is None:
        return SyncPolicy()
    options = node.texts("syncOptions")
    for i, option in enumerate(options):
        if not _SYNC_OPTION.fullmatch(option):
            node.error(f"syncOptions[{i}]", f"{option!r} is not of the form Name=value")
    auto = node.child("automated", _AUTOMATED)
    retry = node.child("retry", _RETRY)
    managed = node.child("managedNamespaceMetadata", _MANAGED_NAMESPACE)
    return SyncPolicy(
        namespace_labels=managed.pairs("labels") if managed else (),
        namespace_annotations=managed.pairs("annotations") if managed else (),
        automated=auto is not None and auto.flag("enabled", True),  # `automated: {}` turns it on
        prune=auto is not None and auto.flag("prune"),
        self_heal=auto is not None and auto.flag("selfHeal"),
        allow_empty=auto is not None and auto.flag("allowEmpty"),
        sync_options=options,
        retry=None if retry is None else Retry(limit=retry.integer("limit", 0),
                                               backoff=_backoff(retry.child("backoff", _BACKOFF))))


def _backoff(node: Node | None) -> Backoff:
    if node is None:
        return Backoff()
    factor = node.number("factor", 2.0)
    if factor < 1:
        node.error("factor", "must be at least 1")
    return Backoff(duration_seconds=_duration(node, "duration", 5.0), factor=factor,
                   max_duration_seconds=_duration(node, "maxDuration", 180.0))


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float | None:
    """Seconds in a Go duration (`5s`, `2m`, `1h30m`, `500ms`); a bare number is seconds, as in Argo CD."""
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    if not text or _DURATION_PART.sub("", text):
        return None
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(text))


def _duration(node: Node, key: str, default: float) -> float:
    value = node.get(key, (str, int), 'a duration such as "5s", "2m" or "1h"')
    if value is None:
        return default
    seconds = parse_duration(str(value))
    if seconds is None:
        node.error(key, f'{value!r} is not a duration such as "5s", "2m" or "1h"')
        return default
    return seconds


def _ignore_difference(node: Node) -> IgnoreDifference:
    pointers = node.texts("jsonPointers")
    for i, pointer in enumerate(pointers):
        if not pointer.startswith("/"):
            node.error(f"jsonPointers[{i}]", f"{pointer!r} is not a JSON pointer (must start with '/')")
    return IgnoreDifference(group=node.text("group"), kind=node.text("kind", required=True),
                            name=node.text("name"), namespace=node.text("namespace"),
                            json_pointers=pointers,
                            managed_fields_managers=node.texts("managedFieldsManagers"),
                            jq_path_expressions=_jq_expressions(node))


def _jq_expressions(node: Node) -> tuple[str, ...]:
    """jq path expressions, each compiled now so a typo is reported at load time, naming the field."""
    expressions = node.texts("jqPathExpressions")
    if expressions:

        for i, expression in enumerate(expressions):
            try:
                compile_path(expression)
            except ValueError as exc:
                node.error(f"jqPathExpressions[{i}]", str(exc))
    return expressions


# ---------------------------------------------------------------------------------------------------
# AppProject and Secrets


def _parse_project(top: Node) -> AppProject | None:
    name, _, annotations = _metadata(top.check_keys(_TOP))
    spec = top.child("spec", _PROJECT_SPEC) or Node({}, "spec", top.errs)
    return AppProject(
        name=name, description=spec.text("description"), source_repos=spec.texts("sourceRepos"),
        destinations=tuple(_project_destination(n) for n in spec.children("destinations",
                                                                          _PROJECT_DESTINATION)),
        cluster_resource_whitelist=_group_kinds(spec, "clusterResourceWhitelist"),
        cluster_resource_blacklist=_group_kinds(spec, "clusterResourceBlacklist") or (),
        namespace_resource_whitelist=_group_kinds(spec, "namespaceResourceWhitelist"),
        namespace_resource_blacklist=_group_kinds(spec, "namespaceResourceBlacklist") or (),
        origin=top.errs.origin,
        sync_windows=tuple(_sync_window(n, i) for i, n in enumerate(spec.children("syncWindows", _SYNC_WINDOW))),
        orphaned_resources=_orphaned(spec.child("orphanedResources", _ORPHANED)), annotations=annotations,
        roles=tuple(_role(name, n) for n in spec.children("roles", _ROLE)),
        destination_service_accounts=tuple(_destination_service_account(n) for n in spec.children(
            "destinationServiceAccounts", _DESTINATION_SERVICE_ACCOUNT)),
        source_namespaces=spec.texts("sourceNamespaces"))


def _destination_service_account(node: Node) -> DestinationServiceAccount:
    """Checked as Argo CD checks an entry when it is used (a ServiceAccount name without glob characters),
    but at load time, so a typo is an error naming the field rather than a failed sync later."""
    account = node.text("defaultServiceAccount", required=True)
    if account and (account.strip() == "" or any(c in account for c in SERVICE_ACCOUNT_DISALLOWED)):
        node.error("defaultServiceAccount", f"{account!r}: a ServiceAccount name (or NAMESPACE:NAME) without "
                                            f"any of {SERVICE_ACCOUNT_DISALLOWED}")
    return DestinationServiceAccount(server=node.text("server", required=True),
                                     namespace=node.text("namespace", required=True),
                                     default_service_account=account.strip())


def _role(project: str, node: Node) -> ProjectRole:
    """One `spec.roles` entry; a policy Argo CD would refuse is an error naming it (`config.rbac`)."""
    name = node.text("name", required=True)
    tokens = tuple(token for t in node.children("jwtTokens", _ISSUED_TOKEN) if (token := _issued_token(t)))
    role = ProjectRole(name=name, description=node.text("description"), policies=node.texts("policies"),
                       groups=node.texts("groups"), jwt_tokens=tokens)
    for problem in rbac.role_policy_problems(project, role):
        node.error(problem.partition(":")[0], problem.partition(": ")[2])
    return role


def _issued_token(node: Node) -> IssuedToken | None:
    """A `jwtTokens` entry: its `iat` is required (Argo CD finds a token without an id by it)."""
    iat = node.get("iat", (int,), "an integer", required=True)
    return None if iat is None else IssuedToken(iat=iat, id=node.text("id"), exp=node.integer("exp", 0))


def _sync_window(node: Node, index: int) -> SyncWindow:
    """Checked as Argo CD's `SyncWindow.Validate`: kind allow/deny, a cron schedule, a duration, a time zone."""
    kind = node.text("kind", required=True)
    if kind and kind not in ("allow", "deny"):
        node.error("kind", f"{kind!r}: expected allow or deny")
    schedule = node.text("schedule", required=True)
    if schedule and (problem := schedule_problem(schedule)):
        node.error("schedule", problem)
    duration = node.text("duration", required=True)
    seconds = parse_duration(duration) if duration else None
    if duration and (seconds is None or seconds <= 0):
        node.error("duration", f'{duration!r} is not a duration such as "1h" or "30m"')
    time_zone = node.text("timeZone", "UTC") or "UTC"
    try:
        zoneinfo.ZoneInfo(time_zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        node.error("timeZone", f"{time_zone!r} is not a known time zone (e.g. UTC, Europe/Berlin)")
    return SyncWindow(kind=kind, schedule=schedule, duration_seconds=seconds or 0.0,
                      applications=node.texts("applications"), namespaces=node.texts("namespaces"),
                      clusters=node.texts("clusters"), manual_sync=node.flag("manualSync"), time_zone=time_zone,
                      and_operator=node.flag("andOperator"), index=index)


def _orphaned(node: Node | None) -> OrphanedResources | None:
    if node is None:
        return None
    return OrphanedResources(warn=node.flag("warn"), ignore=tuple(
        OrphanIgnore(group=n.text("group"), kind=n.text("kind"), name=n.text("name"))
        for n in node.children("ignore", _ORPHAN_IGNORE)))


def _project_destination(node: Node) -> ProjectDestination:
    """Absent fields are empty, as in Argo CD: no namespace only matches apps without a namespace."""
    server, name = node.text("server"), node.text("name")
    if not server and not name:
        node.error("", "set server or name (a glob; '*' allows any cluster)")
    return ProjectDestination(server=server, name=name, namespace=node.text("namespace"))


def _group_kinds(spec: Node, key: str) -> tuple[GroupKind, ...] | None:
    """None when absent (`null`), else the list; `group` may be omitted for the core group."""
    if spec.data.get(key) is None:
        return None
    return tuple(GroupKind(group=n.text("group"), kind=n.text("kind", required=True))
                 for n in spec.children(key, _GROUP_KIND))


DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"


def _parse_secret(top: Node) -> dict[str, Any] | None:
    """Kept raw for unsealing elsewhere; only the name and the secret-type label are checked here.

    A `kubernetes.io/dockerconfigjson` Secret needs no label: it holds registry credentials.

    A SealedSecret may carry the label on itself or on `spec.template.metadata` (what kubeseal writes).
    Nothing of the data is ever read or echoed.
    """
    meta = top.get("metadata", (dict,), "a mapping", required=True) or {}
    meta_node = Node(meta, "metadata", top.errs)
    meta_node.text("name", required=True)
    labels = dict(meta_node.pairs("labels"))
    spec = top.data.get("spec")
    template = spec.get("template") if isinstance(spec, dict) and top.data["kind"] == "SealedSecret" else None
    if isinstance(template, dict) and isinstance(template.get("metadata"), dict):
        inner = Node(template["metadata"], "spec.template.metadata", top.errs)
        labels = dict(inner.pairs("labels")) | labels
    secret_type = labels.get(LABEL_SECRET_TYPE)
    data_type = (template if isinstance(template, dict) else top.data).get("type")
    if secret_type is None and data_type == DOCKER_CONFIG_JSON:
        return dict(top.data)  # registry credentials for the image updater (pull-secret)
    if secret_type not in SECRET_TYPES:
        found = "missing" if secret_type is None else f"{secret_type!r} is not allowed"
        meta_node.error(f"labels.{LABEL_SECRET_TYPE}", f"{found}; expected one of {', '.join(SECRET_TYPES)} "
                        f"(or type {DOCKER_CONFIG_JSON} for registry credentials)")
    return dict(top.data)


PARSERS: dict[tuple[str, str], Callable[[Node], ConfigItem | None]] = {
    (ARGO_VERSION, "Application"): _parse_application,
    (ARGO_VERSION, "AppProject"): _parse_project,
    ("v1", "Secret"): _parse_secret,
    ("bitnami.com/v1alpha1", "SealedSecret"): _parse_secret,
}


def schedule_problem(schedule: str) -> str:
    """Why `schedule` is not a cron schedule Argo CD accepts (five fields or a descriptor), "" when it is."""
    # lazy: cold start (croniter only for a sync window)
    from croniter import croniter

    fields = schedule.split()
    if not schedule.startswith("@") and len(fields) != 5:
        return f"{schedule!r}: expected a cron schedule of five fields (minute hour day month weekday)"
    if schedule.startswith("@every"):
        return f"{schedule!r}: @every is not supported; use a cron schedule"
    return "" if croniter.is_valid(schedule) else f"{schedule!r} is not a valid cron schedule"
