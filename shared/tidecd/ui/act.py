"""The dashboard's acting pages: the sync panel, and the confirmations a rollback and a terminate ask for.

An action never happens on one click: its button opens a page saying what will happen (a rollback names
the revision it goes back to and says it turns automated sync off), and only that page's own form, which
carries `confirm=yes`, acts. The step is on the server, so it holds without JavaScript; a POST without
`confirm` (an old page's button) shows the same page. Every POST is CSRF-checked by `ui.handle` first.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from tidecd.base.errors import PermanentError, PermissionDenied, TidecdError
from tidecd.base.model import ResourceKey
from tidecd.state import app as app_state
from tidecd.ui import Context, Page, actions, app_context, done_page, error_page, flag, redirect, render, route, who
from tidecd.usecases import authz, resource_actions, resources
from tidecd.usecases.commands import OPERATION_OPTIONS

_NAME = r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,252})"
REVISION_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/-")


def _refused(ctx: Context) -> Page | None:
    """A caller who may not sync the app (Argo CD's `applications, sync`, which rollback and terminate need
    too) gets a 403 before any panel or confirmation is shown."""
    try:
        authz.app_for(ctx.runtime, who(ctx), ctx.match["name"], "sync")
    except PermissionDenied as exc:
        return error_page(ctx.runtime, ctx.identity, 403, str(exc))
    return None


def _confirmed(ctx: Context) -> bool:
    return ctx.request.method == "POST" and ctx.request.form.get("confirm", "") == "yes"


def resource_value(key: ResourceKey) -> str:
    """A resource as the panel's checkbox names it: GROUP/KIND/NAMESPACE/NAME."""
    return f"{key.group}/{key.kind}/{key.namespace}/{key.name}"


OPTION_FIELDS = {"Replace=true": "replace", "Force=true": "force", "ApplyOutOfSyncOnly=true": "apply_out_of_sync_only"}
assert set(OPTION_FIELDS) == set(OPERATION_OPTIONS)  # the panel offers every option of one sync


@route("GET", f"/apps/{_NAME}/sync")
def sync_panel(ctx: Context) -> Page:
    return _panel(ctx)


def _panel(ctx: Context, problem: str = "") -> Page:
    if (refused := _refused(ctx)) is not None:
        return refused
    values = app_context(ctx)
    form = ctx.request.form if ctx.request.method == "POST" else ctx.request.query
    current: app_state.AppState = values["state"]
    chosen = _chosen(ctx)
    resources = [(resource_value(r.key), str(r.key), str(r.status), resource_value(r.key) in chosen)
                 for r in current.resources]
    return render("sync.html", ctx, 400 if problem else 200, active="apps", resources=resources, problem=problem,
                  options=OPERATION_OPTIONS, form=form, **values)


def _chosen(ctx: Context) -> set[str]:
    """The resources ticked: one checkbox each, named `resource:GROUP/KIND/NAMESPACE/NAME` (a form reaches
    the dashboard as single values, so a repeated field would keep only one)."""
    form = ctx.request.form if ctx.request.method == "POST" else ctx.request.query
    return {k.removeprefix("resource:") for k, v in form.items() if k.startswith("resource:") and v == "on"}


@route("POST", f"/apps/{_NAME}/sync")
def sync(ctx: Context) -> Page:
    if not _confirmed(ctx):
        return _panel(ctx)
    form = ctx.request.form
    revision = form.get("revision", "").strip()
    if len(revision) > 255 or not set(revision) <= REVISION_CHARS:
        return _panel(ctx, "field revision: a sha, tag or branch name (letters, digits, . _ / -)")
    options = tuple(o for o in OPERATION_OPTIONS if flag(ctx, OPTION_FIELDS[o]))
    wanted = _chosen(ctx)
    name = ctx.match["name"]
    current = app_state.load(ctx.runtime.store, name)[0]
    known = {resource_value(r.key): r.key for r in current.resources}
    unknown = sorted(wanted - known.keys())
    if unknown:
        return _panel(ctx, f"field resource: app {name!r} has no resource {unknown[0]!r} (refresh the app)")
    done = actions.sync(ctx.runtime, name, who(ctx), prune=flag(ctx, "prune"), dry_run=flag(ctx, "dry_run"),
                        resources=frozenset(known[v] for v in wanted) or None,
                        revision=revision if revision != values_target(ctx) else "", sync_options=options)
    return done_page(ctx, done)


def values_target(ctx: Context) -> str:
    """The app's targetRevision: choosing it is no pinned revision (automated sync stays as it is)."""
    return ctx.runtime.app(ctx.match["name"]).source.target_revision


@route("GET", f"/apps/{_NAME}/rollback")
def rollback_page(ctx: Context) -> Page:
    return rollback(ctx)


@route("POST", f"/apps/{_NAME}/rollback")
def rollback(ctx: Context) -> Page:
    form = ctx.request.form if ctx.request.method == "POST" else ctx.request.query
    wanted = form.get("id", "")
    if not wanted.isdigit():
        return error_page(ctx.runtime, ctx.identity, 400, "field id (a history id) is required")
    revert = form.get("revert", "")
    if revert not in ("", "pr", "push"):
        return error_page(ctx.runtime, ctx.identity, 400, "field revert must be pr or push")
    if _confirmed(ctx):
        return done_page(ctx, actions.rollback(ctx.runtime, ctx.match["name"], who(ctx), int(wanted), revert=revert))
    values = app_context(ctx)
    current: app_state.AppState = values["state"]
    entry = next((h for h in current.history if h.id == int(wanted)), None)
    if entry is None:
        return error_page(ctx.runtime, ctx.identity, 404, f"app {ctx.match['name']!r} has no history entry {wanted}")
    return _confirm(ctx, values, "rollback", entry=entry, revert_mode=revert,
                    fields={"id": wanted, **({"revert": revert} if revert else {})})


@route("GET", f"/apps/{_NAME}/terminate")
def terminate_page(ctx: Context) -> Page:
    return terminate(ctx)


@route("POST", f"/apps/{_NAME}/terminate")
def terminate(ctx: Context) -> Page:
    if _confirmed(ctx):
        return done_page(ctx, actions.terminate(ctx.runtime, ctx.match["name"], who(ctx)))
    return _confirm(ctx, app_context(ctx), "terminate", fields={})


def _confirm(ctx: Context, values: dict[str, Any], what: str, *, fields: dict[str, str], **more: Any) -> Page:
    if (refused := _refused(ctx)) is not None:
        return refused
    return render("confirm.html", ctx, active="apps", what=what, fields=fields, **values, **more)


# -- resource actions --------------------------------------------------------------------------------------

ACTION_SAYS = {
    "restart": "sets the pod template's kubectl.kubernetes.io/restartedAt annotation to now: the controller "
               "replaces every pod (a Deployment rolls a new ReplicaSet), as `kubectl rollout restart` does",
    "scale": "sets spec.replicas; git is not changed, so the app reads OutOfSync until git agrees "
             "(self-heal, where on, puts it back)",
    "delete": "deletes the object from the cluster now (in the background); an object git has is created "
              "again by the next sync",
}


def _key(ctx: Context) -> ResourceKey:
    source = ctx.request.form if ctx.request.method == "POST" else ctx.request.query
    return resources.key_of(source)


def _key_fields(key: ResourceKey) -> dict[str, str]:
    return {"group": key.group, "kind": key.kind, "namespace": key.namespace, "name": key.name}


@route("GET", f"/apps/{_NAME}/resource/actions")
def resource_actions_page(ctx: Context) -> Page:
    key = _key(ctx)
    try:
        offered = resource_actions.list_actions(ctx.runtime, who(ctx), ctx.match["name"], key)
    except TidecdError as exc:
        return done_page(ctx, actions.error(exc))
    return render("resource_actions.html", ctx, active="apps", app_name=ctx.match["name"], key=key,
                  fields=_key_fields(key), offered=offered, says=ACTION_SAYS, notice=ctx.request.query.get("done", ""),
                  asked="", params={})


@route("POST", f"/apps/{_NAME}/resource/actions")
def resource_action(ctx: Context) -> Page:
    key, name = _key(ctx), ctx.match["name"]
    action = ctx.request.form.get("action", "")
    params = {"replicas": ctx.request.form["replicas"]} if "replicas" in ctx.request.form else {}
    if not _confirmed(ctx):
        try:
            offered = {a.name for a in resource_actions.list_actions(ctx.runtime, who(ctx), name, key)}
            if action not in offered:
                raise PermanentError(f"{key} has no action {action!r} (it has: {', '.join(sorted(offered))})")
            if action == "scale":
                resource_actions.replicas_of(params)
        except TidecdError as exc:
            return done_page(ctx, actions.error(exc))
        return render("resource_actions.html", ctx, active="apps", app_name=name, key=key, fields=_key_fields(key),
                      offered=[], says=ACTION_SAYS, asked=action, params=params, notice="")
    try:
        done = resource_actions.run_action(ctx.runtime, who(ctx), name, key, action, params)
    except TidecdError as exc:
        return done_page(ctx, actions.error(exc))
    query = urlencode({**_key_fields(key), "done": done["message"]})
    return redirect(f"/ui/apps/{quote(name)}/resource/actions?{query}")
