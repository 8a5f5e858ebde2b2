"""ApplicationSet generators and policies that must behave as Argo CD's (facts from Argo CD's generator sources,
their Go test tables and the ApplicationSet docs; the code and cases here are tidecd's own)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.unit.test_appset_generators import FakeSources, appset
from tidecd.config.appset.expand import expand
from tidecd.config.appset.generators import ClusterInfo, Evaluator
from tidecd.config.appset.template import Renderer

CLUSTERS = [ClusterInfo("staging-1", "https://s1", {"type": "staging"}, {"owner": "a"}),
            ClusterInfo("staging-2", "https://s2", {"type": "staging"}),
            ClusterInfo("prod", "https://p", {"type": "production"})]


def params(gen: dict[str, Any], root: Path, *, go: bool = True,
           clusters: list[ClusterInfo] | None = None) -> list[dict[str, Any]]:
    evaluator = Evaluator(FakeSources(root, clusters), Renderer(go))
    return [p.values for p in evaluator.run(gen, "spec.generators[0]")]


def test_cluster_flat_list_gives_one_parameter_set_with_every_cluster(tmp_path: Path) -> None:
    """Generators-Cluster.md, "Gather cluster information as a flat list": one Application per generator."""
    gen = {"clusters": {"selector": {"matchLabels": {"type": "staging"}}, "flatList": True}}
    found = params(gen, tmp_path, clusters=CLUSTERS)
    assert len(found) == 1
    assert [c["name"] for c in found[0]["clusters"]] == ["staging-1", "staging-2"]
    spec_values = "clusters:\n{{- range .clusters }}\n  - name: {{ .name }}\n{{- end }}\n"
    out = expand(appset([gen], go=True, name="flat-list-guestbook",
                        extra={"source": {"repoURL": "https://git.example/apps", "path": "helm-guestbook",
                                          "helm": {"values": spec_values}}}),
                 FakeSources(tmp_path, CLUSTERS))
    assert list(out.apps) == ["flat-list-guestbook"], out.errors
    values = out.apps["flat-list-guestbook"].doc["spec"]["source"]["helm"]["values"]
    assert values == "clusters:\n  - name: staging-1\n  - name: staging-2\n"


def test_cluster_params_as_argo_cd_gives_them(tmp_path: Path) -> None:
    """cluster.go: the local cluster has name, nameNormalized (unchanged) and server only; a Secret's cluster has
    `metadata` with only its non-empty maps; nameNormalized is sanitized (lowercase, [-a-z0-9.], trimmed)."""
    found = {p["name"]: p for p in params({"clusters": {}}, tmp_path,
                                          clusters=[*CLUSTERS, ClusterInfo("-My_Cluster.", "https://m")])}
    assert found["in-cluster"] == {"name": "in-cluster", "nameNormalized": "in-cluster",
                                   "server": "https://kubernetes.default.svc"}
    assert found["staging-1"]["metadata"] == {"labels": {"type": "staging"}, "annotations": {"owner": "a"}}
    assert found["staging-2"]["metadata"] == {"labels": {"type": "staging"}}
    assert found["-My_Cluster."]["metadata"] == {}
    assert found["-My_Cluster."]["nameNormalized"] == "my-cluster"
    flat = {p["name"]: p for p in params({"clusters": {}}, tmp_path, go=False, clusters=CLUSTERS)}
    assert flat["in-cluster"] == {"name": "in-cluster", "nameNormalized": "in-cluster",
                                  "server": "https://kubernetes.default.svc"}
    assert flat["staging-1"]["metadata.annotations.owner"] == "a"
