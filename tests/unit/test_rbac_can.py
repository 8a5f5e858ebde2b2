"""`tidecd admin rbac can` answers Argo CD's own RBAC examples as Argo CD does (tests/support/rbac_cases.py;
tests/e2e/test_rbac_argocd.py asks Argo CD's binary the same questions). Also the policy model's pieces:
overlays, scopes, project roles, and policies casbin refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.rbac_cases import CASES, tidecd_can, write_policies
from tidecd.config import rbac


@pytest.fixture(scope="module")
def policies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_policies(tmp_path_factory.mktemp("rbac"))


@pytest.mark.parametrize(("name", "args", "answer"), CASES, ids=[f"{n}:{' '.join(a)}" for n, a, _ in CASES])
def test_can_answers_as_argocd(policies: Path, name: str, args: tuple[str, ...], answer: bool | None) -> None:
    assert tidecd_can(policies, name, args) is answer


def test_overlays_follow_policy_csv_in_key_order() -> None:
    data = {"policy.b.csv": "g, b, role:b", "policy.csv": "g, main, role:m", "policy.a.csv": "g, a, role:a",
            "policy.default": "role:readonly", "other.csv": "g, x, role:x"}
    assert rbac.policy_csv(data) == "g, main, role:m\ng, a, role:a\ng, b, role:b"
    config = rbac.from_config_map(data | {"scopes": "[groups, email]", "policy.matchMode": "regex"})
    assert config.scopes == ("groups", "email") and config.match_mode == "regex"
    assert config.default_role == "role:readonly"


def test_bad_scopes_and_bad_lines_name_what_is_wrong() -> None:
    with pytest.raises(rbac.PolicyError, match="data.scopes"):
        rbac.from_config_map({"scopes": "groups: [x]"}, "config/rbac.yaml")
    with pytest.raises(rbac.PolicyError, match="line 2: invalid RBAC policy"):
        rbac.validate("p, a, applications, get, */*, allow\nx, y\n")
    with pytest.raises(rbac.PolicyError, match="expected 'p, SUBJECT"):
        rbac.validate("p, a, applications, get, */*\n")


def test_project_roles_are_argocds_runtime_policy() -> None:
    role = rbac.ProjectRole("ci", policies=("p, proj:team:ci, applications, sync, team/*, allow",),
                            groups=("my-org:ci",))
    text = rbac.project_policy("team", [role])
    assert text.splitlines() == ["p, proj:team:ci, projects, get, team, allow",
                                 "p, proj:team:ci, applications, sync, team/*, allow",
                                 "g, my-org:ci, proj:team:ci"]
    policy = rbac.Policy(runtime=text)
    assert policy.enforce("proj:team:ci", "applications", "sync", "team/web")
    assert not policy.enforce("proj:team:ci", "applications", "sync", "other/web")
    assert policy.enforce("my-org:ci", "applications", "sync", "team/web")
    assert "my-org:ci" in policy.grouped()
    assert rbac.role_policy_problems("team", rbac.ProjectRole("ci", policies=(
        "p, proj:team:ci, applications, sync, other/*, allow",
        "p, proj:other:ci, applications, sync, team/*, allow"))) == [
        "policies[0]: object 'other/*' must be of this project (team/...)",
        "policies[1]: subject 'proj:other:ci' must be 'proj:team:ci'"]


def test_groups_come_from_the_scopes_claims() -> None:
    claims = {"groups": ["a", "b", 3], "email": "x@example.com", "sub": "x"}
    assert rbac.groups_of(claims, ("groups", "email")) == ("a", "b", "x@example.com")
