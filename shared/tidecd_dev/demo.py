"""`make demo`: tidecd end to end on this machine, with real parts only.

Starts a control plane (with kwok) whose audit webhook backend posts to the webhook function, a git server
holding `examples/apps`, and the webhook, poll and api functions under functions-framework with the local
store; the first poll tick deploys the three example apps, and the demo waits until each is Synced and
Healthy, then prints the dashboard's address and a login link carrying the token. Then a commit is pushed, a
signed GitHub push webhook is sent, and the demo shows the app going OutOfSync → Synced and Healthy, and
what its history recorded for the pushed revision. Last, a second person
(alice@example.com) runs `kubectl scale` on the self-healed guestbook: the audit event undoes it within
seconds, and the app names her. It keeps running until Ctrl-C (or exits at once with `--exit`).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tidecd_dev import examples
from tidecd_dev.devcluster import USER, DevCluster, free_port
from tidecd_dev.examples import git
from tidecd_dev.gitserver import GitServer
from tidecd_dev.processes import stop_sessions

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = ("webhook", "poll", "api")


def say(text: str) -> None:
    print(f"\033[1m==> {text}\033[0m", flush=True)


def http(method: str, url: str, body: bytes = b"", headers: dict[str, str] | None = None,
         timeout: float = 600) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=body or None, method=method, headers=headers or {})  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - loopback only
            return int(resp.status), json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read() or b"{}")


class Demo:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ports: dict[str, int] = {"webhook": free_port()}  # the audit backend's URL names it first
        self.cluster = DevCluster(workdir=workdir / "cluster", kwok=True,
                                  audit_webhook=f"http://127.0.0.1:{self.ports['webhook']}/audit")
        self.git_server = GitServer(workdir / "git")
        self.secret = secrets.token_hex(16)
        self.token = secrets.token_hex(16)

    def start(self) -> None:
        say("starting a local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok)")
        t0 = time.monotonic()
        self.cluster.start()
        print(f"    up in {time.monotonic() - t0:.1f}s; export KUBECONFIG={self.cluster.kubeconfig}")
        nodes = subprocess.run(["kubectl", "--kubeconfig", str(self.cluster.kubeconfig), "get", "nodes"],
                               capture_output=True, text=True, check=False).stdout
        print("    " + nodes.strip().replace("\n", "\n    "))
        say("starting a git server and pushing examples/apps into it")
        self.git_server.start()
        self.repo_url, self.checkout, self.config_dir = examples.publish(self.git_server, self.workdir)
        print(f"    {self.repo_url}")
        say("starting the functions under functions-framework: " + ", ".join(FUNCTIONS))
        for target in FUNCTIONS:
            self._function(target)

    def env(self) -> dict[str, str]:
        return {**os.environ, "TIDECD_CONFIG": str(self.config_dir), "TIDECD_STORE": str(self.workdir / "store"),
                "TIDECD_WEBHOOK_SECRET": self.secret, "TIDECD_API_TOKEN": self.token,
                "TIDECD_AUDIT_TOKEN": self.cluster.audit_token,
                "KUBECONFIG": str(self.cluster.kubeconfig), "PYTHONPATH": str(ROOT / "shared")}

    def _function(self, target: str) -> None:
        port = self.ports.get(target) or free_port()
        log = open(self.workdir / f"{target}.log", "wb")  # noqa: SIM115 - handed to the child
        proc = subprocess.Popen(
            [sys.executable, "-m", "functions_framework", "--target", target, "--source",
             str(ROOT / "functions" / "main.py"), "--host", "127.0.0.1", "--port", str(port)],
            env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        self.ports[target] = port
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # a TCP connect: any request would run the function itself
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        print(f"    {target:8} http://127.0.0.1:{port}")

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        status, answer = http(method, f"http://127.0.0.1:{self.ports['api']}/api/v1{path}",
                              json.dumps(body or {}).encode(), {"Authorization": f"Bearer {self.token}"})
        if status >= 400:
            raise RuntimeError(f"api {method} {path}: {status} {answer}")
        return answer

    def show_apps(self) -> None:
        """List the apps as recorded (no refresh)."""
        for app in self.api("GET", "/apps")["apps"]:
            print(f"    {app['name']:22} {app['sync']:10} {app['health']:12} {app['revision'][:12]}")

    def run(self) -> None:
        say("first poll tick (Cloud Scheduler calls this every three minutes): deploys every app")
        t0 = time.monotonic()
        status, summary = http("POST", f"http://127.0.0.1:{self.ports['poll']}/")
        print(f"    poll answered {status}: {summary.get('apps_refreshed')}")
        self.wait_all_deployed(t0)
        self.show_apps()
        self.print_dashboard()
        say("a developer scales the guestbook frontend to 3 replicas and pushes")
        frontend = self.checkout / "apps" / "guestbook" / "frontend.yaml"
        frontend.write_text(frontend.read_text().replace("replicas: 1", "replicas: 3", 1))
        before = git("rev-parse", "HEAD", cwd=self.checkout)
        git("commit", "-qam", "guestbook: 3 frontend replicas", cwd=self.checkout)
        git("push", "-q", "origin", "HEAD:main", cwd=self.checkout)
        after = git("rev-parse", "HEAD", cwd=self.checkout)
        pushed_at = time.strftime("%H:%M:%S", time.gmtime())
        print(f"    pushed {after[:12]} \"guestbook: 3 frontend replicas\" (apps/guestbook/frontend.yaml: "
              f"replicas 1 -> 3) at {pushed_at} UTC; guestbook is deployed at {before[:12]}")
        state = self.api("GET", "/apps/guestbook?refresh=true")
        print(f"    before the webhook: guestbook is {state['syncStatus']} "
              f"({', '.join(r['name'] + ': ' + ', '.join(r['changed']) for r in state['resources'] if r['changed'])})")
        say("GitHub sends a signed push webhook")
        payload = json.dumps({
            "ref": "refs/heads/main", "before": before, "after": after, "deleted": False,
            "repository": {"clone_url": self.repo_url, "html_url": self.repo_url, "default_branch": "main",
                           "full_name": "demo/examples"},
            "commits": [{"id": after, "added": [], "removed": [], "modified": ["apps/guestbook/frontend.yaml"]}],
        }).encode()
        signature = "sha256=" + hmac.new(self.secret.encode(), payload, hashlib.sha256).hexdigest()
        t0 = time.monotonic()
        status, answer = http("POST", f"http://127.0.0.1:{self.ports['webhook']}/", payload, {
            "Content-Type": "application/json", "X-GitHub-Event": "push", "X-Hub-Signature-256": signature,
            "X-GitHub-Delivery": secrets.token_hex(8)})
        print(f"    webhook answered {status}: {answer}")
        self._wait_synced("guestbook", after, t0)
        self.tell_deployment("guestbook", after)
        self.show_apps()
        self.drift()

    def wait_all_deployed(self, t0: float, timeout: float = 180.0) -> None:
        """Wait for the first deployment of every app, so the push below starts from a finished one.

        The poll's sync does not wait for health, so refresh every second (as `argocd app wait` polls) and
        print each app's state as it changes, read from what the api recorded."""
        last: dict[str, str] = {}
        while True:
            names = [app["name"] for app in self.api("GET", "/apps")["apps"]]
            states = {name: self.api("GET", f"/apps/{name}?refresh=true") for name in names}
            for name, state in states.items():
                now = f"{state['syncStatus']}/{state['health']}" + (
                    f" at {state['revision'][:12]}" if state["revision"] else " (not compared yet)")
                if last.get(name) != now:
                    print(f"    {time.monotonic() - t0:5.1f}s  {name}: {now}")
                    last[name] = now
            if names and all(s["syncStatus"] == "Synced" and s["health"] == "Healthy" for s in states.values()):
                say(f"first deployment done: every app is Synced and Healthy, {time.monotonic() - t0:.1f}s "
                    "after the poll tick")
                return
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"the first deployment did not finish within {timeout:.0f}s: "
                                   + ", ".join(f"{n} {s}" for n, s in last.items()))
            time.sleep(1.0)

    def tell_deployment(self, name: str, revision: str) -> None:
        """What the app's history recorded for the pushed revision: when, by what, and with what result."""
        history = self.api("GET", f"/apps/{name}/history")["history"]
        entry = next((h for h in reversed(history) if h["revision"] == revision), None)
        if entry is None:
            raise RuntimeError(f"{name}: no history entry records revision {revision[:12]}")
        by = f" by {entry['initiatedBy']}" if entry.get("initiatedBy") else ""
        print(f"    recorded: history #{entry['id']} {entry['result']} at revision {entry['revision'][:12]}, "
              f"deployed {entry['deployedAt']}{by}" + (f" ({entry['trigger']})" if entry.get("trigger") else ""))

    def print_dashboard(self) -> None:
        """The dashboard's address and how to log in: the demo's api token, random for this run and
        valid only on this loopback address until Ctrl-C, in a link whose fragment fills the login form
        (`ui/static/login.js`; a fragment never reaches the server's logs)."""
        say(f"the dashboard: http://127.0.0.1:{self.ports['api']}/ui/")
        print(f"    log in: http://127.0.0.1:{self.ports['api']}/ui/login#token={self.token} (then press Log in; "
              "or paste this demo's api token into the form)")

    def drift(self, timeout: float = 60.0) -> None:
        """alice scales the self-healed frontend by hand; the API server's audit event brings it back."""
        say(f"{USER} scales the guestbook frontend to 5 by hand (kubectl scale), outside git")
        kubectl = ["kubectl", "--kubeconfig", str(self.cluster.user_kubeconfig), "-n", "guestbook"]
        subprocess.run([*kubectl, "scale", "deployment/frontend", "--replicas=5"], check=True, capture_output=True)
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            replicas = subprocess.run([*kubectl, "get", "deployment/frontend", "-o", "jsonpath={.spec.replicas}"],
                                      capture_output=True, text=True, check=False).stdout.strip()
            state = self.api("GET", "/apps/guestbook")
            said = [c["message"] for c in state.get("conditions", []) if c.get("type") == "DriftDetected"]
            if replicas == "3" and said:
                say(f"restored to 3 replicas {time.monotonic() - t0:.1f}s after kubectl scale, by the audit event")
                print(f"    DriftDetected: {said[0]}")
                print(f"    history: {state['history'][-1].get('cause', '')}")
                return
            time.sleep(0.3)
        raise RuntimeError(f"the frontend was not restored within {timeout:.0f}s of the kubectl scale")

    def _wait_synced(self, name: str, revision: str, t0: float, timeout: float = 300) -> None:
        last, looked = "", 0.0
        while time.monotonic() - t0 < timeout:
            # Synced at the revision, health still settling: the sync does not wait for it, so refresh
            # every two seconds to observe it (the poll's drift sweep would, every three minutes).
            settling = last.startswith("Synced/") and last.endswith(revision[:12])
            again = settling and time.monotonic() - looked > 2.0
            looked = time.monotonic() if again else looked
            state = self.api("GET", f"/apps/{name}" + ("?refresh=true" if again else ""))
            now = f"{state['syncStatus']}/{state['health']} at {state['revision'][:12]}"
            if now != last:
                print(f"    {time.monotonic() - t0:5.1f}s  {name}: {now}")
                last = now
            if state["revision"] == revision and state["syncStatus"] == "Synced" and state["health"] == "Healthy":
                say(f"{name} is Synced and Healthy at {revision[:12]}, "
                    f"{time.monotonic() - t0:.1f}s after the webhook")
                return
            time.sleep(0.5)
        raise RuntimeError(f"{name} did not become Synced and Healthy within {timeout}s")

    def explain(self) -> None:
        env = (f"export KUBECONFIG={self.cluster.kubeconfig} TIDECD_CONFIG={self.config_dir} "
               f"TIDECD_STORE={self.workdir / 'store'}")
        print(f"""
Look further: the dashboard is http://127.0.0.1:{self.ports['api']}/ui/ (log in with the token below), or
in another terminal:
  {env}
  .venv/bin/tidecd app list
  .venv/bin/tidecd app get guestbook
  .venv/bin/tidecd app history guestbook
  kubectl get deploy -A
  KUBECONFIG={self.cluster.user_kubeconfig} kubectl -n guestbook scale deployment/frontend --replicas=5
      (as {USER}: undone within seconds, and named in `tidecd app get guestbook`)
  curl -H 'Authorization: Bearer {self.token}' http://127.0.0.1:{self.ports['api']}/api/v1/apps
  or: .venv/bin/tidecd app list --server http://127.0.0.1:{self.ports['api']} --token {self.token}
Logs of each function are in {self.workdir}.
""")

    def stop(self) -> None:
        stop_sessions(self.procs)
        self.git_server.stop()
        self.cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidecd_dev.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--exit", action="store_true", help="stop everything once the demo has run")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="tidecd-demo-"))
    demo = Demo(workdir)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        demo.start()
        demo.run()
        demo.explain()
        if not args.exit and not os.environ.get("CI"):
            say("running; press Ctrl-C to stop everything")
            while True:
                time.sleep(3600)
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        say("stopping every process the demo started")
        demo.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
