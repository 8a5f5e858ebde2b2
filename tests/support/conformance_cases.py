"""The conformance suite's cases: Argo CD's e2e tests (argoproj/argo-cd `test/e2e/*.go`), ported.

Each `Case` keeps the Go test it ports (`go_test`); the test data is our own, written after what the Go
test's `testdata/` directory holds (a bare Pod `pod` and a hook Pod `hook` for the hook tests, the guestbook
Deployment and Service, small charts, kustomizations and jsonnet files). kwok plays the kubelet: a bare Pod
with `restartPolicy: Never` completes, and `tidecd.test/fail-after` stands for a command that exits 1
(`command: ["false"]` in Argo CD's data); `tidecd.test/ready-after: 1h` stands for an image that never pulls
(Argo CD's `alpine:ops!`). See shared/tidecd_dev/kwok_stages.yaml.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tests.support.conformance import Case, LivePatch, Step, Sync

HOOK = "argocd.argoproj.io/hook"
POLICY = "argocd.argoproj.io/hook-delete-policy"
WAVE = "argocd.argoproj.io/sync-wave"
OPTIONS = "argocd.argoproj.io/sync-options"
FAIL = {"tidecd.test/fail-after": "0s"}  # kwok: the container exits 1 (Argo CD's data: command ["false"])
Obj = dict[str, Any]


def pod(name: str | None, annotations: Mapping[str, str] | None = None, *, fail: bool = False,
        always: bool = False) -> Obj:
    """A bare Pod; `restartPolicy: Never` runs to completion (kwok), `always` keeps it Running."""
    meta: Obj = {"name": name} if name else {}
    notes = {**(annotations or {}), **(FAIL if fail else {})}
    if notes:
        meta["annotations"] = notes
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"restartPolicy": "Always" if always else "Never",
                     "containers": [{"name": "main", "image": "busybox:1.36",
                                     "command": ["sleep", "3600"] if always else ["true"]}]}}


def hook_files(hook: str = "PostSync", annotations: Mapping[str, str] | None = None, *,
               fail: bool = False) -> dict[str, Any]:
    """Argo CD's `hook` testdata: a Pod `pod` and a hook Pod `hook`."""
    notes = {HOOK: hook, **(annotations or {})} if hook else dict(annotations or {})
    return {"pod.yaml": pod("pod"), "hook.yaml": pod("hook", notes, fail=fail)}


def cm(name: str, data: dict[str, str] | None = None, annotations: Mapping[str, str] | None = None) -> Obj:
    meta: Obj = {"name": name}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data or {"foo": "bar"}}


def deployment(name: str = "guestbook-ui", *, replicas: int = 1, never_ready: bool = False,
               **spec: Any) -> Obj:
    template: Obj = {"labels": {"app": name}}
    if never_ready:  # kwok: never Ready, as an image that cannot be pulled
        template["annotations"] = {"tidecd.test/ready-after": "1h"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "revisionHistoryLimit": 3, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": template,
                                  "spec": {"containers": [{"name": name, "image": "nginx:1.27",
                                                           "ports": [{"containerPort": 80}]}]}},
                     **spec}}


def service(name: str = "guestbook-ui") -> Obj:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 80}]}}


GUESTBOOK = {"guestbook-ui-deployment.yaml": deployment(), "guestbook-ui-svc.yaml": service()}

CHART_MAP = """apiVersion: v1
kind: ConfigMap
metadata:
  name: my-map
data:
  foo: {{ .Values.foo | quote }}
  release: {{ .Release.Name | quote }}
"""


def chart(name: str = "helm-values", template: str = CHART_MAP, values: str = "foo: from-values\n",
          **more: str) -> dict[str, str]:
    return {"Chart.yaml": f"apiVersion: v2\nname: {name}\nversion: 1.0.0\n", "values.yaml": values,
            "templates/cm.yaml": template, **more}


def hook_cases() -> list[Case]:
    """hook_test.go and helm_test.go's hook tests, selective_sync_test.go's hook test."""
    return [
        Case("presync-ok", "TestPreSyncHookSuccessful", hook_files("PreSync")),
        Case("sync-hook-ok", "TestSyncHookSuccessful", hook_files("Sync")),
        Case("postsync-ok", "TestPostSyncHookSuccessful", hook_files("PostSync")),
        Case("presync-fails", "TestPreSyncHookFailure", hook_files("PreSync", fail=True)),
        Case("sync-hook-fails", "TestSyncHookFailure", hook_files("Sync", fail=True)),
        Case("postsync-fails", "TestPostSyncHookFailure", hook_files("PostSync", fail=True)),
        Case("postsync-pod-fails", "TestPostSyncHookPodFailure",
             {"pod.yaml": pod("pod", fail=True), "hook.yaml": pod("hook", {HOOK: "PostSync"})}),
        Case("syncfail-hook", "TestSyncFailHookPodFailure",
             {**hook_files("PostSync", fail=True), "sync-fail-hook.yaml": pod("sync-fail-hook", {HOOK: "SyncFail"})}),
        Case("syncfail-hook-fails", "TestSyncFailHookPodFailureSyncFailFailure",
             {**hook_files("PostSync", fail=True),
              "ok-sync-fail-hook.yaml": pod("successful-sync-fail-hook", {HOOK: "SyncFail"}),
              "bad-sync-fail-hook.yaml": pod("failed-sync-fail-hook", {HOOK: "SyncFail"}, fail=True)}),
        Case("delete-succeeded-exit0", "TestHookDeletePolicyHookSucceededHookExit0",
             hook_files("PostSync", {POLICY: "HookSucceeded"})),
        Case("delete-succeeded-exit1", "TestHookDeletePolicyHookSucceededHookExit1",
             hook_files("PostSync", {POLICY: "HookSucceeded"}, fail=True)),
        Case("delete-failed-exit0", "TestHookDeletePolicyHookFailedHookExit0",
             hook_files("PostSync", {POLICY: "HookFailed"})),
        Case("delete-failed-exit1", "TestHookDeletePolicyHookFailedHookExit1",
             hook_files("PostSync", {POLICY: "HookFailed"}, fail=True)),
        Case("before-hook-creation", "TestHookBeforeHookCreation",
             hook_files("PostSync", {POLICY: "BeforeHookCreation"}),
             steps=(Step(sync=Sync()), Step(sync=Sync()))),
        Case("hook-skip", "TestHookSkip",
             {"pod.yaml": pod("pod", {HOOK: "Skip"}), "hook.yaml": pod("hook", {HOOK: "PostSync"})}),
        Case("unnamed-hook", "TestAutomaticallyNamingUnnamedHook",
             {"pod.yaml": pod("pod"), "hook.yaml": pod(None, {HOOK: "PreSync,PostSync"})}),
        Case("unnamed-resource", "TestNamingNonHookResource",
             {"pod.yaml": pod(None), "hook.yaml": pod("hook", {HOOK: "PostSync"})}),
        Case("generate-name-hook", "TestHookDeletePolicyHookSucceededHookExit0 (generateName, hook testdata)",
             {"pod.yaml": pod("pod"),
              "hook.yaml": {**pod(None, {HOOK: "PreSync"}), "metadata": {"generateName": "hook-",
                                                                           "annotations": {HOOK: "PreSync"}}}}),
        Case("helm-hook-created", "TestHelmHooksAreCreated", hook_files("", {"helm.sh/hook": "pre-install"})),
        Case("helm-hook-weight", "TestHelmHookWeight",
             hook_files("Sync", {"helm.sh/hook-weight": "-1"}, fail=True)),
        Case("helm-hook-delete-policy", "TestHelmHookDeletePolicy",
             hook_files("PostSync", {"helm.sh/hook-delete-policy": "hook-succeeded"})),
        Case("selective-no-hooks", "TestSelectiveSyncDoesNotRunHooks", hook_files(),
             steps=(Step(sync=Sync(resources=(("", "Pod", "pod"),))),)),
    ]


def sync_cases() -> list[Case]:
    """sync_waves_test.go, selective_sync_test.go, app_management_test.go's sync options and prune,
    app_autosync_test.go's self-heal, app_sync_options_test.go."""
    rbac_role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "pod-reader"},
                 "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "pod-reader", "annotations": {WAVE: "1"}},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
               "subjects": [{"kind": "ServiceAccount", "name": "reader"}]}
    reader = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader"}}
    waves_pod = pod("pod-with-waves", {WAVE: "2"}, always=True)
    waves_pod["spec"]["serviceAccountName"] = "reader"
    two_pods = {"pod-1.yaml": pod("pod-1", always=True), "pod-2.yaml": pod("pod-2", always=True)}
    image = LivePatch("apps", "Deployment", "guestbook-ui",
                      {"spec": {"template": {"spec": {"containers": [{"name": "guestbook-ui", "image": "test"}]}}}})
    drift = LivePatch("apps", "Deployment", "guestbook-ui", {"spec": {"revisionHistoryLimit": 0}})
    return [
        Case("progressing-deployment", "TestOneProgressingDeploymentIsSucceededAndSynced",
             {"deployment.yaml": deployment(never_ready=True)}),
        Case("degraded-deployment", "TestDegradedDeploymentIsSucceededAndSynced",
             {"deployment.yaml": deployment(never_ready=True, progressDeadlineSeconds=1)}),
        Case("prune-order-waves", "TestSyncPruneOrderWithSyncWaves",
             {"sa.yaml": reader, "rbac.yaml": [rbac_role, binding], "pod.yaml": waves_pod},
             steps=(Step(sync=Sync()), Step(files={"pod.yaml": None, "rbac.yaml": None}, sync=Sync(prune=True)))),
        Case("selective-sync", "TestSelectiveSync", GUESTBOOK,
             steps=(Step(sync=Sync(resources=(("", "Service", "guestbook-ui"),))),)),
        Case("prune-false", "TestSyncOptionPruneFalse",
             {**two_pods, "pod-1.yaml": pod("pod-1", {OPTIONS: "Prune=false"}, always=True)},
             steps=(Step(sync=Sync()), Step(files={"pod-1.yaml": None}, sync=Sync(prune=True)))),
        Case("prune-not-asked", "TestSyncOptionPruneFalse (a sync without --prune)", two_pods,
             steps=(Step(sync=Sync()), Step(files={"pod-1.yaml": None}, sync=Sync()))),
        Case("prune", "TestSyncPruneOrderWithSyncWaves (plain prune)", two_pods,
             steps=(Step(sync=Sync()), Step(files={"pod-1.yaml": None}, sync=Sync(prune=True)))),
        Case("replace", "TestSyncOptionReplace", {"cm.yaml": cm("my-map", None, {OPTIONS: "Replace=true"})},
             steps=(Step(sync=Sync()), Step(sync=Sync()))),
        Case("replace-operation", "TestSyncOptionReplaceFromCLI", {"cm.yaml": cm("my-map")},
             steps=(Step(sync=Sync()), Step(sync=Sync(options=("Replace=true",))))),
        Case("create-namespace", "TestNamespaceAutoCreation", GUESTBOOK, create_namespace=False,
             spec={"syncPolicy": {"syncOptions": ["CreateNamespace=true"]}}),
        Case("namespace-ssa", "TestNamespaceCreationWithSSA", GUESTBOOK, create_namespace=False,
             spec={"syncPolicy": {"syncOptions": ["CreateNamespace=true", "ServerSideApply=true"]}}),
        Case("namespace-metadata", "TestNamespacedNamespaceAutoCreationWithMetadata", GUESTBOOK, create_namespace=False,
             spec={"syncPolicy": {"syncOptions": ["CreateNamespace=true"], "managedNamespaceMetadata": {
                 "labels": {"foo": "bar"}, "annotations": {"bar": "bat"}}}}),
        Case("self-heal-enabled", "TestAutoSyncSelfHealEnabled", GUESTBOOK,
             spec={"syncPolicy": {"automated": {"selfHeal": True}}},
             steps=(Step(operation=True), Step(patches=(drift,), operation=True))),
        Case("self-heal-disabled", "TestAutoSyncSelfHealDisabled", GUESTBOOK,
             spec={"syncPolicy": {"automated": {"selfHeal": False}}},
             steps=(Step(operation=True),
                    Step(files={"guestbook-ui-deployment.yaml": deployment(revisionHistoryLimit=1)}, operation=True),
                    Step(patches=(drift,)))),
        Case("ignore-differences", "TestResourceDiffing",
             GUESTBOOK, spec={"ignoreDifferences": [{"group": "apps", "kind": "Deployment",
                                                     "jsonPointers": ["/spec/template/spec/containers/0/image"]}]},
             steps=(Step(sync=Sync()), Step(patches=(image,)))),
        Case("ignore-differences-sync", "TestResourceDiffing (then a sync of another change)",
             GUESTBOOK, spec={"ignoreDifferences": [{"group": "apps", "kind": "Deployment",
                                                     "jsonPointers": ["/spec/template/spec/containers/0/image"]}]},
             steps=(Step(sync=Sync()), Step(patches=(image,), files={"guestbook-ui-svc.yaml": {
                 **service(), "metadata": {"name": "guestbook-ui", "labels": {"changed": "yes"}}}},
                 sync=Sync()))),
        Case("automated-prune", "TestAutoSyncSelfHealDisabled (automated prune of a removed file)", two_pods,
             spec={"syncPolicy": {"automated": {"prune": True}}},
             steps=(Step(operation=True), Step(files={"pod-2.yaml": None}, operation=True))),
    ]


def source_cases() -> list[Case]:
    """helm_test.go, kustomize_test.go, jsonnet_test.go, app_multiple_sources_test.go, directory tests."""
    kube_version = CHART_MAP + "  kubeVersion: {{ .Capabilities.KubeVersion.Version | quote }}\n"
    kustomization = ("resources:\n- guestbook-ui-deployment.yaml\n- guestbook-ui-svc.yaml\n")
    jsonnet_cm = ("function(foo='foo', bar='bar') {apiVersion: 'v1', kind: 'ConfigMap', "
                  "metadata: {name: 'my-map'}, data: {foo: foo, bar: bar}}\n")
    jsonnet_guestbook = ("function(name='jsonnet-guestbook-ui', replicas=1) [\n"
                         "  {apiVersion: 'apps/v1', kind: 'Deployment', metadata: {name: name},\n"
                         "   spec: {replicas: replicas, selector: {matchLabels: {app: name}},\n"
                         "          template: {metadata: {labels: {app: name}},\n"
                         "                     spec: {containers: [{name: name, image: 'nginx:1.27'}]}}}},\n"
                         "]\n")
    ext_var = ("{apiVersion: 'v1', kind: 'ConfigMap', metadata: {name: 'my-map'},\n"
               " data: {foo: std.extVar('foo'), bar: std.extVar('bar')}}\n")
    env = "$ARGOCD_APP_NAME"
    return [
        Case("helm-set-env", "TestHelmSetEnv", chart(),
             source={"helm": {"parameters": [{"name": "foo", "value": env}]}}),
        Case("helm-set-string-env", "TestHelmSetStringEnv", chart(),
             source={"helm": {"parameters": [{"name": "foo", "value": env, "forceString": True}]}}),
        Case("helm-release-name", "TestHelmReleaseName", chart(), source={"helm": {"releaseName": "foo"}}),
        Case("helm-values-file", "TestHelmValues", {**chart(), "foo.yml": "foo: from-foo-yml\n"},
             source={"helm": {"valueFiles": ["foo.yml"]}}),
        Case("helm-values-object", "TestHelmValues (valuesObject beside values)", chart(),
             source={"helm": {"values": "foo: from-values-text\n", "valuesObject": {"foo": "from-object"}}}),
        Case("helm-kube-version", "TestKubeVersion", chart(template=kube_version)),
        Case("helm-dependency", "TestHelmWithDependencies",
             {**{f"parent/{k}": v for k, v in chart("parent", values="foo: parent\n").items()},
              "parent/Chart.yaml": ("apiVersion: v2\nname: parent\nversion: 1.0.0\ndependencies:\n- name: child\n"
                                    "  version: 1.0.0\n  repository: file://../child\n"),
              "child/Chart.yaml": "apiVersion: v2\nname: child\nversion: 1.0.0\n",
              "child/templates/child.yaml": ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: child-map\n"
                                             "data:\n  from: child\n")},
             path="parent"),
        Case("kustomize-remote-base", "none in kustomize_test.go: a remote git base (issue 23), here on the "
             "suite's git server, cloned by Argo CD's kustomize and fetched by tidecd",
             {"base/kustomization.yaml": "resources:\n- cm.yaml\n",
              "base/cm.yaml": cm("remote-base-map", {"from": "remote base"}),
              "app/kustomization.yaml": "namePrefix: k-\nresources:\n- \"@REPO@//@DIR@/base?ref=main\"\n"},
             path="app"),
        Case("kustomize-app-source", "TestKustomize2AppSource",
             {**GUESTBOOK, "kustomization.yaml": kustomization},
             source={"kustomize": {"namePrefix": "k2-patched-", "nameSuffix": "-deploy1",
                                   "commonLabels": {"patched-by": "argo-cd"}}}),
        Case("kustomize-replicas", "TestKustomizeReplicas2AppSource",
             {**GUESTBOOK, "kustomization.yaml": kustomization},
             source={"kustomize": {"replicas": [{"name": "guestbook-ui", "count": 2}]}}),
        Case("kustomize-images", "TestKustomizeImages", {**GUESTBOOK, "kustomization.yaml": kustomization},
             source={"kustomize": {"images": ["nginx:1.26"]}}),
        Case("kustomize-cm-gen", "TestSyncStatusOptionIgnore",
             {"kustomization.yaml": ("configMapGenerator:\n- name: my-map\n  literals:\n  - foo=bar\n"
                                     "generatorOptions:\n  annotations:\n"
                                     "    argocd.argoproj.io/compare-options: IgnoreExtraneous\n")},
             steps=(Step(sync=Sync()), Step(files={"kustomization.yaml": (
                 "configMapGenerator:\n- name: my-map\n  literals:\n  - foo=baz\ngeneratorOptions:\n  annotations:\n"
                 "    argocd.argoproj.io/compare-options: IgnoreExtraneous\n")}, sync=Sync()))),
        Case("jsonnet-applied", "TestJsonnetAppliedCorrectly", {"main.jsonnet": jsonnet_guestbook}),
        Case("jsonnet-tla", "TestJsonnetTlaParameterAppliedCorrectly", {"main.jsonnet": jsonnet_guestbook},
             source={"directory": {"jsonnet": {"tlas": [{"name": "name", "value": "testing-tla"},
                                                        {"name": "replicas", "value": "0", "code": True}]}}}),
        Case("jsonnet-tla-env", "TestJsonnetTlaEnv", {"main.jsonnet": jsonnet_cm},
             source={"directory": {"jsonnet": {"tlas": [{"name": "foo", "value": env},
                                                        {"name": "bar", "value": f"'{env}'", "code": True}]}}}),
        Case("jsonnet-extvar-env", "TestJsonnetExtVarEnv", {"main.jsonnet": ext_var},
             source={"directory": {"jsonnet": {"extVars": [{"name": "foo", "value": env},
                                                           {"name": "bar", "value": f"'{env}'", "code": True}]}}}),
        Case("directory-recurse", "TestDirectoryRecurse",
             {"top.yaml": cm("top"), "nested/deeper.yaml": cm("deeper")},
             source={"directory": {"recurse": True}}),
        Case("directory-no-recurse", "TestDirectory",
             {"top.yaml": cm("top"), "nested/deeper.yaml": cm("deeper")}),
        Case("directory-recurse-ignore", "TestDirectoryRecurseIgnore",
             {"top.yaml": cm("top"), "nested/my-map.yaml": cm("my-map"), "c.json": json.dumps(cm("c"))},
             source={"directory": {"recurse": True, "exclude": "*/my-map.yaml"}}),
        Case("multi-source", "TestMultiSourceAppCreation", {"one/guestbook.yaml": [deployment(), service()],
                                                             "two/cm.yaml": cm("second-source")},
             spec={"sources": [{"repoURL": "@REPO@", "targetRevision": "main", "path": "@DIR@/one"},
                               {"repoURL": "@REPO@", "targetRevision": "main", "path": "@DIR@/two"}]}),
        Case("multi-source-ref-values", "TestMultiSourceAppWithHelmExternalValueFiles",
             {**{f"chart/{k}": v for k, v in chart().items()}, "values/external.yaml": "foo: from-ref-source\n"},
             spec={"sources": [
                 {"repoURL": "@REPO@", "targetRevision": "main", "path": "@DIR@/chart",
                  "helm": {"valueFiles": ["$values/@DIR@/values/external.yaml"]}},
                 {"repoURL": "@REPO@", "targetRevision": "main", "ref": "values"}]}),
    ]


CASES: list[Case] = hook_cases() + sync_cases() + source_cases()
