"""OCI registries: helm charts pushed with `helm push`, and plain OCI artifacts of manifests (Argo CD 3.1).

`repoURL: oci://registry.example.com/charts/redis` names one OCI repository; `targetRevision` is a tag, a
`sha256:` digest, or a semver constraint over the tags (helm writes `+` as `_` in tags). Argo CD's older
form, a chart repository without a scheme plus `chart:` (`repoURL: registry.example.com/charts`,
`chart: redis`, a repository Secret with `enableOCI: "true"`), names `oci://registry.example.com/charts/redis`.

The registry is spoken to with the OCI distribution API over `requests`: the tags list (the poll's one
call per repository), the image manifest, and its layers by digest. Every blob is checked against the
sha256 digest its descriptor names, and the manifest against the digest asked for, before anything is
stored. Anonymous, basic and bearer-token (`WWW-Authenticate: Bearer realm=...`) auth are handled;
credentials come from a repository Secret (`username`/`password`). Plain HTTP is used for loopback
registries only (or with the Secret field `insecureOCIForceHttp: "true"`, as in Argo CD).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tidecd.base.errors import ConfigError, NotFound, SourceRefused, SourceUnavailable
from tidecd.source.helmrepo import answer_body

if TYPE_CHECKING:
    import requests

    from tidecd.source.git import RepoCredentials

HTTP_TIMEOUT = 60.0
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
MAX_BLOB_BYTES = 64 * 1024 * 1024
MAX_TAGS_PAGES = 50
HELM_CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.v2+json")
_LOOPBACK = re.compile(r"^(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?$")
_REPOSITORY = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class OciRef:
    registry: str  # host[:port]
    repository: str  # path inside the registry

    @property
    def url(self) -> str:
        return f"oci://{self.registry}/{self.repository}"

    @property
    def name(self) -> str:
        return self.repository.rsplit("/", 1)[-1]


def parse(repo_url: str, chart: str = "") -> OciRef:
    """`oci://host/path` (or the schemeless `host/path` + `chart` form) as registry and repository."""
    text = repo_url.strip().rstrip("/")
    text = text.removeprefix("oci://")
    if "://" in text:
        raise ConfigError(f"repoURL {repo_url!r}: not an OCI reference")
    if chart:
        text = f"{text}/{chart}"
    registry, _, repository = text.partition("/")
    if not registry or not repository or not _REPOSITORY.match(repository):
        raise ConfigError(f"repoURL {repo_url!r}: expected oci://<registry>/<repository>")
    return OciRef(registry.lower(), repository)


def is_oci(repo_url: str, chart: str = "") -> bool:
    """An `oci://` URL, or Argo CD's schemeless chart repository form (a host, a path, and `chart`)."""
    text = repo_url.strip()
    return text.startswith("oci://") or (bool(chart) and "://" not in text and "@" not in text)


class Registry:
    """A client for one registry, with the auth handshake done once."""

    def __init__(self, ref: OciRef, credentials: RepoCredentials | None = None, *, plain_http: bool = False) -> None:
        import requests

        self.ref, self.credentials = ref, credentials
        scheme = "http" if plain_http or _LOOPBACK.match(ref.registry) else "https"
        self.base = f"{scheme}://{ref.registry}/v2/{ref.repository}"
        self.session = requests.Session()
        self.token = ""
        self.calls = 0

    def _auth(self) -> tuple[str, str] | None:
        creds = self.credentials
        return (creds.username, creds.password) if creds and (creds.username or creds.password) else None

    def _get(self, path: str, *, accept: str = "", limit: int, what: str) -> tuple[bytes, Any]:
        import requests

        url = path if path.startswith("http") else self.base + path
        for attempt in range(2):
            headers = {"Accept": accept} if accept else {}
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            auth = self._auth() if not self.token else None
            try:
                self.calls += 1
                with self.session.get(url, headers=headers, auth=auth, timeout=HTTP_TIMEOUT, stream=True) as resp:
                    if resp.status_code == 401 and attempt == 0 and self._handshake(resp):
                        continue
                    return self._body(resp, limit, what), resp.headers
            except requests.RequestException as exc:
                raise SourceUnavailable(f"{what} in {self.ref.url}: {type(exc).__name__}") from None
        raise SourceUnavailable(f"{what} in {self.ref.url}: not authorized")

    def _body(self, resp: requests.Response, limit: int, what: str) -> bytes:
        return answer_body(resp, limit, f"{what} in {self.ref.url}", credentialed=self._auth() is not None)

    def _handshake(self, resp: requests.Response) -> bool:
        """Bearer token from the realm the registry names (basic credentials, when any, sent there)."""
        challenge = resp.headers.get("WWW-Authenticate", "")
        if not challenge.lower().startswith("bearer "):
            return False
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm", "")
        if urlsplit(realm).scheme not in ("http", "https"):
            return False
        params.setdefault("scope", f"repository:{self.ref.repository}:pull")
        import requests

        try:
            self.calls += 1
            got = self.session.get(realm, params=params, auth=self._auth(), timeout=HTTP_TIMEOUT)
        except requests.RequestException as exc:
            raise SourceUnavailable(f"token for {self.ref.url}: {type(exc).__name__}") from None
        if got.status_code != 200:
            raise SourceUnavailable(f"token for {self.ref.url}: HTTP {got.status_code}")
        body = got.json() if got.content else {}
        self.token = str(body.get("token") or body.get("access_token") or "")
        return bool(self.token)

    def tags(self) -> list[str]:
        """Every tag of the repository (following `Link` pagination, bounded)."""
        out: list[str] = []
        path = "/tags/list?n=1000"
        for _ in range(MAX_TAGS_PAGES):
            data, headers = self._get(path, limit=MAX_MANIFEST_BYTES, what="tags list")
            doc = json.loads(data or b"{}")
            out += [t for t in doc.get("tags") or [] if isinstance(t, str)]
            link = headers.get("Link", "")
            match = re.match(r"<([^>]+)>", link)
            if not match:
                break
            path = match.group(1) if match.group(1).startswith("http") else \
                f"{self.base.split('/v2/')[0]}{match.group(1)}"
        return out

    def manifest(self, reference: str) -> tuple[dict[str, Any], str]:
        """The image manifest of a tag or digest, and its digest (checked when asked for by digest)."""
        data, headers = self._get(f"/manifests/{reference}", accept=", ".join(MANIFEST_TYPES),
                                  limit=MAX_MANIFEST_BYTES, what=f"manifest {reference}")
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if reference.startswith("sha256:") and digest != reference:
            raise SourceRefused(f"manifest {reference[:19]}… in {self.ref.url}: content does not match "
                                    "its digest; refusing it")
        doc = json.loads(data)
        if not isinstance(doc, dict) or not isinstance(doc.get("layers"), list):
            raise SourceUnavailable(f"manifest {reference} in {self.ref.url}: not an image manifest "
                                    "(an index of several platforms is not a source)")
        return doc, digest

    def blob(self, descriptor: dict[str, Any]) -> bytes:
        digest = str(descriptor.get("digest", ""))
        if not _DIGEST.match(digest):
            raise SourceUnavailable(f"layer of {self.ref.url}: unsupported digest {digest[:24]!r}")
        if int(descriptor.get("size") or 0) > MAX_BLOB_BYTES:
            raise SourceUnavailable(f"layer {digest[:19]}… of {self.ref.url}: larger than "
                                    f"{MAX_BLOB_BYTES // 2**20} MiB")
        data, _ = self._get(f"/blobs/{digest}", limit=MAX_BLOB_BYTES, what=f"layer {digest[:19]}…")
        if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
            raise SourceRefused(f"layer {digest[:19]}… of {self.ref.url}: content does not match its digest; "
                                    "refusing it")
        return data


def resolve_tag(tags: list[str], target: str, repo_url: str) -> str:
    """The tag `target` names: itself, or the highest semver tag matching it as a constraint."""
    from tidecd.source.versions import BadConstraint, best_version

    target = target.strip()
    if target.startswith("sha256:"):
        return target
    if target in tags:
        return target
    by_version = {t.replace("_", "+"): t for t in tags}
    try:
        best = best_version(list(by_version), target or "*")
    except BadConstraint as exc:
        raise ConfigError(f"spec.source.targetRevision {target!r} is not a tag or version constraint: {exc}") \
            from None
    if best is None:
        raise NotFound(f"{repo_url}: no tag matches {target!r}")
    return by_version[best]


def fetch(registry: Registry, reference: str) -> tuple[bytes, str, bool]:
    """(archive, manifest digest, is a helm chart) for a tag or digest.

    A helm chart is its one chart layer (a .tgz as helm packages it). A plain artifact's layers are tar
    archives of manifests; they are merged into one tar.gz, later layers over earlier ones."""
    manifest, digest = registry.manifest(reference)
    layers = [d for d in manifest["layers"] if isinstance(d, dict)]
    charts = [d for d in layers if d.get("mediaType") == HELM_CHART_LAYER]
    if charts:
        return registry.blob(charts[0]), digest, True
    if not layers:
        raise SourceUnavailable(f"{registry.ref.url}@{reference}: the artifact has no layers")
    return _merge_layers([registry.blob(d) for d in layers]), digest, False


def _merge_layers(blobs: list[bytes]) -> bytes:
    """One tar.gz of every layer's members (later layers win), for `source.git.extract` to check."""
    members: dict[str, tuple[tarfile.TarInfo, bytes | None]] = {}
    for blob in blobs:
        try:
            with tarfile.open(fileobj=io.BytesIO(blob), mode="r:*") as tar:
                for member in tar.getmembers():
                    data = tar.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
                    members[member.name.lstrip("./") or "."] = (member, data)
        except tarfile.TarError:
            raise SourceUnavailable("an artifact layer is not a tar archive") from None
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, (member, data) in sorted(members.items()):
            member.name = name
            tar.addfile(member, io.BytesIO(data) if data is not None else None)
    return out.getvalue()
