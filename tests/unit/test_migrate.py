"""`tidecd import` without a cluster: Argo CD objects as the API server returns them (status, operation,
server metadata and all) → the config source tidecd loads, the sealed Secrets, and the report."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidecd.base.constants import LABEL_SECRET_TYPE
from tidecd.base.model import Manifest
from tidecd.clients.secrets import KeyPair, generate_key, text_fields, unseal
from tidecd.config.load import load_config
from tidecd.usecases import migrate

PASSWORD = "s3cret-Pa55word-" + "x" * 8
TOKEN = "bearer-token-value-0123456789"
KEY_DATA = base64.b64encode(b"-----BEGIN PRIVATE KEY-----client-key-----END PRIVATE KEY-----").decode()


@pytest.fixture(scope="module")
def pair() -> KeyPair:
    return generate_key()


def server_metadata(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": "argocd", "uid": "0b6e5f1c-0000-4000-8000-000000000001",
            "resourceVersion": "4242", "generation": 7, "creationTimestamp": "2026-12-01T10:00:00Z",
            "managedFields": [{"manager": "argocd-application-controller", "operation": "Update"}], **extra}


def application(name: str, project: str = "default", **spec: Any) -> Manifest:
    body: dict[str, Any] = {
        "project": project,
        "source": {"repoURL": "https://git.example.com/org/apps.git", "targetRevision": "main", "path": name},
        "destination": {"server": "https://kubernetes.default.svc", "namespace": name},
        "syncPolicy": {"automated": {"prune": True, "selfHeal": True}},
    }
    body.update(spec)
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": server_metadata(name, finalizers=["resources-finalizer.argocd.argoproj.io"],
                                        annotations={"argocd.argoproj.io/refresh": "normal",
                                                     "kubectl.kubernetes.io/last-applied-configuration": "{}",
                                                     "notifications.argoproj.io/subscribe.on-sync-succeeded.slack":
                                                         "ops"}),
            "spec": body,
            "status": {"sync": {"status": "Synced", "revision": "abc"}, "health": {"status": "Healthy"},
                       "resources": [{"kind": "ConfigMap", "name": "x"}], "reconciledAt": "2026-12-01T10:00:00Z"},
            "operation": {"sync": {"revision": "abc"}, "initiatedBy": {"automated": True}}}


def project(name: str, **spec: Any) -> Manifest:
    body: dict[str, Any] = {"sourceRepos": ["https://git.example.com/org/*"],
                            "destinations": [{"server": "*", "namespace": "team-*"}],
                            "clusterResourceWhitelist": [{"group": "", "kind": "Namespace"}]}
    body.update(spec)
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": server_metadata(name),
            "spec": body, "status": {"jwtTokensByRole": {"ci": {"items": [{"iat": 1}]}}}}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def secret(secret_name: str, secret_type: str, **values: str) -> Manifest:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": server_metadata(secret_name, labels={LABEL_SECRET_TYPE: secret_type},
                                        annotations={"managed-by": "argocd.argoproj.io"}),
            "data": {k: b64(v) for k, v in values.items()}}


def cluster_secret(name: str, config: dict[str, Any], server: str = "https://10.0.0.5:6443") -> Manifest:
    return secret(name, "cluster", name=name, server=server, config=json.dumps(config))


class FakeArgo:
    """An Argo CD namespace behind the read-only Protocol, recording every call."""

    def __init__(self, objects: list[Manifest]) -> None:
        self.objects = objects
        self.calls: list[tuple[str, str, str, str]] = []

    def list(self, group: str, kind: str, *, namespace: str = "", label_selector: str = "") -> list[Manifest]:
        self.calls.append((group, kind, namespace, label_selector))
        return [copy.deepcopy(o) for o in self.objects
                if o["kind"] == kind and o["metadata"].get("namespace") == namespace
                and (kind != "Secret" or self.selected(o["metadata"].get("labels") or {}, label_selector))]

    @staticmethod
    def selected(labels: dict[str, str], selector: str) -> bool:
        if selector == migrate.SETTINGS_SECRET_SELECTOR:
            return labels.get("app.kubernetes.io/name") == "argocd-secret"
        if selector == migrate.NOTIFICATIONS_SECRET_SELECTOR:
            return labels.get("app.kubernetes.io/name") == "argocd-notifications-controller"
        return labels.get(LABEL_SECRET_TYPE) in ("repository", "repo-creds", "cluster")


def run_import(objects: list[Manifest], pair: KeyPair, out: Path) -> migrate.ImportPlan:
    plan = migrate.plan_import(migrate.read_argocd(FakeArgo(objects)), pair.cert_pem)
    migrate.write_import(plan, out)
    return plan


def texts(out: Path) -> str:
    return "\n".join(p.read_text() for p in sorted(out.rglob("*")) if p.is_file())


def finding(plan: migrate.ImportPlan, obj: str, field: str) -> migrate.Finding:
    matches = [f for f in plan.findings if f.obj == obj and f.field == field]
    assert matches, f"no finding for {obj} {field}: {[str(f) for f in plan.findings]}"
    return matches[0]


# -- reading ----------------------------------------------------------------------------------------------


def test_reads_with_list_only_in_the_given_namespace() -> None:
    fake = FakeArgo([application("a")])
    found = migrate.read_argocd(fake, "argocd")
    assert [o["metadata"]["name"] for o in found.applications] == ["a"]
    assert [(g, k, ns) for g, k, ns, _ in fake.calls] == [
        ("argoproj.io", "Application", "argocd"), ("argoproj.io", "AppProject", "argocd"), ("", "Secret", "argocd"),
        ("", "ConfigMap", "argocd"), ("", "Secret", "argocd"), ("", "Secret", "argocd")]
    assert fake.calls[2][3] == "argocd.argoproj.io/secret-type in (repository,repo-creds,cluster)"
    assert fake.calls[4][3] == "app.kubernetes.io/name=argocd-secret"  # argocd-secret alone, by Argo CD's label
    assert fake.calls[5][3] == "app.kubernetes.io/name=argocd-notifications-controller"  # its notifications secret


def test_argo_cd_not_installed_is_one_clear_error() -> None:
    from tidecd.clients.cluster import UnknownKind

    class NoArgo(FakeArgo):
        def list(self, group: str, kind: str, *, namespace: str = "", label_selector: str = "") -> list[Manifest]:
            raise UnknownKind("the API server serves no argoproj.io/Application")

    with pytest.raises(migrate.MigrationError, match="is Argo CD installed there"):
        migrate.read_argocd(NoArgo([]), "argocd")


# -- applications and projects ----------------------------------------------------------------------------


def test_read_only_fields_are_stripped_and_the_output_loads_strictly(pair: KeyPair, tmp_path: Path) -> None:
    plan = run_import([application("guestbook"), project("team"), application("api", project="team",
                       destination={"name": "in-cluster", "namespace": "team-api"})], pair, tmp_path)
    assert not plan.errors
    config = load_config(tmp_path)  # strict: raises on any problem
    assert sorted(config.applications) == ["api", "guestbook"]
    assert config.applications["guestbook"].sync_policy.prune
    assert config.projects["team"].source_repos == ("https://git.example.com/org/*",)
    written = (tmp_path / "applications" / "guestbook.yaml").read_text()
    for server_field in ("status:", "operation:", "uid:", "resourceVersion", "managedFields", "generation",
                         "creationTimestamp", "argocd.argoproj.io/refresh", "last-applied"):
        assert server_field not in written
    # Argo CD's resources finalizer is kept: it decides what the app's deletion deletes, in tidecd too
    assert config.applications["guestbook"].finalizers == ("resources-finalizer.argocd.argoproj.io",)
    assert "notifications.argoproj.io/subscribe.on-sync-succeeded.slack" in written
    assert "jwtTokensByRole" not in (tmp_path / "projects" / "team.yaml").read_text()
    assert not any(f.field == "metadata.finalizers" for f in plan.findings if f.obj == "Application/guestbook")
    assert "ownerReferences" not in written


def test_an_application_of_an_application_set_is_imported_and_says_so(pair: KeyPair, tmp_path: Path) -> None:
    app = application("gen-prod")
    app["metadata"]["ownerReferences"] = [{"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet",
                                           "name": "gen", "uid": "u", "controller": True}]
    plan = run_import([app], pair, tmp_path)
    assert "ApplicationSet/gen" in finding(plan, "Application/gen-prod", "metadata.ownerReferences").note
    assert "ownerReferences" not in (tmp_path / "applications" / "gen-prod.yaml").read_text()


def test_fields_tidecd_does_not_implement_are_removed_and_reported(pair: KeyPair, tmp_path: Path) -> None:
    app = application("web", revisionHistoryLimit=3, info=[{"name": "owner", "value": "team"}])
    app["spec"]["syncPolicy"]["retry"] = {"limit": 2, "refresh": True}
    app["spec"]["syncPolicy"]["syncOptions"] = ["CreateNamespace=true", "Prune=confirm"]
    app["spec"]["futureField"] = {"x": 1}
    proj = project("team", roles=[{"name": "ci", "policies": ["p, proj:team:ci, applications, sync, team/*, allow"]}],
                   permitOnlyProjectScopedClusters=True)
    plan = run_import([app, proj], pair, tmp_path)
    assert not plan.errors, [str(f) for f in plan.errors]
    config = load_config(tmp_path)
    assert config.applications["web"].sync_policy.retry is not None
    assert config.applications["web"].sync_policy.retry.limit == 2
    for field in ("spec.syncPolicy.retry.refresh", "spec.futureField"):
        assert "removed" in str(finding(plan, "Application/web", field))
    assert "removed" in str(finding(plan, "AppProject/team", "spec.permitOnlyProjectScopedClusters"))
    # fields tidecd's loader accepts and ignores (config_fields: display-only, Argo CD's own API) are kept,
    # and reported with the loader's reason
    assert "kept, ignored by tidecd: tidecd keeps the last 10" in finding(plan, "Application/web",
                                                                          "spec.revisionHistoryLimit").note
    assert "UI" in finding(plan, "Application/web", "spec.info").note
    assert not any(f.field == "spec.roles" for f in plan.findings)  # honoured: argocd-rbac-cm's runtime policy
    assert load_config(tmp_path).projects["team"].source_repos
    assert [r.name for r in load_config(tmp_path).projects["team"].roles] == ["ci"]
    # Argo CD's status.jwtTokensByRole is kept in the role: its tokens stay valid (usecases.tokens)
    assert load_config(tmp_path).projects["team"].roles[0].issued(1, "") is not None
    assert "kept" in finding(plan, "AppProject/team", "spec.roles[ci].jwtTokens").note
    assert "Prune=confirm" in finding(plan, "Application/web", "spec.syncPolicy.syncOptions").note
    report = (tmp_path / migrate.REPORT_FILE).read_text()
    assert "Application/web: spec.syncPolicy.retry.refresh: removed" in report
    assert "AppProject/team: spec.permitOnlyProjectScopedClusters: removed" in report
    assert [line for line in report.splitlines() if "spec.roles" in line and "jwtTokens" not in line] == []


def test_one_bad_object_never_stops_the_others(pair: KeyPair, tmp_path: Path) -> None:
    plugin = application("plugged")
    plugin["spec"]["source"]["plugin"] = {"name": "cdk8s"}
    broken = application("broken")
    del broken["spec"]["destination"]
    wrong_type = application("typed")
    wrong_type["spec"]["syncPolicy"]["automated"]["prune"] = "yes"
    bad_project = project("bad", destinations="everywhere")
    signed = project("signed", signatureKeys=[{"keyID": "4AEE18F83AFDEB23"}])
    orphan = application("orphan", project="bad")
    missing = application("lost", project="nowhere")
    no_name = application("x")
    no_name["metadata"]["name"] = ""
    objects = [plugin, broken, wrong_type, bad_project, signed, application("unverified", project="signed"),
               orphan, missing, application("fine"),
               secret("repo", "repository", url="https://git.example.com/org/apps.git", password=PASSWORD), no_name]
    plan = run_import(objects, pair, tmp_path)
    errors = {f.obj: str(f) for f in plan.errors}
    assert "config-management plugin" in errors["Application/plugged"]
    assert "spec.destination" in errors["Application/broken"]
    assert "spec.syncPolicy.automated.prune" in errors["Application/typed"]
    assert "spec.destinations" in errors["AppProject/bad"]
    assert "deploy unverified commits" in errors["AppProject/signed"]
    assert "AppProject 'signed' could not be converted" in errors["Application/unverified"]
    assert "AppProject 'bad' could not be converted" in errors["Application/orphan"]
    assert "AppProject 'nowhere' does not exist" in errors["Application/lost"]
    assert "Application/(no name)" in errors
    config = load_config(tmp_path)
    assert sorted(config.applications) == ["fine"]
    assert len(config.secrets) == 1
    report = (tmp_path / migrate.REPORT_FILE).read_text()
    assert "## Not converted (9)" in report
    assert "Application/plugged" in report


# -- secrets ----------------------------------------------------------------------------------------------


def test_secrets_are_sealed_and_open_to_the_same_values(pair: KeyPair, tmp_path: Path) -> None:
    repo = secret("repo-apps", "repository", type="git", url="https://git.example.com/org/apps.git",
                  username="deploy", password=PASSWORD, project="team", enableLfs="true")
    creds = secret("creds-org", "repo-creds", url="https://git.example.com/org", password=PASSWORD)
    cluster = cluster_secret("prod", {"bearerToken": TOKEN, "tlsClientConfig": {"caData": KEY_DATA,
                                                                                 "serverName": "prod.local"},
                                      "awsAuthConfig": {"clusterName": "prod"}})
    cluster["data"]["namespaces"] = b64("a,b")
    plan = run_import([repo, creds, cluster], pair, tmp_path)
    assert not plan.errors, [str(f) for f in plan.errors]
    files = sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "secrets").iterdir())
    assert files == ["secrets/cluster-prod.yaml", "secrets/repo-creds-creds-org.yaml",
                     "secrets/repository-repo-apps.yaml"]
    everything = texts(tmp_path)
    for plain in (PASSWORD, TOKEN, KEY_DATA, b64(PASSWORD), b64(TOKEN), "prod.local", "deploy"):
        assert plain not in everything
    config = load_config(tmp_path)
    opened = {s["metadata"]["name"]: unseal(s, [pair.private_pem]) for s in config.secrets}
    assert opened["repo-apps"]["data"] == repo["data"]
    assert opened["repo-apps"]["metadata"]["labels"] == {LABEL_SECRET_TYPE: "repository"}
    assert "uid" not in opened["repo-apps"]["metadata"]
    assert opened["prod"]["data"] == cluster["data"]
    for field in ("data.project", "data.enableLfs"):
        assert "not honoured" in finding(plan, "Secret/argocd/repo-apps", field).note
    for field in ("data.namespaces", "data.config.awsAuthConfig", "data.config.tlsClientConfig.serverName"):
        assert "not honoured" in finding(plan, "Secret/argocd/prod", field).note


def test_secret_problems_name_the_object_never_a_value(pair: KeyPair, tmp_path: Path) -> None:
    in_cluster = cluster_secret("local", {}, server="https://kubernetes.default.svc")
    no_url = secret("nourl", "repository", password=PASSWORD)
    bad_json = secret("badjson", "cluster", name="x", server="https://1.2.3.4", config="{" + PASSWORD)
    not_base64 = secret("garbled", "repository", url="https://x/y")
    not_base64["data"]["password"] = "%%%" + PASSWORD
    no_creds = cluster_secret("anon", {"tlsClientConfig": {"insecure": True}})
    plan = run_import([in_cluster, no_url, bad_json, not_base64, no_creds], pair, tmp_path)
    errors = {f.obj: str(f) for f in plan.errors}
    assert "Secret/argocd/local" not in errors
    assert "not imported: https://kubernetes.default.svc is Argo CD's own cluster" in finding(
        plan, "Secret/argocd/local", "data.server").note
    assert "needs a url" in errors["Secret/argocd/nourl"]
    assert "not valid JSON" in errors["Secret/argocd/badjson"]
    assert "data.password is not valid base64" in errors["Secret/argocd/garbled"]
    assert "without credentials" in finding(plan, "Secret/argocd/anon", "data.config").note
    report = (tmp_path / migrate.REPORT_FILE).read_text()
    assert PASSWORD not in report and PASSWORD not in " ".join(str(f) for f in plan.findings)
    assert [p.name for p in (tmp_path / "secrets").iterdir()] == ["cluster-anon.yaml"]


def test_adopt_annotates_every_application_with_its_argo_cd_origin(pair: KeyPair, tmp_path: Path) -> None:
    objects = [{**application("web"), "metadata": {**application("web")["metadata"], "namespace": "team-argocd"}}]
    plan = migrate.plan_import(migrate.read_argocd(FakeArgo(objects), "team-argocd"), pair.cert_pem,
                               namespace="team-argocd", adopt=True)
    migrate.write_import(plan, tmp_path)
    app = load_config(tmp_path).applications["web"]
    assert app.annotation("tidecd.io/adopt-from-argocd") == "team-argocd/web"
    assert app.annotation("notifications.argoproj.io/subscribe.on-sync-succeeded.slack") == "ops"


# -- Argo CD's settings ----------------------------------------------------------------------------------------


def config_map(name: str, data: dict[str, str]) -> Manifest:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": server_metadata(name), "data": data}


def test_argocd_cm_keeps_what_tidecd_honours_and_reports_the_rest(pair: KeyPair, tmp_path: Path) -> None:
    lua = 'hs = {status = "Healthy", message = "ok"}\nreturn hs'
    cm = config_map("argocd-cm", {"resource.customizations.health.example.com_Widget": lua,
                                  "timeout.reconciliation": "300s", "url": "https://argocd.example.com",
                                  "dex.config": "connectors: []", "kustomize.buildOptions": "--enable-helm"})
    rbac = config_map("argocd-rbac-cm", {"policy.csv": "g, admins, role:admin", "policy.default": "role:readonly",
                                         "policy.team.csv": "g, devs, role:readonly", "unknown.key": "x"})
    other = config_map("my-own-settings", {"k": "v"})
    secret_cm = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": server_metadata("argocd-secret"),
                 "data": {"admin.password": b64(PASSWORD)}}
    plan = run_import([cm, rbac, other, secret_cm, application("a")], pair, tmp_path)
    assert not plan.errors, [str(f) for f in plan.errors]
    config = load_config(tmp_path)
    assert config.argo_settings.health_lua == {"example.com/Widget": lua}
    assert config.argo_settings.reconciliation_timeout == 300.0
    written = (tmp_path / "settings" / "argocd-cm.yaml").read_text()
    assert "dex.config" not in written and "argocd.example.com" in written  # url: the dashboard's, for SSO
    assert "runs no Dex" in finding(plan, "ConfigMap/argocd-cm", "data.dex.config").note
    # --enable-helm is honoured (helmCharts inflate, each chart fetched by tidecd): kept, nothing to report
    assert not any(f.field == "data.kustomize.buildOptions" for f in plan.findings)
    assert config.argo_settings.rbac.policy_csv == "g, admins, role:admin\ng, devs, role:readonly"
    assert config.argo_settings.rbac.default_role == "role:readonly"  # argocd-rbac-cm is read as it is
    assert "not a key of argocd-rbac-cm" in finding(plan, "ConfigMap/argocd-rbac-cm", "data.unknown.key").note
    assert not [f for f in plan.findings if "my-own-settings" in f.obj or "argocd-secret" in f.obj]
    assert PASSWORD not in texts(tmp_path)


def test_argocd_secret_is_sealed_with_the_keys_the_logins_read(pair: KeyPair, tmp_path: Path) -> None:
    oidc = "issuer: https://dex.example/dex\nclientID: tidecd\nclientSecret: $oidc.dex.clientSecret\n"
    cm = config_map("argocd-cm", {"oidc.config": oidc, "accounts.bob": "login"})
    hashed = "$2a$10$abcdefghijklmnopqrstuu"
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": server_metadata("argocd-secret", labels={"app.kubernetes.io/name": "argocd-secret"}),
              "data": {"admin.password": b64(hashed), "accounts.bob.password": b64(hashed),
                       "server.secretkey": b64("k3y"), "oidc.dex.clientSecret": b64("cl1ent"),
                       "webhook.github.secret": b64(PASSWORD), "accounts.bob.tokens": b64("[]")}}
    plan = run_import([cm, secret, application("a")], pair, tmp_path)
    assert not plan.errors, [str(f) for f in plan.errors]
    sealed = yaml.safe_load((tmp_path / "settings" / "argocd-secret.yaml").read_text())
    assert sorted(sealed["spec"]["encryptedData"]) == ["accounts.bob.password", "accounts.bob.tokens",
                                                       "admin.password", "oidc.dex.clientSecret", "server.secretkey"]
    assert "not imported" in finding(plan, "Secret/argocd/argocd-secret", "data.webhook.github.secret").note
    assert PASSWORD not in texts(tmp_path) and "cl1ent" not in texts(tmp_path)
    config = load_config(tmp_path)
    assert config.argo_settings.sso.sealed_secret is not None and config.argo_settings.sso.account("bob")
    opened = text_fields(unseal(dict(config.argo_settings.sso.sealed_secret), [pair.private_pem]), "argocd-secret")
    assert opened["oidc.dex.clientSecret"] == "cl1ent" and opened["admin.password"] == hashed


def test_argocd_notifications_cm_is_imported_as_it_is_and_its_secret_sealed(pair: KeyPair, tmp_path: Path) -> None:
    data = {"service.slack": "token: $slack-token\n", "trigger.on-x": "- when: 'true'\n  send: [t]\n",
            "template.t": "message: hi {{.app.metadata.name}}\n", "service.mattermost": "apiURL: x\n"}
    cm = config_map("argocd-notifications-cm", data)
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": server_metadata("argocd-notifications-secret",
                                          labels={"app.kubernetes.io/name": "argocd-notifications-controller"}),
              "data": {"slack-token": b64(PASSWORD)}}
    plan = run_import([cm, secret, application("a")], pair, tmp_path)
    assert not plan.errors, [str(f) for f in plan.errors]
    written = yaml.safe_load((tmp_path / "settings" / "argocd-notifications-cm.yaml").read_text())["data"]
    assert written == {k: v for k, v in data.items() if k != "service.mattermost"}
    note = finding(plan, "ConfigMap/argocd-notifications-cm", "data.service.mattermost").note
    assert note.startswith("not imported: service type 'mattermost' is not implemented by tidecd"), note
    assert PASSWORD not in texts(tmp_path)
    config = load_config(tmp_path)
    found = config.argo_settings.notifications
    assert sorted(found.triggers) == ["on-x"] and found.sealed_secret is not None
    opened = text_fields(unseal(dict(found.sealed_secret), [pair.private_pem]), "argocd-notifications-secret")
    assert opened == {"slack-token": PASSWORD}


@pytest.mark.parametrize("data", [{}, {"webhook.github.secret": b64(PASSWORD)}], ids=["empty", "webhook-only"])
def test_an_argocd_secret_without_login_keys_is_nothing_to_seal_not_an_error(
        pair: KeyPair, tmp_path: Path, data: dict[str, str]) -> None:
    # Argo CD's install ships argocd-secret empty (argocd-server fills it); a running Argo CD may have it so
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": server_metadata("argocd-secret", labels={"app.kubernetes.io/name": "argocd-secret"}),
              "data": data}
    plan = run_import([secret, application("a")], pair, tmp_path)
    assert not plan.errors, [str(f) for f in plan.errors]
    assert "nothing to seal" in finding(plan, "Secret/argocd/argocd-secret", "").note
    assert not (tmp_path / "settings" / "argocd-secret.yaml").exists()
    report = (tmp_path / migrate.REPORT_FILE).read_text()
    assert "## Not converted (0)" in report and "Secret/argocd/argocd-secret: not imported" in report
    assert PASSWORD not in texts(tmp_path)
    assert sorted(load_config(tmp_path).applications) == ["a"]


# -- writing ----------------------------------------------------------------------------------------------


def test_refuses_a_directory_that_is_not_empty(pair: KeyPair, tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    plan = migrate.plan_import(migrate.read_argocd(FakeArgo([application("a")])), pair.cert_pem)
    with pytest.raises(migrate.MigrationError, match="not empty"):
        migrate.write_import(plan, tmp_path)
    migrate.write_import(plan, tmp_path, force=True)
    assert (tmp_path / "keep.txt").read_text() == "mine"
    assert (tmp_path / "applications" / "a.yaml").is_file()


def test_report_is_complete_for_an_empty_argo_cd(pair: KeyPair, tmp_path: Path) -> None:
    plan = run_import([], pair, tmp_path)
    assert plan.documents == [] and plan.findings == []
    report = (tmp_path / migrate.REPORT_FILE).read_text()
    assert "Written: nothing" in report and "## Not converted (0)" in report
    assert load_config(tmp_path).applications == {}


# -- the command ------------------------------------------------------------------------------------------


def cli(monkeypatch: pytest.MonkeyPatch, objects: list[Manifest], args: list[str]) -> Any:
    import typer
    from typer.testing import CliRunner

    from tidecd.cli import migrate as command
    from tidecd.clients.cluster import KubeCluster

    fake = FakeArgo(objects)
    monkeypatch.setattr(KubeCluster, "from_kubeconfig", classmethod(lambda cls, path=None, context=None: fake))
    root = typer.Typer()
    command.register(root)
    root.command("version")(lambda: None)  # a second command, so `import` is a subcommand as in tidecd
    result = CliRunner().invoke(root, ["import", *args])
    result.calls = fake.calls  # type: ignore[attr-defined]
    return result


def test_the_command_prints_the_report_and_exits_by_what_it_converted(
        pair: KeyPair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert = tmp_path / "tls.crt"
    cert.write_bytes(pair.cert_pem)
    good = cli(monkeypatch, [application("a")], ["--out", str(tmp_path / "one"), "--cert", str(cert)])
    assert good.exit_code == 0, good.output
    assert "# Import from Argo CD (namespace argocd)" in good.stdout and "Written: 1 Application" in good.stdout
    assert {c[2] for c in good.calls} == {"argocd"}
    plugin = application("p")
    plugin["spec"]["source"]["plugin"] = {"name": "x"}
    elsewhere = cli(monkeypatch, [application("a"), plugin], ["--out", str(tmp_path / "two"), "--cert", str(cert),
                                                              "-n", "team-argocd"])
    assert elsewhere.exit_code == 0 and "Written: nothing" in elsewhere.stdout  # nothing in that namespace
    assert {c[2] for c in elsewhere.calls} == {"team-argocd"}
    partial = cli(monkeypatch, [application("a"), plugin], ["--out", str(tmp_path / "three"), "--cert", str(cert)])
    assert partial.exit_code == 1 and "Application/p: spec.source.plugin: not converted" in partial.stdout
    assert (tmp_path / "three" / "applications" / "a.yaml").is_file()
    again = cli(monkeypatch, [], ["--out", str(tmp_path / "three"), "--cert", str(cert)])
    assert again.exit_code == 2 and "is not empty; pass --force" in again.stderr
    monkeypatch.delenv("TIDECD_SEALING_KEYS", raising=False)
    no_cert = cli(monkeypatch, [], ["--out", str(tmp_path / "four")])
    assert no_cert.exit_code == 2 and "no sealing certificate" in no_cert.stderr
    assert not (tmp_path / "four").exists() and no_cert.calls == []
