"""Argo CD's own catalogue of health checks (`resource_customizations/`), fetched from the Go module proxy.

The setup runs `go mod download -json github.com/argoproj/argo-cd/v3@v3.6.1` into tidecd's Go module cache
(the go command verifies the zip against the checksum database) and unpacks only `resource_customizations/`
from the module zip into `~/.cache/tidecd/argocd-catalogue/v3.6.1/`. Nothing of it is copied into the repo.
The module's go.mod asks for go 1.27 and the machine runs 1.26 with GOTOOLCHAIN=local, so the go command
fetches and verifies the zip, then reports that version mismatch; the zip is what the tests need.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

MODULE, VERSION = "github.com/argoproj/argo-cd/v3", "v3.6.1"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tidecd"
PREFIX = f"{MODULE}@{VERSION}/resource_customizations/"


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


def module_zip() -> Path:
    """The verified module zip in the Go module cache, downloaded when missing."""
    env = {**os.environ, "GOMODCACHE": str(CACHE / "go" / "pkg" / "mod"), "GOFLAGS": "-mod=mod",
           "GOTOOLCHAIN": "local"}
    go = shutil.which("go") or "/usr/local/go/bin/go"
    try:
        done = subprocess.run([go, "mod", "download", "-json", f"{MODULE}@{VERSION}"], capture_output=True,
                              text=True, timeout=900, check=False, env=env, cwd=CACHE)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"go mod download {MODULE}@{VERSION} could not run: {exc}")
    try:
        info = json.loads(done.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"go mod download {MODULE}@{VERSION} failed: {done.stderr.strip()[-2000:]}")
    error, zip_path = str(info.get("Error") or ""), Path(str(info.get("Zip") or "/nonexistent"))
    if error and "requires go >=" not in error:
        pytest.fail(f"go mod download {MODULE}@{VERSION} failed: {error}")
    if not zip_path.is_file() or not info.get("Sum"):
        pytest.fail(f"go mod download {MODULE}@{VERSION} left no verified zip: {done.stdout[-2000:]}")
    return zip_path


def catalogue_dir() -> Path:
    """`resource_customizations/` of Argo CD v3.6.1, unpacked once into the cache."""
    CACHE.mkdir(parents=True, exist_ok=True)
    target = CACHE / "argocd-catalogue" / VERSION
    marker = target / ".complete"
    if marker.is_file():
        return target / "resource_customizations"
    source = module_zip()
    partial = target.with_name(f"{VERSION}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    with zipfile.ZipFile(source) as archive:
        for member in archive.namelist():
            if member.startswith(PREFIX) and not member.endswith("/") and ".." not in member:
                out = partial / "resource_customizations" / member[len(PREFIX):]
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(archive.read(member))
    (partial / ".complete").write_text(f"{source}\n")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target / "resource_customizations"


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


def script_for(root: Path, obj: dict[str, Any]) -> Path | None:
    """The catalogue script Argo CD picks for an object (`GetHealthScript`): its own "group/Kind" directory,
    else the first wildcard directory (sorted, "_" read as "*", "*" not crossing "/") that matches."""
    group = str(obj.get("apiVersion") or "").rpartition("/")[0]
    kind = str(obj.get("kind") or "")
    exact = root / (f"{group}/{kind}" if group else kind) / "health.lua"
    if exact.is_file():
        return exact
    for directory in sorted(f"{p.parent.parent.name}/{p.parent.name}" for p in root.glob("*/*/health.lua")):
        if "_" in directory and group and _matches(directory.replace("_", "*"), f"{group}/{kind}"):
            return root / directory / "health.lua"
    return None


def _matches(pattern: str, key: str) -> bool:
    parts, names = pattern.split("/"), key.split("/")
    return len(parts) == len(names) and all(fnmatch.fnmatchcase(n, p) for p, n in zip(parts, names, strict=True))


@pytest.fixture(scope="session")
def argocd_catalogue() -> Path:
    return catalogue_dir()
