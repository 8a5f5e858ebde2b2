"""The dashboard's "New app" and "Edit" forms: Argo CD's create fields, written to git, never to the store.

Both build the Application manifest (`usecases.app_write.manifest`) and hand it to `app_write.save`, which
checks it as the config source would be read, asks RBAC (`applications, create|update, PROJECT/NAME`), and
commits it to the config source authored by the logged-in principal. A problem re-shows the form with what
was typed, the message naming the field, and that field marked. Every POST is CSRF-checked by `ui.handle`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from tidecd.base.errors import NotFound, TidecdError
from tidecd.ui import Context, Page, error_page, redirect, render, route, who
from tidecd.usecases import app_write, authz

_NAME = r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,252})"
# each form field and the manifest field a problem names it by
FIELDS = {"name": "metadata.name", "project": "spec.project", "repoURL": "spec.source.repoURL",
          "targetRevision": "spec.source.targetRevision", "path": "spec.source.path", "chart": "spec.source.chart",
          "server": "spec.destination", "namespace": "spec.destination"}


def _values(form: app_write.AppForm) -> dict[str, Any]:
    return {"name": form.name, "project": form.project, "repoURL": form.repo_url,
            "targetRevision": form.target_revision, "path": form.path, "chart": form.chart, "server": form.server,
            "namespace": form.namespace, "automated": form.automated, "prune": form.prune,
            "selfHeal": form.self_heal, "createNamespace": form.create_namespace}


def _form(ctx: Context, values: dict[str, Any], *, editing: str = "", problem: str = "", status: int = 200,
          pull: str = "") -> Page:
    invalid = {field for field, path in FIELDS.items() if f": {path}" in problem}
    projects = sorted(ctx.runtime.config().projects)
    return render("app_form.html", ctx, status, active="apps", values=values, editing=editing, problem=problem,
                  invalid=invalid, projects=projects, pull=pull)


@route("GET", "/new-app")
def new_app(ctx: Context) -> Page:
    return _form(ctx, _values(app_write.AppForm(name="", repo_url="")))


@route("POST", "/new-app")
def create_app(ctx: Context) -> Page:
    return _save(ctx, create=True)


@route("GET", f"/apps/{_NAME}/edit")
def edit_app(ctx: Context) -> Page:
    name = ctx.match["name"]
    try:
        app = authz.app_for(ctx.runtime, who(ctx), name, "update")
        values = _values(app_write.form_of(app))
    except NotFound:
        raise
    except TidecdError as exc:
        return error_page(ctx.runtime, ctx.identity, 403 if "permission denied" in str(exc) else 400, str(exc))
    return _form(ctx, values, editing=name)


@route("POST", f"/apps/{_NAME}/edit")
def update_app(ctx: Context) -> Page:
    return _save(ctx, create=False)


def _save(ctx: Context, *, create: bool) -> Page:
    fields = dict(ctx.request.form)
    editing = "" if create else ctx.match["name"]
    if editing:
        fields["name"] = editing  # renaming is a new app: the name of an edited app is the page's
    form = app_write.form_from(fields)
    try:
        saved = app_write.save(ctx.runtime, who(ctx), app_write.manifest(form), create=create)
    except NotFound:
        raise
    except TidecdError as exc:
        status = 403 if "permission denied" in str(exc) else 400
        return _form(ctx, _values(form), editing=editing, problem=str(exc), status=status)
    if saved.pull and create:  # not in the config yet: no app page to show until the pull request merges
        return _form(ctx, _values(form), pull=saved.pull)
    return redirect(f"/ui/apps/{quote(saved.app)}?notice={'app-pull-request' if saved.pull else 'app-committed'}")
