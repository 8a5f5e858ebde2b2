"""The image updater use case: one tick over every app carrying argocd-image-updater's annotations.

    for each managed app   parse its annotations (problems → the app's status, nothing else happens)
                           skip it while a rollback pins it
    per repository         ONE tags-list call, however many apps and aliases use it (`digest` needs none)
    per image              filter tags (allow-tags, ignore-tags; a tag the OCI grammar forbids is never a
                           candidate, and the app's status says so), pick by strategy, compare with what
                           the app runs now (its last rendered manifests, or the updater's override)
    per app with changes   write back: `argocd` → the override in `state/images/<app>.json`, applied at
                           render time; `git` → one commit pushed to the app's repo; then a refresh
                           (the dispatcher: a direct reconcile locally, Pub/Sub in the cloud)

A registry that is down or refuses leaves that app's images as they are and says so in its status. Two
ticks at once cannot both write one app: each app is checked under a short lease, and a git push that
loses a race is redone on the new head (never forced).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import structlog

from tidecd import source as git
from tidecd.base import semver as versions
from tidecd.base.errors import NotFound, TidecdError
from tidecd.clients.registry import (
    Credentials,
    HttpRegistry,
    Registry,
    RegistryUnavailable,
    Repository,
    docker_config_auths,
    image_reference,
    parse_image,
)
from tidecd.clients.secrets import text_fields
from tidecd.clients.store import acquire_lease, release_lease
from tidecd.config.load import Application
from tidecd.images import annotations as notes
from tidecd.images import state as images_state
from tidecd.images.annotations import ImageSpec, Method, SecretRef, Strategy, Target, UpdaterConfig
from tidecd.images.state import ImageValue
from tidecd.render.overrides import IMAGE_DIGEST, IMAGE_TAG, SourceOverride
from tidecd.source import RepoCredentials
from tidecd.state import app as app_state
from tidecd.step.desired import manifests_at
from tidecd.triggers.dispatch import Dispatcher, Refresh, dispatcher_for

if TYPE_CHECKING:
    from tidecd.runtime import Runtime

log = structlog.get_logger("tidecd.images")

LEASE_TTL = 300.0
TAG_WORKERS = 8
MAX_BUILD_TAGS = 100  # newest-build reads each candidate's config: bound the work per image
REASON = "image update"


@dataclass(frozen=True)
class Change:
    alias: str
    image: str
    old: str
    new: str

    def line(self) -> str:
        return f"updates image {self.image} tag '{self.old or '(none)'}' to '{self.new}'"


@dataclass
class AppResult:
    app: str
    status: str  # updated | unchanged | pinned | invalid | unavailable | skipped | error
    message: str = ""
    changes: list[Change] = field(default_factory=list)
    commit: str = ""
    problems: list[str] = field(default_factory=list)


@dataclass
class TickSummary:
    apps: list[AppResult] = field(default_factory=list)
    repositories: int = 0
    tags_list_calls: int = 0
    refreshed: list[str] = field(default_factory=list)
    elapsed: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def check(runtime: Runtime, app: str | None = None, *, registry: Registry | None = None,
          dispatcher: Dispatcher | None = None, repositories: frozenset[Repository] | None = None) -> TickSummary:
    """One tick (or one app, for `tidecd image check APP`). With `repositories` (a registry's push
    notification, `usecases.registry_events`), only the images of those repositories: the apps that name
    one, and in them only those images; the others wait for the scheduled tick."""
    started = time.monotonic()
    config = runtime.config()
    if app is not None and app not in config.applications:
        runtime.app(app)  # raises NotFound or the app's ConfigError
    apps = [a for name, a in sorted(config.applications.items())
            if (app is None or name == app) and notes.is_managed(dict(a.annotations))]
    if app is not None and not apps:
        raise NotFound(f"application {app!r} has no {notes.IMAGE_LIST} annotation: the image updater leaves it alone")
    http = registry or HttpRegistry(plain_http=_hosts(runtime.settings.plain_http_registries))
    if repositories is not None:
        apps = [a for a in apps if follows(a, repositories)]
    tick = _Tick(runtime, http)
    summary = TickSummary()
    plans = [tick.plan(a) for a in apps]
    if repositories is not None:
        plans = [p for p in (_only(plan, repositories) for plan in plans) if p is not None]
    summary.repositories = tick.fetch_tags(p for p in plans if p.config)
    for plan in plans:
        result = tick.apply(plan)
        summary.apps.append(result)
        tick.record(plan.app.name, result)
    summary.tags_list_calls = tick.tags_calls
    summary.refreshed = tick.refresh(dispatcher)
    summary.elapsed = round(time.monotonic() - started, 3)
    log.info("image tick", apps=len(apps), repositories=summary.repositories, tags_calls=summary.tags_list_calls,
             updated=[r.app for r in summary.apps if r.status == "updated"])
    return summary


def follows(app: Application, repositories: frozenset[Repository]) -> bool:
    """Does the app's image-list name an image of one of `repositories`? (Invalid annotations: no; the
    scheduled tick reports them.)"""
    config, _ = notes.parse(dict(app.annotations)) if notes.is_managed(dict(app.annotations)) else (None, [])
    return config is not None and any(parse_image(i.image) in repositories for i in config.images)


def _only(plan: _Plan, repositories: frozenset[Repository]) -> _Plan | None:
    """The plan narrowed to the images of `repositories`; None when the app names none of them (an app
    whose annotations are invalid is left to the scheduled tick, which reports it)."""
    if plan.config is None:
        return None
    images = tuple(i for i in plan.config.images if parse_image(i.image) in repositories)
    if not images:
        return None
    plan.config = replace(plan.config, images=images)
    return plan


def _hosts(text: str) -> tuple[str, ...]:
    return tuple(h.strip() for h in text.split(",") if h.strip())


@dataclass
class _Plan:
    app: Application
    config: UpdaterConfig | None = None
    problems: list[str] = field(default_factory=list)
    pinned: str = ""
    creds: dict[str, Credentials | None] = field(default_factory=dict)  # alias → registry credentials


class _Tick:
    def __init__(self, runtime: Runtime, registry: Registry) -> None:
        self.runtime, self.registry = runtime, registry
        self.tags: dict[tuple[Repository, str], list[str] | Exception] = {}
        self.forbidden: dict[tuple[Repository, str], list[str]] = {}  # listed tags outside the OCI grammar
        self.tags_calls = 0
        self.to_refresh: list[str] = []

    # -- planning ---------------------------------------------------------------------------------------

    def plan(self, app: Application) -> _Plan:
        config, problems = notes.parse(dict(app.annotations))
        plan = _Plan(app, config, problems)
        if config is None:
            return plan
        held = images_state.load(self.runtime.store, app.name)
        if held.pin:
            plan.pinned, plan.config = held.pin_message(), None
            return plan
        try:
            for image in config.images:
                plan.creds[image.alias] = self._registry_credentials(image)
        except (TidecdError, ValueError) as exc:
            plan.problems.append(str(exc))
            plan.config = None
        return plan

    def _registry_credentials(self, image: ImageSpec) -> Credentials | None:
        repo = parse_image(image.image)
        ref = image.pull_secret
        if ref is None:  # a dockerconfigjson Secret of the config source that knows this registry
            for secret in self.runtime.secrets():
                if secret.get("type") == "kubernetes.io/dockerconfigjson":
                    found = docker_config_auths(secret).get(repo.registry)
                    if found:
                        return found
            return None
        where = f"annotation {notes.PREFIX}{image.alias.replace('/', '_')}.pull-secret"
        if ref.kind == "env":
            value = os.environ.get(ref.name, "")
            if ":" not in value:
                raise ValueError(f"{where}: environment variable {ref.name} is not set to <username>:<password>")
            user, _, password = value.partition(":")
            return Credentials(user, password)
        secret = self._secret(ref, where)
        if ref.kind == "pullsecret":
            auths = docker_config_auths(secret)
            if repo.registry not in auths:
                raise ValueError(f"{where}: Secret {ref.namespace}/{ref.name} has no credentials for "
                                 f"{repo.registry}")
            return auths[repo.registry]
        fields = _fields(secret)
        if ":" not in fields.get(ref.field, ""):
            raise ValueError(f"{where}: Secret {ref.namespace}/{ref.name} field {ref.field!r} does not hold "
                             "<username>:<password>")
        user, _, password = fields[ref.field].partition(":")
        return Credentials(user, password)

    def _secret(self, ref: SecretRef, where: str) -> dict[str, Any]:
        for secret in self.runtime.secrets():
            meta = secret.get("metadata") or {}
            if meta.get("name") == ref.name and meta.get("namespace", ref.namespace) in (ref.namespace, "", None):
                return secret
        raise ValueError(f"{where}: no Secret {ref.namespace}/{ref.name} in the config source (seal it and commit "
                         "it there)")

    # -- the registry: one tags list per repository ----------------------------------------------------------

    def fetch_tags(self, plans: Iterable[_Plan]) -> int:
        wanted: dict[tuple[Repository, str], Credentials | None] = {}
        for plan in plans:
            assert plan.config is not None
            for image in plan.config.images:
                if image.strategy is not Strategy.DIGEST:
                    creds = plan.creds.get(image.alias)
                    wanted.setdefault((parse_image(image.image), _fingerprint(creds)), creds)

        def one(item: tuple[tuple[Repository, str], Credentials | None]) -> None:
            (repo, print_), creds = item
            try:
                listed = self.registry.tags(repo, creds)
                self.tags[(repo, print_)] = [t for t in listed if IMAGE_TAG.fullmatch(t)]
                self.forbidden[(repo, print_)] = [t for t in listed if not IMAGE_TAG.fullmatch(t)]
            except (RegistryUnavailable, LookupError) as exc:
                self.tags[(repo, print_)] = exc

        with ThreadPoolExecutor(max_workers=TAG_WORKERS) as pool:
            list(pool.map(one, sorted(wanted.items(), key=lambda kv: kv[0])))
        self.tags_calls = len(wanted)
        return len({repo for repo, _ in wanted})

    # -- one app ------------------------------------------------------------------------------------------

    def apply(self, plan: _Plan) -> AppResult:
        name = plan.app.name
        if plan.problems:
            return AppResult(name, "invalid", plan.problems[0], problems=plan.problems)
        if plan.pinned:
            return AppResult(name, "pinned", plan.pinned)
        assert plan.config is not None
        holder = uuid.uuid4().hex
        lease = f"images.{name}"
        if not acquire_lease(self.runtime.store, lease, holder, LEASE_TTL):
            return AppResult(name, "skipped", "another image check of this app is running")
        try:
            return self._update(plan.app, plan.config, plan.creds)
        except RegistryUnavailable as exc:
            return AppResult(name, "unavailable", f"{exc}; images left as they are")
        except (TidecdError, LookupError, ValueError) as exc:
            return AppResult(name, "error", str(exc))
        finally:
            release_lease(self.runtime.store, lease, holder)

    def _update(self, app: Application, config: UpdaterConfig, creds: dict[str, Credentials | None]) -> AppResult:
        held = images_state.load(self.runtime.store, app.name)
        running = _running_images(self.runtime, app, held)
        refused = refused_versions(held.refused)
        overridden = {v.alias: v for v in held.override}
        values: list[ImageValue] = []
        changes: list[Change] = []
        notes_: list[str] = []
        for image in config.images:
            chosen = self._choose(image, creds.get(image.alias), refused.get(parse_image(image.image), set()))
            if forbidden := self.forbidden.get((parse_image(image.image), _fingerprint(creds.get(image.alias)))):
                notes_.append(f"{image.alias}: {len(forbidden)} tag(s) the registry lists are not OCI tags and "
                              f"were refused (e.g. {forbidden[0][:64]!r})")
            if chosen is None:
                notes_.append(f"{image.alias}: no tag satisfies the constraints")
                continue
            tag, digest = chosen
            value = ImageValue(image.alias, image.image, tag, digest, image.kustomize_image_name,
                               image.helm_image_name, image.helm_image_tag, image.helm_image_spec)
            current = _current(image, running, overridden.get(image.alias))
            if current is None and not image.force_update:
                notes_.append(f"{image.alias}: {image.image} is not used by the app's manifests "
                              "(set force-update to write it anyway)")
                continue
            if current == value.version:
                continue
            values.append(value)
            changes.append(Change(image.alias, image.image, current or "", value.version))
        if not values:
            return AppResult(app.name, "unchanged", "; ".join(notes_) or "every image is up to date")
        if config.write_back.method is Method.ARGOCD:
            images_state.update(self.runtime.store, app.name, lambda s: s.set_override(values))
            commit = ""
        else:
            commit = self._git_write_back(app, config, values, changes)
            if not commit:
                return AppResult(app.name, "unchanged", "git already has these images")
        self.to_refresh.append(app.name)
        message = ", ".join(f"{c.image}: {c.old or '(none)'} → {c.new}" for c in changes)
        log.info("images updated", app=app.name, changes=message, commit=commit[:12])
        return AppResult(app.name, "updated", message, changes, commit)

    def _choose(self, image: ImageSpec, creds: Credentials | None,
                refused: set[str]) -> tuple[str, str] | None:
        """(tag, digest) the strategy picks; digest is set only by the digest strategy. A `refused` tag or
        digest (a merged revert took it out of git) is never picked."""
        repo = parse_image(image.image)
        if image.strategy is Strategy.DIGEST:
            digest = self.registry.digest(repo, image.constraint_text, creds, image.platforms)
            if not IMAGE_DIGEST.fullmatch(digest):
                raise ValueError(f"{image.alias}: the registry answered {digest[:80]!r} for the digest of "
                                 f"{image.constraint_text!r}: not a digest; refused")
            return (image.constraint_text, digest) if digest not in refused else None
        found = self.tags[(repo, _fingerprint(creds))]
        if isinstance(found, Exception):
            raise found
        tags = [t for t in found if image.allows(t) and t not in refused]
        if image.strategy is Strategy.SEMVER:
            tag = versions.newest_semver(tags, image.constraint)
        elif image.strategy is Strategy.ALPHABETICAL:
            tag = versions.alphabetical(tags)
        else:
            created = {}
            for candidate in sorted(tags)[-MAX_BUILD_TAGS:]:
                try:
                    created[candidate] = self.registry.created(repo, candidate, creds, image.platforms)
                except LookupError:
                    continue  # not built for the platform, or no config: not a candidate
            tag = versions.newest_build(created)
        return (tag, "") if tag else None

    # -- git ---------------------------------------------------------------------------------------------

    def _git_write_back(self, app: Application, config: UpdaterConfig, values: list[ImageValue],
                        changes: list[Change]) -> str:
        # lazy: cold start (images.writeback, ~25 ms: only an app that writes back to git)
        from tidecd.images import writeback

        wb = config.write_back
        creds = self._git_credentials(app, wb.secret)
        base = wb.base_branch or app.source.target_revision
        if base in ("", "HEAD"):
            base = default_branch(git.ls_remote(app.source.repo_url, creds))
        base = base.removeprefix("refs/heads/")
        target = _branch_template(wb.target_branch, changes) if wb.target_branch else base
        app_path = writeback.repo_path("", app.source.path or ".")

        def edit(read: Callable[[str], str | None]) -> dict[str, str]:
            if wb.target is Target.KUSTOMIZATION:
                folder = writeback.repo_path(app_path, wb.target_path or ".")
                for file in writeback.KUSTOMIZATION_FILES:
                    path = f"{folder}/{file}" if folder else file
                    old = read(path)
                    if old is not None:
                        new = writeback.edit_kustomization(old, values, path)
                        return {path: new} if new != old else {}
                raise TidecdError(f"write-back target: no kustomization in {folder or '/'}")
            if wb.target is Target.HELM_VALUES:
                path = writeback.repo_path(app_path, wb.target_path)
                old = read(path)
                new = writeback.edit_helm_values(old, values, path)
                return {path: new} if new != old else {}
            path = writeback.repo_path(app_path, f".argocd-source-{app.name}.yaml")
            old = read(path)
            new = writeback.edit_source_file(old, values, _tool(app, app_path, read), path)
            return {path: new} if new != old else {}

        message = f"build: automatic update of {app.name}\n\n" + "".join(c.line() + "\n" for c in changes)
        author = writeback.Author(self.runtime.settings.git_commit_user, self.runtime.settings.git_commit_email)
        if wb.github_api:
            return self._github_write_back(app, base, target, edit, message, author)
        return writeback.push(app.source.repo_url, creds, base=base, target=target, edit=edit, message=message,
                              author=author)

    def _github_write_back(self, app: Application, base: str, target: str,
                           edit: Callable[[Callable[[str], str | None]], dict[str, str]], message: str,
                           author: Any) -> str:
        # lazy: cold start (PyGithub and the GitHub write-back: only an app that writes back through the GitHub API)
        from tidecd.clients import github
        from tidecd.images import github_write

        auth = github.auth_from_secrets(self.runtime.secrets(), self.runtime.settings.github_api_url)
        if auth is None:
            raise TidecdError(f"annotation {notes.WRITE_BACK_API}: github-api needs a Secret labelled "
                              f"argocd.argoproj.io/secret-type: github in the config source")
        repo = github.repo_of(app.source.repo_url, auth.api_url)
        if repo is None:
            raise TidecdError(f"annotation {notes.WRITE_BACK_API}: {app.source.repo_url} is not a GitHub "
                              "repository")
        sha, number = github_write.push(auth, repo, base=base, target=target, edit=edit, message=message,
                                        author=(author.name, author.email))
        if number:
            log.info("image update pull request", app=app.name, pull=number)
        return sha

    def _git_credentials(self, app: Application, ref: SecretRef | None) -> RepoCredentials | None:
        if ref is None:
            return self.runtime.repo_credentials(app.source.repo_url)
        secret = self._secret(ref, f"annotation {notes.WRITE_BACK_METHOD}")
        fields = _fields(secret)
        return RepoCredentials(username=fields.get("username", ""), password=fields.get("password", ""),
                               ssh_private_key=fields.get("sshPrivateKey", ""))

    # -- recording and refreshing ----------------------------------------------------------------------------

    def record(self, app: str, result: AppResult) -> None:
        """The outcome into `state/images/<app>.json`; an outcome equal to the stored one writes nothing
        (a tick over many unchanged apps costs reads only), and `since` says when it first appeared."""
        now = app_state.now_iso()
        outcome: dict[str, Any] = {"status": result.status, "message": result.message,
                                   "changes": [asdict(c) for c in result.changes], "commit": result.commit,
                                   "problems": result.problems}

        def change(state: images_state.ImagesState) -> None:
            last = state.check
            if {k: last.get(k) for k in outcome} == outcome:
                return
            state.check = {**outcome, "at": now, "lastUpdate": last.get("lastUpdate", {})}
            if result.status == "updated":
                state.check["lastUpdate"] = {"at": now, "changes": outcome["changes"], "commit": result.commit}

        try:
            images_state.update(self.runtime.store, app, change)
        except TidecdError as exc:
            log.warning("image status not recorded", app=app, error=str(exc))

    def refresh(self, dispatcher: Dispatcher | None) -> list[str]:
        if not self.to_refresh:
            return []
        chosen = dispatcher or dispatcher_for(self.runtime)
        failed = chosen.dispatch([Refresh(name, REASON) for name in self.to_refresh])
        for name, problem in failed.items():
            log.warning("refresh after image update failed", app=name, error=problem)
        return [n for n in self.to_refresh if n not in failed]


# --- helpers ---------------------------------------------------------------------------------------------


def _fingerprint(creds: Credentials | None) -> str:
    if creds is None:
        return ""
    return hashlib.sha256(f"{creds.username}\0{creds.password}".encode()).hexdigest()[:16]


def _fields(secret: dict[str, Any]) -> dict[str, str]:
    """The Secret's `data` (decoded) overlaid with its `stringData`, as Kubernetes (and the git source) read it."""
    return text_fields(secret, f"Secret {(secret.get('metadata') or {}).get('name', '?')}")


def default_branch(refs: dict[str, str]) -> str:
    head = refs.get("HEAD")
    branches = sorted(n.removeprefix("refs/heads/") for n, sha in refs.items()
                      if n.startswith("refs/heads/") and sha == head)
    for preferred in ("main", "master"):
        if preferred in branches:
            return preferred
    if not branches:
        raise TidecdError("targetRevision is HEAD and no branch is at HEAD: set the "
                          f"{notes.GIT_BRANCH} annotation")
    return branches[0]


def _branch_template(template: str, changes: list[Change]) -> str:
    """argocd-image-updater's branch templates: `{{.SHA256}}` and `{{range .Images}}…{{end}}`."""
    digest = hashlib.sha256(json.dumps([asdict(c) for c in changes], sort_keys=True).encode()).hexdigest()

    def images(match: re.Match[str]) -> str:
        body = match[1]
        out = ""
        for c in changes:
            out += (body.replace("{{.Name}}", c.image).replace("{{.Alias}}", c.alias)
                    .replace("{{.OldTag}}", c.old).replace("{{.NewTag}}", c.new))
        return out

    text = re.sub(r"\{\{\s*range \.Images\s*\}\}(.*?)\{\{\s*end\s*\}\}", images, template)
    text = re.sub(r"\{\{\s*\.SHA256\s*\}\}", digest, text)
    if "{{" in text:
        raise TidecdError(f"annotation {notes.GIT_BRANCH}: unsupported template in {template!r}")
    text = re.sub(r"[^A-Za-z0-9._/-]", "-", text)
    return text[:255]


def _tool(app: Application, app_path: str, read: Callable[[str], str | None]) -> str:
    if app.source.helm is not None:
        return "Helm"
    if app.source.kustomize is not None:
        return "Kustomize"
    prefix = f"{app_path}/" if app_path else ""
    if any(read(prefix + f) is not None for f in ("kustomization.yaml", "kustomization.yml", "Kustomization")):
        return "Kustomize"
    if read(prefix + "Chart.yaml") is not None:
        return "Helm"
    return "Directory"


def refused_versions(refs: list[str]) -> dict[Repository, set[str]]:
    """The refused image references by repository: each one's tags and digests."""
    out: dict[Repository, set[str]] = {}
    for ref in refs:
        repo, tag, digest = image_reference(ref)
        out.setdefault(repo, set()).update(v for v in (tag, digest) if v)
    return out


def _running_images(runtime: Runtime, app: Application, held: images_state.ImagesState) -> list[str] | None:
    """Container images of the app's last rendered manifests (None when it was never rendered)."""
    current, _ = app_state.load(runtime.store, app.name)
    if not current.revision:
        return None
    return images_at(runtime, app, current.revision, held.source_override() or None)


def images_at(runtime: Runtime, app: Application, revision: str,
              override: SourceOverride | None = None) -> list[str] | None:
    """Container images of the app's manifests at `revision`, as the step renders them (None for an app
    of several sources, which the updater does not write to)."""
    if app.sources:
        return None
    found: list[str] = []
    _collect_images(manifests_at(runtime, app, revision, override), found)
    return found


def _collect_images(node: Any, found: list[str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers", "ephemeralContainers") and isinstance(value, list):
                found.extend(str(c["image"]) for c in value if isinstance(c, dict) and isinstance(c.get("image"), str))
            else:
                _collect_images(value, found)
    elif isinstance(node, list):
        for item in node:
            _collect_images(item, found)


def _current(image: ImageSpec, running: list[str] | None, overridden: ImageValue | None) -> str | None:
    """The version (digest for the digest strategy, else tag) the app runs now; None when not found."""
    wanted = parse_image(image.image)
    for ref in running or []:
        repo, tag, digest = image_reference(ref)
        if repo == wanted:
            return digest if image.strategy is Strategy.DIGEST else tag
    if overridden is not None and overridden.image == image.image:
        return overridden.version
    if image.kustomize_image_name and running:
        original = parse_image(image.kustomize_image_name)
        if any(image_reference(ref)[0] == original for ref in running):
            return ""  # the original image runs: anything is an update
    return None
