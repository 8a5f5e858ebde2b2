"""Argo CD's own reference manifests (docs/operator-manual/application.yaml, project.yaml, argocd-cm.yaml, every
field filled in) load as they are: conditions only for what docs/argocd-compatibility.md's table lists as
not implemented, and no crash. The table itself is generated from the same field list and must match
docs/argocd-compatibility.md, and every field it calls supported is really read by the loader."""

from __future__ import annotations

import copy
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidecd.config import argocd_cm
from tidecd.config import fields as config_fields
from tidecd.config.load import load_config

FIXTURES = Path(__file__).parent / "fixtures" / "argocd-reference"
README = Path(__file__).resolve().parents[2] / "docs" / "argocd-compatibility.md"
NOT_IMPLEMENTED = re.compile(r"Argo CD field (\S+) is not implemented by tidecd")


def rows(kind: str) -> dict[str, str]:
    return {path: status for path, status, _ in config_fields.table_rows(kind)}


def listed_as_not_implemented(kind: str, path: str) -> bool:
    table = rows(kind)
    path = path.replace("spec.sources[]", "spec.source", 1)
    return any(status == config_fields.NOT_IMPLEMENTED and (path == p or path.startswith((p + ".", p + "[]")))
               for p, status in table.items())


def load(tmp_path: Path, *extra: tuple[str, Any]) -> Any:
    for name in ("application.yaml", "project.yaml", "argocd-cm.yaml"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    for name, doc in extra:
        (tmp_path / name).write_text(yaml.safe_dump(doc))
    return load_config(tmp_path, strict=False)


def reference_app() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((FIXTURES / "application.yaml").read_text())
    return doc


def test_the_reference_application_gets_conditions_only_for_what_is_not_implemented(tmp_path: Path) -> None:
    single = reference_app()  # the same app read through `source` (with `sources`, Argo CD ignores `source`)
    single["metadata"]["name"] = "guestbook-source"
    del single["spec"]["sources"]
    config = load(tmp_path, ("single.yaml", single))
    assert config.problems == []
    reported = NOT_IMPLEMENTED.findall(config.invalid["guestbook"])
    assert reported == ["spec.sourceHydrator"]
    lines = config.invalid["guestbook-source"].splitlines()[1:]
    fields = {m[1] for line in lines if (m := NOT_IMPLEMENTED.search(line))}
    assert all(listed_as_not_implemented("Application", f) for f in fields), fields
    assert {"spec.source.plugin", "spec.source.kustomize.kubeVersion", "spec.source.kustomize.version",
            "spec.sourceHydrator"} <= fields
    assert "spec.source.helm.kubeVersion" not in fields  # implemented
    assert "spec.source.kustomize.labelWithoutSelector" not in fields  # `false`, its default, changes nothing
    others = [line for line in lines if not NOT_IMPLEMENTED.search(line)]
    # the one real contradiction in the reference file: Argo CD refuses several source types too
    assert len(others) == 1 and "set at most one of directory, kustomize and helm" in others[0], others


def test_the_reference_application_loads_once_what_is_not_implemented_is_taken_out(tmp_path: Path) -> None:
    app = reference_app()
    del app["spec"]["sourceHydrator"]
    config = load(tmp_path, ("application.yaml", app))
    loaded = config.applications["guestbook"]
    assert loaded.sources[0].ref == "my-repo" and loaded.sync_policy.automated and loaded.sync_policy.self_heal
    assert loaded.sync_policy.retry is not None and loaded.sync_policy.retry.limit == 5
    assert [d.kind for d in loaded.ignore_differences] == ["Deployment", "ConfigMap", "*"]
    assert dict(loaded.sync_policy.namespace_labels) == {"any": "label", "you": "like"}


def test_the_reference_project_gets_conditions_only_for_what_is_not_implemented(tmp_path: Path) -> None:
    user = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "in-project"},
            "spec": {"project": "my-project", "source": {"repoURL": "https://example.com/r.git", "path": "."},
                     "destination": {"server": "https://kubernetes.default.svc", "namespace": "guestbook"}}}
    config = load(tmp_path, ("user.yaml", user))
    fields = NOT_IMPLEMENTED.findall(config.invalid["in-project"])
    assert sorted(fields) == ["spec.clusterResourceBlacklist[].name", "spec.sourceIntegrity"]
    assert all(listed_as_not_implemented("AppProject", f) for f in fields)
    project = yaml.safe_load((FIXTURES / "project.yaml").read_text())
    del project["spec"]["sourceIntegrity"]
    del project["spec"]["clusterResourceBlacklist"][0]["name"]
    config = load(tmp_path, ("project.yaml", project), ("user.yaml", user))
    assert "in-project" in config.applications
    loaded = config.projects["my-project"]
    assert [w.kind for w in loaded.sync_windows] == ["allow", "allow", "deny", "allow"]
    assert loaded.sync_windows[0].manual_sync and loaded.orphaned_resources is not None


def test_the_reference_argocd_cm_is_read_and_every_other_key_has_a_reason(tmp_path: Path) -> None:
    config = load(tmp_path)
    settings = config.argo_settings
    assert config.problems == []
    assert sorted(settings.health_lua) == ["cert-manager.io/Certificate", "certmanager.k8s.io/Certificate"]
    assert sorted(settings.ignore_differences) == ["admissionregistration.k8s.io/MutatingWebhookConfiguration",
                                                   "all"]
    assert settings.excluded("repositories.stash.appscode.com", "Snapshot", "https://x.local")
    assert settings.reconciliation_timeout == 120.0 and settings.reconciliation_jitter == 60.0
    data = yaml.safe_load((FIXTURES / "argocd-cm.yaml").read_text())["data"]
    unread = [k for k in data if not argocd_cm.honoured(k)]
    assert len(settings.notices) == len(unread) + 1 > 50  # + kustomize.buildOptions: all but --enable-helm
    assert not [n for n in settings.notices if "not a setting tidecd knows" in n]


def test_the_readme_table_is_generated_from_the_field_list() -> None:
    text = README.read_text()
    begin, end = text.index(argocd_cm.README_BEGIN), text.index(argocd_cm.README_END) + len(argocd_cm.README_END)
    assert text[begin:end] == argocd_cm.readme_block(), "run: .venv/bin/python scripts/argocd_fields.py --readme"


MINIMAL: dict[str, dict[str, Any]] = {
    "Application": {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "probe"},
                    "spec": {"project": "default", "source": {"repoURL": "https://example.com/r.git", "path": "."},
                             "destination": {"server": "https://kubernetes.default.svc", "namespace": "x"}}},
    "AppProject": {"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "probe"},
                   "spec": {}},
}


def probe(doc: dict[str, Any], path: str) -> None:
    """Set `path` (list items as one-element lists) to a value of a type no field has."""
    node: Any = doc
    parts = path.split(".")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        name, is_list = part.removesuffix("[]"), part.endswith("[]")
        if last:
            node[name] = [{"probe": 1}] if is_list else {"probe": 1}
        elif is_list:
            if not isinstance(node.get(name), list):
                node[name] = [{}]
            node = node[name][0]
        else:
            if not isinstance(node.get(name), dict):
                node[name] = {}
            node = node[name]


@pytest.mark.parametrize("kind", ["Application", "AppProject"])
def test_every_field_the_table_calls_supported_is_read(tmp_path: Path, kind: str) -> None:
    lied = []
    for path, status in rows(kind).items():
        if status != config_fields.SUPPORTED:
            continue
        doc = copy.deepcopy(MINIMAL[kind])
        probe(doc, path)
        (tmp_path / "probe.yaml").write_text(yaml.safe_dump(doc))
        try:
            load_config(tmp_path)
        except Exception as exc:  # the loader's errors name each field it refused
            refused = [line for line in str(exc).splitlines()
                       if ("unknown field" in line or "not implemented" in line)
                       and config_fields.field_path(line.split(": ")[2]) == path]
            if refused:
                lied.append((path, refused[0]))
    assert lied == []
