"""The example apps served from a local git server, with their config pointed at it.

examples/config names a placeholder host (git.tidecd.local), so read as it is every app is Unknown: no
such repository answers. `make demo` and the README's "Using it locally" both deploy the examples from a
real git server on this machine instead: `publish` pushes examples/apps into a new repository and writes
the config with its URL. Run as a program, it starts that server in the background and prints the
`export TIDECD_CONFIG=...` to eval (as `tidecd dev cluster up` prints KUBECONFIG's):

    eval "$(python -m tidecd_dev.examples)"      # stop it: python -m tidecd_dev.examples --stop
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tidecd_dev.gitserver import GitServer

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDER_HOST = "http://git.tidecd.local"
DEFAULT_DIR = Path(".tidecd-examples")


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def publish(server: GitServer, workdir: Path) -> tuple[str, Path, Path]:
    """Push examples/apps into a new repository `examples` on `server` (a clone of it kept in
    `workdir/checkout`, to push changes from) and write examples/config, pointed at it, to `workdir/config`.
    Returns (the repository's URL, the checkout, the config directory)."""
    url = server.create_repo("examples")
    checkout = workdir / "checkout"
    git("clone", "-q", url, str(checkout), cwd=workdir)
    git("config", "user.email", "demo@tidecd.local", cwd=checkout)
    git("config", "user.name", "tidecd demo", cwd=checkout)
    shutil.copytree(ROOT / "examples" / "apps", checkout / "apps")
    git("add", "-A", cwd=checkout)
    git("commit", "-qm", "examples", cwd=checkout)
    git("push", "-q", "origin", "HEAD:main", cwd=checkout)
    config = workdir / "config"
    config.mkdir()
    for path in sorted((ROOT / "examples" / "config").glob("*.yaml")):
        (config / path.name).write_text(path.read_text().replace(PLACEHOLDER_HOST, server.url))
    return url, checkout, config


def _serve(workdir: Path) -> int:
    """The background process: the server, the examples published, then serve until SIGTERM."""
    server = GitServer(workdir / "git").start()
    url = publish(server, workdir)[0]
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    (workdir / "server.pid").write_text(str(os.getpid()))
    (workdir / "ready").write_text(url)
    with contextlib.suppress(KeyboardInterrupt):
        stopped.wait()
    server.stop()
    return 0


def _stop(workdir: Path) -> bool:
    """Stop the server a previous run started here (by the pid it recorded); whether one ran."""
    pidfile = workdir / "server.pid"
    if not pidfile.exists():
        return False
    with contextlib.suppress(ProcessLookupError, ValueError):
        os.kill(int(pidfile.read_text()), signal.SIGTERM)
    pidfile.unlink()
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidecd_dev.examples", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="where the repository and config go")
    parser.add_argument("--stop", action="store_true", help="stop the server started in --dir")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the background process
    args = parser.parse_args(argv)
    workdir = args.dir.resolve()
    if args.serve:
        return _serve(workdir)
    if args.stop:
        print("stopped" if _stop(workdir) else f"no examples server recorded in {workdir}", file=sys.stderr)
        return 0
    _stop(workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    with open(workdir / "server.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tidecd_dev.examples", "--dir", str(workdir), "--serve"],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    deadline = time.monotonic() + 30
    while not (workdir / "ready").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            tail = (workdir / "server.log").read_text(errors="replace")[-2000:]
            print(f"error: the examples' git server did not start (log {workdir / 'server.log'}):\n{tail}",
                  file=sys.stderr)
            return 1
        time.sleep(0.1)
    print(f"# examples/apps served at {(workdir / 'ready').read_text()} (pid {proc.pid}); "
          "stop it with `python -m tidecd_dev.examples --stop`", file=sys.stderr)
    print(f"export TIDECD_CONFIG={workdir / 'config'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
