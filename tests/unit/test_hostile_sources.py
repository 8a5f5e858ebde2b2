"""Hostile chart sources (issue 29): where a repository's credentials may go, and what a chart archive, an
OCI artifact and a helm index may cost.

Small HTTP servers on 127.0.0.1 stand for a helm repository, a CDN, a git server and an OCI registry (another
port is another origin, as for a browser). The hostile inputs are generated here: a 3.5 MB chart archive that
expands to 3 GiB is deflate blocks of zeros written once and repeated (no 3 GiB is ever made), an artifact
of 200 layers of 8 MiB is only a manifest that says so. Peak memory is measured with tracemalloc around the
call (every buffer the reading makes is a Python object), wall time with a monotonic clock.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import struct
import tarfile
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support import localhttp
from tests.support.fakecluster import FakeCluster, application, fake_runtime
from tests.unit.test_chart_sources import tar_gz
from tidecd.base.errors import LimitExceeded, SourceUnavailable
from tidecd.clients.store import MemoryStore
from tidecd.config.load import ApplicationSource
from tidecd.source import charts, git, helmrepo, oci
from tidecd.source.git import RepoCredentials
from tidecd.usecases import api

USER, PASSWORD = "robot", "topsecret-0123"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
CREDS = RepoCredentials(username=USER, password=PASSWORD)
MiB = 1024 * 1024
Answer = tuple[int, dict[str, str], bytes]


# --- the servers -----------------------------------------------------------------------------------------


@dataclass
class Site:
    """One loopback HTTP server: `routes` maps a path (without query) to an answer, or to a function of the
    request giving one; `seen` is every (path, Authorization) asked. An answer with an ETag the request names
    in If-None-Match is a 304."""

    routes: dict[str, Answer | Callable[[BaseHTTPRequestHandler], Answer]] = field(default_factory=dict)
    seen: list[tuple[str, str]] = field(default_factory=list)
    httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.httpd is not None
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def host(self) -> str:
        return self.url.removeprefix("http://")

    def auth_on(self, path: str) -> set[str]:
        return {auth for p, auth in self.seen if p.split("?")[0] == path}

    def answer(self, req: BaseHTTPRequestHandler) -> None:
        path = req.path.split("?")[0]
        self.seen.append((req.path, req.headers.get("Authorization", "")))
        route = self.routes.get(path, (404, {}, b""))
        status, headers, body = route(req) if callable(route) else route
        if status == 200 and headers.get("ETag") and req.headers.get("If-None-Match") == headers["ETag"]:
            status, body = 304, b""
        try:
            req.send_response(status)
            for key, value in headers.items():
                req.send_header(key, value)
            req.send_header("Content-Length", str(len(body)))
            req.end_headers()
            for start in range(0, len(body), MiB):  # a client that stops reading resets the connection
                req.wfile.write(body[start:start + MiB])
        except (BrokenPipeError, ConnectionResetError):
            pass

    def start(self) -> Site:
        self.httpd = localhttp.serve_get(self.answer)
        return self

    def stop(self) -> None:
        localhttp.stop(self.httpd)


@pytest.fixture
def sites() -> Iterator[Callable[[], Site]]:
    started: list[Site] = []

    def start() -> Site:
        started.append(Site().start())
        return started[-1]

    helmrepo.forget()
    yield start
    helmrepo.forget()
    for site in started:
        site.stop()


def redirect(to: str) -> Answer:
    return 302, {"Location": to}, b""


# --- charts and indexes ----------------------------------------------------------------------------------


CHART_YAML = b"apiVersion: v2\nname: web\nversion: 1.0.0\n"
CHART = tar_gz({"web/Chart.yaml": CHART_YAML, "web/templates/cm.yaml": b"apiVersion: v1\nkind: ConfigMap\n"})


def index_of(entries: dict[str, list[tuple[str, bytes, str]]]) -> bytes:
    """A helm index: chart name → [(version, archive, url)]."""
    doc = {"apiVersion": "v1", "entries": {
        name: [{"name": name, "version": version, "digest": hashlib.sha256(archive).hexdigest(), "urls": [url]}
               for version, archive, url in versions] for name, versions in entries.items()}}
    return json.dumps(doc).encode()  # JSON is YAML


def bomb_chart(expanded_mib: int) -> bytes:
    """A valid chart .tgz whose templates expand to `expanded_mib` MiB of zeros, 1 MiB a file: deflate
    blocks of 1 MiB of zeros are made once (~1 KB each, after a full flush, so they can be repeated), and
    the gzip CRC is carried across them with the affine map a block of zeros makes of it."""
    zeros = bytes(MiB)
    fresh = zlib.compressobj(9, zlib.DEFLATED, -15)
    zero_block = fresh.compress(zeros) + fresh.flush(zlib.Z_FULL_FLUSH)
    base = zlib.crc32(zeros, 0)
    columns = [zlib.crc32(zeros, 1 << bit) ^ base for bit in range(32)]  # the linear part, one bit at a time

    def crc_after_zeros(crc: int) -> int:
        out = base
        for bit in range(32):
            if crc >> bit & 1:
                out ^= columns[bit]
        return out

    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    parts, crc, size = [b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"], 0, 0

    def put(data: bytes) -> None:
        nonlocal crc, size
        parts.append(deflate.compress(data) + deflate.flush(zlib.Z_FULL_FLUSH))
        crc, size = zlib.crc32(data, crc), size + len(data)

    chart_yaml = tarfile.TarInfo("web/Chart.yaml")
    chart_yaml.size = len(CHART_YAML)
    put(chart_yaml.tobuf() + CHART_YAML + bytes(512 - len(CHART_YAML)))
    for number in range(expanded_mib):
        info = tarfile.TarInfo(f"web/templates/zeros-{number:05}.yaml")
        info.size = MiB
        put(info.tobuf())
        parts.append(zero_block)
        crc, size = crc_after_zeros(crc), size + MiB
    put(bytes(1024))  # the two zero blocks that end a tar
    parts.append(deflate.flush(zlib.Z_FINISH) + struct.pack("<II", crc, size & 0xFFFFFFFF))
    return b"".join(parts)


def test_the_generated_bomb_is_a_valid_chart_archive() -> None:
    with tarfile.open(fileobj=io.BytesIO(bomb_chart(3)), mode="r:gz") as tar:
        sizes = {m.name: m.size for m in tar}
        assert tar.extractfile("web/templates/zeros-00002.yaml").read() == bytes(MiB)  # type: ignore[union-attr]
    assert sizes["web/Chart.yaml"] == len(CHART_YAML) and len(sizes) == 4


@dataclass
class Measured:
    seconds: float
    peak_mib: float


def measured(call: Callable[[], Any]) -> tuple[Measured, BaseException | None]:
    """Run `call`, with its wall time and the peak of memory allocated meanwhile (tracemalloc)."""
    tracemalloc.start()
    start, failure = time.monotonic(), None
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the caller asserts on it
        failure = exc
    seconds = time.monotonic() - start
    peak = tracemalloc.get_traced_memory()[1] / MiB
    tracemalloc.stop()
    return Measured(seconds, peak), failure


# --- 1. where a credential may go --------------------------------------------------------------------------


def test_one_rule_for_where_a_helm_credential_may_go() -> None:
    home = "http://127.0.0.1:8080/charts"
    assert helmrepo.may_carry(home, "http://127.0.0.1:8080/charts/web-1.0.0.tgz")
    assert helmrepo.may_carry("https://charts.example.com", "https://charts.example.com:443/web.tgz")
    assert not helmrepo.may_carry(home, "http://127.0.0.1:8081/web-1.0.0.tgz")  # another port
    assert not helmrepo.may_carry("http://charts.example.com", "https://charts.example.com/web.tgz")  # scheme
    assert not helmrepo.may_carry(home, "http://localhost:8080/charts/web.tgz")  # another host name
    cdn = "https://cdn.example.com/web-1.0.0.tgz"
    assert helmrepo.may_carry(home, cdn, also=cdn)  # passCredentials: the chart URL the index names
    assert not helmrepo.may_carry(home, "https://elsewhere.example.com/web.tgz", also=cdn)


def test_a_chart_on_another_origin_gets_credentials_only_with_pass_credentials(sites: Callable[[], Site]) -> None:
    repo, cdn = sites(), sites()
    repo.routes["/index.yaml"] = (200, {}, index_of({"web": [("1.0.0", CHART, f"{cdn.url}/web-1.0.0.tgz")]}))
    cdn.routes["/web-1.0.0.tgz"] = (200, {}, CHART)
    source = ApplicationSource(repo_url=repo.url, chart="web", target_revision="1.x")

    ref = charts.resolve(source, CREDS)
    assert charts.ChartSnapshots(MemoryStore()).get_or_fetch(ref, CREDS) == CHART
    assert repo.auth_on("/index.yaml") == {BASIC}
    assert cdn.auth_on("/web-1.0.0.tgz") == {""}, "the index named another origin: no credentials there"

    assert charts.ChartSnapshots(MemoryStore()).get_or_fetch(ref, CREDS, pass_credentials=True) == CHART
    assert cdn.auth_on("/web-1.0.0.tgz") == {"", BASIC}, "passCredentials passes them to the chart URL"


def test_a_redirect_to_another_origin_gets_no_credentials(sites: Callable[[], Site]) -> None:
    repo, mirror, far = sites(), sites(), sites()
    repo.routes["/index.yaml"] = redirect(f"{mirror.url}/index.yaml")
    mirror.routes["/index.yaml"] = (200, {}, index_of({"web": [("1.0.0", CHART, "web-1.0.0.tgz")],
                                                       "db": [("2.0.0", CHART, f"{mirror.url}/db-2.0.0.tgz")]}))
    repo.routes["/web-1.0.0.tgz"] = redirect(f"{mirror.url}/web-1.0.0.tgz")  # relative: on the repository
    mirror.routes["/web-1.0.0.tgz"] = (200, {}, CHART)
    mirror.routes["/db-2.0.0.tgz"] = redirect(f"{far.url}/db-2.0.0.tgz")
    far.routes["/db-2.0.0.tgz"] = (200, {}, CHART)

    index = helmrepo.fetch_index(repo.url, CREDS)
    assert helmrepo.download(repo.url, helmrepo.choose(index, "web", "*", repo.url), CREDS) == CHART
    assert repo.auth_on("/index.yaml") == {BASIC} and repo.auth_on("/web-1.0.0.tgz") == {BASIC}
    assert mirror.auth_on("/index.yaml") == {""} and mirror.auth_on("/web-1.0.0.tgz") == {""}

    db = helmrepo.choose(index, "db", "*", repo.url)
    assert helmrepo.download(repo.url, db, CREDS, pass_credentials=True) == CHART
    assert mirror.auth_on("/db-2.0.0.tgz") == {BASIC}  # the chart URL the index names, with passCredentials
    assert far.auth_on("/db-2.0.0.tgz") == {""}, "a redirect from there to a third origin gets none"


def test_a_git_redirect_to_another_origin_gets_no_credentials(sites: Callable[[], Site]) -> None:
    """The git source (dulwich over urllib3) keeps the same rule: credentials only to the configured origin."""
    repo, elsewhere = sites(), sites()
    repo.routes["/team/app.git/info/refs"] = redirect(f"{elsewhere.url}/team/app.git/info/refs?service=git-upload-pack")
    elsewhere.routes["/team/app.git/info/refs"] = (401, {"WWW-Authenticate": 'Basic realm="x"'}, b"")

    with pytest.raises(SourceUnavailable):
        git.ls_remote(f"{repo.url}/team/app.git", CREDS)
    assert repo.auth_on("/team/app.git/info/refs") == {BASIC}
    assert elsewhere.seen and elsewhere.auth_on("/team/app.git/info/refs") == {""}


# --- 2. bounds ---------------------------------------------------------------------------------------------


def test_a_chart_that_expands_to_3_gib_is_refused_early_in_bounded_memory(sites: Callable[[], Site]) -> None:
    bomb = bomb_chart(3 * 1024)
    assert len(bomb) < 4 * MiB
    repo = sites()
    repo.routes["/index.yaml"] = (200, {}, index_of({"web": [("1.0.0", bomb, "web-1.0.0.tgz")]}))
    repo.routes["/web-1.0.0.tgz"] = (200, {}, bomb)
    store = MemoryStore()
    ref = charts.resolve(ApplicationSource(repo_url=repo.url, chart="web", target_revision="1.0.0"), None)

    cost, refusal = measured(lambda: charts.ChartSnapshots(store).get_or_fetch(ref))

    print(f"\n3 GiB chart bomb: refused in {cost.seconds:.1f}s, peak {cost.peak_mib:.1f} MiB allocated")
    assert isinstance(refusal, LimitExceeded), refusal
    assert str(refusal) == ("chart web 1.0.0: expanded size: over the limit of 268,435,456 bytes "
                            "(TIDECD_MAX_ARCHIVE_BYTES)")
    assert cost.peak_mib < 16, cost  # the 3.5 MB archive, twice at most, and a read buffer
    assert cost.seconds < 30, cost  # it stops after 256 MiB of the 3 GiB
    assert store.read(charts.ChartSnapshots.key(ref)) is None  # nothing stored


def oci_registry(site: Site, layers: list[tuple[bytes, int]]) -> tuple[oci.Registry, list[str]]:
    """`site` as an OCI registry of one artifact `team/app:1.0.0` of `layers` (blob, declared size); the
    blobs asked for are listed in the list returned."""
    asked: list[str] = []
    descriptors = [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": "sha256:" + hashlib.sha256(blob).hexdigest(), "size": size} for blob, size in layers]
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.empty.v1+json",
                                      "digest": "sha256:" + hashlib.sha256(b"{}").hexdigest(), "size": 2},
                           "layers": descriptors}).encode()
    site.routes["/v2/team/app/manifests/1.0.0"] = (200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
                                                   manifest)
    for blob, _ in layers:
        digest = "sha256:" + hashlib.sha256(blob).hexdigest()

        def serve(req: BaseHTTPRequestHandler, blob: bytes = blob, digest: str = digest) -> Answer:
            asked.append(digest)
            return 200, {}, blob

        site.routes[f"/v2/team/app/blobs/{digest}"] = serve
    return oci.Registry(oci.parse(f"oci://{site.host}/team/app")), asked


def test_an_artifact_of_200_layers_of_8_mib_is_refused_before_any_is_fetched(
        sites: Callable[[], Site], monkeypatch: pytest.MonkeyPatch) -> None:
    layer = tar_gz({"app/cm.yaml": b"kind: ConfigMap\n"})
    registry, asked = oci_registry(sites(), [(layer, 8 * MiB)] * 200)

    cost, refusal = measured(lambda: oci.fetch(registry, "1.0.0"))

    print(f"\n200 layers of 8 MiB: refused in {cost.seconds:.2f}s, peak {cost.peak_mib:.1f} MiB allocated")
    assert isinstance(refusal, LimitExceeded), refusal
    assert str(refusal).endswith("@1.0.0: 200 layers: over the limit of 16 (TIDECD_MAX_OCI_LAYERS)")
    assert asked == [] and cost.peak_mib < 4, (asked, cost)

    monkeypatch.setenv("TIDECD_MAX_OCI_LAYERS", "500")
    with pytest.raises(LimitExceeded, match=r"@1.0.0: layers of 1,677,721,600 bytes: over the limit of "
                                            r"268,435,456 bytes \(TIDECD_MAX_OCI_BYTES\)$"):
        oci.fetch(registry, "1.0.0")
    assert asked == []


def test_artifact_layers_are_fetched_no_larger_than_declared_and_expanded_within_one_bound(
        sites: Callable[[], Site], monkeypatch: pytest.MonkeyPatch) -> None:
    small = tar_gz({"app/a.yaml": b"kind: ConfigMap\n"})
    bombs = [bomb_chart(40), bomb_chart(41)]  # each alone under the bound, together over it
    site = sites()
    registry, _ = oci_registry(site, [(small, len(small)), *((b, len(b)) for b in bombs)])
    monkeypatch.setenv("TIDECD_MAX_ARCHIVE_BYTES", str(64 * MiB))

    cost, refusal = measured(lambda: oci.fetch(registry, "1.0.0"))

    assert isinstance(refusal, LimitExceeded), refusal
    assert str(refusal).endswith("@1.0.0: expanded size: over the limit of 67,108,864 bytes "
                                 "(TIDECD_MAX_ARCHIVE_BYTES)")
    assert cost.peak_mib < 8, cost

    lying, _ = oci_registry(sites(), [(bombs[0], 100)])  # the registry sends more than the manifest declared
    with pytest.raises(SourceUnavailable, match="answer larger than 100 bytes"):
        oci.fetch(lying, "1.0.0")


def test_a_helm_index_past_its_bound_is_refused_as_it_streams(sites: Callable[[], Site],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    repo = sites()
    repo.routes["/index.yaml"] = (200, {}, b"apiVersion: v1\nentries: {}\n" + b"#" * (32 * MiB))
    monkeypatch.setenv("TIDECD_MAX_HELM_INDEX_BYTES", str(MiB))

    cost, refusal = measured(lambda: helmrepo.fetch_index(repo.url))

    assert isinstance(refusal, LimitExceeded), refusal
    assert str(refusal) == (f"helm repository index {repo.url}/index.yaml: size: over the limit of 1,048,576 "
                            "bytes (TIDECD_MAX_HELM_INDEX_BYTES)")
    assert cost.peak_mib < 4, cost


def big_index(charts_count: int, versions: int, extra: str = "") -> bytes:
    lines = ["apiVersion: v1", "entries:"]
    for number in range(charts_count):
        lines.append(f"  chart{number}:")
        for version in range(versions):
            lines += [f"  - name: chart{number}", f"    version: {version}.0.0", f"    digest: {'ab' * 32}",
                      f"    description: R&D chart {number}, a description as long as real ones are{extra}",
                      "    urls:", f"    - https://charts.example.com/chart{number}-{version}.0.0.tgz"]
    return ("\n".join(lines) + "\n").encode()


def test_a_helm_index_is_parsed_once_per_content(sites: Callable[[], Site], monkeypatch: pytest.MonkeyPatch) -> None:
    repo = sites()
    body = big_index(60, 20)
    repo.routes["/index.yaml"] = (200, {"ETag": '"v1"'}, body)
    parses: list[int] = []
    real_parse = helmrepo.parse_index

    def counting(data: bytes, repo_url: str = "") -> helmrepo.Index:
        parses.append(len(data))
        return real_parse(data, repo_url)

    monkeypatch.setattr(helmrepo, "parse_index", counting)
    source = ApplicationSource(repo_url=repo.url, chart="chart7", target_revision="19.x")
    times = []
    for _ in range(4):
        start = time.monotonic()
        assert charts.resolve(source, None).version == "19.0.0"
        times.append(time.monotonic() - start)
    print(f"\nindex of {len(body) / MiB:.2f} MB: resolve took {', '.join(f'{t:.3f}s' for t in times)}")
    assert len(parses) == 1 and len(repo.seen) == 4, "one parse; every call still asks (a 304 after the first)"
    assert all(t < times[0] for t in times[1:]), times

    store = MemoryStore()  # another process: nothing held, but the parse is in the store
    repo.routes["/index.yaml"] = (200, {}, body)  # and no ETag this time
    helmrepo.forget()
    helmrepo.fetch_index(repo.url, store=store)
    assert len(parses) == 2
    helmrepo.forget()
    assert helmrepo.choose(helmrepo.fetch_index(repo.url, store=store), "chart7", "19.x", repo.url).version == "19.0.0"
    assert len(parses) == 2, "read from the store, not parsed again"

    repo.routes["/index.yaml"] = (200, {}, body + b"  newchart:\n  - {name: newchart, version: 1.0.0, urls: [x.tgz]}\n")
    assert helmrepo.fetch_index(repo.url, store=store)["newchart"][0].version == "1.0.0"
    assert len(parses) == 3, "new content is parsed"


# --- 3. a refusal is a condition on the app -------------------------------------------------------------


def test_a_refused_chart_is_a_condition_on_the_app_and_is_not_fetched_again(
        sites: Callable[[], Site], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bomb = bomb_chart(64)
    repo = sites()
    repo.routes["/index.yaml"] = (200, {}, index_of({"web": [("1.0.0", bomb, "web-1.0.0.tgz")]}))
    repo.routes["/web-1.0.0.tgz"] = (200, {}, bomb)
    monkeypatch.setenv("TIDECD_MAX_ARCHIVE_BYTES", str(8 * MiB))
    app = dataclasses.replace(application("web"), source=ApplicationSource(repo_url=repo.url, chart="web",
                                                                            target_revision="1.x"))
    cluster = FakeCluster()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    runtime = fake_runtime(cluster, MemoryStore(), app)  # the real source and render path
    runtime.settings.api_token = "t0ken"

    def get() -> dict[str, Any]:
        answer = api.handle("GET", "/api/v1/apps/web", {"Authorization": "Bearer t0ken"}, b"", runtime,
                            query={"refresh": "true"})
        assert answer.status == 200, answer.body
        return dict(answer.body)

    for _ in range(2):
        body = get()
        conditions = [c for c in body.get("conditions", []) if c.get("type") == "ComparisonError"]
        assert conditions and conditions[0]["message"].endswith(
            "chart web 1.0.0: expanded size: over the limit of 8,388,608 bytes (TIDECD_MAX_ARCHIVE_BYTES)"), body
    assert len(repo.auth_on("/web-1.0.0.tgz")) == 1 and sum(
        p == "/web-1.0.0.tgz" for p, _ in repo.seen) == 1, "the refusal is recorded: not fetched again"


def test_a_refused_helm_index_is_a_condition_and_is_not_transferred_again_until_it_changes(
        sites: Callable[[], Site], monkeypatch: pytest.MonkeyPatch) -> None:
    """The index is resolved before any render (outside the render's stored refusals): a refused one is
    remembered with its ETag, and while the repository answers 304 to it nothing is transferred again."""
    repo = sites()
    big = (200, {"ETag": '"big-1"'}, b"apiVersion: v1\nentries: {}\n" + b"#" * (8 * MiB))
    asked: list[str] = []

    def index(req: BaseHTTPRequestHandler) -> Answer:
        asked.append(req.headers.get("If-None-Match", ""))
        return big

    repo.routes["/index.yaml"] = index
    monkeypatch.setenv("TIDECD_MAX_HELM_INDEX_BYTES", str(MiB))
    app = dataclasses.replace(application("web"), source=ApplicationSource(repo_url=repo.url, chart="web",
                                                                            target_revision="1.x"))
    cluster = FakeCluster()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    runtime = fake_runtime(cluster, MemoryStore(), app)
    runtime.settings.api_token = "t0ken"
    expected = (f"helm repository index {repo.url}/index.yaml: size: over the limit of 1,048,576 bytes "
                "(TIDECD_MAX_HELM_INDEX_BYTES)")
    for _ in range(3):
        answer = api.handle("GET", "/api/v1/apps/web", {"Authorization": "Bearer t0ken"}, b"", runtime,
                            query={"refresh": "true"})
        assert answer.status == 200, answer.body
        conditions = [c for c in dict(answer.body).get("conditions", []) if c.get("type") == "ComparisonError"]
        assert conditions and conditions[0]["message"].endswith(expected), answer.body
    assert asked == ["", '"big-1"', '"big-1"'], "asked again with its ETag: a 304, no transfer"

    big = (200, {"ETag": '"big-2"'}, big[2] + b"#")  # new content: fetched (and refused) again
    with pytest.raises(LimitExceeded, match="TIDECD_MAX_HELM_INDEX_BYTES"):
        helmrepo.fetch_index(repo.url)
    monkeypatch.setenv("TIDECD_MAX_HELM_INDEX_BYTES", str(16 * MiB))  # a higher limit: asked for in full
    repo.routes["/index.yaml"] = (200, {"ETag": '"small"'}, index_of({"web": [("1.0.0", CHART, "web-1.0.0.tgz")]}))
    assert helmrepo.fetch_index(repo.url)["web"][0].version == "1.0.0"


def test_an_index_with_an_alias_bomb_or_deep_nesting_costs_no_more_than_its_text() -> None:
    from tests.unit.test_limits import alias_bomb

    bomb = "".join(f"    {line}\n" for line in alias_bomb().splitlines())

    def index(depth: int) -> bytes:
        deep = "[" * depth + "]" * depth
        return (f"apiVersion: v1\nentries:\n  web:\n  - name: web\n    version: 1.0.0\n    urls: [web.tgz]\n"
                f"    annotations:\n{bomb}    deep: {deep}\n  - version: 2.0.0\n    urls: [*a]\n").encode()

    cost, failure = measured(lambda: helmrepo.parse_index(index(500), "https://charts.example.com"))
    assert failure is None and cost.peak_mib < 16 and cost.seconds < 10, (failure, cost)
    parsed = helmrepo.parse_index(index(500), "https://charts.example.com")
    assert [(v.version, v.urls) for v in parsed["web"]] == [("1.0.0", ("web.tgz",)), ("2.0.0", ())]  # aliases unread
    cost, failure = measured(lambda: helmrepo.parse_index(index(100_000), "https://charts.example.com"))
    assert isinstance(failure, SourceUnavailable) and "not a valid helm repository index" in str(failure)
    assert cost.peak_mib < 16 and cost.seconds < 10, cost  # libyaml itself stops past 1,000 levels
