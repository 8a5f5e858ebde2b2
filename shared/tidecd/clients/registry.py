"""The one OCI distribution client: container images for the updater, charts and artifacts for the sources.

    tags(repo)                 GET /v2/<name>/tags/list?n=…, following `Link: <…>; rel="next"`
    manifest(repo, ref)        GET /v2/<name>/manifests/<ref> → (digest, media type, body), cached per client
    blob(repo, digest)         GET /v2/<name>/blobs/<digest>, size-capped
    digest(repo, ref)          the manifest's Docker-Content-Digest (an index's own digest for a multi-platform
                               image; its platforms are checked when asked)
    created(repo, ref)         manifest (the platform's one inside an index) → config blob → `created`

Auth: a 401 carrying `WWW-Authenticate: Bearer realm=…,service=…,scope=…` is answered by fetching a token
from the realm and retrying; `Basic` challenges are retried with basic credentials. Tokens are kept per
(registry, scope) for the client's life (one tick, or one source resolution). A 429 is retried after
`Retry-After` when that is short; longer, the call fails with `RegistryUnavailable(delay)` so the next tick
tries again (no function waits). Every body read is size-capped, and no credential ever reaches an error
message. Credentials come from `kubernetes.io/dockerconfigjson` Secrets (`auths`) or repository Secrets.

Where a credential may go, one rule for every request this client makes (`may_carry`): only to the origin
(scheme, host and port) of the registry it was configured for. A token realm, a redirect or a pagination
`Link` that leaves that origin gets no credentials; nothing a registry answers can widen the rule. Only
tidecd's side can: Docker Hub's own token service (`https://auth.docker.io`, fixed here), and hosts to which
the same dockerconfigjson Secret gives the very same credential (`Credentials.also_for`: the user configured
it for them too). A realm on another origin is still asked, anonymously, rather than refused: public images
and charts behind such registries keep working, and a private one fails with a message that says why
(refusing would break the public ones for no gain). A pagination `Link` to another origin is not followed.
Redirects are followed here, hop by hop, so the rule holds on each (blobs often redirect to storage).
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import hashlib
import ipaddress
import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit

import requests

from tidecd.base.errors import NotFound, SecretError, TemporaryError
from tidecd.clients.secrets import decode_value

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
DOCKER_HUB_AUTH = "https://auth.docker.io"  # Docker Hub's token service: Docker Hub logins may go there
TIMEOUT = 20.0
PAGE_SIZE = 1000
MAX_PAGES = 50
MAX_BODY = 4 * 1024 * 1024
MAX_INLINE_WAIT = 2.0
MAX_REDIRECTS = 5
DEFAULT_PLATFORM = "linux/amd64"

INDEX_TYPES = ("application/vnd.oci.image.index.v1+json",
               "application/vnd.docker.distribution.manifest.list.v2+json")
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.v2+json")
ACCEPT = ", ".join(INDEX_TYPES + MANIFEST_TYPES)


class RegistryUnavailable(TemporaryError):
    """A registry could not be reached, refused us, or rate-limited us: leave the images as they are."""


class NotInRegistry(NotFound, LookupError):
    """The registry has no such repository, tag or platform image (404), or a manifest lacks what was asked
    of it. A LookupError too, as the client's callers catch it; a NotFound, so nothing the client raises is
    outside tidecd's exception tree."""


@dataclass(frozen=True, repr=False)
class Credentials:
    """A registry login. `also_for`: other hosts (host[:port]) the same Secret gives this very login to, so it
    may go there too (a token service on its own host, configured by the user; see `may_carry`)."""

    username: str
    password: str
    also_for: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"Credentials(username={self.username!r}, password='***')"

    __str__ = __repr__


@dataclass(frozen=True, order=True)
class Repository:
    """One image repository: `registry` is the host[:port] as written (docker.io for Docker Hub)."""

    registry: str
    name: str

    def __str__(self) -> str:
        return f"{self.registry}/{self.name}"


def parse_image(image: str) -> Repository:
    """`nginx` → docker.io/library/nginx; `host:5000/team/app` → that host. Tag and digest are dropped."""
    name = image.split("@", 1)[0]
    last = name.rfind("/")
    colon = name.find(":", last + 1)
    if colon >= 0:
        name = name[:colon]
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, path = first.lower(), rest
    else:
        registry, path = DOCKER_HUB, name
    if registry in ("index.docker.io", "registry-1.docker.io"):
        registry = DOCKER_HUB
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    return Repository(registry, path)


def image_reference(image: str) -> tuple[Repository, str, str]:
    """An image as it appears in a manifest → (repository, tag, digest); missing parts are ''."""
    rest, _, digest = image.partition("@")
    last = rest.rfind("/")
    colon = rest.find(":", last + 1)
    tag = rest[colon + 1:] if colon >= 0 else ""
    return parse_image(rest), tag, digest


class Registry(Protocol):
    """The registry calls the updater makes; the test seam (a fake counts and answers them)."""

    def tags(self, repo: Repository, creds: Credentials | None) -> list[str]: ...

    def digest(self, repo: Repository, reference: str, creds: Credentials | None,
               platforms: tuple[str, ...] = ()) -> str: ...

    def created(self, repo: Repository, reference: str, creds: Credentials | None,
                platforms: tuple[str, ...] = ()) -> str: ...


# --- credentials from dockerconfigjson Secrets -----------------------------------------------------------


def _host_of(key: str) -> str:
    text = key.strip()
    if "://" in text:
        text = urlsplit(text).netloc
    host = text.split("/", 1)[0].lower()
    return DOCKER_HUB if host in ("index.docker.io", "registry-1.docker.io") else host


def docker_config_auths(secret: Mapping[str, Any]) -> dict[str, Credentials]:
    """Registry host → credentials from a Secret's `.dockerconfigjson` (or legacy `.dockercfg`)."""
    name = (secret.get("metadata") or {}).get("name", "?")
    raw = None
    for source in ("stringData", "data"):
        values = secret.get(source) or {}
        for key in (".dockerconfigjson", ".dockercfg"):
            if key in values:
                raw = str(values[key])
                if source == "data":
                    try:
                        raw = decode_value(raw, f"Secret {name}: data.{key}").decode()
                    except (SecretError, UnicodeDecodeError):
                        raise ValueError(f"Secret {name}: data.{key} is not valid base64 text") from None
                break
        if raw is not None:
            break
    if raw is None:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        raise ValueError(f"Secret {name}: .dockerconfigjson is not JSON") from None
    auths = parsed.get("auths", parsed) if isinstance(parsed, dict) else None
    if not isinstance(auths, dict):
        raise ValueError(f"Secret {name}: .dockerconfigjson has no auths mapping")
    found: dict[str, Credentials] = {}
    for host, entry in auths.items():
        if not isinstance(entry, dict):
            continue
        user, password = str(entry.get("username", "")), str(entry.get("password", ""))
        if entry.get("auth"):
            try:
                user, _, password = base64.b64decode(str(entry["auth"])).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                raise ValueError(f"Secret {name}: auths[{host!r}].auth is not base64 user:password") from None
        if user or password:
            found[_host_of(str(host))] = Credentials(user, password)
    return {host: replace(creds, also_for=tuple(sorted(other for other, same in found.items()
                                                        if other != host and same == creds)))
            for host, creds in found.items()}


# --- the HTTP client -------------------------------------------------------------------------------------


@dataclass
class Counters:
    """Requests made, by kind: the benchmark and the tests read them."""

    tags_list: int = 0
    manifests: int = 0
    blobs: int = 0
    tokens: int = 0
    by_repository: dict[str, int] = field(default_factory=dict)


_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')
_REDIRECTS = (301, 302, 303, 307, 308)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a URL, the port made explicit: what a credential is bound to."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(scheme, 0)


class HttpRegistry:
    """`Registry` over HTTP. One instance per tick (or per source resolution): it caches tokens and manifests."""

    def __init__(self, *, plain_http: tuple[str, ...] = (), session: requests.Session | None = None,
                 sleep: Callable[[float], None] = time.sleep, timeout: float = TIMEOUT) -> None:
        self.plain_http = tuple(h.lower() for h in plain_http)
        self.session = session or requests.Session()
        self.sleep, self.timeout = sleep, timeout
        self.counters = Counters()
        self._tokens: dict[tuple[str, str], str] = {}
        self._manifests: dict[tuple[Repository, str, str], tuple[str, str, bytes]] = {}
        self._lock = threading.Lock()

    # -- the questions ----------------------------------------------------------------------------------

    def tags(self, repo: Repository, creds: Credentials | None) -> list[str]:
        with self._lock:
            self.counters.tags_list += 1
            self.counters.by_repository[str(repo)] = self.counters.by_repository.get(str(repo), 0) + 1
        url: str | None = f"{self.base(repo)}/v2/{repo.name}/tags/list?n={PAGE_SIZE}"
        tags: list[str] = []
        for _ in range(MAX_PAGES):
            if url is None:
                return tags
            response = self._get(repo, url, creds)
            body = _json(repo, response, "tags list")
            page = body.get("tags") or [] if isinstance(body, dict) else None
            if not isinstance(page, list):
                raise RegistryUnavailable(f"registry {repo.registry}: {repo.name}: malformed tags list")
            tags.extend(t for t in page if isinstance(t, str))  # a tag is a string; anything else is not one
            url = _next_link(repo, response, url)
        raise RegistryUnavailable(f"registry {repo.registry}: {repo.name}: more than {MAX_PAGES} pages of tags")

    def digest(self, repo: Repository, reference: str, creds: Credentials | None,
               platforms: tuple[str, ...] = ()) -> str:
        digest, media_type, body = self.manifest(repo, reference, creds)
        if platforms and media_type in INDEX_TYPES and not _platform_manifests(body, platforms):
            raise NotInRegistry(f"{repo}:{reference} has no image for platform {', '.join(platforms)}")
        return digest

    def created(self, repo: Repository, reference: str, creds: Credentials | None,
                platforms: tuple[str, ...] = ()) -> str:
        _digest, media_type, body = self.manifest(repo, reference, creds)
        if media_type in INDEX_TYPES:
            chosen = _platform_manifests(body, platforms or (DEFAULT_PLATFORM,))
            if not chosen:
                raise NotInRegistry(f"{repo}:{reference} has no image for platform "
                                  f"{', '.join(platforms or (DEFAULT_PLATFORM,))}")
            _digest, media_type, body = self.manifest(repo, chosen[0], creds)
        manifest = _parse(repo, body, "manifest")
        config = manifest.get("config") if isinstance(manifest, dict) else None
        config_digest = config.get("digest") if isinstance(config, dict) else None
        if not isinstance(config_digest, str) or not config_digest.startswith("sha256:"):
            raise NotInRegistry(f"{repo}:{reference}: the manifest names no config blob")
        blob = _parse(repo, self.blob(repo, config_digest, creds), "config blob")
        created = blob.get("created") if isinstance(blob, dict) else None
        if not isinstance(created, str):
            raise NotInRegistry(f"{repo}:{reference}: the image config has no created time")
        return created

    def manifest(self, repo: Repository, reference: str, creds: Credentials | None, *, accept: str = ACCEPT,
                 limit: int = MAX_BODY) -> tuple[str, str, bytes]:
        """(digest, media type, body) of a tag's or digest's manifest; the digest is the registry's
        Docker-Content-Digest (callers that pin content hash the body themselves). Cached per client."""
        key = (repo, reference, accept)
        if key in self._manifests:
            return self._manifests[key]
        with self._lock:
            self.counters.manifests += 1
        response = self._get(repo, f"{self.base(repo)}/v2/{repo.name}/manifests/{reference}", creds,
                             headers={"Accept": accept})
        body = _read(repo, response, limit)
        parsed = _parse(repo, body, "manifest")  # an HTML page or a cut-off answer is no manifest: never pinned
        if not isinstance(parsed, dict) or isinstance(parsed.get("schemaVersion"), bool) \
                or not isinstance(parsed.get("schemaVersion"), int):  # every manifest and index format has one
            raise RegistryUnavailable(f"registry {repo.registry}: {repo.name}: the answer for {reference[:80]!r} "
                                      "is not a manifest (no schemaVersion)")
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
        if media_type not in INDEX_TYPES + MANIFEST_TYPES and isinstance(parsed.get("mediaType"), str):
            media_type = parsed["mediaType"]  # a registry that labels manifests application/json, or not at all
        digest = response.headers.get("Docker-Content-Digest", "") or "sha256:" + hashlib.sha256(body).hexdigest()
        self._manifests[key] = (digest, media_type, body)
        return digest, media_type, body

    def blob(self, repo: Repository, digest: str, creds: Credentials | None, *, limit: int = MAX_BODY) -> bytes:
        """A blob's bytes, at most `limit` (callers check them against `digest`)."""
        with self._lock:
            self.counters.blobs += 1
        return _read(repo, self._get(repo, f"{self.base(repo)}/v2/{repo.name}/blobs/{digest}", creds), limit)

    # -- where credentials may go -----------------------------------------------------------------------

    def base(self, repo: Repository) -> str:
        """The registry's origin as a URL: plain HTTP for loopback hosts and the configured `plain_http`."""
        host = DOCKER_HUB_API if repo.registry == DOCKER_HUB else repo.registry
        bare = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
        plain = _loopback(bare) or host in self.plain_http or bare in self.plain_http
        return f"{'http' if plain else 'https'}://{host}"

    def may_carry(self, repo: Repository, url: str, creds: Credentials | None = None) -> bool:
        """Whether a request to `url` may carry `repo`'s credentials (or a token got with them): only the
        registry's own origin, Docker Hub's token service for Docker Hub, and the hosts the user gave this
        same credential to (`Credentials.also_for`, same scheme as the registry)."""
        home = origin(self.base(repo))
        there = origin(url)
        if there == home:
            return True
        if home[1] == DOCKER_HUB_API and there == origin(DOCKER_HUB_AUTH):
            return True
        also = creds.also_for if creds is not None else ()
        return there[0] == home[0] and any(origin(f"{home[0]}://{host}") == there for host in also)

    # -- HTTP -------------------------------------------------------------------------------------------

    def _send(self, repo: Repository, url: str, headers: Mapping[str, str], authorization: str | None,
              creds: Credentials | None, params: Mapping[str, str] | None = None) -> requests.Response:
        """GET `url`, following redirects here (at most MAX_REDIRECTS) so that `may_carry` is asked on every
        hop: `authorization` goes only where the rule allows, never to where a redirect leads elsewhere."""
        for _hop in range(MAX_REDIRECTS + 1):
            sent = dict(headers)
            if authorization and self.may_carry(repo, url, creds):
                sent["Authorization"] = authorization
            try:
                response = self.session.get(url, headers=sent, params=params, timeout=self.timeout, stream=True,
                                            allow_redirects=False)
            except ValueError:  # requests parses a redirect's Location even when not following it
                raise RegistryUnavailable(f"registry {repo.registry}: {repo.name}: an answer's Location is not "
                                          "a URL", delay=60.0) from None
            location = response.headers.get("Location", "")
            if response.status_code not in _REDIRECTS or not location:
                return response
            response.close()
            url, params = _join(repo, url, location, "redirect"), None
            if urlsplit(url).scheme not in ("http", "https"):
                raise RegistryUnavailable(f"registry {repo.registry}: redirected to a non-http(s) URL", delay=60.0)
        raise RegistryUnavailable(f"registry {repo.registry}: more than {MAX_REDIRECTS} redirects", delay=60.0)

    def _get(self, repo: Repository, url: str, creds: Credentials | None,
             headers: Mapping[str, str] | None = None) -> requests.Response:
        scope = f"repository:{repo.name}:pull"
        auth = self._tokens.get((repo.registry, scope))
        waited = 0.0
        for _attempt in range(4):
            try:
                response = self._send(repo, url, headers or {}, auth, creds)
            except requests.RequestException as exc:
                raise RegistryUnavailable(f"registry {repo.registry} is unavailable: {type(exc).__name__}",
                                          delay=30.0) from None
            if response.status_code == 401 and auth is None:
                auth = self._authorize(repo, response, creds, scope)
                self._tokens[(repo.registry, scope)] = auth  # a token or basic credentials: ask once per tick
                response.close()
                continue
            if response.status_code == 429:
                delay = _retry_after(response.headers.get("Retry-After", ""))
                response.close()
                if waited + delay <= MAX_INLINE_WAIT:
                    self.sleep(delay)
                    waited += delay
                    continue
                raise RegistryUnavailable(f"registry {repo.registry} is rate limiting: retry after {delay:.0f}s",
                                          delay=max(delay, 1.0))
            if response.status_code in (401, 403):
                response.close()
                what = "refused the credentials" if creds else "requires credentials (set a pull-secret)"
                raise RegistryUnavailable(f"registry {repo.registry} {what} for {repo.name}", delay=60.0)
            if response.status_code == 404:
                response.close()
                raise NotInRegistry(f"{repo}: not found in the registry")
            if response.status_code >= 400:
                response.close()
                raise RegistryUnavailable(f"registry {repo.registry} answered HTTP {response.status_code} "
                                          f"for {repo.name}", delay=30.0)
            return response
        raise RegistryUnavailable(f"registry {repo.registry}: {repo.name}: authorization did not succeed")

    def _authorize(self, repo: Repository, response: requests.Response, creds: Credentials | None,
                   scope: str) -> str:
        challenge = response.headers.get("WWW-Authenticate", "")
        scheme, _, params_text = challenge.partition(" ")
        params = dict(_CHALLENGE.findall(params_text))
        if scheme.lower() == "basic":
            if creds is None:
                raise RegistryUnavailable(f"registry {repo.registry} requires credentials for {repo.name} "
                                          "(set a pull-secret)", delay=60.0)
            return _basic(creds)
        if scheme.lower() != "bearer" or not params.get("realm"):
            raise RegistryUnavailable(f"registry {repo.registry}: unsupported authentication challenge "
                                      f"{scheme or '(none)'!r}", delay=60.0)
        realm = params["realm"]
        try:
            realm_url = urlsplit(realm)
            realm_url.port  # noqa: B018 - raises ValueError for a port that is no number
        except ValueError:
            realm_url = urlsplit("")
        if realm_url.scheme not in ("http", "https"):
            raise RegistryUnavailable(f"registry {repo.registry}: token realm is not an http(s) URL")
        registry_host = urlsplit(self.base(repo)).hostname or ""
        if not _realm_allowed(realm_url.hostname or "", registry_host):
            raise RegistryUnavailable(f"registry {repo.registry}: token realm host {realm_url.hostname!r} is a "
                                      "link-local or private address (refused)", delay=300.0)
        query = {"scope": params.get("scope") or scope}
        if params.get("service"):
            query["service"] = params["service"]
        withheld = creds is not None and not self.may_carry(repo, realm, creds)
        with self._lock:
            self.counters.tokens += 1
        try:
            answer = self._send(repo, realm, {}, _basic(creds) if creds else None, creds, query)
            content = _read(repo, answer) if answer.status_code < 400 else b""
        except requests.RequestException as exc:
            raise RegistryUnavailable(f"token service of registry {repo.registry} is unavailable: "
                                      f"{type(exc).__name__}", delay=30.0) from None
        answer.close()
        if answer.status_code in (401, 403):
            what = ("requires credentials, and they are sent only to the registry's own host "
                    f"(the token realm is on {realm_url.netloc})" if withheld
                    else "refused the credentials" if creds else "requires credentials (set a pull-secret)")
            raise RegistryUnavailable(f"token service of registry {repo.registry} {what} for {repo.name}",
                                      delay=60.0)
        if answer.status_code >= 400:
            raise RegistryUnavailable(f"token service of registry {repo.registry} answered HTTP "
                                      f"{answer.status_code}", delay=30.0)
        body = _parse(repo, content, "token answer")
        token = (body.get("token") or body.get("access_token")) if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise RegistryUnavailable(f"token service of registry {repo.registry} sent no token")
        auth = f"Bearer {token}"
        self._tokens[(repo.registry, scope)] = auth
        return auth


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _loopback(host: str) -> bool:
    ip = _ip(host)
    return host == "localhost" or (ip is not None and ip.is_loopback)


def _realm_allowed(realm_host: str, registry_host: str) -> bool:
    """A hostile registry must not point tidecd at the metadata server or the private network: a realm on
    a link-local or unspecified IP is refused, one on a loopback or private IP only for a registry that is
    itself on one (a local or in-network registry). Names are not resolved here."""
    if realm_host == registry_host:
        return True
    ip = _ip(realm_host)
    if ip is None:
        return True
    if ip.is_link_local or ip.is_unspecified or ip.is_multicast:
        return False
    if ip.is_loopback or ip.is_private:
        registry_ip = _ip(registry_host)
        return _loopback(registry_host) or (registry_ip is not None and registry_ip.is_private)
    return True


def _basic(creds: Credentials) -> str:
    return "Basic " + base64.b64encode(f"{creds.username}:{creds.password}".encode()).decode()


MAX_RETRY_AFTER = 3600.0  # a registry's Retry-After is believed up to an hour: the next tick asks again anyway


def _retry_after(value: str) -> float:
    """Seconds a 429's `Retry-After` asks for (delta seconds or an HTTP date), within [0, MAX_RETRY_AFTER];
    60 when it is neither. Only ASCII digits count (`"²".isdigit()` is true, and float() refuses it)."""
    text = value.strip()
    if text.isascii() and text.isdigit():
        return min(float(text), MAX_RETRY_AFTER)
    try:
        when = email.utils.parsedate_to_datetime(text)
        return min(max(0.0, when.timestamp() - time.time()), MAX_RETRY_AFTER)
    except (TypeError, ValueError, OverflowError, IndexError):
        return 60.0


def resolve_url(base: str, reference: str) -> str | None:
    """`reference` (a Location, a Link target, a URL an index names: what a server sent) resolved against
    `base`; None when it is not a URL (`http://[::1/x`, a port that is no number), for the caller to say
    whose error that is. The one place every HTTP client of tidecd's sources resolves a URL it was sent."""
    try:
        target = urljoin(base, reference)
        urlsplit(target).port  # noqa: B018 - raises ValueError for a port that is no number
    except ValueError:
        return None
    return target


def _join(repo: Repository, base: str, reference: str, what: str) -> str:
    target = resolve_url(base, reference)
    if target is None:
        raise RegistryUnavailable(f"registry {repo.registry}: {repo.name}: the {what} target is not a URL",
                                  delay=60.0)
    return target


def _next_link(repo: Repository, response: requests.Response, current: str) -> str | None:
    link = response.headers.get("Link", "")
    match = re.search(r'<([^>]+)>\s*;\s*rel="?next"?', link)
    if match is None:
        return None
    target = _join(repo, current, str(match[1]), "tags list's Link")
    if origin(target) != origin(current):
        return None  # never follow a page link to another origin: it would get the credentials
    return target


def _read(repo: Repository, response: requests.Response, limit: int = MAX_BODY) -> bytes:
    """The answer's body, at most `limit` bytes; a connection cut mid-body (a truncated answer) is the
    registry being unavailable, like one that cannot be reached."""
    chunks, size = [], 0
    try:
        for chunk in response.iter_content(65536):
            size += len(chunk)
            if size > limit:
                response.close()
                raise RegistryUnavailable(f"registry {repo.registry}: {repo.name}: answer larger than {limit} bytes")
            chunks.append(chunk)
    except requests.RequestException as exc:
        response.close()
        raise RegistryUnavailable(f"registry {repo.registry}: {repo.name}: the answer was cut off "
                                  f"({type(exc).__name__})", delay=30.0) from None
    return b"".join(chunks)


def _parse(repo: Repository, body: bytes, what: str) -> object:
    """The JSON answer, as an object its caller narrows (a registry may send any JSON value)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: JSON nested deeper than the parser goes
        raise RegistryUnavailable(f"registry {repo.registry}: {repo.name}: the {what} is not JSON") from None


def _json(repo: Repository, response: requests.Response, what: str) -> object:
    return _parse(repo, _read(repo, response), what)


def _platform_manifests(index_body: bytes, platforms: tuple[str, ...]) -> list[str]:
    """Digests of an index's manifests built for one of `platforms` (os/arch[/variant])."""
    try:
        index = json.loads(index_body)
    except (ValueError, RecursionError):
        return []
    found = []
    entries = index.get("manifests") if isinstance(index, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        plat = entry.get("platform") if isinstance(entry, dict) else None
        if not isinstance(plat, dict):
            continue
        name = f"{plat.get('os', '')}/{plat.get('architecture', '')}"
        variant = plat.get("variant")
        if any(p in (name, f"{name}/{variant}" if variant else name) for p in platforms):
            digest = entry.get("digest")
            if isinstance(digest, str):
                found.append(digest)
    return found
