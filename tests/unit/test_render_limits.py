"""The render's limits on its child processes (issue 29, "Bounds everywhere"): the total time of one render,
the memory and the output of every child, enforced by `render.tool.run_child`, each refusal a LimitExceeded
naming the variable, stored with the render's input so that the next trigger does not pay it again.

Plain processes (sleep, sh, python) stand for the tools here; tests/e2e/test_render_bounds.py runs helm and
jsonnet through the whole step against the control plane, the git server and the store.
"""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tidecd.base import child, limits
from tidecd.base.errors import ConfigError, LimitExceeded, RenderError
from tidecd.base.model import Manifest
from tidecd.clients.store import MemoryStore
from tidecd.config.load import ApplicationSource, DirectorySpec
from tidecd.render import cached_manifests, render, render_cached, tool

SHA = "0123456789abcdef0123456789abcdef01234567"
SLOW_JSONNET = "local loop(n, acc) = if n == 0 then acc else loop(n - 1, acc + 1) tailstrict;\n" \
               "{apiVersion: 'v1', kind: 'ConfigMap', metadata: {name: 'cm-%d'}, data: {n: '' + loop(%d, 0)}}\n"


def test_the_render_limits_are_read_from_the_environment() -> None:
    bound = limits.RenderLimits.from_env({"TIDECD_MAX_RENDER_SECONDS": "7", "TIDECD_MAX_RENDER_MEMORY_BYTES": "1048576",
                                    "TIDECD_MAX_RENDER_OUTPUT_BYTES": "4096"})
    assert (bound.render_seconds, bound.render_memory_bytes, bound.render_output_bytes) == (7, 1048576, 4096)
    defaults = limits.RenderLimits()
    assert (defaults.render_seconds, defaults.render_memory_bytes, defaults.render_output_bytes) == (
        120, 1024 * 2**20, 64 * 2**20)
    readme = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()  # the limits tables
    for field in limits.RenderLimits.__dataclass_fields__:
        assert limits.env_name(field) in readme, limits.env_name(field)
    with pytest.raises(ConfigError, match="TIDECD_MAX_RENDER_SECONDS='soon': expected a positive whole number"):
        limits.RenderLimits.from_env({"TIDECD_MAX_RENDER_SECONDS": "soon"})


def test_a_child_past_the_render_time_is_killed_with_its_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDECD_MAX_RENDER_SECONDS", "1")
    pidfile = tmp_path / "grandchild"
    script = f"sleep 30 & echo $! > {pidfile}; wait"  # a tool that starts another (kustomize starting helm)
    start = time.monotonic()
    with pytest.raises(LimitExceeded) as refused:
        tool.run(["sh", "-c", script], what="sh app", cwd=tmp_path, home=tmp_path)
    took = time.monotonic() - start
    assert str(refused.value) == "sh app: render time: over the limit of 1 s (TIDECD_MAX_RENDER_SECONDS)"
    assert took < 1.5, took
    grandchild = int(pidfile.read_text())
    time.sleep(0.1)
    assert not Path(f"/proc/{grandchild}").exists() or "Z" in _state(grandchild), "the grandchild was killed"


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]


def test_one_render_shares_one_budget_and_fetching_is_not_counted(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDECD_MAX_RENDER_SECONDS", "2")

    def step(seconds: float) -> None:
        with tool.rendering():
            tool.run(["sleep", str(seconds)], what=f"sleep {seconds}", cwd=tmp_path, home=tmp_path)

    with tool.one_render():
        step(0.8)
        time.sleep(1.5)  # a source being fetched between two sources' renders: not the render's time
        step(0.8)
        with pytest.raises(LimitExceeded, match=r"^sleep 0.8: render time: over the limit of 2 s"):
            step(0.8)  # 2.4 s of rendering in all
    step(0.8)  # another render: a budget of its own


def test_a_child_past_the_memory_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDECD_MAX_RENDER_MEMORY_BYTES", str(64 * 2**20))
    greedy = "x = bytearray(512 * 2**20); print(len(x))"
    with pytest.raises(LimitExceeded) as refused:
        tool.run([sys.executable, "-c", greedy], what="greedy tool", cwd=tmp_path, home=tmp_path)
    assert str(refused.value) == ("greedy tool: memory: over the limit of 67,108,864 bytes "
                                  "(TIDECD_MAX_RENDER_MEMORY_BYTES)")
    # under the limit the same child runs: the limit is the child's data, not its address space
    assert tool.run([sys.executable, "-c", "x = bytearray(16 * 2**20); print(len(x))"], what="modest",
                    cwd=tmp_path, home=tmp_path).strip() == str(16 * 2**20)


def test_a_child_writing_past_the_output_limit_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDECD_MAX_RENDER_OUTPUT_BYTES", str(2**20))
    with pytest.raises(LimitExceeded) as refused:
        tool.run(["sh", "-c", "head -c 50000000 /dev/zero"], what="loud tool", cwd=tmp_path,
                 home=tmp_path)
    assert str(refused.value) == "loud tool: output: over the limit of 1,048,576 bytes (TIDECD_MAX_RENDER_OUTPUT_BYTES)"
    big = tmp_path / "big"
    with pytest.raises(LimitExceeded, match="TIDECD_MAX_RENDER_OUTPUT_BYTES"):  # any file, not only stdout
        tool.run(["sh", "-c", f"head -c 5000000 /dev/zero > {big}"], what="writer", cwd=tmp_path, home=tmp_path)
    assert big.stat().st_size <= 2**20 + 1
    assert tool.run(["sh", "-c", "head -c 1000 /dev/zero | wc -c"], what="quiet", cwd=tmp_path,
                    home=tmp_path).strip() == "1000"


def test_a_tool_that_cannot_start_is_a_render_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDECD_RENDER_SANDBOX", "off")
    with pytest.raises(RenderError, match=r"^nothing: cannot run /no/such/tool: No such file or directory$"):
        tool.run(["/no/such/tool"], what="nothing", cwd=tmp_path, home=tmp_path)


def _slow_repo(root: Path, files: int, iterations: int) -> Path:
    app = root / "app"
    app.mkdir(parents=True)
    for number in range(files):
        (app / f"slow-{number}.jsonnet").write_text(SLOW_JSONNET % (number, iterations))
    return root


def test_slow_jsonnet_files_are_refused_by_the_total_render_time(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Each file alone is well within any per-file bound; together they pass the render's."""
    repo = _slow_repo(tmp_path, 6, 150_000)
    source = ApplicationSource(repo_url="https://git.example.com/r.git", path="app", directory=DirectorySpec())
    one = time.monotonic()
    render(repo, source.__class__(**{**source.__dict__, "directory": DirectorySpec(include="slow-0.jsonnet")}),
           app_name="a", namespace="ns")
    per_file = time.monotonic() - one
    limit = max(2, int(per_file * 2.5))  # about half the files fit
    monkeypatch.setenv("TIDECD_MAX_RENDER_SECONDS", str(limit))
    start = time.monotonic()
    with pytest.raises(LimitExceeded, match=rf"^app/slow-\d.jsonnet( \(jsonnet\))?: render time: over the limit "
                                            rf"of {limit} s \(TIDECD_MAX_RENDER_SECONDS\)$"):
        render(repo, source, app_name="a", namespace="ns")
    took = time.monotonic() - start
    print(f"\none file {per_file:.2f}s; six refused after {took:.2f}s at a limit of {limit}s")
    assert took < limit + 1.0, took


def test_a_refused_render_is_stored_and_not_rendered_again_until_the_input_or_a_limit_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDECD_MAX_RENDER_SECONDS", "1")
    store = MemoryStore()
    source = ApplicationSource(repo_url="https://git.example.com/r.git", path="app")
    calls: list[float] = []

    def slow() -> list[Manifest]:
        calls.append(time.monotonic())
        with tool.rendering():
            tool.run(["sleep", "5"], what="helm template app", cwd=tmp_path, home=tmp_path)
        return []

    for _ in range(3):
        with pytest.raises(LimitExceeded, match=r"^helm template app: render time: .*TIDECD_MAX_RENDER_SECONDS"):
            render_cached(store, "demo", SHA, source, slow, namespace="team")
    assert len(calls) == 1, "the refusal is stored: the same input is not rendered again"
    with pytest.raises(LimitExceeded):  # another revision is another input
        render_cached(store, "demo", SHA.replace("0", "f"), source, slow, namespace="team")
    assert len(calls) == 2
    monkeypatch.setenv("TIDECD_MAX_RENDER_SECONDS", "2")  # raising the limit renders again
    with pytest.raises(LimitExceeded, match="over the limit of 2 s"):
        render_cached(store, "demo", SHA, source, slow, namespace="team")
    assert len(calls) == 3


def test_no_render_child_is_started_any_other_way() -> None:
    """`run_child` is the one way render/ starts a process: the limits hold for every tool."""
    render_dir = Path(tool.__file__).parent
    for path in sorted(render_dir.glob("*.py")):
        text = path.read_text()
        for call in ("subprocess.run(", "subprocess.Popen(", "os.system(", "os.exec", "os.spawn"):
            count = text.count(call)
            # the one-off sandbox probe (`unshare ... true`); run_child starts its child with base.child.run
            allowed = {"subprocess.run(": 1}.get(call, 0)
            allowed = allowed if path.name == "tool.py" else 0
            assert count == allowed, (path.name, call, count)
    assert tool._LIMITED is child.LIMITED and "child.run(" in Path(tool.__file__).read_text()
    assert "limited(argv" in Path(child.__file__).read_text()
    assert "os.execvp" in child.LIMITED and textwrap.dedent(child.LIMITED) == child.LIMITED
    assert os.path.isabs(sys.executable)


def test_a_refusal_of_a_subclass_is_raised_again_as_what_it_is(tmp_path: Path) -> None:
    from tidecd.source.helmrepo import RefusedAnswer

    store = MemoryStore()
    source = ApplicationSource(repo_url="https://charts.example.com", chart="web", target_revision="1.0.0")

    def refused() -> list[Manifest]:
        raise RefusedAnswer("chart web 1.0.0: size: over the limit of 1 bytes (TIDECD_MAX_ARCHIVE_BYTES)", "")

    for _ in range(2):
        with pytest.raises(LimitExceeded, match="TIDECD_MAX_ARCHIVE_BYTES"):
            render_cached(store, "demo", SHA, source, refused, namespace="team")
    assert cached_manifests(store, "demo", SHA, source, namespace="team") is None, "no manifests: the step reports"
