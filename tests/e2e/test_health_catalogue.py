"""Argo CD's own catalogue of health checks runs unmodified on tidecd's Lua engine, against its own fixtures.

The scripts, `health_test.yaml` files and `testdata/` objects come from the Go module
github.com/argoproj/argo-cd/v3@v3.6.1 (`resource_customizations/`), which tidecd bundles and applies by
default (`tidecd.health.catalogue`; `scripts/tools.sh argocd-catalogue` fetches it); none of it is in this
repository. Each case is run the way Argo CD's own `TestLuaHealthScript` runs it: the script Argo CD would
pick for the object (its own directory, else a wildcard one), as tidecd picks it by default, the object as
`obj`, and the expected status and message compared exactly.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.argocd_catalogue import Case, health_cases, load_yaml
from tidecd.base.model import HealthResult, HealthStatus, ResourceKey
from tidecd.health import assess, catalogue, lua

pytestmark = pytest.mark.e2e

# A sample across groups: Argo's own kinds, cert-manager, sealed-secrets, and popular operators' CRDs.
SAMPLE = [
    "argoproj.io/Rollout", "argoproj.io/AnalysisRun", "argoproj.io/Experiment", "argoproj.io/ApplicationSet",
    "cert-manager.io/Certificate", "cert-manager.io/Issuer", "cert-manager.io/ClusterIssuer",
    "bitnami.com/SealedSecret", "monitoring.coreos.com/Prometheus", "monitoring.coreos.com/Alertmanager",
    "kafka.strimzi.io/Kafka", "kafka.strimzi.io/KafkaTopic", "postgresql.cnpg.io/Cluster",
    "external-secrets.io/ExternalSecret", "external-secrets.io/ClusterSecretStore", "keda.sh/ScaledObject",
    "kustomize.toolkit.fluxcd.io/Kustomization", "helm.toolkit.fluxcd.io/HelmRelease",
    "source.toolkit.fluxcd.io/GitRepository", "elasticsearch.k8s.elastic.co/Elasticsearch",
    "rabbitmq.com/RabbitmqCluster", "jaegertracing.io/Jaeger", "kyverno.io/ClusterPolicy",
    "serving.knative.dev/Service", "tekton.dev/PipelineRun", "velero.io/Backup", "karpenter.sh/NodePool",
    "pkg.crossplane.io/Provider", "_.crossplane.io/_", "cluster.x-k8s.io/Cluster",
    "cluster.x-k8s.io/MachineDeployment", "operators.coreos.com/Subscription", "minio.min.io/Tenant",
    "opentelemetry.io/OpenTelemetryCollector", "gateway.networking.k8s.io/HTTPRoute",
    "grafana.integreatly.org/Grafana", "k8s.mariadb.com/MariaDB",
]
# The kinds tidecd also checks in Python: the built-in must agree with Argo CD's script on its fixtures.
BUILT_IN = ["argoproj.io/Rollout", "cert-manager.io/Certificate", "bitnami.com/SealedSecret"]


@pytest.fixture(scope="module")
def cases(argocd_catalogue: Path) -> dict[str, list[Case]]:
    return health_cases(argocd_catalogue)


def run_case(root: Path, case: Case) -> tuple[str, str]:
    obj = load_yaml(root / case.kind_dir / case.input_path)
    key = ResourceKey.of(obj)
    picked = catalogue.health_script(key.group, key.kind)  # the default lookup, as assess makes it
    assert catalogue.root() == root and picked is not None, f"{case.id}: tidecd picks no script for it"
    result = lua.evaluate(picked[1], obj, where=case.kind_dir)
    return (result.status.value, result.message) if result else ("", "")


def test_the_sample_covers_what_it_should(cases: dict[str, list[Case]]) -> None:
    assert len(SAMPLE) >= 30
    missing = [k for k in SAMPLE if not cases.get(k)]
    assert not missing, f"not in the catalogue or without tests: {missing}"
    assert len({k.split("/")[0] for k in SAMPLE}) >= 25


@pytest.mark.parametrize("kind_dir", SAMPLE)
def test_catalogue_sample(argocd_catalogue: Path, cases: dict[str, list[Case]], kind_dir: str) -> None:
    wrong = [(c.input_path, (c.status, c.message), got) for c in cases[kind_dir]
             if (got := run_case(argocd_catalogue, c)) != (c.status, c.message)]
    assert not wrong, f"{kind_dir}: (fixture, expected, got): {wrong}"


def test_the_whole_catalogue(argocd_catalogue: Path, cases: dict[str, list[Case]]) -> None:
    """Every health.lua of Argo CD v3.6.1 with every fixture (293 kinds, 1,397 cases when written)."""
    started = time.monotonic()
    total = sum(len(c) for c in cases.values())
    wrong = [(c.id, (c.status, c.message), got) for kind in cases.values() for c in kind
             if (got := run_case(argocd_catalogue, c)) != (c.status, c.message)]
    print(f"\nArgo CD catalogue: {len(cases)} kinds, {total - len(wrong)}/{total} cases pass "
          f"in {time.monotonic() - started:.1f}s")
    assert len(cases) >= 250 and total >= 1000
    assert not wrong, f"{len(wrong)} of {total} cases differ: {wrong[:20]}"


@pytest.mark.parametrize("kind_dir", BUILT_IN)
def test_python_built_ins_agree_with_argo_cds_scripts(argocd_catalogue: Path, cases: dict[str, list[Case]],
                                                      kind_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """tidecd's own checks of these kinds (what applies where the catalogue is not installed) say what the
    catalogue says, which applies by default."""
    for case in cases[kind_dir]:
        obj = load_yaml(argocd_catalogue / case.kind_dir / case.input_path)
        assert assess(obj) == HealthResult(HealthStatus(case.status), case.message), case.id  # the catalogue
        with monkeypatch.context() as without:
            without.setattr(catalogue, "root", lambda: None)
            assert assess(obj) == HealthResult(HealthStatus(case.status), case.message), case.id
