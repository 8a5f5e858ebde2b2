"""Argo CD's example apps (argoproj/argocd-example-apps) as conformance cases: each run through the real
Argo CD and through tidecd on one control plane and compared, as `tests/support/conformance.py` does.

Each case is named `ex-` and the example's directory, and keeps that directory in `go_test`. The manifests
are written again here with the example's kinds, fields, hooks, waves and sources; what changes:
- images: the ones the control plane runs (kwok plays the kubelets, nothing is pulled);
- the example repository's URL: the suite's git repo (`@REPO@`), and helm-dependency's chart repository
  the session's helm repository (`@CHARTS@`, where the `wordpress` charts of `CHARTS` are published);
- sock-shop: no `nodeSelector` on `beta.kubernetes.io/os` (kwok's node has no such label), no fixed
  `nodePort` (both tools' copies share one cluster), no resource requests (kwok's node is small);
- apps (app of apps): the child Applications carry the parent's name as a prefix and go to Argo CD's
  namespace, and deploy into the parent's destination namespace (`$ARGOCD_APP_NAMESPACE`), so that each
  tool's copy is its own;
- plugins (config management plugins) has no case: tidecd runs no plugins (docs/argocd-compatibility.md).
"""

from __future__ import annotations

import textwrap
from typing import Any

from tests.support.conformance import Case
from tests.support.conformance_cases import HOOK, POLICY, WAVE, deployment, service

Obj = dict[str, Any]
ARGOCD_NAMESPACE = "argocd"  # where the app-of-apps children go: the session's Argo CD watches it

# the guestbook: one Deployment and its Service (guestbook/)
GUESTBOOK = {"guestbook-ui-deployment.yaml": deployment(), "guestbook-ui-svc.yaml": service()}

HELPERS = textwrap.dedent("""\
    {{- define "NAME.name" -}}
    {{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
    {{- end -}}
    {{- define "NAME.fullname" -}}
    {{- if .Values.fullnameOverride -}}
    {{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
    {{- else -}}
    {{- $name := default .Chart.Name .Values.nameOverride -}}
    {{- if contains $name .Release.Name -}}
    {{- .Release.Name | trunc 63 | trimSuffix "-" -}}
    {{- else -}}
    {{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
    {{- end -}}
    {{- end -}}
    {{- end -}}
    {{- define "NAME.chart" -}}
    {{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
    {{- end -}}
    """)

LABELS = ("  labels:\n"  # under metadata
          "    app: {{ template \"NAME.name\" . }}\n"
          "    chart: {{ template \"NAME.chart\" . }}\n"
          "    release: {{ .Release.Name }}\n"
          "    heritage: {{ .Release.Service }}\n")

POD_TEMPLATE = textwrap.dedent("""\
      selector:
        matchLabels:
          app: {{ template "NAME.name" . }}
          release: {{ .Release.Name }}
      template:
        metadata:
          labels:
            app: {{ template "NAME.name" . }}
            release: {{ .Release.Name }}
        spec:
          containers:
          - name: {{ .Chart.Name }}
            image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
            imagePullPolicy: {{ .Values.image.pullPolicy }}
            ports:
            - {name: http, containerPort: {{ .Values.containerPort }}, protocol: TCP}
            livenessProbe: {httpGet: {path: /, port: http}}
            readinessProbe: {httpGet: {path: /, port: http}}
            resources:
    {{ toYaml .Values.resources | indent 10 }}
        {{- with .Values.nodeSelector }}
          nodeSelector:
    {{ toYaml . | indent 8 }}
        {{- end }}
    """)

SERVICE_SPEC = textwrap.dedent("""\
    spec:
      type: {{ .Values.service.type }}
      ports:
      - {port: {{ .Values.service.port }}, targetPort: http, protocol: TCP, name: http}
      selector:
        app: {{ template "NAME.name" . }}
        release: {{ .Release.Name }}
    """)

VALUES = textwrap.dedent("""\
    replicaCount: 1
    image: {repository: nginx, tag: "1.27", pullPolicy: IfNotPresent}
    containerPort: 80
    service: {type: ClusterIP, port: 80}
    ingress: {enabled: false, annotations: {}, path: /, hosts: [chart-example.local], tls: []}
    resources: {}
    nodeSelector: {}
    tolerations: []
    affinity: {}
    """)


def helm_guestbook() -> dict[str, str]:
    """helm-guestbook/: a Deployment and a Service from a chart with the usual helpers, and an Ingress that
    values leave off."""
    name = "helm-guestbook"
    ingress = textwrap.dedent("""\
        {{- if .Values.ingress.enabled -}}
        apiVersion: networking.k8s.io/v1
        kind: Ingress
        metadata:
          name: {{ template "NAME.fullname" . }}
        spec:
          rules:
          {{- range .Values.ingress.hosts }}
          - host: {{ . }}
          {{- end }}
        {{- end }}
        """)
    files = {
        "Chart.yaml": f"apiVersion: v2\nname: {name}\ndescription: the guestbook as a chart\nversion: 0.1.0\n"
                      "appVersion: \"1.0\"\n",
        "values.yaml": VALUES,
        "values-production.yaml": "replicaCount: 3\n",
        "templates/_helpers.tpl": HELPERS,
        "templates/deployment.yaml": ("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n"
                                      "  name: {{ template \"NAME.fullname\" . }}\n" + LABELS
                                      + "spec:\n  replicas: {{ .Values.replicaCount }}\n  revisionHistoryLimit: 3\n"
                                      + POD_TEMPLATE),
        "templates/service.yaml": ("apiVersion: v1\nkind: Service\nmetadata:\n"
                                   "  name: {{ template \"NAME.fullname\" . }}\n" + LABELS + SERVICE_SPEC),
        "templates/ingress.yaml": ingress,
    }
    return {path: text.replace("NAME.", f"{name}.") for path, text in files.items()}


def blue_green() -> dict[str, str]:
    """blue-green/: an Argo Rollouts `Rollout` with a blue-green strategy, its active and preview Services."""
    name = "bluegreen"
    rollout = ("apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nmetadata:\n"
               "  name: {{ template \"NAME.fullname\" . }}\n" + LABELS
               + "spec:\n  replicas: {{ .Values.replicaCount }}\n  revisionHistoryLimit: 2\n"
               + "  strategy:\n    blueGreen:\n      activeService: {{ template \"NAME.fullname\" . }}\n"
               + "      previewService: {{ template \"NAME.fullname\" . }}-preview\n" + POD_TEMPLATE)
    services = "".join(
        f"---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {{{{ template \"NAME.fullname\" . }}}}{suffix}\n"
        + LABELS + SERVICE_SPEC for suffix in ("", "-preview"))
    files = {"Chart.yaml": f"apiVersion: v2\nname: {name}\nversion: 0.1.0\n", "values.yaml": VALUES,
             "templates/_helpers.tpl": HELPERS, "templates/rollout.yaml": rollout, "templates/services.yaml": services}
    return {path: text.replace("NAME.", f"{name}.") for path, text in files.items()}


JSONNET_GUESTBOOK = textwrap.dedent("""\
    local params = import 'params.libsonnet';
    [
      {apiVersion: 'v1', kind: 'Service', metadata: {name: params.name},
       spec: {ports: [{port: params.servicePort, targetPort: params.containerPort}],
              selector: {app: params.name}, type: params.type}},
      {apiVersion: 'apps/v1', kind: 'Deployment', metadata: {name: params.name},
       spec: {replicas: params.replicas, revisionHistoryLimit: 3, selector: {matchLabels: {app: params.name}},
              template: {metadata: {labels: {app: params.name}},
                         spec: {containers: [{image: params.image, name: params.name,
                                              ports: [{containerPort: params.containerPort}]}]}}}},
    ]
    """)

JSONNET_PARAMS = textwrap.dedent("""\
    {
      containerPort: 80,
      image: 'nginx:1.27',
      name: 'jsonnet-guestbook-ui',
      replicas: 1,
      servicePort: 80,
      type: 'LoadBalancer',
    }
    """)

JSONNET_TLA = textwrap.dedent("""\
    function(containerPort=80, image='nginx:1.27', name='jsonnet-guestbook-ui', replicas=1, servicePort=80,
             type='LoadBalancer')
    [
      {apiVersion: 'v1', kind: 'Service', metadata: {name: name},
       spec: {ports: [{port: servicePort, targetPort: containerPort}], selector: {app: name}, type: type}},
      {apiVersion: 'apps/v1', kind: 'Deployment', metadata: {name: name},
       spec: {replicas: replicas, revisionHistoryLimit: 3, selector: {matchLabels: {app: name}},
              template: {metadata: {labels: {app: name}},
                         spec: {containers: [{image: image, name: name, ports: [{containerPort: containerPort}]}]}}}},
    ]
    """)


def job(name: str, annotations: dict[str, str], *, generate: bool = False, backoff: int | None = None) -> Obj:
    """A hook Job whose pod runs to completion (kwok; the example's `sleep`)."""
    meta: Obj = {"generateName" if generate else "name": name, "annotations": annotations}
    spec: Obj = {"template": {"spec": {"containers": [{"name": "main", "image": "busybox:1.36",
                                                       "command": ["sleep", "2"]}],
                                       "restartPolicy": "Never"}}}
    if backoff is not None:
        spec["backoffLimit"] = backoff
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def replica_set(name: str, replicas: int, annotations: dict[str, str] | None = None) -> Obj:
    meta: Obj = {"name": name, **({"annotations": annotations} if annotations else {})}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta,
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"tier": name}},
                     "template": {"metadata": {"labels": {"tier": name}},
                                  "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}}}


def tier_service(name: str, tier: str, port: int, annotations: dict[str, str] | None = None) -> Obj:
    meta: Obj = {"name": name, **({"annotations": annotations} if annotations else {})}
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta,
            "spec": {"selector": {"tier": tier}, "ports": [{"protocol": "TCP", "port": port, "targetPort": port}]}}


def sync_waves() -> list[Obj]:
    """sync-waves/manifests.yaml: a Sync hook Job in wave 1, two PostSync Jobs, ReplicaSets and Services
    across waves 0 and 1."""
    return [job("upgrade-sql-schema-", {HOOK: "PostSync"}, generate=True),
            replica_set("backend", 2), tier_service("backend-svc", "backend", 8080),
            job("maintenance-page-up-", {HOOK: "Sync", WAVE: "1"}, generate=True, backoff=0),
            replica_set("frontend", 2), tier_service("frontend", "frontend", 80, {WAVE: "1"}),
            job("maintenance-page-down-", {HOOK: "PostSync"}, generate=True)]


def helm_hooks() -> list[Obj]:
    """helm-hooks/manifests.yaml: Helm's hook annotations (pre-install, post-install, weights, delete
    policies) on plain manifests, which Argo CD maps to its own hooks and waves."""
    weight, policy = "helm.sh/hook-weight", "helm.sh/hook-delete-policy"
    return [job("upgrade-sql-schema", {"helm.sh/hook": "pre-install"}, generate=True),
            replica_set("backend", 1), tier_service("backend", "backend", 8080),
            job("maint-page-up", {"helm.sh/hook": "pre-install", policy: "before-hook-creation", weight: "1"},
                backoff=0),
            replica_set("frontend", 1, {weight: "2"}), tier_service("frontend", "frontend", 80, {weight: "2"}),
            job("maint-page-down", {"helm.sh/hook": "post-install", policy: "before-hook-creation", weight: "3"})]


def pre_post_sync() -> dict[str, Any]:
    """pre-post-sync/: a kustomization over the guestbook with a PreSync and a PostSync Job, each deleted
    when it succeeds."""
    return {"kustomization.yaml": "namePrefix: pre-post-sync-\nresources:\n- ../ex-kustomize-guestbook\n"
                                  "- pre-sync-job.yaml\n- post-sync-job.yaml\n",
            "pre-sync-job.yaml": job("before", {HOOK: "PreSync", POLICY: "HookSucceeded"}, backoff=2),
            "post-sync-job.yaml": job("after", {HOOK: "PostSync", POLICY: "HookSucceeded"}, backoff=0)}


SOCK_SHOP = (  # (service, image, container port, service port)
    ("carts", "nginx:1.27", 80, 80), ("carts-db", "mongo:7", 27017, 27017),
    ("catalogue", "nginx:1.27", 80, 80), ("catalogue-db", "mysql:8", 3306, 3306),
    ("front-end", "node:20", 8079, 80), ("orders", "nginx:1.27", 80, 80), ("orders-db", "mongo:7", 27017, 27017),
    ("payment", "nginx:1.27", 80, 80), ("queue-master", "nginx:1.27", 80, 80),
    ("rabbitmq", "rabbitmq:3", 5672, 5672), ("session-db", "redis:7", 6379, 6379),
    ("shipping", "nginx:1.27", 80, 80), ("user", "nginx:1.27", 80, 80), ("user-db", "mongo:7", 27017, 27017))


def sock_shop() -> dict[str, Any]:
    """sock-shop/: a kustomization listing a Deployment and a Service per microservice (base/)."""
    files: dict[str, Any] = {}
    for name, image, port, service_port in SOCK_SHOP:
        files[f"base/{name}-dep.yaml"] = {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"name": name}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"name": name}},
                     "template": {"metadata": {"labels": {"name": name}},
                                  "spec": {"containers": [{
                                      "name": name, "image": image, "ports": [{"containerPort": port}],
                                      "securityContext": {"runAsNonRoot": True, "runAsUser": 10001,
                                                          "readOnlyRootFilesystem": True,
                                                          "capabilities": {"drop": ["all"],
                                                                           "add": ["NET_BIND_SERVICE"]}},
                                      "volumeMounts": [{"mountPath": "/tmp", "name": "tmp-volume"}]}],
                                      "volumes": [{"name": "tmp-volume", "emptyDir": {"medium": "Memory"}}]}}}}
        spec: Obj = {"ports": [{"port": service_port, "targetPort": port}], "selector": {"name": name}}
        if name == "front-end":
            spec["type"] = "NodePort"
        files[f"base/{name}-svc.yaml"] = {"apiVersion": "v1", "kind": "Service",
                                          "metadata": {"name": name, "labels": {"name": name}}, "spec": spec}
    files["kustomization.yaml"] = "resources:\n" + "".join(f"- {p}\n" for p in sorted(files))
    return files


CHILD = textwrap.dedent("""\
    apiVersion: argoproj.io/v1alpha1
    kind: Application
    metadata:
      name: {{ .Values.prefix }}-CHILD
      namespace: {{ .Values.argocdNamespace }}
      finalizers:
      - resources-finalizer.argocd.argoproj.io
    spec:
      destination:
        namespace: {{ .Values.spec.destination.namespace }}
        server: {{ .Values.spec.destination.server }}
      project: default
      source:
        path: ex-CHILD
        repoURL: {{ .Values.spec.source.repoURL }}
        targetRevision: {{ .Values.spec.source.targetRevision }}
    """)
CHILDREN = ("guestbook", "helm-guestbook", "helm-hooks", "kustomize-guestbook", "sync-waves")


def apps() -> dict[str, str]:
    """apps/: a chart whose templates are Applications of the other examples (app of apps)."""
    files = {"Chart.yaml": "apiVersion: v2\nname: applications\ndescription: Applications\nversion: 0.1.0\n",
             "values.yaml": textwrap.dedent(f"""\
                 prefix: apps
                 argocdNamespace: {ARGOCD_NAMESPACE}
                 spec:
                   destination: {{namespace: default, server: "https://kubernetes.default.svc"}}
                   source: {{repoURL: "@REPO@", targetRevision: main}}
                 """)}
    for child in CHILDREN:
        files[f"templates/{child}.yaml"] = CHILD.replace("CHILD", child)
    return files


WORDPRESS = textwrap.dedent("""\
    apiVersion: v1
    kind: Secret
    metadata: {name: {{ .Values.fullname | lower }}}
    stringData:
      wordpress-password: {{ .Values.wordpressPassword | quote }}
      mariadb-password: {{ .Values.mariadb.db.password | quote }}
      mariadb-root-password: {{ .Values.mariadb.rootUser.password | quote }}
    ---
    apiVersion: v1
    kind: Service
    metadata: {name: {{ .Values.fullname | lower }}}
    spec: {ports: [{port: 80}], selector: {app: wordpress}}
    """)
# the charts the session's helm repository serves for helm-dependency: HelmRepo.add keyword arguments
CHARTS: list[dict[str, Any]] = [{"name": "wordpress", "version": version, "templates": {"wordpress.yaml": WORDPRESS},
           "values": {"fullname": "wordpress", "wordpressPassword": "",
                      "mariadb": {"db": {"password": ""}, "rootUser": {"password": ""}}}}
          for version in ("9.0.2", "9.0.3")]


def helm_dependency() -> dict[str, str]:
    """helm-dependency/: an off-the-shelf chart from a helm repository, customised by the parent's values and
    committed without its `charts/` (so the tool builds the dependency)."""
    return {"Chart.yaml": textwrap.dedent("""\
                apiVersion: v2
                name: wordpress
                description: A Helm chart for Kubernetes
                type: application
                version: 0.1.0
                appVersion: "1.0"
                dependencies:
                - name: wordpress
                  version: 9.0.3
                  repository: "@CHARTS@"
                """),
            "values.yaml": textwrap.dedent("""\
                wordpress:
                  fullname: myWordPress
                  wordpressPassword: foo
                  mariadb:
                    db: {password: bar}
                    rootUser: {password: baz}
                """)}


def example(directory: str, files: dict[str, Any], variant: str = "", **more: Any) -> Case:
    """The case of the example in `directory` (`ex-<directory>`, or `ex-<directory>-<variant>` for a second
    way the example is meant to be used)."""
    name = f"ex-{directory}-{variant}" if variant else f"ex-{directory}"
    return Case(name, f"argocd-example-apps/{directory}" + (f" ({variant})" if variant else ""), files, **more)


EXAMPLE_CASES: list[Case] = [
    example("guestbook", GUESTBOOK),
    example("helm-guestbook", helm_guestbook()),
    example("helm-guestbook", helm_guestbook(), "production",
            source={"helm": {"valueFiles": ["values-production.yaml"]}}),
    example("kustomize-guestbook", {**GUESTBOOK, "kustomization.yaml": (
        "namePrefix: kustomize-\nresources:\n- guestbook-ui-deployment.yaml\n- guestbook-ui-svc.yaml\n")}),
    example("jsonnet-guestbook", {"guestbook-ui.jsonnet": JSONNET_GUESTBOOK, "params.libsonnet": JSONNET_PARAMS}),
    example("jsonnet-guestbook-tla", {"guestbook-ui.jsonnet": JSONNET_TLA},
            source={"directory": {"jsonnet": {"tlas": [{"name": "name", "value": "jsonnet-guestbook-tla"},
                                                       {"name": "replicas", "value": "2", "code": True}]}}}),
    example("helm-dependency", helm_dependency()),
    example("helm-hooks", {"manifests.yaml": helm_hooks()}),
    example("pre-post-sync", pre_post_sync()),
    example("sync-waves", {"manifests.yaml": sync_waves()}),
    example("sock-shop", sock_shop()),
    example("blue-green", blue_green(), progressing=True),
    example("apps", apps(), source={"helm": {"parameters": [
        {"name": "prefix", "value": "$ARGOCD_APP_NAME"},
        {"name": "spec.destination.namespace", "value": "$ARGOCD_APP_NAMESPACE"}]}}),
]
