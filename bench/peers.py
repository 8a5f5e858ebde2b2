"""tidecd against the real peer engines (issue 17): Argo CD v3.6.1, Flux v1.9.6, gitops-agent v3.6.1.

The same 200-object app as the sync group (a CRD with 19 custom resources, 30 Deployments, 30 Services,
120 ConfigMaps), on the same control plane, taking turns within each repetition. Every tool gets, per
repetition, its own app name, namespace, CRD group and git repository, and its natural trigger:

- tidecd through the CLI (`tidecd app sync --prune`, `tidecd app refresh` for the no-op: fresh processes),
  through a warm functions-framework webhook instance (signed GitHub push event; the reconcile runs in that
  instance, as locally without Pub/Sub), and through a cold one (a new instance per trigger, its start
  included in the time);
- Argo CD: creating the Application (automated sync with prune), then the `argocd.argoproj.io/refresh`
  annotation, as its webhook does;
- Flux: creating GitRepository + Kustomization (`wait: true`, so Ready means applied and healthy), then
  `reconcile.fluxcd.io/requestedAt` on the GitRepository only, as its webhook receiver does;
- gitops-agent: `git pull` into its work tree, then POST /api/v1/sync (one agent per repetition, started
  with an empty directory and warmed untimed: it lists every API resource first, ~10 s).

Poll intervals are an hour, so nothing reconciles in the background; every peer is started and warmed
before anything is timed. Rows, each a median over the repetitions, measured from the trigger:

- cold sync, all objects exist / all Deployments Available: read from the cluster, the same for all;
- no-op resync: until the tool says it is done (tidecd: the refresh's run finished, its `pending/<app>`
  record gone, as a no-op writes no state; Argo CD: the refresh
  annotation consumed; Flux: the GitRepository's lastHandledReconcileAt; gitops-agent: its result table);
- one object changed, new value live: until the changed ConfigMap has the new value in the cluster;
- push → Synced+Healthy: until the tool's own status says so at the pushed commit (gitops-agent has no
  health: its sync's end).

A peer that does not build or start gets rows saying so and why; nothing stands in for it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.fixtures import Installation, Repo, application, create_namespaces, write_app
from bench.harness import REPO_ROOT, Bench, Row, median, say, spread
from bench.sync import CHANGED, app_files
from tidecd.clients.cluster import KubeCluster
from tidecd.state import app as app_state
from tidecd.triggers import pending
from tidecd_dev import peers
from tidecd_dev.devcluster import free_port

GROUP = "peers"
REPS = int(os.environ.get("TIDECD_BENCH_PEER_REPS", "3"))
# A subset of the peers, e.g. "Flux,gitops-agent" (default: all three); tidecd runs as TIDECD_BENCH_TIDECD says.
CHOSEN = [p.strip() for p in os.environ.get("TIDECD_BENCH_PEERS", "Argo CD,Flux,gitops-agent").split(",") if p.strip()]
# A subset of tidecd's variants, e.g. "warm function" to debug a peer quickly (default: all three).
VARIANTS = [v.strip() for v in os.environ.get("TIDECD_BENCH_TIDECD", "CLI,warm function,cold function").split(",")
            if v.strip()]
# Seconds from the group's start after which no new repetition begins (one that would likely not end in
# time): the medians are then of the repetitions done, and the table says how many. Under `timeout 2400`.
BUDGET = float(os.environ.get("TIDECD_BENCH_PEER_BUDGET", "2000"))
TIMEOUT = 300.0
POLL = 0.05
MEASURES = ("cold sync: all objects exist", "cold sync: all Deployments Available", "no-op resync",
            "one object changed: new value live", "push → Synced+Healthy")
PEERS = ("Argo CD", "Flux", "gitops-agent")
TIDECD = ("CLI", "warm function", "cold function")
Done = Callable[[], bool]
BUILDS = {"Argo CD": ("argocd", "redis-server"), "Flux": ("source-controller", "kustomize-controller"),
          "gitops-agent": ("gitops-agent",)}
_BUILD_ERRORS: dict[str, str] = {}


def prebuild() -> dict[str, str]:
    """Build the peers on first use (scripts/tools.sh, cached; progress on stderr); per peer, why it did
    not build. Called before the bench leaves the host's network (a first build fetches modules)."""
    for name, binaries in BUILDS.items():
        if name in _BUILD_ERRORS or name not in CHOSEN:
            continue
        try:
            for binary in binaries:
                say(f"peers: {name}: {binary} (scripts/tools.sh {binary}; built once, then cached)")
                peers.ensure_built(binary)
        except Exception as exc:  # noqa: BLE001 - reported as the peer's rows
            _BUILD_ERRORS[name] = f"did not build: {type(exc).__name__}: {str(exc)[:300]}"
    return dict(_BUILD_ERRORS)


@dataclass
class Case:
    """One tool's app in one repetition."""

    tool: str
    rep: int
    repo: Repo
    app: str
    namespace: str
    group: str
    sha: str = ""
    value: str = "v1"


@dataclass
class Results:
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # tool → measure → seconds
    broken: dict[str, str] = field(default_factory=dict)  # tool → why it has no numbers
    notes: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (tool, measure) → what to know
    reps: int = 0  # repetitions done
    load: list[tuple[float, float, float]] = field(default_factory=list)  # os.getloadavg() per repetition end
    settings: dict[str, str] = field(default_factory=dict)  # tool → how it was run (flags, intervals)

    def add(self, tool: str, measure: str, seconds: float) -> None:
        self.samples.setdefault(tool, {}).setdefault(measure, []).append(seconds)

    def get(self, tool: str, measure: str) -> list[float]:
        return self.samples.get(tool, {}).get(measure, [])

    def note(self, tool: str, measures: tuple[str, ...], text: str) -> None:
        for name in measures:
            if text not in self.notes.setdefault((tool, name), []):
                self.notes[(tool, name)].append(text)


# -- what every tool is measured by: the cluster ---------------------------------------------------------


class Observer:
    """Reads the app's objects from the cluster (the same few list calls for every tool)."""

    def __init__(self, kubeconfig: str) -> None:
        self.kube = KubeCluster.from_kubeconfig(kubeconfig)

    def _names(self, group: str, kind: str, namespace: str) -> list[str]:
        try:
            return [o["metadata"]["name"] for o in self.kube.list(group, kind, namespace=namespace)]
        except Exception:  # noqa: BLE001 - the CRD's kind is not served yet
            return []

    def exists(self, case: Case) -> bool:
        ns = case.namespace
        return (len([n for n in self._names("", "ConfigMap", ns) if n.startswith("cm-")]) == 120
                and len(self._names("", "Service", ns)) == 30 and len(self._names("apps", "Deployment", ns)) == 30
                and len(self._names(case.group, "Widget", ns)) == 19)

    def available(self, case: Case) -> bool:
        items = self.kube.list("apps", "Deployment", namespace=case.namespace)
        return len(items) == 30 and all(
            any(c.get("type") == "Available" and c.get("status") == "True"
                for c in (d.get("status") or {}).get("conditions") or [])
            and (d.get("status") or {}).get("observedGeneration") == d["metadata"].get("generation")
            for d in items)

    def live(self, case: Case) -> bool:
        from tidecd.base.model import ResourceKey

        cm = self.kube.get(ResourceKey("", "ConfigMap", case.namespace, CHANGED)) or {}
        return bool((cm.get("data") or {}).get("value") == case.value)


def measure(trigger: Callable[[], Done | None], observe: dict[str, Done], timeout: float = TIMEOUT) -> dict[str, float]:
    """Seconds from calling `trigger` until each observation first holds. `trigger` may block (a CLI
    process): it runs in a thread, and observation "done" is then its return, or the predicate it returns."""
    out: dict[str, float] = {}
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["done"] = trigger()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the measuring thread
            box["error"] = exc

    start = time.perf_counter()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    pending = dict(observe)
    while pending or "done" not in out:
        if "error" in box:
            raise box["error"]
        now = time.perf_counter() - start
        if "done" not in out and not worker.is_alive():
            done = box.get("done")
            if done is None or done():
                out["done"] = time.perf_counter() - start
        for name, check in list(pending.items()):
            if check():
                out[name] = time.perf_counter() - start
                del pending[name]
        if now > timeout:
            raise TimeoutError(f"not reached after {timeout:.0f}s: {sorted(set(observe) - set(out))}"
                               + ("" if "done" in out else " and the tool's own done"))
        time.sleep(POLL)
    worker.join()
    return out


# -- the tools -------------------------------------------------------------------------------------------------


def warm_up_repo(bench: Bench, slug: str) -> tuple[Repo, str]:
    """A one-ConfigMap app repo for a tool's untimed warm-up (its first clone, render and sync)."""
    repo = Repo(bench.git, f"peers-{slug}-warmup", bench.dir(f"peers/repos/{slug}-warmup"))
    repo.write("warmup.yaml", [{"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": f"{slug}-warmup", "namespace": WARMUP_NS},
                                "data": {"value": "warm"}}])
    return repo, repo.commit_and_push("warm-up")


WARMUP_NS = "bench-peers-warmup"


def _until(what: str, check: Done, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not done after {timeout:.0f}s")
        time.sleep(POLL)


class Tool:
    """A tool under comparison: set-up and triggers. `cold`, `noop`, `change` send the trigger and return
    the tool's own "done" (None: done when the call returns)."""

    name = ""

    def start(self) -> None:
        """Start and warm the tool (untimed)."""

    def settings(self) -> str:
        """How the tool is run here, for the record beside its numbers ("": its defaults)."""
        return ""

    def prepare(self, case: Case) -> None:
        """Untimed set-up of the case before its cold sync."""

    def cold(self, case: Case) -> Done | None:
        raise RuntimeError(f"{self.name}: no cold trigger")

    def noop(self, case: Case) -> Done | None:
        raise RuntimeError(f"{self.name}: no no-op trigger")

    def change(self, case: Case) -> Done | None:
        raise RuntimeError(f"{self.name}: no change trigger")

    def after(self, case: Case) -> None:
        """Untimed clean-up after each step (a cold function instance is stopped)."""

    def finish(self, case: Case) -> None:
        """Untimed clean-up after the case's last step."""

    def stop(self) -> None:
        """Stop every process the tool started."""


class TidecdCli(Tool):
    name = "tidecd CLI"

    def __init__(self, bench: Bench) -> None:
        self.inst = Installation(bench.dir("peers/tidecd-cli"), bench.kubeconfig)
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("TIDECD_")},
                    "TIDECD_CONFIG": str(self.inst.config_dir), "TIDECD_STORE": str(self.inst.store_dir),
                    "KUBECONFIG": bench.kubeconfig, "PYTHONPATH": str(REPO_ROOT / "shared")}

    def prepare(self, case: Case) -> None:
        write_app(self.inst.config_dir, application(case.app, case.repo.url, ".", case.namespace, automated=True))

    def _cli(self, *args: str) -> None:
        proc = subprocess.run([sys.executable, "-m", "tidecd.cli", "app", *args], env=self.env, cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=TIMEOUT, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"tidecd app {' '.join(args)} exited {proc.returncode}: "
                               f"{(proc.stderr or proc.stdout)[-800:]}")

    def cold(self, case: Case) -> Done | None:
        self._cli("sync", case.app, "--prune")
        return None

    def noop(self, case: Case) -> Done | None:
        self._cli("refresh", case.app)
        return None

    def change(self, case: Case) -> Done | None:
        self._cli("sync", case.app, "--prune")
        return None


class TidecdFunction(Tool):
    """The webhook target as a functions-framework process; `warm`: one instance for the whole run."""

    def __init__(self, bench: Bench, *, warm: bool) -> None:
        self.bench, self.warm = bench, warm
        self.name = "tidecd warm function" if warm else "tidecd cold function"
        label = "warm" if warm else "cold"
        self.inst = Installation(bench.dir(f"peers/tidecd-{label}"), bench.kubeconfig)
        self.secret = secrets.token_hex(16)
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("TIDECD_")},
                    "TIDECD_CONFIG": str(self.inst.config_dir), "TIDECD_STORE": str(self.inst.store_dir),
                    "KUBECONFIG": bench.kubeconfig, "TIDECD_WEBHOOK_SECRET": self.secret,
                    "TIDECD_API_TOKEN": secrets.token_hex(16), "PYTHONPATH": str(REPO_ROOT / "shared")}
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.log = bench.root / f"peers-function-{label}.log"

    def _spawn(self) -> None:
        from bench.functions import _wait_serving

        port = free_port()
        framework = str(Path(sys.executable).parent / "functions-framework")
        self.proc = self.bench.spawn([framework, "--target", "webhook", "--source", "functions/main.py",
                                      "--host", "127.0.0.1", "--port", str(port)], env=self.env, log=self.log)
        self.url = f"http://127.0.0.1:{port}"
        _wait_serving(self.url, self.log)

    def start(self) -> None:
        if not self.warm:
            return
        self._spawn()
        repo, sha = warm_up_repo(self.bench, "twarm")
        case = Case(self.name, -1, repo, "peers-twarm-warmup", WARMUP_NS, "", sha)
        self.prepare(case)
        _until("tidecd warm function warm-up", self._trigger(case, "0" * 40, synced=True))

    def prepare(self, case: Case) -> None:
        write_app(self.inst.config_dir, application(case.app, case.repo.url, ".", case.namespace, automated=True))

    def _generation(self, case: Case) -> int:
        blob = self.inst.store.read(app_state.state_key(case.app))
        return blob.generation if blob else 0

    def _push(self, case: Case, before: str) -> bool:
        """Deliver the push of `case.sha`; True when the webhook answered that the app is already Synced at
        it (`current`): for the no-op, that answer is the whole of tidecd's work."""
        from bench.functions import _http

        body = json.dumps({
            "ref": "refs/heads/main", "before": before, "after": case.sha, "forced": False,
            "repository": {"name": case.repo.name, "full_name": f"bench/{case.repo.name}", "clone_url": case.repo.url,
                           "html_url": case.repo.url, "default_branch": "main"},
            "commits": [{"id": case.sha, "message": "bench", "added": [], "removed": [], "modified": ["."]}],
            "pusher": {"name": "bench"}}).encode()
        signature = "sha256=" + hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
        status, answer = _http("POST", self.url + "/", body, {
            "Content-Type": "application/json", "X-GitHub-Event": "push", "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": signature})
        if status == 200 and case.app in (json.loads(answer or b"{}").get("current") or []):
            return True
        if status != 202:
            raise RuntimeError(f"webhook answered HTTP {status}: {answer[:300]!r}; log {self.log}")
        return False

    def _trigger(self, case: Case, before: str, *, synced: bool) -> Done:
        generation = self._generation(case)
        if not self.warm:
            self._spawn()  # a cold instance: its start is part of the time
        current = self._push(case, before)

        def done() -> bool:
            if current:
                return True
            if synced:
                state, _ = app_state.load(self.inst.store, case.app)
                op = state.operation
                return (state.revision == case.sha and str(state.sync_status) == "Synced"
                        and str(state.health) == "Healthy" and not (op is not None and op.running))
            # the no-op: its run is over (`pending/<app>` gone); a no-op that changed nothing writes no state
            return self._generation(case) > generation or self.inst.store.read(pending.PENDING + case.app) is None

        return done

    def cold(self, case: Case) -> Done | None:
        return self._trigger(case, "0" * 40, synced=True)

    def noop(self, case: Case) -> Done | None:
        return self._trigger(case, case.sha, synced=False)

    def change(self, case: Case) -> Done | None:
        return self._trigger(case, "0" * 40, synced=True)

    def after(self, case: Case) -> None:
        """A cold instance is stopped only once it has no refresh or continuation of the app in flight (its
        `pending/` and `continuations/` records gone), as a cloud instance finishes its call: killed
        earlier, the next trigger would be coalesced into the dead run for minutes."""
        if self.warm or self.proc is None:
            return
        keys = (pending.PENDING + case.app, pending.CONTINUATIONS + case.app)
        deadline = time.monotonic() + 120
        while any(self.inst.store.read(k) is not None for k in keys) and time.monotonic() < deadline:
            time.sleep(POLL)
        self.bench.stop(self.proc)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.bench.stop(self.proc)
            self.proc = None


class ArgoTool(Tool):
    name = "Argo CD"

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.argo = peers.ArgoCD(bench.kubeconfig, bench.dir("peers/argocd"), reach=[bench.git.url],
                                 namespace="argocd-bench")

    def settings(self) -> str:
        return (f"controller defaults but --app-resync {self.argo.app_resync} (only the triggers reconcile), "
                f"self-heal timeout {self.argo.self_heal_timeout}s; repo-server and redis as shipped")

    def start(self) -> None:
        self.argo.__enter__()
        repo, sha = warm_up_repo(self.bench, "argo")
        self.argo.apply_application("peers-argo-warmup", repo.url, ".", WARMUP_NS)
        self.argo.wait_status("peers-argo-warmup", revision=sha)

    def cold(self, case: Case) -> Done | None:
        self.argo.apply_application(case.app, case.repo.url, ".", case.namespace, prune=True)
        return lambda: self._synced(case)

    def _synced(self, case: Case) -> bool:
        st = self.argo.status(case.app)
        return ((st.sync, st.health, st.revision, st.operation_phase, st.operation_revision)
                == ("Synced", "Healthy", case.sha, "Succeeded", case.sha) and not self._refresh_pending(case))

    def _refresh_pending(self, case: Case) -> bool:
        app = self.argo.application(case.app) or {}
        return peers.ARGOCD_REFRESH in (app.get("metadata", {}).get("annotations") or {})

    def noop(self, case: Case) -> Done | None:
        self.argo.refresh(case.app)
        return lambda: not self._refresh_pending(case)

    def change(self, case: Case) -> Done | None:
        self.argo.refresh(case.app)
        return lambda: self._synced(case)

    def stop(self) -> None:
        self.argo.stop()


class FluxTool(Tool):
    name = "Flux"

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.flux = peers.Flux(bench.kubeconfig, bench.dir("peers/flux"), namespace="flux-bench")

    def settings(self) -> str:
        return (f"source-controller --concurrent={self.flux.concurrent}, kustomize-controller "
                f"--concurrent={self.flux.kustomize_concurrent}, --watch-all-namespaces=false, other flags "
                "default; GitRepository and Kustomization interval 1h, Kustomization wait: true")

    def start(self) -> None:
        self.flux.__enter__()
        repo, sha = warm_up_repo(self.bench, "flux")
        self.flux.git_repository("peers-flux-warmup", repo.url)
        self.flux.kustomization("peers-flux-warmup", "peers-flux-warmup", "./", wait=True)
        self.flux.wait_ready("Kustomization", "peers-flux-warmup", sha=sha)

    def _ready(self, case: Case) -> bool:
        st = self.flux.status("Kustomization", case.app)
        return st.ready and st.sha == case.sha

    def cold(self, case: Case) -> Done | None:
        self.flux.git_repository(case.app, case.repo.url)
        self.flux.kustomization(case.app, case.app, "./", wait=True)
        return lambda: self._ready(case)

    def noop(self, case: Case) -> Done | None:
        token = self.flux.request_reconcile("GitRepository", case.app)
        return lambda: self.flux.status("GitRepository", case.app).handled == token

    def change(self, case: Case) -> Done | None:
        self.flux.request_reconcile("GitRepository", case.app)
        return lambda: self._ready(case)

    def stop(self) -> None:
        self.flux.stop()


class AgentTool(Tool):
    name = "gitops-agent"

    def __init__(self, bench: Bench, results: Results) -> None:
        self.bench, self.results = bench, results
        self.agents: dict[str, peers.GitopsAgent] = {}

    def prepare(self, case: Case) -> None:
        """One agent per case, started on the repo's first (empty) commit and warmed untimed."""
        agent = peers.GitopsAgent(self.bench.kubeconfig, self.bench.dir(f"peers/agent-{case.rep}"), case.repo.url,
                                  path="app", reach=[self.bench.git.url], default_namespace=case.namespace)
        self.agents[case.app] = agent
        agent.__enter__()

    def _sync(self, case: Case, step: str, measures: tuple[str, ...]) -> Done | None:
        """Pull, then POST sync; a sync that ends Failed is sent again at once (its resync timer would
        retry it an hour later), and the time counts every sync it took."""
        agent = self.agents[case.app]
        agent.pull()
        took = agent.sync(timeout=TIMEOUT, attempts=3)
        if took > 1:
            self.results.note(self.name, measures,
                              f"its {step} took {took} syncs (rep {case.rep + 1}): the first ended Failed (the custom "
                              "resources: \"no matches for kind\", the sync's REST mapper predates the CRD it "
                              "applied); the time includes them all")
        return None

    def cold(self, case: Case) -> Done | None:
        return self._sync(case, "cold sync", MEASURES[:2])

    def noop(self, case: Case) -> Done | None:
        return self._sync(case, "no-op", MEASURES[2:3])

    def change(self, case: Case) -> Done | None:
        return self._sync(case, "change", MEASURES[3:])

    def finish(self, case: Case) -> None:
        self.agents[case.app].stop()  # one agent at a time: an idle one still watches the whole cluster

    def stop(self) -> None:
        for agent in self.agents.values():
            agent.stop()


# -- the run ---------------------------------------------------------------------------------------------------


def _case(bench: Bench, tool: Tool, rep: int) -> Case:
    slug = {"tidecd CLI": "tcli", "tidecd warm function": "twarm", "tidecd cold function": "tcold",
            "Argo CD": "argo", "Flux": "flux", "gitops-agent": "agent"}[tool.name]
    repo = Repo(bench.git, f"peers-{slug}-{rep}", bench.dir(f"peers/repos/{slug}-{rep}"))
    return Case(tool.name, rep, repo, f"peers-{slug}-{rep}", f"bench-peers-{slug}-{rep}", f"r{rep}.{slug}.peers.io")


def _write(case: Case) -> str:
    """Commit the app at `case.value` (gitops-agent reads `app/`, the others the repo root)."""
    base = "app/" if case.tool == "gitops-agent" else ""
    for file, docs in app_files(case.namespace, case.group, value=case.value).items():
        case.repo.write(f"{base}{file}", docs)
    case.sha = case.repo.commit_and_push(f"{case.app} at {case.value}")
    return case.sha


def run_case(tool: Tool, case: Case, observer: Observer, results: Results) -> None:
    if case.tool == "gitops-agent":
        case.repo.write("app/.keep", "")  # the agent starts on an empty app/ directory
        case.repo.commit_and_push("empty")
    tool.prepare(case)
    _write(case)
    try:
        cold = measure(lambda: tool.cold(case), {"exists": lambda: observer.exists(case),
                                                "available": lambda: observer.available(case)})
    finally:
        tool.after(case)
    results.add(tool.name, MEASURES[0], cold["exists"])
    results.add(tool.name, MEASURES[1], cold["available"])
    # settle: the tool reports the cold sync done before the next step
    try:
        noop = measure(lambda: tool.noop(case), {})
    finally:
        tool.after(case)
    results.add(tool.name, MEASURES[2], noop["done"])
    case.value = f"v{case.rep + 2}"
    _write(case)
    try:
        change = measure(lambda: tool.change(case), {"live": lambda: observer.live(case)})
    finally:
        tool.after(case)
    tool.finish(case)
    results.add(tool.name, MEASURES[3], change["live"])
    results.add(tool.name, MEASURES[4], change["done"])
    say(f"peers: {tool.name} rep {case.rep}: exists {cold['exists']:.2f}s, available {cold['available']:.2f}s, "
        f"no-op {noop['done']:.2f}s, change live {change['live']:.2f}s, synced {change['done']:.2f}s")


def run(bench: Bench) -> list[Row]:
    begun = time.monotonic()
    observer = Observer(bench.kubeconfig)
    results = Results()
    variants: dict[str, Callable[[], Tool]] = {"CLI": lambda: TidecdCli(bench),
                                               "warm function": lambda: TidecdFunction(bench, warm=True),
                                               "cold function": lambda: TidecdFunction(bench, warm=False)}
    tools: list[Tool] = [make() for name, make in variants.items() if name in VARIANTS]
    for name in variants:
        if name not in VARIANTS:
            results.broken[f"tidecd {name}"] = "not run: not in TIDECD_BENCH_TIDECD"
    makers: dict[str, Callable[[], Tool]] = {"Argo CD": lambda: ArgoTool(bench), "Flux": lambda: FluxTool(bench),
                                             "gitops-agent": lambda: AgentTool(bench, results)}
    build_errors = prebuild()
    for name, make in makers.items():
        if name not in CHOSEN:
            results.broken[name] = "not run: not in TIDECD_BENCH_PEERS"
        elif name in build_errors:
            results.broken[name] = build_errors[name]
        else:
            tools.append(make())
    cases = {(t.name, rep): _case(bench, t, rep) for t in tools for rep in range(REPS)}
    create_namespaces(bench.kubeconfig, [WARMUP_NS, *(c.namespace for c in cases.values())])
    started: list[Tool] = []
    try:
        for tool in tools:
            say(f"peers: starting {tool.name} (untimed)")
            results.settings[tool.name] = tool.settings() or "its defaults"
            try:
                tool.start()
                started.append(tool)
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc(file=sys.stderr)
                tool.stop()
                results.broken[tool.name] = f"did not start: {type(exc).__name__}: {str(exc)[:300]}"
        results.load.append(os.getloadavg())
        longest = 0.0
        for rep in range(REPS):  # tools take turns within each repetition, so noise hits all alike
            elapsed = time.monotonic() - begun
            if rep and elapsed + longest > BUDGET:
                say(f"peers: no repetition {rep + 1}: {elapsed:.0f}s spent, the longest took {longest:.0f}s, "
                    f"budget {BUDGET:.0f}s (TIDECD_BENCH_PEER_BUDGET)")
                break
            say(f"peers: repetition {rep + 1}/{REPS}")
            rep_start = time.monotonic()
            for tool in started:
                if tool.name in results.broken:
                    continue
                try:
                    run_case(tool, cases[(tool.name, rep)], observer, results)
                except Exception as exc:  # noqa: BLE001 - one tool's failure leaves the others' numbers
                    traceback.print_exc(file=sys.stderr)
                    results.broken[tool.name] = f"failed in rep {rep + 1}: {type(exc).__name__}: {str(exc)[:300]}"
            longest = max(longest, time.monotonic() - rep_start)
            results.reps = rep + 1
            results.load.append(os.getloadavg())
            print(matrix(results), file=sys.stderr, flush=True)  # so far: kept in the log if the run is killed
    finally:
        for tool in reversed(started):
            tool.stop()
    print(matrix(results), file=sys.stderr, flush=True)
    return rows(results)


def matrix(results: Results) -> str:
    """The medians as one Markdown table, tools across, and the warm instance's ratio to each peer (what
    the README shows), with the repetitions done and the load average."""
    tools = [f"tidecd {v}" for v in TIDECD] + list(PEERS)
    header = tools + [f"warm / {p}" for p in PEERS]
    lines = [f"{results.reps} repetition(s), medians; load average (1/5/15 min) "
             + ", then ".join("/".join(f"{x:.1f}" for x in load) for load in results.load[:1] + results.load[-1:]),
             "", "| measure | " + " | ".join(header) + " |", "|---" * (len(header) + 1) + "|"]
    for name in MEASURES:
        cells = []
        for tool in tools:
            values = results.get(tool, name)
            cells.append(f"{median(values):.2f} s" if values else "not run")
        warm = results.get("tidecd warm function", name)
        for peer in PEERS:
            theirs = results.get(peer, name)
            ratio = median(warm) / median(theirs) if warm and theirs and median(theirs) > 0 else None
            cells.append("—" if ratio is None else f"{ratio:.2f}×" if ratio >= 0.01 else f"{ratio:.3f}×")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for tool, why in results.broken.items():
        lines.append(f"\n{tool}: {why}")
    for tool, how in results.settings.items():
        lines.append(f"\n{tool} settings: {how}")
    said = set()
    for (tool, _), notes in results.notes.items():
        for text in notes:
            if (tool, text) not in said:
                said.add((tool, text))
                lines.append(f"\n{tool}: {text}")
    return "\n".join(lines)


def rows(results: Results) -> list[Row]:
    out: list[Row] = []
    for measure_name in MEASURES:
        for variant in TIDECD:
            tool = f"tidecd {variant}"
            mine = results.get(tool, measure_name)
            ours = median(mine) if mine else None
            for peer in PEERS:
                theirs = results.get(peer, measure_name)
                label = f"{measure_name} · tidecd {variant} vs {peer}"
                if peer in results.broken and not theirs:
                    out.append(Row(GROUP, label, ours, None, peer, f"{peer} {results.broken[peer]}"))
                    continue
                notes = []
                if mine:
                    notes.append(f"tidecd {spread(mine)}")
                if theirs:
                    notes.append(f"{peer} {spread(theirs)}")
                if tool in results.broken:
                    notes.append(f"tidecd {variant} {results.broken[tool]}")
                if peer in results.broken:  # numbers from the repetitions before it failed
                    notes.append(f"{peer} {results.broken[peer]}")
                notes += [f"{peer}: {text}" for text in results.notes.get((peer, measure_name), [])]
                out.append(Row(GROUP, label, ours, median(theirs) if theirs else None, peer, "; ".join(notes)))
    return out
