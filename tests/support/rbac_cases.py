"""Argo CD's own RBAC examples as one table: the policies of docs/operator-manual/rbac.md, the
argocd-rbac-cm example, the test tables of `argocd admin settings rbac can` (settings_rbac_test.go and its
testdata), and the builtin role:readonly and role:admin. Each case is (policy file, arguments, answer);
`tests/unit/test_rbac_can.py` runs them through `tidecd admin rbac can`, and
`tests/e2e/test_rbac_argocd.py` through Argo CD's binary too, asserting the same answer case by case.
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from tidecd.cli import app as cli_root

POLICIES = {
    # cmd/argocd/commands/admin/testdata/rbac/policy.csv
    "policy.csv": """\
p, role:user, clusters, get, *, allow
p, role:user, clusters, get, https://kubernetes*, deny
p, role:user, projects, get, *, allow
p, role:user, applications, get, *, allow
p, role:user, applications, create, */*, allow
p, role:user, applications, delete, *, allow
p, role:user, applications, delete, */guestbook, deny
p, role:test, certificates, get, *, allow
p, role:test, logs, get, */*, allow
g, test, role:user
""",
    # cmd/argocd/commands/admin/testdata/rbac/argocd-rbac-cm.yaml
    "argocd-rbac-cm.yaml": """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-rbac-cm
  namespace: argocd
data:
  policy.csv: |
    p, role:user, clusters, get, *, allow
    p, role:user, clusters, get, https://kubernetes*, deny
    p, role:user, projects, get, *, allow
    p, role:user, applications, get, *, allow
    p, role:user, applications, create, */*, allow
    p, role:user, applications, delete, *, allow
    p, role:user, applications, delete, */guestbook, deny
    p, role:user, logs, get, */*, allow
    g, test, role:user
  policy.default: role:unknown
""",
    # Test_PolicyFromK8sUsingRegex
    "regex-cm.yaml": """\
apiVersion: v1
kind: ConfigMap
metadata: {name: argocd-rbac-cm}
data:
  policy.csv: |
    p, role:user, clusters, get, .+, allow
    p, role:user, clusters, get, https://kubernetes.*, deny
    p, role:user, applications, get, .*, allow
    p, role:user, applications, create, .*/.*, allow
    p, role:user, applicationsets, create, .*/.*, allow
    p, role:user, applicationsets, delete, .*/.*, allow
    p, role:user, logs, get, .*/.*, allow
    p, role:user, exec, create, .*/.*, allow
  policy.default: role:unknown
  policy.matchMode: regex
""",
    # docs/operator-manual/rbac.md: a custom role for an organisation's admins, bound to a GitHub team
    "org-admin.csv": """\
p, role:org-admin, applications, *, */*, allow
p, role:org-admin, clusters, get, *, allow
p, role:org-admin, repositories, get, *, allow
p, role:org-admin, repositories, create, *, allow
p, role:org-admin, repositories, update, *, allow
p, role:org-admin, repositories, delete, *, allow
p, role:org-admin, projects, get, *, allow
p, role:org-admin, projects, create, *, allow
p, role:org-admin, projects, update, *, allow
p, role:org-admin, projects, delete, *, allow
p, role:org-admin, logs, get, *, allow
p, role:org-admin, exec, create, */*, allow

g, your-github-org:your-team, role:org-admin
""",
    # docs/operator-manual/rbac.md: fine-grained update/delete of an app's resources, and actions
    "fine-grained.csv": """\
p, example-user, applications, delete, default/prod-app, allow
p, example-user, applications, delete/*/Pod/*/*, default/prod-app, allow
p, example-user, applications, update/*, default/prod-app, allow
p, example-user, applications, update/*/Deployment/*/*, default/prod-app, deny
p, role:action-runner, applications, action/apps/Deployment/restart, default/*, allow
p, role:action-runner, applications, action/*, staging/*, allow
g, alice@example.com, role:action-runner
""",
    # docs/operator-manual/argocd-rbac-cm-yaml.md: policy.csv with an overlay and a default role
    "overlay-cm.yaml": """\
apiVersion: v1
kind: ConfigMap
metadata: {name: argocd-rbac-cm, namespace: argocd}
data:
  policy.csv: |
    # Grant all members of the group 'my-org:team-alpha; the ability to sync apps in 'my-project'
    p, my-org:team-alpha, applications, sync, my-project/*, allow
    # Grant all members of 'my-org:team-beta' admins
    g, my-org:team-beta, role:admin
  policy.overlay.csv: |
    p, role:tester, applications, *, */*, allow
    p, role:tester, projects, *, *, allow
    g, my-org:team-qa, role:tester
  policy.default: role:readonly
  scopes: '[groups, email]'
""",
    # docs/operator-manual/rbac.md: deny beats allow; an explicit deny of a project's production apps
    "deny.csv": """\
p, role:staging-deployer, applications, *, staging/*, allow
p, role:staging-deployer, applications, sync, */prod-*, deny
p, role:staging-deployer, applications, get, */*, allow
p, role:staging-deployer, applications, sync, staging/prod-*, deny
g, ci-bot, role:staging-deployer
g, deployers, role:staging-deployer
p, "quoted, name", applications, get, */*, allow
""",
    # only the builtin roles (Argo CD's reader panics on an empty file: a line that binds nobody)
    "empty.csv": "g, nobody-at-all, role:nothing\n",
}

# (policy file, arguments after `can`, answer: None for an error, not an answer); flags as Argo CD spells them.
CASES: list[tuple[str, tuple[str, ...], bool | None]] = [
    # settings_rbac_test.go: Test_PolicyFromK8s and friends
    ("policy.csv", ("role:user", "get", "applications", "*/*"), True),
    ("policy.csv", ("role:user", "get", "clusters", "*"), True),
    ("policy.csv", ("role:user", "get", "certificates", "*"), False),
    ("policy.csv", ("role:user", "get", "certificates", "*", "--default-role", "role:readonly"), True),
    ("policy.csv", ("role:user", "get", "certificates", "*", "--default-role", "role:readonly",
                    "--use-builtin-policy=false"), False),
    ("policy.csv", ("role:test", "get", "logs", "*/*"), True),
    ("policy.csv", ("role:user", "get", "clusters", "https://kubernetes.default.svc"), False),
    ("policy.csv", ("role:user", "get", "clusters", "https://example.com"), True),
    ("policy.csv", ("role:user", "delete", "applications", "default/guestbook"), False),
    ("policy.csv", ("role:user", "delete", "applications", "default/other"), True),
    ("policy.csv", ("test", "delete", "applications", "default/other"), True),
    ("policy.csv", ("test", "delete", "applications", "team/guestbook"), False),
    ("policy.csv", ("test", "sync", "applications", "default/other"), False),
    ("policy.csv", ("role:user", "create", "app", "default/app"), True),
    ("policy.csv", ("role:user", "get", "proj", "default"), True),
    ("policy.csv", ("role:user", "get", "cert", "*"), False),
    ("policy.csv", ("role:user", "create", "applications"), True),
    ("policy.csv", ("role:user", "get", "applications", "*"), True),
    ("argocd-rbac-cm.yaml", ("role:user", "get", "applications", "*/*"), True),
    ("argocd-rbac-cm.yaml", ("role:user", "get", "certificates", "*"), False),
    ("argocd-rbac-cm.yaml", ("nobody", "get", "applications", "default/app"), False),
    ("argocd-rbac-cm.yaml", ("nobody", "get", "applications", "default/app", "--default-role", "role:readonly"),
     True),
    ("argocd-rbac-cm.yaml", ("test", "get", "logs", "default/app"), True),
    ("regex-cm.yaml", ("role:user", "get", "applications", ".*/.*"), True),
    ("regex-cm.yaml", ("role:user", "get", "clusters", ".*"), True),
    ("regex-cm.yaml", ("role:user", "get", "clusters", "https://kubernetes.default.svc"), False),
    ("regex-cm.yaml", ("role:user", "get", "clusters", "https://example.com"), True),
    ("regex-cm.yaml", ("role:user", "create", "exec", ".*/.*"), True),
    ("regex-cm.yaml", ("role:user", "delete", "applicationsets", ".*/.*"), True),
    ("regex-cm.yaml", ("role:user", "create", "applications", "default/app"), True),
    ("regex-cm.yaml", ("role:user", "sync", "applications", "default/app"), False),
    # the builtin policy's `*` is no regular expression: in regex mode it matches nothing
    ("regex-cm.yaml", ("role:user", "get", "certificates", ".*", "--default-role", "role:readonly"), False),
    ("regex-cm.yaml", ("role:user", "get", "applications", "x", "--strict=false"), True),
    # the builtin roles
    ("empty.csv", ("admin", "sync", "applications", "default/guestbook"), True),
    ("empty.csv", ("admin", "delete", "clusters", "https://kubernetes.default.svc"), True),
    ("empty.csv", ("admin", "action/apps/Deployment/restart", "applications", "default/guestbook"), True),
    ("empty.csv", ("admin", "update/apps/Deployment/default/web", "applications", "default/guestbook"), True),
    ("empty.csv", ("role:admin", "get", "applications", "default/guestbook"), True),
    ("empty.csv", ("role:admin", "create", "exec", "default/guestbook"), True),
    ("empty.csv", ("role:admin", "invoke", "extensions", "*"), False),
    ("empty.csv", ("role:readonly", "get", "applications", "default/guestbook"), True),
    ("empty.csv", ("role:readonly", "sync", "applications", "default/guestbook"), False),
    ("empty.csv", ("role:readonly", "get", "projects", "default"), True),
    ("empty.csv", ("role:readonly", "create", "exec", "default/guestbook"), False),
    ("empty.csv", ("role:readonly", "get", "logs", "default/guestbook"), True),
    ("empty.csv", ("someone", "get", "applications", "default/guestbook"), False),
    ("empty.csv", ("admin", "sync", "applications", "default/guestbook", "--use-builtin-policy=false"), False),
    # docs/operator-manual/rbac.md samples
    ("org-admin.csv", ("your-github-org:your-team", "sync", "applications", "any/app"), True),
    ("org-admin.csv", ("your-github-org:your-team", "delete", "applications", "any/app"), True),
    ("org-admin.csv", ("your-github-org:your-team", "delete", "clusters", "https://x"), False),
    ("org-admin.csv", ("your-github-org:your-team", "get", "logs", "any/app"), True),
    ("org-admin.csv", ("role:org-admin", "create", "projects", "p"), True),
    ("org-admin.csv", ("another-team", "get", "applications", "any/app"), False),
    ("fine-grained.csv", ("example-user", "delete", "applications", "default/prod-app"), True),
    ("fine-grained.csv", ("example-user", "delete/v1/Pod/default/web-0", "applications", "default/prod-app"),
     True),
    ("fine-grained.csv", ("example-user", "delete/apps/Deployment/default/web", "applications",
                          "default/prod-app"), False),
    ("fine-grained.csv", ("example-user", "update/apps/Deployment/default/web", "applications",
                          "default/prod-app"), False),
    ("fine-grained.csv", ("example-user", "update/v1/Service/default/web", "applications", "default/prod-app"),
     True),
    ("fine-grained.csv", ("example-user", "update", "applications", "default/prod-app"), False),
    ("fine-grained.csv", ("example-user", "delete", "applications", "default/other"), False),
    ("fine-grained.csv", ("alice@example.com", "action/apps/Deployment/restart", "applications", "default/web"),
     True),
    ("fine-grained.csv", ("alice@example.com", "action/apps/Deployment/scale", "applications", "default/web"),
     False),
    ("fine-grained.csv", ("alice@example.com", "action/argoproj.io/Rollout/resume", "applications",
                          "staging/web"), True),
    ("fine-grained.csv", ("alice@example.com", "get", "action", "default/web"), None),
    ("overlay-cm.yaml", ("my-org:team-alpha", "sync", "applications", "my-project/app"), True),
    ("overlay-cm.yaml", ("my-org:team-alpha", "sync", "applications", "other/app"), False),
    ("overlay-cm.yaml", ("my-org:team-alpha", "get", "applications", "other/app"), True),
    ("overlay-cm.yaml", ("my-org:team-beta", "delete", "clusters", "https://x"), True),
    ("overlay-cm.yaml", ("my-org:team-qa", "delete", "applications", "x/y"), True),
    ("overlay-cm.yaml", ("my-org:team-qa", "delete", "projects", "x"), True),
    ("overlay-cm.yaml", ("stranger", "get", "projects", "x"), True),
    ("overlay-cm.yaml", ("stranger", "sync", "applications", "x/y"), False),
    ("deny.csv", ("ci-bot", "sync", "applications", "staging/web"), True),
    ("deny.csv", ("ci-bot", "sync", "applications", "staging/prod-web"), False),
    ("deny.csv", ("ci-bot", "delete", "applications", "staging/prod-web"), True),
    ("deny.csv", ("ci-bot", "sync", "applications", "production/web"), False),
    ("deny.csv", ("ci-bot", "get", "applications", "production/web"), True),
    ("deny.csv", ("deployers", "override", "applications", "staging/web"), True),
    ("deny.csv", ("quoted, name", "get", "applications", "a/b"), True),
    ("deny.csv", ("ci-bot", "sync", "applications", "staging/web", "--default-role", "role:readonly"), True),
    # --strict refuses what is not Argo CD's vocabulary (None: an error, not an answer)
    ("policy.csv", ("role:user", "get", "bogus", "x"), None),
    ("policy.csv", ("role:user", "fly", "applications", "a/b"), None),
    ("policy.csv", ("role:user", "get/path", "applications", "a/b"), None),
    ("policy.csv", ("role:user", "get", "bogus", "x", "--strict=false"), False),
]


def write_policies(directory: Path) -> Path:
    for name, text in POLICIES.items():
        (directory / name).write_text(text)
    return directory


def tidecd_can(policies: Path, name: str, args: tuple[str, ...]) -> bool | None:
    """Yes → True, No → False, an error (exit 2, nothing on stdout) → None."""
    result = CliRunner().invoke(cli_root, ["admin", "rbac", "can", *args, "--policy-file", str(policies / name)])
    if result.exit_code == 0 and result.stdout.strip() == "Yes":
        return True
    if result.exit_code == 1 and result.stdout.strip() == "No":
        return False
    assert result.exit_code == 2, (result.exit_code, result.output)
    return None
