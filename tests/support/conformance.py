"""Argo CD's e2e cases run through the real Argo CD and through tidecd on one control plane, and compared.

A `Case` is files in a git repo (under the case's own directory of one suite repo), an Application spec
and steps (push a change, sync with options, change a live object). `Suite.run` plays every case at once:
each round plays the cases that only drift live objects first, then pushes all other cases' changes in one
commit, starts every case's operation in both tools (Argo CD
in namespace A, tidecd in namespace B), waits for all of them together and observes both sides. Argo CD
processes its Applications in parallel; tidecd's steps run on a few threads, one Runtime per case.

What is compared (`Observation`): the app's sync and health status, the operation's phase, its
per-resource results (kind, name, status, hook phase for hooks, sync phase), the resources' sync and
health status, and the live objects of the case's namespace, normalised (`normalise`): server-set and
tool-specific fields dropped, the namespace replaced by `NS`, generated hook names by their prefix.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tidecd.base.model import Action, ResourceKey
from tidecd.clients.cluster import ApiNotFound, KubeCluster
from tidecd.clients.store import LocalStore
from tidecd.runtime import Runtime, Settings
from tidecd.state import app as app_state
from tidecd.triggers.dispatch import reconcile_step
from tidecd.usecases.commands import SyncRequest, start_operation
from tidecd_dev.peers import ArgoCD

Obj = dict[str, Any]
REFRESH = "argocd.argoproj.io/refresh"
TERMINAL = ("Succeeded", "Failed", "Error")
ROUND_TIMEOUT = 180.0
SETTLE_SECONDS = 15.0


@dataclass(frozen=True)
class Sync:
    """An explicit sync: `argocd app sync [--prune] [--resource G:K:N]... [--sync-option O]...`."""

    prune: bool = False
    resources: tuple[tuple[str, str, str], ...] = ()  # (group, kind, name) selected; () for all
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class LivePatch:
    """A merge patch of one live object of the case's namespace (what a person's `kubectl edit` does)."""

    group: str
    kind: str
    name: str
    patch: Mapping[str, Any]


@dataclass(frozen=True)
class Step:
    """One round of a case: files changed (None removes), live objects patched, then a sync or a refresh.

    `operation`: whether an operation is expected (an explicit sync always; an automated app's sync after
    a push or a drift when True)."""

    files: Mapping[str, Any] = field(default_factory=dict)
    patches: tuple[LivePatch, ...] = ()
    sync: Sync | None = None
    operation: bool = False

    @property
    def expects_operation(self) -> bool:
        return self.sync is not None or self.operation


@dataclass(frozen=True)
class Case:
    """One ported Argo CD e2e test. `name` is the case's directory in the suite repo and (as `cf-NAME`) its
    app's name in both tools; `go_test` the Go test of argoproj/argo-cd it ports."""

    name: str
    go_test: str
    files: Mapping[str, Any]
    steps: tuple[Step, ...] = (Step(sync=Sync()),)
    path: str = ""  # the source's path under the case's directory
    source: Mapping[str, Any] = field(default_factory=dict)  # more source fields (helm, kustomize, ...)
    spec: Mapping[str, Any] = field(default_factory=dict)  # more spec fields; "@REPO@"/"@DIR@" substituted
    create_namespace: bool = True  # False: the destination namespace does not exist before the sync
    progressing: bool = False  # stays Progressing in both tools (no controller for a kind): settle skips it

    @property
    def app(self) -> str:
        return f"cf-{self.name}"


@dataclass(frozen=True)
class Observation:
    sync: str
    health: str
    phase: str  # the last operation's phase, "" when none ran
    results: tuple[tuple[str, ...], ...]  # sorted (kind, name, status, hook phase or apply verb, sync phase)
    resources: tuple[tuple[str, ...], ...]  # sorted (kind, name, sync status): Argo CD v3 keeps each
    # resource's health out of the Application (controller.resource.health.persist), so the app's is compared
    live: Mapping[str, Any]  # "Kind/name" -> the normalised object
    note: str = ""  # not compared: the operation's message and the app's conditions, for the report

    def differences(self, other: Observation) -> dict[str, str]:
        """Aspect -> what differs (this is Argo CD's side, `other` tidecd's)."""
        out: dict[str, str] = {}
        for aspect in ("sync", "health", "phase", "results", "resources"):
            mine, theirs = getattr(self, aspect), getattr(other, aspect)
            if aspect == "results":
                theirs = server_side(mine, theirs)
            if mine != theirs:
                out[aspect] = f"argocd {mine!r} | tidecd {theirs!r}"
        if self.live != other.live:
            keys = sorted(set(self.live) | set(other.live))
            details = [f"{k}: argocd {json.dumps(self.live.get(k), sort_keys=True)} | tidecd "
                       f"{json.dumps(other.live.get(k), sort_keys=True)}"
                       for k in keys if self.live.get(k) != other.live.get(k)]
            out["live"] = "; ".join(details)
        return out


@dataclass(frozen=True)
class Outcome:
    """A case's result: per round, Argo CD's and tidecd's observations."""

    case: Case
    rounds: tuple[tuple[Observation, Observation], ...]
    error: str = ""  # what a tidecd step raised

    def notes(self) -> list[str]:
        """Per round, each tool's operation message and conditions (the report's context, never compared)."""
        return [f"round {i}: argocd {argo.note} | tidecd {tide.note}" for i, (argo, tide) in enumerate(self.rounds)]

    def differences(self) -> dict[str, str]:
        """Aspect -> the first round's difference in it (empty when both tools agree throughout)."""
        out: dict[str, str] = {"error": self.error} if self.error else {}
        for index, (argo, tide) in enumerate(self.rounds):
            for aspect, text in argo.differences(tide).items():
                out.setdefault(aspect, f"round {index}: {text}")
        return out


# -- normalising ----------------------------------------------------------------------------------------------

LISTED = (("", "ConfigMap"), ("", "Secret"), ("", "Service"), ("", "ServiceAccount"), ("", "Pod"),
          ("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "ReplicaSet"), ("batch", "Job"),
          ("rbac.authorization.k8s.io", "Role"), ("rbac.authorization.k8s.io", "RoleBinding"),
          ("networking.k8s.io", "Ingress"), ("policy", "PodDisruptionBudget"))
SERVER_META = ("uid", "resourceVersion", "managedFields", "creationTimestamp", "generation", "selfLink",
               "namespace", "ownerReferences", "deletionTimestamp", "deletionGracePeriodSeconds")
TOOL_ANNOTATIONS = ("argocd.argoproj.io/tracking-id", "kubectl.kubernetes.io/last-applied-configuration",
                    "deployment.kubernetes.io/revision")
# Argo CD marks the namespace its managedNamespaceMetadata writes so that it applies it server-side
# (controller/sync_namespace.go); tidecd applies everything server-side and needs no mark
NAMESPACE_MARKS = {"argocd.argoproj.io/sync-options": "ServerSideApply=true"}
TOOL_PREFIXES = ("tidecd.io/", "tidecd.dev/")
UID_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid")
# the API server copies a Job's pod template labels to the Job when it has none: Argo CD's (annotation
# tracking) has none, tidecd's has its `tidecd.io/app` label (docs/argocd-compatibility.md)
JOB_NAME_LABELS = ("job-name", "batch.kubernetes.io/job-name")
SKIPPED_OBJECTS = {("ConfigMap", "kube-root-ca.crt"), ("ServiceAccount", "default")}


def _clean_map(values: Mapping[str, str] | None, drop: Iterable[str] = ()) -> dict[str, str]:
    gone = set(drop)
    return {k: v for k, v in (values or {}).items()
            if k not in gone and k not in TOOL_ANNOTATIONS and not k.startswith(TOOL_PREFIXES)}


def _replace(value: Any, namespace: str) -> Any:
    if isinstance(value, str):
        return value.replace(namespace, "NS")
    if isinstance(value, list):
        return [_replace(v, namespace) for v in value]
    if isinstance(value, dict):
        return {_replace(k, namespace): _replace(v, namespace) for k, v in value.items()}
    return value


def normalise(obj: Obj, namespace: str, name: str) -> Obj:
    """`obj` without what the API server, controllers and the managing tool set, under `name`."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in SERVER_META}
    meta["name"] = name
    meta["labels"] = _clean_map(meta.get("labels"), UID_LABELS + (JOB_NAME_LABELS if obj.get("kind") == "Job" else ()))
    meta["annotations"] = _clean_map(meta.get("annotations"))
    if obj.get("kind") == "Namespace":
        meta["annotations"] = {k: v for k, v in meta["annotations"].items() if NAMESPACE_MARKS.get(k) != v}
    out: Obj = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    out["metadata"] = {k: v for k, v in meta.items() if v not in ({}, None)}
    spec = out.get("spec")
    kind = obj.get("kind")
    if isinstance(spec, dict):
        spec = dict(spec)
        if kind == "Service":  # addresses and node ports the API server allocates
            for key in ("clusterIP", "clusterIPs"):
                spec.pop(key, None)
            spec["ports"] = [{k: v for k, v in port.items() if k != "nodePort"} for port in spec.get("ports") or []]
        elif kind == "Job":
            spec.pop("selector", None)
            template = dict(spec.get("template") or {})
            labels = _clean_map((template.get("metadata") or {}).get("labels"), UID_LABELS)
            real = obj["metadata"].get("name")  # the job-name labels: the Job's name, as it is shown
            labels = {k: name if k in JOB_NAME_LABELS and v == real else v for k, v in labels.items()}
            template["metadata"] = {**(template.get("metadata") or {}), "labels": labels}
            spec["template"] = template
        elif kind == "Pod":  # what the case wrote; the scheduler, kwok and the token volume add the rest
            spec = {"restartPolicy": spec.get("restartPolicy"),
                    "containers": [{k: c.get(k) for k in ("name", "image", "command", "args")}
                                   for c in spec.get("containers") or []]}
        out["spec"] = spec
    return dict(_replace(out, namespace))


GENERATED = re.compile(r"(^|-)[0-9a-f]{7}-(presync|sync|postsync|syncfail|skip)-[0-9]+$")


class Names:
    """How a generated object name is compared: a hook's `generateName` plus what each tool appends becomes
    the prefix and `*`, and a hook named by the tool (gitops-engine's `<revision>-<phase>-<time>` suffix)
    the same with that suffix; every other name as it is."""

    def __init__(self, docs: Iterable[Obj], namespace: str = "") -> None:
        self.prefixes = {str(d["metadata"]["generateName"]) for d in docs
                         if (d.get("metadata") or {}).get("generateName")}
        self.namespace = namespace

    def within(self, namespace: str) -> Names:
        """These names, and the tool's own namespace (a CreateNamespace=true result) shown as `NS`, as in
        the live objects."""
        out = Names([], namespace)
        out.prefixes = self.prefixes
        return out

    def __call__(self, name: str) -> str:
        if self.namespace and name == self.namespace:
            return "NS"
        for prefix in sorted(self.prefixes, key=len, reverse=True):
            if name.startswith(prefix):
                return prefix + "*"
        return GENERATED.sub(r"\1*", name)


def documents(files: Mapping[str, Any]) -> list[Obj]:
    """Every Kubernetes object written in a case's files (YAML or JSON; templates are skipped)."""
    out: list[Obj] = []
    for content in files.values():
        docs: Iterable[Any]
        if content is None:
            continue
        if isinstance(content, str):
            try:
                docs = list(yaml.safe_load_all(content))
            except yaml.YAMLError:
                continue
        else:
            docs = content if isinstance(content, list) else [content]
        out += [d for d in docs if isinstance(d, dict) and "kind" in d and isinstance(d.get("metadata"), dict)]
    return out


# -- observing ---------------------------------------------------------------------------------------------

def live_objects(kube: KubeCluster, namespaces: set[str],
                 kinds: Iterable[tuple[str, str]] = LISTED) -> dict[str, dict[str, Obj]]:
    """Namespace -> "Kind/name" -> object, for the kinds the cases write, one list call per kind."""
    out: dict[str, dict[str, Obj]] = {ns: {} for ns in namespaces}
    for group, kind in kinds:
        for obj in kube.list(group, kind):
            meta = obj["metadata"]
            ns = meta.get("namespace", "")
            if ns not in out or (kind, meta["name"]) in SKIPPED_OBJECTS:
                continue
            if kind in ("Pod", "ReplicaSet") and meta.get("ownerReferences"):
                continue  # a controller's pod or replica set (Deployment, ReplicaSet, Job): its owner is compared
            if kind == "Secret" and obj.get("type") == "kubernetes.io/service-account-token":
                continue
            out[ns][f"{kind}/{meta['name']}"] = {**obj, "kind": kind}
    for obj in kube.list("", "Namespace"):
        name = obj["metadata"]["name"]
        if name in out:
            out[name][f"Namespace/{name}"] = {**obj, "kind": "Namespace"}
    return out


def _live(objects: Mapping[str, Obj], namespace: str, names: Names) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, obj in objects.items():
        kind, name = key.split("/", 1)
        shown = "NS" if kind == "Namespace" else names(name)
        out[f"{kind}/{shown}"] = normalise(obj, namespace, shown)
    return out


def argo_observation(app: Obj | None, objects: Mapping[str, Obj], namespace: str, names: Names) -> Observation:
    names = names.within(namespace)
    status = (app or {}).get("status") or {}
    op = status.get("operationState") or {}
    results = tuple(sorted(
        (str(r.get("kind", "")), names(str(r.get("name", ""))), str(r.get("status", "")),
         str(r.get("hookPhase", "")) if r.get("hookType") else _verb(r), str(r.get("syncPhase", "")))
        for r in (op.get("syncResult") or {}).get("resources") or []))
    resources = tuple(sorted(  # a hook is listed with no status: not a resource of the app
        (str(r.get("kind", "")), names(str(r.get("name", ""))), str(r.get("status", "")))
        for r in status.get("resources") or [] if r.get("status")))
    conditions = "; ".join(f"{c.get('type')}: {c.get('message', '')}" for c in status.get("conditions") or [])
    return Observation(sync=str((status.get("sync") or {}).get("status", "")),
                       health=str((status.get("health") or {}).get("status", "")),
                       phase=str(op.get("phase", "")), results=results, resources=resources,
                       live=_live(objects, namespace, names),
                       note=f"operation: {op.get('message', '')!r}; conditions: {conditions!r}; results: "
                            + "; ".join(f"{r.get('kind')}/{r.get('name')}: {r.get('message', '')}"
                                        for r in (op.get("syncResult") or {}).get("resources") or []))


APPLY_MESSAGE = re.compile(r"^\S+/\S+ (created|configured|unchanged|replaced|serverside-applied)$")
SERVER_SIDE = "serverside-applied"


def server_side(argo: tuple[tuple[str, ...], ...], tide: tuple[tuple[str, ...], ...]) -> tuple[tuple[str, ...], ...]:
    """tidecd's results with the apply word of each resource Argo CD applied server-side replaced by Argo CD's:
    its result then reads `serverside-applied`, which says neither created nor configured, and tidecd (which
    always applies server-side) says which. Every other field still has to agree."""
    applied = {(r[0], r[1], r[2], r[4]) for r in argo if r[3] == SERVER_SIDE}
    return tuple(sorted((r[0], r[1], r[2], SERVER_SIDE, r[4])
                        if (r[0], r[1], r[2], r[4]) in applied and r[3] in ("created", "configured") else r
                        for r in tide))


# gitops-engine writes a Role, RoleBinding, ClusterRole or ClusterRoleBinding with `kubectl auth reconcile`
# and then applies it: the message starts with the reconcile's report, which says the object was created
RECONCILED_CREATE = re.compile(r"^\S+/\S+ reconciled\. reconciliation required create\b")


def _verb(result: Obj) -> str:
    """What Argo CD's apply did to a resource, from its message (`configmap/my-map created`; an RBAC object
    that `kubectl auth reconcile` created: `role.rbac.authorization.k8s.io/x reconciled. reconciliation
    required create ... configured`)."""
    if result.get("status") != "Synced":
        return ""
    message = str(result.get("message", ""))
    if RECONCILED_CREATE.match(message):
        return "created"
    found = APPLY_MESSAGE.match(message)
    return found.group(1) if found else ""


RESULT_STATUS = {Action.FAILED: "SyncFailed", Action.PRUNED: "Pruned", Action.PRUNE_SKIPPED: "PruneSkipped"}


def _tide_verb(result: app_state.TaskResult) -> str:
    """What tidecd's apply did, shown where Argo CD's result still shows it: gitops-engine replaces the apply
    message of a resource that turns Degraded during a multi-step sync with its health message
    (`setResourceResult` in `Sync`), so a resource tidecd judged Degraded shows no apply word either."""
    if result.action in RESULT_STATUS or result.action is Action.SKIPPED:
        return ""
    if not result.hook and result.phase is app_state.TaskPhase.FAILED:
        return ""
    return "replaced" if result.message == "replaced" else result.action.value


def tide_observation(state: app_state.AppState, objects: Mapping[str, Obj], namespace: str,
                     names: Names) -> Observation:
    names = names.within(namespace)
    op = state.operation
    results = tuple(sorted(
        (r.key.kind, names(r.key.name), RESULT_STATUS.get(r.action, "Synced"),
         r.phase.value if r.hook else _tide_verb(r), r.sync_phase)
        for r in (op.results if op else [])))
    resources = tuple(sorted((r.kind, names(r.name), r.status.value) for r in state.resources))
    conditions = "; ".join(f"{c.get('type')}: {c.get('message', '')}" for c in state.conditions)
    return Observation(sync=state.sync_status.value, health=state.health.value,
                       phase=op.phase.value if op else "", results=results, resources=resources,
                       live=_live(objects, namespace, names),
                       note=f"operation: {op.message if op else ''!r}; conditions: {conditions!r}")


# -- running --------------------------------------------------------------------------------------------------

def substitute(value: Any, values: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        for key, replacement in values.items():
            value = value.replace(key, replacement)
        return value
    if isinstance(value, list):
        return [substitute(v, values) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, values) for k, v in value.items()}
    return value


@dataclass
class _Track:
    """Argo CD's side of one case in one round: what was asked, and the operation before it."""

    app: str
    started: str  # operationState.startedAt before the round
    expect_operation: bool
    refreshed: bool
    synced: bool


class Suite:
    """Every case through both tools. `repo` is a GitRepo of the session's git server (`write`, `remove`,
    `commit`, `push`, `url`); `workdir` holds tidecd's config and store."""

    def __init__(self, cases: Iterable[Case], *, argo: ArgoCD, kube: KubeCluster, kubeconfig: str, repo: Any,
                 workdir: Path, threads: int = 4, charts_url: str = "",
                 kinds: Iterable[tuple[str, str]] = LISTED) -> None:
        self.cases = list(cases)
        self.charts_url, self.kinds = charts_url, tuple(kinds)
        self.argo, self.kube, self.kubeconfig, self.repo = argo, kube, kubeconfig, repo
        self.config_dir, self.store = workdir / "config", LocalStore(workdir / "store")
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.threads = threads
        token = uuid.uuid4().hex[:6]
        self.ns = {c.name: (f"cfa-{token}-{i}", f"cfb-{token}-{i}") for i, c in enumerate(self.cases)}
        self.names = {c.name: Names(documents(c.files) + [d for s in c.steps for d in documents(s.files)])
                      for c in self.cases}
        self.timings: list[float] = []
        self.errors: dict[str, str] = {}  # case -> the exception a tidecd step raised
        self.finished: dict[str, Obj] = {}  # app -> the operationState Argo CD finished in this round

    @property
    def namespaces(self) -> set[str]:
        return {ns for pair in self.ns.values() for ns in pair}

    def runtime(self) -> Runtime:
        return Runtime(settings=Settings(config=str(self.config_dir), store=str(self.store.root),
                                         kubeconfig=self.kubeconfig), store=self.store)

    def values(self, case: Case) -> dict[str, str]:
        """What a case's spec, source and files name by placeholder: the suite's git repo, the case's
        directory in it, and the session's helm repository."""
        return {"@REPO@": self.repo.url, "@DIR@": case.name, "@CHARTS@": self.charts_url}

    def application(self, case: Case, namespace: str) -> Obj:
        values = self.values(case)
        path = f"{case.name}/{case.path}".rstrip("/")
        spec: Obj = {"project": "default", "destination": {"name": "in-cluster", "namespace": namespace}}
        extra = substitute(dict(case.spec), values)
        if "sources" not in extra:
            spec["source"] = {"repoURL": self.repo.url, "targetRevision": "main", "path": path,
                              **substitute(dict(case.source), values)}
        spec.update(extra)
        return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": case.app},
                "spec": spec}

    # -- the run ---------------------------------------------------------------------------------------------

    def run(self) -> list[Outcome]:
        rounds = max(len(c.steps) for c in self.cases)
        observed: dict[str, list[tuple[Observation, Observation]]] = {c.name: [] for c in self.cases}
        self._push({f"{c.name}/{path}": substitute(content, self.values(c)) for c in self.cases
                    for path, content in c.files.items()}, "conformance cases")
        for case in self.cases:
            argo_ns, tide_ns = self.ns[case.name]
            if case.create_namespace:
                for ns in (argo_ns, tide_ns):
                    self.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            app = self.application(case, tide_ns)
            (self.config_dir / f"{case.app}.yaml").write_text(yaml.safe_dump(app))
        for index in range(rounds):
            start = time.monotonic()
            active = [c for c in self.cases if index < len(c.steps)]
            for case, argo, tide in self._round(index, active):
                observed[case.name].append((argo, tide))
            self.timings.append(time.monotonic() - start)
        return [Outcome(c, tuple(observed[c.name]), self.errors.get(c.name, "")) for c in self.cases]

    def _push(self, files: Mapping[str, Any], message: str) -> None:
        if not files:
            return
        self.repo.write_files(files)
        self.repo.commit(message)
        self.repo.push()

    def _round(self, index: int, cases: list[Case]) -> list[tuple[Case, Observation, Observation]]:
        """One round of every case: first the cases that only change live objects (a drift, as Argo CD's
        self-heal tests make it: nothing is pushed), so both tools see them at the revision they synced; then
        one commit of every other case's files, and those cases. The suite's cases share one repository, so
        that commit would otherwise move the revision of a drift case too: tidecd would sync the new commit
        whole where Argo CD's controller, refreshed by the watch at its last compared revision, self-heals
        only what drifted."""
        steps = {c.name: c.steps[index] for c in cases}
        self.finished = {}
        drifts = [c for c in cases if steps[c.name].patches and not steps[c.name].files and steps[c.name].sync is None]
        self._play(index, drifts, steps)
        rest = [c for c in cases if c not in drifts]
        self._push({f"{c.name}/{p}": v for c in rest for p, v in steps[c.name].files.items()}, f"round {index}")
        self._play(index, rest, steps)
        self._settle(cases)
        objects = live_objects(self.kube, self.namespaces, self.kinds)
        out = []
        for case in cases:
            argo_ns, tide_ns = self.ns[case.name]
            names = self.names[case.name]
            argo = argo_observation(self._argo_round(case.app), objects[argo_ns], argo_ns, names)
            state = app_state.load(self.store, case.app)[0]
            out.append((case, argo, tide_observation(state, objects[tide_ns], tide_ns, names)))
        return out

    def _play(self, index: int, cases: list[Case], steps: Mapping[str, Step]) -> None:
        """Patch the cases' live objects, then start and finish their round in both tools at once."""
        if not cases:
            return
        for case in cases:
            for patch in steps[case.name].patches:
                for ns in self.ns[case.name]:
                    key = ResourceKey(patch.group, patch.kind, ns, patch.name)
                    res = self.kube.resource(key.group, key.kind)
                    with contextlib.suppress(ApiNotFound):  # that tool did not create it: the live objects show it
                        self.kube.request("PATCH", res.path(ns, patch.name), body=dict(patch.patch),
                                          content_type="application/merge-patch+json", key=key)
        tracks = [self._start_argo(case, steps[case.name], index) for case in cases]
        with ThreadPoolExecutor(max_workers=self.threads) as pool:
            futures = [pool.submit(self._tide, case, steps[case.name]) for case in cases]
            self._wait_argo(tracks)
            for future in futures:
                future.result()

    # -- Argo CD's side --------------------------------------------------------------------------------------

    def _start_argo(self, case: Case, step: Step, index: int) -> _Track:
        argo_ns = self.ns[case.name][0]
        if index == 0:
            manifest = self.application(case, argo_ns)
            manifest["metadata"]["namespace"] = self.argo.namespace
            self.argo.apply(manifest)
        before = self.argo.application(case.app) or {}
        started = str(((before.get("status") or {}).get("operationState") or {}).get("startedAt", ""))
        track = _Track(case.app, started, step.expects_operation, refreshed=False, synced=False)
        if step.sync is not None:
            sync: Obj = {"prune": step.sync.prune}
            if step.sync.resources:
                sync["resources"] = [{"group": g, "kind": k, "name": n} for g, k, n in step.sync.resources]
            # as argocd-server's Sync fills the operation (server/application.go): the request's sync options,
            # else the app's `syncPolicy.syncOptions` (the controller reads CreateNamespace=true, ServerSideApply=true
            # ... from the operation only; an operation written without them creates no namespace)
            options = list(step.sync.options) or list((case.spec.get("syncPolicy") or {}).get("syncOptions") or [])
            if options:
                sync["syncOptions"] = options
            self.argo.kube.merge_patch(self.argo.key(case.app), {"operation": {
                "initiatedBy": {"username": "conformance"}, "sync": sync}})
            track.synced = True
        elif index > 0 and (step.files or step.patches):
            self.argo.refresh(case.app)
            track.refreshed = True
        return track

    def _argo_done(self, track: _Track, app: Obj | None) -> bool:
        if app is None:
            return False
        notes = app["metadata"].get("annotations") or {}
        if (track.synced and app.get("operation")) or (track.refreshed and REFRESH in notes):
            return False
        status = app.get("status") or {}
        if not track.expect_operation:
            return bool(status.get("reconciledAt"))
        op = status.get("operationState") or {}
        if not op or op.get("startedAt") == track.started or op.get("phase") not in TERMINAL:
            return False
        return str(status.get("reconciledAt", "")) >= str(op.get("finishedAt", ""))

    def _argo_round(self, app: str) -> Obj | None:
        """The Application now, with the operation this round started: under load Argo CD's self-heal can run
        a second, Deployment-only sync at the same revision before the round is observed (a CI run's
        self-heal-enabled case), and `operationState` keeps only the latest operation."""
        current = self.argo.application(app)
        if current is None or app not in self.finished:
            return current
        return {**current, "status": {**(current.get("status") or {}), "operationState": self.finished[app]}}

    def _wait_argo(self, tracks: list[_Track]) -> None:
        deadline = time.monotonic() + ROUND_TIMEOUT
        waiting = {t.app: t for t in tracks}
        while waiting and time.monotonic() < deadline:
            apps = {a["metadata"]["name"]: a for a in self.kube.list("argoproj.io", "Application",
                                                                      namespace=self.argo.namespace)}
            for name in [n for n, t in waiting.items() if self._argo_done(t, apps.get(n))]:
                operation = (apps[name].get("status") or {}).get("operationState")
                if waiting[name].expect_operation and operation:
                    self.finished[name] = operation
                del waiting[name]
            self.argo.procs.check_alive()
            time.sleep(0.3)

    # -- tidecd's side ---------------------------------------------------------------------------------------

    def _tide(self, case: Case, step: Step) -> None:
        try:
            self._tide_steps(case, step)
        except Exception as exc:  # noqa: BLE001 - a case's error is its outcome, the other cases go on
            self.errors.setdefault(case.name, f"{type(exc).__name__}: {exc}")

    def _tide_steps(self, case: Case, step: Step) -> None:
        runtime = self.runtime()
        if step.sync is not None:
            ns = self.ns[case.name][1]
            keys = frozenset(ResourceKey(g, k, ns, n) for g, k, n in step.sync.resources) or None
            start_operation(runtime, case.app, SyncRequest(prune=step.sync.prune, resources=keys,
                                                           sync_options=step.sync.options,
                                                           initiated_by="conformance"))
        deadline = time.monotonic() + ROUND_TIMEOUT
        while time.monotonic() < deadline:
            outcome = reconcile_step(runtime, case.app, automate=True, budget=2.0)
            op = outcome.state.operation if outcome.state else None
            if op is None or not op.running:
                break
            time.sleep(min(outcome.continue_after or 0.2, 0.5))
        reconcile_step(runtime, case.app, automate=False, budget=2.0)  # the status after the operation

    def _settle(self, cases: list[Case]) -> None:
        """Until no app reads Progressing in either tool (a rollout kwok completes in a moment), for at most
        `SETTLE_SECONDS`: Argo CD keeps watching; tidecd's status moves when a step runs."""
        deadline = time.monotonic() + SETTLE_SECONDS
        pending = [c for c in cases if not c.progressing]
        while pending and time.monotonic() < deadline:
            runtime = self.runtime()
            left = []
            for case in pending:
                argo = ((self.argo.application(case.app) or {}).get("status") or {}).get("health") or {}
                state = app_state.load(self.store, case.app)[0]
                if argo.get("status") == "Progressing" or state.health.value == "Progressing":
                    reconcile_step(runtime, case.app, automate=False, budget=1.0)
                    left.append(case)
            pending = left
            if pending:
                time.sleep(1.0)


PLACEHOLDER = re.compile(r"\$ARGOCD_[A-Z_]+|\$\{ARGOCD_[A-Z_]+\}")


def placeholders(store_root: Path, live: Iterable[Obj]) -> list[str]:
    """Every `$ARGOCD_...` left in a manifest tidecd rendered (the store's `manifests/`) or in a live object."""
    found = []
    for path in sorted((store_root / "manifests").rglob("*")):
        if path.is_file():
            for match in PLACEHOLDER.findall(path.read_text(errors="replace")):
                found.append(f"{path.relative_to(store_root)}: {match}")
    for obj in live:
        for match in PLACEHOLDER.findall(json.dumps(obj)):
            found.append(f"{obj.get('kind')}/{obj['metadata']['name']} in {obj['metadata'].get('namespace')}: "
                         f"{match}")
    return found
