"""ApplicationSet generators and policies that must behave as Argo CD's (facts from Argo CD's generator sources,
their Go test tables and the ApplicationSet docs; the code and cases here are tidecd's own)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tests.unit.test_appset_generators import FakeSources, appset
from tidecd.config.appset.expand import expand
from tidecd.config.appset.generators import ClusterInfo, Evaluator
from tidecd.config.appset.template import Renderer

CLUSTERS = [ClusterInfo("staging-1", "https://s1", {"type": "staging"}, {"owner": "a"}),
            ClusterInfo("staging-2", "https://s2", {"type": "staging"}),
            ClusterInfo("prod", "https://p", {"type": "production"})]


def params(gen: dict[str, Any], root: Path, *, go: bool = True,
           clusters: list[ClusterInfo] | None = None) -> list[dict[str, Any]]:
    evaluator = Evaluator(FakeSources(root, clusters), Renderer(go))
    return [p.values for p in evaluator.run(gen, "spec.generators[0]")]


def test_cluster_flat_list_gives_one_parameter_set_with_every_cluster(tmp_path: Path) -> None:
    """Generators-Cluster.md, "Gather cluster information as a flat list": one Application per generator."""
    gen = {"clusters": {"selector": {"matchLabels": {"type": "staging"}}, "flatList": True}}
    found = params(gen, tmp_path, clusters=CLUSTERS)
    assert len(found) == 1
    assert [c["name"] for c in found[0]["clusters"]] == ["staging-1", "staging-2"]
    spec_values = "clusters:\n{{- range .clusters }}\n  - name: {{ .name }}\n{{- end }}\n"
    out = expand(appset([gen], go=True, name="flat-list-guestbook",
                        extra={"source": {"repoURL": "https://git.example/apps", "path": "helm-guestbook",
                                          "helm": {"values": spec_values}}}),
                 FakeSources(tmp_path, CLUSTERS))
    assert list(out.apps) == ["flat-list-guestbook"], out.errors
    values = out.apps["flat-list-guestbook"].doc["spec"]["source"]["helm"]["values"]
    assert values == "clusters:\n  - name: staging-1\n  - name: staging-2\n"


def test_cluster_params_as_argo_cd_gives_them(tmp_path: Path) -> None:
    """cluster.go: the local cluster has name, nameNormalized (unchanged) and server only; a Secret's cluster has
    `metadata` with only its non-empty maps; nameNormalized is sanitized (lowercase, [-a-z0-9.], trimmed)."""
    found = {p["name"]: p for p in params({"clusters": {}}, tmp_path,
                                          clusters=[*CLUSTERS, ClusterInfo("-My_Cluster.", "https://m")])}
    assert found["in-cluster"] == {"name": "in-cluster", "nameNormalized": "in-cluster",
                                   "server": "https://kubernetes.default.svc"}
    assert found["staging-1"]["metadata"] == {"labels": {"type": "staging"}, "annotations": {"owner": "a"}}
    assert found["staging-2"]["metadata"] == {"labels": {"type": "staging"}}
    assert found["-My_Cluster."]["metadata"] == {}
    assert found["-My_Cluster."]["nameNormalized"] == "my-cluster"
    flat = {p["name"]: p for p in params({"clusters": {}}, tmp_path, go=False, clusters=CLUSTERS)}
    assert flat["in-cluster"] == {"name": "in-cluster", "nameNormalized": "in-cluster",
                                  "server": "https://kubernetes.default.svc"}
    assert flat["staging-1"]["metadata.annotations.owner"] == "a"


def test_matrix_first_generators_values_win_with_go_templates(tmp_path: Path) -> None:
    """matrix.go merges the second's set, then the first's, into an empty map with mergo.WithOverride (mergo
    v1.0.2): the first's values win, even empty ones (mergo overrides map entries with empty values), nested
    maps are merged key by key the same way, and a value meeting a map of another kind replaces it."""
    gen = {"matrix": {"generators": [
        {"list": {"elements": [{"a": "first", "empty": "", "nested": {"x": "1"}, "zero": 0, "gone": None,
                                "items": [], "kind": "text"}]}},
        {"list": {"elements": [{"a": "second", "b": "b2", "empty": "filled", "nested": {"x": "2", "y": "3"},
                                "zero": 5, "gone": "here", "items": ["i"], "kind": {"k": "v"}}]}}]}}
    assert params(gen, tmp_path) == [{"a": "first", "b": "b2", "empty": "", "nested": {"x": "1", "y": "3"},
                                      "zero": 0, "gone": None, "items": [], "kind": "text"}]


def test_matrix_fasttemplate_refuses_a_key_both_give_differently(tmp_path: Path) -> None:
    """CombineStringMaps: the same key with the same value is fine; with different values the matrix fails."""
    same = {"matrix": {"generators": [{"list": {"elements": [{"a": "1", "b": "x"}]}},
                                      {"list": {"elements": [{"a": "1", "c": "y"}]}}]}}
    assert params(same, tmp_path, go=False) == [{"a": "1", "b": "x", "c": "y"}]
    differ = {"matrix": {"generators": [{"list": {"elements": [{"a": "1"}]}},
                                        {"list": {"elements": [{"a": "2"}]}}]}}
    out = expand(appset([differ], name="{{a}}"), FakeSources(tmp_path))
    assert out.failed and not out.apps
    assert "spec.generators[0].matrix: both generators give parameter 'a'" in out.errors[0]


def test_merge_refuses_duplicate_merge_keys_in_any_generator(tmp_path: Path) -> None:
    """merge.go (getParamSetsByMergeKey, ErrNonUniqueParamSets) keys the base generator's sets too: a merge key
    repeated in the first generator fails the merge as it does in a later one."""
    for number, gens in enumerate([
            [{"list": {"elements": [{"name": "a", "v": "1"}, {"name": "a", "v": "2"}]}},
             {"list": {"elements": [{"name": "a", "w": "x"}]}}],
            [{"list": {"elements": [{"name": "a"}]}},
             {"list": {"elements": [{"name": "a", "w": "1"}, {"name": "a", "w": "2"}]}}]]):
        gen = {"merge": {"mergeKeys": ["name"], "generators": gens}}
        out = expand(appset([gen], name="{{name}}"), FakeSources(tmp_path))
        assert out.failed and not out.apps
        assert f'spec.generators[0].merge.generators[{number}]: two parameter sets have the same merge keys ' \
               '({"name": "a"})' in out.errors[0]


def test_merge_keys_are_top_level_parameters_compared_as_json(tmp_path: Path) -> None:
    """merge.go reads `paramSet[mergeKey]`: a nested value is not found by its dotted name (both sides null, so
    they match), and 1 and "1" are different keys."""
    nested = {"merge": {"mergeKeys": ["meta.zone"], "generators": [
        {"list": {"elements": [{"meta": {"zone": "a"}, "v": "base"}]}},
        {"list": {"elements": [{"meta": {"zone": "b"}, "v": "override"}]}}]}}
    assert params(nested, tmp_path) == [{"meta": {"zone": "b"}, "v": "override"}]
    typed = {"merge": {"mergeKeys": ["n"], "generators": [
        {"list": {"elements": [{"n": 1, "v": "base"}]}}, {"list": {"elements": [{"n": "1", "v": "override"}]}}]}}
    assert params(typed, tmp_path) == [{"n": 1, "v": "base"}]


def test_merge_with_go_templates_overrides_as_mergo_does(tmp_path: Path) -> None:
    """merge.go: mergo.Merge(&base, override, mergo.WithOverride): empty values override too, maps merge."""
    gen = {"merge": {"mergeKeys": ["name"], "generators": [
        {"list": {"elements": [{"name": "a", "tier": "gold", "nested": {"x": "1", "y": "2"}}]}},
        {"list": {"elements": [{"name": "a", "tier": "", "nested": {"y": "3"}}]}}]}}
    assert params(gen, tmp_path) == [{"name": "a", "tier": "", "nested": {"x": "1", "y": "3"}}]


def test_merge_key_missing_on_both_sides_matches_as_null(tmp_path: Path) -> None:
    """merge.go keys each set by the JSON of its merge-key values; a missing key is null on both sides."""
    gen = {"merge": {"mergeKeys": ["name", "zone"], "generators": [
        {"list": {"elements": [{"name": "a", "v": "base"}]}},
        {"list": {"elements": [{"name": "a", "v": "override"}]}}]}}
    assert params(gen, tmp_path) == [{"name": "a", "v": "override"}]


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_git_empty_file_gives_the_path_parameters(tmp_path: Path) -> None:
    """parseFileParams: "This will also succeed for empty files" — one set with the path parameters only."""
    _tree(tmp_path, {"clusters/Web_1/config.yaml": ""})
    gen = {"git": {"repoURL": "https://git.example/apps", "files": [{"path": "clusters/*/config.yaml"}]}}
    assert params(gen, tmp_path) == [{"path": {
        "path": "clusters/Web_1", "basename": "Web_1", "basenameNormalized": "web-1", "segments": ["clusters", "Web_1"],
        "filename": "config.yaml", "filenameNormalized": "config.yaml"}}]
    assert params(gen, tmp_path, go=False) == [{
        "path": "clusters/Web_1", "path.basename": "Web_1", "path.basenameNormalized": "web-1",
        "path.filename": "config.yaml", "path.filenameNormalized": "config.yaml",
        "path[0]": "clusters", "path[1]": "Web_1"}]


def test_git_files_match_as_a_git_pathspec_by_default(tmp_path: Path) -> None:
    """Argo CD's default file globbing is `git ls-files -- PATTERN`: `*` crosses folders; a pattern without
    wildcards names a file or a folder (everything under it); doublestar is its controller's opt-in."""
    _tree(tmp_path, {"config.json": "{}", "envs/a.json": "{}", "envs/prod/b.json": "{}", "envs/prod/x/c.json": "{}",
                     "other/d.json": "{}"})

    def files(pattern: str) -> list[str]:
        gen = {"git": {"repoURL": "https://git.example/apps", "files": [{"path": pattern}]}}
        return [f"{p['path']['path']}/{p['path']['filename']}" for p in params(gen, tmp_path)]

    assert files("envs/*.json") == ["envs/a.json", "envs/prod/b.json", "envs/prod/x/c.json"]
    assert files("envs/*/b.json") == ["envs/prod/b.json"]
    assert files("**/*.json") == ["envs/a.json", "envs/prod/b.json", "envs/prod/x/c.json", "other/d.json"]
    assert files("envs/prod") == ["envs/prod/b.json", "envs/prod/x/c.json"]
    assert files("config.json") == ["./config.json"]


def test_git_directories_match_as_go_path_match(tmp_path: Path) -> None:
    """filterPaths uses Go's path.Match: `*` stays within one folder and `**` is no more than `*`."""
    _tree(tmp_path, {"apps/web/base/k.yaml": "", "apps/api/k.yaml": ""})

    def dirs(pattern: str) -> list[str]:
        gen = {"git": {"repoURL": "https://git.example/apps", "directories": [{"path": pattern}]}}
        return [p["path"]["path"] for p in params(gen, tmp_path)]

    assert dirs("apps/*") == ["apps/api", "apps/web"]
    assert dirs("apps/**") == ["apps/api", "apps/web"]
    assert dirs("apps/*/base") == ["apps/web/base"]


def test_git_file_at_the_root_has_dot_as_its_path(tmp_path: Path) -> None:
    """path.Dir("config.json") is "." and path.Base(".") is ".", so segments is ["."]."""
    _tree(tmp_path, {"config.json": '{"env": "root"}'})
    gen = {"git": {"repoURL": "https://git.example/apps", "files": [{"path": "config.json"}]}}
    assert params(gen, tmp_path)[0]["path"] == {"path": ".", "basename": ".", "basenameNormalized": "",
                                                "segments": ["."], "filename": "config.json",
                                                "filenameNormalized": "config.json"}
    assert params(gen, tmp_path, go=False)[0]["path[0]"] == "."


def test_empty_generators_generate_nothing(tmp_path: Path) -> None:
    """`generators: []` is valid in Argo CD and generates no Application (so what was generated goes)."""
    out = expand(appset([]), FakeSources(tmp_path))
    assert out.apps == {} and out.errors == [] and not out.failed


def test_a_duplicated_name_sets_every_app_of_that_name_aside(tmp_path: Path) -> None:
    """validateGeneratedApplications records its errors by the app's name, and validApps drops every app whose
    name has an error: a name generated twice generates neither app."""
    gens = [{"list": {"elements": [{"n": "same", "v": "first"}, {"n": "other", "v": "x"}]}},
            {"list": {"elements": [{"n": "same", "v": "2"}]}}]
    out = expand(appset(gens, name="{{n}}", extra={"source": {"repoURL": "https://git.example/{{v}}"}}),
                 FakeSources(tmp_path))
    assert list(out.apps) == ["other"] and not out.failed
    [error] = out.errors
    assert "spec.generators[0] (list element 0): spec.template.metadata.name: 'same' is generated again by " \
           "spec.generators[1] (list element 0): every app of that name is set aside" in error


def test_the_resources_finalizer_is_added_as_argo_cd_adds_it(tmp_path: Path) -> None:
    """RenderTemplateParams (TestRenderTemplateParamsFinalizers): added when the template names no finalizer and
    preserveResourcesOnDeletion is off; a template's own finalizers stay; empty parameters leave the template."""
    def finalizers(elements: list[dict[str, Any]], own: list[str] | None = None, **spec: Any) -> object:
        made = appset([{"list": {"elements": elements}}], name="app", **spec)
        if own is not None:
            made = dataclasses.replace(made, template={**made.template, "metadata": {"name": "app",
                                                                                     "finalizers": own}})
        return expand(made, FakeSources(tmp_path)).apps["app"].doc["metadata"].get("finalizers")

    assert finalizers([{"a": "1"}]) == ["resources-finalizer.argocd.argoproj.io"]
    assert finalizers([{"a": "1"}], syncPolicy={"preserveResourcesOnDeletion": True}) is None
    assert finalizers([{}]) is None
    assert finalizers([{"a": "1"}], own=["example.com/mine"]) == ["example.com/mine"]


TAB_INDENTED_JSON_PATCH = """{
\t"metadata": {
\t\t"annotations": {
\t\t\t{{- range $k, $v := .annotations }}
\t\t\t"{{ $k }}": "{{ $v }}"
\t\t\t{{- end }}
\t\t}
\t},
\t{{- if .createNamespace }}
\t"spec": {"syncPolicy": {"syncOptions": ["CreateNamespace=true"]}}
\t{{- end }}
}
"""


def test_a_json_template_patch_is_read_as_json(tmp_path: Path) -> None:
    """ConvertYAMLToJSON: a patch starting with `{` is JSON (Argo CD's e2e patch is JSON indented with tabs,
    which YAML refuses); anything else is YAML. A bad JSON patch sets the app aside naming the line."""
    element = {"cluster": "my-cluster", "createNamespace": True, "annotations": {"some-key": "some-value"}}
    out = expand(appset([{"list": {"elements": [element]}}], go=True, name="{{ .cluster }}-guestbook",
                        patch=TAB_INDENTED_JSON_PATCH), FakeSources(tmp_path))
    doc = out.apps["my-cluster-guestbook"].doc
    assert doc["metadata"]["annotations"] == {"some-key": "some-value"}
    assert doc["spec"]["syncPolicy"] == {"syncOptions": ["CreateNamespace=true"]}
    bad = expand(appset([{"list": {"elements": [element]}}], go=True, name="x", patch='{"metadata": {,}}'),
                 FakeSources(tmp_path))
    assert not bad.apps and "it is not JSON (line 1, column 15)" in bad.errors[0]
    yaml_patch = expand(appset([{"list": {"elements": [element]}}], go=True, name="x",
                               patch="metadata:\n  labels:\n    c: '{{ .cluster }}'\n"), FakeSources(tmp_path))
    assert yaml_patch.apps["x"].doc["metadata"]["labels"] == {"c": "my-cluster"}
