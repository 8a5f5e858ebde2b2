"""Argo CD's own catalogue (`resource_customizations/` of v3.6.1: health checks, actions and their tests).

tidecd bundles it and applies it by default (`tidecd.health.catalogue`); `scripts/tools.sh argocd-catalogue`
fetches it from the argo-cd Go module (the go command verifies the zip against the checksum database) into
the tools cache. Nothing of it is in the repository. `argocd_catalogue` is that directory, as the product
finds it; the helpers here read the tests Argo CD keeps beside each script.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidecd.health import catalogue
from tidecd_dev.tools import ensure


class _ApiLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """YAML as the API server's JSON (and sigs.k8s.io/yaml) reads it: timestamps stay strings (libyaml's
    parser when PyYAML has it: 1,400 fixtures)."""


_ApiLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_yaml(path: Path) -> Any:
    """The first document, as sigs.k8s.io/yaml's Unmarshal (what Argo CD's test reads) takes it."""
    documents = yaml.load_all(path.read_text(), Loader=_ApiLoader)  # noqa: S506 - a SafeLoader subclass
    return next(iter(documents), None)


@dataclass(frozen=True)
class Case:
    """One entry of a kind's `health_test.yaml`: the input object and the status Argo CD expects."""

    kind_dir: str  # "argoproj.io/Rollout" (a "_" stands for "*", as in Argo CD's wildcard directories)
    input_path: str
    status: str
    message: str

    @property
    def id(self) -> str:
        return f"{self.kind_dir}/{self.input_path}"


def catalogue_dir() -> Path:
    """Argo CD's catalogue where the product finds it by default (`tidecd.health.catalogue.root`), built by
    scripts/tools.sh when missing (never skipped)."""
    ensure([catalogue.NAME])
    catalogue.forget()  # a lookup made before the build found nothing
    found = catalogue.root()
    assert found is not None, f"scripts/tools.sh {catalogue.NAME} left no catalogue where tidecd looks"
    return found


def health_cases(root: Path) -> dict[str, list[Case]]:
    """Every kind directory with a health.lua → its test cases."""
    out: dict[str, list[Case]] = {}
    for script in sorted(root.glob("*/*/health.lua")):
        kind_dir = f"{script.parent.parent.name}/{script.parent.name}"
        spec = load_yaml(script.parent / "health_test.yaml") or {}
        out[kind_dir] = []
        for test in spec.get("tests") or []:
            test = _folded(test)  # Go's encoding/json matches field names case-insensitively ("inputpath")
            expected = _folded(test.get("healthstatus") or {})
            out[kind_dir].append(Case(kind_dir, str(test["inputpath"]), str(expected.get("status") or ""),
                                      str(expected.get("message") or "")))
    return out


def _folded(mapping: dict[str, Any]) -> dict[str, Any]:
    return {str(k).lower(): v for k, v in mapping.items()}


@pytest.fixture(scope="session")
def argocd_catalogue() -> Path:
    return catalogue_dir()
