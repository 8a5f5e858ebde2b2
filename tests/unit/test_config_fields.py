"""Loading Argo CD material as people have it: what `kubectl get -o yaml` adds is ignored, a real Argo CD field
tidecd does not implement sets aside that app alone with "Argo CD field X is not implemented by tidecd", and
"unknown field" is kept for typos. The list of real fields is generated from Argo CD's CRDs."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tidecd.config import argocd_fields
from tidecd.config import fields as config_fields
from tidecd.config.load import load_config

APP = """apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: {name}
  namespace: argocd
spec:
  project: default
  source:
    repoURL: https://github.com/argoproj/argocd-example-apps.git
    path: guestbook
{source}  destination: {{server: https://kubernetes.default.svc, namespace: guestbook}}
"""


def app(name: str, source: str = "") -> str:
    return APP.format(name=name, source=textwrap.indent(textwrap.dedent(source), "    "))


KUBECTL_GET = """apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  creationTimestamp: "2026-11-30T09:12:44Z"
  generation: 42
  managedFields:
  - apiVersion: argoproj.io/v1alpha1
    fieldsType: FieldsV1
    fieldsV1: {f:spec: {}}
    manager: argocd-server
    operation: Update
  name: guestbook
  namespace: argocd
  resourceVersion: "918273"
  uid: 5f1c7f2e-4a59-4d8e-9d0e-0d6c2f8f1a11
spec:
  project: default
  source: {repoURL: https://github.com/argoproj/argocd-example-apps.git, path: guestbook, targetRevision: HEAD}
  destination: {server: https://kubernetes.default.svc, namespace: guestbook}
  syncPolicy: {automated: {prune: true}}
operation:
  initiatedBy: {username: admin}
  sync: {revision: 53e28ff20cc530b9ada2173fbbd64d48338583ba}
status:
  health: {status: Healthy}
  sync: {status: Synced, revision: 53e28ff20cc530b9ada2173fbbd64d48338583ba}
  reconciledAt: "2026-11-30T10:00:00Z"
  resources: [{kind: Service, name: guestbook-ui, namespace: guestbook, status: Synced, version: v1}]
"""


def test_what_kubectl_get_adds_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "app.yaml").write_text(KUBECTL_GET)
    config = load_config(tmp_path)  # strict: not even a warning
    found = config.applications["guestbook"]
    assert found.source.path == "guestbook" and found.sync_policy.automated and found.sync_policy.prune


def test_a_real_field_not_implemented_sets_aside_only_that_app(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(app("plain"))
    (tmp_path / "b.yaml").write_text(app("schema", "kustomize:\n  ignoreMissingComponents: true\n"))
    (tmp_path / "c.yaml").write_text(app("labels", "kustomize:\n  labelWithoutSelector: true\n"))
    (tmp_path / "d.yaml").write_text(app("typo", "helm:\n  valueFile: [a.yaml]\n"))
    config = load_config(tmp_path, strict=False)
    assert sorted(config.applications) == ["plain"]
    assert ("Argo CD field spec.source.kustomize.ignoreMissingComponents is not implemented by tidecd "
            "(ignoring missing kustomize components)") in config.invalid["schema"]
    assert "Argo CD field spec.source.kustomize.labelWithoutSelector is not implemented" in config.invalid["labels"]
    assert "unknown field" not in config.invalid["schema"] + config.invalid["labels"]
    assert "spec.source.helm.valueFile: unknown field (did you mean valueFiles?)" in config.invalid["typo"]


def test_multi_source_paths_are_named_as_written(tmp_path: Path) -> None:
    text = app("multi").replace("  source:\n    repoURL: https://github.com/argoproj/argocd-example-apps.git\n"
                                "    path: guestbook\n",
                                "  sources:\n  - repoURL: https://example.com/a.git\n    path: a\n"
                                "    plugin: {name: cmp}\n")
    (tmp_path / "a.yaml").write_text(text)
    config = load_config(tmp_path, strict=False)
    assert "Argo CD field spec.sources[].plugin is not implemented by tidecd" in config.invalid["multi"]


def test_ignored_fields_load_silently(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(app("info").replace("  project: default\n", "  project: default\n"
                                                         "  info: [{name: owner, value: team-a}]\n"
                                                         "  revisionHistoryLimit: 3\n"))
    (tmp_path / "p.yaml").write_text("""apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata: {name: team}
spec:
  sourceRepos: ['*']
  destinations: [{server: '*', namespace: '*'}]
  roles: [{name: ci, policies: ['p, proj:team:ci, applications, sync, team/*, allow'], jwtTokens: [{iat: 1}]}]
  sourceNamespaces: [argocd-apps]
""")
    config = load_config(tmp_path)
    assert "info" in config.applications and "team" in config.projects


def test_the_field_list_is_argo_cds_own() -> None:
    assert argocd_fields.ARGOCD_VERSION.startswith("v3.")
    for path in ("spec.source.helm.skipSchemaValidation", "spec.sources[].kustomize.labelWithoutSelector",
                 "spec.syncPolicy.automated.selfHeal", "status", "operation"):
        assert path in argocd_fields.APPLICATION
    for path in ("spec.syncWindows[].manualSync", "spec.orphanedResources.ignore[].kind", "spec.roles[].policies"):
        assert path in argocd_fields.APPPROJECT
    assert "spec.source.helm.valueFile" not in argocd_fields.APPLICATION
    assert config_fields.classify("Application", "spec.sources[3].plugin.name")[0] == config_fields.NOT_IMPLEMENTED
    assert config_fields.classify("Application", "spec.source.helm.nope") == ("", "")


def test_newer_helm_fields_load_and_reach_helm_template(tmp_path: Path) -> None:
    from tidecd.render.helm import template_argv

    (tmp_path / "a.yaml").write_text(app("chart", """helm:
  skipSchemaValidation: true
  skipTests: true
  kubeVersion: 1.30.0
  apiVersions: [traefik.io/v1alpha1/TLSOption, v1/Service]
"""))
    helm = load_config(tmp_path).applications["chart"].source.helm
    assert helm is not None
    argv = template_argv("helm", helm, tmp_path, [], None, release="r", namespace="ns")
    assert argv[argv.index("--kube-version") + 1] == "1.30.0"
    assert "--skip-schema-validation" in argv and "--skip-tests" in argv
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--api-versions"] == ["traefik.io/v1alpha1/TLSOption",
                                                                                  "v1/Service"]
    plain = template_argv("helm", type(helm)(), tmp_path, [], None, release="r", namespace="ns")
    assert "--skip-schema-validation" not in plain and "--api-versions" not in plain
