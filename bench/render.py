"""Render (issue 3): a rendered revision is never rendered twice.

One checkout holds the same 500 objects three ways: a plain directory, a kustomization (with a name
prefix and common labels) and a helm chart that loops over its values. Each is rendered cold with
`render()` and served from the manifest cache with `render_cached()` (a second call for the same sha and
source); the raw `kustomize build` / `helm template` runs are the peers of tidecd's cold render, which
adds the safety checks, parsing and validation on top.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import yaml

from bench.fixtures import file_layout, mixed_app, write_files
from bench.harness import Bench, Row, median, say, spread, timed
from tidecd.base.model import Manifest
from tidecd.clients import tools
from tidecd.clients.store import LocalStore
from tidecd.config.load import ApplicationSource
from tidecd.render import render, render_cached

GROUP = "render"
OBJECTS = 500  # 100 Deployments, 100 Services, 300 ConfigMaps
REPS = 5
NAMESPACE = "bench"
SHA = "0" * 39 + "1"

_HELM_TEMPLATE = """\
{{- range $i := until (int .Values.webs) }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web-{{ printf "%03d" $i }}
spec:
  replicas: 1
  selector:
    matchLabels: {app: web-{{ printf "%03d" $i }}}
  template:
    metadata:
      labels: {app: web-{{ printf "%03d" $i }}}
    spec:
      containers:
        - name: web
          image: {{ $.Values.image }}
          ports: [{containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata:
  name: web-{{ printf "%03d" $i }}
spec:
  selector: {app: web-{{ printf "%03d" $i }}}
  ports: [{name: http, port: 80, targetPort: 8080}]
{{- end }}
{{- range $i := until (int .Values.configmaps) }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cm-{{ printf "%03d" $i }}
data:
  value: v1
  settings.yaml: |
    name: cm-{{ printf "%03d" $i }}
    replicas: 1
{{- end }}
"""


def write_checkout(checkout: Path) -> None:
    """`directory/`, `kustomize/` and `helm/`: the same 500 objects, one tool each."""
    files = file_layout(mixed_app("", deployments=100, services=100, configmaps=300))
    write_files(checkout / "directory", files)
    write_files(checkout / "kustomize", files)
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "namePrefix": "bench-", "labels": [{"pairs": {"tier": "bench"}, "includeSelectors": False}],
                     "resources": sorted(files)}
    (checkout / "kustomize" / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    chart = checkout / "helm"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: bench\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("webs: 100\nconfigmaps: 300\nimage: nginx:1.27\n")
    (chart / "templates" / "objects.yaml").write_text(_HELM_TEMPLATE)


def run(bench: Bench) -> list[Row]:
    checkout = bench.dir("render/checkout")
    write_checkout(checkout)
    store = LocalStore(bench.dir("render/store"))
    rows: list[Row] = []
    raw = {"kustomize": [tools.binary("kustomize"), "build", str(checkout / "kustomize")],
           "helm": [tools.binary("helm"), "template", "bench", str(checkout / "helm"), "--include-crds",
                    "--kube-version", "1.34", "--namespace", NAMESPACE]}
    for tool in ("directory", "kustomize", "helm"):
        say(f"render: {tool}")
        source = ApplicationSource(repo_url="http://git.invalid/bench.git", path=tool, target_revision="main")

        def cold(source: ApplicationSource = source) -> list[Manifest]:
            return render(checkout, source, app_name="bench", namespace=NAMESPACE)

        count = len(cold())
        if count != OBJECTS:
            raise RuntimeError(f"render {tool}: expected {OBJECTS} objects, got {count}")
        render_cached(store, f"bench-{tool}", SHA, source, cold, namespace=NAMESPACE)  # fills the cache
        renders: list[int] = []

        def cached(source: ApplicationSource = source, tool: str = tool, renders: list[int] = renders) -> None:
            def must_not_render() -> list[Manifest]:
                renders.append(1)
                return cold(source)

            render_cached(store, f"bench-{tool}", SHA, source, must_not_render, namespace=NAMESPACE)

        cold_times, cached_times = _alternate(cold, cached)
        rows.append(Row(GROUP, f"{tool}, {OBJECTS} objects: cached vs cold", median(cached_times),
                        median(cold_times), "cold render()",
                        f"render_cached 2nd call; renders on hit: {len(renders)}; {spread(cached_times)}"))
        if tool in raw:
            tool_times = [timed(_command(raw[tool])) for _ in range(REPS)]
            rows.append(Row(GROUP, f"{tool}, {OBJECTS} objects: cold render vs raw tool", median(cold_times),
                            median(tool_times), f"{tool} cli",
                            f"tidecd adds tree checks, parse, validation; cold {spread(cold_times)}"))
    return rows


def _command(argv: list[str]) -> Callable[[], object]:
    return lambda: subprocess.run(argv, check=True, capture_output=True)


def _alternate(first: Callable[[], object], second: Callable[[], object]) -> tuple[list[float], list[float]]:
    """REPS timings of each, interleaved so that machine noise hits both alike."""
    a, b = [], []
    for _ in range(REPS):
        a.append(timed(first))
        b.append(timed(second))
    return a, b
