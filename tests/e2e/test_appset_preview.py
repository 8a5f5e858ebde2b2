"""Seeing what an ApplicationSet generates (issue 24, Build 4), against the real git server and the api
function running under functions-framework: `tidecd appset generate NAME` and `generate FILE`, locally and
with `--server`, print the generated apps and their diff against what is recorded (added, changed with the
Application's diff, removed); a bad file is refused naming the file and the field; nothing is written; the
dashboard's ApplicationSets page lists the generated apps with their status.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import yaml

from tests.e2e.test_app_sets import directories_set as directories
from tests.support.apps import GitOps, configmap
from tests.support.functions import Functions
from tidecd.generated import records as generated
from tidecd.usecases import appsets

pytestmark = pytest.mark.e2e


def tidecd(gitops: GitOps, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TIDECD_CONFIG": str(gitops.config_dir), "TIDECD_STORE": str(gitops.store.root),
           "KUBECONFIG": str(gitops.dev.kubeconfig), "COLUMNS": "400"}
    return subprocess.run([sys.executable, "-m", "tidecd.cli", *args], env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def rows(out: str) -> dict[str, str]:
    """NAME → CHANGE of the generate table (the CHANGE column is the last of six)."""
    found = {}
    for line in out.splitlines():
        cells = line.split()
        if cells[-1:] == ["removed"] and len(cells) == 2 or len(cells) >= 6 and cells[1] == "default":
            found[cells[0]] = cells[-1]
    return found


def test_appset_generate_by_name_and_from_a_file_locally_and_through_the_api(
        gitops: GitOps, functions: Functions, tmp_path: Path) -> None:
    ns = gitops.namespace
    gitops.push({f"services/{s}/cm.yaml": configmap(f"svc-{s}") for s in ("a", "b", "c")})
    (gitops.config_dir / "dirs.yaml").write_text(yaml.safe_dump(directories(gitops)))
    runtime = gitops.runtime()
    assert sorted(appsets.refresh(runtime).created) == [f"{s}-{ns}" for s in ("a", "b", "c")]
    recorded = generated.load_records(runtime.store)["ApplicationSet/dirs"]
    gitops.push({"services/d/cm.yaml": configmap("svc-d")}, "a fourth service")

    api = functions.start("api").url
    server = ["--server", api, "--token", functions.token]
    for where in ([], server):
        named = tidecd(gitops, "appset", "generate", "dirs", *where)
        assert named.returncode == 0, (where, named.stdout, named.stderr)
        assert rows(named.stdout) == {f"a-{ns}": "unchanged", f"b-{ns}": "unchanged", f"c-{ns}": "unchanged",
                                      f"d-{ns}": "added"}, named.stdout
        assert "1 to add, 0 to change, 0 to remove" in named.stdout

    edited = directories(gitops)  # c excluded, a label on every app, d new: each kind of change at once
    edited["spec"]["generators"][0]["git"]["directories"].append({"path": "services/c", "exclude": True})
    edited["spec"]["template"]["metadata"]["labels"] = {"tier": "web"}
    path = tmp_path / "edited-dirs.yaml"
    path.write_text(yaml.safe_dump(edited))
    for where in ([], server):
        out = tidecd(gitops, "appset", "generate", str(path), *where)
        assert out.returncode == 0, (where, out.stdout, out.stderr)
        assert rows(out.stdout) == {f"a-{ns}": "changed", f"b-{ns}": "changed", f"c-{ns}": "removed",
                                    f"d-{ns}": "added"}, out.stdout
        assert f"changed app a-{ns}:" in out.stdout and "+    tier: web" in out.stdout
        assert "1 to add, 2 to change, 1 to remove" in out.stdout

    as_yaml = tidecd(gitops, "appset", "generate", str(path), "-o", "yaml", *server)
    body = yaml.safe_load(as_yaml.stdout)
    assert [a["metadata"]["name"] for a in body["applications"]] == [f"{s}-{ns}" for s in ("a", "b", "d")]
    assert body["applications"][2]["spec"]["source"]["path"] == "services/d"
    assert body["diff"]["removed"] == [f"c-{ns}"]
    names = tidecd(gitops, "appset", "generate", "dirs", "-o", "name")
    assert names.stdout.split() == [f"{s}-{ns}" for s in ("a", "b", "c", "d")]

    bad = copy.deepcopy(edited)
    bad["spec"]["generators"][0]["git"]["directoriez"] = bad["spec"]["generators"][0]["git"].pop("directories")
    path.write_text(yaml.safe_dump(bad))
    for where in ([], server):
        refused = tidecd(gitops, "appset", "generate", str(path), *where)
        assert refused.returncode == 2, (refused.stdout, refused.stderr)
        assert str(path) in refused.stderr and "directoriez" in refused.stderr, refused.stderr
    missing = tidecd(gitops, "appset", "generate", "nope", *server)
    assert missing.returncode == 2 and "not found" in missing.stderr

    assert generated.load_records(runtime.store)["ApplicationSet/dirs"] == recorded  # a preview writes nothing

    listed = tidecd(gitops, "appset", "get", "dirs", *server)
    assert listed.returncode == 0 and f"a-{ns}" in listed.stdout and "Unknown" in listed.stdout, listed.stdout
    page = requests.get(f"{api}/ui/appsets", headers={"Authorization": f"Bearer {functions.token}"}, timeout=60)
    assert page.status_code == 200, page.text[:500]
    for s in ("a", "b", "c"):
        assert f'data-generated-app="{s}-{ns}"' in page.text
    assert 'data-appset="dirs"' in page.text and "dirs.yaml" in page.text
