"""Rollback through git: the revert a rollback opens on request, and the hold it keeps until it merges.

A rollback (`usecases.commands`) puts the cluster back at an older revision, switches automated sync off
and pins the image updater (`images.state.pin`), but git still says the newer version. With `revert`
("pr" or "push") it also writes git back:

    open_revert   one commit on the app's branch head that restores the app's path (and the image updater's
                  write-back target, when it lies outside the path) to its tree at the rolled-back revision;
                  so the updater's write-back is reverted with the rest. `pr`: pushed to the branch
                  `tidecd/revert-<app>-<sha>` and a pull request opened on GitHub (`clients.github`); `push`:
                  pushed straight to the app's branch, only for an app annotated `tidecd.io/revert-push:
                  "allow"`. Other commits on the branch (other apps' paths) are kept: this is a revert of
                  the app, not of the range.
    settle        the revert merged: the hold lifts by itself (automated sync back on, images unpinned; the
                  image references the revert took out of git stay refused by the updater) and the app is
                  refreshed. Closed unmerged: the record says so and the hold stays for a person.
    open_automatic
                  the revert of an automatic rollback (`step.autorollback`), opened by the poll once the
                  rollback operation ended (the reconcile step never writes git)
    on_pull_request / check_all
                  how it is noticed: GitHub's `pull_request` closed webhook, or the poll finding the restored
                  tree on the branch (a merge, squash or rebase alike) or the pull request closed.

A revert found merged while the rollback operation still runs is lifted by a later poll (the operation's
end switches automated sync off, so lifting before it would be undone).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import structlog

from tidecd import source as git
from tidecd.base.errors import ConfigError, NotFound, PermanentError, TidecdError
from tidecd.clients.store import PreconditionFailed
from tidecd.config.load import Application, redact_repo_url
from tidecd.images import annotations as notes
from tidecd.images import state as images_state
from tidecd.state import app as app_state
from tidecd.state import autorollback as autorollback_state
from tidecd.state import revert as revert_state
from tidecd.state.app import now_iso
from tidecd.state.revert import CLOSED, MERGED, OPEN, PR, PUSH, Pull, Revert
from tidecd.triggers.dispatch import Dispatcher, Refresh

if TYPE_CHECKING:
    from dulwich.repo import MemoryRepo

    from tidecd.images import writeback
    from tidecd.runtime import Runtime

log = structlog.get_logger("tidecd.usecases.revert")

ALLOW_PUSH = "tidecd.io/revert-push"  # "allow": the revert may be pushed straight to the app's branch
MODES = (PR, PUSH)
MAX_OBJECTS = 50_000  # objects copied from the rolled-back tree: bound the work on a huge app path
BRANCH_PREFIX = "tidecd/revert-"


def open_revert(runtime: Runtime, name: str, history_id: int, mode: str, *, reverted: str,
                by: str = "") -> Revert:
    """Open the revert of `name` back to history entry `history_id`, from the revision `reverted` (what
    the app ran before the rollback); records and returns it. Errors name what is missing."""
    # lazy: cold start (the git write-back and dulwich: only a revert writes or reads git)
    from tidecd.images import writeback

    if mode not in MODES:
        raise PermanentError(f"field revert: {mode!r} is not one of {', '.join(MODES)}")
    app = runtime.app(name)
    entry = next((h for h in app_state.load(runtime.store, name)[0].history if h.id == history_id), None)
    if entry is None:
        raise NotFound(f"app {name!r} has no history entry {history_id}")
    source = _git_source(app)
    if mode == PUSH and app.annotation(ALLOW_PUSH) != "allow":
        raise PermanentError(f"app {name!r}: pushing a revert to its branch needs the annotation "
                             f'{ALLOW_PUSH}: "allow"; ask for a pull request (revert: pr) instead')
    if not reverted or reverted == entry.revision:
        raise PermanentError(f"app {name!r} already runs revision {entry.revision[:12] or '?'}: nothing to revert")
    github_target = _github(runtime, app) if mode == PR else None
    creds = runtime.repo_credentials(source.repo_url)
    refs = git.ls_remote(source.repo_url, creds)
    base = _branch(app, refs)
    paths = revert_paths(app)
    old_repo, old_commit = git.fetch_commit(source.repo_url, entry.revision, creds)
    wanted = {p: writeback.tree_entry(old_repo, old_commit.tree, p) for p in paths}
    branch = "" if mode == PUSH else f"{BRANCH_PREFIX}{name}-{entry.revision[:12]}"[:200]
    message = (f"Revert {name} to {entry.revision[:12]}\n\n"
               f"tidecd rolled {name} back from {reverted[:12]} to {entry.revision[:12]} (history {entry.id}"
               f"{', by ' + by if by else ''}). This restores {', '.join(p or '/' for p in paths)} as "
               f"{entry.revision[:12]} had it, the image updater's write-back included. Until it merges, "
               "automated sync and the image updater hold at the rolled-back revision.\n")

    def entries(repo: MemoryRepo, head: Any) -> dict[str, writeback.Entry]:
        budget = [MAX_OBJECTS]
        for found in wanted.values():
            if found is not None:
                _copy(old_repo, repo, found[1], budget)
        return dict(wanted)

    author = writeback.Author(runtime.settings.git_commit_user, runtime.settings.git_commit_email)
    commit = writeback.push_entries(source.repo_url, creds, base=base, target=branch or base, entries=entries,
                                    message=message, author=author)
    if not commit:
        existing = git.ls_remote(source.repo_url, creds).get(f"refs/heads/{branch}") if branch else None
        if not existing:
            raise PermanentError(f"app {name!r}: {base} already has {', '.join(p or '/' for p in paths)} as "
                                 f"{entry.revision[:12]} had it: nothing to revert")
        commit = existing  # an earlier request pushed this revert already: open (or find) its pull request
    record = Revert(app=name, mode=mode, phase=OPEN, repo=redact_repo_url(source.repo_url), base=base,
                    commit=commit, reverted=reverted, revision=entry.revision, history_id=entry.id,
                    expected=tuple((p, _hex(e)) for p, e in sorted(wanted.items())),
                    branch=branch, opened_at=now_iso(), seen_head=refs.get(f"refs/heads/{base}", ""))
    if github_target is not None:
        number, page = _open_pull(github_target, base=base, head=branch, message=message)
        record = dataclasses.replace(record, pull=Pull(github_target[1].full_name, number, page))
    _save(runtime, record)
    log.info("revert opened", app=name, mode=mode, commit=commit[:12], pull=record.pull.number, base=base)
    return record


def revert_paths(app: Application) -> list[str]:
    """What a revert restores: the app's path, and the image updater's git write-back target when it lies
    outside it (a helm values file named from the repository's root)."""
    # lazy: cold start (the git write-back and dulwich: only a revert writes or reads git)
    from tidecd.images import writeback

    source = app.source
    app_path = writeback.repo_path("", source.path or ".")
    paths = [app_path]
    config, _ = notes.parse(dict(app.annotations)) if notes.is_managed(dict(app.annotations)) else (None, [])
    if config is not None and config.write_back.method is notes.Method.GIT and config.write_back.target_path:
        target = writeback.repo_path(app_path, config.write_back.target_path)
        if app_path and not (target == app_path or target.startswith(app_path + "/")):
            paths.append(target)
    return paths


def summary(runtime: Runtime, name: str) -> dict[str, Any]:
    """The app's latest revert for the api and the pages ({} when it has none). A revert still holding
    whose app a person synced since (its last operation is no rollback) says the hold is gone."""
    record, _ = revert_state.load(runtime.store, name)
    if record is None:
        return {}
    shown = record.summary()
    op = app_state.load(runtime.store, name)[0].operation
    if record.holding and op is not None and not op.request.rollback:
        shown["message"] = (f"the revert {record.pull.url or record.commit[:12]} is {record.phase}, but the app was "
                            f"synced since ({op.request.initiated_by or 'by hand'}): nothing holds it")
    return shown


def automatic(runtime: Runtime, app: Application) -> tuple[dict[str, Any], str]:
    """For `app get`: the app's last automatic rollback ({} when none), and why its annotation cannot be
    read ("" when it can, or when there is none)."""
    # lazy: cold start (the step's auto-rollback rule: only an app that carries the annotation)
    from tidecd.step import autorollback

    text = app.annotation(autorollback.ANNOTATION)
    if not text:
        return {}, ""
    try:
        autorollback.parse(text)
        problem = ""
    except ValueError as exc:
        problem = str(exc)
    record, _ = autorollback_state.load(runtime.store, app.name)
    if not record.rolled_back:
        return {}, problem
    return {"revision": record.rolled_back, "to": record.to_revision, "at": record.at, "reason": record.reason,
            "operationId": record.operation_id, "revert": record.revert_outcome or (
                "waiting for the rollback to end" if record.revert else "none")}, problem


# --- noticing the merge ------------------------------------------------------------------------------------


def on_pull_request(payload: Mapping[str, Any], runtime: Runtime, dispatcher: Dispatcher) -> dict[str, str]:
    """A `pull_request` delivery: a revert's pull request closed (merged or not) settles it. {app: phase}."""
    pull = payload.get("pull_request")
    repo = payload.get("repository")
    if payload.get("action") != "closed" or not isinstance(pull, dict) or not isinstance(repo, dict):
        return {}
    number, full_name = pull.get("number"), str(repo.get("full_name") or "").lower()
    settled: dict[str, str] = {}
    for record in revert_state.holding(runtime.store):
        if record.mode == PR and record.pull.number == number and record.pull.repo.lower() == full_name:
            done = settle(runtime, record.app, MERGED if pull.get("merged") is True else CLOSED, dispatcher)
            settled[record.app] = done.phase if done is not None else OPEN
    return settled


def check_all(runtime: Runtime, dispatcher: Dispatcher,
              ls_remote: Callable[[str, Any], dict[str, str]] = git.ls_remote) -> dict[str, str]:
    """The poll's check of every open revert: {app: phase} of those that settled; problems are logged."""
    settled = open_automatic(runtime)
    for record in revert_state.holding(runtime.store):
        try:
            verdict = _verdict(runtime, record, ls_remote)
            done = settle(runtime, record.app, verdict, dispatcher) if verdict else None
        except TidecdError as exc:
            log.warning("revert not checked", app=record.app, error=str(exc))
            continue
        if done is not None and done.phase != OPEN:
            settled[record.app] = done.phase
    return settled


def open_automatic(runtime: Runtime) -> dict[str, str]:
    """The reverts automatic rollbacks ask for (`step.autorollback`: the step may not write git), once each
    rollback operation has ended: {app: "opened"} for each opened; one try, its outcome recorded."""
    opened: dict[str, str] = {}
    for name in autorollback_state.apps(runtime.store):
        record, generation = autorollback_state.load(runtime.store, name)
        if not record.rolled_back or not record.revert or record.revert_outcome or not record.history_id:
            continue
        op = app_state.load(runtime.store, name)[0].operation
        if op is not None and op.id == record.operation_id and op.running:
            continue  # the rollback still runs: its end switches automated sync off, then the revert holds it
        try:
            open_revert(runtime, name, record.history_id, record.revert, reverted=record.rolled_back,
                        by="auto-rollback")
            outcome = "opened"
            opened[name] = outcome
        except TidecdError as exc:
            log.warning("automatic rollback's revert not opened", app=name, error=str(exc))
            outcome = str(exc)[:500]
        try:
            autorollback_state.save(runtime.store, dataclasses.replace(record, revert_outcome=outcome),
                                    if_generation_match=generation)
        except PreconditionFailed:
            log.info("automatic rollback's record changed meanwhile", app=name)
    return opened


def _verdict(runtime: Runtime, record: Revert, ls_remote: Callable[[str, Any], dict[str, str]]) -> str:
    """MERGED when the branch has the restored tree, CLOSED when the pull request was closed without it,
    "" while it is open."""
    # lazy: cold start (the git write-back and dulwich: only a revert writes or reads git)
    from tidecd.images import writeback

    app = runtime.app(record.app)
    creds = runtime.repo_credentials(app.source.repo_url)
    head = ls_remote(app.source.repo_url, creds).get(f"refs/heads/{record.base}", "")
    if head and head != record.seen_head:
        repo, commit = git.fetch_commit(app.source.repo_url, head, creds)
        found = {p: writeback.tree_entry(repo, commit.tree, p) for p, _ in record.expected}
        if all(_hex(found[p]) == want for p, want in record.expected):
            return MERGED
        _update(runtime, record.app, lambda r: dataclasses.replace(r, seen_head=head))
    if record.mode == PR and record.pull.number:
        target = _github(runtime, app)
        from tidecd.clients import github  # lazy: cold start (PyGithub only for a revert's pull request)

        info = github.GitHub(github.PyGithubApi(target[0]), runtime.store).pull(target[1], record.pull.number)
        if info is not None and info.state == "closed":
            return CLOSED
    return ""


def settle(runtime: Runtime, name: str, verdict: str, dispatcher: Dispatcher) -> Revert | None:
    """Apply a verdict to the app's open revert. MERGED lifts the hold (unless the rollback operation still
    runs: then nothing changes and a later poll lifts it); CLOSED records it and keeps the hold."""
    record, _ = revert_state.load(runtime.store, name)
    if record is None or record.phase != OPEN:
        return record
    if verdict == CLOSED:
        closed = _update(runtime, name, lambda r: dataclasses.replace(r, phase=CLOSED, settled_at=now_iso()))
        log.info("revert closed unmerged", app=name, pull=record.pull.number)
        return closed
    current, _ = app_state.load(runtime.store, name)
    if current.operation is not None and current.operation.running:
        log.info("revert merged; the hold lifts after the running operation", app=name)
        return record
    _lift(runtime, name, record)
    merged = _update(runtime, name, lambda r: dataclasses.replace(r, phase=MERGED, settled_at=now_iso()))
    failed = dispatcher.dispatch([Refresh(name, "revert merged")])
    if failed:
        log.warning("refresh after the revert merged failed", app=name, error=failed.get(name, ""))
    log.info("revert merged: hold lifted", app=name, pull=record.pull.number)
    return merged


def _lift(runtime: Runtime, name: str, record: Revert) -> None:
    """Automated sync back on; the images unpinned, with what the revert took out of git refused."""
    while True:
        current, generation = app_state.load(runtime.store, name)
        if not current.automation.disabled:
            break
        current.automation = dataclasses.replace(current.automation, disabled=False)
        try:
            app_state.save(runtime.store, current, if_generation_match=generation)
            break
        except PreconditionFailed:
            continue
    app = runtime.app(name)
    if not notes.is_managed(dict(app.annotations)):
        return
    # lazy: cold start (the image updater's tick module: only a revert of an app it manages)
    from tidecd.usecases.images import images_at

    try:
        before = set(images_at(runtime, app, record.reverted) or [])
        after = set(images_at(runtime, app, record.revision) or [])
    except TidecdError as exc:  # a revision that no longer renders: nothing to refuse, the pin still goes
        log.warning("revert: images of the reverted revision unknown", app=name, error=str(exc)[:300])
        before = after = set()
    images_state.unpin(runtime.store, name, refuse=sorted(before - after))


# --- helpers -----------------------------------------------------------------------------------------------


def _git_source(app: Application) -> Any:
    if app.sources:
        raise PermanentError(f"app {app.name!r} has several sources: a revert needs one git source")
    if app.source.chart:
        raise PermanentError(f"app {app.name!r}: its source is a chart repository, not git: nothing to revert")
    return app.source


def _branch(app: Application, refs: dict[str, str]) -> str:
    # lazy: cold start (the image updater's tick module: its default-branch rule)
    from tidecd.usecases.images import default_branch

    base = app.source.target_revision
    if base in ("", "HEAD"):
        base = default_branch(refs)
    base = base.removeprefix("refs/heads/")
    if f"refs/heads/{base}" not in refs:
        raise PermanentError(f"app {app.name!r}: targetRevision {app.source.target_revision!r} is not a branch of "
                             f"{redact_repo_url(app.source.repo_url)}: a revert needs a branch to go to")
    return base


def _github(runtime: Runtime, app: Application) -> tuple[Any, Any]:
    """(auth, repo) for the app's pull requests; a clear error when GitHub cannot take one."""
    from tidecd.clients import github  # lazy: cold start (PyGithub only for a revert's pull request)

    auth = github.auth_from_secrets(runtime.secrets(), runtime.settings.github_api_url)
    if auth is None:
        raise ConfigError(f"app {app.name!r}: a revert pull request needs a Secret labelled "
                          "argocd.argoproj.io/secret-type: github in the config source")
    repo = github.repo_of(app.source.repo_url, auth.api_url)
    if repo is None:
        raise ConfigError(f"app {app.name!r}: {redact_repo_url(app.source.repo_url)} is not a GitHub repository: "
                          f"no pull request can be opened (push the revert where {ALLOW_PUSH} allows it)")
    return auth, repo


def _open_pull(target: tuple[Any, Any], *, base: str, head: str, message: str) -> tuple[int, str]:
    from tidecd.clients import github  # lazy: cold start (PyGithub only for a revert's pull request)

    auth, repo = target
    title, _, body = message.partition("\n")
    with github.translated_errors():
        gh_repo = github.PyGithubApi(auth).api.get_repo(repo.full_name)
        return github.ensure_pull(gh_repo, repo, base=base, head=head, title=title, body=body.strip())


def _copy(source: MemoryRepo, target: MemoryRepo, object_id: bytes, budget: list[int]) -> None:
    """Copy a tree (and everything under it) or a blob between in-memory repositories, within `budget`."""
    # lazy: cold start (dulwich only when a repository is fetched or written)
    from dulwich.objects import ObjectID, Tree

    stack = [ObjectID(object_id)]
    while stack:
        oid = stack.pop()
        if oid in target.object_store:
            continue
        budget[0] -= 1
        if budget[0] < 0:
            raise PermanentError(f"the revert would copy more than {MAX_OBJECTS} objects: the app's path is too "
                                 "large to revert here; revert it in git by hand")
        obj = source.object_store[oid]
        target.object_store.add_object(obj)
        if isinstance(obj, Tree):
            stack.extend(ObjectID(item.sha) for item in obj.items() if item.mode != 0o160000)  # not submodules


def _hex(entry: tuple[int, bytes] | None) -> str:
    return entry[1].decode() if entry is not None else ""


def _save(runtime: Runtime, record: Revert) -> None:
    while True:
        _, generation = revert_state.load(runtime.store, record.app)
        try:
            revert_state.save(runtime.store, record, if_generation_match=generation)
            return
        except PreconditionFailed:
            continue


def _update(runtime: Runtime, name: str, change: Callable[[Revert], Revert]) -> Revert | None:
    while True:
        record, generation = revert_state.load(runtime.store, name)
        if record is None:
            return None
        new = change(record)
        try:
            revert_state.save(runtime.store, new, if_generation_match=generation)
            return new
        except PreconditionFailed:
            continue

