"""A templatePatch fed by generator parameters may not move a generated app to another project (issue 29):
Argo CD does not support `spec.project` in a templatePatch; tidecd sets that one app aside and says why."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.test_appset_generators import FakeSources, appset
from tidecd.config.appset.expand import expand

FILES = {"git": {"repoURL": "https://git.example/apps", "revision": "main", "files": [{"path": "teams/*.json"}]}}
PATCH = """spec:
  project: {{ .project }}
  destination:
    namespace: {{ .namespace }}
"""


def team(root: Path, name: str, project: str, namespace: str) -> None:
    (root / "teams").mkdir(exist_ok=True)
    (root / "teams" / f"{name}.json").write_text(json.dumps({"name": name, "project": project,
                                                             "namespace": namespace}))


def test_a_patch_that_changes_the_project_sets_that_app_aside(tmp_path: Path) -> None:
    team(tmp_path, "web", "default", "web")
    team(tmp_path, "evil", "platform", "kube-system")
    out = expand(appset([FILES], go=True, name="{{ .name }}", patch=PATCH), FakeSources(tmp_path))

    assert list(out.apps) == ["web"] and not out.failed
    assert out.apps["web"].doc["spec"]["project"] == "default"
    assert out.apps["web"].doc["spec"]["destination"]["namespace"] == "web"
    [error] = out.errors
    assert error.startswith("appsets.yaml: ApplicationSet/set: spec.generators[0]")
    assert "spec.templatePatch: sets spec.project to 'platform' (the template's is 'default'): a templatePatch " \
           "may not change the project" in error


def test_a_patch_that_removes_the_project_is_refused_too(tmp_path: Path) -> None:
    team(tmp_path, "web", "default", "web")
    out = expand(appset([FILES], go=True, name="{{ .name }}", patch="spec:\n  project: null\n"),
                 FakeSources(tmp_path))
    assert out.apps == {} and "sets spec.project to nothing" in out.errors[0]


def test_a_patch_may_still_change_other_fields(tmp_path: Path) -> None:
    team(tmp_path, "web", "default", "web")
    patch = "spec:\n  destination:\n    namespace: {{ .namespace }}-x\n  syncPolicy: {automated: {prune: true}}\n"
    out = expand(appset([FILES], go=True, name="{{ .name }}", patch=patch), FakeSources(tmp_path))
    assert out.errors == [] and out.apps["web"].doc["spec"]["destination"]["namespace"] == "web-x"
