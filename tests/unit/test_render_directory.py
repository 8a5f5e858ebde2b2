"""Directory apps, the checks every render passes through, tool choice and the manifest cache."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tidecd.base.errors import ConfigError, RenderError, UnsafePathError
from tidecd.base.model import Manifest
from tidecd.clients.store import MemoryStore
from tidecd.config.load import ApplicationSource, DirectorySpec, HelmSpec, KustomizeSpec
from tidecd.render import Tool, choose_tool, manifest_key, render, render_cached, tool
from tidecd.render.directory import compile_globs, manifest_files

REPO = "https://git.example.com/apps.git"


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def cm(name: str, namespace: str = "") -> str:
    ns = f"\n  namespace: {namespace}" if namespace else ""
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}{ns}\n"


def source(path: str = "app", directory: DirectorySpec | None = None) -> ApplicationSource:
    return ApplicationSource(repo_url=REPO, path=path, directory=directory)


def names(manifests: list[Manifest]) -> list[str]:
    return [m["metadata"]["name"] for m in manifests]


def run(checkout: Path, src: ApplicationSource) -> list[Manifest]:
    return render(checkout, src, app_name="demo", namespace="team")


# -- which files ---------------------------------------------------------------------------------------

@pytest.fixture
def tree(tmp_path: Path) -> Path:
    write(tmp_path, "app/b.yaml", cm("b"))
    write(tmp_path, "app/a.yml", cm("a"))
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c"}}
    write(tmp_path, "app/c.json", json.dumps(secret))
    write(tmp_path, "app/README.md", "# not a manifest: ignored\n")
    write(tmp_path, "app/sub/d.yaml", cm("d"))
    write(tmp_path, "app/sub/deeper/e.yaml", cm("e"))
    write(tmp_path, "app/sub/skip.yaml", cm("skip"))
    return tmp_path


def test_top_level_only_by_default(tree: Path) -> None:
    assert names(run(tree, source())) == ["a", "b", "c"]


def test_recurse_reads_subdirectories_in_walk_order(tree: Path) -> None:
    got = run(tree, source(directory=DirectorySpec(recurse=True)))
    assert names(got) == ["a", "b", "c", "d", "e", "skip"]


def test_walk_order_visits_a_directory_where_its_name_sorts(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", cm("file"))
    write(tmp_path, "a/x.yaml", cm("in-dir"))
    # Argo CD's walk sorts entries by name: directory `a` comes before file `a.yaml`.
    assert manifest_files(tmp_path, DirectorySpec(recurse=True)) == ["a/x.yaml", "a.yaml"]


def test_exclude_glob_crosses_directories(tree: Path) -> None:
    got = run(tree, source(directory=DirectorySpec(recurse=True, exclude="*skip.yaml")))
    assert names(got) == ["a", "b", "c", "d", "e"]


def test_include_brace_pattern(tree: Path) -> None:
    got = run(tree, source(directory=DirectorySpec(recurse=True, include="{a.yml,sub/*}")))
    assert names(got) == ["a", "d", "e", "skip"]


def test_include_comma_list_and_exclude_together(tree: Path) -> None:
    spec = DirectorySpec(recurse=True, include="*.yaml,*.json", exclude="{sub/deeper/*,sub/skip.yaml}")
    assert names(run(tree, source(directory=spec))) == ["b", "c", "d"]


def test_glob_syntax() -> None:
    star = compile_globs("*.yaml")
    assert star is not None and star.fullmatch("x/y.yaml") and not star.fullmatch("y.yml")
    question = compile_globs("?.yaml")
    assert question is not None and question.fullmatch("a.yaml") and not question.fullmatch("ab.yaml")
    klass = compile_globs("[!b]*.yaml")
    assert klass is not None and klass.fullmatch("a.yaml") and not klass.fullmatch("b.yaml")
    nested = compile_globs("{a,b{1,2}}.yaml")
    assert nested is not None and nested.fullmatch("b2.yaml") and not nested.fullmatch("b.yaml")
    assert compile_globs("  ") is None
    with pytest.raises(RenderError, match="unclosed"):
        compile_globs("{a,b")


# -- how files are read ------------------------------------------------------------------------------------

def test_multi_document_yaml_skips_empty_documents(tmp_path: Path) -> None:
    write(tmp_path, "app/all.yaml", f"---\n{cm('one')}---\n---\n# only a comment\n---\n{cm('two')}")
    assert names(run(tmp_path, source())) == ["one", "two"]


def test_json_file(tmp_path: Path) -> None:
    obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
           "spec": {"replicas": 2}}
    write(tmp_path, "app/web.json", json.dumps(obj))
    assert run(tmp_path, source()) == [obj]


def test_list_kinds_are_expanded(tmp_path: Path) -> None:
    write(tmp_path, "app/list.yaml", """
        apiVersion: v1
        kind: List
        items:
          - {apiVersion: v1, kind: ConfigMap, metadata: {name: one}}
          - apiVersion: v1
            kind: ConfigMapList
            items:
              - {apiVersion: v1, kind: ConfigMap, metadata: {name: two}}
        ---
        apiVersion: example.com/v1
        kind: AllowList
        metadata: {name: not-a-list}
        spec: {}
        """)
    got = run(tmp_path, source())
    assert names(got) == ["one", "two", "not-a-list"]
    assert got[2]["kind"] == "AllowList"


def test_values_stay_json_shaped(tmp_path: Path) -> None:
    write(tmp_path, "app/cm.yaml", cm("dates") + "data:\n  when: 2024-01-02\n  at: 2024-01-02T03:04:05Z\n")
    got = run(tmp_path, source())
    assert got[0]["data"] == {"when": "2024-01-02", "at": "2024-01-02T03:04:05Z"}
    json.dumps(got)  # the cache stores JSON


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app/bom.yaml").write_bytes(b"\xef\xbb\xbf" + cm("bom").encode())
    assert names(run(tmp_path, source())) == ["bom"]


# -- errors name the file, line and document -------------------------------------------------------------

def test_invalid_yaml_names_file_and_line(tmp_path: Path) -> None:
    write(tmp_path, "app/bad.yaml", cm("ok") + "data:\n  a: b\n   c: d\n")
    with pytest.raises(RenderError, match=r"^app/bad\.yaml line 7 column \d+: invalid YAML"):
        run(tmp_path, source())


def test_invalid_json_names_file_and_line(tmp_path: Path) -> None:
    write(tmp_path, "app/bad.json", '{\n  "apiVersion": "v1",\n  "kind" "x"\n}\n')
    with pytest.raises(RenderError, match=r"^app/bad\.json line 3 column \d+: invalid JSON"):
        run(tmp_path, source())


def test_document_that_is_not_a_mapping(tmp_path: Path) -> None:
    write(tmp_path, "app/list.yaml", f"{cm('ok')}---\n- just\n- a list\n")
    with pytest.raises(RenderError, match=r"^app/list\.yaml document 2: expected a mapping .*got a list"):
        run(tmp_path, source())


@pytest.mark.parametrize(
    ("body", "missing"),
    [
        ("apiVersion: v1\nmetadata: {name: x}\n", "kind"),
        ("kind: ConfigMap\nmetadata: {name: x}\n", "apiVersion"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {labels: {a: b}}\n", "metadata.name"),
        ("apiVersion: v1\nkind: ConfigMap\n", "metadata"),
    ],
)
def test_object_without_identity(tmp_path: Path, body: str, missing: str) -> None:
    write(tmp_path, "app/x.yaml", f"{cm('first')}---\n{body}")
    with pytest.raises(RenderError, match=rf"^app/x\.yaml document 2: .*has no {missing}$"):
        run(tmp_path, source())


def test_list_item_without_name_names_the_item(tmp_path: Path) -> None:
    write(tmp_path, "app/l.yaml", "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap}\n")
    with pytest.raises(RenderError, match=r"^app/l\.yaml document 1 item 1: ConfigMap has no metadata$"):
        run(tmp_path, source())


def test_duplicate_object_names_both_origins(tmp_path: Path) -> None:
    write(tmp_path, "app/a.yaml", cm("same", "ns1"))
    write(tmp_path, "app/b.yaml", f"{cm('other', 'ns1')}---\n{cm('same', 'ns1')}")
    with pytest.raises(RenderError) as err:
        run(tmp_path, source())
    assert str(err.value) == (
        "ConfigMap ns1/same is declared twice: in app/a.yaml document 1 and in app/b.yaml document 2"
    )


def test_same_name_in_other_namespace_is_not_a_duplicate(tmp_path: Path) -> None:
    write(tmp_path, "app/a.yaml", f"{cm('same', 'ns1')}---\n{cm('same', 'ns2')}---\n{cm('same')}")
    assert names(run(tmp_path, source())) == ["same", "same", "same"]


def test_app_path_must_be_a_directory(tmp_path: Path) -> None:
    write(tmp_path, "app/a.yaml", cm("a"))
    with pytest.raises(RenderError, match="spec.source.path 'nope' is not a directory"):
        run(tmp_path, source("nope"))


# -- paths and symlinks -----------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["../..", "app/../../outside", "/etc"])
def test_app_path_leaving_the_checkout_is_refused(tmp_path: Path, path: str) -> None:
    checkout = tmp_path / "checkout"
    write(checkout, "app/a.yaml", cm("a"))
    write(tmp_path, "outside/x.yaml", cm("x"))
    with pytest.raises(UnsafePathError, match="spec.source.path"):
        run(checkout, source(path))


def test_symlink_to_etc_passwd_is_refused_before_reading(tmp_path: Path) -> None:
    write(tmp_path, "app/a.yaml", cm("a"))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere/passwd.yaml").symlink_to("/etc/passwd")  # not even in the app path
    with pytest.raises(UnsafePathError, match="elsewhere/passwd.yaml points outside"):
        run(tmp_path, source())


def test_symlink_within_the_repository_is_followed(tmp_path: Path) -> None:
    write(tmp_path, "shared/common.yaml", cm("common"))
    write(tmp_path, "app/own.yaml", cm("own"))
    (tmp_path / "app/common.yaml").symlink_to("../shared/common.yaml")
    assert names(run(tmp_path, source())) == ["common", "own"]


def test_app_path_dot_renders_the_repository_root(tmp_path: Path) -> None:
    write(tmp_path, "root.yaml", cm("root"))
    assert names(run(tmp_path, source("."))) == ["root"]


# -- tool choice ---------------------------------------------------------------------------------------------

def test_tool_is_discovered_from_files(tmp_path: Path) -> None:
    plain = write(tmp_path, "plain/a.yaml", cm("a")).parent
    chart = write(tmp_path, "chart/Chart.yaml", "apiVersion: v2\nname: c\nversion: 0.1.0\n").parent
    kust = write(tmp_path, "kust/Kustomization", "resources: []\n").parent
    both = write(tmp_path, "both/Chart.yaml", "apiVersion: v2\nname: c\nversion: 0.1.0\n").parent
    write(tmp_path, "both/kustomization.yml", "resources: []\n")
    assert choose_tool(plain, source()) is Tool.DIRECTORY
    assert choose_tool(chart, source()) is Tool.HELM
    assert choose_tool(kust, source()) is Tool.KUSTOMIZE
    assert choose_tool(both, source()) is Tool.KUSTOMIZE  # Argo CD's discovery ends on kustomize


def test_explicit_spec_wins_over_discovery(tmp_path: Path) -> None:
    chart = write(tmp_path, "chart/Chart.yaml", "apiVersion: v2\nname: c\nversion: 0.1.0\n").parent
    assert choose_tool(chart, source(directory=DirectorySpec())) is Tool.DIRECTORY
    kust = ApplicationSource(repo_url=REPO, path="chart", kustomize=KustomizeSpec())
    assert choose_tool(chart, kust) is Tool.KUSTOMIZE


def test_two_explicit_specs_are_an_error(tmp_path: Path) -> None:
    both = ApplicationSource(repo_url=REPO, path=".", helm=HelmSpec(), directory=DirectorySpec())
    with pytest.raises(RenderError, match=r"more than one source type given \(helm, directory\)"):
        choose_tool(tmp_path, both)


def test_helm_repository_chart_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RenderError, match="spec.source.chart 'nginx'"):
        run(tmp_path, ApplicationSource(repo_url="https://charts.example.com", chart="nginx"))


# -- cache ------------------------------------------------------------------------------------------------

SHA = "0123456789abcdef0123456789abcdef01234567"


class Counter:
    def __init__(self, name: str = "x") -> None:
        self.calls = 0
        self.name = name

    def __call__(self) -> list[Manifest]:
        self.calls += 1
        return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": self.name}}]


def test_second_render_of_a_revision_comes_from_the_store() -> None:
    store, fn = MemoryStore(), Counter()
    first = render_cached(store, "demo", SHA, source(), fn, namespace="team")
    second = render_cached(store, "demo", SHA, source(), fn, namespace="team")
    assert fn.calls == 1
    assert first == second == Counter()()
    assert store.list("manifests/") == [manifest_key("demo", SHA, source(), "team")]


def test_cache_key_layout() -> None:
    key = manifest_key("demo", SHA, source(), "team")
    assert key.startswith(f"manifests/demo/{SHA}-") and key.endswith(".json")
    assert len(key.rsplit("-", 1)[1]) == len("0123456789abcdef.json")


@pytest.mark.parametrize(
    ("sha", "src", "namespace"),
    [
        ("fedcba9876543210fedcba9876543210fedcba98", source(), "team"),
        (SHA, source(directory=DirectorySpec(recurse=True)), "team"),
        (SHA, source(), "other-team"),
    ],
)
def test_cache_misses_when_revision_source_or_namespace_change(
    sha: str, src: ApplicationSource, namespace: str
) -> None:
    store, fn = MemoryStore(), Counter()
    render_cached(store, "demo", SHA, source(), fn, namespace="team")
    render_cached(store, "demo", sha, src, fn, namespace=namespace)
    assert fn.calls == 2


def test_unusable_cache_entry_is_rendered_again() -> None:
    store, fn = MemoryStore(), Counter("fresh")
    key = manifest_key("demo", SHA, source(), "team")
    store.write(key, b"{not json")
    assert names(render_cached(store, "demo", SHA, source(), fn, namespace="team")) == ["fresh"]
    assert names(render_cached(store, "demo", SHA, source(), fn, namespace="team")) == ["fresh"]
    assert fn.calls == 1


def test_render_errors_are_not_cached() -> None:
    store = MemoryStore()

    def failing() -> list[Manifest]:
        raise RenderError("broken")

    with pytest.raises(RenderError):
        render_cached(store, "demo", SHA, source(), failing, namespace="team")
    assert store.list("manifests/") == []


@pytest.mark.parametrize(("app", "sha"), [("../x", SHA), ("demo", "a/b"), ("", SHA)])
def test_cache_key_refuses_path_like_names(app: str, sha: str) -> None:
    with pytest.raises(ConfigError):
        manifest_key(app, sha, source(), "team")


# -- external tools -------------------------------------------------------------------------------------

def test_tools_run_without_the_functions_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDECD_API_TOKEN", "s3cret-token")
    out = tool.run(["env"], what="env", cwd=tmp_path, home=tmp_path, env={"EXTRA": "1"})
    assert "s3cret-token" not in out
    assert f"HOME={tmp_path}" in out.splitlines() and "EXTRA=1" in out.splitlines()


def test_tool_failure_quotes_trimmed_stderr_without_temp_paths(tmp_path: Path) -> None:
    script = f"echo 'noise' >&2; echo '{tmp_path}/app/x.yaml: boom' >&2; exit 3"
    with pytest.raises(RenderError) as err:
        tool.run(["sh", "-c", script], what="sh app", cwd=tmp_path, home=tmp_path, strip=[tmp_path])
    assert str(err.value) == "sh app failed: noise\napp/x.yaml: boom"
    assert tool.trim("x" * 5000).startswith("...") and len(tool.trim("x" * 5000)) == 3 + tool.STDERR_LIMIT

