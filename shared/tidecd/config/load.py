"""Loading a config source: Argo CD `Application` and `AppProject` (argoproj.io/v1alpha1) and credential
Secrets, from a directory or a git `REPO_URL#REF:PATH`.

Three modules, each importing only the ones before it: `config.model` (the dataclasses every later stage
reads), `config.schema` (the strict field-by-field reader of one document) and this loader. `load_config`
turns a config source directory into the models; every problem is reported at once, each line naming the
file, the object (`Application/guestbook`) and the dotted field (`spec.source.repoURL`). Error messages never
echo values of Secrets, YAML source lines or repository credentials. Every public name of the three is
importable from here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import structlog
import yaml

from tidecd.base import limits
from tidecd.base.constants import ARGO_VERSION, LABEL_SECRET_TYPE
from tidecd.base.errors import ConfigError, LimitExceeded
from tidecd.base.paths import check_tree, inside
from tidecd.config import argocd_cm
from tidecd.config.appset.model import ApplicationSet, parse_application_set
from tidecd.config.argocd_settings import ArgoSettings
from tidecd.config.model import (
    DEFAULT_PROJECT,
    DNS_NAME,
    SECRET_TYPES,
    Application,
    ApplicationSource,
    AppProject,
    Backoff,
    Config,
    ConfigItem,
    Destination,
    DirectorySpec,
    GroupKind,
    HelmParameter,
    HelmSpec,
    IgnoreDifference,
    JsonnetSpec,
    JsonnetVar,
    KustomizeSpec,
    ProjectDestination,
    Retry,
    SyncPolicy,
    TeamSource,
)
from tidecd.config.schema import PARSERS, Errors, Node, parse_duration, type_name

__all__ = [
    "CONFIG_SUFFIXES", "DEFAULT_PROJECT", "DNS_NAME", "SECRET_TYPES", "Application", "ApplicationSource",
    "AppProject", "Backoff", "Config", "ConfigItem", "ConfigSourceRef", "Destination", "DirectorySpec",
    "GroupKind", "HelmParameter", "HelmSpec", "IgnoreDifference", "JsonnetSpec", "JsonnetVar", "KustomizeSpec",
    "ProjectDestination", "Retry", "TEAM_SOURCES", "TeamSource",
    "SyncPolicy", "config_files", "load_config", "load_config_source", "normalize_repo_url",
    "parse_config_source", "parse_duration", "parse_object", "redact_repo_url", "repo_key",
]


log = structlog.get_logger("tidecd.config.load")

# ---------------------------------------------------------------------------------------------------
# Loading a directory

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


def load_config(directory: Path, *, display: str | None = None, strict: bool = True, team: str = "") -> Config:
    """Read every `.yaml/.yml/.json` file under `directory` (recursively, sorted, dot-files skipped).

    `display` replaces the directory in file names of errors (e.g. `REPO#REF:PATH`). Raises ConfigError
    listing every problem found, one per line. With `strict=False` (what the functions use) a bad file
    sets aside only what it defines, so everything else keeps working: an invalid Application, or one
    defined twice, or one in a file that cannot be parsed (its name is still read from the text where it
    can be), goes to `Config.invalid`; an invalid or duplicated AppProject sets aside the apps that use
    it; anything else (an unknown kind, a bad Secret, a symlink leaving the directory) is listed in
    `Config.problems`.

    `team` names a team's config source (`tidecd.config.teams`): it may define Applications only (anything
    else is a problem naming its file), and their projects are checked against the main config source's
    AppProjects by `tidecd.config.teams.join`, not here.
    """
    if not directory.is_dir():
        raise ConfigError(f"config source {display or directory}: not a directory")
    if strict:
        check_tree(directory)
    prefix = str(directory) if display is None else display
    if prefix and not prefix.endswith(("/", ":")):
        prefix += "/"
    reading = _Reading(strict, team)
    for path in config_files(directory):
        _read_file(reading, directory, path, prefix + path.relative_to(directory).as_posix())
    errors = reading.errors
    settings = _argo_settings(reading.settings_objects, errors)
    sources = _team_sources(reading.team_sources, errors)
    if strict:
        config = _assemble(reading.found, errors)
        if errors:
            raise ConfigError(_summary(errors))
        config.argo_settings, config.team_sources = settings, sources
        return config
    config = _assemble_isolated(reading.found, reading.invalid, reading.bad_projects, check_projects=not team)
    config.problems = errors
    config.argo_settings = settings
    config.team_sources = sources
    _add_appsets(config, reading.found, reading.bad_appsets)
    return config


@dataclass
class _Reading:
    """What one load gathers from its files before the config is assembled. When not strict, the names of
    what a bad file or document defines are set aside with its problems instead of failing the load."""

    strict: bool
    team: str = ""  # a team's config source: Applications only
    errors: list[str] = field(default_factory=list)
    found: list[ConfigItem] = field(default_factory=list)
    settings_objects: list[tuple[Any, str]] = field(default_factory=list)  # argocd-cm and friends, read last
    invalid: dict[str, list[str]] = field(default_factory=dict)  # Applications set aside
    bad_projects: dict[str, list[str]] = field(default_factory=dict)
    bad_appsets: dict[str, list[str]] = field(default_factory=dict)
    team_sources: list[tuple[Any, str]] = field(default_factory=list)  # ConfigMap/tidecd-config-sources

    def set_aside(self, into: dict[str, list[str]], names: list[str], since: int) -> None:
        for name in names:
            into.setdefault(name, []).extend(self.errors[since:])


def _read_file(reading: _Reading, directory: Path, path: Path, origin: str) -> None:
    if not reading.strict and (escape := _escaping_symlink(directory, path)):
        reading.errors.append(f"{origin}: {escape}")
        return
    before = len(reading.errors)
    docs = _read_documents(path, origin, reading.errors)
    if not reading.strict and len(reading.errors) > before:
        _set_aside_unparsed(reading, path, before)
    for index, doc in docs:
        if reading.team and isinstance(doc, dict) and (doc.get("apiVersion"), doc.get("kind")) != (ARGO_VERSION,
                                                                                              "Application"):
            reading.errors.append(f"{origin}: document {index} ({doc.get('kind')}): not read: team config source "
                                  f"{reading.team!r} may define Applications only; AppProjects, ApplicationSets, "
                                  "clusters, repository Secrets and argocd-cm belong to the main config source")
        elif not reading.team and _is_team_sources(doc):
            reading.team_sources.append((doc, origin))
        elif argocd_cm.recognised(doc):
            reading.settings_objects.append((doc, origin))
        else:
            _read_document(reading, doc, origin, index)


def _set_aside_unparsed(reading: _Reading, path: Path, before: int) -> None:
    """A file that could not be parsed: set aside what it names (read from its raw text), and drop its
    problems from the general list once they are recorded against those names."""
    app_names, project_names = _names_in_text(path, "Application"), _names_in_text(path, "AppProject")
    appset_names = _names_in_text(path, "ApplicationSet")
    reading.set_aside(reading.bad_appsets, appset_names, before)
    if appset_names and not app_names and not project_names:
        del reading.errors[before:]
    reading.set_aside(reading.invalid, app_names, before)
    reading.set_aside(reading.bad_projects, project_names, before)
    if app_names or project_names:
        del reading.errors[before:]


def _read_document(reading: _Reading, doc: Any, origin: str, index: int) -> None:
    before = len(reading.errors)
    item = _parse_document(doc, origin, index, reading.errors)
    if item is not None:
        reading.found.append(item)
        return
    if reading.strict:
        return
    for kind, into in (("Application", reading.invalid), ("AppProject", reading.bad_projects),
                       ("ApplicationSet", reading.bad_appsets)):
        if name := _object_name(doc, kind):
            reading.set_aside(into, [name], before)
            del reading.errors[before:]
            return


def _argo_settings(objects: list[tuple[Any, str]], errors: list[str]) -> ArgoSettings:
    """argocd-cm and the other Argo CD settings objects; what is not honoured is logged here, once per load."""
    settings = argocd_cm.read(objects, errors)
    if settings.notices:  # one line per load, however many settings (the api lists them one by one)
        log.info("Argo CD settings not honoured by tidecd", count=len(settings.notices),
                 settings=[n.rpartition(": not ")[0].rpartition(": ")[2] or n for n in settings.notices])
    return settings


def _add_appsets(config: Config, found: list[Any], bad: dict[str, list[str]]) -> None:
    """ApplicationSets into `config.appsets`; an invalid or duplicated one goes to `config.invalid_appsets`
    (what it generated before is then set aside, not removed: see `tidecd.generated.records`)."""
    defined: dict[str, list[ApplicationSet]] = {}
    for item in found:
        if isinstance(item, ApplicationSet):
            defined.setdefault(item.name, []).append(item)
    for name, sets in defined.items():
        if len(sets) > 1:
            origins = ", ".join(s.origin for s in sets)
            bad.setdefault(name, []).append(f"ApplicationSet/{name}: metadata.name: defined more than once ({origins})")
        elif name not in bad:
            config.appsets[name] = sets[0]
    config.invalid_appsets = {name: _summary(problems) for name, problems in bad.items()}
    config.problems.extend(f"ApplicationSet/{name} set aside (the apps it generated are kept as they were): "
                           f"{message}" for name, message in sorted(config.invalid_appsets.items()))


def _escaping_symlink(directory: Path, path: Path) -> str:
    """Why a config file is not read when it is a symlink leaving the directory, else ""."""
    if not path.is_symlink():
        return ""
    root = directory.resolve()
    target = path.resolve()
    return "" if root in target.parents else "symlink pointing outside the config directory: not read"


_KIND_LINE = re.compile(r"^kind:\s*['\"]?(\w+)['\"]?\s*$", re.MULTILINE)
_NAME_LINE = re.compile(r"^\s+name:\s*['\"]?([a-z0-9][-a-z0-9.]*)['\"]?\s*$", re.MULTILINE)
_DOC_START = re.compile(r"^---", re.MULTILINE)
_JSON_KIND = re.compile(r'"kind"\s*:\s*"(\w+)"')
_JSON_NAME = re.compile(r'"metadata"\s*:\s*\{[^{}]*?"name"\s*:\s*"([a-z0-9][-a-z0-9.]*)"')


def _names_in_text(path: Path, kind: str) -> list[str]:
    """Names of `kind` objects in a file that could not be parsed, read from its raw lines (best effort),
    so that what the broken file defines is set aside by name rather than silently forgotten."""
    try:
        text = path.read_bytes()[: limits.current().file_bytes].decode("utf-8", "replace")
    except OSError:
        return []
    if path.suffix == ".json":
        kind_json = _JSON_KIND.search(text)
        name_json = _JSON_NAME.search(text)
        found = kind_json is not None and kind_json[1] == kind and name_json is not None
        return [name_json[1]] if found and name_json and DNS_NAME.fullmatch(name_json[1]) else []
    names = []
    for chunk in _DOC_START.split(text):
        kinds = _KIND_LINE.findall(chunk)
        if kinds[:1] == [kind] and (match := _NAME_LINE.search(chunk)) and DNS_NAME.fullmatch(match[1]):
            names.append(match[1])
    return names


def _object_name(doc: Any, kind: str) -> str:
    """The name of an Argo CD `kind` document whose errors can be set aside for that object alone."""
    if not isinstance(doc, dict) or (doc.get("apiVersion"), doc.get("kind")) != (ARGO_VERSION, kind):
        return ""
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) and DNS_NAME.fullmatch(name) else ""


def _assemble_isolated(found: list[ConfigItem], invalid: dict[str, list[str]],
                       bad_projects: dict[str, list[str]], *, check_projects: bool = True) -> Config:
    """Cross-object rules, setting aside only what breaks them: a name defined twice sets aside every
    definition; an app whose project is invalid, duplicated or missing is set aside with the reason."""
    apps: dict[str, list[Application]] = {}
    projects: dict[str, list[AppProject]] = {}
    secrets: list[dict[str, Any]] = []
    for item in found:
        if isinstance(item, Application):
            apps.setdefault(item.name, []).append(item)
        elif isinstance(item, AppProject):
            projects.setdefault(item.name, []).append(item)
        elif isinstance(item, dict):
            secrets.append(item)
    good_projects: dict[str, AppProject] = {}
    for name, defined in projects.items():
        if len(defined) > 1:
            origins = ", ".join(p.origin for p in defined)
            bad_projects.setdefault(name, []).append(f"AppProject/{name}: metadata.name: defined more than once "
                                                     f"({origins})")
        elif name not in bad_projects:
            good_projects[name] = defined[0]
    good_projects.setdefault("default", DEFAULT_PROJECT)
    good_apps: dict[str, Application] = {}
    for name, defined_apps in apps.items():
        if len(defined_apps) > 1 or name in invalid:
            origins = ", ".join(a.origin for a in defined_apps)
            also = ", and an invalid one" if name in invalid else ""
            invalid.setdefault(name, []).append(f"Application/{name}: metadata.name: defined more than once "
                                                f"({origins}{also})")
            continue
        app = defined_apps[0]
        if not check_projects:
            good_apps[name] = app
        elif app.project in bad_projects:
            invalid[name] = [f"{app.origin}: Application/{name}: spec.project: project {app.project!r} is "
                             "invalid, so this app is set aside: " + "; ".join(bad_projects[app.project])]
        elif app.project not in good_projects:
            invalid[name] = [f"{app.origin}: Application/{name}: spec.project: project {app.project!r} "
                             "is not defined in the config source"]
        else:
            good_apps[name] = app
    config = Config(applications=good_apps, projects=good_projects, secrets=secrets)
    config.invalid = {name: _summary(problems) for name, problems in invalid.items()}
    return config


def config_files(directory: Path) -> list[Path]:
    """Config files under `directory`, sorted by relative path; hidden files and directories skipped."""
    files: list[Path] = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        files.extend(Path(root) / n for n in names if n.endswith(CONFIG_SUFFIXES) and not n.startswith("."))
    return sorted(files, key=lambda p: p.relative_to(directory).as_posix())


def _summary(errors: list[str]) -> str:
    if len(errors) == 1:
        return errors[0]
    return f"{len(errors)} configuration errors:\n" + "\n".join(f"  {e}" for e in errors)




class _StrictLoader(limits.SafeLoader):  # type: ignore[misc]
    """Safe loader refusing duplicate mapping keys, which YAML forbids but PyYAML silently accepts."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        self.flatten_mapping(node)
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool):
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}",
                                                            key_node.start_mark)
                seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep)
        return mapping


def _read_documents(path: Path, origin: str, errors: list[str]) -> list[tuple[int, Any]]:
    """The non-empty documents of one file; syntax errors name the line, never the line's text."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        errors.append(f"{origin}: not UTF-8 text")
        return []
    except OSError as exc:
        errors.append(f"{origin}: cannot read: {exc.strerror}")
        return []
    if path.suffix == ".json":
        try:
            doc = json.loads(text)
            limits.check_depth(doc, origin)
            return [(1, doc)]
        except json.JSONDecodeError as exc:
            errors.append(f"{origin}:{exc.lineno}: JSON syntax error: {exc.msg}")
            return []
        except RecursionError:
            errors.append(str(limits.exceeded(f"{origin}: nesting depth", "depth", limits.current().depth)))
            return []
        except LimitExceeded as exc:
            errors.append(str(exc))
            return []
    try:
        limits.check_yaml(text, origin)
        docs = list(yaml.load_all(text, Loader=_StrictLoader))  # noqa: S506 - a SafeLoader subclass
    except LimitExceeded as exc:
        errors.append(str(exc))
        return []
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark is not None else 0
        errors.append(f"{origin}:{line}: YAML syntax error: {exc.problem}")
        return []
    except yaml.YAMLError as exc:
        errors.append(f"{origin}: YAML error ({type(exc).__name__})")
        return []
    return [(i, doc) for i, doc in enumerate(docs, 1) if doc is not None]


# ApplicationSets are read by their own package (tidecd.config.appset) next to the kinds of config_schema
_PARSERS: dict[tuple[str, str], Callable[[Node], Any]] = {**PARSERS,
                                                          (ARGO_VERSION, "ApplicationSet"): parse_application_set}


def _parse_document(doc: Any, origin: str, index: int, errors: list[str]) -> ConfigItem | None:
    """Dispatch one document on (apiVersion, kind)."""
    if not isinstance(doc, dict):
        errors.append(f"{origin}: document {index}: expected a Kubernetes object, got {type_name(doc)}")
        return None
    api, kind = doc.get("apiVersion"), doc.get("kind")
    parser = _PARSERS.get((api, kind)) if isinstance(api, str) and isinstance(kind, str) else None
    if parser is None:
        errors.append(
            f"{origin}: document {index}: unsupported object (apiVersion {api!r}, kind {kind!r}); expected "
            f"{ARGO_VERSION} Application, AppProject or ApplicationSet, or a v1 Secret or SealedSecret labelled "
            f"{LABEL_SECRET_TYPE}")
        return None
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    label = f"{kind}/{name}" if isinstance(name, str) and name else f"{kind} (document {index})"
    errs = Errors(origin, label, errors, kind=str(kind))
    before = len(errors)
    item = parser(Node(doc, "", errs))
    return item if len(errors) == before else None


def parse_object(doc: Any, origin: str) -> tuple[ConfigItem | None, list[str]]:
    """One object as the config source would read it from `origin` (the object and its problems, each naming
    the field): what a manifest written from the dashboard or the api is checked with before it is committed."""
    errors: list[str] = []
    item = _parse_document(doc, origin, 1, errors)
    return item, errors


def _assemble(found: list[ConfigItem], errors: list[str]) -> Config:
    """Cross-object rules (strict loading): unique names, and every Application's project defined."""
    apps: dict[str, Application] = {}
    projects: dict[str, AppProject] = {}
    secrets: list[dict[str, Any]] = []
    appsets: dict[str, ApplicationSet] = {}
    for item in found:
        if isinstance(item, Application):
            _add_unique(apps, "Application", item.name, item, item.origin, errors)
        elif isinstance(item, AppProject):
            _add_unique(projects, "AppProject", item.name, item, item.origin, errors)
        elif isinstance(item, ApplicationSet):
            _add_unique(appsets, "ApplicationSet", item.name, item, item.origin, errors)
        else:
            secrets.append(item)
    projects.setdefault("default", DEFAULT_PROJECT)
    for app in list(apps.values()):
        if app.project not in projects:
            errors.append(f"{app.origin}: Application/{app.name}: spec.project: project {app.project!r} "
                          "is not defined in the config source")
    return Config(applications=apps, projects=projects, secrets=secrets, appsets=dict(appsets))


def _add_unique(into: dict[str, Any], kind: str, name: str, item: Any, origin: str,
                errors: list[str]) -> None:
    if name in into:
        errors.append(f"{origin}: {kind}/{name}: metadata.name: duplicate name, "
                      f"also defined in {into[name].origin}")
    else:
        into[name] = item


# ---------------------------------------------------------------------------------------------------
# Repository URLs and config sources

_SCP = re.compile(r"(?:[^@/:]+@)?(?P<host>[^/:]+):(?P<path>(?!//).*)")
_DEFAULT_PORTS = {"https": "443", "http": "80", "ssh": "22", "git": "9418"}


def normalize_repo_url(url: str) -> str:
    """One key for every spelling of a repository: `host/owner/repo`, lowercase.

    https, http, `ssh://git@host/owner/repo` and `git@host:owner/repo` agree; credentials, default
    ports, `.git` and trailing slashes are dropped. Lowercase like Argo CD's NormalizeGitURL, since
    GitHub and GitLab paths are case-insensitive and webhooks send the canonical casing. Works on
    sourceRepos globs too. Anything else (a local path, `*`) is returned trimmed and lowercased.
    """
    text = url.strip()
    if "://" in text:
        scheme, _, rest = text.partition("://")
        netloc, _, path = rest.partition("/")
        host_port = netloc.rpartition("@")[2].lower()
        host, _, port = host_port.partition(":") if not host_port.startswith("[") else (host_port, "", "")
        if port and port != _DEFAULT_PORTS.get(scheme.lower()):
            host = f"{host}:{port}"
        path = path.split("?", 1)[0].split("#", 1)[0]
    elif match := _SCP.fullmatch(text):
        host, path = match["host"].lower(), match["path"]
    else:
        return (text.rstrip("/").removesuffix(".git").rstrip("/") or text).lower()
    path = path.strip("/").removesuffix(".git").rstrip("/")
    return (f"{host}/{path}" if path else host).lower()


def repo_key(url: str) -> str:
    """A repository's name in object-store keys: readable, path-safe, and unique by a short hash."""
    canonical = normalize_repo_url(url)
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", canonical).strip("_.")[:80]
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:10]
    return f"{readable}-{digest}" if readable else digest


def redact_repo_url(url: str) -> str:
    """The URL without any `user:password@` part, for logs and error messages."""
    if "://" not in url:
        return url
    scheme, _, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    return f"{scheme}://{netloc.rpartition('@')[2]}{slash}{path}"


@dataclass(frozen=True)
class ConfigSourceRef:
    """A config source in git: `REPO_URL#REF:PATH` (REF defaults to HEAD, PATH to the repository root)."""

    repo_url: str
    ref: str = "HEAD"
    path: str = "."

    def __str__(self) -> str:
        return f"{redact_repo_url(self.repo_url)}#{self.ref}:{'' if self.path == '.' else self.path}"


def _is_repo_url(text: str) -> bool:
    return "://" in text or bool(re.match(r"[^@/:]+@[^/:]+:", text))


def parse_config_source(spec: str, what: str = "TIDECD_CONFIG") -> Path | ConfigSourceRef:
    """`TIDECD_CONFIG` (or a team's config source, `what`): a directory, or `REPO_URL#REF:PATH` (a git URL,
    with `#REF:PATH` optional)."""
    text = spec.strip()
    if not text:
        raise ConfigError(f"{what} is empty; set a directory or REPO_URL#REF:PATH")
    url, _, rest = text.partition("#")
    if not _is_repo_url(url):
        return Path(text)
    ref, _, path = rest.partition(":")
    path = path.strip("/") or "."
    if PurePosixPath(path).is_absolute() or ".." in PurePosixPath(path).parts:
        raise ConfigError(f"{what}: path {path!r} must be relative to the repository")
    return ConfigSourceRef(repo_url=url, ref=ref or "HEAD", path=path)


def load_config_source(spec: str, fetch: Callable[[ConfigSourceRef], Path] | None = None,
                       ) -> Config | ConfigSourceRef:
    """Load a directory config source; a git one is returned as a ref unless `fetch` checks it out.

    `fetch(ref)` returns the checkout's root directory; `ref.path` is joined to it safely.
    """
    source = parse_config_source(spec)
    if isinstance(source, Path):
        if not source.is_dir():
            raise ConfigError(f"TIDECD_CONFIG {spec!r}: no such directory (expected a directory or "
                              "REPO_URL#REF:PATH)")
        return load_config(source)
    if fetch is None:
        return source
    root = fetch(source)
    return load_config(inside(root, source.path, what="config path"), display=str(source))


# ---------------------------------------------------------------------------------------------------
# The teams' config sources (`tidecd.config.teams` bounds what they define)

TEAM_SOURCES = "tidecd-config-sources"  # the main config source's ConfigMap naming the teams' sources


def _is_team_sources(doc: Any) -> bool:
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    return (isinstance(meta, dict) and meta.get("name") == TEAM_SOURCES
            and (doc.get("apiVersion"), doc.get("kind")) == ("v1", "ConfigMap"))


def _team_sources(objects: list[tuple[Any, str]], errors: list[str]) -> tuple[TeamSource, ...]:
    """`ConfigMap/tidecd-config-sources`: `data` maps a team's name (a DNS label: the name AppProjects'
    `spec.sourceNamespaces` list) to its config source, a directory or REPO_URL#REF:PATH."""
    found: list[TeamSource] = []
    for number, (doc, origin) in enumerate(objects):
        label = f"{origin}: ConfigMap/{TEAM_SOURCES}"
        if number:
            errors.append(f"{label}: defined more than once (also in {objects[0][1]}); only the first is read")
            continue
        data = doc.get("data") or {}
        if not isinstance(data, dict):
            errors.append(f"{label}: data: expected a mapping, got {type_name(data)}")
            continue
        for name, spec in sorted(data.items(), key=lambda item: str(item[0])):
            where = f"{label}: data.{name}"
            if not isinstance(name, str) or "." in name or not DNS_NAME.fullmatch(name):
                errors.append(f"{where}: a team's name must be a DNS label (lowercase letters, digits and '-')")
            elif not isinstance(spec, str) or not spec.strip():
                errors.append(f"{where}: expected a directory or REPO_URL#REF:PATH, got {type_name(spec)}")
            else:
                try:
                    parse_config_source(spec, what=f"data.{name}")
                except ConfigError as exc:
                    errors.append(f"{label}: {exc}")
                    continue
                found.append(TeamSource(name=name, spec=spec.strip(), origin=origin))
    return tuple(found)
