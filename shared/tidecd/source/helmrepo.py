"""Helm chart repositories over HTTP(S): `index.yaml`, version resolution, verified chart downloads.

An Application names a chart repository with `repoURL: https://charts.example.com`, `chart: redis` and a
`targetRevision` that is a version or a constraint (`17.x`). The index is fetched once per call (the poll
makes one index call per distinct repository per tick), the highest matching version is chosen as helm
and Argo CD choose it, and its archive is downloaded and checked against the index's sha256 `digest`
before it is stored (see `source.charts`). Credentials come from a repository Secret (`type: helm`,
`username`/`password`); they are sent to the repository's own host, and to a chart URL on another host
only with `passCredentials`, as helm's `--pass-credentials`. Responses are bounded in size and time.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

import yaml

from tidecd.base import limits
from tidecd.base.errors import ConfigError, NotFound, SourceRefused, SourceUnavailable
from tidecd.config.load import redact_repo_url

if TYPE_CHECKING:
    from tidecd.source.git import RepoCredentials

HTTP_TIMEOUT = 60.0
MAX_INDEX_BYTES = 64 * 1024 * 1024
MAX_CHART_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ChartVersion:
    """One entry of a chart repository's index."""

    name: str
    version: str
    digest: str  # sha256 hex of the archive, "" when the index has none
    urls: tuple[str, ...]


def index_url(repo_url: str) -> str:
    return repo_url.rstrip("/") + "/index.yaml"


def _check_url(repo_url: str) -> None:
    if urlsplit(repo_url).scheme not in ("http", "https"):
        raise ConfigError(f"repoURL {redact_repo_url(repo_url)!r}: a helm repository is an http(s) URL")


def answer_body(response: Any, limit: int, where: str, *, credentialed: bool) -> bytes:
    """The body of a chart or registry answer, at most `limit` bytes read (streamed); an error status is
    NotFound (404) or SourceUnavailable naming `where`, with a hint for a refused login. Shared by the helm
    repository and OCI clients."""
    if response.status_code in (401, 403):
        hint = " (check the repository Secret's username and password)" if credentialed else " (no credentials)"
        raise SourceUnavailable(f"{where}: HTTP {response.status_code}{hint}")
    if response.status_code == 404:
        raise NotFound(f"{where}: not found (HTTP 404)")
    if response.status_code != 200:
        raise SourceUnavailable(f"{where}: HTTP {response.status_code}")
    chunks, size = [], 0
    for chunk in response.iter_content(1024 * 1024):
        size += len(chunk)
        if size > limit:
            raise SourceUnavailable(f"{where}: larger than {limit // 2**20} MiB")
        chunks.append(chunk)
    return b"".join(chunks)


def http_get(url: str, credentials: RepoCredentials | None, *, limit: int, what: str,
             send_credentials: bool = True) -> bytes:
    """GET `url` with basic auth (when given and allowed), at most `limit` bytes, errors without secrets."""
    import requests

    auth = None
    if credentials is not None and send_credentials and (credentials.username or credentials.password):
        auth = (credentials.username, credentials.password)
    shown = redact_repo_url(url)
    try:
        with requests.get(url, auth=auth, timeout=HTTP_TIMEOUT, stream=True, allow_redirects=True) as response:
            return answer_body(response, limit, f"{what} {shown}", credentialed=auth is not None)
    except requests.RequestException as exc:
        raise SourceUnavailable(f"{what} {shown}: {type(exc).__name__}") from None


def fetch_index(repo_url: str, credentials: RepoCredentials | None = None) -> dict[str, list[ChartVersion]]:
    """Every chart of the repository and its versions, from `index.yaml`."""
    _check_url(repo_url)
    data = http_get(index_url(repo_url), credentials, limit=MAX_INDEX_BYTES, what="helm repository index")
    return parse_index(data, repo_url)


def parse_index(data: bytes, repo_url: str = "") -> dict[str, list[ChartVersion]]:

    shown = index_url(redact_repo_url(repo_url)) if repo_url else "index.yaml"
    try:
        text = data.decode("utf-8-sig")
        limits.check_yaml(text, shown)  # alias bombs and deep nesting are refused before parsing
        doc: Any = yaml.load(text, Loader=limits.SafeLoader)  # noqa: S506 - a SafeLoader
    except UnicodeDecodeError:
        raise SourceUnavailable(f"{shown}: not UTF-8 text") from None
    except yaml.YAMLError:
        raise SourceUnavailable(f"{shown}: not a valid helm repository index (YAML)") from None
    entries = doc.get("entries") if isinstance(doc, dict) else None
    if not isinstance(entries, dict):
        raise SourceUnavailable(f"{shown}: not a helm repository index (no entries)")
    out: dict[str, list[ChartVersion]] = {}
    for name, versions in entries.items():
        for entry in versions if isinstance(versions, list) else []:
            if not isinstance(entry, dict) or not isinstance(entry.get("version"), str):
                continue
            urls = tuple(u for u in entry.get("urls") or [] if isinstance(u, str))
            digest = str(entry["digest"]) if isinstance(entry.get("digest"), str) else ""
            out.setdefault(str(name), []).append(ChartVersion(str(name), entry["version"], digest.lower(), urls))
    return out


def refs_of(index: dict[str, list[ChartVersion]]) -> dict[str, str]:
    """The index as the poll remembers it: `<chart>@<version>` → digest (what moved, per chart)."""
    return {f"{name}@{v.version}": v.digest or v.version for name, versions in index.items() for v in versions}


def choose(index: dict[str, list[ChartVersion]], chart: str, target: str, repo_url: str) -> ChartVersion:
    """The version of `chart` that `target` (a version or a constraint) selects: the highest match."""
    from tidecd.source.versions import BadConstraint, best_version

    versions = index.get(chart)
    shown = redact_repo_url(repo_url)
    if not versions:
        raise NotFound(f"chart {chart!r} is not in the helm repository {shown}")
    try:
        best = best_version([v.version for v in versions], target)
    except BadConstraint as exc:
        raise ConfigError(f"spec.source.targetRevision {target!r} is not a chart version or constraint: {exc}") \
            from None
    if best is None:
        raise NotFound(f"chart {chart!r} in {shown}: no version matches {target!r}")
    return next(v for v in versions if v.version == best)


def download(repo_url: str, entry: ChartVersion, credentials: RepoCredentials | None = None, *,
             pass_credentials: bool = False) -> bytes:
    """The chart archive of `entry`, verified against the index digest."""
    if not entry.urls:
        raise SourceUnavailable(f"chart {entry.name} {entry.version}: the index lists no download URL")
    url = urljoin(repo_url.rstrip("/") + "/", entry.urls[0])
    if urlsplit(url).scheme not in ("http", "https"):
        raise SourceUnavailable(f"chart {entry.name} {entry.version}: download URL is not http(s)")
    same_host = urlsplit(url).netloc.rpartition("@")[2] == urlsplit(repo_url).netloc.rpartition("@")[2]
    data = http_get(url, credentials, limit=MAX_CHART_BYTES, what=f"chart {entry.name} {entry.version}",
                    send_credentials=same_host or pass_credentials)
    verify(data, entry.digest, f"chart {entry.name} {entry.version}")
    return data


def verify(data: bytes, digest: str, what: str) -> str:
    """The archive's sha256; SourceUnavailable when it differs from the expected `digest`."""
    actual = hashlib.sha256(data).hexdigest()
    expected = digest.removeprefix("sha256:").lower()
    if expected and actual != expected:
        raise SourceRefused(f"{what}: archive digest sha256:{actual[:16]}… does not match the index "
                                f"(sha256:{expected[:16]}…); refusing it")
    return actual
