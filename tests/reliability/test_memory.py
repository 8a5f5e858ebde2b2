"""Memory bounds on hostile input, shown by the peak RSS of the process doing the work.

Each case runs in a child process (a fresh interpreter, or the real functions-framework server) and
prints its peak resident set size, so the bound is visible in the test output (`pytest -s`, or the
assertion message when it fails):
- the YAML alias bomb (342 bytes, 9**9 strings expanded) through the real render path: under 150 MiB;
- a repository tree 1,100 directories deep through snapshot extraction: under 150 MiB, no RecursionError;
- a 400 MiB chunked, unsigned POST to the webhook function: the worker stays under 150 MiB (it stops
  reading at TIDECD_MAX_WEBHOOK_BYTES, 25 MiB);
- a repository holding a 64 MiB blob (150 MiB under `make fuzz`), fetched from the real git server,
  snapshotted and extracted: peak anonymous memory under 1.1× the blob + 50 MiB. The pack is fetched
  plain (not thin) straight to a file and indexed from it, which holds the one object decompressed
  once (dulwich hashes it); the tar streams the blob out of the pack file, inflating as it writes.
Before the fixes these were 2.6 GB + MemoryError, a RecursionError, 566 MB and ~3.3× the blob; for the
blob, ~2.2× (326 MiB anonymous for 150 MiB) after the pack and the archive went to disk, before the
plain pack and the streamed tar.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import requests

from tests.support.functions import ROOT, Function

BOUND_MIB = 150


def run_child(code: str, tmp: Path) -> tuple[str, float]:
    """Run `code` in a fresh interpreter; it prints a result line, then we add its peak RSS (MiB)."""
    script = tmp / "child.py"
    # VmHWM, not getrusage's ru_maxrss: Linux carries the forking parent's peak (pytest's) over an exec
    script.write_text(textwrap.dedent(code) + textwrap.dedent("""
        from pathlib import Path as _Path
        _hwm = [l for l in _Path("/proc/self/status").read_text().splitlines() if l.startswith("VmHWM:")]
        print("PEAK_RSS_KIB", _hwm[0].split()[1])
        """))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "shared") + os.pathsep + str(ROOT)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    peak = int(lines[-1].split()[1]) / 1024
    return "\n".join(lines[:-1]), peak


def test_alias_bomb_render_stays_small(tmp_path: Path) -> None:
    result, peak = run_child("""
        from pathlib import Path
        from tests.unit.test_limits import alias_bomb
        from tidecd.config.load import ApplicationSource
        from tidecd.base.errors import LimitExceeded
        from tidecd.render import render
        root = Path("checkout")
        (root / "app").mkdir(parents=True)
        (root / "app" / "bomb.yaml").write_text("apiVersion: v1\\nkind: ConfigMap\\nmetadata: {name: x}\\n"
                                                 + "data:\\n" + "".join("  " + l + "\\n" for l in
                                                                        alias_bomb().splitlines()))
        try:
            render(root, ApplicationSource(repo_url="https://g.example/x", path="app"), app_name="a", namespace="")
            print("RENDERED")
        except LimitExceeded as exc:
            print("REFUSED", exc)
        """, tmp_path)
    print(f"\nalias bomb: peak RSS {peak:.0f} MiB (bound {BOUND_MIB} MiB): {result}")
    assert "\nREFUSED app/bomb.yaml document 1: YAML aliases expand" in "\n" + result, result
    assert peak < BOUND_MIB, f"peak RSS {peak:.0f} MiB"


def test_deep_tree_extraction_stays_small(tmp_path: Path) -> None:
    result, peak = run_child("""
        import io, tarfile
        from pathlib import Path
        from tidecd.base.errors import LimitExceeded
        from tidecd.source import extract
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for depth in range(1, 1101):
                info = tarfile.TarInfo("/".join(["d"] * depth))
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            data = b"apiVersion: v1\\nkind: ConfigMap\\nmetadata: {name: deep}\\n"
            info = tarfile.TarInfo("/".join(["d"] * 1100) + "/cm.yaml")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        try:
            extract(buffer.getvalue(), Path("out"))
            print("EXTRACTED")
        except LimitExceeded as exc:
            print("REFUSED", str(exc)[-80:])
        print("LEFT", Path("out").exists())
        """, tmp_path)
    print(f"\ndeep tree: peak RSS {peak:.0f} MiB (bound {BOUND_MIB} MiB): {result}")
    assert "REFUSED" in result and "over the limit of 64 (TIDECD_MAX_PATH_DEPTH)" in result, result
    assert "LEFT False" in result
    assert peak < BOUND_MIB, f"peak RSS {peak:.0f} MiB"


def _peak_rss_mib(pid: int) -> float:
    """VmHWM (peak RSS) of the process and its children, the largest one, in MiB."""
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    peaks = []
    for proc in procs:
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peaks.append(int(line.split()[1]) / 1024)
    return max(peaks)


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[Function]:
    (tmp_path / "config").mkdir()
    env = {**os.environ, "TIDECD_CONFIG": str(tmp_path / "config"), "TIDECD_STORE": str(tmp_path / "store"),
           "TIDECD_WEBHOOK_SECRET": "s3cret", "PYTHONPATH": str(ROOT / "shared") + os.pathsep + str(ROOT)}
    function = Function("webhook", env, tmp_path)
    try:
        yield function
    finally:
        function.stop()


def test_400_mib_chunked_webhook_body_is_cut_at_the_limit(webhook: Function) -> None:
    # warm up: the first request imports the library
    first = requests.post(webhook.url, data=b"{}", timeout=60, headers={"X-GitHub-Event": "ping"})
    assert first.status_code == 401
    before = _peak_rss_mib(webhook.proc.pid)
    chunk = b"x" * (1024 * 1024)
    sent = 0

    def body() -> Iterator[bytes]:
        nonlocal sent
        for _ in range(400):
            sent += len(chunk)
            yield chunk

    try:  # a generator body is sent with Transfer-Encoding: chunked
        answer = requests.post(webhook.url, data=body(), timeout=120, headers={
            "X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + "0" * 64, "Content-Type": "application/json"})
        status: int | str = answer.status_code
        assert answer.status_code == 413, answer.text
        assert "TIDECD_MAX_WEBHOOK_BYTES" in answer.json()["message"]
    except requests.ConnectionError:
        status = "connection closed by the server"  # it answered 413 and stopped reading mid-body
    peak = _peak_rss_mib(webhook.proc.pid)
    print(f"\nwebhook, 400 MiB chunked body offered, {sent // 2**20} MiB taken before the answer ({status}); "
          f"worker peak RSS {before:.0f} MiB "
          f"before, {peak:.0f} MiB after (bound {BOUND_MIB} MiB)")
    assert peak < BOUND_MIB, f"peak RSS {peak:.0f} MiB"
    # reading stops at the 25 MiB limit: werkzeug holds that much twice (buffer, then bytes), never more
    assert peak - before < 80, f"the body grew the worker by {peak - before:.0f} MiB"


BIG_BLOB_MIB = int(os.environ.get("TIDECD_TEST_BIG_BLOB_MIB", "64"))  # `make fuzz` runs the 150


def test_a_big_blob_is_held_about_once(git_repo: object, tmp_path: Path) -> None:
    from tests.support.gitserver import GitRepo

    assert isinstance(git_repo, GitRepo)
    mib = BIG_BLOB_MIB
    blob = git_repo.workdir / "assets" / "big.bin"
    blob.parent.mkdir()
    with blob.open("wb") as out:  # incompressible, so neither git nor gzip can shrink it
        for _ in range(mib):
            out.write(os.urandom(1024 * 1024))
    git_repo.write("app/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: small}\n")
    sha = git_repo.commit("a big blob")
    git_repo.push()
    blob.unlink()
    result, peak = run_child(f"""
        import threading, time
        from pathlib import Path
        anon = [0]
        def sample() -> None:  # anonymous memory only: the mmapped pack file is page cache, not heap
            while True:
                for line in Path("/proc/self/status").read_text().splitlines():
                    if line.startswith("RssAnon:"):
                        anon[0] = max(anon[0], int(line.split()[1]))
                time.sleep(0.002)
        threading.Thread(target=sample, daemon=True).start()
        from tidecd.source import Snapshots
        from tidecd.clients.store import LocalStore
        import dulwich.client, dulwich.repo, urllib3  # what the fetch imports: part of the baseline
        time.sleep(0.05)
        base = anon[0]
        snapshots = Snapshots(LocalStore(Path("store")))
        snapshots.checkout({git_repo.url!r}, {sha!r}, Path("out"))
        print("SIZE", Path("out/assets/big.bin").stat().st_size // 2**20, "MiB")
        print("ANON", anon[0] // 1024, base // 1024)
        """, tmp_path)
    size, anon_line = result.splitlines()
    anon, base = int(anon_line.split()[1]), int(anon_line.split()[2])
    bound = 1.1 * mib + 50  # + the interpreter and libraries
    print(f"\n{mib} MiB blob: fetch + snapshot + store + extract: peak anonymous RSS {anon} MiB (bound "
          f"{bound:.0f} MiB: 1.1x the blob + 50), {anon - base} MiB over the {base} MiB before the fetch = "
          f"{(anon - base) / mib:.2f}x the blob; VmHWM {peak:.0f} MiB (includes "
          f"the pages of the mmapped pack file dulwich indexes, page cache the kernel can drop)")
    assert size == f"SIZE {mib} MiB"
    # indexing the pack hashes the one object decompressed (1x); the tar streams it; nothing else is whole
    assert anon < bound, f"peak anonymous RSS {anon} MiB"
