"""`tidecd import`: read a running Argo CD and write a config source directory that tidecd loads as is.

Read: the Applications and AppProjects of Argo CD's namespace (`argocd` by default) and its Secrets labelled
`argocd.argoproj.io/secret-type: repository | repo-creds | cluster`, through `ArgoReader`, a Protocol with
read verbs only (`list`), so the import cannot change anything in Argo CD by construction.

Convert (pure, `plan_import`): every object is converted on its own; one that cannot be converted becomes
an error naming it, and the others go on. Read-only fields (`status`, `operation`, server-set metadata)
are stripped. What tidecd would refuse is found by tidecd's own strict reader (`config_schema`), so the
import stays exactly as strict as loading: a field tidecd does not implement is removed and reported,
unless removing it would change what gets deployed (a config-management plugin, a source hydrator), in
which case the object is not converted. Secrets are sealed for the installation's sealing certificate in
memory (`secrets.seal_secret`, the format `kubeseal --cert` writes): no plaintext value is ever written.

Argo CD's `argocd-cm` is imported with the settings tidecd honours (`tidecd.config.argocd_cm`: health Lua,
ignoreDifferences customizations, exclusions, reconciliation timeout, `url`, `oidc.config`, `admin.enabled`,
`accounts.*`) and `argocd-rbac-cm`; each other key, and each other settings ConfigMap, is a finding.
`argocd-notifications-cm` is imported as it is, and `argocd-notifications-secret` sealed whole (Argo CD's
label `app.kubernetes.io/name: argocd-notifications-controller`).
`argocd-secret` (found by Argo CD's label `app.kubernetes.io/name: argocd-secret`) is sealed with the keys
tidecd's logins read (`admin.password`, `accounts.NAME.password`, `server.secretkey`, the key argocd-cm's
`oidc.config` names as its clientSecret); its other keys are left out and named in the report.

Write (`write_import`): `applications/<name>.yaml`, `projects/<name>.yaml`, `secrets/<type>-<name>.yaml`
(SealedSecrets only), `settings/argocd-cm.yaml` and `IMPORT-REPORT.md`, the report of what tidecd will not
honour, per object and field. Nothing in a finding or error quotes a Secret value: only object names and
field names.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from tidecd.base.constants import (
    ANNOTATION_ADOPT_FROM_ARGOCD,
    ARGO_GROUP,
    ARGO_VERSION,
    ARGOCD_RESOURCES_FINALIZER,
    LABEL_SECRET_TYPE,
    LAST_APPLIED,
    SECRET_TYPE_CLUSTER,
    SECRET_TYPE_REPO_CREDS,
    SECRET_TYPE_REPOSITORY,
)
from tidecd.base.errors import PermanentError, TidecdError
from tidecd.base.model import Manifest
from tidecd.clients.secrets import Scope, seal_secret, text_fields
from tidecd.config import argocd_cm, notifications, rbac
from tidecd.config.load import load_config
from tidecd.config.schema import PARSERS, Errors, Node
from tidecd.sync import options as syncoptions

DEFAULT_NAMESPACE = "argocd"
REPORT_FILE = "IMPORT-REPORT.md"
IN_CLUSTER_SERVER = "https://kubernetes.default.svc"
SECRET_TYPES = (SECRET_TYPE_REPOSITORY, SECRET_TYPE_REPO_CREDS, SECRET_TYPE_CLUSTER)
SECRET_SELECTOR = f"{LABEL_SECRET_TYPE} in ({','.join(SECRET_TYPES)})"
SETTINGS_SECRET_SELECTOR = "app.kubernetes.io/name=argocd-secret"  # noqa: S105 - Argo CD's install label
# argocd-notifications-secret's label in Argo CD's install (manifests/base/notification)
NOTIFICATIONS_SECRET_SELECTOR = "app.kubernetes.io/name=argocd-notifications-controller"  # noqa: S105 - a label

# Metadata a user wrote; everything else under metadata is set by the API server or by Argo CD at run time.
_KEPT_METADATA = ("name", "namespace", "labels", "annotations")
_DELETION_FINALIZERS = (ARGOCD_RESOURCES_FINALIZER, f"{ARGOCD_RESOURCES_FINALIZER}/background")
# Annotations written by tools or by Argo CD itself, not by the user: dropped silently.
_TOOL_ANNOTATIONS = (LAST_APPLIED, "argocd.argoproj.io/refresh", "argocd.argoproj.io/hydrate",
                     "argocd.argoproj.io/tracking-id")
# Fields whose removal would change what gets deployed: such an object is not converted.
_CHANGES_WHAT_IS_DEPLOYED = {
    "plugin": "a config-management plugin renders this source; tidecd has none, so it would render the "
              "path as a plain directory",
    "sourceHydrator": "the source hydrator decides what is deployed; tidecd does not implement it",
    "signatureKeys": "GnuPG commit verification: without it tidecd would deploy unverified commits",
    "sourceIntegrity": "GnuPG commit verification: without it tidecd would deploy unverified commits",
}
_NOT_HONOURED = ("not supported by tidecd", "unknown field", "not implemented")

# Secret fields tidecd reads (the rest are kept, sealed, and reported as not honoured).
_REPO_FIELDS = {"url", "type", "name", "username", "password", "sshPrivateKey", "insecure",
                "insecureOCIForceHttp"}
_CLUSTER_FIELDS = {"name", "server", "config"}
_CLUSTER_CONFIG_FIELDS = {"bearerToken", "tlsClientConfig", "execProviderConfig"}  # clients.clustersecrets
_CLUSTER_TLS_FIELDS = {"caData", "certData", "keyData", "insecure"}


class ArgoReader(Protocol):
    """Read verbs only: what the import needs from the cluster Argo CD runs in (`KubeCluster` is one)."""

    def list(self, group: str, kind: str, *, namespace: str = "", label_selector: str = "") -> list[Manifest]: ...


@dataclass(frozen=True)
class Finding:
    """One thing tidecd will not honour (`error` False), or the reason an object was not converted."""

    obj: str  # Application/guestbook, AppProject/team, Secret/argocd/repo-x
    field: str  # dotted field, "" for the whole object
    note: str
    error: bool = False

    def __str__(self) -> str:
        where = f"{self.field}: " if self.field else ""
        return f"{self.obj}: {where}{self.note}"


@dataclass(frozen=True)
class Converted:
    obj: str
    path: str  # relative to the output directory
    document: Manifest


@dataclass
class ImportPlan:
    """What one import writes: the converted documents and every finding, in the order read."""

    namespace: str = DEFAULT_NAMESPACE
    documents: list[Converted] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.error]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for doc in self.documents:
            kind = doc.obj.split("/", 1)[0]
            out[kind] = out.get(kind, 0) + 1
        return out


@dataclass(frozen=True)
class ArgoObjects:
    """What was read from Argo CD's namespace."""

    applications: list[Manifest]
    projects: list[Manifest]
    secrets: list[Manifest]
    config_maps: list[Manifest] = field(default_factory=list)  # Argo CD's settings ConfigMaps only
    settings_secrets: list[Manifest] = field(default_factory=list)  # argocd-secret (sealed with the login keys)


class MigrationError(PermanentError):
    """`tidecd import` cannot start or finish: Argo CD's kinds are not served, its namespace cannot be read,
    or the output directory is not empty."""


# ---------------------------------------------------------------------------------------------- reading


def read_argocd(reader: ArgoReader, namespace: str = DEFAULT_NAMESPACE) -> ArgoObjects:
    """List the objects the import converts, with read verbs only."""
    try:
        apps = reader.list(ARGO_GROUP, "Application", namespace=namespace)
        projects = reader.list(ARGO_GROUP, "AppProject", namespace=namespace)
    except TidecdError as exc:
        raise MigrationError(f"cannot read Argo CD's Applications and AppProjects in namespace {namespace!r} "
                           f"(is Argo CD installed there?): {exc}") from None
    try:
        secrets = reader.list("", "Secret", namespace=namespace, label_selector=SECRET_SELECTOR)
    except TidecdError as exc:
        raise MigrationError(f"cannot list the Secrets of namespace {namespace!r}: {exc}") from None
    try:
        config_maps = [c for c in reader.list("", "ConfigMap", namespace=namespace) if argocd_cm.recognised(c)]
    except TidecdError as exc:
        raise MigrationError(f"cannot list the ConfigMaps of namespace {namespace!r}: {exc}") from None
    try:
        settings_secrets = [s for s in reader.list("", "Secret", namespace=namespace,
                                                   label_selector=SETTINGS_SECRET_SELECTOR)
                            if _name(s) == argocd_cm.SEALED_SECRET][:1]
        settings_secrets += [s for s in reader.list("", "Secret", namespace=namespace,
                                                    label_selector=NOTIFICATIONS_SECRET_SELECTOR)
                             if _name(s) == notifications.SECRET][:1]
    except TidecdError as exc:
        raise MigrationError(f"cannot list the Secrets of namespace {namespace!r}: {exc}") from None
    return ArgoObjects(sorted(apps, key=_name), sorted(projects, key=_name), sorted(secrets, key=_name),
                       sorted(config_maps, key=_name), settings_secrets)


# ---------------------------------------------------------------------------------------------- converting


def plan_import(objects: ArgoObjects, cert_pem: bytes, *, namespace: str = DEFAULT_NAMESPACE,
                adopt: bool = False) -> ImportPlan:
    """Convert everything read; each object on its own, so one bad object never stops the others.

    `adopt` annotates every Application `tidecd.io/adopt-from-argocd: <namespace>/<name>`, so tidecd takes
    its objects over in place once Argo CD's automated sync of it is off (see `tidecd.usecases.adoption`)."""
    plan = ImportPlan(namespace=namespace)
    projects: set[str] = {"default"}  # tidecd has Argo CD's `default` project built in
    bad_projects: set[str] = set()
    for obj in objects.projects:
        converted = _guarded(plan, "AppProject", obj, lambda o, f: convert_object(o, "AppProject", f))
        name = _name(obj)
        (projects if converted else bad_projects).add(name)
    for obj in objects.applications:
        def app(o: Manifest, found: list[Finding]) -> Manifest | None:
            doc = _application(o, found, projects, bad_projects)
            if doc is not None and adopt:
                doc["metadata"].setdefault("annotations", {})[ANNOTATION_ADOPT_FROM_ARGOCD] = f"{namespace}/{_name(o)}"
            return doc
        _guarded(plan, "Application", obj, app)
    for obj in objects.secrets:
        _guarded(plan, "Secret", obj, lambda o, f: convert_secret(o, cert_pem, f))
    for obj in objects.config_maps:
        _guarded(plan, "ConfigMap", obj, convert_settings)
    client_secret = _client_secret_key(objects.config_maps)
    for obj in objects.settings_secrets:
        if _name(obj) == notifications.SECRET:
            _guarded(plan, "Secret", obj, lambda o, f: convert_notifications_secret(o, cert_pem, f))
        else:
            _guarded(plan, "Secret", obj, lambda o, f: convert_settings_secret(o, cert_pem, f, client_secret))
    return plan


Converter = Callable[[Manifest, list[Finding]], Manifest | None]


def _guarded(plan: ImportPlan, kind: str, obj: Manifest, convert: Converter) -> bool:
    """Run one conversion, turning any failure into an error finding for that object alone."""
    label = _label(kind, obj)
    found: list[Finding] = []
    try:
        doc = convert(obj, found)
    except TidecdError as exc:  # messages of the secrets module never hold values
        found.append(Finding(label, "", f"not converted: {exc}", error=True))
        doc = None
    except Exception as exc:  # noqa: BLE001 - an unexpected shape must not stop the others or echo values
        found.append(Finding(label, "", f"not converted: unexpected {type(exc).__name__} while reading it",
                             error=True))
        doc = None
    plan.findings.extend(found)
    if doc is None:
        if kind != "ConfigMap" and not any(f.error or f.note.startswith("not imported") for f in found):
            plan.findings.append(Finding(label, "", "not converted", error=True))
        return False
    plan.documents.append(Converted(label, _path_for(kind, doc), doc))
    return True


def _application(obj: Manifest, found: list[Finding], projects: set[str], bad: set[str]) -> Manifest | None:
    doc = convert_object(obj, "Application", found)
    if doc is None:
        return None
    project = str((doc.get("spec") or {}).get("project") or "default")
    label = _label("Application", obj)
    if project in bad:
        found.append(Finding(label, "spec.project", f"not converted: its AppProject {project!r} could not be "
                                                    "converted", error=True))
        return None
    if project not in projects:
        found.append(Finding(label, "spec.project", f"not converted: AppProject {project!r} does not exist in "
                                                    "Argo CD's namespace", error=True))
        return None
    options = ((doc.get("spec") or {}).get("syncPolicy") or {}).get("syncOptions") or []
    for problem in syncoptions.problems(str(o) for o in options):
        where, _, note = problem.partition(": ")
        found.append(Finding(label, where, note + " (kept: tidecd shows it as a condition on the app)"))
    return doc


def convert_object(obj: Manifest, kind: str, found: list[Finding]) -> Manifest | None:
    """An Application or AppProject as tidecd loads it: read-only fields stripped, fields tidecd does not
    implement removed (each one reported), or None (with an error finding) when it cannot be converted."""
    label = _label(kind, obj)
    doc: Manifest = {"apiVersion": ARGO_VERSION, "kind": kind, "metadata": _metadata(obj, label, found),
                     "spec": copy.deepcopy(obj.get("spec") or {})}
    if kind == "AppProject":
        _fold_status_tokens(obj, doc, label, found)
    for _ in range(4):  # removing a field can only uncover problems below it: a few rounds settle it
        ignored: list[tuple[str, str]] = []
        problems = _problems(doc, kind, ignored)
        if not problems:
            for path, reason in ignored:
                found.append(Finding(label, path, f"kept, ignored by tidecd: {reason}"))
            return doc
        fatal = [(path, message) for path, message in problems if not _droppable(path, message)]
        if fatal:
            for path, message in fatal:
                found.append(Finding(label, path, f"not converted: {_why(path, message)}", error=True))
            return None
        for path, message in problems:
            if _remove(doc, path):
                found.append(Finding(label, path, f"removed: {message} (tidecd will not honour it)"))
    found.append(Finding(label, "", "not converted: its fields could not be reconciled with tidecd's",
                         error=True))
    return None


def _fold_status_tokens(obj: Manifest, doc: Manifest, label: str, found: list[Finding]) -> None:
    """Argo CD lists a role's issued tokens in `status.jwtTokensByRole` (newer) as well as in the role's
    `jwtTokens`; git has no status, so each listed token is kept in the role's `jwtTokens`, and tidecd keeps
    accepting it (`usecases.tokens.issued_by_argocd`)."""
    by_role = (obj.get("status") or {}).get("jwtTokensByRole") or {}
    for role in (doc["spec"].get("roles") or []) if isinstance(by_role, dict) else ():
        if not isinstance(role, dict) or not isinstance(by_role.get(role.get("name")), dict):
            continue
        kept = list(role.get("jwtTokens") or [])
        known = {(t.get("id"), t.get("iat")) for t in kept if isinstance(t, dict)}
        added = [t for t in by_role[role["name"]].get("items") or []
                 if isinstance(t, dict) and (t.get("id"), t.get("iat")) not in known]
        if added:
            role["jwtTokens"] = kept + copy.deepcopy(added)
            found.append(Finding(label, f"spec.roles[{role['name']}].jwtTokens",
                                 f"{len(added)} token(s) from status.jwtTokensByRole kept: Argo CD's tokens for the "
                                 "role stay valid while listed"))


def _metadata(obj: Manifest, label: str, found: list[Finding]) -> Manifest:
    meta = obj.get("metadata") or {}
    out = {k: copy.deepcopy(meta[k]) for k in _KEPT_METADATA if meta.get(k)}
    annotations = {k: v for k, v in (out.get("annotations") or {}).items() if k not in _TOOL_ANNOTATIONS}
    if annotations:
        out["annotations"] = annotations
    else:
        out.pop("annotations", None)
    for owner in meta.get("ownerReferences") or []:
        if isinstance(owner, dict) and owner.get("kind") == "ApplicationSet":
            found.append(Finding(label, "metadata.ownerReferences", f"generated by ApplicationSet/{owner.get('name')}: "
                                 "imported as a plain Application (edit the ApplicationSet and it will not follow)"))
    kept = [f for f in meta.get("finalizers") or [] if f in _DELETION_FINALIZERS]
    if kept:  # they decide what the app's deletion deletes, in tidecd as in Argo CD (step.deletion)
        out["finalizers"] = kept
    for finalizer in meta.get("finalizers") or []:
        if finalizer not in kept:
            found.append(Finding(label, "metadata.finalizers", f"{finalizer}: removed (not Argo CD's resources "
                                                               "finalizer, which is all tidecd's app deletion reads)"))
    return out


class _Recorded(Errors):
    """tidecd's strict reader, recording (path, message) instead of formatted lines."""

    def __init__(self, label: str) -> None:
        super().__init__("", label, [])
        self.found: list[tuple[str, str]] = []
        self.ignored_fields: list[tuple[str, str]] = []

    def add(self, path: str, message: str) -> None:
        self.found.append((path, message))
        super().add(path, message)

    def ignored(self, path: str, reason: str) -> None:
        self.ignored_fields.append((path, reason))


def _problems(doc: Manifest, kind: str, ignored: list[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    errs = _Recorded(f"{kind}/{(doc.get('metadata') or {}).get('name')}")
    PARSERS[(ARGO_VERSION, kind)](Node(doc, "", errs))
    if ignored is not None:
        ignored.extend(errs.ignored_fields)
    return errs.found


def _droppable(path: str, message: str) -> bool:
    last = _tokens(path)[-1:] if path else []
    if last and last[0] in _CHANGES_WHAT_IS_DEPLOYED:
        return False
    return bool(path) and any(marker in message for marker in _NOT_HONOURED)


def _why(path: str, message: str) -> str:
    last = _tokens(path)[-1:] if path else []
    reason = _CHANGES_WHAT_IS_DEPLOYED.get(str(last[0])) if last else None
    return reason or message


_TOKEN = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _tokens(path: str) -> list[str | int]:
    return [int(index) if index else name for name, index in _TOKEN.findall(path)]


def _remove(doc: Manifest, path: str) -> bool:
    """Delete the field at a dotted path (`spec.sources[1].plugin`); False when it is not there."""
    *parents, last = _tokens(path)
    node: Any = doc
    for token in parents:
        try:
            node = node[token]
        except (KeyError, IndexError, TypeError):
            return False
    if isinstance(node, dict) and last in node:
        del node[last]
        return True
    return False


# ---------------------------------------------------------------------------------------------- settings


def convert_settings(obj: Manifest, found: list[Finding]) -> Manifest | None:
    """`argocd-cm` with the keys tidecd honours; every other key, and every other settings ConfigMap, is
    reported (None: nothing to write)."""
    name = _name(obj)
    label = f"ConfigMap/{name}"
    data = obj.get("data") or {}
    if name == rbac.RBAC_CM:  # read as it is: policy.csv and overlays, policy.default, matchMode, scopes
        kept_rbac = {str(k): v for k, v in data.items() if rbac.honoured(str(k))}
        found.extend(Finding(label, f"data.{k}", "not imported: not a key of argocd-rbac-cm")
                     for k in sorted(str(k) for k in data if not rbac.honoured(str(k))))
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": kept_rbac}
    if name == notifications.CONFIG_MAP:  # read as it is: triggers, templates, services, subscriptions
        kept = {str(k): v for k, v in data.items() if not _unbuilt_service(str(k))}
        found.extend(Finding(label, f"data.{k}", f"not imported: service type {k.split('.')[1]!r} is not implemented "
                                                 f"by tidecd") for k in sorted(set(map(str, data)) - set(kept)))
        problems: list[str] = []
        notifications.read(kept, label, problems)
        found.extend(Finding(label, "", problem.removeprefix(f"{label}: {label}: ")) for problem in problems)
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": kept} if kept else None
    if name != argocd_cm.ARGOCD_CM:
        found.append(Finding(label, "", f"{len(data)} setting(s) not imported: {argocd_cm.CONFIG_MAPS[name]}"))
        return None
    kept = {str(k): v for k, v in data.items() if argocd_cm.honoured(str(k))}
    for key in sorted(str(k) for k in data if not argocd_cm.honoured(str(k))):
        found.append(Finding(label, f"data.{key}", f"not imported: {_setting_reason(key)}"))
    if not kept:
        return None
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": kept}


def _unbuilt_service(key: str) -> bool:
    """`service.TYPE[.NAME]` of a notification service tidecd does not deliver to."""
    parts = key.split(".")
    return parts[0] == "service" and len(parts) > 1 and parts[1] in notifications.OTHER_SERVICE_TYPES


def _setting_reason(key: str) -> str:
    for prefix, reason in argocd_cm.NOT_HONOURED:
        if key == prefix or (prefix.endswith(".") and key.startswith(prefix)):
            return reason
    return "not a setting tidecd knows"


# ---------------------------------------------------------------------------------------------- secrets


def convert_secret(obj: Manifest, cert_pem: bytes, found: list[Finding]) -> Manifest | None:
    """A repository, repo-creds or cluster Secret, sealed (strict scope, its own namespace and name)."""
    meta = obj.get("metadata") or {}
    label = _label("Secret", obj)
    secret_type = (meta.get("labels") or {}).get(LABEL_SECRET_TYPE)
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in _TOOL_ANNOTATIONS}
    clean_meta: Manifest = {k: copy.deepcopy(meta[k]) for k in ("name", "namespace", "labels") if meta.get(k)}
    if annotations:
        clean_meta["annotations"] = annotations
    secret: Manifest = {"apiVersion": "v1", "kind": "Secret", "metadata": clean_meta,
                        "type": obj.get("type") or "Opaque", "data": dict(obj.get("data") or {})}
    if obj.get("stringData"):
        secret["stringData"] = dict(obj["stringData"])
    fields = text_fields(secret, f"Secret {label.removeprefix('Secret/')}")
    if secret_type == SECRET_TYPE_CLUSTER:
        if not _cluster_findings(fields, label, found):
            return None
    else:
        for name in sorted(set(fields) - _REPO_FIELDS):
            found.append(Finding(label, f"data.{name}", "kept (sealed), not honoured by tidecd"))
        if not fields.get("url"):
            found.append(Finding(label, "data.url", "not converted: a repository Secret needs a url", error=True))
            return None
    return seal_secret(secret, cert_pem, Scope.STRICT)


def _client_secret_key(config_maps: list[Manifest]) -> str:
    """The argocd-secret key argocd-cm's `oidc.config` names as `clientSecret: $KEY` ("" when none)."""
    for obj in config_maps:
        if _name(obj) == argocd_cm.ARGOCD_CM:
            text = (obj.get("data") or {}).get("oidc.config")
            try:
                doc = yaml.safe_load(text) if isinstance(text, str) else None
            except yaml.YAMLError:
                return ""
            secret = doc.get("clientSecret") if isinstance(doc, dict) else None
            if isinstance(secret, str) and re.fullmatch(r"\$[A-Za-z0-9._-]+", secret.strip()):
                return secret.strip()[1:]
    return ""


def convert_settings_secret(obj: Manifest, cert_pem: bytes, found: list[Finding],
                            client_secret: str) -> Manifest | None:
    """argocd-secret with the keys tidecd's logins read, sealed (strict scope); the others are named only.

    None (a note, not an error) when it holds none of those keys: Argo CD's install ships argocd-secret
    empty and only argocd-server fills it, so a running Argo CD without it, or one whose secret holds only
    webhook secrets, is normal and leaves nothing to seal."""
    label = _label("Secret", obj)
    meta = obj.get("metadata") or {}
    secret: Manifest = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "data": dict(obj.get("data") or {}),
                        "metadata": {"name": argocd_cm.SEALED_SECRET,
                                     "namespace": meta.get("namespace") or DEFAULT_NAMESPACE}}
    fields = text_fields(secret, f"Secret {label.removeprefix('Secret/')}")
    wanted = {k for k in fields if k in ("admin.password", "server.secretkey", client_secret)
              or re.fullmatch(r"accounts\.[A-Za-z0-9._-]+\.(password|tokens)", k)}
    for name in sorted(set(fields) - wanted):
        found.append(Finding(label, f"data.{name}", "not imported: tidecd's logins do not read it (webhook "
                                                    "secrets are TIDECD_WEBHOOK_SECRET)"))
    if not wanted:
        found.append(Finding(label, "", "not imported: it holds none of the keys tidecd's logins read "
                                        "(admin.password, accounts.NAME.password|tokens, server.secretkey, the "
                                        "oidc.config clientSecret key); nothing to seal, settings/argocd-secret.yaml "
                                        "not written"))
        return None
    secret["data"] = {k: v for k, v in secret["data"].items() if k in wanted}
    secret["stringData"] = {k: v for k, v in (obj.get("stringData") or {}).items() if k in wanted}
    if not secret["stringData"]:
        del secret["stringData"]
    return seal_secret(secret, cert_pem, Scope.STRICT)


def convert_notifications_secret(obj: Manifest, cert_pem: bytes, found: list[Finding]) -> Manifest | None:
    """argocd-notifications-secret, every key sealed (strict scope): the services' `$key` values."""
    meta = obj.get("metadata") or {}
    secret: Manifest = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "data": dict(obj.get("data") or {}),
                        "metadata": {"name": notifications.SECRET,
                                     "namespace": meta.get("namespace") or DEFAULT_NAMESPACE}}
    if obj.get("stringData"):
        secret["stringData"] = dict(obj["stringData"])
    if not secret["data"] and not secret.get("stringData"):
        found.append(Finding(_label("Secret", obj), "", "not imported: it is empty; nothing to seal"))
        return None
    return seal_secret(secret, cert_pem, Scope.STRICT)


def _cluster_findings(fields: dict[str, str], label: str, found: list[Finding]) -> bool:
    """Report what tidecd will not honour of a cluster Secret; False when it is not to be converted."""
    server = fields.get("server", "").rstrip("/")
    if not server:
        found.append(Finding(label, "data.server", "not converted: a cluster Secret needs a server", error=True))
        return False
    if server == IN_CLUSTER_SERVER:
        found.append(Finding(label, "data.server", f"not imported: {IN_CLUSTER_SERVER} is Argo CD's own cluster; "
                                                   "tidecd reaches it through KUBECONFIG (destination name "
                                                   "in-cluster)"))
        return False
    for name in sorted(set(fields) - _CLUSTER_FIELDS):
        found.append(Finding(label, f"data.{name}", "kept (sealed), not honoured by tidecd"))
    try:
        config = json.loads(fields.get("config") or "{}")
    except ValueError:
        found.append(Finding(label, "data.config", "not converted: not valid JSON", error=True))
        return False
    if not isinstance(config, dict):
        found.append(Finding(label, "data.config", "not converted: not a JSON object", error=True))
        return False
    for name in sorted(set(config) - _CLUSTER_CONFIG_FIELDS):
        found.append(Finding(label, f"data.config.{name}", "kept (sealed), not honoured by tidecd"))
    tls = config.get("tlsClientConfig") or {}
    if isinstance(tls, dict):
        for name in sorted(set(tls) - _CLUSTER_TLS_FIELDS):
            found.append(Finding(label, f"data.config.tlsClientConfig.{name}", "kept (sealed), not honoured by "
                                                                               "tidecd"))
    if not config.get("bearerToken") and not config.get("execProviderConfig") and not (
            isinstance(tls, dict) and tls.get("certData")):
        found.append(Finding(label, "data.config", "no bearerToken, execProviderConfig or client certificate: "
                                                   "tidecd will reach this cluster without credentials"))
    return True


# ---------------------------------------------------------------------------------------------- writing


def _name(obj: Manifest) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _label(kind: str, obj: Manifest) -> str:
    meta = obj.get("metadata") or {}
    name = _name(obj) or "(no name)"
    if kind == "Secret":
        return f"Secret/{meta.get('namespace') or DEFAULT_NAMESPACE}/{name}"
    return f"{kind}/{name}"


def _path_for(kind: str, doc: Manifest) -> str:
    meta = doc.get("metadata") or {}
    if kind == "Application":
        return f"applications/{meta['name']}.yaml"
    if kind == "AppProject":
        return f"projects/{meta['name']}.yaml"
    if kind == "ConfigMap" or meta.get("name") in (argocd_cm.SEALED_SECRET, notifications.SECRET):
        return f"settings/{meta['name']}.yaml"
    template = (doc.get("spec") or {}).get("template") or {}
    secret_type = ((template.get("metadata") or {}).get("labels") or {}).get(LABEL_SECRET_TYPE, "secret")
    return f"secrets/{secret_type}-{meta['name']}.yaml"


def report_text(plan: ImportPlan, *, problems: Iterable[str] = ()) -> str:
    """The report: what was written, what was not converted, and what tidecd will not honour."""
    counts = plan.counts()
    lines = [f"# Import from Argo CD (namespace {plan.namespace})", "",
             "Written: " + (", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "nothing"), ""]
    errors = plan.errors
    lines.append(f"## Not converted ({len(errors)})")
    lines.append("")
    lines.extend(f"- {f}" for f in errors)
    if not errors:
        lines.append("- none")
    loaded = list(problems)
    if loaded:
        lines += ["", f"## Problems tidecd reports when loading the output ({len(loaded)})", ""]
        lines.extend(f"- {p}" for p in loaded)
    notes = [f for f in plan.findings if not f.error]
    lines += ["", f"## Not honoured by tidecd ({len(notes)})", ""]
    lines.extend(f"- {f}" for f in notes)
    if not notes:
        lines.append("- none")
    lines += ["", "## Not read", "",
              "- argocd-secret's webhook secrets and account tokens: set TIDECD_WEBHOOK_SECRET and "
              "TIDECD_API_TOKEN; its password hashes, server.secretkey and OIDC client secret are sealed into "
              "settings/argocd-secret.yaml (docs/dashboard.md, Single sign-on and local accounts)",
              ""]
    return "\n".join(lines)


def write_import(plan: ImportPlan, out: Path, *, force: bool = False) -> Path:
    """Write the documents and the report under `out`; returns the report's path.

    `out` must be empty or absent unless `force` (then files of the same names are overwritten).
    """
    if out.exists() and not out.is_dir():
        raise MigrationError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise MigrationError(f"{out} is not empty; pass --force to write into it")
    for converted in plan.documents:
        path = out / converted.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(converted.document, sort_keys=False, default_flow_style=False))
    report = out / REPORT_FILE
    out.mkdir(parents=True, exist_ok=True)
    report.write_text(report_text(plan, problems=_load_problems(out)))
    return report


def _load_problems(out: Path) -> list[str]:
    """Load the output as tidecd will (the isolating loader): anything it reports goes into the report."""

    config = load_config(out, strict=False)
    return [*config.problems, *(f"{name}: {text}" for name, text in sorted(config.invalid.items()))]
