"""Loading a config source: every honoured field, and every kind of bad input naming file and field."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidecd.base.errors import ConfigError, UnsafePathError
from tidecd.config.load import (
    DEFAULT_PROJECT,
    Backoff,
    Config,
    ConfigSourceRef,
    DirectorySpec,
    GroupKind,
    HelmParameter,
    IgnoreDifference,
    KustomizeSpec,
    ProjectDestination,
    Retry,
    load_config,
    load_config_source,
    normalize_repo_url,
    parse_config_source,
    redact_repo_url,
    repo_key,
)
from tidecd.config.schema import parse_duration

GOOD = Path(__file__).parent / "fixtures" / "config" / "good"

APP = """\
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: guestbook
spec:
  source:
    repoURL: https://github.com/example/guestbook
  destination:
    server: https://kubernetes.default.svc
    namespace: web
"""


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def app_with(spec_extra: str = "", *, source_extra: str = "", top_extra: str = "") -> str:
    """The minimal APP with lines added under spec, spec.source or the top level."""
    text = APP.replace("  source:\n", "  source:\n" + textwrap.indent(textwrap.dedent(source_extra), "    "))
    return text + textwrap.indent(textwrap.dedent(spec_extra), "  ") + textwrap.dedent(top_extra)


def load_error(tmp_path: Path, text: str, name: str = "app.yaml") -> str:
    write(tmp_path, {name: text})
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    return str(info.value)


# ---------------------------------------------------------------------------------------------------
# A good config source with every feature


@pytest.fixture(scope="module")
def good() -> Config:
    return load_config(GOOD)


def test_good_config_finds_every_object(good: Config) -> None:
    assert list(good.applications) == ["guestbook", "json-app", "shop-kustomize", "shop-helm"]
    assert set(good.projects) == {"team-a", "default"}
    assert [s["metadata"]["name"] for s in good.secrets] == ["cluster-prod", "repo-example"]


def test_directory_application_every_field(good: Config) -> None:
    app = good.applications["guestbook"]
    assert app.project == "team-a"
    assert app.origin == f"{GOOD}/apps/guestbook.yaml"
    src = app.source
    assert (src.repo_url, src.target_revision, src.path) == (
        "https://github.com/example/guestbook.git", "main", "deploy/plain")
    assert src.directory == DirectorySpec(recurse=True, include="*.yaml", exclude="{secret*,test*}")
    assert src.kustomize is None and src.helm is None
    assert (app.destination.server, app.destination.name, app.destination.namespace) == (
        "https://kubernetes.default.svc", "", "team-a-guestbook")
    policy = app.sync_policy
    assert (policy.automated, policy.prune, policy.self_heal, policy.allow_empty) == (True, True, True, True)
    assert policy.sync_options == ("CreateNamespace=true", "PruneLast=true")
    assert policy.has_option("PruneLast=true")
    assert policy.retry == Retry(limit=5, backoff=Backoff(10.0, 3.0, 5400.0))
    assert app.ignore_differences == (
        IgnoreDifference("apps", "Deployment", "web", "team-a-guestbook", ("/spec/replicas",), ()),
        IgnoreDifference(kind="ConfigMap", managed_fields_managers=("kube-controller-manager",)),
    )
    assert app.annotation("argocd.argoproj.io/manifest-generate-paths") == "."


def test_kustomize_application_defaults_to_default_project(good: Config) -> None:
    app = good.applications["shop-kustomize"]
    assert app.project == "default"
    assert app.source.target_revision == "HEAD"
    assert app.source.kustomize == KustomizeSpec(
        name_prefix="prod-", name_suffix="-v1", images=("nginx=nginx:1.27", "example/shop:2.0"),
        common_labels=(("env", "prod"), ("tier", "web")))
    assert app.destination.name == "staging" and app.destination.server == ""
    assert app.sync_policy.automated is False and app.sync_policy.retry is None


def test_helm_application_values_object_and_parameters(good: Config) -> None:
    app = good.applications["shop-helm"]
    helm = app.source.helm
    assert helm is not None
    assert (app.source.chart, app.source.target_revision, app.source.path) == ("shop", "1.2.3", ".")
    assert helm.release_name == "shop" and helm.value_files == ("values-prod.yaml",)
    assert yaml.safe_load(helm.values) == {"replicaCount": 2, "image": {"tag": "2.0"}}
    assert helm.parameters == (HelmParameter("service.port", "8080", True),
                               HelmParameter("ingress.enabled", "true", False))
    # `automated: {}` turns automated sync on with prune and selfHeal off; limit -1 retries forever.
    policy = app.sync_policy
    assert (policy.automated, policy.prune, policy.self_heal) == (True, False, False)
    assert policy.retry == Retry(limit=-1, backoff=Backoff())


def test_json_application_with_values_string(good: Config) -> None:
    app = good.applications["json-app"]
    assert app.source.helm is not None and app.source.helm.values == "replicaCount: 3\n"
    # `automated.enabled: false` (Argo CD 3) keeps automated sync off.
    assert app.sync_policy.automated is False and app.sync_policy.prune is True


def test_project_every_field(good: Config) -> None:
    project = good.projects["team-a"]
    assert project.description == "Team A's apps"
    assert project.source_repos == ("https://github.com/example/*", "!https://github.com/example/forbidden")
    assert project.destinations == (
        ProjectDestination("https://kubernetes.default.svc", "", "team-a-*"),
        ProjectDestination("", "staging", "*"),
        ProjectDestination("*", "", "!kube-system"),
    )
    assert project.cluster_resource_whitelist == (GroupKind("", "Namespace"),)
    assert project.cluster_resource_blacklist == (GroupKind("rbac.authorization.k8s.io", "*"),)
    assert project.namespace_resource_whitelist == (GroupKind("apps", "Deployment"), GroupKind("", "ConfigMap"))
    assert project.namespace_resource_blacklist == (GroupKind("", "ResourceQuota"),)
    assert good.project_of(good.applications["guestbook"]) is project


def test_default_project_is_implicit_and_allows_everything(good: Config) -> None:
    assert good.projects["default"] is DEFAULT_PROJECT
    assert DEFAULT_PROJECT.source_repos == ("*",)
    assert DEFAULT_PROJECT.destinations == (ProjectDestination("*", "", "*"),)
    assert DEFAULT_PROJECT.cluster_resource_whitelist == (GroupKind("*", "*"),)
    assert DEFAULT_PROJECT.namespace_resource_whitelist is None


def test_sealed_secret_kept_raw(good: Config) -> None:
    sealed = good.secrets[0]
    assert sealed["kind"] == "SealedSecret"
    assert sealed["spec"]["encryptedData"]["config"] == "AgBy3i4OJSWK+PiTySYZZA=="


def test_user_defined_default_project_replaces_the_implicit_one(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, {"p.yaml": """\
        apiVersion: argoproj.io/v1alpha1
        kind: AppProject
        metadata: {name: default}
        spec: {sourceRepos: ['https://github.com/example/*']}
        """}))
    project = config.projects["default"]
    assert project.source_repos == ("https://github.com/example/*",)
    # Argo CD: absent destinations allow none, absent cluster whitelist allows no cluster-scoped kind.
    assert project.destinations == () and project.cluster_resource_whitelist is None


def test_empty_namespace_whitelist_differs_from_absent(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, {"p.yaml": """\
        apiVersion: argoproj.io/v1alpha1
        kind: AppProject
        metadata: {name: locked}
        spec: {namespaceResourceWhitelist: []}
        """}))
    assert config.projects["locked"].namespace_resource_whitelist == ()


def test_empty_directory_has_only_the_default_project(tmp_path: Path) -> None:
    config = load_config(tmp_path)
    assert config.applications == {} and list(config.projects) == ["default"] and config.secrets == []


# ---------------------------------------------------------------------------------------------------
# Bad input: each message names the file, the object and the field

BAD_APPS = [
    pytest.param(APP.replace("    repoURL: https://github.com/example/guestbook\n", "    path: x\n"),
                 "app.yaml: Application/guestbook: spec.source.repoURL: required field is missing",
                 id="missing-repoURL"),
    pytest.param(APP.replace("repoURL:", "repoUrl:"),
                 "Application/guestbook: spec.source.repoUrl: unknown field (did you mean repoURL?)",
                 id="unknown-field"),
    pytest.param(app_with("syncPolicy:\n  automated:\n    prune: yes please\n"),
                 "Application/guestbook: spec.syncPolicy.automated.prune: expected a boolean (true or "
                 "false), got a string", id="wrong-type-bool"),
    pytest.param(app_with(source_extra="targetRevision: 1.5\n"),
                 "spec.source.targetRevision: expected a string, got a number", id="wrong-type-string"),
    pytest.param(app_with("syncPolicy:\n  retry:\n    limit: five\n"),
                 "spec.syncPolicy.retry.limit: expected an integer, got a string", id="wrong-type-int"),
    pytest.param(APP.replace("    namespace: web\n", "    name: prod\n"),
                 "Application/guestbook: spec.destination: set exactly one of server and name",
                 id="destination-both"),
    pytest.param(APP.replace("    server: https://kubernetes.default.svc\n", ""),
                 "spec.destination: set exactly one of server and name", id="destination-none"),
    pytest.param(app_with(source_extra="directory:\n  jsonnet:\n    libs: [../outside]\n"),
                 "spec.source.directory.jsonnet.libs[0]: must be a relative path inside the repository",
                 id="jsonnet-lib-outside"),
    pytest.param(app_with(source_extra="directory:\n  jsonnet:\n    tlas: [{value: b}]\n"),
                 "spec.source.directory.jsonnet.tlas[0].name: required field is missing", id="jsonnet-tla"),
    pytest.param(app_with("ignoreDifferences:\n- kind: Deployment\n  jqPathExpressions: ['.spec[']\n"),
                 "spec.ignoreDifferences[0].jqPathExpressions[0]: invalid jq path expression '.spec['",
                 id="jq"),
    pytest.param(app_with("ignoreDifferences:\n- group: apps\n"),
                 "spec.ignoreDifferences[0].kind: required field is missing", id="ignore-no-kind"),
    pytest.param(app_with("ignoreDifferences:\n- kind: Deployment\n  jsonPointers: [spec/replicas]\n"),
                 "spec.ignoreDifferences[0].jsonPointers[0]: 'spec/replicas' is not a JSON pointer",
                 id="json-pointer"),
    pytest.param(app_with("sources: []\n"), "Application/guestbook: spec.sources: must list at least one source",
                 id="multi-source-empty"),
    pytest.param(app_with("syncPolicy:\n  retry:\n    backoff: {duration: 5 minutes}\n"),
                 "spec.syncPolicy.retry.backoff.duration: '5 minutes' is not a duration", id="duration"),
    pytest.param(app_with("syncPolicy:\n  retry:\n    backoff: {factor: 0.5}\n"),
                 "spec.syncPolicy.retry.backoff.factor: must be at least 1", id="factor"),
    pytest.param(app_with(source_extra="helm:\n  values: {replicas: 2}\n"),
                 "spec.source.helm.values: expected a string (YAML text); use valuesObject for a mapping",
                 id="helm-values-mapping"),
    pytest.param(app_with(source_extra="helm:\n  fileParameters: [{name: a, path: ../../etc/passwd}]\n"),
                 "spec.source.helm.fileParameters[0].path: must be a path inside the repository",
                 id="helm-file-parameter"),
    pytest.param(app_with(source_extra="kustomize:\n  replicas: [{name: web, count: many}]\n"),
                 "spec.source.kustomize.replicas[0].count: 'many' is not an integer", id="kustomize-replicas"),
    pytest.param(app_with(source_extra="kustomize:\n  patches: [{target: {kind: Deployment}}]\n"),
                 "spec.source.kustomize.patches[0]: set patch (inline text) or path", id="kustomize-patch"),
    pytest.param(app_with(source_extra="helm:\n  parameters:\n  - value: x\n"),
                 "spec.source.helm.parameters[0].name: required field is missing", id="helm-param-name"),
    pytest.param(app_with(source_extra="helm:\n  parameters: [just-a-string]\n"),
                 "spec.source.helm.parameters[0]: expected a mapping, got a string", id="helm-param-type"),
    pytest.param(app_with(source_extra="kustomize:\n  commonLabels: {tier: 3}\n"),
                 "spec.source.kustomize.commonLabels.tier: expected a string, got an integer",
                 id="labels-type"),
    pytest.param(app_with(source_extra="kustomize: {}\nhelm: {}\n"),
                 "spec.source: set at most one of directory, kustomize and helm (found kustomize, helm)",
                 id="two-tools"),
    pytest.param(app_with(source_extra="path: ../elsewhere\n"),
                 "spec.source.path: must be a relative path inside the repository", id="path-escape"),
    pytest.param(app_with(source_extra="path: /etc\n"),
                 "spec.source.path: must be a relative path inside the repository", id="path-absolute"),
    pytest.param(app_with("syncPolicy:\n  syncOptions: [CreateNamespace]\n"),
                 "spec.syncPolicy.syncOptions[0]: 'CreateNamespace' is not of the form Name=value",
                 id="sync-option"),
    pytest.param(app_with("syncPolicy:\n  syncOptions: CreateNamespace=true\n"),
                 "spec.syncPolicy.syncOptions: expected a list of strings, got a string", id="options-type"),
    pytest.param(APP.replace("name: guestbook", "name: Guest_Book"),
                 "Application/Guest_Book: metadata.name: 'Guest_Book' is not a valid name", id="bad-name"),
    pytest.param(APP.replace("metadata:\n  name: guestbook\n", ""),
                 "app.yaml: Application (document 1): metadata: required field is missing", id="no-metadata"),
    pytest.param(APP.replace("name: guestbook", "name: guestbook\n  uidd: abc"),
                 "Application/guestbook: metadata.uidd: unknown field", id="metadata-field"),
    pytest.param(app_with(source_extra="plugin: {name: cmp}\n"),
                 "Application/guestbook: spec.source.plugin: Argo CD field spec.source.plugin is not implemented "
                 "by tidecd "
                 "(config management plugins)", id="not-implemented"),
    pytest.param(app_with(source_extra="helm:\n  skipSchemaValidaton: true\n"),
                 "Application/guestbook: spec.source.helm.skipSchemaValidaton: unknown field", id="typo"),
    pytest.param(APP.split("spec:")[0],
                 "Application/guestbook: spec: required field is missing", id="no-spec"),
    pytest.param(APP.replace("  source:\n", "  source: https://github.com/x\n  unused:\n"),
                 "Application/guestbook: spec.source: expected a mapping, got a string", id="source-type"),
]


@pytest.mark.parametrize(("text", "expected"), BAD_APPS)
def test_bad_application(tmp_path: Path, text: str, expected: str) -> None:
    message = load_error(tmp_path, text)
    assert expected in message
    assert f"{tmp_path}/app.yaml" in message


PROJECT = "apiVersion: argoproj.io/v1alpha1\nkind: AppProject\nmetadata: {name: team-a}\nspec:\n"

BAD_PROJECTS = [
    pytest.param("  destinations:\n  - namespace: web\n",
                 "AppProject/team-a: spec.destinations[0]: set server or name", id="destination-no-cluster"),
    pytest.param("  clusterResourceWhitelist:\n  - group: ''\n",
                 "AppProject/team-a: spec.clusterResourceWhitelist[0].kind: required field is missing",
                 id="group-kind-no-kind"),
    pytest.param("  sourceRepos: https://github.com/x\n",
                 "spec.sourceRepos: expected a list of strings, got a string", id="repos-type"),
    pytest.param("  signatureKeys: [{keyID: ABCDEF}]\n",
                 "spec.signatureKeys: Argo CD field spec.signatureKeys is not implemented by tidecd", id="gpg"),
    pytest.param("  namespaceResourceBlacklist:\n  - {group: '', kind: Secret, version: v1}\n",
                 "spec.namespaceResourceBlacklist[0].version: unknown field", id="group-kind-field"),
]


@pytest.mark.parametrize(("spec", "expected"), BAD_PROJECTS)
def test_bad_project(tmp_path: Path, spec: str, expected: str) -> None:
    assert expected in load_error(tmp_path, PROJECT + spec, "project.yaml")


BAD_DOCUMENTS = [
    pytest.param("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
                 "app.yaml: document 1: unsupported object (apiVersion 'v1', kind 'ConfigMap')", id="kind"),
    pytest.param(APP + "---\napiVersion: argoproj.io/v1alpha1\nkind: ApplicationSet\n",
                 "app.yaml: ApplicationSet (document 2): spec: required field is missing", id="applicationset"),
    pytest.param("- a\n- b\n", "app.yaml: document 1: expected a Kubernetes object, got a list", id="list"),
    pytest.param("apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\n",
                 "app.yaml: Secret/creds: metadata.labels.argocd.argoproj.io/secret-type: missing; expected "
                 "one of cluster, repository, repo-creds", id="secret-unlabelled"),
    pytest.param("apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata:\n  name: creds\n"
                 "  labels: {argocd.argoproj.io/secret-type: token}\n",
                 "SealedSecret/creds: metadata.labels.argocd.argoproj.io/secret-type: 'token' is not allowed",
                 id="sealed-wrong-type"),
    pytest.param("apiVersion: v1\nkind: Secret\nmetadata:\n  labels: {argocd.argoproj.io/secret-type: cluster}\n",
                 "app.yaml: Secret (document 1): metadata.name: required field is missing", id="secret-no-name"),
]


@pytest.mark.parametrize(("text", "expected"), BAD_DOCUMENTS)
def test_bad_document(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in load_error(tmp_path, text)


def test_yaml_syntax_error_names_file_and_line_without_the_text(tmp_path: Path) -> None:
    text = "apiVersion: v1\nkind: Secret\nstringData:\n  password: hunter2: oops\n"
    message = load_error(tmp_path, text, "creds.yaml")
    # libyaml says "not allowed in this context", the pure-Python parser "not allowed here"
    assert f"{tmp_path}/creds.yaml:4: YAML syntax error: mapping values are not allowed " in message
    assert "hunter2" not in message


def test_duplicate_yaml_key_is_an_error_with_its_line(tmp_path: Path) -> None:
    message = load_error(tmp_path, APP.replace("  name: guestbook\n", "  name: guestbook\n  name: other\n"))
    assert f"{tmp_path}/app.yaml:5: YAML syntax error: duplicate key 'name'" in message


def test_json_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    message = load_error(tmp_path, '{\n  "apiVersion": "v1",\n  "kind": Secret\n}\n', "app.json")
    assert f"{tmp_path}/app.json:3: JSON syntax error" in message


def test_secret_values_never_appear_in_errors(tmp_path: Path) -> None:
    text = ("apiVersion: v1\nkind: Secret\nmetadata: {name: creds, labels: {a: b}}\n"
            "stringData: {password: hunter2}\n")
    assert "hunter2" not in load_error(tmp_path, text)


def test_not_utf8_file(tmp_path: Path) -> None:
    (tmp_path / "app.yaml").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ConfigError, match="app.yaml: not UTF-8 text"):
        load_config(tmp_path)


def test_all_errors_of_all_files_are_reported_at_once(tmp_path: Path) -> None:
    bad = APP.replace("repoURL:", "repoUrl:").replace("namespace: web", "namespace: 3")
    write(tmp_path, {"a.yaml": bad + "  syncPolicy: {automated: {prune: 1}}\n",
                     "other/b.yml": "apiVersion: v1\nkind: Pod\n"})
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    message = str(info.value)
    assert message.startswith("5 configuration errors:\n")
    for part in ("spec.source.repoUrl: unknown field", "spec.source.repoURL: required field is missing",
                 "spec.destination.namespace: expected a string, got an integer",
                 "spec.syncPolicy.automated.prune: expected a boolean", "other/b.yml: document 1"):
        assert part in message


def test_duplicate_application_names_both_files(tmp_path: Path) -> None:
    write(tmp_path, {"a.yaml": APP, "sub/b.yaml": APP})
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert str(info.value) == (f"{tmp_path}/sub/b.yaml: Application/guestbook: metadata.name: duplicate "
                               f"name, also defined in {tmp_path}/a.yaml")


def test_duplicate_project_names_both_files(tmp_path: Path) -> None:
    write(tmp_path, {"p1.yaml": PROJECT + "  description: one\n", "p2.yaml": PROJECT + "  description: two\n"})
    with pytest.raises(ConfigError, match=r"p2.yaml: AppProject/team-a: metadata.name: duplicate name, "
                                          r"also defined in .*p1.yaml"):
        load_config(tmp_path)


def test_application_project_must_exist(tmp_path: Path) -> None:
    message = load_error(tmp_path, app_with("project: team-z\n"))
    assert message == (f"{tmp_path}/app.yaml: Application/guestbook: spec.project: project 'team-z' is not "
                       "defined in the config source")


def test_project_defined_in_another_file(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, {"a.yaml": app_with("project: team-a\n"), "z/p.json":
                                          '{"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",'
                                          ' "metadata": {"name": "team-a"}}'}))
    assert config.applications["guestbook"].project == "team-a"
    assert config.projects["team-a"].source_repos == ()


def test_symlink_leaving_the_directory_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.yaml"
    outside.write_text(APP)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "app.yaml").symlink_to(outside)
    with pytest.raises(UnsafePathError, match="points outside"):
        load_config(tmp_path / "config")


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a directory"):
        load_config(tmp_path / "nope")


# ---------------------------------------------------------------------------------------------------
# Durations, repository URLs, config sources


@pytest.mark.parametrize(("text", "seconds"), [
    ("5s", 5.0), ("2m", 120.0), ("1h", 3600.0), ("1h30m", 5400.0), ("500ms", 0.5), ("1.5h", 5400.0),
    ("10", 10.0), ("0", 0.0), ("3m20s", 200.0),
])
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5 minutes", "m", "5d", "-5s", "s5", "5s5"])
def test_bad_durations(text: str) -> None:
    assert parse_duration(text) is None


def test_integer_duration_is_seconds(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, {"a.yaml": app_with(
        "syncPolicy:\n  retry:\n    limit: 2\n    backoff: {duration: 7, maxDuration: '90'}\n")}))
    retry = config.applications["guestbook"].sync_policy.retry
    assert retry == Retry(limit=2, backoff=Backoff(7.0, 2.0, 90.0))


SAME_REPO = [
    "https://github.com/Example/Guestbook",
    "https://GitHub.com/Example/Guestbook.git",
    "https://github.com/Example/Guestbook/",
    "https://github.com/Example/Guestbook.git/",
    "https://user:token@github.com:443/Example/Guestbook",
    "http://github.com/Example/Guestbook",
    "git@github.com:Example/Guestbook.git",
    "git@github.com:Example/Guestbook",
    "ssh://git@github.com/Example/Guestbook.git",
    "ssh://git@github.com:22/Example/Guestbook",
]


@pytest.mark.parametrize("url", SAME_REPO)
def test_every_spelling_of_a_repo_has_one_key(url: str) -> None:
    assert normalize_repo_url(url) == "github.com/example/guestbook"
    assert repo_key(url) == repo_key(SAME_REPO[0])


def test_normalize_keeps_nondefault_ports_and_other_forms() -> None:
    assert normalize_repo_url("ssh://git@git.example.com:2222/team/app.git") == "git.example.com:2222/team/app"
    assert normalize_repo_url("https://gitlab.com/group/sub/app") == "gitlab.com/group/sub/app"
    assert normalize_repo_url("file:///tmp/repos/app.git") == "/tmp/repos/app"
    assert normalize_repo_url("https://github.com/example/*") == "github.com/example/*"
    assert normalize_repo_url("*") == "*"


def test_repo_key_is_path_safe_and_distinct() -> None:
    key = repo_key("https://github.com/example/guestbook")
    assert key.startswith("github.com_example_guestbook-") and len(key.rsplit("-", 1)[1]) == 10
    assert repo_key("https://github.com/example/guest_book") != repo_key("https://github.com/example/guest/book")
    for url in ("https://host/../../etc", "file:///", "git@h:..", "https://h/a b?c"):
        assert "/" not in repo_key(url) and repo_key(url) not in ("", ".", "..")


def test_redact_repo_url() -> None:
    assert redact_repo_url("https://user:s3cret@github.com/a/b") == "https://github.com/a/b"
    assert redact_repo_url("git@github.com:a/b.git") == "git@github.com:a/b.git"


@pytest.mark.parametrize(("spec", "expected"), [
    ("https://github.com/example/config.git#main:clusters/prod",
     ConfigSourceRef("https://github.com/example/config.git", "main", "clusters/prod")),
    ("git@github.com:example/config.git#v1.2:apps/",
     ConfigSourceRef("git@github.com:example/config.git", "v1.2", "apps")),
    ("https://github.com/example/config", ConfigSourceRef("https://github.com/example/config", "HEAD", ".")),
    ("file:///srv/git/config#refs/heads/dev", ConfigSourceRef("file:///srv/git/config", "refs/heads/dev", ".")),
    ("https://h/r#:a:b", ConfigSourceRef("https://h/r", "HEAD", "a:b")),
    ("https://h/r#main:/", ConfigSourceRef("https://h/r", "main", ".")),  # `/` is the repository root
    ("./examples/config", Path("examples/config")),
    ("/etc/tidecd", Path("/etc/tidecd")),
])
def test_parse_config_source(spec: str, expected: Path | ConfigSourceRef) -> None:
    assert parse_config_source(spec) == expected


@pytest.mark.parametrize(("spec", "message"), [
    ("", "TIDECD_CONFIG is empty"),
    ("https://github.com/x/y#main:../up", "must be relative"),
    ("https://github.com/x/y#main:a/../../b", "must be relative"),
])
def test_bad_config_source(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config_source(spec)


def test_config_source_ref_text_hides_credentials() -> None:
    ref = parse_config_source("https://u:tok@github.com/x/y#main:cfg")
    assert str(ref) == "https://github.com/x/y#main:cfg"


def test_load_config_source_directory_and_ref(tmp_path: Path) -> None:
    config = load_config_source(str(GOOD))
    assert not isinstance(config, ConfigSourceRef) and "guestbook" in config.applications
    ref = load_config_source("https://github.com/x/y#main:cfg")
    assert ref == ConfigSourceRef("https://github.com/x/y", "main", "cfg")
    with pytest.raises(ConfigError, match="no such directory"):
        load_config_source(str(tmp_path / "missing"))


def test_load_config_source_with_fetch_names_files_by_ref(tmp_path: Path) -> None:
    write(tmp_path, {"cfg/app.yaml": APP.replace("repoURL:", "repoUrl:")})
    fetched: list[ConfigSourceRef] = []

    def fetch(ref: ConfigSourceRef) -> Path:
        fetched.append(ref)
        return tmp_path

    with pytest.raises(ConfigError) as info:
        load_config_source("https://u:tok@github.com/x/y#main:cfg", fetch)
    assert "https://github.com/x/y#main:cfg/app.yaml: Application/guestbook: spec.source.repoUrl" in str(info.value)
    assert "tok" not in str(info.value)
    assert fetched == [ConfigSourceRef("https://u:tok@github.com/x/y", "main", "cfg")]


def test_load_config_source_with_fetch_at_repository_root(tmp_path: Path) -> None:
    write(tmp_path, {"app.yaml": APP})
    config = load_config_source("https://github.com/x/y#main", lambda ref: tmp_path)
    assert not isinstance(config, ConfigSourceRef)
    assert config.applications["guestbook"].origin == "https://github.com/x/y#main:app.yaml"


def test_load_config_source_with_fetch_refuses_escaping_path(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "cfg").symlink_to(tmp_path)
    with pytest.raises(UnsafePathError):
        load_config_source("https://github.com/x/y#main:cfg", lambda ref: tmp_path / "repo")


def test_lenient_loading_sets_an_invalid_application_aside(tmp_path: Path) -> None:
    good: dict[str, Any] = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "good"},
                            "spec": {"source": {"repoURL": "https://example.com/r.git"},
                                     "destination": {"name": "in-cluster"}}}
    bad = {**good, "metadata": {"name": "bad"}, "spec": {**good["spec"], "source": {"repoURL": 3}}}
    orphan = {**good, "metadata": {"name": "orphan"}, "spec": {**good["spec"], "project": "nowhere"}}
    (tmp_path / "apps.yaml").write_text(yaml.safe_dump_all([good, bad, orphan]))
    config = load_config(tmp_path, strict=False)
    assert list(config.applications) == ["good"]
    assert set(config.invalid) == {"bad", "orphan"}
    assert "spec.source.repoURL" in config.invalid["bad"] and "nowhere" in config.invalid["orphan"]
    with pytest.raises(ConfigError, match="repoURL"):
        load_config(tmp_path)


def test_rendering_fields_argo_cd_documents_are_read(tmp_path: Path) -> None:
    text = app_with("syncPolicy:\n  managedNamespaceMetadata:\n    labels: {team: a}\n    annotations: {x: y}\n"
                    "ignoreDifferences:\n- kind: Deployment\n  jqPathExpressions: ['.spec.replicas']\n",
                    source_extra="""\
        helm:
          values: 'a: 1'
          valuesObject: {a: 2}
          skipCrds: true
          ignoreMissingValueFiles: true
          passCredentials: true
          namespace: other
          fileParameters: [{name: config, path: files/config.txt}]
        """)
    write(tmp_path, {"app.yaml": text})
    app = load_config(tmp_path).applications["guestbook"]
    helm = app.source.helm
    assert helm is not None
    assert yaml.safe_load(helm.values) == {"a": 2}  # valuesObject wins, as in Argo CD
    assert (helm.skip_crds, helm.ignore_missing_value_files, helm.pass_credentials, helm.namespace) == (
        True, True, True, "other")
    assert helm.file_parameters == (("config", "files/config.txt"),)
    assert app.sync_policy.namespace_labels == (("team", "a"),)
    assert app.sync_policy.namespace_annotations == (("x", "y"),)
    assert app.ignore_differences[0].jq_path_expressions == (".spec.replicas",)


def test_kustomize_and_jsonnet_fields_are_read(tmp_path: Path) -> None:
    kust = app_with(source_extra="""\
        kustomize:
          namespace: team
          commonAnnotations: {owner: me}
          replicas: [{name: web, count: 3}, {name: db, count: "2"}]
          components: [../components/extra]
          patches: [{target: {kind: Deployment}, patch: "- op: add"}]
        """)
    jsonnet = app_with(source_extra="""\
        directory:
          jsonnet:
            tlas: [{name: replicas, value: "2", code: true}]
            extVars: [{name: env, value: prod}]
            libs: [vendor]
        """).replace("guestbook", "jsonnet-app")
    write(tmp_path, {"a.yaml": kust, "b.yaml": jsonnet})
    config = load_config(tmp_path)
    spec = config.applications["guestbook"].source.kustomize
    assert spec is not None
    assert (spec.namespace, spec.common_annotations, spec.replicas, spec.components) == (
        "team", (("owner", "me"),), (("web", 3), ("db", 2)), ("../components/extra",))
    assert [yaml.safe_load(p) for p in spec.patches] == [{"target": {"kind": "Deployment"}, "patch": "- op: add"}]
    directory = config.applications["jsonnet-app"].source.directory
    assert directory is not None
    assert [(v.name, v.value, v.code) for v in directory.jsonnet.tlas] == [("replicas", "2", True)]
    assert [(v.name, v.value) for v in directory.jsonnet.ext_vars] == [("env", "prod")]
    assert directory.jsonnet.libs == ("vendor",)
