"""OCI registries: helm charts pushed with `helm push`, and plain OCI artifacts of manifests (Argo CD 3.1).

`repoURL: oci://registry.example.com/charts/redis` names one OCI repository; `targetRevision` is a tag, a
`sha256:` digest, or a semver constraint over the tags (helm writes `+` as `_` in tags). Argo CD's older
form, a chart repository without a scheme plus `chart:` (`repoURL: registry.example.com/charts`,
`chart: redis`, a repository Secret with `enableOCI: "true"`), names `oci://registry.example.com/charts/redis`.

The registry is spoken to through the one OCI distribution client, `tidecd.clients.registry.HttpRegistry`:
its token handshake, basic and bearer auth, tags pagination, 429 handling, and its one rule for where a
credential may go (only to the registry's own scheme, host and port; a token realm, redirect or `Link`
elsewhere gets none). This module keeps what is about charts and artifacts: the tags list (the poll's one
call per repository), the image manifest, and its layers by digest, each blob checked against the sha256
digest its descriptor names and the manifest against the digest asked for, before anything is stored; and
how layers become one archive. Credentials come from a repository Secret (`username`/`password`). Plain HTTP
is used for loopback registries only (or with the Secret field `insecureOCIForceHttp: "true"`, as in Argo CD).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidecd.base import limits
from tidecd.base.errors import ConfigError, NotFound, SourceRefused, SourceUnavailable
from tidecd.source import archives
from tidecd.source.archives import Budget

if TYPE_CHECKING:
    from tidecd.clients.registry import Credentials, HttpRegistry, Repository
    from tidecd.source.git import RepoCredentials

HTTP_TIMEOUT = 60.0
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
MAX_BLOB_BYTES = 64 * 1024 * 1024
HELM_CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"
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
    """One OCI repository of charts or artifacts, asked through the one registry client; its errors become
    the source's (SourceUnavailable, NotFound), naming the repository."""

    def __init__(self, ref: OciRef, credentials: RepoCredentials | None = None, *, plain_http: bool = False) -> None:
        # lazy: cold start (the registry client imports requests, ~150 ms: only OCI sources need it)
        from tidecd.clients import registry as client

        self.ref = ref
        self.repo: Repository = client.Repository(ref.registry, ref.repository)
        self.creds: Credentials | None = (client.Credentials(credentials.username, credentials.password)
                                          if credentials and (credentials.username or credentials.password) else None)
        self.client: HttpRegistry = client.HttpRegistry(plain_http=(ref.registry,) if plain_http else (),
                                                        timeout=HTTP_TIMEOUT)
        self.accept = ", ".join(client.MANIFEST_TYPES)

    @contextmanager
    def _asking(self, what: str) -> Iterator[None]:
        # lazy: cold start (the registry client, loaded by __init__ already: only OCI sources need it)
        from tidecd.clients.registry import RegistryUnavailable

        try:
            yield
        except RegistryUnavailable as exc:
            raise SourceUnavailable(f"{what} in {self.ref.url}: {exc}", delay=exc.delay) from None
        except LookupError:
            raise NotFound(f"{what} in {self.ref.url}: not found (HTTP 404)") from None

    def tags(self) -> list[str]:
        """Every tag of the repository (following `Link` pagination on the registry's own origin, bounded)."""
        with self._asking("tags list"):
            return self.client.tags(self.repo, self.creds)

    def manifest(self, reference: str) -> tuple[dict[str, Any], str]:
        """The image manifest of a tag or digest, and its digest (checked when asked for by digest)."""
        with self._asking(f"manifest {reference}"):
            _, _, data = self.client.manifest(self.repo, reference, self.creds, accept=self.accept,
                                              limit=MAX_MANIFEST_BYTES)
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if reference.startswith("sha256:") and digest != reference:
            raise SourceRefused(f"manifest {reference[:19]}… in {self.ref.url}: content does not match "
                                    "its digest; refusing it")
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError):
            raise SourceUnavailable(f"manifest {reference} in {self.ref.url}: not JSON") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("layers"), list):
            raise SourceUnavailable(f"manifest {reference} in {self.ref.url}: not an image manifest "
                                    "(an index of several platforms is not a source)")
        return doc, digest

    def blob(self, descriptor: dict[str, Any]) -> bytes:
        digest = str(descriptor.get("digest", ""))
        if not _DIGEST.match(digest):
            raise SourceUnavailable(f"layer of {self.ref.url}: unsupported digest {digest[:24]!r}")
        declared = descriptor.get("size")
        if isinstance(declared, int) and declared > MAX_BLOB_BYTES:
            raise SourceUnavailable(f"layer {digest[:19]}… of {self.ref.url}: larger than "
                                    f"{MAX_BLOB_BYTES // 2**20} MiB")
        cap = declared if isinstance(declared, int) and not isinstance(declared, bool) and declared >= 0 \
            else MAX_BLOB_BYTES  # never more than the manifest declared (what the bounds counted)
        with self._asking(f"layer {digest[:19]}…"):
            data = self.client.blob(self.repo, digest, self.creds, limit=cap)
        if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
            raise SourceRefused(f"layer {digest[:19]}… of {self.ref.url}: content does not match its digest; "
                                    "refusing it")
        return data


def resolve_tag(tags: list[str], target: str, repo_url: str) -> str:
    """The tag `target` names: itself, or the highest semver tag matching it as a constraint."""
    # lazy: cold start (semver only when a chart version is chosen: a git-only poll never loads it)
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
    archives of manifests; they are merged into one tar.gz, later layers over earlier ones. The manifest's
    layers are counted and their sizes added up before any is fetched (`TIDECD_MAX_OCI_LAYERS`,
    `TIDECD_MAX_OCI_BYTES`); each layer is then fetched capped at the size its descriptor declares, so the
    total fetched is bounded too, and held one at a time (written to disk before the next is asked for)."""
    manifest, digest = registry.manifest(reference)
    layers = [d for d in manifest["layers"] if isinstance(d, dict)]
    charts = [d for d in layers if d.get("mediaType") == HELM_CHART_LAYER]
    what = f"{registry.ref.url}@{reference}"
    if charts:
        _check_layers(charts[:1], what)
        return registry.blob(charts[0]), digest, True
    if not layers:
        raise SourceUnavailable(f"{what}: the artifact has no layers")
    _check_layers(layers, what)
    with tempfile.TemporaryDirectory(prefix="tidecd-layers-") as tmp:
        files = []
        for index, descriptor in enumerate(layers):
            path = Path(tmp) / f"{index}.tar"
            path.write_bytes(registry.blob(descriptor))
            files.append(path)
        return merge_layers(files, Budget(what)), digest, False


def _check_layers(layers: list[dict[str, Any]], what: str) -> None:
    """Refuse an artifact of too many layers, or of layers too large in all, from its manifest alone."""
    bound = limits.current()
    if len(layers) > bound.oci_layers:
        raise limits.exceeded(f"{what}: {len(layers)} layers", "oci_layers", bound.oci_layers)
    total = 0
    for descriptor in layers:
        size = descriptor.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise SourceUnavailable(f"{what}: a layer descriptor has no valid size")
        total += size
    if total > bound.oci_bytes:
        raise limits.exceeded(f"{what}: layers of {total:,} bytes", "oci_bytes", bound.oci_bytes, " bytes")


def _name(member: tarfile.TarInfo) -> str:
    name = member.name
    while name.startswith("./"):
        name = name[2:]
    return name.lstrip("/") or "."


def merge_layers(layers: Sequence[Path | bytes], budget: Budget) -> bytes:
    """One tar.gz of every layer's members (later layers win), for `source.git.extract` to check. Two
    streamed passes (which layer holds each name last; then those members copied through), every byte
    expanded counted against `budget`, no member's content held whole."""
    winner: dict[str, int] = {}
    out = io.BytesIO()
    try:
        for index, layer in enumerate(layers):
            with archives.open_tar(layer, budget) as tar:
                winner.update((_name(member), index) for member in tar)
        with tarfile.open(fileobj=out, mode="w:gz") as merged:
            for index, layer in enumerate(layers):
                with archives.open_tar(layer, budget) as tar:
                    for member in tar:
                        name = _name(member)
                        if winner.get(name) != index:
                            continue
                        content = tar.extractfile(member) if member.isfile() else None
                        member.name = name
                        merged.addfile(member, content)
    except archives.UNREADABLE:
        raise SourceUnavailable("an artifact layer is not a tar archive") from None
    return out.getvalue()
