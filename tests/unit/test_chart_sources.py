"""Chart sources without a network: semver constraints, index parsing, OCI references and layers."""

from __future__ import annotations

import hashlib
import io
import tarfile

import pytest

from tidecd.base.errors import ConfigError, NotFound, SourceRefused
from tidecd.config.load import ApplicationSource
from tidecd.source import charts, helmrepo, oci
from tidecd.source.archives import Budget
from tidecd.source.versions import BadConstraint, best_version, parse_version

VERSIONS = ["1.0.0", "1.2.3", "1.2.9", "1.3.0", "2.0.0-rc.1", "2.0.0", "17.0.1", "17.4.2", "0.2.5", "0.3.0", "v3.1"]


@pytest.mark.parametrize(("constraint", "expected"), [
    ("17.x", "17.4.2"), ("17.*", "17.4.2"), ("~1.2", "1.2.9"), ("~1.2.4", "1.2.9"), ("^0.2.1", "0.2.5"),
    ("^1.2", "1.3.0"), (">=1.0 <2.0", "1.3.0"), (">= 1.2, < 1.3", "1.2.9"), ("1.2 - 1.2.5", "1.2.3"),
    ("1.0.0 || 0.3.0", "1.0.0"), ("*", "17.4.2"), ("", "17.4.2"), ("1.2.3", "1.2.3"), ("=1.3.0", "1.3.0"),
    ("2.0.0-rc.1", "2.0.0-rc.1"), (">=2.0.0-0 <2.0.0", "2.0.0-rc.1"), ("<1.0.0", "0.3.0"), ("3.x", "v3.1"),
    ("!=17.4.2, >=17", "17.0.1"), ("9.x", None),
])
def test_constraints_select_the_highest_match_as_helm_does(constraint: str, expected: str | None) -> None:
    assert best_version(VERSIONS, constraint) == expected


def test_pre_releases_match_only_when_asked_for() -> None:
    assert best_version(["1.0.0", "2.0.0-rc.1"], ">=1") == "1.0.0"
    assert best_version(["1.0.0", "2.0.0-rc.1"], ">=1.0.0-0") == "2.0.0-rc.1"


def test_bad_constraints_and_versions() -> None:
    with pytest.raises(BadConstraint):
        best_version(VERSIONS, ">=banana")
    assert parse_version("latest") is None and parse_version("v1.2") is not None


def test_chart_versions_and_image_tags_are_read_by_the_one_parser() -> None:
    from tidecd.base import semver

    assert parse_version is semver.parse_version
    assert parse_version("2024.01.15") == parse_version("v2024.1.15")  # CalVer, as Masterminds' NewVersion reads it
    assert parse_version("1.2.3-rc..1") is None and parse_version("1.x") is None
    assert semver.newest_semver(["2024.01.15", "2023.12.01"], None) == "2024.01.15"


INDEX = b"""
apiVersion: v1
entries:
  web:
  - name: web
    version: 1.0.0
    digest: AAAA
    urls: [web-1.0.0.tgz]
    created: 2026-01-01T00:00:00Z
  - name: web
    version: 1.1.0
    digest: bbbb
    urls: [https://cdn.example.com/web-1.1.0.tgz]
  db:
  - {name: db, version: 3.0.0, urls: [db-3.0.0.tgz]}
generated: 2026-01-01T00:00:00Z
"""


def test_index_parse_choose_and_poll_refs() -> None:
    index = helmrepo.parse_index(INDEX, "https://charts.example.com")
    assert [v.version for v in index["web"]] == ["1.0.0", "1.1.0"]
    assert index["web"][0].digest == "aaaa"  # digests compare in lower case
    assert helmrepo.choose(index, "web", "1.x", "https://charts.example.com").version == "1.1.0"
    assert helmrepo.choose(index, "web", "1.0.0", "https://charts.example.com").urls == ("web-1.0.0.tgz",)
    with pytest.raises(NotFound, match="chart 'nope' is not in the helm repository"):
        helmrepo.choose(index, "nope", "*", "https://charts.example.com")
    with pytest.raises(NotFound, match="no version matches '2.x'"):
        helmrepo.choose(index, "web", "2.x", "https://charts.example.com")
    with pytest.raises(ConfigError, match="targetRevision '>=x.y' is not a chart version or constraint"):
        helmrepo.choose(index, "web", ">=x.y", "https://charts.example.com")
    refs = helmrepo.refs_of(index)
    assert refs == {"web@1.0.0": "aaaa", "web@1.1.0": "bbbb", "db@3.0.0": "3.0.0"}
    source = ApplicationSource(repo_url="https://charts.example.com", chart="web", target_revision="1.x")
    assert charts.resolve_from_refs(source, refs) == "1.1.0:bbbb"
    assert charts.resolve_from_refs(source, {"web@1.0.0": "aaaa"}) == "1.0.0:aaaa"
    assert charts.resolve_from_refs(source, {}) is None


def test_an_index_that_is_not_one_is_a_clear_error() -> None:
    from tidecd.base.errors import SourceUnavailable

    with pytest.raises(SourceUnavailable, match="not a helm repository index"):
        helmrepo.parse_index(b"<html>hello</html>", "https://charts.example.com")


def test_archives_are_verified_against_the_index_digest() -> None:
    data = b"chart bytes"
    digest = hashlib.sha256(data).hexdigest()
    assert helmrepo.verify(data, digest, "chart web 1.0.0") == digest
    assert helmrepo.verify(data, "sha256:" + digest.upper(), "x") == digest
    with pytest.raises(SourceRefused, match="chart web 1.0.0: archive digest .* does not match the index"):
        helmrepo.verify(b"other bytes", digest, "chart web 1.0.0")


def test_source_kinds_and_oci_references() -> None:
    git = ApplicationSource(repo_url="https://github.com/a/b")
    helm = ApplicationSource(repo_url="https://charts.example.com", chart="redis")
    new = ApplicationSource(repo_url="oci://ghcr.io/org/charts/redis")
    old = ApplicationSource(repo_url="registry-1.docker.io/bitnamicharts", chart="redis")
    assert [charts.kind_of(s) for s in (git, helm, new, old)] == ["git", "helm", "oci", "oci"]
    assert charts.oci_ref(new) == oci.OciRef("ghcr.io", "org/charts/redis")
    assert charts.oci_ref(old).url == "oci://registry-1.docker.io/bitnamicharts/redis"
    with pytest.raises(ConfigError, match="expected oci://<registry>/<repository>"):
        oci.parse("oci://ghcr.io")
    with pytest.raises(ConfigError, match="expected oci://"):
        oci.parse("oci://ghcr.io/Upper/../x")


def test_oci_tags_resolve_exactly_or_as_semver() -> None:
    tags = ["0.1.0", "0.1.4", "0.2.0", "1.0.0_build.1", "latest"]
    assert oci.resolve_tag(tags, "latest", "oci://r/x") == "latest"
    assert oci.resolve_tag(tags, "^0.1", "oci://r/x") == "0.1.4"
    assert oci.resolve_tag(tags, "1.x", "oci://r/x") == "1.0.0_build.1"  # helm writes + as _ in tags
    digest = "sha256:" + "a" * 64
    assert oci.resolve_tag(tags, digest, "oci://r/x") == digest
    with pytest.raises(NotFound, match="no tag matches '3.x'"):
        oci.resolve_tag(tags, "3.x", "oci://r/x")


def tar_gz(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_artifact_layers_merge_later_over_earlier() -> None:
    merged = oci.merge_layers([tar_gz({"app/a.yaml": b"1", "app/b.yaml": b"old"}), tar_gz({"app/b.yaml": b"new"})],
                              Budget("artifact"))
    with tarfile.open(fileobj=io.BytesIO(merged), mode="r:gz") as tar:
        got = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    assert got == {"app/a.yaml": b"1", "app/b.yaml": b"new"}


def test_chart_cache_names_are_store_safe() -> None:
    ref = charts.ChartRef("helm", "https://charts.example.com", "web", "1.0.0+build.7", "ab" * 32)
    assert ref.cache_revision == "1.0.0_build.7-abababababababab"
    assert charts.ChartSnapshots.key(ref).startswith("snapshots/charts.example.com-")
    assert charts.ChartSnapshots.key(ref).endswith("/charts/web-1.0.0_build.7-abababababababab.tgz")


def test_missing_chart_dependencies_are_found_and_vendored_ones_are_not() -> None:
    from tidecd.source.dependencies import missing_dependencies

    chart_yaml = (b"apiVersion: v2\nname: top\nversion: 1.0.0\ndependencies:\n"
                  b"- {name: web, version: 1.x, repository: https://charts.example.com}\n"
                  b"- {name: db, version: 2.x, repository: oci://r.example.com/charts}\n"
                  b"- {name: local, version: 0.1.0, repository: file://../local}\n")
    archive = tar_gz({"top/Chart.yaml": chart_yaml, "top/charts/db-2.1.0.tgz": b"x",
                      "top/charts/local/Chart.yaml": b"name: local\n"})
    assert [d["name"] for d in missing_dependencies(archive)] == ["web"]
    assert missing_dependencies(tar_gz({"top/Chart.yaml": b"apiVersion: v2\nname: top\nversion: 1.0.0\n"})) == []
