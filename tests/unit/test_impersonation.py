"""Sync impersonation: Argo CD's matching of `destinationServiceAccounts`, its settings in argocd-cm, and
the header the cluster client sends (the e2e test in tests/e2e/test_least_privilege.py proves the RBAC)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tidecd.base.errors import ConfigError
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
