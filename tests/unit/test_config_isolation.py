"""One bad config file sets aside only what it defines (load_config(strict=False), as the functions load).

Each class of bad input below once stopped every app. Now the good app keeps loading and the bad
thing is reported by name: in `Config.invalid` (an app set aside) or `Config.problems` (anything else).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tidecd.config.load import load_config

GOOD = """\
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: good
spec:
  project: default
  source: {repoURL: 'https://git.example.com/a.git', path: app}
  destination: {server: 'https://kubernetes.default.svc', namespace: x}
"""


def app(name: str, project: str = "default", extra: str = "") -> str:
    return GOOD.replace("name: good", f"name: {name}").replace("project: default", f"project: {project}") + extra


def project(name: str, extra: str = "") -> str:
    return (f"apiVersion: argoproj.io/v1alpha1\nkind: AppProject\nmetadata:\n  name: {name}\nspec:\n"
            f"  sourceRepos: ['*']\n  destinations: [{{server: '*', namespace: '*'}}]\n{extra}")


def load(tmp_path: Path, files: dict[str, str | bytes]) -> tuple[set[str], dict[str, str], list[str]]:
    (tmp_path / "good.yaml").write_text(GOOD)
    for name, content in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    config = load_config(tmp_path, display="cfg", strict=False)
    return set(config.applications), config.invalid, config.problems


CASES: dict[str, tuple[dict[str, str | bytes], str, str]] = {
    "yaml syntax error": ({"bad.yaml": app("bad") + "  oops: [unclosed\n"}, "bad", r"cfg/bad.yaml:\d+: YAML syntax"),
    "non-utf-8": ({"bad.yaml": app("bad").encode() + b"# \xff\xfe\n"}, "bad", "cfg/bad.yaml: not UTF-8 text"),
    "duplicate mapping key": ({"bad.yaml": app("bad") + "spec: {}\n"}, "bad", "duplicate key 'spec'"),
    "wrong field type": ({"bad.yaml": app("bad").replace("path: app", "path: [1]")}, "bad",
                         "spec.source.path"),
    "unknown field": ({"bad.yaml": app("bad", extra="  bogus: 1\n")}, "bad", "spec.bogus"),
    "undefined project": ({"bad.yaml": app("bad", project="nope")}, "bad", "project 'nope' is not defined"),
    "bad AppProject": ({"p.yaml": project("team", "  bogus: 1\n"), "bad.yaml": app("bad", project="team")}, "bad",
                       "project 'team' is invalid, so this app is set aside: .*spec.bogus"),
    "duplicate AppProject": ({"p1.yaml": project("team"), "p2.yaml": project("team"),
                              "bad.yaml": app("bad", project="team")}, "bad", "AppProject/team: metadata.name: "
                                                                              "defined more than once"),
    "alias bomb": ({"bad.yaml": app("bad") + "x: &a [1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"x{i}: &a{i} [" + ",".join(["*a" if i == 0 else f"*a{i - 1}"] * 9) + "]\n" for i in range(8))},
        "bad", "YAML aliases expand"),
    "json syntax error": ({"bad.json": '{"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",\n'
                                       '"metadata": {"name": "bad"}, '}, "bad", r"cfg/bad.json:\d+: JSON syntax"),
    "broken document in a multi-document file": ({"multi.yaml": app("bad") + "---\n" + app("bad2") + " : :\n"},
                                                 "bad2", "YAML syntax error"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_application_file_sets_aside_that_app_only(tmp_path: Path, case: str) -> None:
    files, name, message = CASES[case]
    apps, invalid, _problems = load(tmp_path, files)
    assert "good" in apps
    assert name in invalid, invalid
    assert name not in apps
    import re

    assert re.search(message, invalid[name]), invalid[name]


def test_a_duplicate_app_name_sets_aside_both_definitions(tmp_path: Path) -> None:
    apps, invalid, _ = load(tmp_path, {"a.yaml": app("twice"), "b.yaml": app("twice")})
    assert apps == {"good"}
    assert "Application/twice: metadata.name: defined more than once (cfg/a.yaml, cfg/b.yaml)" in invalid["twice"]


@pytest.mark.parametrize(("content", "message"), [
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", r"cfg/bad.yaml: document 1: unsupported object "
                                                                r"\(apiVersion 'v1', kind 'ConfigMap'\)"),
    ("- just\n- a list\n", "cfg/bad.yaml: document 1: expected a Kubernetes object, got a list"),
    ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: c\n  labels: {argocd.argoproj.io/secret-type: bogus}\n",
     "Secret/c: metadata.labels.argocd.argoproj.io/secret-type: 'bogus' is not allowed"),
    ("[" * 200 + "]" * 200 + "\n", "cfg/bad.yaml document 1: nesting depth"),
])
def test_other_bad_documents_are_problems_and_every_app_keeps_working(tmp_path: Path, content: str,
                                                                      message: str) -> None:
    import re

    apps, invalid, problems = load(tmp_path, {"bad.yaml": content})
    assert apps == {"good"} and not invalid
    assert any(re.search(message, p) for p in problems), problems


def test_a_symlink_leaving_the_config_directory_is_not_read(tmp_path: Path) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside.yaml"
    outside.write_text(app("stolen"))
    (tmp_path / "link.yaml").symlink_to(outside)
    apps, _invalid, problems = load(tmp_path, {})
    assert apps == {"good"}
    assert problems == ["cfg/link.yaml: symlink pointing outside the config directory: not read"]


def test_strict_loading_still_refuses_everything_at_once(tmp_path: Path) -> None:
    from tidecd.base.errors import ConfigError

    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "bad.yaml").write_text("kind: Nope\n")
    with pytest.raises(ConfigError, match="unsupported object"):
        load_config(tmp_path)


def test_cli_app_list_shows_the_good_apps_and_marks_the_bad(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tidecd.cli import app as cli_root

    config = tmp_path / "config"
    config.mkdir()
    (config / "good.yaml").write_text(GOOD)
    (config / "bad.yaml").write_text(app("bad") + "  oops: [unclosed\n")
    (config / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    monkeypatch.setenv("TIDECD_CONFIG", str(config))
    monkeypatch.setenv("TIDECD_STORE", str(tmp_path / "store"))
    result = CliRunner().invoke(cli_root, ["app", "list", "--cached"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert any(line.split()[:2] == ["good", "Unknown"] for line in lines), result.stdout
    assert any(line.split()[:2] == ["bad", "Invalid"] for line in lines), result.stdout
    assert "invalid: bad: " in result.stderr and "YAML syntax error" in result.stderr
    assert "config problem: " in result.stderr and "kind 'ConfigMap'" in result.stderr
    listed = CliRunner().invoke(cli_root, ["app", "list", "--cached", "-o", "json"])
    body = json.loads(listed.stdout)
    assert [a["name"] for a in body["apps"]] == ["good", "bad"]
    assert "kind 'ConfigMap'" in body["configProblems"][0]
    assert os.environ["TIDECD_CONFIG"] == str(config)
