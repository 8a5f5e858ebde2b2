"""Inputs of the benchmarks: git repositories driven by the git CLI, generated manifests, app configs.

The same generator writes the files every tool under comparison gets, so tidecd, kubectl and kapp apply
byte-for-byte the same objects (only the namespace and the custom resource group differ, so each starts
from a cold cluster state).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tidecd.clients.cluster import KubeCluster
from tidecd.clients.store import LocalStore
from tidecd.runtime import Runtime, Settings
from tidecd_dev.gitserver import GitServer

Obj = dict[str, Any]

_GIT_ENV = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def git(*args: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, env=_GIT_ENV, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args[:2])} failed: {proc.stderr.strip()[-800:]}")
    return proc.stdout.strip()


class Repo:
    """A bare repository on the bench's git server and a working clone to write, commit and push."""

    def __init__(self, server: GitServer, name: str, workdir: Path) -> None:
        self.name, self.workdir = name, workdir
        self.url = server.create_repo(name)
        self.bare = server.root / f"{name}.git"
        workdir.mkdir(parents=True, exist_ok=True)
        git("init", "--quiet", "--initial-branch=main", str(workdir))
        for key, value in (("user.name", "tidecd bench"), ("user.email", "bench@tidecd.invalid"),
                           ("commit.gpgsign", "false")):
            git("config", key, value, cwd=workdir)
        git("remote", "add", "origin", self.url, cwd=workdir)

    def write(self, path: str, docs: list[Obj] | str) -> None:
        target = self.workdir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(docs if isinstance(docs, str) else yaml.safe_dump_all(docs, sort_keys=False))

    def commit_and_push(self, message: str = "change") -> str:
        """Commit everything and push over the file system (keeps the server's request counters clean)."""
        git("add", "--all", cwd=self.workdir)
        git("commit", "--quiet", "--allow-empty", "-m", message, cwd=self.workdir)
        git("push", "--quiet", "--force", str(self.bare), "main", cwd=self.workdir)
        return git("rev-parse", "HEAD", cwd=self.workdir)

    def push_to(self, bare: Path) -> None:
        git("push", "--quiet", "--force", str(bare), "main", cwd=self.workdir)


# -- manifests -----------------------------------------------------------------------------------------


def _meta(name: str, namespace: str) -> Obj:
    meta: Obj = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return meta


def configmap(name: str, namespace: str = "", value: str = "v1") -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(name, namespace),
            "data": {"value": value, "settings.yaml": f"name: {name}\nreplicas: 1\n"}}


def service(name: str, namespace: str = "") -> Obj:
    """Headless: the dev control plane's service IP range (/24) could not hold every bench Service."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(name, namespace),
            "spec": {"clusterIP": "None", "selector": {"app": name},
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}


def deployment(name: str, namespace: str = "") -> Obj:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(name, namespace),
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                                                           "ports": [{"containerPort": 8080}]}]}}}}


def crd(group: str) -> Obj:
    """A namespaced `Widget` kind in `group` (one group per tool and run, since CRDs are cluster-wide)."""
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"widgets.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": schema}}]}}


def widget(name: str, group: str, namespace: str = "") -> Obj:
    return {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": _meta(name, namespace),
            "spec": {"size": len(name), "color": "blue"}}


def mixed_app(namespace: str, *, deployments: int, services: int, configmaps: int, widgets: int = 0,
              group: str = "") -> list[Obj]:
    """An app's objects: Deployments, Services, ConfigMaps and, with `widgets`, a CRD and its resources."""
    objects: list[Obj] = []
    if widgets:
        objects.append(crd(group))
        objects += [widget(f"widget-{i:03d}", group, namespace) for i in range(widgets)]
    objects += [deployment(f"web-{i:03d}", namespace) for i in range(deployments)]
    objects += [service(f"web-{i:03d}", namespace) for i in range(services)]
    objects += [configmap(f"cm-{i:03d}", namespace) for i in range(configmaps)]
    return objects


def file_layout(objects: list[Obj], per_file: int = 10) -> dict[str, list[Obj]]:
    """Objects spread over files the way repos hold them: the CRD alone first, then `per_file` per file."""
    files: dict[str, list[Obj]] = {}
    rest = objects
    if objects and objects[0]["kind"] == "CustomResourceDefinition":
        files["00-crd.yaml"], rest = [objects[0]], objects[1:]
    for i in range(0, len(rest), per_file):
        chunk = rest[i : i + per_file]
        files[f"{chunk[0]['kind'].lower()}-{i // per_file:03d}.yaml"] = chunk
    return files


def write_files(directory: Path, files: dict[str, list[Obj]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, docs in files.items():
        (directory / name).write_text(yaml.safe_dump_all(docs, sort_keys=False))


# -- apps and runtimes ---------------------------------------------------------------------------------


def application(name: str, repo_url: str, path: str, namespace: str, *, automated: bool = False) -> Obj:
    spec: Obj = {"project": "default",
                 "source": {"repoURL": repo_url, "targetRevision": "main", "path": path},
                 "destination": {"name": "in-cluster", "namespace": namespace}}
    if automated:
        spec["syncPolicy"] = {"automated": {}}
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": name}, "spec": spec}


def write_app(config_dir: Path, app: Obj) -> None:
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / f"{app['metadata']['name']}.yaml").write_text(yaml.safe_dump(app, sort_keys=False))


class Installation:
    """A config dir, a store dir and a kubeconfig: what the functions' environment variables name."""

    def __init__(self, root: Path, kubeconfig: str = "") -> None:
        self.config_dir = root / "config"
        self.store_dir = root / "store"
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.store = LocalStore(self.store_dir)
        self.kubeconfig = kubeconfig

    def runtime(self) -> Runtime:
        """A fresh Runtime, as each function call builds one (the discovery cache is per process)."""
        settings = Settings(config=str(self.config_dir), store=str(self.store_dir), kubeconfig=self.kubeconfig)
        return Runtime(settings=settings, store=self.store)


def create_namespaces(kubeconfig: str, names: list[str]) -> None:
    kube = KubeCluster.from_kubeconfig(kubeconfig)
    for name in names:
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
