"""The function source archive: what `make package` builds is what Cloud Functions runs.

scripts/package.sh builds the zip (twice: the bytes must match); it is unpacked into a clean directory
and the functions are started from there with the real functions-framework, PYTHONPATH = that
directory and never the repository, the way the Cloud Functions image runs it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import importlib.metadata
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tidecd_dev.devcluster import free_port

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
SECRET = "package-test-webhook-secret"
FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def pinned_version(tool: str) -> str:
    """The version scripts/tools.sh pins for `tool` (HELM_VERSION=v3.19.5, ...)."""
    text = (ROOT / "scripts" / "tools.sh").read_text()
    match = re.search(rf"^{tool.upper()}_VERSION=(\S+)$", text, re.M)
    assert match, f"scripts/tools.sh pins no {tool} version"
    return match.group(1)


def build(out: Path) -> Path:
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "package.sh"), str(out)],
        capture_output=True, text=True, timeout=1800, cwd=ROOT,
    )
    assert result.returncode == 0, f"package.sh failed:\n{result.stdout}\n{result.stderr}"
    return out


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("dist") / "tidecd-functions.zip")


@pytest.fixture(scope="module")
def unpacked(archive: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The archive extracted with its unix modes, as the Cloud Functions build does."""
    target = tmp_path_factory.mktemp("workspace")
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            path = Path(zf.extract(info, target))
            path.chmod((info.external_attr >> 16) & 0o777)
    return target


def clean_env(workspace: Path, home: Path, **extra: str) -> dict[str, str]:
    """An environment that can only find what the archive brings (no repo, no tool cache)."""
    env = {
        "PATH": f"{VENV_BIN}:/usr/bin:/bin",
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / "cache"),
        "PYTHONPATH": str(workspace),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.update(extra)
    return env


@pytest.fixture()
def serve(unpacked: Path, tmp_path: Path) -> Iterator[object]:
    """Start one entry point from the unpacked archive; returns its base URL."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(target: str) -> str:
        port = free_port()
        (tmp_path / "config").mkdir(exist_ok=True)
        env = clean_env(
            unpacked, tmp_path,
            TIDECD_WEBHOOK_SECRET=SECRET,
            TIDECD_STORE=str(tmp_path / "store"),
            TIDECD_CONFIG=str(tmp_path / "config"),
            TIDECD_BIN_DIR=str(unpacked / "bin"),
        )
        log = (tmp_path / f"{target}.log").open("wb")
        proc = subprocess.Popen(
            [str(VENV_BIN / "functions-framework"), "--target", target, "--source", "main.py",
             "--host", "127.0.0.1", "--port", str(port)],
            cwd=unpacked, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
        procs.append(proc)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"{target} exited:\n{(tmp_path / f'{target}.log').read_text()}"
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return f"http://127.0.0.1:{port}"
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"{target} did not listen within 60 s:\n{(tmp_path / f'{target}.log').read_text()}")

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def test_archive_holds_main_the_library_requirements_and_tools(archive: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
        assert names == sorted(names), "entries must be sorted"
        assert {"main.py", "requirements.txt", "bin/helm", "bin/kustomize", "bin/gotemplate",
                "tidecd/__init__.py"} <= set(names)
        assert zf.read("main.py") == (ROOT / "functions" / "main.py").read_bytes()
        library = {
            "tidecd/" + p.relative_to(ROOT / "shared" / "tidecd").as_posix()
            for p in (ROOT / "shared" / "tidecd").rglob("*.py") if "__pycache__" not in p.parts
        }
        assert library <= set(names), f"missing from the archive: {sorted(library - set(names))}"
        assert {n.split("/")[0] for n in names} == {"main.py", "requirements.txt", "bin", "tidecd", "__pycache__"}
        assert {i.date_time for i in zf.infolist()} == {FIXED_TIME}
        # each module's bytecode beside it, checked-hash (PEP 552: flags 0b11) and of this very source
        sources = sorted(n for n in names if n.endswith(".py"))
        assert sorted(n for n in names if n.endswith(".pyc")) == sorted(
            importlib.util.cache_from_source(n) for n in sources)
        for name in sources:
            pyc = zf.read(importlib.util.cache_from_source(name))
            assert pyc[:4] == importlib.util.MAGIC_NUMBER and int.from_bytes(pyc[4:8], "little") == 0b11, name
            assert pyc[8:16] == importlib.util.source_hash(zf.read(name)), f"{name}: its .pyc is of another source"


def test_a_cold_import_from_the_archive_compiles_nothing_and_an_edited_source_is_not_run_stale(
        unpacked: Path, tmp_path: Path) -> None:
    """The reconcile path's modules load from the shipped bytecode (no image writes any: each instance
    would compile them again); a source changed after packaging is compiled, never its old .pyc run."""
    probe = "import main, tidecd.step.stepping, tidecd.triggers.dispatch"

    def compiled_from_source(workspace: Path) -> list[str]:
        run = subprocess.run([sys.executable, "-v", "-c", probe], cwd=workspace, capture_output=True, text=True,
                             env=clean_env(workspace, tmp_path), timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
        return [line for line in run.stderr.splitlines()
                if line.startswith("# code object from ") and str(workspace) in line and line.endswith(".py")]

    assert compiled_from_source(unpacked) == []
    edited = tmp_path / "edited"
    subprocess.run(["cp", "-a", str(unpacked), str(edited)], check=True)
    errors = edited / "tidecd" / "base" / "errors.py"
    errors.write_text(errors.read_text() + "\nEDITED_AFTER_PACKAGING = True\n")
    assert compiled_from_source(edited) == [f"# code object from {errors}"]


def test_archive_holds_no_dev_tooling(archive: Path) -> None:
    """The local control plane, git server, demo and tool builder (tidecd_dev) stay out of the product."""
    dev_modules = {p.stem for p in (ROOT / "shared" / "tidecd_dev").glob("*.py")} - {"__init__"}
    assert {"devcluster", "gitserver", "demo", "cli", "tools"} <= dev_modules
    dev_sources = {p.read_bytes() for p in (ROOT / "shared" / "tidecd_dev").rglob("*.py") if p.stat().st_size}
    with zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
        assert not [n for n in names if n.startswith("tidecd_dev/")]
        # A dev module copied into the product under any name (a product module may share a dev module's
        # name, e.g. clients/pubsub.py, the publisher, beside tidecd_dev/pubsub.py, the emulator runner)
        leaked = [n for n in names if n.endswith(".py") and zf.read(n) in dev_sources]
    assert not leaked, f"dev modules in the function zip: {leaked}"
    assert "tidecd/cli/dev.py" not in names


def test_requirements_pin_the_installed_runtime_dependencies(archive: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        lines = [ln for ln in zf.read("requirements.txt").decode().splitlines() if ln and not ln.startswith("#")]
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.match(r"[A-Za-z0-9._-]+", d).group(0).lower() for d in deps}  # type: ignore[union-attr]
    pinned = dict(line.split("==", 1) for line in lines)
    assert {n.lower() for n in pinned} == names
    for name, version in pinned.items():
        assert version == importlib.metadata.version(name), name


def test_tools_are_real_static_executables_of_the_pinned_versions(archive: Path, unpacked: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        for tool in ("helm", "kustomize", "gotemplate"):
            mode = zf.getinfo(f"bin/{tool}").external_attr >> 16
            assert mode == 0o100755, f"bin/{tool}: mode {oct(mode)} (must be a regular executable, not a link)"
    helm = subprocess.run([str(unpacked / "bin" / "helm"), "version", "--short"],
                          capture_output=True, text=True, timeout=60, env={"HOME": str(unpacked)})
    assert pinned_version("helm") in helm.stdout, helm.stdout + helm.stderr
    kustomize = subprocess.run([str(unpacked / "bin" / "kustomize"), "version"],
                               capture_output=True, text=True, timeout=60)
    assert pinned_version("kustomize") in kustomize.stdout, kustomize.stdout + kustomize.stderr
    batch = '{"goTemplate": true, "params": [{"a": "x"}], "items": [{"template": "{{ .a | upper }}"}]}'
    rendered = subprocess.run([str(unpacked / "bin" / "gotemplate")], capture_output=True, text=True, timeout=60,
                              input=batch)
    assert json.loads(rendered.stdout) == {"results": [{"value": "X"}]}, rendered.stdout + rendered.stderr
    for tool in ("helm", "kustomize", "gotemplate"):
        with (unpacked / "bin" / tool).open("rb") as f:
            head = f.read(64)
        assert head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == 0x3E, tool


def test_the_archive_is_reproducible(archive: Path, tmp_path: Path) -> None:
    again = build(tmp_path / "again.zip")
    assert hashlib.sha256(again.read_bytes()).digest() == hashlib.sha256(archive.read_bytes()).digest()


def test_packaged_tools_are_found_and_a_missing_one_is_named(unpacked: Path, tmp_path: Path) -> None:
    probe = (
        "import tidecd, tidecd.clients.tools as t\n"
        "from tidecd.clients.tools import MissingTool\n"
        "print(tidecd.__file__)\n"
        "try:\n    print(t.binary('helm'))\nexcept MissingTool as e:\n    print('missing:', e)\n"
    )
    env = clean_env(unpacked, tmp_path)
    found = subprocess.run([sys.executable, "-c", probe], cwd=unpacked, env=env,
                           capture_output=True, text=True, timeout=60)
    library, helm = found.stdout.split()[:2]
    assert Path(library).is_relative_to(unpacked), "tidecd must come from the archive, not the repository"
    assert helm == str(unpacked / "bin" / "helm")

    empty = tmp_path / "nowhere"
    empty.mkdir()
    missing = subprocess.run([sys.executable, "-c", probe], cwd=empty,
                             env=clean_env(unpacked, tmp_path, TIDECD_BIN_DIR=str(empty)),
                             capture_output=True, text=True, timeout=60)
    assert "missing: helm not found" in missing.stdout, missing.stdout + missing.stderr
    assert "make package" in missing.stdout


def test_argo_cds_lua_catalogue_is_shipped_and_applies_from_the_archive(archive: Path, unpacked: Path,
                                                                        tmp_path: Path) -> None:
    """Argo CD's catalogue (scripts/tools.sh argocd-catalogue) ships as its .lua files under bin/, where the
    function finds it and applies it: a suspended CronJob reads Healthy as in Argo CD (its health.lua), and
    a Rollout offers Argo CD's actions."""
    with zipfile.ZipFile(archive) as zf:
        scripts = [n for n in zf.namelist() if n.startswith("bin/argocd-catalogue/")]
    assert len([n for n in scripts if n.endswith("/health.lua")]) >= 250
    assert "bin/argocd-catalogue/argoproj.io/Rollout/actions/discovery.lua" in scripts
    assert all(n.endswith(".lua") for n in scripts), "only the scripts: no test fixtures"
    probe = (
        "from tidecd.health import assess, catalogue\n"
        "from tidecd.usecases import lua_actions\n"
        "print(catalogue.root())\n"
        "cron = {'apiVersion': 'batch/v1', 'kind': 'CronJob', 'metadata': {'name': 'c'},\n"
        "        'spec': {'suspend': True}, 'status': {'lastScheduleTime': '2026-01-01T00:00:00Z'}}\n"
        "print(assess(cron))\n"
        "print(lua_actions.catalogue())\n"
    )
    found = subprocess.run([sys.executable, "-c", probe], cwd=unpacked, env=clean_env(unpacked, tmp_path),
                           capture_output=True, text=True, timeout=60)
    lines = found.stdout.splitlines()
    assert len(lines) == 3, found.stdout + found.stderr
    assert lines[0] == lines[2] == str(unpacked / "bin" / "argocd-catalogue"), found.stdout
    assert "Healthy" in lines[1] and "CronJob is Suspended" in lines[1], lines[1]


def test_webhook_from_the_archive_answers_a_signed_github_ping(serve: object) -> None:
    url = serve("webhook")  # type: ignore[operator]
    body = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()
    headers = {"Content-Type": "application/json", "X-GitHub-Event": "ping",
               "X-GitHub-Delivery": "d-1", "X-Hub-Signature-256": sign(body)}
    answer = requests.post(url, data=body, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text

    forged = dict(headers, **{"X-Hub-Signature-256": sign(body, "not-the-secret")})
    refused = requests.post(url, data=body, headers=forged, timeout=30)
    assert refused.status_code == 401, refused.text
    assert SECRET not in refused.text


def push_envelope(data: bytes) -> dict[str, object]:
    """The body a Pub/Sub push subscription POSTs (without the no_wrapper option)."""
    message = {"data": base64.b64encode(data).decode(), "messageId": "7", "attributes": {},
               "publishTime": "2026-01-01T00:00:00Z"}
    return {"message": message, "subscription": "projects/p/subscriptions/tidecd-reconcile"}


def test_reconcile_from_the_archive_takes_a_pubsub_push_envelope(serve: object, tmp_path: Path) -> None:
    """The Terraform delivers refreshes with a push subscription (for its dead-letter policy), so
    reconcile must take the push body, which functions-framework turns into the same CloudEvent."""
    url = serve("reconcile")  # type: ignore[operator]
    refresh = json.dumps({"app": "ghost", "reason": "package test"}).encode()
    answer = requests.post(url, json=push_envelope(refresh), timeout=120)
    assert answer.status_code == 200, answer.text  # an unknown app is recorded, not retried
    recorded = [p.relative_to(tmp_path) for p in (tmp_path / "store").rglob("*ghost*")]
    assert recorded, "the app named in the message never reached reconcile (nothing recorded in the store)"

    not_an_event = requests.post(url, json={"hello": "world"}, timeout=60)
    assert not_an_event.status_code == 400


def test_reconcile_acknowledges_an_undecodable_message(serve: object) -> None:
    """A message that cannot be decoded is a PermanentError: answering 5xx would have Pub/Sub redeliver
    it until it is dead-lettered, so reconcile must acknowledge it (2xx)."""
    url = serve("reconcile")  # type: ignore[operator]
    answer = requests.post(url, json=push_envelope(b"not json"), timeout=60)
    assert answer.status_code == 200, answer.text


def test_package_refuses_without_entry_points(tmp_path: Path) -> None:
    """The script names what is missing instead of shipping an archive that cannot start."""
    fake = tmp_path / "repo"
    (fake / "scripts").mkdir(parents=True)
    (fake / "scripts" / "package.sh").write_bytes((ROOT / "scripts" / "package.sh").read_bytes())
    result = subprocess.run(["bash", str(fake / "scripts" / "package.sh")], capture_output=True, text=True,
                            timeout=60, env={**os.environ, "PYTHON": sys.executable})
    assert result.returncode != 0
    assert "functions/main.py not found" in result.stderr
