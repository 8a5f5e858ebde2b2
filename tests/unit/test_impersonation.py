"""Sync impersonation: Argo CD's matching of `destinationServiceAccounts`, its settings in argocd-cm, and
the header the cluster client sends (the e2e test in tests/e2e/test_least_privilege.py proves the RBAC)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from tidecd.base.errors import ConfigError
from tidecd.clients import cluster
from tidecd.clients.cluster import ApiUnauthorized, KubeCluster
from tidecd.config import argocd_cm
from tidecd.config.argocd_settings import ArgoSettings
from tidecd.config.load import load_config
from tidecd.config.model import AppProject, DestinationServiceAccount
from tidecd.project.impersonation import NoServiceAccount, service_account, sync_user

PROD = "https://prod.example:6443"


def project(*entries: tuple[str, str, str]) -> AppProject:
    return AppProject(name="team", destination_service_accounts=tuple(
        DestinationServiceAccount(server=s, namespace=n, default_service_account=a) for s, n, a in entries))


def test_the_first_matching_entry_wins_and_names_a_service_account_of_the_destination_namespace() -> None:
    proj = project((PROD, "web-*", "deployer"), ("*", "*", "fallback"), (PROD, "web-a", "never"))
    assert service_account(proj, PROD, "web-a") == "system:serviceaccount:web-a:deployer"
    assert service_account(proj, "https://other", "web-a") == "system:serviceaccount:web-a:fallback"
    assert service_account(proj, PROD, "api") == "system:serviceaccount:api:fallback"


def test_namespace_colon_name_names_a_service_account_of_another_namespace() -> None:
    proj = project(("*", "team-?", "sync-accounts:team"))
    assert service_account(proj, PROD, "team-1") == "system:serviceaccount:sync-accounts:team"


def test_globs_are_argo_cds_server_stars_cross_dots_and_slashes() -> None:
    proj = project(("https://*.example:6443", "{web,api}", "deployer"))
    assert service_account(proj, PROD, "api").endswith(":api:deployer")
    with pytest.raises(NoServiceAccount):
        service_account(proj, PROD, "db")


def test_no_match_is_argo_cds_message() -> None:
    with pytest.raises(NoServiceAccount) as caught:
        service_account(project(("*", "other", "x")), PROD, "web")
    assert str(caught.value) == ("failed to find a matching service account to impersonate: no matching service "
                                 f"account found for destination server {PROD} and namespace web")
    with pytest.raises(NoServiceAccount, match="invalid chars"):
        service_account(project(("*", "*", "de*ployer")), PROD, "web")
    with pytest.raises(NoServiceAccount, match="no destination namespace, so name the service account as "
                                               "NAMESPACE:deployer"):
        service_account(project(("*", "*", "deployer")), PROD, "")
    assert service_account(project(("*", "*", "team:deployer")), PROD, "") == "system:serviceaccount:team:deployer"


def test_off_by_default_and_a_missing_match_is_the_clusters_own_identity_when_not_enforced() -> None:
    proj = project(("*", "web", "deployer"))
    assert sync_user(ArgoSettings(), proj, PROD, "web") == ""
    on = ArgoSettings(sync_impersonation=True)
    assert sync_user(on, proj, PROD, "web") == "system:serviceaccount:web:deployer"
    with pytest.raises(NoServiceAccount):
        sync_user(on, proj, PROD, "db")
    assert sync_user(ArgoSettings(sync_impersonation=True, impersonation_enforced=False), proj, PROD, "db") == ""


def test_argocd_cm_switches_it_on_and_a_typo_is_an_error_naming_the_key() -> None:
    def read(data: dict[str, str]) -> tuple[ArgoSettings, list[str]]:
        problems: list[str] = []
        doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argocd-cm"}, "data": data}
        return argocd_cm.read([(doc, "argocd-cm.yaml")], problems), problems

    settings, problems = read({"application.sync.impersonation.enabled": "true",
                               "application.sync.impersonation.enforced": "false"})
    assert settings.sync_impersonation and not settings.impersonation_enforced and not problems
    assert not any("impersonation" in notice for notice in settings.notices)
    settings, problems = read({"application.sync.impersonation.enabled": "yes please"})
    assert not settings.sync_impersonation
    assert problems == ["argocd-cm.yaml: ConfigMap/argocd-cm: data.application.sync.impersonation.enabled: "
                        "'yes please': expected \"true\" or \"false\""]


def test_the_project_entries_load_and_a_bad_one_names_its_field(tmp_path: Path) -> None:
    def load(entries: list[dict[str, str]]) -> AppProject:
        doc = {"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "team"},
               "spec": {"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}],
                        "destinationServiceAccounts": entries}}
        (tmp_path / "project.yaml").write_text(yaml.safe_dump(doc))
        return load_config(tmp_path).projects["team"]

    found = load([{"server": PROD, "namespace": "web", "defaultServiceAccount": "ns:deployer"}])
    assert found.destination_service_accounts == (DestinationServiceAccount(PROD, "web", "ns:deployer"),)
    with pytest.raises(ConfigError, match=r"AppProject/team: spec.destinationServiceAccounts\[0\]"
                                          r".defaultServiceAccount: 'deploy/er'"):
        load([{"server": PROD, "namespace": "web", "defaultServiceAccount": "deploy/er"}])


class HeaderApi:
    """Just enough of kubernetes.client.ApiClient for KubeCluster.request: keeps each request's headers."""

    def __init__(self, status: int = 200) -> None:
        self.configuration = SimpleNamespace(host="https://fake.invalid")
        self.status, self.seen = status, list[tuple[str, dict[str, str]]]()

    def param_serialize(self, *, method: str, resource_path: str, header_params: dict[str, str],
                        **_: Any) -> tuple[Any, ...]:
        return (method, resource_path, dict(header_params), None, None)

    def call_api(self, method: str, path: str, headers: dict[str, str], **_: Any) -> Any:
        self.seen.append((method, headers))
        return SimpleNamespace(status=self.status, reason="x", headers={}, read=lambda: b"{}")


def test_writes_carry_the_impersonated_user_and_reads_stay_the_clusters_own() -> None:
    api = HeaderApi()
    plain = KubeCluster(api)
    assert plain.impersonating("") is plain
    acting = plain.impersonating("system:serviceaccount:web:deployer")
    acting.request("GET", "/api/v1/namespaces/web/configmaps")
    acting.request("PATCH", "/api/v1/namespaces/web/configmaps/a", query={"dryRun": "All"})
    acting.request("DELETE", "/api/v1/namespaces/web/configmaps/a")
    plain.request("PATCH", "/api/v1/namespaces/web/configmaps/a")
    assert [(m, h.get("Impersonate-User")) for m, h in api.seen] == [
        ("GET", None), ("PATCH", "system:serviceaccount:web:deployer"),
        ("DELETE", "system:serviceaccount:web:deployer"), ("PATCH", None)]


def test_a_refused_short_lived_token_is_asked_for_again() -> None:
    class Tokens:
        forgotten = 0

        def token(self) -> str:
            return "t"

        def forget(self) -> None:
            self.forgotten += 1

    api, tokens = HeaderApi(status=401), Tokens()
    cluster._TOKENS[id(api)] = (api, tokens)
    try:
        with pytest.raises(ApiUnauthorized):
            KubeCluster(api).request("GET", "/version")
    finally:
        del cluster._TOKENS[id(api)]
    assert tokens.forgotten == 1
