"""The bad-input corpus: one case per class of hostile or broken input, kept as regression tests.

Every case runs against the real control plane, the real git server and real kustomize/helm. Two apps
live in the same repository and namespace: `bad` (whose source or config holds the bad input, with
automated sync so that anything it could apply would be applied) and `good`. Each case asserts
- the message, naming the file, object or field (in the bad app's conditions, or the config's report);
- that nothing of the bad app was applied (no object named `bad-*`, `stolen*` or `fetched*`);
- that the good app still reconciles: Synced, its ConfigMap live.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.server
import io
import json
import re
import subprocess
import tarfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.apps import GitOps, configmap
from tests.unit.test_limits import alias_bomb
from tidecd.usecases import webhook as hooks

BAD_NAMES = ("bad-", "stolen", "fetched")


@dataclass
class Case:
    files: dict[str, Any] = field(default_factory=dict)  # pushed to the repository (bad/... mostly)
    expect: str = ""  # regex over the bad app's conditions (or the config report)
    source: dict[str, Any] = field(default_factory=dict)  # extra spec.source of the bad app
    env: dict[str, str] = field(default_factory=dict)
    setup: Callable[[GitOps, Path], None] | None = None  # runs after the push, before reconciling
    config_files: dict[str, str | bytes] = field(default_factory=dict)  # extra config source files
    bad_app: bool = True  # False: the bad thing sets aside no app (reported in config problems)
    per_snapshot: bool = False  # refuses the whole repository snapshot: the good app lives in another repo
    fetched: tuple[str, ...] = ()  # paths tidecd's own source clients may ask the loopback server (never a tool)


def cm_yaml(name: str) -> str:
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  k: v\n"


@pytest.fixture
def loopback_server() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on loopback that would hand out a ConfigMap; records every request it sees."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            seen.append(self.path)
            body = cm_yaml("fetched").encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def _outside_dir(tmp: Path) -> str:
    """A directory outside any checkout holding a kustomization, as `../../..` from the app path."""
    evil = tmp / "outside"
    evil.mkdir(exist_ok=True)
    (evil / "kustomization.yaml").write_text("resources: [cm.yaml]\n")
    (evil / "cm.yaml").write_text(cm_yaml("stolen"))
    return "../" * 40 + str(evil).lstrip("/")


def _deep_tree(gitops: GitOps, _tmp: Path) -> None:
    deep = gitops.repo.workdir / "bad" / "/".join(["d"] * 1100)
    subprocess.run(["mkdir", "-p", str(deep)], check=True)  # Path.mkdir(parents=True) recurses
    (deep / "cm.yaml").write_text(cm_yaml("bad-deep"))
    gitops.repo.git("add", "-A")
    gitops.repo.commit("1,100 nested directories")
    gitops.repo.push()
    # pushed: drop the working copy of it, or pytest's own temp cleanup (shutil.rmtree recurses) would crash
    subprocess.run(["rm", "-rf", str(gitops.repo.workdir / "bad" / "d")], check=True)


def _symlink_out(gitops: GitOps, _tmp: Path) -> None:
    gitops.repo.symlink("bad/passwd.yaml", "/etc/passwd")
    gitops.repo.commit("a symlink leaving the checkout")
    gitops.repo.push()


def _tampered_cache(gitops: GitOps, _tmp: Path) -> None:
    """A snapshot cache entry replaced by a tar-slip archive (with a matching checksum): refused."""
    from tidecd.source import Snapshots

    sha = gitops.repo.head()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = cm_yaml("stolen").encode()
        info = tarfile.TarInfo("bad/../../escaped.yaml")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    key = Snapshots.key(gitops.repo.url, sha)
    gitops.store.write(key, buffer.getvalue())
    gitops.store.write(key + ".sha256", hashlib.sha256(buffer.getvalue()).hexdigest().encode())


CASES: dict[str, Case] = {
    # --- escapes ------------------------------------------------------------------------------------
    "kustomize remote resource on loopback (SSRF)": Case(
        files={"bad/kustomization.yaml": "resources: ['LOOPBACK/cm.yaml']\n"},
        expect=r"kustomization bad/kustomization.yaml: resources\[0\] 'http://127\.0\.0\.1:\d+/cm\.yaml' is remote"),
    "kustomize git URL of a repo outside sourceRepos": Case(
        files={"bad/kustomization.yaml": "resources: ['OTHER_REPO//app?ref=main']\n"},
        config_files={"project.yaml": "apiVersion: argoproj.io/v1alpha1\nkind: AppProject\nmetadata: {name: team}\n"
                                      "spec: {sourceRepos: ['GITOPS_REPO'], "
                                      "destinations: [{namespace: '*', server: '*'}]}\n"},
        source={"project": "team"},
        expect=r"kustomization bad/kustomization.yaml: resources\[0\] 'http://.*\?ref=main': repository "
               r"'http://.*/other-.*' is not permitted by the project's sourceRepos; nothing was fetched"),
    "kustomize ../ directory outside the checkout": Case(
        files={"bad/kustomization.yaml": "resources: [OUTSIDE]\n"},
        expect=r"kustomization bad/kustomization.yaml: resources\[0\] '(\.\./)+.*outside' leaves the repository"),
    "kustomize patch file outside the checkout": Case(
        files={"bad/kustomization.yaml": "resources: [cm.yaml]\npatchesStrategicMerge: [../../../../etc/hosts]\n",
               "bad/cm.yaml": cm_yaml("bad-cm")},
        expect=r"kustomization bad/kustomization.yaml: patchesStrategicMerge\[0\] '../../../../etc/hosts' leaves"),
    "kustomize generator file outside the checkout": Case(
        files={"bad/kustomization.yaml": "configMapGenerator:\n- name: bad-gen\n  files: [../../../etc/hostname]\n"},
        expect=r"configMapGenerator\[0\]\.files\[0\] '../../../etc/hostname' leaves"),
    "kustomize helm chart inflation": Case(
        files={"bad/kustomization.yaml": "helmCharts:\n- name: x\n  repo: LOOPBACK\n"},
        expect=r"kustomization bad/kustomization.yaml: helmCharts: helm chart inflation needs argocd-cm's "
               r"kustomize.buildOptions: --enable-helm"),
    "symlink leaving the checkout": Case(
        files={"bad/cm.yaml": cm_yaml("bad-cm")}, setup=_symlink_out, per_snapshot=True,
        expect=r"archive member 'bad/passwd\.yaml' links to absolute '/etc/passwd'"),
    "spec.source.path with ..": Case(
        source={"path": "../../etc"},
        expect=r"Application/BADNAME: spec\.source\.path: must be a relative path inside the repository"),
    "helm value file escape": Case(
        files={"bad/Chart.yaml": "apiVersion: v2\nname: bad\nversion: 0.1.0\n",
               "bad/templates/cm.yaml": cm_yaml("bad-chart")},
        source={"helm": {"valueFiles": ["../../../../etc/passwd"]}},
        expect=r"spec\.source\.helm\.valueFiles\[0\] '../../../../etc/passwd' leaves the repository checkout"),
    "helm dependency from a repository (no network)": Case(
        files={"bad/Chart.yaml": "apiVersion: v2\nname: bad\nversion: 0.1.0\ndependencies:\n"
                                 "- name: dep\n  version: 1.0.0\n  repository: LOOPBACK\n",
               "bad/templates/cm.yaml": cm_yaml("bad-chart")},
        # tidecd's chart client fetches the dependency (never helm), from a server that is no chart repository
        expect=r"http://127\.0\.0\.1:[0-9]+/index\.yaml: not a helm repository index", fetched=("/index.yaml",)),
    "tar-slip in a tampered snapshot cache": Case(
        files={"bad/cm.yaml": cm_yaml("bad-cm")}, setup=_tampered_cache, per_snapshot=True,
        expect=r"archive member 'bad/\.\./\.\./escaped\.yaml' contains '\.\.'"),
    # --- denial of service ----------------------------------------------------------------------------
    "YAML alias bomb in a manifest": Case(
        files={"bad/bomb.yaml": alias_bomb()},
        expect=r"bad/bomb\.yaml document 1: YAML aliases expand: over the limit of 100,000 nodes "
               r"\(TIDECD_MAX_YAML_ALIAS_NODES\)"),
    "YAML alias bomb in helm values": Case(
        files={"bad/Chart.yaml": "apiVersion: v2\nname: bad\nversion: 0.1.0\n",
               "bad/templates/cm.yaml": cm_yaml("bad-chart"), "bad/values-bomb.yaml": alias_bomb()},
        source={"helm": {"valueFiles": ["values-bomb.yaml"]}},
        expect=r"valueFiles\[0\] 'values-bomb\.yaml' document 1: YAML aliases expand"),
    "deep nesting in a manifest": Case(
        files={"bad/deep.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad-deep}\ndata: {x: "
                                + "[" * 300 + "]" * 300 + "}\n"},
        expect=r"bad/deep\.yaml document 1: nesting depth: over the limit of 128 \(TIDECD_MAX_DEPTH\)"),
    "1,100 nested directories": Case(
        setup=_deep_tree, per_snapshot=True, expect=r"snapshot member 'bad/d/d.*path levels: over the limit of 64 "
                                 r"\(TIDECD_MAX_PATH_DEPTH\)"),
    "an object over the size limit": Case(
        files={"bad/big.yaml": configmap("bad-big", {"k": "x" * 3000})}, env={"TIDECD_MAX_OBJECT_BYTES": "2048"},
        expect=r"ConfigMap \S*bad-big \(bad/big\.yaml document 1\) is [\d,]+ bytes as JSON: over the limit of "
               r"2,048 bytes \(TIDECD_MAX_OBJECT_BYTES\)"),
    "too many files": Case(
        files={f"bad/f{i}.yaml": cm_yaml(f"bad-f{i}") for i in range(12)}, env={"TIDECD_MAX_FILES": "10"},
        per_snapshot=True,
        expect=r"snapshot: number of files: over the limit of 10 \(TIDECD_MAX_FILES\)"),
    "a file over the size limit": Case(
        files={"bad/big.yaml": cm_yaml("bad-big") + "# " + "x" * 5000 + "\n"}, env={"TIDECD_MAX_FILE_BYTES": "4096"},
        expect=r"bad/big\.yaml is [\d,]+ bytes: over the limit of 4,096 bytes \(TIDECD_MAX_FILE_BYTES\)"),
    # --- one bad config file ------------------------------------------------------------------------------
    "config: YAML syntax error": Case(
        config_files={"BAD.yaml": "APP  oops: [unclosed\n"}, expect=r"BAD\.yaml:\d+: YAML syntax error"),
    "config: not UTF-8": Case(config_files={"BAD.yaml": b"APP# \xff\xfe\n"}, expect=r"BAD\.yaml: not UTF-8 text"),
    "config: duplicate app name": Case(
        config_files={"BAD-copy.yaml": "APP"}, expect=r"Application/BADNAME: metadata\.name: defined more than once"),
    "config: bad AppProject": Case(
        config_files={"project.yaml": "apiVersion: argoproj.io/v1alpha1\nkind: AppProject\nmetadata: {name: team}\n"
                                      "spec: {sourceRepos: ['*'], bogus: 1}\n"},
        source={"project": "team"}, expect=r"project 'team' is invalid, so this app is set aside: .*spec\.bogus"),
    "config: alias bomb": Case(
        config_files={"BAD.yaml": "APP" + "x: &a [1,1,1,1,1,1,1,1,1]\n" + "".join(
            f"x{i}: &a{i} [" + ",".join(["*a" if i == 0 else f"*a{i - 1}"] * 9) + "]\n" for i in range(8))},
        expect=r"BAD\.yaml document 1: YAML aliases expand"),
    "config: unknown kind": Case(
        config_files={"cm.yaml": cm_yaml("x")}, bad_app=False,
        expect=r"cm\.yaml: document 1: unsupported object \(apiVersion 'v1', kind 'ConfigMap'\)"),
    "config: symlink leaving the config directory": Case(
        config_files={"LINK": ""}, bad_app=False,
        expect=r"link\.yaml: symlink pointing outside the config directory: not read"),
}


def _prepare(gitops: GitOps, case: Case, tmp: Path, server: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    other = gitops.repo.server.create_repo(f"other-{gitops.namespace}")  # a repo no sourceRepos rule names
    files = {}
    for path, content in case.files.items():
        if isinstance(content, str):
            content = (content.replace("LOOPBACK", server).replace("OUTSIDE", _outside_dir(tmp))
                       .replace("OTHER_REPO", other))
        files[path] = content
    good_source: dict[str, Any] = {}
    if case.per_snapshot:
        from tests.support.gitserver import GitRepo

        other_repo = GitRepo(gitops.repo.server, f"good-{gitops.namespace}", tmp / "good-work")
        other_repo.write("good/cm.yaml", yaml.safe_dump(configmap("good-cm")))
        other_repo.commit("good")
        other_repo.push()
        good_source = {"repoURL": other_repo.url}
        if files:
            gitops.push(files)
    else:
        gitops.push({"good/cm.yaml": configmap("good-cm"), **files})
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    good = gitops.application("good", path="good", automated={"prune": True}, source=good_source)
    source = {k: v for k, v in case.source.items() if k != "project"}
    bad = gitops.application("bad", path=case.source.get("path", "bad"), automated={"prune": True},
                             source=source, project=case.source.get("project", "default"))
    if case.setup is not None:
        case.setup(gitops, tmp)
    _config_files(gitops, case, bad, tmp)
    return good, bad


def _config_files(gitops: GitOps, case: Case, bad: str, tmp: Path) -> None:
    app_text = (gitops.config_dir / f"{bad}.yaml").read_text()
    for name, content in case.config_files.items():
        if name == "LINK":
            outside = tmp / "outside-app.yaml"
            outside.write_text(app_text.replace(bad, "stolen-app"))
            (gitops.config_dir / "link.yaml").symlink_to(outside)
            continue
        target = gitops.config_dir / name.replace("BAD", bad)  # BAD.yaml: the broken file replaces the app's own
        if isinstance(content, bytes):
            target.write_bytes(content.replace(b"APP", app_text.encode()))
        else:
            target.write_text(content.replace("APP", app_text).replace("BADNAME", bad)
                              .replace("GITOPS_REPO", gitops.repo.url))


def _applied_bad_objects(gitops: GitOps) -> list[str]:
    names = [obj["metadata"]["name"] for obj in gitops.kube.list("", "ConfigMap", namespace=gitops.namespace)]
    return [n for n in names if n.startswith(BAD_NAMES)]


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input(name: str, gitops: GitOps, tmp_path: Path, loopback_server: tuple[str, list[str]],
                   monkeypatch: pytest.MonkeyPatch) -> None:
    case = CASES[name]
    server, seen = loopback_server
    good, bad = _prepare(gitops, case, tmp_path, server, monkeypatch)
    runtime = gitops.runtime()
    config = runtime.config()
    expect = case.expect.replace("BADNAME", bad).replace("BAD", bad)
    if case.bad_app:
        gitops.reconcile("bad")
        state = gitops.state("bad")
        messages = " | ".join(c["message"] for c in state.conditions)
        assert re.search(expect, messages), messages or state
        assert state.inventory == []
    else:
        report = " | ".join(config.problems)
        assert re.search(expect, report), report
    assert _applied_bad_objects(gitops) == [], "nothing of the bad input may be applied"
    assert [p for p in seen if p not in case.fetched] == [], "no render may reach the network"
    gitops.reconcile("good")
    assert gitops.state("good").sync_status == "Synced", gitops.state("good").conditions
    assert gitops.live("ConfigMap", "good-cm") is not None
    if case.bad_app and name.startswith("config:"):
        listing = [a for a in _api_list(gitops) if a["name"] == bad]
        assert listing and "error" in listing[0], listing
        _cli_lists_the_good_and_marks_the_bad(gitops, good, bad)


def _cli_lists_the_good_and_marks_the_bad(gitops: GitOps, good: str, bad: str) -> None:
    from typer.testing import CliRunner

    from tidecd.cli import app as cli

    env = {"TIDECD_CONFIG": str(gitops.config_dir), "TIDECD_STORE": str(gitops.store.root),
           "KUBECONFIG": str(gitops.dev.kubeconfig)}
    shown = CliRunner().invoke(cli, ["app", "list", "--cached"], env=env)
    rows = {line.split()[0]: line.split()[1] for line in shown.stdout.splitlines()[1:] if line.split()}
    assert rows.get(good) == "Synced" and rows.get(bad) == "Invalid", shown.output
    assert f"invalid: {bad}: " in shown.output, shown.output


def _api_list(gitops: GitOps) -> list[dict[str, Any]]:
    from tidecd.usecases import api

    runtime = gitops.runtime(api_token="t")
    answer = api.handle("GET", "/api/v1/apps", {"Authorization": "Bearer t"}, b"", runtime)
    assert answer.status == 200
    apps: list[dict[str, Any]] = answer.body["apps"]
    return apps


def test_a_corrupt_snapshot_is_fetched_again(gitops: GitOps) -> None:
    from tidecd.source import Snapshots, checkouts

    gitops.push({"app/cm.yaml": configmap("fine")})
    gitops.application(automated={"prune": True})
    gitops.reconcile()
    assert gitops.state().sync_status == "Synced"
    key = Snapshots.key(gitops.repo.url, gitops.repo.head())
    gitops.store.write(key, b"\x1f\x8b not a gzip stream at all")
    for entry in gitops.store.list(f"manifests/{gitops.real('app')}/"):
        gitops.store.delete(entry)  # so the next refresh renders, and needs the snapshot
    checkouts.shared().clear()  # as a cold instance: a warm one renders from the tree it extracted before
    gitops.reconcile(automate=False)
    assert gitops.state().sync_status == "Synced", gitops.state().conditions
    blob = gitops.store.read(key)
    assert blob is not None and blob.data.startswith(b"\x1f\x8b\x08"), "the corrupt entry was replaced"


def test_a_corrupt_manifest_cache_entry_is_rendered_again(gitops: GitOps) -> None:
    gitops.push({"app/cm.yaml": configmap("fine", {"k": "real"})})
    gitops.application(automated={"prune": True})
    gitops.reconcile()
    [key] = gitops.store.list(f"manifests/{gitops.real('app')}/")
    blob = gitops.store.read(key)
    assert blob is not None
    gitops.store.write(key, blob.data.replace(b'"real"', b'"evil"'))
    gitops.reconcile(automate=False)
    assert gitops.state().sync_status == "Synced"
    assert (gitops.live("ConfigMap", "fine") or {}).get("data") == {"k": "real"}


def test_a_truncated_state_file_is_reported_and_rebuilt(gitops: GitOps) -> None:
    """ops-core's state reader: a state file that cannot be read never breaks the app or the others."""
    gitops.push({"good/cm.yaml": configmap("good-cm"), "app/cm.yaml": configmap("fine")})
    gitops.application(automated={"prune": True})
    gitops.application("good", path="good", automated={"prune": True})
    gitops.reconcile()
    gitops.store.write(f"state/apps/{gitops.real('app')}.json", b'{"app": "trunc')
    gitops.reconcile("app", automate=False)
    state = gitops.state()
    assert state.sync_status == "Synced", state.conditions
    gitops.reconcile("good")
    assert gitops.state("good").sync_status == "Synced"


def test_a_wrong_webhook_signature_changes_nothing(gitops: GitOps) -> None:
    gitops.push({"good/cm.yaml": configmap("good-cm")})
    gitops.application("good", path="good", automated={"prune": True})
    runtime = gitops.runtime(webhook_secret="right")
    body = json.dumps({"ref": "refs/heads/main", "after": "0" * 39 + "1",
                       "repository": {"clone_url": gitops.repo.url, "default_branch": "main"}}).encode()
    wrong = "sha256=" + hmac.new(b"wrong", body, hashlib.sha256).hexdigest()
    sent: list[Any] = []

    class Recorder:
        def dispatch(self, refreshes: Any) -> dict[str, str]:
            sent.extend(refreshes)
            return {}

    answer = hooks.handle({"X-GitHub-Event": "push", "X-Hub-Signature-256": wrong, "X-GitHub-Delivery": "d1"},
                          body, runtime, Recorder())  # type: ignore[arg-type]
    assert answer.status == 401
    assert answer.body["error"] == "X-Hub-Signature-256 does not match the body and the configured secret"
    assert sent == [] and gitops.store.list("deliveries/") == []
    gitops.reconcile("good")
    assert gitops.state("good").sync_status == "Synced"


def test_webhook_answer_reports_what_the_config_sets_aside(gitops: GitOps) -> None:
    gitops.push({"good/cm.yaml": configmap("good-cm")})
    good = gitops.application("good", path="good", automated={"prune": True})
    (gitops.config_dir / "broken.yaml").write_text("apiVersion: argoproj.io/v1alpha1\nkind: Application\n"
                                                   "metadata:\n  name: broken\nspec: [unclosed\n")
    runtime = gitops.runtime(webhook_secret="right")
    body = json.dumps({"ref": "refs/heads/main", "after": gitops.repo.head(), "commits": [],
                       "repository": {"clone_url": gitops.repo.url, "default_branch": "main"}}).encode()
    signature = "sha256=" + hmac.new(b"right", body, hashlib.sha256).hexdigest()
    sent: list[Any] = []

    class Recorder:
        def dispatch(self, refreshes: Any) -> dict[str, str]:
            sent.extend(refreshes)
            return {}

    answer = hooks.handle({"X-GitHub-Event": "push", "X-Hub-Signature-256": signature, "X-GitHub-Delivery": "d2"},
                          body, runtime, Recorder())  # type: ignore[arg-type]
    assert answer.status == 202 and answer.body["refreshed"] == [good]
    assert "YAML syntax error" in answer.body["set_aside"]["broken"]
    assert yaml.safe_dump(answer.body)


def test_kustomize_itself_cannot_reach_a_loopback_server(tmp_path: Path,
                                                         loopback_server: tuple[str, list[str]]) -> None:
    """Beneath the confinement check: real kustomize, handed a remote resource directly, sees no network
    (its own network namespace here; elsewhere only the proxies, which Go skips for loopback, so there the
    confinement check is what stops it)."""
    from tidecd.base.errors import RenderError
    from tidecd.render import tool
    from tidecd.render.kustomize import build_argv

    server, seen = loopback_server
    app = tmp_path / "app"
    app.mkdir()
    (app / "kustomization.yaml").write_text(f"resources: ['{server}/cm.yaml']\n")
    assert tool.sandbox_prefix(), "this machine allows network namespaces (root, or user namespaces)"
    with pytest.raises(RenderError, match="kustomize build app failed"):
        tool.run(build_argv(app), what="kustomize build app", cwd=app, home=tmp_path)
    assert seen == []


def _no_user_namespaces(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without user namespaces: `unshare` is there but the kernel refuses (as the real one says)."""
    from tidecd.render import tool

    fake = tmp / "fake-bin"
    fake.mkdir()
    (fake / "unshare").write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n")
    (fake / "unshare").chmod(0o755)
    import os

    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    tool.forget_sandbox_status()


def test_without_user_namespaces_the_confinement_check_alone_keeps_renders_off_the_network(
        tmp_path: Path, loopback_server: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Where unshare is not allowed, renders run without a network namespace: that is said once (a warning
    naming the reason), the confinement check still refuses the remote resource before kustomize runs, and
    nothing reaches the loopback server. Real kustomize handed the same resource directly does reach it:
    the proxies do not cover loopback, so there the check is the only guard (the README says so)."""
    from structlog.testing import capture_logs

    from tidecd.base.errors import RenderError
    from tidecd.config.load import ApplicationSource
    from tidecd.render import render, tool
    from tidecd.render.kustomize import build_argv

    server, seen = loopback_server
    _no_user_namespaces(tmp_path, monkeypatch)
    try:
        status = tool.sandbox_status()
        assert not status.active and "user namespaces not allowed: unshare: unshare failed: Operation not " \
                                      "permitted" in status.reason, status
        root = tmp_path / "checkout"
        (root / "app").mkdir(parents=True)
        (root / "app" / "kustomization.yaml").write_text(f"resources: ['{server}/cm.yaml']\n")
        with capture_logs() as logs:
            for _ in range(2):
                with pytest.raises(RenderError, match=r"kustomization app/kustomization\.yaml: resources\[0\] "
                                                      r"'http://127\.0\.0\.1:\d+/cm\.yaml' is remote"):
                    render(root, ApplicationSource(repo_url="https://git.example/x", path="app"), app_name="a",
                           namespace="")
        assert tool.sandbox_prefix() == []
        assert seen == [], "the confinement check refused it before any tool ran"
        lines = [e for e in logs if e["event"].startswith("render sandbox unavailable")]
        assert len(lines) == 1 and lines[0]["log_level"] == "warning", logs
        assert "only the confinement check" in lines[0]["event"]
        # Beneath the check there is no namespace now: real kustomize, given the URL directly, fetches it.
        app = root / "app"
        with contextlib.suppress(RenderError):  # it may fail on what it fetched: it reached the server
            tool.run(build_argv(app), what="kustomize build app", cwd=app, home=tmp_path)
        assert seen, "without a namespace loopback is reachable: the confinement check is the only guard"
    finally:
        tool.forget_sandbox_status()
