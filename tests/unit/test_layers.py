"""The layering is enforced: import-linter keeps the contracts of `.importlinter`, catches an upward import,
and every module of the product is placed in a layer (so a new module cannot slip past the contracts)."""

from __future__ import annotations

import configparser
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import tidecd

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
CONTRACT = "The data path: entry points, use cases, triggers, step, stages, state, clients, config, base"
MAX_TOP_LEVEL = 22


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(cwd / "shared"), "PATH": "/usr/bin:/bin"})


def copy_of_the_tree(tmp_path: Path) -> Path:
    for package in ("tidecd", "tidecd_dev"):
        shutil.copytree(ROOT / "shared" / package, tmp_path / "shared" / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "static", "templates"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    return tmp_path


def test_the_tree_keeps_every_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_upward_import_is_caught(tmp_path: Path) -> None:
    tree = copy_of_the_tree(tmp_path)
    store = tree / "shared" / "tidecd" / "clients" / "store.py"
    store.write_text(store.read_text() + "\n\ndef _upward() -> None:\n    from tidecd.step import reconcile  # noqa\n")
    result = lint_imports(tree)
    assert result.returncode == 1, result.stdout + result.stderr
    assert CONTRACT + " BROKEN" in " ".join(result.stdout.split())
    assert "tidecd.clients.store -> tidecd.step.reconcile" in result.stdout


def test_a_type_only_upward_import_is_caught(tmp_path: Path) -> None:
    """`if TYPE_CHECKING:` imports obey the layers too: a hidden circle is still a circle."""
    tree = copy_of_the_tree(tmp_path)
    model = tree / "shared" / "tidecd" / "base" / "model.py"
    model.write_text(model.read_text() + "\n\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                     "    from tidecd.runtime import Runtime  # noqa\n")
    result = lint_imports(tree)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "tidecd.base.model -> tidecd.runtime" in result.stdout


def test_the_product_importing_the_dev_tooling_is_caught(tmp_path: Path) -> None:
    tree = copy_of_the_tree(tmp_path)
    tools = tree / "shared" / "tidecd" / "clients" / "tools.py"
    tools.write_text(tools.read_text() + "\n\nfrom tidecd_dev import devcluster  # noqa\n")
    result = lint_imports(tree)
    assert result.returncode == 1
    assert "The product never imports the dev tooling BROKEN" in result.stdout


def layer_modules() -> set[str]:
    parser = configparser.ConfigParser()
    parser.read(ROOT / ".importlinter")
    names: set[str] = set()
    for line in parser["importlinter:contract:layers"]["layers"].split("\n"):
        names |= {part.strip() for part in line.replace(":", "|").split("|") if part.strip()}
    return names


def test_every_product_module_is_placed_in_a_layer() -> None:
    placed = layer_modules()
    unplaced = []
    for info in pkgutil.walk_packages(tidecd.__path__, "tidecd."):
        name = info.name
        covered = any(name == p or name.startswith(p + ".") for p in placed)
        split_package = info.ispkg and any(p.startswith(name + ".") for p in placed)  # e.g. tidecd.images
        if not covered and not split_package:
            unplaced.append(name)
    assert not unplaced, f"place these in a layer of .importlinter: {unplaced}"


def test_the_top_level_is_a_folder_per_layer() -> None:
    """The folders show the layers: at most 22 entries beside `__init__.py`, and every folder is a layer."""
    top = sorted(p.name for p in (ROOT / "shared" / "tidecd").iterdir()
                 if p.name not in ("__init__.py", "__pycache__", "py.typed") and (p.is_dir() or p.suffix == ".py"))
    assert len(top) <= MAX_TOP_LEVEL, top
    placed = layer_modules()
    for name in top:
        assert f"tidecd.{name.removesuffix('.py')}" in placed, f"{name} is in no layer of .importlinter"


def test_no_submodule_re_enters_its_half_initialised_package() -> None:
    """`from tidecd.render import tool` inside tidecd/render/helm.py runs while tidecd/render/__init__.py is
    still importing helm: a module its package's __init__ imports must import siblings by full name."""
    import ast

    def imports_from(path: Path) -> list[ast.ImportFrom]:
        return [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom) and n.level == 0]

    found = []
    for init in sorted((ROOT / "shared" / "tidecd").rglob("__init__.py")):
        package = ".".join(init.parent.relative_to(ROOT / "shared").parts)
        loaded = {n.module for n in imports_from(init) if n.module and n.module.startswith(package + ".")}
        for module in sorted(loaded):
            path = ROOT / "shared" / (module.replace(".", "/") + ".py")
            for node in imports_from(path) if path.exists() else []:
                if node.module == package:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {package} import ...")
    assert not found, found


def test_the_house_measures_hold() -> None:
    """scripts/house.py (class, module and function sizes; no private name imported across modules) and
    scripts/lazy_imports.py (every import inside a function says why it is lazy) both pass on the tree."""
    for script in ("house.py", "lazy_imports.py"):
        result = subprocess.run([sys.executable, str(ROOT / "scripts" / script)], capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0, f"scripts/{script}:\n{result.stdout}{result.stderr}"
