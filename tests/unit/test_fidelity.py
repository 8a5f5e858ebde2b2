"""Rendering fidelity with Argo CD: generateName hooks, hook-weight waves, app-level sync options,
jsonnet directories, jq ignore rules and RespectIgnoreDifferences (issue 12, pure parts)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tidecd.base.errors import LimitExceeded, RenderError, UnsafePathError
from tidecd.base.model import Manifest, ResourceKey, SyncStatus
from tidecd.config.load import ApplicationSource, DirectorySpec, IgnoreDifference, JsonnetSpec, JsonnetVar
from tidecd.diff import compare, respect_ignored
from tidecd.render import render
from tidecd.sync import options as syncoptions
from tidecd.sync.plan import HookNaming, Phase, merged_options, plan, resources, wave_of

REPO = "https://git.example/team/app"
HOOK = "argocd.argoproj.io/hook"


def obj(kind: str, name: str | None, api: str = "v1", **annotations: str) -> dict[str, object]:
    meta: dict[str, object] = {"namespace": "ns", "annotations": dict(annotations)}
    if name is not None:
        meta["name"] = name
    return {"apiVersion": api, "kind": kind, "metadata": meta}


def generated(kind: str, prefix: str, phase: str) -> dict[str, object]:
    job = obj(kind, None, "batch/v1", **{HOOK: phase})
    job["metadata"]["generateName"] = prefix  # type: ignore[index]
    return job


# --- generateName hooks ----------------------------------------------------------------------------


def test_generate_name_hooks_are_named_per_operation_as_gitops_engine_names_them() -> None:
    manifests = [generated("Job", "migrate-", "PreSync,PostSync"), obj("ConfigMap", "c")]
    naming = HookNaming("0123456789abcdef", 1_700_000_000)
    tasks = plan(manifests, naming=naming)
    hooks = [(t.phase, t.key.name, t.obj["metadata"]["name"]) for t in tasks if t.hook]
    assert hooks == [(Phase.PRE_SYNC, "migrate-0123456-presync-1700000000", "migrate-0123456-presync-1700000000"),
                     (Phase.POST_SYNC, "migrate-0123456-postsync-1700000000", "migrate-0123456-postsync-1700000000")]
    # The same operation (same revision and start) names them the same: a re-run step finds its hook.
    assert [t.key for t in plan(manifests, naming=naming)] == [t.key for t in tasks]
    # The next operation gets new names.
    later = plan(manifests, naming=HookNaming("0123456789abcdef", 1_700_000_060))
    assert {t.key.name for t in later if t.hook}.isdisjoint({t.key.name for t in tasks if t.hook})
    assert all(t.generate_name == "migrate-" for t in tasks if t.hook)
    assert manifests[0]["metadata"].get("name") is None  # type: ignore[attr-defined]  # input untouched
    assert [ResourceKey.of(m).name for m in resources(manifests)] == ["c"]


def test_render_accepts_generate_name_only_on_hooks(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "hooks.yaml").write_text(textwrap.dedent("""\
        apiVersion: batch/v1
        kind: Job
        metadata:
          generateName: migrate-
          annotations: {argocd.argoproj.io/hook: PreSync}
        ---
        apiVersion: batch/v1
        kind: Job
        metadata:
          generateName: smoke-
          annotations: {helm.sh/hook: post-install}
        """))
    got = render(tmp_path, ApplicationSource(repo_url=REPO, path="app"), app_name="a", namespace="ns")
    assert [m["metadata"]["generateName"] for m in got] == ["migrate-", "smoke-"]
    (tmp_path / "app" / "plain.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: x-}\n")
    with pytest.raises(RenderError, match="ConfigMap has no metadata.name: only hooks .* may have just "
                                          "metadata.generateName"):
        render(tmp_path, ApplicationSource(repo_url=REPO, path="app"), app_name="a", namespace="ns")


def test_a_hook_with_neither_name_nor_generate_name_is_named_as_argocd_names_it(tmp_path: Path) -> None:
    """Argo CD's TestAutomaticallyNamingUnnamedHook: such a hook runs as `<revision[:7]>-<phase>-<unix time>`;
    any other object without a name stays an error."""
    from tidecd.sync.plan import HookNaming, Phase, plan

    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "hook.yaml").write_text(
        "apiVersion: batch/v1\nkind: Job\nmetadata: {annotations: {argocd.argoproj.io/hook: 'PreSync,PostSync'}}\n")
    got = render(tmp_path, ApplicationSource(repo_url=REPO, path="app"), app_name="a", namespace="ns")
    named = [t.key.name for t in plan(got, naming=HookNaming("ABCDEF0123456789", 1700000000))]
    assert named == ["abcdef0-presync-1700000000", "abcdef0-postsync-1700000000"]
    assert [t.phase for t in plan(got, naming=HookNaming("a" * 40, 1))] == [Phase.PRE_SYNC, Phase.POST_SYNC]
    (tmp_path / "app" / "plain.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n")
    with pytest.raises(RenderError, match="ConfigMap has no metadata.name$"):
        render(tmp_path, ApplicationSource(repo_url=REPO, path="app"), app_name="a", namespace="ns")


def test_two_generate_name_hooks_with_one_prefix_are_a_duplicate(tmp_path: Path) -> None:
    one = "kind: Job\napiVersion: batch/v1\nmetadata: {generateName: x-, annotations: {argocd.argoproj.io/hook: S}}\n"
    (tmp_path / "a.yaml").write_text(one + "---\n" + one)
    with pytest.raises(RenderError, match=r"batch/Job x-\* is declared twice"):
        render(tmp_path, ApplicationSource(repo_url=REPO, path="."), app_name="a", namespace="")


# --- waves ------------------------------------------------------------------------------------------


def test_hook_weight_is_the_wave_of_plain_objects_too() -> None:
    assert wave_of(obj("ConfigMap", "a", **{"helm.sh/hook-weight": "-3"})) == -3
    assert wave_of(obj("ConfigMap", "a", **{"helm.sh/hook-weight": "5", "argocd.argoproj.io/sync-wave": "1"})) == 1
    tasks = plan([obj("ConfigMap", "late", **{"helm.sh/hook-weight": "2"}), obj("ConfigMap", "early")])
    assert [(t.key.name, t.wave) for t in tasks] == [("early", 0), ("late", 2)]


# --- app-level sync options -------------------------------------------------------------------------


def test_app_level_per_object_options_reach_every_task_and_the_object_wins() -> None:
    plain = obj("ConfigMap", "a")
    own = obj("ConfigMap", "b", **{"argocd.argoproj.io/sync-options": "Replace=false"})
    options = ("Replace=true", "CreateNamespace=true", "ServerSideApply=true")
    assert merged_options(options, plain) == frozenset({"Replace=true", "ServerSideApply=true"})
    assert merged_options(options, own) == frozenset({"Replace=false", "ServerSideApply=true"})
    [a, b] = plan([plain, own], app_options=options)
    assert a.has_option("Replace=true") and not b.has_option("Replace=true")


def test_every_documented_app_sync_option_is_honoured_or_reported() -> None:
    documented = ["CreateNamespace=true", "Replace=true", "ServerSideApply=true", "ApplyOutOfSyncOnly=true",
                  "PruneLast=true", "Validate=false", "SkipDryRunOnMissingResource=true",
                  "RespectIgnoreDifferences=true", "PrunePropagationPolicy=orphan", "FailOnSharedResource=true",
                  "Force=true", "ClientSideApplyMigration=false"]
    assert syncoptions.problems(documented) == []
    assert syncoptions.problems(["Prune=confirm", "Replce=true"]) == [
        "spec.syncPolicy.syncOptions: 'Prune=confirm' is not supported by tidecd: confirmation of prunes is not "
        "implemented; sync with --prune instead",
        "spec.syncPolicy.syncOptions: 'Replce=true' is not supported by tidecd: not a sync option Argo CD "
        "documents at app level"]
    assert [c["type"] for c in syncoptions.conditions(["Delete=confirm"], "now")] == ["UnsupportedSyncOption"]
    assert syncoptions.prune_propagation(["PrunePropagationPolicy=foreground"]) == "Foreground"
    assert syncoptions.prune_propagation([]) == "Background"


# --- ignoreDifferences: jq, and RespectIgnoreDifferences --------------------------------------------


def deployment(replicas: int, init: list[str]) -> Manifest:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"replicas": replicas, "template": {"spec": {
                "initContainers": [{"name": n, "image": "busybox"} for n in init],
                "containers": [{"name": "web", "image": "nginx"}]}}}}


JQ_RULE = IgnoreDifference(group="apps", kind="Deployment", jq_path_expressions=(
    '.spec.template.spec.initContainers[] | select(.name == "injected")', ".spec.replicas"))


def test_jq_path_expressions_are_ignored_in_the_comparison() -> None:
    key = ResourceKey("apps", "Deployment", "ns", "web")
    live, desired = deployment(5, ["setup", "injected"]), deployment(1, ["setup"])
    assert compare(key, live, desired).status is SyncStatus.OUT_OF_SYNC
    assert compare(key, live, desired, [JQ_RULE]).status is SyncStatus.SYNCED
    changed = deployment(1, ["other"])
    assert compare(key, live, changed, [JQ_RULE]).changed_paths == (
        "spec.template.spec.initContainers[0].name",)


def test_respect_ignore_differences_keeps_live_values_of_ignored_fields() -> None:
    live, desired = deployment(5, ["setup", "injected"]), deployment(1, ["setup"])
    applied = respect_ignored(desired, live, [JQ_RULE])
    assert applied["spec"]["replicas"] == 5
    assert [c["name"] for c in applied["spec"]["template"]["spec"]["initContainers"]] == [
        "setup", "injected"]
    assert desired["spec"]["replicas"] == 1  # input untouched
    pointer = IgnoreDifference(kind="Deployment", json_pointers=("/spec/replicas",))
    assert respect_ignored(desired, live, [pointer])["spec"]["replicas"] == 5
    assert respect_ignored(desired, None, [pointer]) is desired  # nothing live: applied as written
    other = IgnoreDifference(kind="StatefulSet", json_pointers=("/spec/replicas",))
    assert respect_ignored(desired, live, [other]) is desired


# --- jsonnet ---------------------------------------------------------------------------------------


@pytest.fixture()
def jsonnet_repo(tmp_path: Path) -> Path:
    (tmp_path / "vendor").mkdir()
    (tmp_path / "app").mkdir()
    (tmp_path / "vendor" / "k.libsonnet").write_text(
        "{ cm(name, data):: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: name }, data: data } }\n")
    (tmp_path / "app" / "local.libsonnet").write_text("{ suffix: '-x' }\n")
    (tmp_path / "app" / "main.jsonnet").write_text(textwrap.dedent("""\
        local k = import 'k.libsonnet';
        local l = import 'local.libsonnet';
        function(replicas=1, tier='web') [
          k.cm('env' + l.suffix, { env: std.extVar('env'), tier: tier }),
          k.cm('count', { n: std.toString(replicas * 2), flag: std.toString(std.extVar('flag')) }),
        ]
        """))
    (tmp_path / "app" / "plain.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\n")
    return tmp_path


def jsonnet_source(**kwargs: object) -> ApplicationSource:
    spec = JsonnetSpec(tlas=(JsonnetVar("replicas", "3", code=True), JsonnetVar("tier", "db")),
                       ext_vars=(JsonnetVar("env", "prod"), JsonnetVar("flag", "true", code=True)),
                       libs=("vendor",))
    return ApplicationSource(repo_url=REPO, path="app", directory=DirectorySpec(jsonnet=spec, **kwargs))  # type: ignore[arg-type]


def test_jsonnet_files_render_with_tlas_ext_vars_and_libs(jsonnet_repo: Path) -> None:
    got = render(jsonnet_repo, jsonnet_source(), app_name="a", namespace="ns")
    assert [(m["metadata"]["name"], m.get("data")) for m in got] == [
        ("env-x", {"env": "prod", "tier": "db"}), ("count", {"n": "6", "flag": "true"}), ("plain", None)]


def test_jsonnet_respects_include_and_exclude(jsonnet_repo: Path) -> None:
    got = render(jsonnet_repo, jsonnet_source(exclude="*.jsonnet"), app_name="a", namespace="ns")
    assert [m["metadata"]["name"] for m in got] == ["plain"]


@pytest.mark.parametrize("target", ["../../etc/passwd", "/etc/passwd"])
def test_jsonnet_imports_stay_inside_the_checkout(jsonnet_repo: Path, target: str) -> None:
    (jsonnet_repo / "app" / "main.jsonnet").write_text(f"importstr '{target}'\n")
    with pytest.raises(RenderError, match="app/main.jsonnet: .*(leaves the repository checkout|absolute imports)"):
        render(jsonnet_repo, jsonnet_source(), app_name="a", namespace="ns")


def test_jsonnet_symlink_out_of_the_checkout_is_refused(jsonnet_repo: Path) -> None:
    (jsonnet_repo / "app" / "main.jsonnet").write_text("import 'link.libsonnet'\n")
    (jsonnet_repo / "app" / "link.libsonnet").symlink_to("/etc/hostname")
    with pytest.raises(UnsafePathError, match="points outside the repository checkout"):
        render(jsonnet_repo, jsonnet_source(), app_name="a", namespace="ns")


def test_jsonnet_errors_and_runaway_programs_are_bounded(jsonnet_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tidecd.render.jsonnet import render_jsonnet

    (jsonnet_repo / "app" / "main.jsonnet").write_text("error 'boom'\n")
    with pytest.raises(RenderError, match="app/main.jsonnet: RUNTIME ERROR: boom"):
        render(jsonnet_repo, jsonnet_source(), app_name="a", namespace="ns")
    # A loop in constant memory (tailstrict) runs into the render's time limit; a program that allocates
    # without end runs into the memory limit first. Both end as a LimitExceeded naming the file and the
    # variable, and neither is slow.
    slow = jsonnet_repo / "slow.jsonnet"
    slow.write_text("local loop(n, acc) = if n == 0 then acc else loop(n - 1, acc + 1) tailstrict;\n"
                    "loop(1000000000, 0)\n")
    monkeypatch.setenv("TIDECD_MAX_RENDER_SECONDS", "2")
    with pytest.raises(LimitExceeded, match=r"^slow \(jsonnet\): render time: over the limit of 2 s "
                                            r"\(TIDECD_MAX_RENDER_SECONDS\)$"):
        render_jsonnet(jsonnet_repo, jsonnet_repo, "slow.jsonnet", JsonnetSpec(), source="slow")
    greedy = jsonnet_repo / "greedy.jsonnet"
    greedy.write_text("std.foldl(function(a, b) a + b, std.range(0, 1000000000), 0)\n")
    monkeypatch.setenv("TIDECD_MAX_RENDER_SECONDS", "60")
    monkeypatch.setenv("TIDECD_MAX_RENDER_MEMORY_BYTES", str(256 * 2**20))
    with pytest.raises(LimitExceeded, match=r"^greedy \(jsonnet\): memory: over the limit of 268,435,456 bytes "
                                            r"\(TIDECD_MAX_RENDER_MEMORY_BYTES\)$"):
        render_jsonnet(jsonnet_repo, jsonnet_repo, "greedy.jsonnet", JsonnetSpec(), source="greedy")
    (jsonnet_repo / "app" / "main.jsonnet").write_text("[1]\n")
    with pytest.raises(RenderError, match="jsonnet output item 1 is not an object"):
        render(jsonnet_repo, jsonnet_source(), app_name="a", namespace="ns")


# --- multi-source ----------------------------------------------------------------------------------


def test_multi_source_apps_are_read_with_refs(tmp_path: Path) -> None:
    from tidecd.config.load import load_config

    (tmp_path / "app.yaml").write_text(textwrap.dedent("""\
        apiVersion: argoproj.io/v1alpha1
        kind: Application
        metadata: {name: multi}
        spec:
          destination: {server: https://kubernetes.default.svc, namespace: web}
          sources:
          - {repoURL: https://charts.example.com, chart: web, targetRevision: 1.x,
             helm: {valueFiles: [$values/envs/prod.yaml]}}
          - {repoURL: https://git.example.com/values, targetRevision: main, ref: values}
          - {repoURL: https://git.example.com/extra, path: manifests}
        """))
    app = load_config(tmp_path).applications["multi"]
    assert [s.repo_url for s in app.all_sources] == ["https://charts.example.com", "https://git.example.com/values",
                                                    "https://git.example.com/extra"]
    assert app.source == app.sources[0]
    assert [(s.ref, s.path, s.rendered) for s in app.sources] == [("", ".", True), ("values", "", False),
                                                                 ("", "manifests", True)]


@pytest.mark.parametrize(("sources", "message"), [
    ("[]", "spec.sources: must list at least one source"),
    ("[{repoURL: https://a, ref: v}, {repoURL: https://b, ref: v, path: x}]", "ref 'v' is used by more than one"),
    ("[{repoURL: https://a, ref: v}]", "every source is a ref source"),
    ("[{repoURL: https://a, ref: 'bad ref', path: x}]", "spec.sources[0].ref: 'bad ref': use letters"),
])
def test_bad_multi_source_specs(tmp_path: Path, sources: str, message: str) -> None:
    from tidecd.base.errors import ConfigError
    from tidecd.config.load import load_config

    (tmp_path / "app.yaml").write_text(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: multi}\nspec:\n"
        "  destination: {server: https://kubernetes.default.svc}\n  sources: " + sources + "\n")
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_config(tmp_path)


def test_merged_sources_keep_the_later_object_in_the_earlier_place() -> None:
    from tidecd.step.desired import merge_sources

    a1, b, a2 = obj("ConfigMap", "a"), obj("ConfigMap", "b"), obj("ConfigMap", "a")
    a2["data"] = {"v": "later"}
    merged, warnings = merge_sources([a1, b, a2])
    assert merged == [a2, b]
    assert warnings == ["ConfigMap ns/a is declared by more than one source; the later source's object is used"]


def test_ref_value_files_stay_inside_their_source(tmp_path: Path) -> None:
    from tidecd.render.helm import ref_value_file

    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "prod.yaml").write_text("a: 1\n")
    assert ref_value_file({"values": tmp_path}, "$values/envs/prod.yaml", 0) == (tmp_path / "envs/prod.yaml").resolve()
    with pytest.raises(UnsafePathError, match="leaves the checkout of source \\$values"):
        ref_value_file({"values": tmp_path}, "$values/../../etc/passwd", 0)
    with pytest.raises(RenderError, match="no source has ref 'other' \\(refs: \\$values\\)"):
        ref_value_file({"values": tmp_path}, "$other/x.yaml", 0)
