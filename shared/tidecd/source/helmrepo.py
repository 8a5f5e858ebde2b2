"""Helm chart repositories over HTTP(S): `index.yaml`, version resolution, verified chart downloads.

An Application names a chart repository with `repoURL: https://charts.example.com`, `chart: redis` and a
`targetRevision` that is a version or a constraint (`17.x`). The index is fetched once per call (the poll
makes one index call per distinct repository per tick) and parsed once per content (`fetch_index`), the
highest matching version is chosen as helm and Argo CD choose it, and its archive is downloaded and
checked against the index's sha256 `digest` before it is stored (see `source.charts`). Credentials come
from a repository Secret (`type: helm`, `username`/`password`); they go only to the repository's own
scheme, host and port, and to a chart URL on another origin only with `passCredentials`, as helm's
`--pass-credentials`; a redirect elsewhere gets none (`may_carry`). Responses are bounded in size and time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import yaml

from tidecd.base import limits
from tidecd.base.errors import ConfigError, LimitExceeded, NotFound, SourceRefused, SourceUnavailable
from tidecd.clients.store import ObjectStore, PreconditionFailed
from tidecd.config.load import redact_repo_url, repo_key

if TYPE_CHECKING:
    from tidecd.source.git import RepoCredentials

HTTP_TIMEOUT = 60.0
MAX_CHART_BYTES = 64 * 1024 * 1024
MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)


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


def answer_body(response: Any, limit: int, where: str, *, credentialed: bool, limit_field: str = "") -> bytes:
    """The body of a chart repository's answer, at most `limit` bytes read (streamed); an error status is
    NotFound (404) or SourceUnavailable naming `where`, with a hint for a refused login. Past `limit`: a
    LimitExceeded naming the limit's variable when `limit_field` names one, else SourceUnavailable."""
    if response.status_code in (401, 403):
        hint = " (check the repository Secret's username and password)" if credentialed else " (no credentials)"
        raise SourceUnavailable(f"{where}: HTTP {response.status_code}{hint}")
    if response.status_code == 404:
        raise NotFound(f"{where}: not found (HTTP 404)")
    if response.status_code != 200:
        raise SourceUnavailable(f"{where}: HTTP {response.status_code}")
    declared = response.headers.get("Content-Length", "")
    if limit_field and declared.isdigit() and int(declared) > limit:  # refused before any of it is read
        response.close()
        raise limits.exceeded(f"{where}: size", limit_field, limit, " bytes")
    chunks, size = [], 0
    for chunk in response.iter_content(1024 * 1024):
        size += len(chunk)
        if size > limit:
            response.close()
            if limit_field:
                raise limits.exceeded(f"{where}: size", limit_field, limit, " bytes")
            raise SourceUnavailable(f"{where}: larger than {limit // 2**20} MiB")
        chunks.append(chunk)
    return b"".join(chunks)


def may_carry(home: str, url: str, also: str = "") -> bool:
    """Where a helm repository's credentials may go: the one rule every tidecd client keeps
    (`clients.registry.origin`): only to the scheme, host and port of `home`, the repository they were
    configured for. `also` is a chart URL the index names on another origin: it gets them only when the app
    sets `passCredentials` (Argo CD's `spec.source.helm.passCredentials`, helm's `--pass-credentials`, which
    since helm 3.6.1 is the only way credentials leave the repository's origin). A redirect is a new URL,
    asked again: one that leaves both gets nothing."""
    # lazy: cold start (the registry client imports requests: only HTTP sources need it)
    from tidecd.clients.registry import origin

    there = origin(url)
    return there == origin(home) or (bool(also) and there == origin(also))


@dataclass(frozen=True)
class Answer:
    body: bytes | None  # None: 304 Not Modified (the `etag` sent still holds)
    etag: str


class RefusedAnswer(LimitExceeded):
    """An answer over its limit; `etag` is the one it came with ("" when none), so that the same content
    can be recognised (a 304) and refused again without its transfer."""

    def __init__(self, message: str, etag: str) -> None:
        super().__init__(message)
        self.etag = etag


def http_get(url: str, credentials: RepoCredentials | None, *, limit: int, what: str, home: str, also: str = "",
             limit_field: str = "", etag: str = "") -> Answer:
    """GET `url`, at most `limit` bytes, errors without secrets. Redirects are followed here, hop by hop
    (at most MAX_REDIRECTS), so that `may_carry` decides on every hop whether basic auth goes with it;
    `requests` would keep it across an http→https upgrade and leave the choice to its own rule."""
    # lazy: cold start (requests only when a chart repository is fetched over HTTP)
    import requests

    auth = None
    if credentials is not None and (credentials.username or credentials.password):
        auth = (credentials.username, credentials.password)
    shown = redact_repo_url(url)
    headers = {"If-None-Match": etag} if etag else {}
    try:
        for _hop in range(MAX_REDIRECTS + 1):
            carry = auth if auth is not None and may_carry(home, url, also) else None
            with requests.get(url, auth=carry, headers=headers, timeout=HTTP_TIMEOUT, stream=True,
                              allow_redirects=False) as response:
                location = response.headers.get("Location", "")
                if response.status_code in _REDIRECTS and location:
                    url = _join(url, location, f"{what} {shown}: redirected to")
                    if urlsplit(url).scheme not in ("http", "https"):
                        raise SourceUnavailable(f"{what} {shown}: redirected to a non-http(s) URL")
                    continue
                if response.status_code == 304 and etag:
                    return Answer(None, etag)
                try:
                    body = answer_body(response, limit, f"{what} {shown}", credentialed=carry is not None,
                                       limit_field=limit_field)
                except LimitExceeded as exc:
                    raise RefusedAnswer(str(exc), response.headers.get("ETag", "")) from None
                return Answer(body, response.headers.get("ETag", ""))
    except requests.RequestException as exc:
        raise SourceUnavailable(f"{what} {shown}: {type(exc).__name__}") from None
    except ValueError:  # requests parses a redirect's Location even when not following it
        raise SourceUnavailable(f"{what} {shown}: the answer's Location is not a URL") from None
    raise SourceUnavailable(f"{what} {shown}: more than {MAX_REDIRECTS} redirects")


def _join(base: str, reference: str, what: str) -> str:
    """`reference` (a Location, or a chart URL of the index) resolved against `base`; one that is not a URL
    is the repository's error, naming `what`."""
    # lazy: cold start (the registry client imports requests: only HTTP sources need it)
    from tidecd.clients.registry import resolve_url

    target = resolve_url(base, reference)
    if target is None:
        raise SourceUnavailable(f"{what} {reference[:100]!r}: not a URL")
    return target


Index = dict[str, list[ChartVersion]]


@dataclass(frozen=True)
class _Held:
    etag: str
    digest: str
    index: Index
    refused: str = ""  # the LimitExceeded this content got, under `limit`
    limit: int = 0


_HELD: OrderedDict[str, _Held] = OrderedDict()  # index URL → its last answer, parsed (this process)
_HELD_LOCK = threading.Lock()
HELD_INDEXES = 16


def fetch_index(repo_url: str, credentials: RepoCredentials | None = None, *,
                store: ObjectStore | None = None) -> Index:
    """Every chart of the repository and its versions, from `index.yaml`.

    The index streams in, refused past `TIDECD_MAX_HELM_INDEX_BYTES`. It is parsed once per content: a big
    index (tens of MB) takes minutes to parse as YAML, and every resolve, poll and download asks for it.
    The last one parsed per repository is kept in this process, with its ETag (a 304 answer costs no
    transfer) and sha256 (an unchanged body is not parsed again); with a `store`, the parsed entries are
    kept at `snapshots/<repo-key>/helm-index/<sha256>.json` too, so another process reads them as JSON.

    An index over the limit is refused before its body is read when its Content-Length says so, else as
    it streams past the limit. A refused index with an ETag is remembered (this process): the next call
    asks with If-None-Match, and a 304 (the same content) is refused again without any transfer, until
    the repository's index or the limit changes. The app's condition names the variable either way."""
    _check_url(repo_url)
    url = index_url(repo_url)
    bound = limits.current().helm_index_bytes
    with _HELD_LOCK:
        held = _HELD.get(url)
    if held is not None and held.refused and held.limit != bound:
        held = None  # refused under another limit: asked for in full again
    try:
        answer = http_get(url, credentials, limit=bound, what="helm repository index", home=repo_url,
                          limit_field="helm_index_bytes", etag=held.etag if held else "")
    except RefusedAnswer as refusal:
        if refusal.etag:
            _hold(url, _Held(refusal.etag, "", {}, str(refusal), bound))
        raise
    if answer.body is None and held is not None:
        if held.refused:
            raise LimitExceeded(held.refused)
        return held.index
    body = answer.body or b""
    digest = hashlib.sha256(body).hexdigest()
    key = f"snapshots/{repo_key(repo_url)}/helm-index/{digest}.json"
    index = held.index if held is not None and held.digest == digest else (
        _stored_index(store, key) if store is not None else None)
    if index is None:
        index = parse_index(body, repo_url)
        if store is not None:
            with contextlib.suppress(PreconditionFailed):  # a racing caller stored the same parse
                store.write(key, _dump_index(index), if_generation_match=0)
    _hold(url, _Held(answer.etag, digest, index))
    return index


def _hold(url: str, held: _Held) -> None:
    with _HELD_LOCK:
        _HELD[url] = held
        _HELD.move_to_end(url)
        while len(_HELD) > HELD_INDEXES:
            _HELD.popitem(last=False)


def forget() -> None:
    """Drop the indexes this process holds (a test standing for a new process; memory pressure)."""
    with _HELD_LOCK:
        _HELD.clear()


def _dump_index(index: Index) -> bytes:
    return json.dumps({name: [[v.version, v.digest, list(v.urls)] for v in versions]
                       for name, versions in index.items()}, separators=(",", ":")).encode()


def _stored_index(store: ObjectStore, key: str) -> Index | None:
    """A parse stored by `fetch_index`; None when absent or not of its shape (parsed again then)."""
    blob = store.read(key)
    if blob is None:
        return None
    try:
        data = json.loads(blob.data)
        return {str(name): [ChartVersion(str(name), str(version), str(digest), tuple(str(u) for u in urls))
                            for version, digest, urls in versions]
                for name, versions in data.items()}
    except (ValueError, TypeError, AttributeError):
        return None


def parse_index(data: bytes, repo_url: str = "") -> dict[str, list[ChartVersion]]:
    """The charts of an index: name → versions (`version`, `digest`, `urls` of each entry; the rest of an
    entry, most of a big index, is skipped).

    Composing a big index as YAML took minutes (60 MB: 141 s and 1.2 GB); only four fields of it are used.
    So the YAML event stream is walked once and only those fields are kept: libyaml's parser makes the
    events without recursion, nothing is composed, and an alias is never expanded (a value that is an alias
    is ignored), so neither an alias bomb nor deep nesting costs more than the text's own size. An index in
    JSON (JSON is YAML; some repositories publish it so) is read by the JSON parser instead, faster still.
    A value counts as YAML would type it: a `version: 1.0` is a float to YAML, and not a version here."""
    shown = index_url(redact_repo_url(repo_url)) if repo_url else "index.yaml"
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SourceUnavailable(f"{shown}: not UTF-8 text") from None
    if text.lstrip().startswith("{"):
        with contextlib.suppress(ValueError, RecursionError):
            return _from_json(json.loads(text), shown)
    try:
        return _from_events(iter(yaml.parse(text, Loader=limits.SafeLoader)), shown)
    except (yaml.YAMLError, StopIteration):
        raise SourceUnavailable(f"{shown}: not a valid helm repository index (YAML)") from None


def _from_json(doc: Any, shown: str) -> Index:
    entries = doc.get("entries") if isinstance(doc, dict) else None
    if not isinstance(entries, dict):
        raise SourceUnavailable(f"{shown}: not a helm repository index (no entries)")
    out: Index = {}
    for name, versions in entries.items():
        for entry in versions if isinstance(versions, list) else []:
            if not isinstance(entry, dict) or not isinstance(entry.get("version"), str):
                continue
            urls = tuple(u for u in entry.get("urls") or [] if isinstance(u, str))
            digest = str(entry["digest"]) if isinstance(entry.get("digest"), str) else ""
            out.setdefault(str(name), []).append(ChartVersion(str(name), entry["version"], digest.lower(), urls))
    return out


_OPEN = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSE = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
_STR = "tag:yaml.org,2002:str"


def _skip(events: Iterator[Any], first: Any) -> None:
    """Pass over the node that starts with `first` (a loop, not recursion: any depth costs nothing)."""
    depth = 1 if isinstance(first, _OPEN) else 0
    while depth:
        event = next(events)
        depth += 1 if isinstance(event, _OPEN) else -1 if isinstance(event, _CLOSE) else 0


def _text(event: Any) -> str | None:
    """A scalar event's value when YAML would load it as a string (a plain `1.0` is a float); else None."""
    if not isinstance(event, yaml.ScalarEvent):
        return None
    if event.tag is not None and event.tag not in ("!", _STR):
        return None
    if event.implicit[0] and _RESOLVER.resolve(yaml.ScalarNode, event.value, (True, False)) != _STR:  # type: ignore[no-untyped-call]
        return None
    return str(event.value)


def _pairs(events: Iterator[Any]) -> Iterator[tuple[str | None, Any]]:
    """(key, first event of the value) of the mapping being read, up to its end; the caller reads or skips
    each value. A key that is not a plain scalar is skipped and given as None."""
    while not isinstance(key := next(events), yaml.MappingEndEvent):
        if not isinstance(key, yaml.ScalarEvent):
            _skip(events, key)
        yield (key.value if isinstance(key, yaml.ScalarEvent) else None), next(events)


def _from_events(events: Iterator[Any], shown: str) -> Index:
    while not isinstance(root := next(events), yaml.MappingStartEvent | yaml.SequenceStartEvent
                         | yaml.ScalarEvent | yaml.AliasEvent | yaml.StreamEndEvent):
        pass
    out: Index = {}
    found = False
    for key, value in _pairs(events) if isinstance(root, yaml.MappingStartEvent) else iter(()):
        if key != "entries" or not isinstance(value, yaml.MappingStartEvent):
            _skip(events, value)
            continue
        found = True
        for name, versions in _pairs(events):
            if name is None or not isinstance(versions, yaml.SequenceStartEvent):
                _skip(events, versions)
                continue
            while not isinstance(item := next(events), yaml.SequenceEndEvent):
                if not isinstance(item, yaml.MappingStartEvent):
                    _skip(events, item)
                    continue
                entry = _entry(events, name)
                if entry is not None:
                    out.setdefault(name, []).append(entry)
    if not found:
        raise SourceUnavailable(f"{shown}: not a helm repository index (no entries)")
    return out


def _entry(events: Iterator[Any], name: str) -> ChartVersion | None:
    version: str | None = None
    digest = ""
    urls: list[str] = []
    for key, value in _pairs(events):
        if key == "version":
            version = _text(value)
        elif key == "digest":
            digest = (_text(value) or "").lower()
        elif key == "urls" and isinstance(value, yaml.SequenceStartEvent):
            urls = []
            while not isinstance(url := next(events), yaml.SequenceEndEvent):
                if (text := _text(url)) is not None:
                    urls.append(text)
                else:
                    _skip(events, url)
            continue
        if not isinstance(value, yaml.ScalarEvent | yaml.AliasEvent):
            _skip(events, value)
    return ChartVersion(name, version, digest, tuple(urls)) if version is not None else None


_RESOLVER = yaml.resolver.Resolver()


def refs_of(index: dict[str, list[ChartVersion]]) -> dict[str, str]:
    """The index as the poll remembers it: `<chart>@<version>` → digest (what moved, per chart)."""
    return {f"{name}@{v.version}": v.digest or v.version for name, versions in index.items() for v in versions}


def choose(index: dict[str, list[ChartVersion]], chart: str, target: str, repo_url: str) -> ChartVersion:
    """The version of `chart` that `target` (a version or a constraint) selects: the highest match."""
    # lazy: cold start (semver only when a chart version is chosen: a git-only poll never loads it)
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
    """The chart archive of `entry`, verified against the index digest. The credentials go to the URL the
    index names only on the repository's own origin, or with `pass_credentials` (see `may_carry`)."""
    if not entry.urls:
        raise SourceUnavailable(f"chart {entry.name} {entry.version}: the index lists no download URL")
    url = _join(repo_url.rstrip("/") + "/", entry.urls[0], f"chart {entry.name} {entry.version}: download URL")
    if urlsplit(url).scheme not in ("http", "https"):
        raise SourceUnavailable(f"chart {entry.name} {entry.version}: download URL is not http(s)")
    data = http_get(url, credentials, limit=MAX_CHART_BYTES, what=f"chart {entry.name} {entry.version}",
                    home=repo_url, also=url if pass_credentials else "").body or b""
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
