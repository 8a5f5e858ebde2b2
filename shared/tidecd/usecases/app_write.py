"""Creating or changing an app from the dashboard or the api: a commit to the config source, never a store write.

git stays the source of truth (DESIGN.md): the dashboard's "New app" and "Edit" forms and the api's
`POST /applications` / `PUT /applications/NAME` build an Argo CD Application manifest (`manifest`), check it
with the parser the config source is read with plus the project's sourceRepos and destinations
(`check`: every problem names its field), and commit it to TIDECD_CONFIG's repo, ref and path (`save`)
through the image updater's one git write path (`images.writeback.push`), authored by the principal who
asked. A new app goes to `<path>/<name>.yaml`; a change rewrites the file the app was loaded from.

A protected branch is known by the server declining the push (`writeback.PushDeclined`: a hook's "declined",
GitHub's "protected branch"), not by a setting that could disagree with the server: the same commit then goes
to the branch `tidecd/app-<name>` and a pull request is found or opened on GitHub
(`clients.github.ensure_pull`, as a rollback's revert does). After a push to the ref itself the app is handed
to the dispatcher at once, so it deploys without waiting for the poll; after a pull request, when it merges.

Deleting an app (`remove`: `tidecd app delete NAME [--cascade=foreground|background|orphan]`, the api's
`DELETE /apps/NAME?cascade=`) is Argo CD's `argocd app delete` with git as the source of truth: the
Application is removed from its file in the config source (one commit, the file removed when it held
nothing else), so the app does not come back at the next poll, as it would if only its objects were
deleted. Its objects then go as the cascade says, not as its finalizer says, as Argo CD's API sets the
finalizer the request asks for: `foreground` (the default, as `argocd app delete`) and `background` delete
them through the app's deletion (`tidecd.step.deletion`: PreDelete hooks, objects wave by wave, PostDelete
hooks), started at once; `orphan` leaves them running. A generated app is refused (its ApplicationSet or
parent would create it again). On a protected branch the removal is a pull request, and the app's own
finalizer decides once it merges.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
import yaml

from tidecd.base.errors import ConfigError, PermanentError, TidecdError
from tidecd.base.principal import Principal
from tidecd.config import rbac
from tidecd.config.load import Application, ConfigSourceRef, parse_config_source, parse_object, redact_repo_url
from tidecd.generated import records as generated
from tidecd.project import rules
from tidecd.usecases import authz

if TYPE_CHECKING:
    from tidecd.images.writeback import Edit
    from tidecd.runtime import Runtime
    from tidecd.source.gitremote import RepoCredentials
    from tidecd.triggers.dispatch import Dispatcher

log = structlog.get_logger("tidecd.usecases.app_write")

ARGO_VERSION = "argoproj.io/v1alpha1"
IN_CLUSTER = "https://kubernetes.default.svc"
BRANCH_PREFIX = "tidecd/app-"
MAX_MANIFEST = 64 * 1024  # a manifest from a form or the api: bounded before it is parsed or committed


@dataclass(frozen=True)
class AppForm:
    """Argo CD's "New app" fields (and `argocd app create`'s flags)."""

    name: str
    repo_url: str
    project: str = "default"
    target_revision: str = "HEAD"
    path: str = ""
    chart: str = ""
    server: str = IN_CLUSTER
    namespace: str = ""
    automated: bool = False
    prune: bool = False
    self_heal: bool = False
    create_namespace: bool = False


@dataclass(frozen=True)
class Saved:
    """What a save did: the commit, the file it wrote, and the pull request when the branch is protected."""

    app: str
    commit: str
    file: str
    branch: str
    pull: str = ""
    refresh: str = ""  # why the app could not be handed over at once ("" when it was)

    def to_dict(self) -> dict[str, str]:
        return {"app": self.app, "commit": self.commit, "file": self.file, "branch": self.branch,
                "pull": self.pull, "refresh": self.refresh}


_TRUE = ("on", "true", "1", "yes")


def form_from(fields: Mapping[str, str]) -> AppForm:
    """An HTML form's (or CLI flags') fields as an AppForm; checkboxes are present when ticked."""
    def text(key: str, default: str = "") -> str:
        return str(fields.get(key, "") or default).strip()

    return AppForm(name=text("name"), repo_url=text("repoURL"), project=text("project", "default"),
                   target_revision=text("targetRevision", "HEAD"), path=text("path"), chart=text("chart"),
                   server=text("server", IN_CLUSTER), namespace=text("namespace"),
                   automated=text("automated").lower() in _TRUE, prune=text("prune").lower() in _TRUE,
                   self_heal=text("selfHeal").lower() in _TRUE,
                   create_namespace=text("createNamespace").lower() in _TRUE)


def manifest(form: AppForm) -> dict[str, Any]:
    """The Application manifest the form describes, in Argo CD's shape (what `argocd app create` writes)."""
    source: dict[str, Any] = {"repoURL": form.repo_url, "targetRevision": form.target_revision or "HEAD"}
    if form.chart:
        source["chart"] = form.chart
    else:
        source["path"] = form.path or "."
    spec: dict[str, Any] = {"project": form.project or "default", "source": source,
                            "destination": {"server": form.server or IN_CLUSTER, "namespace": form.namespace}}
    policy: dict[str, Any] = {}
    if form.automated:
        policy["automated"] = {"prune": form.prune, "selfHeal": form.self_heal}
    if form.create_namespace:
        policy["syncOptions"] = ["CreateNamespace=true"]
    if policy:
        spec["syncPolicy"] = policy
    return {"apiVersion": ARGO_VERSION, "kind": "Application", "metadata": {"name": form.name}, "spec": spec}


def form_of(app: Application) -> AppForm:
    """The Edit form's fields for a loaded app (one source; a multi-source app is edited in git)."""
    if app.sources:
        raise PermanentError(f"app {app.name!r} has several sources: change it in the config source's git")
    policy = app.sync_policy
    return AppForm(name=app.name, repo_url=app.source.repo_url, project=app.project,
                   target_revision=app.source.target_revision, path=app.source.path, chart=app.source.chart,
                   server=app.destination.server, namespace=app.destination.namespace,
                   automated=policy.automated, prune=policy.prune, self_heal=policy.self_heal,
                   create_namespace=policy.has_option("CreateNamespace=true"))


def check(runtime: Runtime, doc: Any, origin: str) -> Application:
    """The manifest read as the config source reads it, then the project's rules; ConfigError listing every
    problem, each naming the object and field."""
    if not isinstance(doc, dict):
        raise ConfigError(f"{origin}: the manifest must be an object (an argoproj.io/v1alpha1 Application)")
    if len(yaml.safe_dump(doc)) > MAX_MANIFEST:
        raise ConfigError(f"{origin}: the manifest is larger than {MAX_MANIFEST} bytes")
    item, errors = parse_object(doc, origin)
    if not errors and not isinstance(item, Application):
        errors.append(f"{origin}: kind: expected an Application, got {doc.get('kind')!r}")
    if errors or not isinstance(item, Application):
        raise ConfigError("\n".join(errors))
    project = runtime.config().projects.get(item.project)
    if project is None:
        raise ConfigError(f"{origin}: Application/{item.name}: spec.project: project {item.project!r} is not "
                          "defined in the config source")
    problems = [f"spec.source.repoURL: {p}" for p in rules.check_source(project, item)]
    problems += [f"spec.destination: {p}" for p in rules.check_destination(project, item.destination)]
    if problems:
        raise ConfigError("\n".join(f"{origin}: Application/{item.name}: {p}" for p in problems))
    return item


def save(runtime: Runtime, principal: Principal, doc: Any, *, create: bool,
         dispatcher: Dispatcher | None = None) -> Saved:
    """Check `doc` and commit it to the config source (see the module docstring). `create`: the app must not
    exist yet (RBAC `applications create`); else it must (`applications update`, in its old and new project)."""
    # lazy: cold start (dulwich and the git write path only when an app is written)
    from tidecd import source as git
    from tidecd.usecases.images import default_branch

    source = _git_config_source(runtime)
    name = _name_of(doc)
    config = runtime.config()
    shown = str(source)
    origin = f"{shown}{'' if shown.endswith(':') else '/'}{name}.yaml"  # as `load_config` names its files
    if create:
        if name in config.applications or name in config.invalid:
            raise ConfigError(f"{origin}: Application/{name}: metadata.name: an app {name!r} already exists")
    else:
        old = authz.app_for(runtime, principal, name, "update")
        origin = old.origin
    app = check(runtime, doc, origin)
    authz.require(runtime, principal, rbac.APPLICATIONS, "create" if create else "update", authz.app_object(app))
    file = _new_file(source, name) if create else _file_of(source, app.name, origin)
    creds = git.credentials_for(source.repo_url, runtime.plain_secrets_unsealed_later())
    refs = git.ls_remote(source.repo_url, creds)
    base = default_branch(refs) if source.ref in ("", "HEAD") else source.ref.removeprefix("refs/heads/")
    verb = "Create" if create else "Update"
    message = (f"{verb} Application {name}\n\nFrom the tidecd dashboard by {principal.username}: project "
               f"{app.project}, source {redact_repo_url(app.source.repo_url)}, destination "
               f"{app.destination.server or app.destination.name} namespace {app.destination.namespace}.\n")

    def edit(read: Any, *, pending: bool = False) -> dict[str, str]:
        """The file's new text; {} when it has it already. `pending`: on the pull request's branch, where an
        earlier request's file is this app's, to be brought up to date rather than refused."""
        current = read(file)
        if create and current is not None and not pending:
            raise ConfigError(f"{source}: {file} already exists: pick another app name")
        if not create and current is None:
            raise ConfigError(f"{source}: {file}, where app {name!r} was defined, is gone: reload and retry")
        text = replaced(current, doc, name) if current is not None else _dump([doc])
        return {} if text == current else {file: text}

    commit, branch, pull = _commit(runtime, principal, source, creds, base, name, message, edit,
                                   functools.partial(edit, pending=True))
    commit = commit or git.ls_remote(source.repo_url, creds).get(f"refs/heads/{branch}", "")  # nothing to change
    authz.done(runtime, principal, rbac.APPLICATIONS, "create" if create else "update", authz.app_object(app),
               f"committed {commit[:12]} to {file}" + (f", pull request {pull}" if pull else ""))
    runtime.forget_config()
    refresh = "" if pull else _refresh(runtime, name, dispatcher, verb)
    log.info("app written to the config source", app=name, commit=commit[:12], file=file, branch=branch)
    return Saved(app=name, commit=commit, file=file, branch=branch, pull=pull, refresh=refresh)


def replaced(text: str, doc: dict[str, Any], name: str) -> str:
    """The file's documents with the Application `name` replaced by `doc` (the others kept, in order)."""
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    out, found = [], False
    for old in docs:
        if isinstance(old, dict) and old.get("kind") == "Application" and \
                (old.get("metadata") or {}).get("name") == name:
            out.append(doc)
            found = True
        else:
            out.append(old)
    return _dump(out if found else [*out, doc])


def _dump(docs: list[Any]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False)


def _name_of(doc: Any) -> str:
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        raise ConfigError("Application: metadata.name: required")
    return name


def _git_config_source(runtime: Runtime) -> ConfigSourceRef:
    source = parse_config_source(runtime.settings.config)
    if not isinstance(source, ConfigSourceRef):
        raise ConfigError(f"TIDECD_CONFIG {runtime.settings.config!r} is a directory: apps are created from the "
                          "dashboard only in a config source in git (REPO_URL#REF:PATH)")
    return source


def _new_file(source: ConfigSourceRef, name: str) -> str:
    return posixpath.normpath(posixpath.join(source.path or ".", f"{name}.yaml"))


def _file_of(source: ConfigSourceRef, name: str, origin: str) -> str:
    """The repository path of the file an app was loaded from (its origin is `<source>/<file under path>`)."""
    prefix = str(source)
    if not origin.startswith(prefix):
        raise PermanentError(f"app {name!r} is defined in {origin}, outside the main config source: "
                             "change it there")
    rest = origin[len(prefix):].lstrip("/")
    return posixpath.normpath(posixpath.join(source.path or ".", rest))


def _commit(runtime: Runtime, principal: Principal, source: ConfigSourceRef, creds: RepoCredentials | None,
            base: str, name: str, message: str, edit: Edit, edit_on_branch: Edit) -> tuple[str, str, str]:
    """Commit `edit` to the config source's branch as `principal`; where the branch refuses the push (a
    protected branch), `edit_on_branch` on `tidecd/app-NAME` and a pull request. (commit, branch, pull)."""
    from tidecd.images import writeback  # lazy: cold start (dulwich and the git write path only when writing)

    author = writeback.Author(principal.subject[:200],
                              principal.subject if "@" in principal.subject else runtime.settings.git_commit_email)
    try:
        return writeback.push(source.repo_url, creds, base=base, target=base, edit=edit, message=message,
                              author=author), base, ""
    except writeback.PushDeclined:
        branch = f"{BRANCH_PREFIX}{name}"
        commit = writeback.push(source.repo_url, creds, base=base, target=branch, message=message, author=author,
                                edit=edit_on_branch)
        return commit, branch, _open_pull(runtime, source, base=base, head=branch, message=message)


def _open_pull(runtime: Runtime, source: ConfigSourceRef, *, base: str, head: str, message: str) -> str:
    from tidecd.clients import github  # lazy: cold start (PyGithub only for a pull request)

    auth = github.auth_from_secrets(runtime.secrets(), runtime.settings.github_api_url)
    repo = github.repo_of(source.repo_url, auth.api_url) if auth is not None else None
    if auth is None or repo is None:
        raise ConfigError(f"{redact_repo_url(source.repo_url)} declined the push to {base} (a protected branch): "
                          f"the commit is on the branch {head}; opening its pull request needs a GitHub repository "
                          "and a Secret labelled argocd.argoproj.io/secret-type: github")
    title, _, body = message.partition("\n")
    with github.translated_errors():
        gh_repo = github.PyGithubApi(auth).api.get_repo(repo.full_name)
        _, page = github.ensure_pull(gh_repo, repo, base=base, head=head, title=title, body=body.strip())
    return page


def _refresh(runtime: Runtime, name: str, dispatcher: Dispatcher | None, verb: str) -> str:
    from tidecd.triggers.dispatch import dispatcher_for  # lazy: cold start

    try:
        (dispatcher or dispatcher_for(runtime)).schedule(name, 0.0, f"{verb.lower()}d from the dashboard")
    except TidecdError as exc:
        log.warning("app not handed over after its commit", app=name, error=str(exc))
        return f"the app could not be refreshed at once ({exc}); the poll picks it up within minutes"
    return ""


CASCADES = ("foreground", "background", "orphan")


def remove(runtime: Runtime, principal: Principal, name: str, *, cascade: str = "foreground",
           dispatcher: Dispatcher | None = None) -> Saved:
    """Delete the app (see the module docstring): RBAC `applications delete`, the commit that removes it
    from the config source, then its objects by `cascade`; recorded in the audit log."""
    # lazy: cold start (dulwich and the git write path only when an app is written)
    from tidecd import source as git
    from tidecd.usecases.images import default_branch

    if cascade not in CASCADES:
        raise ConfigError(f"cascade {cascade!r}: expected foreground, background or orphan")
    app = authz.app_for(runtime, principal, name, "delete")
    config = runtime.config()
    if name in config.deleting:
        raise ConfigError(f"app {name!r} is being deleted already")
    if name in config.owners:
        raise ConfigError(f"app {name!r} is generated by {config.owners[name]}: remove it there (it would "
                          "create the app again)")
    source = _git_config_source(runtime)
    file = _file_of(source, name, app.origin)
    creds = git.credentials_for(source.repo_url, runtime.plain_secrets_unsealed_later())
    base = default_branch(git.ls_remote(source.repo_url, creds)) if source.ref in ("", "HEAD") else \
        source.ref.removeprefix("refs/heads/")
    message = (f"Delete Application {name}\n\nFrom tidecd by {principal.username} (cascade {cascade}): project "
               f"{app.project}, destination {app.destination.server or app.destination.name} namespace "
               f"{app.destination.namespace}.\n")
    entry = generated.written_entry(app, config.teams.get(name, ""))
    if cascade == "orphan":  # before the commit: the next poll must not take the removal for a cascade
        generated.untrack(runtime.store, name)

    def edit(read: Any) -> dict[str, str | None]:
        current = read(file)
        if current is None:
            raise ConfigError(f"{source}: {file}, where app {name!r} was defined, is gone: reload and retry")
        return {file: without(current, name) or None}  # None: nothing else was in it, the file goes

    commit, branch, pull = _commit(runtime, principal, source, creds, base, name, message, edit, edit)
    if not pull and cascade != "orphan":
        generated.mark_removed(runtime.store, name, entry, cascade)
    authz.done(runtime, principal, rbac.APPLICATIONS, "delete", authz.app_object(app),
               f"cascade {cascade}: committed {commit[:12]} to {file}" + (f", pull request {pull}" if pull else ""))
    runtime.forget_config()
    refresh = "" if pull or cascade == "orphan" else _refresh(runtime, name, dispatcher, "Delete")
    log.info("app deleted from the config source", app=name, cascade=cascade, commit=commit[:12], file=file)
    return Saved(app=name, commit=commit, file=file, branch=branch, pull=pull, refresh=refresh)


def without(text: str, name: str) -> str:
    """The file's documents without the Application `name` ("" when nothing else is left)."""
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    kept = [d for d in docs if not (isinstance(d, dict) and d.get("kind") == "Application"
                                    and (d.get("metadata") or {}).get("name") == name)]
    return _dump(kept) if kept else ""
