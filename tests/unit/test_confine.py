"""Kustomizations are checked against the checkout before kustomize runs (tidecd.render.confine)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tidecd.base.errors import LimitExceeded, RenderError, UnsafePathError
from tidecd.render.confine import KustomizeChart, confine


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    write(root, "base/kustomization.yaml", "resources: [cm.yaml]\n")
    write(root, "base/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
    write(root, "base/patch.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
    write(root, "base/app.env", "A=1\n")
    return root


def kustomization(root: Path, text: str) -> Path:
    write(root, "app/kustomization.yaml", text)
    return root / "app"


def test_local_bases_patches_and_generators_pass(repo: Path) -> None:
    app = kustomization(repo, """
        resources: [../base]
        patches:
          - path: ../base/patch.yaml
          - patch: |-
              - op: add
                path: /metadata/labels
                value: {a: b}
            target: {kind: ConfigMap}
        patchesStrategicMerge: [../base/patch.yaml]
        configMapGenerator:
          - name: g
            files: [key=../base/cm.yaml]
            envs: [../base/app.env]
        """)
    confine(repo, app)


@pytest.mark.parametrize(("field", "entry"), [
    ("resources", "https://example.com/cm.yaml"),
    ("resources", "http://127.0.0.1:8080/cm.yaml"),
    ("resources", "github.com/org/repo//deploy?ref=v1"),
    ("resources", "git@github.com:org/repo.git"),
    ("bases", "ssh://git@example.com/org/repo"),
    ("components", "https://example.com/comp"),
])
def test_remote_entries_are_refused_naming_kustomization_and_entry(repo: Path, field: str, entry: str) -> None:
    app = kustomization(repo, f"{field}:\n  - {entry!r}\n")
    with pytest.raises(RenderError, match=rf"^kustomization app/kustomization.yaml: {field}\[0\] "
                                          rf"'{_re(entry)}' is remote: .*vendor anything else into the repository"):
        confine(repo, app)


def test_a_host_like_path_that_does_not_exist_is_refused(repo: Path) -> None:
    app = kustomization(repo, "resources: [example.com/org/repo/deploy]\n")
    with pytest.raises(RenderError, match=r"resources\[0\] 'example.com/org/repo/deploy' is not a file or "
                                          r"directory in the repository"):
        confine(repo, app)


def test_a_directory_outside_the_checkout_holding_a_kustomization_is_refused(tmp_path: Path, repo: Path) -> None:
    write(tmp_path, "outside/kustomization.yaml", "resources: [cm.yaml]\n")
    write(tmp_path, "outside/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: stolen}\n")
    app = kustomization(repo, "resources: [../../outside]\n")
    with pytest.raises(UnsafePathError, match=r"^kustomization app/kustomization.yaml: resources\[0\] "
                                              r"'../../outside' leaves the repository checkout$"):
        confine(repo, app)


def test_deep_dot_dot_chain_is_refused(repo: Path) -> None:
    app = kustomization(repo, "resources: [" + "../" * 30 + "etc]\n")
    with pytest.raises(UnsafePathError, match="leaves the repository checkout"):
        confine(repo, app)


def test_escape_in_a_nested_base_is_found(tmp_path: Path, repo: Path) -> None:
    write(tmp_path, "secret.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n")
    write(repo, "base/kustomization.yaml", "resources: [cm.yaml]\npatchesStrategicMerge: [../../secret.yaml]\n")
    app = kustomization(repo, "resources: [../base]\n")
    with pytest.raises(UnsafePathError, match=r"^kustomization base/kustomization.yaml: "
                                              r"patchesStrategicMerge\[0\] '../../secret.yaml' leaves"):
        confine(repo, app)


@pytest.mark.parametrize(("text", "where"), [
    ("patches:\n  - path: /etc/passwd\n", r"patches\[0\].path '/etc/passwd' is an absolute path"),
    ("patchesJson6902:\n  - path: ../../x.yaml\n    target: {kind: A, name: b}\n",
     r"patchesJson6902\[0\].path '../../x.yaml' leaves"),
    ("configMapGenerator:\n  - name: g\n    files: [k=../../../etc/hostname]\n",
     r"configMapGenerator\[0\].files\[0\] '../../../etc/hostname' leaves"),
    ("secretGenerator:\n  - name: g\n    envs: [../../.env]\n", r"secretGenerator\[0\].envs\[0\] '../../.env' leaves"),
    ("crds: [../../crd.yaml]\n", r"crds\[0\] '../../crd.yaml' leaves"),
    ("openapi:\n  path: ../../schema.json\n", r"openapi.path '../../schema.json' leaves"),
    ("configurations: [../../c.yaml]\n", r"configurations\[0\] '../../c.yaml' leaves"),
    ("replacements:\n  - path: ../../r.yaml\n", r"replacements\[0\].path '../../r.yaml' leaves"),
    ("transformers: [../../t.yaml]\n", r"transformers\[0\] '../../t.yaml' leaves"),
    ("generators: [https://example.com/gen.yaml]\n", r"generators\[0\] 'https://example.com/gen.yaml' is remote"),
    ("validators: [../../v.yaml]\n", r"validators\[0\] '../../v.yaml' leaves"),
])
def test_every_path_field_is_checked(repo: Path, text: str, where: str) -> None:
    app = kustomization(repo, text)
    with pytest.raises((UnsafePathError, RenderError), match=r"^kustomization app/kustomization.yaml: " + where):
        confine(repo, app)


def test_helm_inflation_is_refused_unless_argocd_cm_enables_helm(repo: Path) -> None:
    app = kustomization(repo, "helmCharts:\n  - name: x\n    repo: https://charts.example.com\n")
    with pytest.raises(RenderError, match=r"kustomization app/kustomization.yaml: helmCharts: helm chart "
                                          r"inflation needs argocd-cm's kustomize.buildOptions: --enable-helm"):
        confine(repo, app)
    assert confine(repo, app, helm=True) == [KustomizeChart(
        "kustomization app/kustomization.yaml: helmCharts[0]", "x", "https://charts.example.com", "", "app/charts/x")]


def test_helm_charts_go_where_kustomize_looks_before_it_pulls(repo: Path) -> None:
    app = kustomization(repo, """
        resources: [../base]
        helmGlobals: {chartHome: ../vendor}
        helmCharts:
          - {name: web, repo: "https://charts.example.com", version: 1.2.0, valuesFile: ../base/app.env}
          - {name: db, repo: "oci://r.example.com/charts", version: 2.0.0}
        """)
    write(repo, "vendor/db-2.0.0/db/Chart.yaml", "name: db\n")  # vendored: kustomize pulls nothing
    assert [(c.name, c.target) for c in confine(repo, app, helm=True)] == [("web", "vendor/web-1.2.0/web")]
    write(repo, "base/kustomization.yaml", "helmCharts:\n  - {name: web, repo: x, valuesFile: https://e.com/v}\n")
    with pytest.raises(RenderError, match=r"base/kustomization.yaml: helmCharts\[0\]: valuesFile .* is remote"):
        confine(repo, app, helm=True)
    kustomization(repo, "helmGlobals: {chartHome: ../../out}\nhelmCharts:\n  - {name: web, repo: x}\n")
    with pytest.raises(UnsafePathError, match=r"chartHome '../../out' leaves the repository checkout"):
        confine(repo, app, helm=True)
    kustomization(repo, "helmChartInflationGenerator: [{chartName: web}]\n")
    with pytest.raises(RenderError, match=r"helmChartInflationGenerator: helm chart inflation needs"):
        confine(repo, app, helm=True)


def test_symlinked_base_leaving_the_checkout_is_refused(tmp_path: Path, repo: Path) -> None:
    write(tmp_path, "outside/kustomization.yaml", "resources: []\n")
    (repo / "link").symlink_to(tmp_path / "outside")
    app = kustomization(repo, "resources: [../link]\n")
    with pytest.raises(UnsafePathError, match=r"resources\[0\] '../link' leaves the repository checkout"):
        confine(repo, app)


def test_cycles_terminate(repo: Path) -> None:
    write(repo, "a/kustomization.yaml", "resources: [../b]\n")
    write(repo, "b/kustomization.yaml", "resources: [../a]\n")
    confine(repo, repo / "a")


def test_kustomization_alias_bomb_is_refused(repo: Path) -> None:
    from tests.unit.test_limits import alias_bomb

    app = kustomization(repo, alias_bomb())
    with pytest.raises(LimitExceeded, match="kustomization app/kustomization.yaml document 1: YAML aliases"):
        confine(repo, app)


def _re(text: str) -> str:
    import re

    return re.escape(text)
