"""Argo CD's RBAC decides every api call: argocd-rbac-cm, project roles, their JWT tokens, the audit log.

Through `api.handle` with the fake cluster, each answer checked against the OpenAPI document: a user sees
only the apps its policy lets it `get` (lists too), is refused (403, audited) what it may see but not sync,
an operation names who started it in the api and the history, a project role's token syncs its project's
apps and nothing else, and a revoked token is refused on the next call.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import jwt
import pytest

from tests.support.fakecluster import FakeCluster, FakeGit, application, fake_runtime
from tests.unit.test_openapi import TOKEN, Session, configmap
from tidecd.base.principal import Principal
from tidecd.clients.secrets import generate_key, write_key_pair
from tidecd.clients.store import MemoryStore
from tidecd.config import rbac
from tidecd.config.load import DEFAULT_PROJECT, AppProject, Config
from tidecd.usecases import authz, tokens

READ = "read-only-token"
POLICY = """\
p, role:team-a, applications, *, team-a/*, allow
p, role:team-a, applications, sync, team-a/frozen, deny
g, my-org:team-a, role:team-a
"""


@pytest.fixture()
def s() -> Session:
    cluster, store, git = FakeCluster(), MemoryStore(), FakeGit()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    git.push([configmap("a", "1")])
    ci = rbac.ProjectRole("ci", policies=("p, proj:team-a:ci, applications, sync, team-a/*, allow",
                                          "p, proj:team-a:ci, applications, get, team-a/*, allow"))
    apps = {"web": replace(application("web"), project="team-a"), "frozen": replace(application("frozen"),
                                                                                       project="team-a"),
            "other": application("other")}
    settings = replace(Config().argo_settings, rbac=rbac.from_config_map({"policy.csv": POLICY}))
    config = Config(applications=apps, projects={"default": DEFAULT_PROJECT, "team-a": AppProject(
        name="team-a", roles=(ci,))}, argo_settings=settings)
    runtime = fake_runtime(cluster, store, apps["web"], git, config=config)
    runtime.settings.api_token, runtime.settings.api_readonly_token = TOKEN, READ
    return Session(runtime)


def names(s: Session, token: str) -> list[str]:
    return [a["name"] for a in s.call("GET", "/api/v1/apps", token=token).body["apps"]]


def test_groups_see_and_sync_what_their_policy_allows(s: Session) -> None:
    config = s.runtime.config()
    alice = Principal("alice@example.com", groups=("my-org:team-a", "unbound"))
    assert authz.visible(config, alice, sorted(config.applications)) == ["frozen", "web"]
    assert authz.allowed(config, alice, "applications", "sync", "team-a/web")
    assert not authz.allowed(config, alice, "applications", "sync", "team-a/frozen")  # deny wins
    assert not authz.allowed(config, Principal("bob"), "applications", "get", "team-a/web")
    assert authz.allowed(config, Principal("readonly"), "applications", "get", "default/other")
    assert not authz.allowed(config, Principal("readonly"), "applications", "sync", "default/other")


def test_tokens_map_to_admin_and_readonly(s: Session) -> None:
    assert names(s, TOKEN) == ["frozen", "other", "web"] == names(s, READ)
    refused = s.call("POST", "/api/v1/apps/web/sync", {}, token=READ)
    assert refused.status == 403 and "permission denied: applications, sync, team-a/web" in refused.body["message"]
    started = s.call("POST", "/api/v1/apps/web/sync", {})
    assert started.status == 202 and started.body["operation"]["initiatedBy"] == "admin"
    s.run(started.body["operationId"])
    history = s.call("GET", "/api/v1/apps/web/history", token=READ).body["history"]
    assert history[-1]["initiatedBy"] == "admin"
    assert s.call("GET", "/api/v1/audit", token=READ).status == 403
    entries = s.call("GET", "/api/v1/audit").body["entries"]
    assert [(e["subject"], e["action"], e["object"], e["allowed"]) for e in entries] == [
        ("readonly", "sync", "team-a/web", False), ("admin", "sync", "team-a/web", True),
        ("readonly", "get", "*", False)]


def test_a_project_token_syncs_its_project_until_revoked(s: Session) -> None:
    created = s.call("POST", "/api/v1/projects/team-a/roles/ci/token", {"id": "ci-1"})
    assert created.status == 201
    token = created.body["token"]
    assert jwt.decode(token, options={"verify_signature": False})["sub"] == "proj:team-a:ci"
    assert names(s, token) == ["frozen", "web"]
    assert s.call("GET", "/api/v1/apps/other", token=token).status == 404  # not visible: not told it exists
    started = s.call("POST", "/api/v1/apps/web/sync", {"dryRun": True}, token=token)
    assert started.status == 202, started.body
    assert started.body["operation"]["initiatedBy"] == "proj:team-a:ci (token ci-1)"
    assert s.call("POST", "/api/v1/projects/team-a/roles/ci/token", {}, token=token).status == 403
    listed = s.call("GET", "/api/v1/projects/team-a/roles/ci/tokens").body["tokens"]
    assert [t["id"] for t in listed] == ["ci-1"] and "token" not in listed[0]
    assert s.call("DELETE", "/api/v1/projects/team-a/roles/ci/token/ci-1").status == 200
    assert s.call("GET", "/api/v1/apps", token=token).status == 401  # the next call
    forged = jwt.encode({"sub": "proj:team-a:ci", "iat": 1, "jti": "x", "iss": "tidecd"}, "g" * 32, algorithm="HS256")
    assert s.call("GET", "/api/v1/apps", token=forged).status == 401
    assert tokens.verify(s.runtime, token) is None
    entries = s.call("GET", "/api/v1/audit?limit=2").body
    assert len(entries["entries"]) == 2 and entries["next"]
    rest = s.call("GET", f"/api/v1/audit?after={entries['next']}").body["entries"]
    assert [(e["subject"], e["action"], e["allowed"]) for e in entries["entries"] + rest] == [
        ("admin", "create-token", True), ("proj:team-a:ci", "get", False), ("proj:team-a:ci", "sync", True),
        ("proj:team-a:ci", "update", False), ("admin", "delete-token", True)]


def test_the_signing_key_is_sealed_when_the_installation_has_sealing_keys(s: Session, tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    write_key_pair(generate_key(), tmp_path / "keys" / "tls.key", tmp_path / "keys" / "tls.crt")
    s.runtime.settings.sealing_keys = str(tmp_path / "keys")
    token = s.call("POST", "/api/v1/projects/team-a/roles/ci/token", {}).body["token"]
    stored = s.runtime.store.read(tokens.KEY)
    assert stored is not None and set(json.loads(stored.data)) == {"sealed"}
    tokens._OPENED.clear()  # a cold instance opens it with the sealing key
    assert s.call("GET", "/api/v1/apps", token=token).status == 200
    tokens._OPENED.clear()
    s.runtime.settings.sealing_keys = ""  # the key cannot be opened: every token is refused, nothing crashes
    assert s.call("GET", "/api/v1/apps", token=token).status == 401
