"""ApplicationSet cases run through tidecd and Argo CD's ApplicationSet controller (tests/e2e/test_appset_oracle.py).

Each case is one ApplicationSet spec, modelled on an example of Argo CD's ApplicationSet documentation
(docs/operator-manual/applicationset/*.md), a row of its generators' Go test tables
(applicationset/generators/*_test.go) or a case of its e2e suite (test/e2e/applicationset_test.go); the data
are tidecd's own. `@REPO@` stands for the test's git repository, `@GITLAB@` for the GitLab API stand-in
(tests/support/gitlab_standin.py, its projects set by `gitlab_projects`). Every generated app's name starts with the
case's name, so the cases share one namespace and one config without colliding.

`FILES` is the repository the git generators read; `CLUSTERS` the cluster Secrets both sides see.
`EXPECTED` (and `ROLLING_EXPECTED`, for RollingSync's first choice) lists the cases whose outcome differs on
purpose, each with its reason (docs/argocd-compatibility.md lists them too); the test asserts that they still
differ, so an entry goes when the difference does.
"""

from __future__ import annotations

import json
from typing import Any

from tests.support.gitlab_standin import GitLabStandIn
from tidecd.base.constants import LABEL_SECRET_TYPE, SECRET_TYPE_CLUSTER

REPO = "@REPO@"
GITLAB = "@GITLAB@"
IN_CLUSTER = "https://kubernetes.default.svc"

FILES: dict[str, str] = {
    "cluster-addons/argo-workflows/kustomization.yaml": "resources: []\n",
    "cluster-addons/prometheus-operator/Chart.yaml": "name: prometheus-operator\n",
    "cluster-addons/My_Addon/values.yaml": "a: 1\n",
    "cluster-addons/exclude-me/cm.yaml": "kind: ConfigMap\n",
    "cluster-addons/nested/deeper/cm.yaml": "kind: ConfigMap\n",
    "cluster-config/engineering/dev/config.json": json.dumps({
        "aws_account": "123456", "asset_id": "11223344",
        "cluster": {"owner": "cluster-admin@company.com", "name": "engineering-dev", "address": "https://1.2.3.4"}}),
    "cluster-config/engineering/prod/config.json": json.dumps({
        "aws_account": "654321", "asset_id": "44332211",
        "cluster": {"owner": "cluster-admin@company.com", "name": "engineering-prod", "address": "https://1.2.3.5"}}),
    "cluster-config/legacy/config.json": json.dumps({"cluster": {"name": "legacy", "address": "https://9.9.9.9"}}),
    "lists/envs.yaml": "- env: dev\n  replicas: 1\n- env: qa\n  replicas: 2\n",
    "lists/empty.yaml": "",
    "lists/numbers.json": json.dumps({"env": "num", "ratio": 1.5, "big": 12345678, "count": 3, "on": True}),
    "values/dev.yaml": "region: eu\n", "values/prod.yaml": "region: us\n",
}


def _cluster(name: str, server: str, labels: dict[str, str], annotations: dict[str, str] | None = None,
             project: str = "") -> dict[str, Any]:
    data = {"name": name, "server": server, "config": "{}"}
    if project:
        data["project"] = project
    meta: dict[str, Any] = {"name": f"cluster-{name.lower().replace('_', '-')}",
                            "labels": {LABEL_SECRET_TYPE: SECRET_TYPE_CLUSTER, **labels}}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque", "stringData": data}


CLUSTERS = [
    _cluster("staging", "https://staging.example:6443", {"env": "staging", "region": "eu"}, {"owner": "team-a"}),
    _cluster("production", "https://production.example:6443", {"env": "prod", "region": "us"},
             {"owner": "team-b", "tier": "gold"}),
    _cluster("Prod_West", "https://west.example:6443", {"env": "prod", "region": "us-west"}),
]

SOURCE: dict[str, Any] = {"repoURL": "https://github.com/argoproj/argocd-example-apps/", "targetRevision": "HEAD",
                          "path": "guestbook"}
SPEC: dict[str, Any] = {"project": "default",
        "source": SOURCE,
        "destination": {"server": IN_CLUSTER, "namespace": "guestbook"}}
ELEMENTS = [{"cluster": "engineering-dev", "url": "https://1.2.3.4"},
            {"cluster": "engineering-prod", "url": "https://2.4.6.8"}]


def tpl(name: str, spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **meta}, "spec": spec or SPEC}


def spec_with(**parts: Any) -> dict[str, Any]:
    return {**SPEC, **parts}


def listing(elements: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    return {"list": {"elements": ELEMENTS if elements is None else elements, **extra}}


def git_dirs(*paths: str | tuple[str, bool], **extra: Any) -> dict[str, Any]:
    entries = [{"path": p} if isinstance(p, str) else {"path": p[0], "exclude": p[1]} for p in paths]
    return {"git": {"repoURL": REPO, "revision": "HEAD", "directories": entries, **extra}}


def git_files(*paths: str | tuple[str, bool], **extra: Any) -> dict[str, Any]:
    entries = [{"path": p} if isinstance(p, str) else {"path": p[0], "exclude": p[1]} for p in paths]
    return {"git": {"repoURL": REPO, "revision": "HEAD", "files": entries, **extra}}


def case(name: str, generators: list[dict[str, Any]], template: dict[str, Any], *, go: bool = False,
         **spec: Any) -> tuple[str, dict[str, Any]]:
    body: dict[str, Any] = {"generators": generators, "template": template, **spec}
    if go:
        body["goTemplate"] = True
    return name, body


DUCK_GROUP = "duck.tidecd.test"
DUCK_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"placementdecisions.{DUCK_GROUP}"},
    "spec": {"group": DUCK_GROUP, "scope": "Namespaced",
             "names": {"kind": "PlacementDecision", "plural": "placementdecisions", "singular": "placementdecision"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}
DUCK_CONFIGMAP: dict[str, Any] = {
    "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ocm-placement"},
    "data": {"apiVersion": f"{DUCK_GROUP}/v1", "kind": "placementdecisions", "statusListKey": "decisions",
             "matchKey": "clusterName"}}


def _decision(name: str, labels: dict[str, str], clusters: list[str]) -> dict[str, Any]:
    return {"apiVersion": f"{DUCK_GROUP}/v1", "kind": "PlacementDecision",
            "metadata": {"name": name, "labels": labels},
            "status": {"decisions": [{"clusterName": c, "reason": f"placed-{c.lower()}"} for c in clusters]}}


DUCK_OBJECTS = [_decision("placement-a", {"tier": "gold"}, ["staging", "production", "unknown"]),
                _decision("placement-b", {"tier": "silver"}, ["Prod_West"])]

def gitlab_projects(standin: GitLabStandIn) -> None:
    """The GitLab the scm-gitlab cases read: group acme with web (topics, a kustomization), db (archived, a
    feature branch with a helm folder), team/api in a subgroup (tag_list, default branch trunk), and other/lib
    shared with acme."""
    standin.project("acme", "web", topics=["deploy-ok", "frontend"],
                    files={"main": {"kubernetes/kustomization.yaml", "README.md"}})
    standin.project("acme", "db", archived=True, branches={"main": "d" * 40, "feature/x": "e" * 40},
                    files={"feature/x": {"helm/Chart.yaml"}, "main": {"README.md"}})
    standin.project("acme/team", "api", tag_list=["legacy"], default_branch="trunk")
    standin.project("other", "lib", shared_with=["acme"], topics=["frontend"])


def scm(name: str, gitlab: dict[str, Any], go: bool = True, **extra: Any) -> tuple[str, dict[str, Any]]:
    """A scmProvider gitlab case; every parameter shown in the app's annotations and source."""
    if go:
        template = tpl(f"{name}-{{{{ .repository }}}}-{{{{ .branchNormalized }}}}", spec_with(source={
            "repoURL": "{{ .url }}", "targetRevision": "{{ .sha }}", "path": "kubernetes"}), annotations={
            "params": "{{ .organization }}|{{ .repository_id }}|{{ .branch }}|{{ .short_sha }}|{{ .short_sha_7 }}|"
                      "{{ .labels }}"})
    else:
        template = tpl(f"{name}-{{{{repository}}}}-{{{{branchNormalized}}}}", spec_with(source={
            "repoURL": "{{url}}", "targetRevision": "{{sha}}", "path": "kubernetes"}), annotations={
            "params": "{{organization}}|{{repository_id}}|{{branch}}|{{short_sha}}|{{labels}}"})
    return case(name, [{"scmProvider": {"gitlab": {"api": GITLAB, **gitlab}, **extra}}], template, go=go)


ROLLING = {"type": "RollingSync", "rollingSync": {"steps": [
    {"matchExpressions": [{"key": "envLabel", "operator": "In", "values": ["env-dev"]}]},
    {"matchExpressions": [{"key": "envLabel", "operator": "In", "values": ["env-qa"]}], "maxUpdate": 0},
    {"matchExpressions": [{"key": "envLabel", "operator": "In", "values": ["env-prod"]}], "maxUpdate": "10%"}]}}
ROLLING_ELEMENTS = [{"cluster": "dev", "url": "https://staging.example:6443", "env": "env-dev"},
                    {"cluster": "qa", "url": "https://production.example:6443", "env": "env-qa"},
                    {"cluster": "prod", "url": "https://west.example:6443/", "env": "env-prod"}]

CASES: list[tuple[str, dict[str, Any]]] = [
    # -- list (Generators-List.md, list_test.go) ------------------------------------------------------------
    case("list-fast", [listing()], tpl("list-fast-{{cluster}}", spec_with(
        source={**SOURCE, "path": "guestbook/{{cluster}}"}, destination={"server": "{{url}}",
                                                                               "namespace": "guestbook"}))),
    case("list-go", [listing()], tpl("list-go-{{.cluster}}", spec_with(
        destination={"server": "{{.url}}", "namespace": "guestbook"})), go=True),
    case("list-nested-values", [listing([{"cluster": "a", "values": {"ns": "n1", "deep": {"k": "v"}}}])],
         tpl("list-nested-values-{{.cluster}}", spec_with(destination={
             "server": IN_CLUSTER, "namespace": "{{.values.ns}}-{{.values.deep.k}}"})), go=True),
    case("list-fast-nested", [listing([{"cluster": "a", "values": {"ns": "n1"}}])],
         tpl("list-fast-nested-{{cluster}}", spec_with(destination={"server": IN_CLUSTER,
                                                                     "namespace": "{{values.ns}}"}))),
    case("list-elements-yaml", [{"list": {"elementsYaml": "- cluster: y1\n- cluster: y2\n"}}],
         tpl("list-elements-yaml-{{.cluster}}"), go=True),
    case("list-numbers-go", [listing([{"cluster": "n", "ratio": 1.5, "big": 12345678, "count": 3, "on": True}])],
         tpl("list-numbers-go-{{.cluster}}", annotations={"ratio": "{{.ratio}}", "big": "{{.big}}",
                                                          "count": "{{.count}}", "on": "{{.on}}"}), go=True),
    case("list-numbers-fast", [listing([{"cluster": "n", "ratio": 1.5, "big": 12345678, "on": True}])],
         tpl("list-numbers-fast-{{cluster}}", annotations={"ratio": "{{ratio}}", "big": "{{big}}", "on": "{{on}}"})),
    case("list-post-selector", [{**listing([{"cluster": "a", "env": "staging"}, {"cluster": "b", "env": "prod"}]),
                                 "selector": {"matchLabels": {"env": "staging"}}}],
         tpl("list-post-selector-{{cluster}}")),
    case("list-post-selector-expr", [{**listing([{"cluster": "a", "env": "staging"}, {"cluster": "b", "env": "prod"},
                                                 {"cluster": "c"}]),
                                      "selector": {"matchExpressions": [{"key": "env", "operator": "NotIn",
                                                                         "values": ["prod"]}]}}],
         tpl("list-post-selector-expr-{{.cluster}}"), go=True),
    case("list-generator-template", [{"list": {"elements": ELEMENTS, "template": {
        "metadata": {"labels": {"from": "generator"}}, "spec": {
            "project": "default", "destination": {"server": IN_CLUSTER, "namespace": "override"},
            "source": {"repoURL": SOURCE["repoURL"], "path": "override/{{cluster}}"}}}}}],
         tpl("list-generator-template-{{cluster}}")),
    case("list-empty-element", [listing([{}])], tpl("list-empty-element")),
    case("list-no-generators", [], tpl("list-no-generators-{{cluster}}")),
    # -- Go templates (GoTemplate.md) -----------------------------------------------------------------------
    case("go-sprig", [listing()], tpl("go-sprig-{{ .cluster | lower | trunc 14 }}", annotations={
        "upper": "{{ upper .cluster }}", "default": "{{ default \"none\" .missing }}",
        "replace": "{{ .url | replace \"https://\" \"\" }}", "join": "{{ list .cluster .url | join \",\" }}",
        "b64": "{{ .cluster | b64enc }}", "sha": "{{ .cluster | sha256sum | trunc 8 }}"}), go=True),
    case("go-missing-no-value", [listing()], tpl("go-missing-no-value-{{.cluster}}",
                                                annotations={"missing": "{{.missing}}"}), go=True),
    case("go-missingkey-error", [listing()], tpl("go-missingkey-error-{{.cluster}}",
                                                annotations={"missing": "{{.missing}}"}),
         go=True, goTemplateOptions=["missingkey=error"]),
    case("go-if-eq-missing", [listing([{"cluster": "a", "env": "prod"}, {"cluster": "b"}])],
         tpl("go-if-eq-missing-{{.cluster}}", annotations={
             "tier": "{{ if eq (default \"\" .env) \"prod\" }}gold{{ else }}bronze{{ end }}"}), go=True),
    case("go-normalize-slugify", [listing([{"cluster": "Feature/My_Branch.Name"}])],
         tpl("go-normalize-slugify-{{ normalize .cluster }}", annotations={
             "slug": "{{ slugify 20 true .cluster }}", "slug2": "{{ slugify .cluster }}"}), go=True),
    case("go-to-yaml", [listing([{"cluster": "a", "values": {"replicas": 2, "image": {"tag": "v1"}}}])],
         tpl("go-to-yaml-{{.cluster}}", spec_with(source={**SOURCE, "helm": {
             "values": "{{ toYaml .values | indent 2 }}"}})), go=True),
    case("go-to-json-dig", [listing([{"cluster": "a", "values": {"image": {"tag": "v1"}}}])],
         tpl("go-to-json-dig-{{.cluster}}", annotations={
             "json": "{{ toJson .values }}", "dig": "{{ dig \"image\" \"tag\" \"latest\" .values }}",
             "dig-default": "{{ dig \"image\" \"repo\" \"nginx\" .values }}"}), go=True),
    case("go-regex-semver", [listing([{"cluster": "prod-eu-1", "version": "1.4.2"}])],
         tpl("go-regex-semver-{{ regexReplaceAll \"-[0-9]+$\" .cluster \"\" }}", annotations={
             "new": "{{ semverCompare \">=1.3.0\" .version }}", "major": "{{ (semver .version).Major }}"}), go=True),
    case("go-range-index", [listing([{"cluster": "a", "hosts": ["h1", "h2"]}])],
         tpl("go-range-index-{{.cluster}}", annotations={
             "hosts": "{{ range $i, $h := .hosts }}{{ if $i }},{{ end }}{{ $h }}{{ end }}",
             "first": "{{ index .hosts 0 }}", "len": "{{ len .hosts }}"}), go=True),
    case("go-literal-braces", [listing([{"cluster": "a"}])],
         tpl("go-literal-braces-{{.cluster}}", annotations={"raw": "{{ \"}}\" }} and {{ `{{x}}` }}"}), go=True),
    case("fast-spaces-unknown", [listing()], tpl("fast-spaces-unknown-{{ cluster }}",
                                                annotations={"unknown": "{{unknown}}", "url": "{{ url }}"})),
    # -- template fields ------------------------------------------------------------------------------------
    case("tpl-labels-annotations", [listing()], tpl("tpl-labels-annotations-{{cluster}}",
                                                   labels={"cluster": "{{cluster}}", "static": "yes"},
                                                   annotations={"url": "{{url}}"})),
    case("tpl-finalizers-given", [listing()], tpl("tpl-finalizers-given-{{cluster}}",
                                                 finalizers=["resources-finalizer.argocd.argoproj.io/background"])),
    case("tpl-preserve-resources", [listing()], tpl("tpl-preserve-resources-{{cluster}}"),
         syncPolicy={"preserveResourcesOnDeletion": True}),
    case("tpl-applications-sync-create-only", [listing()], tpl("tpl-applications-sync-create-only-{{cluster}}"),
         syncPolicy={"applicationsSync": "create-only"}),
    case("tpl-sync-policy", [listing()], tpl("tpl-sync-policy-{{cluster}}", spec_with(syncPolicy={
        "automated": {"prune": True, "selfHeal": True}, "syncOptions": ["CreateNamespace=true"],
        "retry": {"limit": 5, "backoff": {"duration": "5s", "factor": 2, "maxDuration": "3m"}}}))),
    case("tpl-automated-empty", [listing()], tpl("tpl-automated-empty-{{cluster}}", spec_with(
        syncPolicy={"automated": {}}))),
    case("tpl-helm-parameters", [listing()], tpl("tpl-helm-parameters-{{cluster}}", spec_with(source={
        **SOURCE, "helm": {"releaseName": "{{cluster}}", "valueFiles": ["values-{{cluster}}.yaml"],
                                   "parameters": [{"name": "url", "value": "{{url}}"}]}}))),
    case("tpl-multi-source", [listing()], tpl("tpl-multi-source-{{.cluster}}", {
        "project": "default", "destination": {"server": IN_CLUSTER, "namespace": "{{.cluster}}"},
        "sources": [{"repoURL": "https://charts.example", "chart": "guestbook", "targetRevision": "1.0.0",
                     "helm": {"valueFiles": ["$values/values/{{.cluster}}.yaml"]}},
                    {"repoURL": REPO, "targetRevision": "HEAD", "ref": "values"}]}), go=True),
    case("tpl-ignore-differences", [listing()], tpl("tpl-ignore-differences-{{cluster}}", spec_with(
        ignoreDifferences=[{"group": "apps", "kind": "Deployment", "jsonPointers": ["/spec/replicas"]}],
        revisionHistoryLimit=3, info=[{"name": "owner", "value": "{{cluster}}"}]))),
    # -- templatePatch (Template.md, e2e) ---------------------------------------------------------------------
    case("patch-yaml", [listing([{"cluster": "a", "autoSync": True, "prune": True,
                                  "valueFiles": ["v1.yaml", "v2.yaml"]},
                                 {"cluster": "b", "autoSync": False, "valueFiles": []}])],
         tpl("patch-yaml-{{.cluster}}"), go=True,
         templatePatch="spec:\n  source:\n    helm:\n      valueFiles:\n      {{- range $f := .valueFiles }}\n"
                       "        - {{ $f }}\n      {{- end }}\n{{- if .autoSync }}\n  syncPolicy:\n    automated:\n"
                       "      prune: {{ .prune }}\n{{- end }}\n"),
    case("patch-json", [listing()], tpl("patch-json-{{.cluster}}"), go=True,
         templatePatch='{"metadata": {"labels": {"patched": "{{ .cluster }}"}}, '
                       '"spec": {"destination": {"namespace": "{{ .cluster }}"}}}'),
    case("patch-project", [listing([{"cluster": "a"}])], tpl("patch-project-{{.cluster}}"), go=True,
         templatePatch="spec:\n  project: other\n"),
    case("patch-finalizer", [listing([{"cluster": "a"}])], tpl("patch-finalizer-{{.cluster}}"), go=True,
         templatePatch="metadata:\n  finalizers: []\n  annotations:\n    note: patched\n"),
    # -- clusters (Generators-Cluster.md, cluster_test.go) ------------------------------------------------------
    case("clusters-all", [{"clusters": {}}], tpl("clusters-all-{{nameNormalized}}", spec_with(
        destination={"server": "{{server}}", "namespace": "guestbook"}))),
    case("clusters-go-selector", [{"clusters": {"selector": {"matchLabels": {"env": "prod"}}}}],
         tpl("clusters-go-selector-{{.nameNormalized}}", spec_with(destination={"name": "{{.name}}",
                                                                               "namespace": "guestbook"}),
             annotations={"region": "{{index .metadata.labels \"region\"}}"}), go=True),
    case("clusters-expressions", [{"clusters": {"selector": {"matchExpressions": [
        {"key": "env", "operator": "In", "values": ["staging", "prod"]},
        {"key": "region", "operator": "NotIn", "values": ["us-west"]}]}}}],
         tpl("clusters-expressions-{{name}}")),
    case("clusters-values", [{"clusters": {"selector": {"matchLabels": {"env": "staging"}},
                                           "values": {"revision": "{{ .metadata.labels.region }}-main",
                                                      "static": "x"}}}],
         tpl("clusters-values-{{.name}}", spec_with(source={**SOURCE,
                                                            "targetRevision": "{{.values.revision}}"}),
             annotations={"static": "{{.values.static}}"}), go=True),
    case("clusters-values-fast", [{"clusters": {"values": {"rev": "{{name}}-rev"}}}],
         tpl("clusters-values-fast-{{nameNormalized}}", annotations={"rev": "{{values.rev}}",
                                                                    "env": "{{metadata.labels.env}}"})),
    case("clusters-flat-list", [{"clusters": {"selector": {"matchLabels": {"env": "prod"}}, "flatList": True}}],
         tpl("clusters-flat-list", spec_with(source={**SOURCE, "helm": {
             "values": "count: {{ len .clusters }}\nnames: {{ $n := list }}{{ range .clusters }}"
                       "{{ $n = append $n .name }}{{ end }}{{ sortAlpha $n | join \",\" }}\n"}})), go=True),
    case("clusters-annotations", [{"clusters": {"selector": {"matchLabels": {"region": "us"}}}}],
         tpl("clusters-annotations-{{.name}}", annotations={
             "owner": "{{ index .metadata.annotations \"owner\" }}", "project": "{{ .project }}"}), go=True),
    case("clusters-secret-type-selector", [{"clusters": {"selector": {"matchLabels": {
        LABEL_SECRET_TYPE: SECRET_TYPE_CLUSTER}}}}], tpl("clusters-secret-type-selector-{{nameNormalized}}")),
    # -- git directories (Generators-Git.md, git_test.go) ----------------------------------------------------
    case("git-dirs", [git_dirs("cluster-addons/*")], tpl("git-dirs-{{path.basenameNormalized}}", spec_with(
        source={"repoURL": REPO, "targetRevision": "HEAD", "path": "{{path}}"},
        destination={"server": IN_CLUSTER, "namespace": "{{path.basename}}"}))),
    case("git-dirs-exclude", [git_dirs("cluster-addons/*", ("cluster-addons/exclude-me", True))],
         tpl("git-dirs-exclude-{{.path.basenameNormalized}}", spec_with(
             source={"repoURL": REPO, "targetRevision": "HEAD", "path": "{{.path.path}}"})), go=True),
    case("git-dirs-double-star", [git_dirs("cluster-addons/**")],
         tpl("git-dirs-double-star-{{.path.basenameNormalized}}", annotations={"path": "{{.path.path}}"}), go=True),
    case("git-dirs-segments", [git_dirs("cluster-addons/nested/*")],
         tpl("git-dirs-segments-{{path[2]}}", annotations={"first": "{{path[0]}}", "all": "{{path}}"})),
    case("git-dirs-go-segments", [git_dirs("cluster-addons/*/*")],
         tpl("git-dirs-go-segments-{{ index .path.segments 2 }}", annotations={
             "joined": "{{ join \"/\" .path.segments }}"}), go=True),
    case("git-dirs-values", [git_dirs("cluster-addons/argo-workflows", values={"ns": "{{.path.basename}}-ns"})],
         tpl("git-dirs-values-{{.path.basename}}", spec_with(destination={"server": IN_CLUSTER,
                                                                          "namespace": "{{.values.ns}}"})), go=True),
    case("git-dirs-prefix", [git_dirs("cluster-addons/prometheus-operator", pathParamPrefix="addon")],
         tpl("git-dirs-prefix-{{.addon.path.basename}}", annotations={"p": "{{.addon.path.path}}"}), go=True),
    # -- git files (Generators-Git.md, git_test.go) ------------------------------------------------------------
    case("git-files", [git_files("cluster-config/**/config.json")],
         tpl("git-files-{{cluster.name}}", spec_with(
             source={"repoURL": REPO, "targetRevision": "HEAD", "path": "{{path}}"},
             destination={"server": "{{cluster.address}}", "namespace": "guestbook"}),
             annotations={"owner": "{{cluster.owner}}", "base": "{{path.basename}}", "file": "{{path.filename}}",
                          "seg": "{{path[1]}}"})),
    case("git-files-go", [git_files("cluster-config/**/config.json")],
         tpl("git-files-go-{{.cluster.name}}", annotations={
             "account": "{{.aws_account}}", "segment": "{{ index .path.segments 1 }}",
             "normalized": "{{.path.filenameNormalized}}"}), go=True),
    case("git-files-star", [git_files("cluster-config/*")],
         tpl("git-files-star-{{.cluster.name}}", annotations={"path": "{{.path.path}}"}), go=True),
    case("git-files-exclude", [git_files("cluster-config/**/config.json", ("cluster-config/legacy/*", True))],
         tpl("git-files-exclude-{{cluster.name}}")),
    case("git-files-list", [git_files("lists/envs.yaml")],
         tpl("git-files-list-{{.env}}", annotations={"replicas": "{{.replicas}}"}), go=True),
    case("git-files-empty", [git_files("lists/empty.yaml")],
         tpl("git-files-empty-{{path.basename}}", annotations={"file": "{{path.filename}}"})),
    case("git-files-numbers", [git_files("lists/numbers.json")],
         tpl("git-files-numbers-{{.env}}", annotations={"ratio": "{{.ratio}}", "big": "{{.big}}",
                                                        "count": "{{.count}}", "on": "{{.on}}"}), go=True),
    case("git-files-values", [git_files("cluster-config/engineering/dev/config.json",
                                        values={"owner": "{{.cluster.owner}}"})],
         tpl("git-files-values-{{.cluster.name}}", annotations={"owner": "{{.values.owner}}"}), go=True),
    # -- matrix (Generators-Matrix.md, matrix_test.go) ----------------------------------------------------------
    case("matrix-git-clusters", [{"matrix": {"generators": [
        git_dirs("cluster-addons/argo-workflows", "cluster-addons/prometheus-operator"),
        {"clusters": {"selector": {"matchLabels": {"env": "staging"}}}}]}}],
         tpl("matrix-git-clusters-{{path.basename}}-{{name}}", spec_with(
             source={"repoURL": REPO, "targetRevision": "HEAD", "path": "{{path}}"},
             destination={"server": "{{server}}", "namespace": "{{path.basename}}"}))),
    case("matrix-files-list", [{"matrix": {"generators": [
        git_files("cluster-config/engineering/*/config.json"),
        {"list": {"elements": [{"appName": "{{cluster.name}}-app"}]}}]}}],
         tpl("matrix-files-list-{{appName}}", annotations={"address": "{{cluster.address}}"})),
    case("matrix-go-first-wins", [{"matrix": {"generators": [
        listing([{"cluster": "a", "shared": "first", "empty": "", "nested": {"x": "1"}}]),
        listing([{"other": "o", "shared": "second", "empty": "filled", "nested": {"x": "2", "y": "3"}}])]}}],
         tpl("matrix-go-first-wins-{{.cluster}}", annotations={
             "shared": "{{.shared}}", "empty": "{{.empty}}", "x": "{{.nested.x}}", "y": "{{.nested.y}}"}), go=True),
    case("matrix-fast-conflict", [{"matrix": {"generators": [listing([{"cluster": "a"}]),
                                                             listing([{"cluster": "b"}])]}}],
         tpl("matrix-fast-conflict-{{cluster}}")),
    case("matrix-child-selector", [{"matrix": {"generators": [
        git_files("cluster-config/**/config.json"),
        {"list": {"elements": [{"kind": "web"}, {"kind": "db"}]}, "selector": {"matchLabels": {"kind": "web"}}}]}}],
         tpl("matrix-child-selector-{{cluster.name}}-{{kind}}")),
    case("matrix-nested", [{"matrix": {"generators": [
        {"matrix": {"generators": [listing([{"a": "1"}, {"a": "2"}]), listing([{"b": "x"}])]}},
        listing([{"c": "z"}])]}}], tpl("matrix-nested-{{.a}}-{{.b}}-{{.c}}"), go=True),
    case("matrix-prefix", [{"matrix": {"generators": [
        git_dirs("cluster-addons/argo-workflows", pathParamPrefix="app"),
        git_files("cluster-config/engineering/dev/config.json", pathParamPrefix="env")]}}],
         tpl("matrix-prefix-{{.app.path.basename}}-{{.cluster.name}}",
             annotations={"env": "{{.env.path.path}}"}), go=True),
    # -- merge (Generators-Merge.md, merge_test.go) -----------------------------------------------------------
    case("merge-clusters-list", [{"merge": {"mergeKeys": ["server"], "generators": [
        {"clusters": {"values": {"kafka": "true", "redis": "false"}}},
        {"clusters": {"selector": {"matchLabels": {"env": "staging"}}, "values": {"kafka": "false"}}},
        {"list": {"elements": [{"server": "https://production.example:6443", "values.redis": "true"}]}}]}}],
         tpl("merge-clusters-list-{{nameNormalized}}", annotations={"kafka": "{{values.kafka}}",
                                                                   "redis": "{{values.redis}}"})),
    case("merge-go", [{"merge": {"mergeKeys": ["cluster"], "generators": [
        listing([{"cluster": "a", "tier": "bronze"}, {"cluster": "b", "tier": "bronze"}]),
        listing([{"cluster": "b", "tier": "gold", "extra": "e"}])]}}],
         tpl("merge-go-{{.cluster}}", annotations={"tier": "{{.tier}}",
                                                   "extra": "{{ default \"none\" .extra }}"}), go=True),
    case("merge-duplicate-keys", [{"merge": {"mergeKeys": ["cluster"], "generators": [
        listing([{"cluster": "a"}]), listing([{"cluster": "a", "x": "1"}, {"cluster": "a", "x": "2"}])]}}],
         tpl("merge-duplicate-keys-{{cluster}}")),
    case("merge-base-duplicates", [{"merge": {"mergeKeys": ["cluster"], "generators": [
        listing([{"cluster": "a", "n": "1"}, {"cluster": "a", "n": "2"}]), listing([{"cluster": "a", "x": "m"}])]}}],
         tpl("merge-base-duplicates-{{cluster}}-{{n}}", annotations={"x": "{{x}}"})),
    case("merge-two-keys", [{"merge": {"mergeKeys": ["cluster", "env"], "generators": [
        listing([{"cluster": "a", "env": "dev"}, {"cluster": "a", "env": "prod"}]),
        listing([{"cluster": "a", "env": "prod", "size": "large"}])]}}],
         tpl("merge-two-keys-{{.cluster}}-{{.env}}", annotations={"size": "{{ default \"small\" .size }}"}),
         go=True),
    # -- clusterDecisionResource (Generators-Cluster-Decision-Resource.md, duck_type_test.go) ------------------
    case("cdr-name", [{"clusterDecisionResource": {"configMapRef": "ocm-placement", "name": "placement-a"}}],
         tpl("cdr-name-{{name}}", spec_with(destination={"server": "{{server}}", "namespace": "guestbook"}),
             annotations={"reason": "{{reason}}", "match": "{{clusterName}}"})),
    case("cdr-labels", [{"clusterDecisionResource": {"configMapRef": "ocm-placement", "labelSelector": {
        "matchLabels": {"tier": "silver"}}, "values": {"zone": "{{ .name | lower }}"}}}],
         tpl("cdr-labels-{{ .values.zone | replace \"_\" \"-\" }}", annotations={"reason": "{{ .reason }}"}),
         go=True),
    # -- scmProvider gitlab (Generators-SCM-Provider.md, gitlab_test.go), against the GitLab stand-in -----------
    scm("scm-gitlab", {"group": "acme"}),
    scm("scm-gitlab-fast", {"group": "acme"}, go=False, cloneProtocol="https"),
    scm("scm-gitlab-subgroups", {"group": "acme", "includeSubgroups": True, "includeSharedProjects": False,
                                 "allBranches": True}, cloneProtocol="https"),
    scm("scm-gitlab-archived", {"group": "acme", "includeArchivedRepos": True, "allBranches": True}),
    scm("scm-gitlab-topic", {"group": "acme", "topic": "frontend"}),
    scm("scm-gitlab-filters", {"group": "acme", "allBranches": True}, filters=[
        {"repositoryMatch": "^web$", "pathsExist": ["kubernetes/kustomization.yaml"], "labelMatch": "deploy-ok"},
        {"repositoryMatch": "^db$", "pathsExist": ["helm"], "pathsDoNotExist": ["README.md"]}]),
    scm("scm-gitlab-branches", {"group": "acme", "allBranches": True, "includeSubgroups": True},
        filters=[{"branchMatch": "^(feature/|trunk)"}, {"labelMatch": "^legacy$"}]),
    scm("scm-gitlab-no-group", {"group": "nope"}),
    # -- names and failures ----------------------------------------------------------------------------------
    case("dup-names", [listing([{"cluster": "same", "n": "1"}, {"cluster": "same", "n": "2"}])],
         tpl("dup-names-{{cluster}}", annotations={"n": "{{n}}"})),
    case("bad-name", [listing([{"cluster": "Upper_Case"}])], tpl("bad-name-{{cluster}}")),
    # -- RollingSync (Progressive-Syncs.md): the generated Applications ------------------------------------------
    case("rolling", [listing(ROLLING_ELEMENTS)], tpl("rolling-{{.cluster}}", spec_with(
        destination={"server": "{{.url}}", "namespace": "guestbook"},
        syncPolicy={"automated": {"prune": True}}), labels={"envLabel": "{{.env}}"}), go=True,
         goTemplateOptions=["missingkey=error"], strategy=ROLLING),
    case("rolling-max-update", [listing([{"cluster": f"{env}{i}", "env": env} for env, count in
                                         (("dev", 3), ("qa", 1), ("prod", 2)) for i in range(count)])],
         tpl("rolling-max-update-{{cluster}}", labels={"env": "{{env}}"}),
         strategy={"type": "RollingSync", "rollingSync": {"steps": [
             {"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev"]}], "maxUpdate": "50%"},
             {"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev", "prod"]}]}]}}),
]
ROLLING_CASES = [name for name, body in CASES if (body.get("strategy") or {}).get("type") == "RollingSync"]

EXPECTED: dict[str, str] = {
    "patch-project": "Argo CD's applyTemplatePatch (controllers/template/patch.go) silently puts the template's "
                     "spec.project back after the patch and generates the app with the rest of the patch applied; "
                     "tidecd refuses a templatePatch that changes spec.project and sets that app aside with an error "
                     "naming the field (issue 29): a patch fed by generator parameters (a file in git, a pull "
                     "request's branch) that tries to move an app to another project is a mistake or an attack, "
                     "and applying the rest of it unnoticed is not what its author meant",
}
# RollingSync's first choice of apps, where it differs on purpose.
ROLLING_EXPECTED: dict[str, str] = {
    "rolling-max-update": "Argo CD v3.6.1 counts the apps of no step into the first step's total when it scales a "
                          "percent maxUpdate (progressive_sync.go UpdateApplicationSetApplicationStatusProgress: "
                          "totalCountMap[appStepMap[name]], where a name of no step reads step 0), so 50% of the "
                          "3 dev apps starts 2 of them (50% of 3 + 2 prod apps); tidecd scales it by the step's own "
                          "apps, as Argo CD's Progressive-Syncs documentation says, and starts 1",
}


def substituted(value: Any, repo: str, gitlab: str = "") -> Any:
    """`value` with `@REPO@` replaced by `repo` and `@GITLAB@` by `gitlab` in every string."""
    if isinstance(value, dict):
        return {k: substituted(v, repo, gitlab) for k, v in value.items()}
    if isinstance(value, list):
        return [substituted(v, repo, gitlab) for v in value]
    return value.replace(REPO, repo).replace(GITLAB, gitlab) if isinstance(value, str) else value


def document(name: str, body: dict[str, Any], repo: str, namespace: str, gitlab: str = "") -> dict[str, Any]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet",
            "metadata": {"name": name, "namespace": namespace}, "spec": substituted(body, repo, gitlab)}


def normalized(app: dict[str, Any]) -> dict[str, Any]:
    """What is compared of a generated Application: its name, labels, annotations, finalizers and spec, with what
    Go's `omitempty` leaves out left out on both sides (empty strings, lists and maps, false); an empty
    `automated` and `enabled: false` stay, as they mean something. Bookkeeping (owner references, uid, status,
    operation) is not."""
    meta = app.get("metadata") or {}
    kept = {k: meta[k] for k in ("name", "labels", "annotations", "finalizers") if k in meta}
    out: dict[str, Any] = _pruned({"metadata": kept, "spec": app.get("spec") or {}})
    return out


def _pruned(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        out = {k: _pruned(v, k) for k, v in value.items()}
        return {k: v for k, v in out.items()
                if v not in (None, "", False, [], {}) or (k == "automated" and v == {}) or (k, v) == ("enabled", False)}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value
