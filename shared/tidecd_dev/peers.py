"""The real peer GitOps engines, run out of cluster against a given kubeconfig, for the bench and e2e tests.

    with ArgoCD(kubeconfig, workdir, reach=[git.url]) as argo:      # controller + repo-server + redis
        argo.apply_application("argo-app", repo_url, "apps", "ns-a")
        argo.refresh("argo-app"); argo.wait_status("argo-app", synced=True, healthy=True, revision=sha)
    with Flux(kubeconfig, workdir) as flux:                          # source- and kustomize-controller
        flux.git_repository("repo", url); flux.kustomization("app", "repo", "./apps"); flux.request_reconcile("repo")
    with GitopsAgent(kubeconfig, workdir, repo_url, path="apps", reach=[git.url]) as agent:  # gitops-engine
        agent.pull(); agent.sync()

Each runner builds its binaries on first use (`ensure_built`, i.e. `scripts/tools.sh NAME`, cached), starts
every process in its own session with its log under `workdir`, and its `__exit__` ends them all by pid
(SIGTERM, then SIGKILL), also when start-up failed. Recipes, flags and pitfalls: PEERS-BUILD.md.

Argo CD's controller serves metrics on 0.0.0.0 and gitops-agent its API on 0.0.0.0, hard-wired. Both run
inside a loopback-only network namespace (`tidecd_dev.netns`) that relays the control plane's port and the
ports of `reach` URLs from the host's loopback, unless this process already lives in such a namespace
(`make bench` runs the whole bench in one), when they start directly. Flux binds every listener to
127.0.0.1 by flag, so it needs none.

Objects are written with server-side apply as field manager `tidecd-peers`, never `tidecd`.
"""

from __future__ import annotations

import abc
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import urlsplit

import yaml

from tidecd.base.model import ResourceKey
from tidecd.clients.cluster import ApiError, KubeCluster
from tidecd.clients.tools import MissingTool, binary
from tidecd_dev import netns
from tidecd_dev.devcluster import free_port
from tidecd_dev.processes import stop_session
from tidecd_dev.tools import SCRIPT

FIELD_MANAGER = "tidecd-peers"
NAMES = ("argocd", "gitops-agent", "source-controller", "kustomize-controller", "redis-server")
ARGOCD_REFRESH = "argocd.argoproj.io/refresh"
FLUX_REQUESTED_AT = "reconcile.fluxcd.io/requestedAt"
_SHARED = Path(__file__).resolve().parents[1]
Obj = dict[str, Any]
T = TypeVar("T")


class PeerError(RuntimeError):
    """A peer did not build, start or answer; the message says which and why (with its log's tail)."""


# -- building ----------------------------------------------------------------------------------------------


def ensure_built(name: str) -> Path:
    """The binary of peer `name`, built first by `scripts/tools.sh NAME` when missing (cached, pinned).

    tools.sh checks every tool by running it, so a broken cache entry shows here, not mid-benchmark.
    """
    if name not in NAMES:
        raise ValueError(f"unknown peer {name!r}; one of {', '.join(NAMES)}")
    if not _built(name):
        if not SCRIPT.is_file():
            raise PeerError(f"{name} is not built and there is no scripts/tools.sh to build it with")
        print(f"[peers] building {name} with scripts/tools.sh (first use; Argo CD ~5 min cold on 2 cores)",
              file=sys.stderr, flush=True)
        proc = subprocess.run(["bash", str(SCRIPT), name], stdout=sys.stderr, stderr=subprocess.PIPE, text=True,
                              check=False)
        if proc.returncode != 0 or not _built(name):
            raise PeerError(f"scripts/tools.sh {name} failed (exit {proc.returncode}): {proc.stderr[-1500:]}")
    if name == "redis-server":  # Debian's is a symlink to redis-check-rdb, which acts by argv[0]: keep the name
        return Path(binary(name))
    return Path(os.path.realpath(binary(name)))


def _built(name: str) -> bool:
    try:
        path = Path(os.path.realpath(binary(name)))
    except MissingTool:
        return False
    if name in ("argocd", "source-controller", "kustomize-controller"):
        return (path.parent / "share" / ".complete").is_file()
    return True


def share_dir(name: str) -> Path:
    """Run-time data tools.sh copied beside a peer's binary (CRDs, install.yaml, wrapper scripts)."""
    return ensure_built(name).parent / "share"


# -- processes ---------------------------------------------------------------------------------------------


@dataclass
class _Process:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass
class _Processes:
    """Processes of one runner, each in its own session; optionally all inside one loopback-only netns."""

    workdir: Path
    procs: list[_Process] = field(default_factory=list)
    holder: subprocess.Popen[bytes] | None = None
    exposed: dict[int, int] = field(default_factory=dict)

    def isolate(self, forward: Iterable[int], expose: Iterable[int]) -> None:
        """Start the namespace holder (unless this process is isolated already): relay `forward` ports in,
        `expose` ports out."""
        expose = list(expose)
        if netns.isolated():
            self.exposed = {p: p for p in expose}
            return
        ready = self.workdir / "netns.json"
        ready.unlink(missing_ok=True)
        args = [sys.executable, "-m", "tidecd_dev.netns", "hold", "--ready", str(ready)]
        args += [a for p in sorted(set(forward)) for a in ("--forward", str(p))]
        args += [a for p in expose for a in ("--expose", str(p))]
        log = self.workdir / "netns.log"
        with open(log, "ab") as out:
            self.holder = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           start_new_session=True, env=_env())
        deadline = time.monotonic() + 20
        while not ready.is_file():
            if self.holder.poll() is not None or time.monotonic() > deadline:
                raise PeerError(f"network namespace holder did not start: {_tail(log)}")
            time.sleep(0.05)
        self.exposed = {int(k): int(v) for k, v in json.loads(ready.read_text())["expose"].items()}

    def spawn(self, name: str, args: Sequence[str], env: Mapping[str, str] | None = None,
              stdout: Path | None = None) -> _Process:
        cmd = list(args)
        if self.holder is not None:
            cmd = [sys.executable, "-m", "tidecd_dev.netns", "join", str(self.holder.pid), "--", *cmd]
        log = self.workdir / f"{name}.log"
        with open(log, "ab") as err, open(stdout or log, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True,
                                    env=_env(env), cwd=self.workdir)
        entry = _Process(name, proc, log)
        self.procs.append(entry)
        return entry

    def check_alive(self) -> None:
        for p in self.procs:
            if p.proc.poll() is not None:
                raise PeerError(f"{p.name} exited with {p.proc.returncode}: {_tail(p.log)}")

    def url(self, port: int, path: str = "") -> str:
        """A URL reaching 127.0.0.1:port where the processes run (through the relay when isolated)."""
        return f"http://127.0.0.1:{self.exposed.get(port, port)}{path}"

    def wait_http(self, port: int, path: str, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                with urllib.request.urlopen(self.url(port, path), timeout=2) as resp:  # noqa: S310 - loopback
                    if resp.status < 500:
                        return
            except urllib.error.HTTPError as exc:
                if exc.code < 500:
                    return
                last = f"HTTP {exc.code}"
            except OSError as exc:
                last = str(exc)
            time.sleep(0.1)
        raise PeerError(f"{what} not serving on :{port}{path} after {timeout:.0f}s ({last})")

    def stop(self) -> None:
        for p in reversed(self.procs):
            stop_session(p.proc)
        self.procs.clear()
        if self.holder is not None:
            stop_session(self.holder)
            self.holder = None


def _env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(_SHARED), *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra or {})
    return env


def _tail(path: Path, size: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-size:]
    except OSError:
        return "(no log)"


def _port_of(url: str) -> int:
    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost"):
        raise PeerError(f"{url}: a peer in a loopback-only namespace can reach only 127.0.0.1 URLs")
    return parts.port or (443 if parts.scheme == "https" else 80)


# -- the cluster, as the peers' set-up writes it ---------------------------------------------------------------


class _Kube:
    """Apply, patch and read objects as field manager `tidecd-peers` (never tidecd's own)."""

    def __init__(self, kubeconfig: str) -> None:
        self.kube = KubeCluster.from_kubeconfig(kubeconfig)

    @property
    def server(self) -> str:
        return self.kube.server

    def apply(self, obj: Obj) -> Obj:
        key = ResourceKey.of(obj)
        res = self.kube.resource(key.group, key.kind)
        return dict(self.kube.request("PATCH", res.path(key.namespace, key.name), body=json.dumps(obj),
                                      query={"fieldManager": FIELD_MANAGER, "force": "true"},
                                      content_type="application/apply-patch+yaml", key=key))

    def apply_all(self, objs: Iterable[Obj]) -> None:
        for obj in objs:
            self.apply(obj)

    def merge_patch(self, key: ResourceKey, patch: Obj) -> Obj:
        res = self.kube.resource(key.group, key.kind)
        return dict(self.kube.request("PATCH", res.path(key.namespace, key.name), body=patch,
                                      content_type="application/merge-patch+json", key=key))

    def get(self, key: ResourceKey) -> Obj | None:
        return self.kube.get(key)

    def delete(self, key: ResourceKey) -> None:
        self.kube.delete(key)

    def namespace(self, name: str) -> None:
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def crds(self, files: Iterable[Path], timeout: float = 60.0) -> None:
        install_crds(self.kube, files, timeout=timeout)


CRD_DIGEST = "tidecd-peers/applied-digest"  # on a CRD: the digest of the file's document it was applied from


@functools.lru_cache(maxsize=16)
def _crd_documents(path: str, mtime_ns: int) -> tuple[tuple[str, str, Obj], ...]:
    """(name, digest, document) of each CRD in a file, parsed once per process (Argo CD's applicationset CRD
    is 1.5 MB of YAML: libyaml takes ~1 s for it, pure-Python PyYAML more than 10 s on a busy machine)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    found = []
    for doc in yaml.load_all(Path(path).read_text(), Loader=loader):  # noqa: S506 - a safe loader
        if doc and doc.get("kind") == "CustomResourceDefinition":
            digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]
            found.append((str(doc["metadata"]["name"]), digest, doc))
    return tuple(found)


def install_crds(kube: KubeCluster, files: Iterable[Path], *, timeout: float = 60.0) -> None:
    """Apply CRDs (server-side, as `tidecd-peers`: they are too big for the last-applied annotation) and wait
    until they are Established. A CRD already applied from the same document (its `CRD_DIGEST` annotation
    says so) is not applied again: even an apply that changes nothing costs the API server tens of seconds of
    CPU for Argo CD's CRDs on a busy machine."""
    names = []
    for path in files:
        for name, digest, doc in _crd_documents(str(path), path.stat().st_mtime_ns):
            key = ResourceKey("apiextensions.k8s.io", "CustomResourceDefinition", "", name)
            res = kube.resource(key.group, key.kind)
            try:
                meta = kube.request("GET", res.path("", name), key=key,
                                    accept="application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")
            except ApiError as exc:
                if exc.status != 404:
                    raise
                meta = {}
            if ((meta.get("metadata") or {}).get("annotations") or {}).get(CRD_DIGEST) != digest:
                notes = {**(doc["metadata"].get("annotations") or {}), CRD_DIGEST: digest}
                kube.apply_as({**doc, "metadata": {**doc["metadata"], "annotations": notes}}, FIELD_MANAGER)
            names.append(name)
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            live = kube.get(ResourceKey("apiextensions.k8s.io", "CustomResourceDefinition", "", name)) or {}
            conditions = live.get("status", {}).get("conditions") or []
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise PeerError(f"CRD {name} not Established after {timeout:.0f}s")
            time.sleep(0.1)
    kube.resources(refresh=True)


def _wait(what: str, probe: Callable[[], T | None], timeout: float, *, alive: Callable[[], None],
          describe: Callable[[], str] = lambda: "", interval: float = 0.05) -> T:
    """Poll `probe` until it returns something truthy; PeerError after `timeout` or when a process died."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        alive()
        if time.monotonic() > deadline:
            raise PeerError(f"{what}: not reached after {timeout:.0f}s {describe()}")
        time.sleep(interval)


class _Runner(abc.ABC):
    """Shared lifecycle: `with Runner(...) as r:` starts, `__exit__` stops every process."""

    workdir: Path
    procs: _Processes

    @abc.abstractmethod
    def start(self) -> None:
        """Set up the cluster side and start the processes (stopped by `stop()` also when this fails)."""

    def __enter__(self) -> Any:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        self.procs.stop()

    def logs(self, name: str, size: int = 2000) -> str:
        return _tail(self.workdir / f"{name}.log", size)

    def peak_rss(self) -> dict[str, int]:
        """Peak resident set (VmHWM, bytes) of each running process of this runner, by name."""
        return {p.name: peak_rss(p.proc.pid) for p in self.procs.procs if p.proc.poll() is None}

    def rss(self) -> dict[str, int]:
        """Resident set now (VmRSS, bytes) of each running process, by name: what it holds while idle."""
        return {p.name: rss(p.proc.pid) for p in self.procs.procs if p.proc.poll() is None}


def peak_rss(pid: int) -> int:
    """VmHWM of a process in bytes (0 when it is gone). `netns join` execs its command: same pid."""
    return _status_kib(pid, "VmHWM:") * 1024


def rss(pid: int) -> int:
    """VmRSS of a process in bytes (0 when it is gone)."""
    return _status_kib(pid, "VmRSS:") * 1024


def _status_kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


# -- Argo CD -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AppStatus:
    """What Argo CD's Application status says, flattened."""

    sync: str
    health: str
    revision: str
    operation_phase: str
    reconciled_at: str
    resources: int
    conditions: tuple[str, ...]
    operation_revision: str = ""  # what the last sync operation synced to (operationState.syncResult)

    @classmethod
    def of(cls, app: Obj) -> AppStatus:
        status = app.get("status") or {}
        return cls(sync=str(status.get("sync", {}).get("status", "")),
                   health=str(status.get("health", {}).get("status", "")),
                   revision=str(status.get("sync", {}).get("revision", "")),
                   operation_phase=str((status.get("operationState") or {}).get("phase", "")),
                   reconciled_at=str(status.get("reconciledAt", "")),
                   resources=len(status.get("resources") or []),
                   conditions=tuple(f"{c.get('type')}: {c.get('message', '')[:200]}"
                                    for c in status.get("conditions") or []),
                   operation_revision=str(((status.get("operationState") or {}).get("syncResult") or {})
                                          .get("revision", "")))


class ArgoCD(_Runner):
    """Argo CD v3.6.1's application controller and repo server (one binary) with Debian's redis.

    Set-up (idempotent, so several runners may share a cluster if each has its own `namespace`): the CRDs,
    the namespace with install.yaml's ConfigMaps and Secrets, and AppProject `default` (argocd-server
    would create it; it is not run). The controller polls every `app_resync` seconds (long by default, so
    only the triggers a caller sends reconcile) and sees only Applications in `namespace`.
    """

    VERSION = "v3.6.1"

    def __init__(self, kubeconfig: str | Path, workdir: Path, *, reach: Sequence[str] = (),
                 namespace: str = "argocd", app_resync: int = 3600, self_heal_timeout: int = 5,
                 controller_args: Sequence[str] = ()) -> None:
        self.kubeconfig, self.workdir = str(kubeconfig), Path(workdir)
        self.reach, self.namespace, self.app_resync = list(reach), namespace, app_resync
        self.self_heal_timeout, self.controller_args = self_heal_timeout, list(controller_args)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.procs = _Processes(self.workdir)
        self.kube: _Kube
        self.metrics_port = 0
        self.repo_server = ""  # host:port of the repo-server, once started
        self._env: dict[str, str] = {}

    def start(self) -> None:
        argocd, redis = ensure_built("argocd"), ensure_built("redis-server")
        share = argocd.parent / "share"
        self.kube = _Kube(self.kubeconfig)
        self.kube.crds(sorted((share / "crds").glob("*.yaml")))
        self.prepare_namespace(self.namespace)
        redis_port, repo_port, repo_metrics, metrics = free_port(), free_port(), free_port(), free_port()
        self.metrics_port = metrics  # the controller's, on 0.0.0.0 hard-wired (inside the namespace)
        forward = [_port_of(self.kube.server), *(_port_of(u) for u in self.reach)]
        self.procs.isolate(forward, expose=[repo_metrics, metrics])
        local = self.workdir / "local"
        for sub in ("tls", "ssh", "gpg/keys", "gpg/source", "tmp", "redis"):
            (local / sub).mkdir(parents=True, exist_ok=True)
        # argocd's own dir on PATH too: the repo-server's git runs `argocd` as its GIT_ASKPASS helper
        # and tidecd's helm and kustomize: the repo server runs them as Argo CD's image carries them
        tools_dir = str(Path(binary("helm")).parent)
        env = {"PATH": os.pathsep.join([str(share / "bin"), str(argocd.parent), tools_dir, os.environ.get("PATH", "")]),
               "ARGOCD_FAKE_IN_CLUSTER": "true", "ARGOCD_GPG_ENABLED": "false",
               "ARGOCD_TLS_DATA_PATH": str(local / "tls"), "ARGOCD_SSH_DATA_PATH": str(local / "ssh"),
               "ARGOCD_GNUPGHOME": str(local / "gpg/keys"), "ARGOCD_GPG_DATA_PATH": str(local / "gpg/source"),
               "ARGOCD_ASK_PASS_SOCK": str(local / "askpass.sock"), "TMPDIR": str(local / "tmp"),
               "HOME": str(local),
               # ARGOCD_FAKE_IN_CLUSTER serves https://kubernetes.default.svc from the default loading rules
               # (KUBECONFIG, else ~/.kube/config), not from --kubeconfig
               "KUBECONFIG": self.kubeconfig}
        self._env = env
        self.procs.spawn("redis", [str(redis), "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no", "--dir", str(local / "redis")])
        redis_addr = f"127.0.0.1:{redis_port}"
        self.procs.spawn("repo-server", [str(argocd), "--address", "127.0.0.1", "--port", str(repo_port),
                                         "--metrics-address", "127.0.0.1", "--metrics-port", str(repo_metrics),
                                         "--redis", redis_addr, "--disable-tls", "--client-ca-path", "",
                                         "--logformat", "text"],
                         env={**env, "ARGOCD_BINARY_NAME": "argocd-repo-server"})
        self.procs.wait_http(repo_metrics, "/metrics", "argocd repo-server")
        self.repo_server = f"127.0.0.1:{repo_port}"
        self.procs.spawn("application-controller", [
            str(argocd), "--kubeconfig", self.kubeconfig, "--namespace", self.namespace, "--redis", redis_addr,
            "--repo-server", f"127.0.0.1:{repo_port}", "--repo-server-plaintext", "--metrics-port", str(metrics),
            "--app-resync", str(self.app_resync), "--self-heal-timeout-seconds", str(self.self_heal_timeout),
            "--logformat", "text", *self.controller_args,
        ], env={**env, "ARGOCD_BINARY_NAME": "argocd-application-controller"})
        self.procs.wait_http(metrics, "/metrics", "argocd application-controller")

    def start_applicationset_controller(self, namespace: str, *, args: Sequence[str] = ()) -> None:
        """Argo CD's ApplicationSet controller (the same binary), beside the running controller and against its
        repo-server, watching ApplicationSets of `namespace` only and writing their Applications there, with
        progressive syncs enabled. `namespace` needs its own argocd-cm, AppProjects and cluster Secrets
        (`prepare_namespace`); no application controller watches it unless it is this runner's. Ended with
        the runner's other processes."""
        if not self.repo_server:
            raise PeerError("start the ArgoCD runner before its ApplicationSet controller")
        ports = [free_port() for _ in range(3)]
        self.procs.spawn(f"applicationset-controller-{namespace}", [
            str(ensure_built("argocd")), "--kubeconfig", self.kubeconfig, "--namespace", namespace,
            "--argocd-repo-server", self.repo_server, "--repo-server-plaintext",
            "--metrics-addr", f"127.0.0.1:{ports[0]}", "--probe-addr", f"127.0.0.1:{ports[1]}",
            "--webhook-addr", f"127.0.0.1:{ports[2]}", "--enable-progressive-syncs", "--logformat", "text",
            *args], env={**self._env, "ARGOCD_BINARY_NAME": "argocd-applicationset-controller"})

    def prepare_namespace(self, namespace: str) -> None:
        """Another Argo CD namespace on the same cluster: install.yaml's ConfigMaps and Secrets and AppProject
        `default` (CRDs come with `start`)."""
        self.kube.namespace(namespace)
        self.kube.apply_all(install_config(ensure_built("argocd").parent / "share" / "install.yaml", namespace))
        self.kube.apply({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
                         "metadata": {"name": "default", "namespace": namespace},
                         "spec": {"sourceRepos": ["*"], "destinations": [{"namespace": "*", "server": "*"}],
                                  "clusterResourceWhitelist": [{"group": "*", "kind": "*"}]}})

    # -- Applications --------------------------------------------------------------------------------------

    def key(self, name: str) -> ResourceKey:
        return ResourceKey("argoproj.io", "Application", self.namespace, name)

    def application_manifest(self, name: str, repo_url: str, path: str, dest_namespace: str = "", *,
                             revision: str = "main", automated: bool = True, prune: bool = True,
                             self_heal: bool = False, sync_options: Sequence[str] = ()) -> Obj:
        spec: Obj = {"project": "default",
                     "source": {"repoURL": repo_url, "targetRevision": revision, "path": path},
                     "destination": {"server": "https://kubernetes.default.svc"}}
        if dest_namespace:
            spec["destination"]["namespace"] = dest_namespace
        policy: Obj = {}
        if automated:
            policy["automated"] = {"prune": prune, "selfHeal": self_heal}
        if sync_options:
            policy["syncOptions"] = list(sync_options)
        if policy:
            spec["syncPolicy"] = policy
        return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": name, "namespace": self.namespace}, "spec": spec}

    def apply_application(self, name: str, repo_url: str, path: str, dest_namespace: str = "",
                          **options: Any) -> Obj:
        """Create or update an Application (automated sync with prune by default)."""
        return self.apply(self.application_manifest(name, repo_url, path, dest_namespace, **options))

    def apply(self, obj: Obj) -> Obj:
        """Apply any object (an Application or AppProject of this instance's namespace, a Secret, ...)."""
        return self.kube.apply(obj)

    def refresh(self, name: str, *, hard: bool = False) -> None:
        """Argo CD's natural trigger (what its webhook does): the refresh annotation."""
        self.kube.merge_patch(self.key(name), {"metadata": {"annotations": {ARGOCD_REFRESH: "hard" if hard
                                                                            else "normal"}}})

    def sync(self, name: str, *, revision: str = "", prune: bool = True) -> None:
        """An explicit sync operation (what `argocd app sync` writes)."""
        op: Obj = {"prune": prune}
        if revision:
            op["revision"] = revision
        self.kube.merge_patch(self.key(name), {"operation": {"initiatedBy": {"username": FIELD_MANAGER},
                                                             "sync": op}})

    def application(self, name: str) -> Obj | None:
        return self.kube.get(self.key(name))

    def status(self, name: str) -> AppStatus:
        app = self.application(name)
        if app is None:
            raise PeerError(f"Application {self.namespace}/{name} does not exist")
        return AppStatus.of(app)

    def wait_status(self, name: str, *, synced: bool = True, healthy: bool = True, revision: str = "",
                    timeout: float = 180.0, since: str = "") -> AppStatus:
        """Wait until the app is Synced (and Healthy) at `revision` (any when empty); with `since` (an
        earlier `reconciled_at`), also until it was reconciled again after that."""
        last: list[AppStatus] = []

        def probe() -> AppStatus | None:
            st = self.status(name)
            last[:] = [st]
            ok = ((not synced or st.sync == "Synced") and (not healthy or st.health == "Healthy")
                  and (not revision or st.revision == revision) and st.operation_phase != "Running"
                  and (not since or st.reconciled_at > since))
            return st if ok else None

        return _wait(f"Application {name} Synced/Healthy", probe, timeout, alive=self.procs.check_alive,
                     describe=lambda: f"last status {last[-1] if last else None}; controller log: "
                                      f"{self.logs('application-controller', 800)}")

    def delete_application(self, name: str, *, keep_resources: bool = True) -> None:
        """Delete the Application. `keep_resources` first drops `resources-finalizer.argocd.argoproj.io` (so
        Argo CD lets go without deleting anything); otherwise the finalizer is set, so it cascades."""
        finalizers = [] if keep_resources else ["resources-finalizer.argocd.argoproj.io"]
        self.kube.merge_patch(self.key(name), {"metadata": {"finalizers": finalizers}})
        self.kube.delete(self.key(name))


def install_config(install_yaml: Path, namespace: str) -> list[Obj]:
    """The ConfigMaps and Secrets of Argo CD's install.yaml, placed in `namespace`."""
    out = []
    for doc in yaml.safe_load_all(install_yaml.read_text()):
        if doc and doc.get("kind") in ("ConfigMap", "Secret"):
            doc["metadata"]["namespace"] = namespace
            out.append(doc)
    if not any(d["metadata"]["name"] == "argocd-cm" for d in out):
        raise PeerError(f"{install_yaml} holds no argocd-cm ConfigMap")
    return out


# -- Flux ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FluxStatus:
    ready: bool
    revision: str  # `main@sha1:<sha>`: the artifact's (GitRepository) or the last applied (Kustomization)
    handled: str  # status.lastHandledReconcileAt: the requestedAt value last acted on
    message: str

    @property
    def sha(self) -> str:
        return self.revision.rsplit(":", 1)[-1]

    @classmethod
    def of(cls, obj: Obj) -> FluxStatus:
        status = obj.get("status") or {}
        ready: Obj = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
        revision = (status.get("artifact") or {}).get("revision") or status.get("lastAppliedRevision") or ""
        return cls(ready=ready.get("status") == "True" and status.get("observedGeneration") ==
                   obj["metadata"].get("generation"), revision=str(revision),
                   handled=str(status.get("lastHandledReconcileAt", "")), message=str(ready.get("message", ""))[:300])


class Flux(_Runner):
    """Flux v1.9.6: source-controller (serving artifacts from `workdir`) and kustomize-controller.

    Both run with `RUNTIME_NAMESPACE=namespace` and `--watch-all-namespaces=false`, so several runners can
    share a cluster with one namespace each; every listener is bound to 127.0.0.1 by flag.
    """

    VERSION = "v1.9.6"
    KINDS = {"GitRepository": "source.toolkit.fluxcd.io", "Kustomization": "kustomize.toolkit.fluxcd.io"}

    def __init__(self, kubeconfig: str | Path, workdir: Path, *, namespace: str = "flux-system",
                 concurrent: int = 4, kustomize_concurrent: int = 0) -> None:
        """`concurrent` is both controllers' `--concurrent`, unless `kustomize_concurrent` sets
        kustomize-controller's apart (flux-benchmark ran source 10, kustomize 20)."""
        self.kubeconfig, self.workdir = str(kubeconfig), Path(workdir)
        self.namespace, self.concurrent = namespace, concurrent
        self.kustomize_concurrent = kustomize_concurrent or concurrent
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.procs = _Processes(self.workdir)
        self.kube: _Kube

    def start(self) -> None:
        source, kustomize = ensure_built("source-controller"), ensure_built("kustomize-controller")
        self.kube = _Kube(self.kubeconfig)
        self.kube.crds(sorted([*(source.parent / "share/crds").glob("*.yaml"),
                               *(kustomize.parent / "share/crds").glob("*.yaml")]))
        self.kube.namespace(self.namespace)
        storage, ports = self.workdir / "storage", [free_port() for _ in range(5)]
        storage.mkdir(exist_ok=True)
        env = {"KUBECONFIG": self.kubeconfig, "RUNTIME_NAMESPACE": self.namespace}
        common = ["--watch-all-namespaces=false", "--log-encoding=console"]
        self.procs.spawn("source-controller", [
            str(source), f"--storage-path={storage}", f"--storage-addr=127.0.0.1:{ports[0]}",
            f"--storage-adv-addr=127.0.0.1:{ports[0]}", f"--metrics-addr=127.0.0.1:{ports[1]}",
            f"--health-addr=127.0.0.1:{ports[2]}", f"--concurrent={self.concurrent}", *common], env=env)
        self.procs.spawn("kustomize-controller", [
            str(kustomize), f"--metrics-addr=127.0.0.1:{ports[3]}", f"--health-addr=127.0.0.1:{ports[4]}",
            f"--concurrent={self.kustomize_concurrent}", *common], env=env)
        self.procs.wait_http(ports[2], "/readyz", "source-controller")
        self.procs.wait_http(ports[4], "/readyz", "kustomize-controller")

    def key(self, kind: str, name: str) -> ResourceKey:
        return ResourceKey(self.KINDS[kind], kind, self.namespace, name)

    def git_repository(self, name: str, url: str, *, branch: str = "main", interval: str = "1h") -> Obj:
        return self.kube.apply({"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
                                "metadata": {"name": name, "namespace": self.namespace},
                                "spec": {"interval": interval, "url": url, "ref": {"branch": branch}}})

    def kustomization(self, name: str, source: str, path: str, *, prune: bool = True, interval: str = "1h",
                      wait: bool = False, target_namespace: str = "") -> Obj:
        """`wait`: Ready only once every applied object is healthy (kstatus), Flux's Synced+Healthy."""
        spec: Obj = {"interval": interval, "prune": prune, "path": path, "wait": wait,
                     "sourceRef": {"kind": "GitRepository", "name": source}}
        if target_namespace:
            spec["targetNamespace"] = target_namespace
        return self.kube.apply({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                                "metadata": {"name": name, "namespace": self.namespace}, "spec": spec})

    def request_reconcile(self, kind: str, name: str) -> str:
        """Flux's natural trigger (what its webhook receiver and `flux reconcile` do); returns the token."""
        token = f"{time.time():.6f}"
        self.kube.merge_patch(self.key(kind, name), {"metadata": {"annotations": {FLUX_REQUESTED_AT: token}}})
        return token

    def status(self, kind: str, name: str) -> FluxStatus:
        obj = self.kube.get(self.key(kind, name))
        if obj is None:
            raise PeerError(f"{kind} {self.namespace}/{name} does not exist")
        return FluxStatus.of(obj)

    def wait_ready(self, kind: str, name: str, *, sha: str = "", handled: str = "",
                   timeout: float = 180.0) -> FluxStatus:
        """Until Ready at `sha` (any when empty) and, with `handled`, after that reconcile request."""
        last: list[FluxStatus] = []

        def probe() -> FluxStatus | None:
            st = self.status(kind, name)
            last[:] = [st]
            ok = st.ready and (not sha or st.sha == sha) and (not handled or st.handled == handled)
            return st if ok else None

        return _wait(f"{kind} {name} Ready", probe, timeout, alive=self.procs.check_alive,
                     describe=lambda: f"last {last[-1] if last else None}")


# -- gitops-agent ----------------------------------------------------------------------------------------------


class GitopsAgent(_Runner):
    """The gitops-engine agent v3.6.1 (Argo CD's sync engine): syncs a local work tree, never fetches.

    The runner clones `repo_url` into `workdir/tree`; `pull()` updates it and `sync()` POSTs
    /api/v1/sync and waits for that sync's result table on the agent's stdout. It syncs once at start
    (after listing every API resource, ~10 s); `start()` returns after that first sync.

    A sync that creates a CRD and its custom resources can end Failed (the CRs: "no matches for kind":
    the sync's REST mapper was filled before the CRD existed); the next sync applies them.
    The agent's own resync timer would do that later; `sync(attempts=2)` does it at once.
    """

    VERSION = "v3.6.1"
    HEADER = "RESOURCE"
    FAILED = "Failed to synchronize cluster state"
    PHASE = re.compile(r"Updating operation state\. phase: \S* -> (\w+)")

    def __init__(self, kubeconfig: str | Path, workdir: Path, repo_url: str, *, path: str = ".",
                 reach: Sequence[str] = (), branch: str = "main", resync_seconds: int = 3600,
                 default_namespace: str = "default") -> None:
        self.kubeconfig, self.workdir, self.repo_url = str(kubeconfig), Path(workdir), repo_url
        self.path, self.reach, self.branch = path, list(reach), branch
        self.resync_seconds, self.default_namespace = resync_seconds, default_namespace
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.tree, self.stdout = self.workdir / "tree", self.workdir / "gitops-agent.out"
        self.procs = _Processes(self.workdir)
        self.port = 0
        # what was read of the agent's stdout (tables) and log (failures, phases), so polling reads only
        # what is new: the bench polls while the agent syncs, on the same 2 cores
        self._out, self._log = _Follow(self.stdout), _Follow(self.workdir / "gitops-agent.log")
        self._tables = self._failures = 0
        self._phase = ""

    def start(self) -> None:
        agent = ensure_built("gitops-agent")
        if not (self.tree / ".git").is_dir():
            _git("clone", "--quiet", "--branch", self.branch, self.repo_url, str(self.tree))
        self.port = free_port()
        server = KubeCluster.from_kubeconfig(self.kubeconfig).server
        self.procs.isolate([_port_of(server), *(_port_of(u) for u in self.reach)], expose=[self.port])
        self.stdout.write_text("")
        self._out, self._log = _Follow(self.stdout), _Follow(self._log.path, from_end=True)
        self._tables = self._failures = 0
        self.procs.spawn("gitops-agent", [
            str(agent), str(self.tree), "--path", self.path, "--kubeconfig", self.kubeconfig,
            "--port", str(self.port), "--resync-seconds", str(self.resync_seconds),
            "--default-namespace", self.default_namespace], stdout=self.stdout)
        self.wait_synced(0, timeout=180)

    def _scan(self) -> None:
        self._tables += sum(1 for line in self._out.lines() if line.startswith(self.HEADER))
        for line in self._log.lines():
            if self.FAILED in line:
                self._failures += 1
            found = self.PHASE.search(line)
            if found:
                self._phase = found.group(1)

    def syncs(self) -> int:
        """How many syncs the agent finished (result tables on its stdout)."""
        self._scan()
        return self._tables

    def failures(self) -> int:
        """How many syncs errored (the agent then logs this and prints no table)."""
        self._scan()
        return self._failures

    def last_phase(self) -> str:
        """The phase the latest sync operation reached (Succeeded, Failed, Error, Running...)."""
        self._scan()
        return self._phase

    def pull(self) -> str:
        """`git pull` into the work tree; the new HEAD."""
        _git("-C", str(self.tree), "pull", "--quiet", "--ff-only", "origin", self.branch)
        return _git("-C", str(self.tree), "rev-parse", "HEAD")

    def sync(self, timeout: float = 180.0, *, attempts: int = 1) -> int:
        """POST /api/v1/sync (it answers once the agent's loop took the request), then wait until that
        sync's result table is printed. A sync that ended Failed is sent again, up to `attempts` syncs in
        all; returns how many it took (PeerError when the last one failed too)."""
        for attempt in range(1, attempts + 1):
            before = self.syncs()
            url = self.procs.url(self.port, "/api/v1/sync")
            request = urllib.request.Request(url, data=b"", method="POST")  # noqa: S310 - loopback http
            with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 - loopback
                resp.read()
            self.wait_synced(before, timeout)
            if self.last_phase() == "Succeeded":
                return attempt
        raise PeerError(f"gitops-agent: {attempts} sync(s) ended {self.last_phase()}: "
                        f"{self.logs('gitops-agent', 1500)}")

    def wait_synced(self, before: int, timeout: float) -> None:
        failed = self.failures()

        def alive() -> None:
            self.procs.check_alive()
            if self.failures() > failed:
                raise PeerError(f"gitops-agent sync failed: {self.logs('gitops-agent', 1500)}")

        _wait("gitops-agent sync", lambda: self.syncs() > before or None, timeout, alive=alive,
              describe=lambda: f"log: {self.logs('gitops-agent', 1200)}")


class _Follow:
    """The complete lines appended to a file since the last call (a growing log, read incrementally)."""

    def __init__(self, path: Path, *, from_end: bool = False) -> None:
        self.path = path
        self.offset = path.stat().st_size if from_end and path.exists() else 0
        self.partial = b""

    def lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        self.offset += len(data)
        *complete, self.partial = (self.partial + data).split(b"\n")
        return [line.decode(errors="replace") for line in complete]


def _git(*args: str) -> str:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    proc = subprocess.run(["git", *args], capture_output=True, text=True, env=env, check=False, timeout=120)
    if proc.returncode != 0:
        raise PeerError(f"git {' '.join(args[:3])} failed: {proc.stderr.strip()[-800:]}")
    return proc.stdout.strip()


def available() -> dict[str, str]:
    """Per peer: "" when built, else why not (for the bench's rows); builds nothing."""
    out = {}
    for name in NAMES:
        out[name] = "" if _built(name) else f"not built (scripts/tools.sh {name})"
    if shutil.which("git") is None:
        out = {k: v or "git missing" for k, v in out.items()}
    return out


__all__ = ["AppStatus", "ApiError", "ArgoCD", "Flux", "FluxStatus", "GitopsAgent", "PeerError", "ensure_built",
           "install_config", "share_dir"]
