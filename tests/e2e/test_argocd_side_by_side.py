"""tidecd beside the real Argo CD v3.6.1 on one control plane (issue 18, acceptance 1 and 2).

1. Argo CD and tidecd each run an Application of the same name, automated with prune, in one namespace.
   Three rounds of pushes change both apps' objects and drop one object of each, which each tool prunes.
   A watch records every change in the namespace. Neither tool ever deletes or writes the other's
   objects (uids, resourceVersions, field managers), and neither status claims the other's objects.
2. An Argo CD-managed app of 20 objects is adopted by `tidecd app adopt`. Every uid stays, tidecd
   reports Synced with 0 writes beyond the marks, and deleting the Argo CD Application after removing
   its finalizer deletes nothing.

The `argocd` fixture (tests/support/peers.py) builds Argo CD with scripts/tools.sh when it is missing
(cached), and never skips. One Argo CD serves the session; it polls hourly, so only these tests'
refreshes and syncs make it reconcile.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.e2e.test_adopt import count_writes, managers, written
from tests.support.apps import GitOps, configmap, deployment, service
from tidecd.base.model import ResourceKey
from tidecd.cli import app as tidecd_cli
from tidecd_dev.peers import ArgoCD

pytestmark = pytest.mark.e2e

ARGO_MANAGERS = {"argocd-controller", "argocd-application-controller"}


class Watch:
    """Every ADDED / MODIFIED / DELETED event of ConfigMaps and Deployments in one namespace."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        from kubernetes import client

        self.events: list[tuple[str, str, str, dict[str, Any]]] = []  # (type, kind, name, object)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
        self._threads = [threading.Thread(target=self._run, args=(lister, namespace, kind), daemon=True)
                         for lister, kind in ((core.list_namespaced_config_map, "ConfigMap"),
                                              (apps.list_namespaced_deployment, "Deployment"))]
        for thread in self._threads:
            thread.start()

    def _run(self, lister: Any, namespace: str, kind: str) -> None:
        from kubernetes import watch

        since = str(lister(namespace).metadata.resource_version)  # every change after this list, none lost
        while not self._stop.is_set():
            stream = watch.Watch()  # type: ignore[no-untyped-call]
            for event in stream.stream(lister, namespace, resource_version=since,  # type: ignore[no-untyped-call]
                                       timeout_seconds=2):
                obj = event["raw_object"]
                since = str(obj["metadata"].get("resourceVersion") or since)
                with self._lock:
                    self.events.append((event["type"], kind, obj["metadata"]["name"], obj))
                if self._stop.is_set():
                    stream.stop()  # type: ignore[no-untyped-call]
                    break

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def of(self, prefix: str) -> list[tuple[str, str, str, dict[str, Any]]]:
        with self._lock:
            return [e for e in self.events if e[2].startswith(prefix)]


@pytest.fixture()
def watch(api_client: Any, namespace: str) -> Iterator[Watch]:
    w = Watch(api_client, namespace)
    yield w
    w.stop()


def objects(prefix: str, round_: int) -> dict[str, Any]:
    """An app's files in round `round_`: 3 ConfigMaps and a Deployment that change, and one extra
    ConfigMap per round, gone (pruned) in the next."""
    files: dict[str, Any] = {f"{prefix}/cm-{i}.yaml": configmap(f"{prefix}-cm-{i}", {"round": str(round_)})
                             for i in range(3)}
    files[f"{prefix}/web.yaml"] = deployment(f"{prefix}-web", replicas=1, image=f"nginx:1.{20 + round_}")
    files[f"{prefix}/extra.yaml"] = configmap(f"{prefix}-extra-{round_}")
    return files


def owners(obj: dict[str, Any]) -> set[str]:
    return managers(obj) - {"kube-controller-manager", "kwok"}


def test_argocd_and_tidecd_side_by_side_never_touch_each_others_objects(
        argocd: ArgoCD, gitops: GitOps, watch: Watch) -> None:
    name = gitops.real("dual")
    ns = gitops.namespace
    gitops.application("dual", path="tide", automated={"prune": True, "selfHeal": True})
    argocd.apply_application(name, gitops.repo.url, "argo", ns, automated=True, prune=True, self_heal=True)
    uids: dict[str, str] = {}
    timings = []
    for round_ in range(3):
        sha = gitops.push({**objects("argo", round_), **objects("tide", round_)}, f"round {round_}")
        start = time.monotonic()
        gitops.reconcile("dual")  # tidecd: automated sync with prune
        tide_cms = {n: gitops.live("ConfigMap", f"tide-cm-{n}") for n in range(3)}
        argocd.refresh(name)
        status = argocd.wait_status(name, revision=sha, healthy=False)
        timings.append(time.monotonic() - start)
        # Argo CD's sync wrote none of tidecd's ConfigMaps (no controller touches them either)
        for n, before in tide_cms.items():
            now = gitops.live("ConfigMap", f"tide-cm-{n}")
            assert before is not None and now is not None
            assert now["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        gitops.reconcile("dual")  # tidecd again after Argo CD: nothing of its own moved
        assert gitops.state("dual").sync_status == "Synced"
        for tool in ("argo", "tide"):
            for kind, obj_name in [("ConfigMap", f"{tool}-cm-{i}") for i in range(3)] + \
                                  [("Deployment", f"{tool}-web"), ("ConfigMap", f"{tool}-extra-{round_}")]:
                live = gitops.live(kind, obj_name, "apps" if kind == "Deployment" else "")
                assert live is not None, f"{kind} {obj_name} missing after round {round_}"
                uids.setdefault(obj_name, live["metadata"]["uid"])
                assert live["metadata"]["uid"] == uids[obj_name], f"{obj_name} was re-created"
                notes = live["metadata"].get("annotations") or {}
                if tool == "tide":
                    assert not owners(live) & ARGO_MANAGERS and "argocd.argoproj.io/tracking-id" not in notes
                else:
                    assert "tidecd" not in owners(live) and "tidecd.io/tracking-id" not in notes
            if round_:
                gone = gitops.live("ConfigMap", f"{tool}-extra-{round_ - 1}")
                assert gone is None, f"{tool}'s extra of round {round_ - 1} not pruned"
        # neither status claims the other's objects
        app = argocd.application(name)
        assert app is not None
        tracked = {r["name"] for r in app["status"].get("resources") or []}
        assert tracked == {"argo-cm-0", "argo-cm-1", "argo-cm-2", "argo-web", f"argo-extra-{round_}"}, tracked
        assert not [c for c in status.conditions if "SharedResource" in c], status.conditions
        state = gitops.state("dual")
        assert {r.name for r in state.resources} == {"tide-cm-0", "tide-cm-1", "tide-cm-2", "tide-web",
                                                     f"tide-extra-{round_}"}
        assert not [c for c in state.conditions if c["type"] == "SharedResourceWarning"]
    # the watch saw every change: each tool deleted only its own extras, and no event ever showed one
    # tool's field manager on the other's object
    deleted = sorted(e[2] for e in watch.events if e[0] == "DELETED")
    assert deleted == ["argo-extra-0", "argo-extra-1", "tide-extra-0", "tide-extra-1"], deleted
    for _, _, obj_name, obj in watch.of("tide-"):
        assert not owners(obj) & ARGO_MANAGERS, (obj_name, owners(obj))
    for _, _, obj_name, obj in watch.of("argo-"):
        assert "tidecd" not in owners(obj), (obj_name, owners(obj))
    argocd.delete_application(name, keep_resources=True)
    print(f"side by side: 3 rounds, {len(watch.events)} watch events, per round {[f'{t:.1f}' for t in timings]} s")


def test_an_argocd_app_of_20_objects_is_adopted_in_place(
        argocd: ArgoCD, gitops: GitOps, monkeypatch: pytest.MonkeyPatch) -> None:
    name = gitops.real("move")
    ns = gitops.namespace
    files: dict[str, Any] = {f"move/cm-{i}.yaml": configmap(f"cm-{i}", {"i": str(i)}) for i in range(16)}
    files.update({f"move/web-{i}.yaml": deployment(f"web-{i}") for i in range(2)})
    files.update({f"move/svc-{i}.yaml": service(f"web-{i}") for i in range(2)})
    sha = gitops.push(files)
    manifest = argocd.application_manifest(name, gitops.repo.url, "move", ns, automated=True, prune=True)
    manifest["metadata"]["finalizers"] = ["resources-finalizer.argocd.argoproj.io"]  # cascading delete
    argocd.apply(manifest)
    argocd.refresh(name)
    status = argocd.wait_status(name, revision=sha, healthy=False)
    assert status.resources == 20
    keys = [ResourceKey("", "ConfigMap", ns, f"cm-{i}") for i in range(16)]
    keys += [ResourceKey("apps", "Deployment", ns, f"web-{i}") for i in range(2)]
    keys += [ResourceKey("", "Service", ns, f"web-{i}") for i in range(2)]
    before = {k: gitops.kube.get(k) for k in keys}
    argo_owners = set().union(*(owners(o) for o in before.values() if o))
    print(f"Argo CD's field managers on its objects: {sorted(argo_owners)}")
    assert argo_owners & ARGO_MANAGERS

    gitops.application("move", path="move", automated={"prune": True})
    monkeypatch.setenv("TIDECD_CONFIG", str(gitops.config_dir))
    monkeypatch.setenv("TIDECD_STORE", str(gitops.store.root))
    monkeypatch.setenv("KUBECONFIG", str(gitops.dev.kubeconfig))
    refused = CliRunner().invoke(tidecd_cli, ["app", "adopt", name])
    assert refused.exit_code == 2 and "automated sync is on" in refused.output, refused.output
    argocd.kube.merge_patch(argocd.key(name), {"spec": {"syncPolicy": None}})
    # tidecd leaves them alone meanwhile: Argo CD's, named in a condition, nothing written
    writes = count_writes(monkeypatch)
    gitops.reconcile("move")
    assert writes == []
    warning = [c["message"] for c in gitops.state("move").conditions if c["type"] == "SharedResourceWarning"]
    assert warning and f"tracked by Argo CD Application {name!r}" in warning[0]

    dry = CliRunner().invoke(tidecd_cli, ["app", "adopt", name, "--dry-run"])
    assert dry.exit_code == 0 and dry.output.count("(dry run)") == 20, dry.output
    assert writes == []
    start = time.monotonic()
    done = CliRunner().invoke(tidecd_cli, ["app", "adopt", name, "-o", "json"])
    took = time.monotonic() - start
    assert done.exit_code == 0, done.output
    adopt_writes, writes[:] = list(writes), []
    # the marks: an apply and a patch per object (a patch again when a controller wrote in between)
    paths = {gitops.kube.resource(k.group, k.kind).path(k.namespace, k.name) for k in keys}
    assert len(adopt_writes) >= 40 and {w.split(" ", 1)[1] for w in adopt_writes} == paths, adopt_writes
    after = {k: gitops.kube.get(k) for k in keys}
    for key in keys:
        old, new = before[key], after[key]
        assert old is not None and new is not None
        assert new["metadata"]["uid"] == old["metadata"]["uid"], key
        assert {k: v for k, v in new.items() if k not in ("metadata", "status")} == \
            {k: v for k, v in old.items() if k not in ("metadata", "status")}, key
        assert not owners(new) & ARGO_MANAGERS and "tidecd" in owners(new), (key, owners(new))
    gitops.reconcile("move")
    state = gitops.state("move")
    assert state.sync_status == "Synced", [(r.name, r.diff) for r in state.resources]
    assert writes == [], writes
    marked = {k: written(gitops.kube.get(k)) for k in keys}

    # the Argo CD side, exactly as adopt printed it: the finalizer off, then delete the Application
    body = json.loads(done.output)
    patch = json.loads(body["next"][0].split(" -p '", 1)[1].rstrip("'"))
    assert patch[1] == {"op": "remove", "path": "/metadata/finalizers/0"}
    gitops.kube.json_patch(argocd.key(name), patch)
    gitops.kube.delete(argocd.key(name))
    writes[:] = []  # those two were the test's own, on the Argo CD side; from here tidecd's alone count
    deadline = time.monotonic() + 30
    while argocd.application(name) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert argocd.application(name) is None
    time.sleep(3)  # give Argo CD's controller the time it would take to cascade, had it anything to
    for key in keys:
        live = gitops.kube.get(key)
        assert live is not None and live["metadata"]["uid"] == before[key]["metadata"]["uid"], key  # type: ignore[index]
        assert written(live) == marked[key]
    gitops.reconcile("move")
    assert gitops.state("move").sync_status == "Synced" and writes == []

    # and back (a migration rolled back): release, then the Argo CD Application again sees all 20 Synced
    back = CliRunner().invoke(tidecd_cli, ["app", "release", name])
    assert back.exit_code == 0, back.output
    argocd.apply_application(name, gitops.repo.url, "move", ns, automated=False)
    argocd.refresh(name)
    status = argocd.wait_status(name, revision=sha, healthy=False)
    assert status.resources == 20 and status.sync == "Synced", status
    for key in keys:
        live = gitops.kube.get(key)
        assert live is not None and live["metadata"]["uid"] == before[key]["metadata"]["uid"], key  # type: ignore[index]
        assert "tidecd" not in owners(live) and "tidecd.io/tracking-id" not in live["metadata"]["annotations"]
    argocd.delete_application(name, keep_resources=True)
    print(f"adopt of 20 objects from the real Argo CD: {took:.2f} s, {len(adopt_writes)} writes")
