"""The dashboard without a browser or cluster: auth, CSRF, routes, filters, tree, diff view, masking."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidecd import ui
from tidecd.base.model import Action, HealthStatus, Manifest, ResourceKey, SyncStatus
from tidecd.base.principal import Principal
from tidecd.clients.secrets import MASK
from tidecd.clients.store import MemoryStore
from tidecd.runtime import Runtime, Settings
from tidecd.state import app as app_state
from tidecd.state import auditlog
from tidecd.ui import auth, diffview, tree, views

ADMIN, READ = "admin-t0ken", "read-t0ken"
HOST = "dash.example"


def application(name: str, project: str = "default", namespace: str = "web", repo: str = "https://github.com/o/r.git",
                cluster: str = "in-cluster") -> dict[str, Any]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": name},
            "spec": {"project": project, "source": {"repoURL": repo, "path": "deploy", "targetRevision": "main"},
                     "destination": {"name": cluster, "namespace": namespace}}}


class FakeLister:
    """The slice of the cluster the tree reads, holding a Deployment → ReplicaSet → Pod chain."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], list[Manifest]] = {
            ("apps", "Deployment"): [{"apiVersion": "apps/v1", "kind": "Deployment",
                                      "metadata": {"name": "web", "namespace": "web", "uid": "d1"},
                                      "spec": {"replicas": 1}, "status": {}}],
            ("apps", "ReplicaSet"): [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                      "metadata": {"name": "web-7f9", "namespace": "web", "uid": "r1",
                                                   "ownerReferences": [{"uid": "d1", "kind": "Deployment"}]},
                                      "spec": {"replicas": 1}, "status": {"readyReplicas": 1, "replicas": 1}},
                                     {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                      "metadata": {"name": "other", "namespace": "web", "uid": "r2",
                                                   "ownerReferences": [{"uid": "zz"}]}, "spec": {}}],
            ("", "Pod"): [{"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "web-7f9-abcde", "namespace": "web", "uid": "p1",
                                        "ownerReferences": [{"uid": "r1", "kind": "ReplicaSet"}]},
                           "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}],
        }
        self.calls: list[tuple[str, str, str]] = []

    def list(self, group: str, kind: str, *, namespace: str = "", label_selector: str = "") -> list[Manifest]:
        self.calls.append((group, kind, namespace))
        return [o for o in self.objects.get((group, kind), []) if o["metadata"]["namespace"] == namespace]


@pytest.fixture()
def runtime(tmp_path: Path) -> Runtime:
    (tmp_path / "apps.yaml").write_text(yaml.safe_dump_all([
        application("web"), application("api-" + "x" * 55, project="team", namespace="api", cluster="prod")]))
    (tmp_path / "project.yaml").write_text(yaml.safe_dump({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "team"},
        "spec": {"sourceRepos": ["https://github.com/o/*"], "destinations": [{"name": "prod", "namespace": "api"}]}}))
    store = MemoryStore()
    web = app_state.AppState(app="web", sync_status=SyncStatus.OUT_OF_SYNC, health=HealthStatus.HEALTHY,
                             revision="a" * 40)
    web.resources = [
        app_state.ResourceStatus("apps", "Deployment", "web", "web", SyncStatus.OUT_OF_SYNC, HealthStatus.HEALTHY,
                                 changed=["spec.replicas"],
                                 diff="--- live\n+++ desired\n@@ -1,2 +1,2 @@\n spec:\n"
                                      "-  replicas: 1\n+  replicas: 2\n"),
        app_state.ResourceStatus("", "Secret", "web", "creds", SyncStatus.OUT_OF_SYNC, None,
                                 diff="--- live\n+++ desired\n@@ -1,3 +1,3 @@\n data:\n-  password: aHVudGVyMg==\n"
                                      "+  password: c2VjcmV0\n kind: Secret\n"),
    ]
    web.set_inventory([(web.resources[0].key, 2)])
    web.add_history("b" * 40, "Succeeded", "deploy", "main")
    web.operation = app_state.Operation("o1", "a" * 40, app_state.OperationPhase.RUNNING, started_at="t0",
                                        step="wave 2: waiting for healthy state of apps/Deployment web/web",
                                        progress=app_state.Progress(wave=2),
                                        results=[app_state.TaskResult(web.resources[0].key, "Sync", 2, False,
                                                                      Action.CONFIGURED, app_state.TaskPhase.RUNNING)])
    web.memo.reconciled_at = "2999-01-01T00:00:00Z"  # just compared: a page watching it takes no step of its own
    app_state.save(store, web)
    from tidecd.source import Snapshots

    store.write(Snapshots.commit_key("https://github.com/o/r.git", "a" * 40),
                json.dumps({"subject": "web: two replicas <b>", "author": "Dev", "time": "t"}).encode())
    return Runtime.of(Settings(config=str(tmp_path), api_token=ADMIN, api_readonly_token=READ), store,
                      clusters={"in-cluster": FakeLister()})  # type: ignore[dict-item]


def get(runtime: Runtime, path: str, token: str = ADMIN, **query: str) -> ui.Page:
    headers = {"Authorization": f"Bearer {token}", "Host": HOST} if token else {"Host": HOST}
    return ui.handle(ui.Request("GET", path, headers, query), runtime)


def login(runtime: Runtime, token: str) -> tuple[str, str]:
    """(cookie header, CSRF token) of a session made through the login form."""
    page = ui.handle(ui.Request("POST", "/ui/login", {"Host": HOST, "Origin": f"https://{HOST}"},
                                form={"token": token, "next": "/ui/apps/web"}), runtime)
    assert page.status == 303 and ("Location", "/ui/apps/web") in page.headers
    set_cookie = next(v for k, v in page.headers if k == "Set-Cookie")
    assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie and "Path=/ui" in set_cookie
    cookie = set_cookie.split(";")[0]
    html = ui.handle(ui.Request("GET", "/ui/apps/web", {"Host": HOST, "Cookie": cookie}), runtime).body.decode()
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    return cookie, found.group(1) if found else ""


def post(runtime: Runtime, path: str, cookie: str, form: dict[str, str], origin: str | None = None) -> ui.Page:
    headers = {"Host": HOST, "Cookie": cookie}
    if origin is not None:
        headers["Origin"] = origin
    return ui.handle(ui.Request("POST", path, headers, form=form), runtime)


def test_pages_need_a_token_and_never_show_one(runtime: Runtime) -> None:
    anonymous = get(runtime, "/ui/apps/web", token="")
    assert anonymous.status == 303 and ("Location", "/ui/login?next=/ui/apps/web") in anonymous.headers
    assert get(runtime, "/ui/", token="wrong").status == 303
    for path in ("/ui/", "/ui/apps/web", "/ui/apps/web/live", "/ui/projects", "/ui/clusters"):
        page = get(runtime, path)
        assert page.status == 200, (path, page.body.decode()[-800:])
        assert ADMIN.encode() not in page.body and READ.encode() not in page.body
        assert ("X-Frame-Options", "DENY") in page.headers
        assert any(k == "Content-Security-Policy" and "script-src 'self'" in v for k, v in page.headers)


def test_login_rejects_a_bad_token_and_cross_site_forms(runtime: Runtime) -> None:
    bad = ui.handle(ui.Request("POST", "/ui/login", {"Host": HOST, "Origin": f"https://{HOST}"},
                               form={"token": "nope"}), runtime)
    assert bad.status == 401 and not any(k == "Set-Cookie" for k, _ in bad.headers)
    forged = ui.handle(ui.Request("POST", "/ui/login", {"Host": HOST, "Origin": "https://evil.example"},
                                  form={"token": ADMIN}), runtime)
    assert forged.status == 403
    open_redirect = ui.handle(ui.Request("POST", "/ui/login", {"Host": HOST, "Origin": f"https://{HOST}"},
                                         form={"token": ADMIN, "next": "//evil.example/x"}), runtime)
    assert ("Location", "/ui/") in open_redirect.headers


def test_sessions_are_signed_and_expire() -> None:
    tokens = auth.Tokens(ADMIN, READ)
    cookie = auth.new_session(tokens, auth.Role.READ, now=1000.0)
    read = auth.read_session(tokens, cookie, now=1001.0)
    assert read is not None and read.role is auth.Role.READ and read.principal.subject == "readonly"
    escalated = auth.new_session(auth.Tokens("guess", READ), auth.Role.ADMIN, now=1000.0)
    assert auth.read_session(tokens, escalated, now=1001.0) is None
    body, _, signature = cookie.rpartition(".")
    assert auth.read_session(tokens, body.replace("v2.", "v2.e") + "." + signature, now=1001.0) is None
    assert auth.read_session(tokens, cookie, now=1000.0 + auth.SESSION_SECONDS + 1) is None
    assert auth.read_session(auth.Tokens("rotated", READ), cookie, now=1001.0) is None
    assert auth.Tokens(ADMIN, READ).role_of(READ) is auth.Role.READ
    assert auth.Tokens(ADMIN, "").role_of("") is None


def test_actions_need_csrf_same_origin_and_the_admin_role(runtime: Runtime) -> None:
    cookie, csrf = login(runtime, ADMIN)
    assert csrf
    no_token = post(runtime, "/ui/apps/web/sync", cookie, {}, origin=f"https://{HOST}")
    assert no_token.status == 403 and b"CSRF" in no_token.body
    cross = post(runtime, "/ui/apps/web/sync", cookie, {"csrf": csrf}, origin="https://evil.example")
    assert cross.status == 403
    no_origin = post(runtime, "/ui/apps/web/sync", cookie, {"csrf": csrf})
    assert no_origin.status == 403
    same_site = ui.handle(ui.Request("POST", "/ui/apps/web/sync", {"Host": HOST, "Cookie": cookie,
                                                                     "Origin": f"https://{HOST}",
                                                                     "Sec-Fetch-Site": "same-site"},
                                     form={"csrf": csrf}), runtime)
    assert same_site.status == 403
    assert app_state.load(runtime.store, "web")[0].operation.id == "o1"  # type: ignore[union-attr]  # none started

    read_cookie, read_csrf = login(runtime, READ)
    read_page = ui.handle(ui.Request("GET", "/ui/apps/web", {"Host": HOST, "Cookie": read_cookie}), runtime)
    assert b"data-actions" not in read_page.body and b"Rollback\xe2\x80\xa6</button>" not in read_page.body
    session = auth.read_session(auth.Tokens(ADMIN, READ), read_cookie.partition("=")[2])
    assert session is not None and not read_csrf  # the page has no form: the session's own CSRF token
    refused = post(runtime, "/ui/apps/web/sync", read_cookie, {"csrf": session.csrf}, origin=f"https://{HOST}")
    assert refused.status == 403 and b"permission denied: applications, sync, default/web" in refused.body
    admin_page = ui.handle(ui.Request("GET", "/ui/apps/web", {"Host": HOST, "Cookie": cookie}), runtime)
    assert b"data-actions" in admin_page.body and b"Rollback\xe2\x80\xa6</button>" in admin_page.body


def test_a_person_sees_and_acts_on_what_argocd_rbac_allows(runtime: Runtime, tmp_path: Path) -> None:
    (tmp_path / "rbac.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argocd-rbac-cm"},
        "data": {"policy.csv": "p, role:team, applications, get, team/*, allow\n"
                               "p, role:team, projects, get, team, allow\ng, my-org:team, role:team\n"}}))
    runtime.forget_config()
    alice = Principal("alice@example.com", groups=("my-org:team",), via="oidc")
    cookie = f"{auth.COOKIE}={auth.new_session(auth.Tokens(ADMIN, READ), auth.Role.READ, alice)}"
    listed = ui.handle(ui.Request("GET", "/ui/", {"Host": HOST, "Cookie": cookie}), runtime).body.decode()
    assert "api-xxx" in listed and 'href="/ui/apps/web"' not in listed
    hidden = ui.handle(ui.Request("GET", "/ui/apps/web", {"Host": HOST, "Cookie": cookie}), runtime)
    assert hidden.status == 404 and b"not found" in hidden.body
    name = "api-" + "x" * 55
    page = ui.handle(ui.Request("GET", f"/ui/apps/{name}", {"Host": HOST, "Cookie": cookie}), runtime)
    assert page.status == 200 and b"data-actions" not in page.body  # it may look, not sync
    session = auth.read_session(auth.Tokens(ADMIN, READ), cookie.partition("=")[2])
    token = session.csrf if session else ""
    refused = post(runtime, f"/ui/apps/{name}/sync", cookie, {"csrf": token}, origin=f"https://{HOST}")
    assert refused.status == 403 and b"sub: alice@example.com" in refused.body
    assert post(runtime, "/ui/apps/web/sync", cookie, {"csrf": token}, origin=f"https://{HOST}").status == 404
    projects = ui.handle(ui.Request("GET", "/ui/projects", {"Host": HOST, "Cookie": cookie}), runtime).body
    assert b">web<" not in projects
    log = [(e["subject"], e["object"], e["allowed"]) for e in auditlog.page(runtime.store)[0]]
    assert log == [("alice@example.com", "default/web", False), ("alice@example.com", f"team/{name}", False),
                   ("alice@example.com", "default/web", False)]


def test_apps_page_counts_filters_search_and_pages(runtime: Runtime) -> None:
    config = runtime.config()
    rows = views.app_rows(config, views.load_summaries(runtime.store, sorted(config.applications)))
    assert [(r.name[:4], r.sync, r.health) for r in rows] == [("api-", "Unknown", "Unknown"),
                                                              ("web", "OutOfSync", "Healthy")]
    page = views.apps_page(rows, {})
    assert page.sync_counts == {"Synced": 0, "OutOfSync": 1, "Unknown": 1}
    assert page.health_counts["Healthy"] == 1 and page.health_counts["Unknown"] == 1
    assert [r.name for r in views.apps_page(rows, {"project": "team"}).rows] == ["api-" + "x" * 55]
    assert [r.name for r in views.apps_page(rows, {"sync": "OutOfSync"}).rows] == ["web"]
    assert [r.name for r in views.apps_page(rows, {"cluster": "prod"}).rows][0].startswith("api-")
    assert [r.name for r in views.apps_page(rows, {"q": "WEB deploy"}).rows] == ["web"]
    assert views.apps_page(rows, {"namespace": "nope"}).rows == []
    many = [views.AppRow(f"app-{i:04}", "p", "c", "n", "", "", "", "", "Synced", "Healthy", None) for i in range(1000)]
    third = views.apps_page(many, {"page": "3"})
    assert (third.pages, third.page, third.rows[0].name, len(third.rows)) == (20, 3, "app-0100", 50)
    assert views.apps_page(many, {"page": "999"}).page == 20 and views.apps_page(many, {"page": "x"}).page == 1
    assert third.link(page=4) == "?page=4"
    html = get(runtime, "/ui/", sync="OutOfSync").body.decode()
    assert 'data-app="web"' in html and "data-app=\"api-" not in html
    assert 'data-count="sync-OutOfSync">1<' in html


def test_app_page_tree_follows_owners_and_masks_secrets(runtime: Runtime) -> None:
    html = get(runtime, "/ui/apps/web").body.decode()
    assert 'data-resource="ReplicaSet/web-7f9"' in html and 'data-resource="Pod/web-7f9-abcde"' in html
    assert "other" not in html  # a ReplicaSet owned by something else is not in this app's tree
    assert "wave 2" in html
    assert "aHVudGVyMg==" not in html and "c2VjcmV0" not in html and MASK in html
    assert "https://github.com/o/r/commit/" + "a" * 40 in html
    assert "web: two replicas &lt;b&gt;" in html  # the commit subject, escaped
    assert 'data-phase="Running"' in html and 'hx-trigger="every 2s"' in html and "wave 2: waiting" in html
    assert "/ui/apps/web/live?seen=OutOfSync.Healthy.Running" in html
    assert 'data-task="apps/Deployment web/web"' in html
    assert "web: two replicas" in get(runtime, "/ui/").body.decode()
    assert "HX-Refresh" not in dict(get(runtime, "/ui/apps/web/live", seen="OutOfSync.Healthy.Running").headers)
    assert "HX-Refresh" in dict(get(runtime, "/ui/apps/web/live", seen="OutOfSync.Healthy.").headers)
    split = get(runtime, "/ui/apps/web", diff="split").body.decode()
    assert split.count("replicas: 1") == 1 and split.count("replicas: 2") == 1


def test_tree_without_a_cluster_shows_the_stored_objects() -> None:
    current = app_state.AppState(app="a")
    current.resources = [app_state.ResourceStatus("apps", "Deployment", "n", "d", SyncStatus.SYNCED)]
    current.operation = app_state.Operation("o1", "s", app_state.OperationPhase.SUCCEEDED, results=[
        app_state.TaskResult(ResourceKey("batch", "Job", "n", "migrate"), "PreSync", -1, True, Action.CREATED,
                             app_state.TaskPhase.SUCCEEDED)])

    class Broken:
        def list(self, group: str, kind: str, *, namespace: str = "", label_selector: str = "") -> list[Manifest]:
            raise OSError("connection refused")

    built = tree.build(current, Broken())
    assert "connection refused" in built.problem
    assert [k for k, _ in built.groups] == ["Deployment", "Job"]
    hook = built.find("Job")[0]
    assert (hook.hook_phase, hook.wave) == ("PreSync", "-1")
    deployment = built.find("Deployment")[0]
    with_children = tree.build(current, FakeLister())
    assert deployment.children == [] and with_children.find("Pod") == []  # namespace n holds nothing


def test_diff_lines_and_side_by_side() -> None:
    text = "--- a\n+++ b\n@@ -1,3 +1,3 @@\n a: 1\n-b: 2\n-c: 3\n+b: 4\n d: 5\n"
    items = diffview.lines(text)
    assert [i.kind for i in items] == ["file", "file", "hunk", "ctx", "del", "del", "add", "ctx"]
    rows = diffview.side_by_side(items)
    pairs = [(r.left.text if r.left else None, r.right.text if r.right else None) for r in rows]
    assert pairs == [("@@ -1,3 +1,3 @@", "@@ -1,3 +1,3 @@"), ("a: 1", "a: 1"), ("b: 2", "b: 4"), ("c: 3", None),
                     ("d: 5", "d: 5")]
    secret = diffview.lines(" data:\n-  token: abc\n+  token: |\n+    line1\n kind: Secret\n", secret=True)
    assert [i.text for i in secret] == ["data:", f"  token: {MASK}", f"  token: {MASK}",
                                        f"    {MASK}", "kind: Secret"]


def test_commit_links_for_github_and_gitlab_only() -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    assert views.commit_url("https://github.com/o/r.git", sha) == f"https://github.com/o/r/commit/{sha}"
    assert views.commit_url("git@github.com:o/r.git", sha) == f"https://github.com/o/r/commit/{sha}"
    assert views.commit_url("https://gitlab.com/g/sub/p", sha) == f"https://gitlab.com/g/sub/p/-/commit/{sha}"
    assert views.commit_url("http://127.0.0.1:9/r.git", sha) == ""
    assert views.commit_url("https://github.com/o/r.git", "main") == ""
    assert views.commit_url("https://github.com/o/r\"onclick=x", sha) == ""


def test_projects_and_clusters_list_rules_and_users(runtime: Runtime) -> None:
    projects = {p.name: p for p in views.projects(runtime.config())}
    assert projects["team"].source_repos == ("https://github.com/o/*",) and projects["team"].apps[0].startswith("api-")
    assert projects["default"].apps == ("web",) and projects["team"].namespace_allow == "all"
    found = {c.name: c for c in views.clusters(runtime.config())}
    assert found["prod"].namespaces == ("api",) and found["in-cluster"].apps == ("web",)
    assert "no cluster secret" in found["prod"].source
    assert b'data-project="team"' in get(runtime, "/ui/projects").body
    assert b'data-cluster="prod"' in get(runtime, "/ui/clusters").body


def test_unknown_pages_and_apps(runtime: Runtime) -> None:
    assert get(runtime, "/ui/apps/nope").status == 404
    assert get(runtime, "/ui/nothing").status == 404
    assert get(runtime, "/ui/static/secret.txt").status == 404
    assert ui.handle(ui.Request("DELETE", "/ui/", {"Authorization": f"Bearer {ADMIN}"}), runtime).status == 405


def test_the_vendored_script_is_the_pinned_one() -> None:
    import hashlib

    static = Path(ui.__file__).parent / "static"
    digest = hashlib.sha256((static / "htmx.min.js").read_bytes()).hexdigest()
    assert digest in (static / "VENDORED.md").read_text() and (static / "htmx.LICENSE").is_file()


def test_a_warm_instance_reparses_only_what_changed(tmp_path: Path) -> None:
    from tidecd import runtime as runtime_module

    (tmp_path / "a.yaml").write_text(yaml.safe_dump(application("web")))
    first = Runtime(settings=Settings(config=str(tmp_path)), store=MemoryStore()).config()
    again = Runtime(settings=Settings(config=str(tmp_path)), store=MemoryStore()).config()
    assert again is first  # same bytes: not parsed again
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(application("web", namespace="xyz")))  # same size
    changed = Runtime(settings=Settings(config=str(tmp_path)), store=MemoryStore()).config()
    assert changed.applications["web"].destination.namespace == "xyz"
    assert str(tmp_path) in runtime_module.cached_config_directories()

    store = MemoryStore()
    app_state.save(store, app_state.AppState(app="web", sync_status=SyncStatus.SYNCED))
    assert views.load_summaries(store, ["web"])["web"].sync == "Synced"
    app_state.save(store, app_state.AppState(app="web", sync_status=SyncStatus.OUT_OF_SYNC))
    assert views.load_summaries(store, ["web", "none"]) == {"web": views.Summary(sync="OutOfSync"),
                                                            "none": views.Summary()}


def test_commit_info_is_bounded_text() -> None:
    from dulwich.objects import Commit

    from tidecd.source import commit_info

    commit = Commit()
    commit.message = ("scale web to 2\n\n" + "x" * 5000).encode()
    commit.author = commit.committer = b"Dev Eloper <dev@example.com>"
    commit.commit_time = commit.author_time = 1_764_590_400
    info = commit_info(commit)
    assert info["subject"] == "scale web to 2" and info["author"] == "Dev Eloper" and len(info["message"]) == 2000
    assert info["time"] == "2025-12-01T12:00:00Z"


def test_terminate_marks_the_running_operation(runtime: Runtime) -> None:
    cookie, csrf = login(runtime, ADMIN)
    asked = post(runtime, "/ui/apps/web/terminate", cookie, {"csrf": csrf}, origin=f"https://{HOST}")
    assert asked.status == 200 and b'data-confirm="terminate"' in asked.body and b"stops at its next step" in asked.body
    assert app_state.load(runtime.store, "web")[0].operation.phase is app_state.OperationPhase.RUNNING  # type: ignore[union-attr]
    page = post(runtime, "/ui/apps/web/terminate", cookie, {"csrf": csrf, "confirm": "yes"}, origin=f"https://{HOST}")
    assert page.status == 303 and ("Location", "/ui/apps/web?notice=terminated") in page.headers
    op = app_state.load(runtime.store, "web")[0].operation
    assert op is not None and op.id == "o1" and op.phase is app_state.OperationPhase.TERMINATING
    bad = post(runtime, "/ui/apps/web/rollback", cookie, {"csrf": csrf, "id": "x"}, origin=f"https://{HOST}")
    assert bad.status == 400
    missing = post(runtime, "/ui/apps/web/rollback", cookie, {"csrf": csrf, "id": "99"}, origin=f"https://{HOST}")
    assert missing.status == 404


def test_app_page_shows_the_image_updaters_override_and_pin(runtime: Runtime) -> None:
    """Issue 13: the `argocd` write-back keeps the override in tidecd's state; the dashboard shows it."""
    from tidecd.images import state as images_state

    assert "data-images" not in get(runtime, "/ui/apps/web").body.decode()
    value = images_state.ImageValue(alias="web", image="registry.local/web", tag="1.2.3")
    images_state.pin(runtime.store, "web", by="rollback", revision="a" * 40, deployed_at="2026-12-01T10:00:00Z")
    images_state.update(runtime.store, "web", lambda s: s.set_override([value]))
    html = get(runtime, "/ui/apps/web").body.decode()
    assert 'data-image-override>registry.local/web:1.2.3<' in html
    assert "pinned since" in html and "by rollback" in html


def test_app_page_names_who_drifted_the_app_and_the_repair_in_its_history(runtime: Runtime) -> None:
    """Issue 27: the audit log's attribution, as the state keeps it, on the app page (escaped)."""
    state, generation = app_state.load(runtime.store, "web")
    drift = app_state.DriftCause(ResourceKey("apps", "Deployment", "web", "web"), "alice@example.com <x>",
                                 "kubectl/v1.34.4 (linux/amd64)", "2026-12-02T10:42:03.1Z", "patch",
                                 ("spec.replicas",), restored="2026-12-02T10:42:05Z")
    state = dataclasses.replace(state, automation=dataclasses.replace(state.automation, drift=drift))
    state.add_history("a" * 40, "Succeeded", "deploy", "main", "o2", cause=drift.describe() + "; restored")
    app_state.save(runtime.store, state, if_generation_match=generation)
    html = get(runtime, "/ui/apps/web").body.decode()
    said = "Deployment web/web: spec.replicas changed by alice@example.com &lt;x&gt; via kubectl at 10:42:03"
    assert f"data-drift>{said}; restored" in html
    assert f"data-cause>{said}; restored<" in html


def test_a_rollback_asks_first_and_says_automated_sync_turns_off(runtime: Runtime) -> None:
    cookie, csrf = login(runtime, ADMIN)
    entry = app_state.load(runtime.store, "web")[0].history[0]
    asked = post(runtime, "/ui/apps/web/rollback", cookie, {"csrf": csrf, "id": str(entry.id)},
                 origin=f"https://{HOST}")
    body = asked.body.decode()
    assert asked.status == 200 and 'data-confirm="rollback"' in body, body[-3000:]
    assert "Automated sync is turned off" in body and entry.revision[:7] in body and 'value="yes"' in body
    shown = get(runtime, "/ui/apps/web/rollback", id=str(entry.id)).body.decode()
    assert "Automated sync is turned off" in shown
    panel = get(runtime, "/ui/apps/web/sync").body.decode()
    assert "data-sync-panel" in panel and 'name="replace"' in panel and 'name="revision"' in panel
    offered = re.search(r'<input type="checkbox" name="apply_out_of_sync_only"([^>]*)>', panel)
    assert offered and "disabled" not in offered[1] and "checked" not in offered[1]  # Argo CD's default: off
