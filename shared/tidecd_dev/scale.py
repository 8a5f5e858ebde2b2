"""The scale scenario (issue 17): many apps in many repos, reconciled from cold through the real functions.

The apps have flux-benchmark's shape (a Deployment scaled to 0, a ServiceAccount, a Service and an Ingress
each), spread over `repos` git repositories (`apps/<app>/app.yaml`, no namespace in the files: each tool
sets its own). A `Fleet` is the deployed shape of tidecd on one machine: the poll target and N reconcile
instances as functions-framework processes, a Pub/Sub topic on the emulator whose push subscription goes
to a `Frontend` (concurrency 1 per instance, every invocation recorded).

Used by `make bench-scale` (bench/scale.py, 1,000 apps in 50 repos) and by tests/e2e/test_scale.py (20
apps in 4 repos, the same code path).
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tidecd_dev.devcluster import DevCluster, free_port
from tidecd_dev.frontend import Frontend, PushBridge
from tidecd_dev.gitserver import GitServer
from tidecd_dev.processes import stop_session

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "tidecd-scale"
# Messages in delivery at once, per instance: a message held longer than the emulator's stream ack deadline
# (queued behind others for a free instance) is redelivered; with 64 in flight for 4 instances, each of the
# 1,000 apps ran 2.3 times. Two per instance keeps each instance fed and no message waits long.
BRIDGE_PER_INSTANCE = 2
Obj = dict[str, Any]

_GIT_ENV = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
# Kinds of the apps' objects: (group, plural) as the API server's metrics name them.
APP_RESOURCES = {("apps", "deployments"), ("", "serviceaccounts"), ("", "services"),
                 ("networking.k8s.io", "ingresses")}
WRITE_VERBS = {"POST", "PUT", "PATCH", "APPLY", "DELETE", "CREATE", "UPDATE", "DELETECOLLECTION"}


@dataclass(frozen=True)
class Scenario:
    apps: int = 1000
    repos: int = 50
    name: str = "scale"  # the repos' name prefix

    def repo_names(self) -> list[str]:
        return [f"{self.name}-r{j:02d}" for j in range(self.repos)]

    def app_names(self) -> list[str]:
        return [f"app-{i:04d}" for i in range(self.apps)]

    def repo_of(self, i: int) -> int:
        return i % self.repos

    def placement(self) -> list[tuple[str, str]]:
        """(app, repo) for every app, in order."""
        repos = self.repo_names()
        return [(app, repos[self.repo_of(i)]) for i, app in enumerate(self.app_names())]

    def namespace(self, prefix: str, repo: str) -> str:
        """One namespace per tool and repo: `tidecd-scale-r07`."""
        return f"{prefix}-{repo}"


def objects(name: str) -> list[Obj]:
    """flux-benchmark's app: a Deployment scaled to 0, a ServiceAccount, a Service and an Ingress."""
    labels = {"app": name}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
         # headless: the dev control plane's service IP range (/24) could not hold 1,000 cluster IPs
         "spec": {"clusterIP": "None", "selector": labels, "ports": [{"name": "http", "port": 80,
                                                                      "targetPort": 8080}]}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
         "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels},
                               "spec": {"serviceAccountName": name,
                                        "containers": [{"name": "web", "image": "nginx:1.27",
                                                        "ports": [{"containerPort": 8080}]}]}}}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": name},
         "spec": {"rules": [{"host": f"{name}.example.test", "http": {"paths": [{
             "path": "/", "pathType": "Prefix",
             "backend": {"service": {"name": name, "port": {"number": 80}}}}]}}]}},
    ]


def _git(*args: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, env=_GIT_ENV, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args[:2])} failed: {proc.stderr.strip()[-800:]}")
    return proc.stdout.strip()


def create_repos(git: GitServer, workdir: Path, scenario: Scenario) -> dict[str, str]:
    """Each repo with its apps' files, pushed over the file system (the server's counters stay clean);
    {repo: clone URL}."""
    by_repo: dict[str, list[str]] = {}
    for app, repo in scenario.placement():
        by_repo.setdefault(repo, []).append(app)
    urls = {}
    for repo, apps in by_repo.items():
        urls[repo] = git.create_repo(repo)
        work = workdir / repo
        _git("init", "--quiet", "--initial-branch=main", str(work))
        for app in apps:
            target = work / "apps" / app / "app.yaml"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(yaml.safe_dump_all(objects(app), sort_keys=False))
        _git("add", "--all", cwd=work)
        _git("-c", "user.name=tidecd bench", "-c", "user.email=bench@tidecd.invalid", "commit", "--quiet",
             "-m", f"{len(apps)} apps", cwd=work)
        _git("push", "--quiet", "--force", str(git.root / f"{repo}.git"), "main", cwd=work)
    return urls


def write_applications(config_dir: Path, scenario: Scenario, urls: dict[str, str], prefix: str) -> None:
    """One Argo CD Application per app, automated, into `<prefix>-<repo>`."""
    config_dir.mkdir(parents=True, exist_ok=True)
    for app, repo in scenario.placement():
        doc = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": app},
               "spec": {"project": "default",
                        "source": {"repoURL": urls[repo], "targetRevision": "main", "path": f"apps/{app}"},
                        "destination": {"name": "in-cluster", "namespace": scenario.namespace(prefix, repo)},
                        "syncPolicy": {"automated": {"prune": True}}}}
        (config_dir / f"{app}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def create_namespaces(dev: DevCluster, names: Iterable[str]) -> None:
    for name in names:
        status, _ = _kube(dev, "POST", "/api/v1/namespaces",
                          {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        if status not in (201, 409):
            raise RuntimeError(f"creating namespace {name}: HTTP {status}")


def _kube(dev: DevCluster, method: str, path: str, body: Any = None, *, timeout: float = 30) -> tuple[int, bytes]:
    import json
    import urllib.error

    pki = dev.workdir / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(dev.server + path, data=data, method=method,  # noqa: S310 (loopback)
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, context=ctx, timeout=timeout) as resp:  # noqa: S310
            return int(resp.status), bytes(resp.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


@dataclass(frozen=True)
class Installed:
    """A scenario set up for tidecd: repos pushed, Applications written, namespaces created."""

    scenario: Scenario
    config: Path
    store: Path
    urls: dict[str, str]
    env: dict[str, str]  # what the functions get (TIDECD_*, KUBECONFIG), on top of this process's

    @property
    def apps(self) -> list[str]:
        return self.scenario.app_names()


def install(git: GitServer, dev: DevCluster, workdir: Path, scenario: Scenario, prefix: str = "tidecd") -> Installed:
    urls = create_repos(git, workdir / "repos", scenario)
    config, store = workdir / "config", workdir / "store"
    write_applications(config, scenario, urls, prefix)
    create_namespaces(dev, (scenario.namespace(prefix, r) for r in scenario.repo_names()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDECD_")}
    env.update(TIDECD_CONFIG=str(config), TIDECD_STORE=str(store), KUBECONFIG=str(dev.kubeconfig),
               TIDECD_POLL_JITTER="0")
    return Installed(scenario, config, store, urls, env)


# -- what the API server counted ---------------------------------------------------------------------------


def wait_namespaces_settled(dev: DevCluster, timeout: float = 60.0) -> None:
    """Wait (at most `timeout`) until no namespace is still having its content deleted. The apiserver's
    request counters are cluster-wide, so the namespace and garbage collectors' deletes of earlier tests'
    namespaces would otherwise count as the measured window's writes. A namespace held only by finalizers
    nobody will remove (an Argo CD Application's, once Argo CD is gone) makes no more deletes: not waited."""
    import json

    def deleting(ns: dict[str, Any]) -> bool:
        if (ns.get("status") or {}).get("phase") != "Terminating":
            return False
        conditions = {c.get("type"): c.get("status") for c in (ns.get("status") or {}).get("conditions") or []}
        return conditions.get("NamespaceFinalizersRemaining") != "True"

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = _kube(dev, "GET", "/api/v1/namespaces")
        if status == 200 and not any(deleting(ns) for ns in json.loads(body).get("items", [])):
            return
        time.sleep(0.5)


def api_requests(dev: DevCluster) -> Counter[tuple[str, str, str, str, str]]:
    """`apiserver_request_total` by (verb, group, resource, subresource, dry_run)."""
    from prometheus_client.parser import text_string_to_metric_families

    status, body = _kube(dev, "GET", "/metrics", timeout=60)
    if status != 200:
        raise RuntimeError(f"API server /metrics: HTTP {status}")
    counts: Counter[tuple[str, str, str, str, str]] = Counter()
    for family in text_string_to_metric_families(body.decode()):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if sample.name != "apiserver_request_total":
                continue
            labels = sample.labels
            counts[(labels.get("verb", ""), labels.get("group", ""), labels.get("resource", ""),
                    labels.get("subresource", ""), labels.get("dry_run", ""))] += int(sample.value)
    return counts


@dataclass(frozen=True)
class ApiCalls:
    """API requests between two readings: all of them, and those on the apps' four kinds."""

    total: int
    on_app_kinds: int
    writes_on_app_kinds: int  # real writes (no dry-run) of the objects themselves, status excluded
    dry_runs: int
    by_verb: dict[str, int]

    @classmethod
    def between(cls, before: Counter[tuple[str, str, str, str, str]],
                after: Counter[tuple[str, str, str, str, str]]) -> ApiCalls:
        delta = after.copy()
        delta.subtract(before)
        on_kinds = {k: n for k, n in delta.items() if (k[1], k[2]) in APP_RESOURCES and n > 0}
        by_verb: Counter[str] = Counter()
        for (verb, *_), n in on_kinds.items():
            by_verb[verb] += n
        return cls(total=sum(n for n in delta.values() if n > 0), on_app_kinds=sum(on_kinds.values()),
                   writes_on_app_kinds=sum(n for k, n in on_kinds.items()
                                           if k[0] in WRITE_VERBS and not k[3] and not k[4]),
                   dry_runs=sum(n for k, n in on_kinds.items() if k[4]), by_verb=dict(by_verb))


# -- what the store holds -----------------------------------------------------------------------------------


def store_snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """{key: (mtime_ns, size)} of every object in a local store."""
    found = {}
    for path in root.rglob("*"):
        if path.is_file() and not path.name.startswith("."):
            stat = path.stat()
            found[str(path.relative_to(root))] = (stat.st_mtime_ns, stat.st_size)
    return found


def store_writes(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> Counter[str]:
    """Objects written, created or deleted between two snapshots, by top-level prefix (`state`, `leases`...)."""
    changed: Counter[str] = Counter()
    for key in set(before) | set(after):
        if before.get(key) != after.get(key):
            changed[key.split("/", 1)[0]] += 1
    return changed


# -- the deployed functions -------------------------------------------------------------------------------


class Function:
    """One functions-framework process serving `target` with one worker and one thread (concurrency 1)."""

    def __init__(self, target: str, env: dict[str, str], log: Path, *, signature: str = "http") -> None:
        self.target, self.log = target, log
        # the bench's measured reconcile (bench/stepprobe.py: each step's kind, CPU time, a profile) when asked
        source = ROOT / "bench" / "stepprobe.py" if env.get("TIDECD_BENCH_STEPS") else ROOT / "functions" / "main.py"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "functions_framework", "--target", target, "--signature-type", signature,
                 "--source", str(source), "--host", "127.0.0.1", "--port", str(self.port)],
                env={**env, "WORKERS": "1", "THREADS": "1"}, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)

    def wait_serving(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    tail = self.log.read_text(errors="replace")[-1500:]
                    raise RuntimeError(f"{self.target} exited: {tail}") from None
                time.sleep(0.2)
        raise TimeoutError(f"{self.target} did not start: {self.log.read_text(errors='replace')[-1500:]}")

    def peak_rss(self) -> int:
        """Peak resident set (VmHWM, bytes) of the process doing the work: gunicorn's worker, else itself."""
        import psutil

        try:
            proc = psutil.Process(self.proc.pid)
            procs = proc.children(recursive=True) or [proc]
        except psutil.NoSuchProcess:
            return 0
        peak = 0
        for child in procs:
            try:
                for line in Path(f"/proc/{child.pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]) * 1024)
            except OSError:
                continue
        return peak

    def stop(self) -> None:
        stop_session(self.proc)


@dataclass
class Fleet:
    """tidecd deployed on one machine: a poll target, `workers` reconcile instances behind a Frontend, and
    a Pub/Sub topic on the emulator at `emulator_host` pushing to it."""

    workdir: Path
    env: dict[str, str]
    emulator_host: str
    workers: int
    topic: str = ""
    subscription: str = ""
    poller: Function | None = None
    instances: list[Function] = field(default_factory=list)
    frontend: Frontend | None = None
    bridge: PushBridge | None = None

    def start(self, name: str) -> Fleet:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.topic = f"projects/{PROJECT}/topics/{name}"
        self.subscription = f"projects/{PROJECT}/subscriptions/{name}-push"
        env = {**self.env, "PUBSUB_EMULATOR_HOST": self.emulator_host, "TIDECD_REFRESH_TOPIC": self.topic,
               "GOOGLE_CLOUD_PROJECT": PROJECT, "PYTHONPATH": os.pathsep.join([str(ROOT / "shared"), str(ROOT)])}
        try:
            self.instances = [Function("reconcile", env, self.workdir / f"reconcile-{i}.log", signature="cloudevent")
                              for i in range(self.workers)]
            self.poller = Function("poll", env, self.workdir / "poll.log")
            for fn in [*self.instances, self.poller]:
                fn.wait_serving()
            self.frontend = Frontend([fn.url for fn in self.instances])
            publisher, subscriber = _clients(self.emulator_host)
            publisher.create_topic(name=self.topic)
            # pulled and pushed by the bridge (the emulator's own push keeps only 2 requests in flight); a
            # refused early continuation (429) comes back after 1 s doubling to 10 s, as infra/pubsub.tf sets it
            subscriber.create_subscription(request={"name": self.subscription, "topic": self.topic,
                                                    "ack_deadline_seconds": 600})
            self.bridge = PushBridge(self.subscription, self.frontend.url,
                                     outstanding=BRIDGE_PER_INSTANCE * self.workers).start()
        except BaseException:
            self.stop()
            raise
        return self

    def tick(self, timeout: float = 600.0) -> dict[str, Any]:
        """One poll tick (HTTP POST to the poll target); its summary."""
        import json

        assert self.poller is not None
        request = urllib.request.Request(self.poller.url, data=b"{}", method="POST",  # noqa: S310
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 (loopback)
            return dict(json.loads(resp.read()))

    def peak_rss(self) -> list[int]:
        return [fn.peak_rss() for fn in self.instances]

    def stop(self) -> None:
        if self.bridge is not None:
            self.bridge.stop()
            self.bridge = None
        if self.topic:
            try:
                publisher, subscriber = _clients(self.emulator_host)
                subscriber.delete_subscription(subscription=self.subscription)
                publisher.delete_topic(topic=self.topic)
            except Exception:  # noqa: BLE001, S110 - the emulator may be gone already; the processes must still go
                pass
        if self.frontend is not None:
            self.frontend.stop()
        for fn in [*self.instances, *([self.poller] if self.poller else [])]:
            fn.stop()


def _clients(host: str) -> tuple[Any, Any]:
    from tidecd_dev.pubsub import emulator_clients

    return emulator_clients(host)


# -- waiting for every app ----------------------------------------------------------------------------------


@dataclass
class Watch:
    """Follows `state/apps/*.json` in a local store: when each app was first Synced and Healthy (by the
    file's modification time, unix seconds). Only changed files are read again."""

    store_root: Path
    apps: list[str]
    revision: str = ""  # when set, Synced at this revision only
    done: dict[str, float] = field(default_factory=dict)
    last: dict[str, tuple[str, str]] = field(default_factory=dict)  # app → (sync, health) last read
    _seen: dict[str, int] = field(default_factory=dict)

    def scan(self) -> int:
        from tidecd.clients.store import LocalStore

        store = LocalStore(self.store_root)
        for app in self.apps:
            if app in self.done:
                continue
            path = self.store_root / "state" / "apps" / f"{app}.json"
            try:
                mtime = path.stat().st_mtime_ns
            except FileNotFoundError:
                continue
            if self._seen.get(app) == mtime:
                continue
            self._seen[app] = mtime
            blob = store.read(f"state/apps/{app}.json")
            if blob is None:
                continue
            import json

            try:
                doc = json.loads(blob.data)
            except ValueError:
                continue
            sync, health = str(doc.get("sync_status", "")), str(doc.get("health", ""))
            self.last[app] = (sync, health)
            at_revision = not self.revision or doc.get("revision") == self.revision
            if sync == "Synced" and health == "Healthy" and at_revision:
                self.done[app] = mtime / 1e9
        return len(self.done)

    def wait(self, timeout: float, *, every: float = 0.5,
             progress: Callable[[int], None] | None = None) -> bool:
        """True once every app is done; False after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            count = self.scan()
            if progress is not None:
                progress(count)
            if count == len(self.apps):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(every)

    def stragglers(self, limit: int = 5) -> list[str]:
        left = [a for a in self.apps if a not in self.done]
        return [f"{a}: {'/'.join(self.last.get(a, ('no state', '')))}" for a in left[:limit]]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def ls_remotes(git: GitServer, repos: Iterable[str]) -> dict[str, dict[str, int]]:
    return {repo: git.counts(repo) for repo in repos}
