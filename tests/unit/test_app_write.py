"""Creating or changing an app from the dashboard or the api (`tidecd.usecases.app_write`): the manifest a
form builds, the checks that name the field, RBAC before any git is touched, and the file a change rewrites."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tidecd import ui
from tidecd.base.errors import ConfigError, PermissionDenied
from tidecd.base.principal import ADMIN, READONLY
from tidecd.clients.store import MemoryStore
from tidecd.config.load import ConfigSourceRef, load_config
from tidecd.runtime import Runtime, Settings
from tidecd.ui import auth
from tidecd.usecases import api, app_write

SOURCE = "https://git.example.invalid/config.git#main:apps"
PROJECT = {"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "team"},
           "spec": {"sourceRepos": ["https://git.example.invalid/team/*"],
                    "destinations": [{"server": "https://kubernetes.default.svc", "namespace": "team-*"}]}}


def _runtime(tmp_path: Path) -> Runtime:
    (tmp_path / "project.yaml").write_text(yaml.safe_dump(PROJECT))
    return Runtime.of(Settings(config=SOURCE, api_token="t"), MemoryStore(), config=load_config(tmp_path))


def _form(**changes: object) -> app_write.AppForm:
    fields = {"name": "web", "repo_url": "https://git.example.invalid/team/web.git", "project": "team",
              "path": "deploy", "namespace": "team-web"} | changes
    return app_write.AppForm(**fields)  # type: ignore[arg-type]


def test_the_form_builds_argo_cds_manifest_with_its_sync_policy() -> None:
    fields = {"name": "web", "repoURL": "https://g/x.git", "path": "deploy", "namespace": "web",
              "automated": "on", "prune": "on", "createNamespace": "on"}
    doc = app_write.manifest(app_write.form_from(fields))
    assert doc == {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "web"},
                   "spec": {"project": "default",
                            "source": {"repoURL": "https://g/x.git", "targetRevision": "HEAD", "path": "deploy"},
                            "destination": {"server": "https://kubernetes.default.svc", "namespace": "web"},
                            "syncPolicy": {"automated": {"prune": True, "selfHeal": False},
                                           "syncOptions": ["CreateNamespace=true"]}}}
    chart = app_write.manifest(app_write.AppForm(name="c", repo_url="https://charts.example", chart="nginx"))
    assert chart["spec"]["source"] == {"repoURL": "https://charts.example", "targetRevision": "HEAD",
                                       "chart": "nginx"}
    assert "syncPolicy" not in chart["spec"]


def test_a_loaded_app_round_trips_through_the_edit_form(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    doc = app_write.manifest(_form(automated=True, self_heal=True, create_namespace=True))
    app = app_write.check(runtime, doc, "apps/web.yaml")
    assert app_write.manifest(app_write.form_of(app)) == doc


def test_each_problem_names_the_field(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    with pytest.raises(ConfigError, match=r"apps/web.yaml: Application/web: spec.source.repoURL: source repository "
                                          r"'https://elsewhere.invalid/x.git' is not permitted by project 'team'"):
        app_write.check(runtime, app_write.manifest(_form(repo_url="https://elsewhere.invalid/x.git")),
                        "apps/web.yaml")
    with pytest.raises(ConfigError, match=r"spec.destination: destination server .* namespace 'prod' is not "
                                          r"permitted by project 'team'"):
        app_write.check(runtime, app_write.manifest(_form(namespace="prod")), "apps/web.yaml")
    with pytest.raises(ConfigError, match=r"spec.project: project 'nope' is not defined"):
        app_write.check(runtime, app_write.manifest(_form(project="nope")), "apps/web.yaml")
    with pytest.raises(ConfigError, match=r"Application/Web_1: metadata.name: 'Web_1' is not a valid name"):
        app_write.check(runtime, app_write.manifest(_form(name="Web_1")), "apps/web.yaml")
    bad = app_write.manifest(_form())
    bad["spec"]["destination"] = "here"
    with pytest.raises(ConfigError, match=r"apps/web.yaml: Application/web: spec.destination"):
        app_write.check(runtime, bad, "apps/web.yaml")


def test_rbac_refuses_before_any_git_is_touched(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)  # the config repo does not resolve: a refusal must come first
    with pytest.raises(PermissionDenied, match=r"applications, create, team/web, sub: readonly"):
        app_write.save(runtime, READONLY, app_write.manifest(_form()), create=True)


def test_a_name_taken_or_a_directory_config_source_is_refused(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    (tmp_path / "web.yaml").write_text(yaml.safe_dump(app_write.manifest(_form())))
    taken = Runtime.of(runtime.settings, MemoryStore(), config=load_config(tmp_path))
    with pytest.raises(ConfigError, match=r"metadata.name: an app 'web' already exists"):
        app_write.save(taken, ADMIN, app_write.manifest(_form()), create=True)
    local = Runtime.of(Settings(config=str(tmp_path)), MemoryStore(), config=load_config(tmp_path))
    with pytest.raises(ConfigError, match=r"is a directory: apps are created from the dashboard only in a config "
                                          r"source in git"):
        app_write.save(local, ADMIN, app_write.manifest(_form(name="other")), create=True)


def test_a_change_rewrites_only_its_document_of_the_file_it_came_from() -> None:
    source = ConfigSourceRef("https://git.example.invalid/config.git", "main", "apps")
    assert app_write._file_of(source, "web", f"{source}/team/web.yaml") == "apps/team/web.yaml"
    with pytest.raises(Exception, match="outside the main config source"):
        app_write._file_of(source, "web", "https://other.invalid/x.git#main:web.yaml")
    text = yaml.safe_dump_all([PROJECT, {"kind": "Application", "metadata": {"name": "web"}, "spec": {}}])
    new = {"kind": "Application", "metadata": {"name": "web"}, "spec": {"project": "team"}}
    docs = list(yaml.safe_load_all(app_write.replaced(text, new, "web")))
    assert docs == [PROJECT, new]


HOST = "dash.example"


def _session(runtime: Runtime, token: str) -> tuple[str, str]:
    """(cookie, CSRF token) of a dashboard session, and the New app form it shows."""
    page = ui.handle(ui.Request("POST", "/ui/login", {"Host": HOST, "Origin": f"https://{HOST}"},
                                form={"token": token, "next": "/ui/new-app"}), runtime)
    cookie = next(v for k, v in page.headers if k == "Set-Cookie").split(";")[0]
    html = ui.handle(ui.Request("GET", "/ui/new-app", {"Host": HOST, "Cookie": cookie}), runtime).body.decode()
    assert 'name="repoURL"' in html and 'name="createNamespace"' in html and "team" in html  # project choices
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    return cookie, found.group(1) if found else ""


def test_the_form_shows_the_problem_on_its_field_and_refuses_a_reader(tmp_path: Path) -> None:
    base = _runtime(tmp_path)
    runtime = Runtime.of(Settings(config=SOURCE, api_token="admin-t0ken", api_readonly_token="read-t0ken"),
                         MemoryStore(), config=base.config())
    fields = {"name": "web", "project": "team", "repoURL": "https://git.example.invalid/team/web.git",
              "path": "deploy", "server": "https://kubernetes.default.svc", "namespace": "prod"}
    cookie, csrf = _session(runtime, "admin-t0ken")
    headers = {"Host": HOST, "Cookie": cookie, "Origin": f"https://{HOST}"}
    page = ui.handle(ui.Request("POST", "/ui/new-app", headers, form={**fields, "csrf": csrf}), runtime)
    html = page.body.decode()
    assert page.status == 400 and "spec.destination: destination server" in html
    assert re.search(r'name="namespace"[^>]*value="prod"[^>]*aria-invalid=true', html)  # what was typed, marked
    assert not re.search(r'name="repoURL"[^>]*aria-invalid', html)
    no_csrf = ui.handle(ui.Request("POST", "/ui/new-app", headers, form=fields), runtime)
    assert no_csrf.status == 403
    read_cookie, _ = _session(runtime, "read-t0ken")
    session = auth.identify(ui.tokens_of(runtime), {"Cookie": read_cookie})
    assert session is not None
    refused = ui.handle(ui.Request("POST", "/ui/new-app", {**headers, "Cookie": read_cookie},
                                   form={**fields, "namespace": "team-web", "csrf": session.csrf}), runtime)
    assert refused.status == 403 and "permission denied" in refused.body.decode()


def test_the_api_routes_post_and_put_beside_get_and_answers_a_bad_manifest_naming_the_field(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    headers = {"Authorization": "Bearer t"}
    doc = app_write.manifest(_form(namespace="prod"))
    created = api.handle("POST", "/api/v1/apps", headers, json.dumps(doc).encode(), runtime)
    assert created.status == 400 and "spec.destination: destination server" in created.body["message"]
    changed = api.handle("PUT", "/api/v1/apps/other", headers, json.dumps(doc).encode(), runtime)
    assert changed.status == 400 and "metadata.name must be 'other'" in changed.body["message"]
    assert api.handle("DELETE", "/api/v1/apps", headers, b"", runtime).status == 405
