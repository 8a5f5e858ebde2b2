"""Team config sources, each bounded by the projects that admit it (`tidecd.config.teams`).

The main config source names the teams' sources in ConfigMap/tidecd-config-sources; a team's app may use
only an AppProject of the main source whose spec.sourceNamespaces lists the team. Everything here goes
through the real loader and `Runtime.config()`, as the functions load.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tidecd.base.errors import ConfigError
from tidecd.clients.store import LocalStore
from tidecd.config import teams
from tidecd.config.load import AppProject, Config, TeamSource, load_config, normalize_repo_url
from tidecd.runtime import Runtime, Settings
from tidecd.usecases.webhook import Push, team_source_apps


def app(name: str, project: str) -> str:
    return (f"apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: {name}\nspec:\n"
            f"  project: {project}\n  source: {{repoURL: 'https://git.example.com/a.git', path: app}}\n"
            "  destination: {server: 'https://kubernetes.default.svc', namespace: x}\n")


def project(name: str, source_namespaces: list[str] | None = None) -> str:
    text = (f"apiVersion: argoproj.io/v1alpha1\nkind: AppProject\nmetadata:\n  name: {name}\nspec:\n"
            "  sourceRepos: ['*']\n  destinations: [{server: '*', namespace: '*'}]\n")
    return text + (f"  sourceNamespaces: {source_namespaces}\n" if source_namespaces is not None else "")


def sources(entries: dict[str, str]) -> str:
    lines = "".join(f"  {name}: {spec!r}\n" for name, spec in entries.items())
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tidecd-config-sources\ndata:\n{lines}"


def write(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def config(tmp_path: Path, main: dict[str, str], team_files: dict[str, dict[str, str]],
           missing: tuple[str, ...] = ()) -> Config:
    """The config a function call sees: the main source in `main/`, each team's in `teams/<name>/`."""
    named = {name: str(tmp_path / "teams" / name) for name in [*team_files, *missing]}
    write(tmp_path / "main", {**main, "sources.yaml": sources(named)})
    for name, files in team_files.items():
        write(tmp_path / "teams" / name, files)
    runtime = Runtime(settings=Settings(config=str(tmp_path / "main"), store=str(tmp_path / "store")),
                      store=LocalStore(tmp_path / "store"))
    return runtime.config()


PLATFORM = {"a.yaml": project("team-a", ["team-a"]), "b.yaml": project("team-b", ["team-b"]),
            "shared.yaml": project("shared", ["team-*"]), "core.yaml": app("core", "team-b")}


def test_a_team_app_in_a_project_that_admits_the_team_loads(tmp_path: Path) -> None:
    loaded = config(tmp_path, PLATFORM, {"team-a": {"web.yaml": app("web", "team-a"),
                                                     "api.yaml": app("api", "shared")}})
    assert {"web", "api", "core"} <= set(loaded.applications), loaded.invalid
    assert loaded.teams == {"web": "team-a", "api": "team-a"}  # core is the main source's
    assert loaded.problems == []


def test_a_team_app_naming_another_teams_project_is_set_aside_naming_file_app_project_and_field(
        tmp_path: Path) -> None:
    loaded = config(tmp_path, PLATFORM, {"team-a": {"web.yaml": app("web", "team-a"),
                                                     "steal.yaml": app("steal", "team-b")}})
    assert "steal" not in loaded.applications and "web" in loaded.applications
    message = loaded.invalid["steal"]
    assert "teams/team-a/steal.yaml: Application/steal: spec.project: project 'team-b' does not admit team " \
           "config source 'team-a'" in message
    assert "spec.sourceNamespaces (team-b)" in message and "b.yaml" in message
    runtime = Runtime.of(Settings(store=str(tmp_path / "store")), LocalStore(tmp_path / "store"), config=loaded)
    with pytest.raises(ConfigError, match="does not admit"):
        runtime.app("steal")  # what every step asks first: nothing of it is rendered or applied


def test_the_default_project_and_projects_without_source_namespaces_admit_no_team(tmp_path: Path) -> None:
    loaded = config(tmp_path, {"p.yaml": project("plain")},
                    {"team-a": {"d.yaml": app("d", "default"), "p.yaml": app("p", "plain"),
                                "x.yaml": app("x", "nowhere")}})
    assert not loaded.applications
    assert "project 'default' does not admit" in loaded.invalid["d"] and "(empty)" in loaded.invalid["d"]
    assert "project 'plain' does not admit" in loaded.invalid["p"]
    assert "project 'nowhere' is not defined in the main config source" in loaded.invalid["x"]


def test_the_main_sources_apps_may_use_any_project(tmp_path: Path) -> None:
    loaded = config(tmp_path, {**PLATFORM, "m.yaml": app("m", "team-a")}, {})
    assert {"core", "m"} <= set(loaded.applications)


def test_a_team_source_may_define_applications_only(tmp_path: Path) -> None:
    secret = ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: c\n  labels:\n"
              "    argocd.argoproj.io/secret-type: cluster\nstringData: {server: 'https://x'}\n")
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\ndata: {}\n"
    loaded = config(tmp_path, PLATFORM, {"team-a": {
        "own.yaml": project("own", ["team-a"]), "sneak.yaml": app("sneak", "own"), "cluster.yaml": secret,
        "cm.yaml": cm, "more.yaml": sources({"team-c": "/tmp"}), "web.yaml": app("web", "team-a")}})
    assert "web" in loaded.applications and "own" not in loaded.projects and not loaded.secrets
    assert "project 'own' is not defined in the main config source" in loaded.invalid["sneak"]
    for name, kind in (("own.yaml", "AppProject"), ("cluster.yaml", "Secret"), ("cm.yaml", "ConfigMap"),
                       ("more.yaml", "ConfigMap")):
        assert any(f"teams/team-a/{name}: document 1 ({kind}): not read: team config source 'team-a' may define "
                   "Applications only" in p for p in loaded.problems), (name, loaded.problems)
    assert [t.name for t in loaded.team_sources] == ["team-a"]  # a team cannot name further sources


def test_a_name_clash_is_refused_for_the_later_source_only(tmp_path: Path) -> None:
    loaded = config(tmp_path, PLATFORM, {"team-a": {"core.yaml": app("core", "team-a"),
                                                     "web.yaml": app("web", "team-a")},
                                         "team-b": {"web.yaml": app("web", "team-b")}})
    assert loaded.applications["core"].project == "team-b"  # the main source's core keeps working
    assert loaded.applications["web"].project == "team-a" and loaded.teams["web"] == "team-a"
    assert "core" not in loaded.teams and "web" not in loaded.invalid
    assert any("teams/team-a/core.yaml: Application/core: metadata.name: already defined by the main config "
               "source" in p for p in loaded.problems), loaded.problems
    assert any("teams/team-b/web.yaml: Application/web: metadata.name: already defined by team config source "
               "'team-a'" in p for p in loaded.problems), loaded.problems


def test_a_broken_team_source_never_stops_the_others(tmp_path: Path) -> None:
    loaded = config(tmp_path, PLATFORM,
                    {"team-a": {"web.yaml": app("web", "team-a")},
                     "team-b": {"bad.yaml": app("bad", "team-b") + "  broken: [\n", "ok.yaml": app("ok", "team-b")}},
                    missing=("team-c",))
    assert {"web", "ok", "core"} <= set(loaded.applications)
    assert "YAML syntax error" in loaded.invalid["bad"] and loaded.teams["bad"] == "team-b"
    assert any("team config source 'team-c'" in p and "could not be loaded" in p and "not a directory" in p
               for p in loaded.problems), loaded.problems


def test_the_sources_configmap_is_checked_naming_file_and_key(tmp_path: Path) -> None:
    write(tmp_path, {"s.yaml": sources({"Team_A": "/x", "ok": "/srv/ok", "rel": "https://g.example/r.git#main:a/../../x"}),
                     "t.yaml": sources({"other": "/y"})})
    loaded = load_config(tmp_path, strict=False)
    assert loaded.team_sources == (TeamSource("ok", "/srv/ok", f"{tmp_path}/s.yaml"),)
    text = "\n".join(loaded.problems)
    assert "s.yaml: ConfigMap/tidecd-config-sources: data.Team_A: a team's name must be a DNS label" in text
    assert "s.yaml: ConfigMap/tidecd-config-sources: data.rel: path 'a/../../x' must be relative" in text
    assert "t.yaml: ConfigMap/tidecd-config-sources: defined more than once" in text


@pytest.mark.parametrize(("patterns", "team", "admitted"), [
    (("team-a",), "team-a", True), (("team-a",), "team-b", False), (("team-*",), "team-b", True),
    (("*",), "anyone", True), ((), "team-a", False), (("/^team-[ab]$/",), "team-b", True),
    (("/^team-[ab]$/",), "team-c", False), (("/[/",), "team-a", False),
])
def test_source_namespaces_match_as_argo_cd_globs_or_regexes(patterns: tuple[str, ...], team: str,
                                                             admitted: bool) -> None:
    assert teams.admits(AppProject(name="p", source_namespaces=patterns), team) is admitted


def test_a_push_to_a_team_source_refreshes_that_teams_apps(tmp_path: Path) -> None:
    loaded = config(tmp_path, PLATFORM, {"team-a": {"web.yaml": app("web", "team-a")}})
    repo = "https://git.example.com/team-b/deploy.git"
    loaded.team_sources = (*loaded.team_sources, TeamSource("team-b", f"{repo}#main:apps"))
    loaded.teams["core"] = "team-b"  # as if team-b's source defined it
    answer: dict[str, object] = {}
    push = Push(repo_urls=frozenset({normalize_repo_url(repo)}), ref="refs/heads/main", after="a" * 40,
                default_branch="main", deleted=False, changed_files=("apps/core.yaml",))
    assert [a.name for a in team_source_apps(loaded, push, [], answer)] == ["core"]
    assert answer == {"team_sources": ["team-b"]}
    elsewhere = Push(repo_urls=push.repo_urls, ref="refs/heads/main", after="a" * 40, default_branch="main",
                     deleted=False, changed_files=("docs/readme.md",))
    assert team_source_apps(loaded, elsewhere, [], {}) == []
