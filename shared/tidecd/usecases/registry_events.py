"""Registry push notifications: a new tag reaches the image updater and the OCI sources in seconds.

Registries report every push. Each one is authenticated as its service documents, parsed by a pure,
bounded parser into a `RegistryPush` (the repositories and tags pushed), and then:
- the image updater (`usecases.images.check`) runs at once for the images of that repository only (apps
  whose `argocd-image-updater.argoproj.io/image-list` names it), committing or overriding as its tick would;
- apps whose source is that OCI repository (`oci://host/repo`, or a helm chart repository with `chart`
  served over OCI) get a refresh, coalesced as webhook refreshes are (`triggers.dispatch`).
The scheduled images tick stays the fallback for a lost notification.

How each sender is authenticated (the webhook function is public, so each request proves itself):

    GitHub package / registry_package  /  (X-GitHub-Event)   HMAC-SHA256 of the body, as every GitHub delivery
    Docker Hub                         /registry/dockerhub/<token>   none offered (no signature, no secret): a token
    Quay                               /registry/quay/<token>        none offered by its notification: a token
    Harbor                             /registry/harbor              the policy's auth header, sent as Authorization
                                                                     (`<token>` or `Bearer <token>`)
    Artifact Registry (`gcr` topic)    /registry/gcr                 a Pub/Sub push; its OIDC token is verified
                                                                     (`clients.pushauth`)

A source's token is `HMAC-SHA256(TIDECD_WEBHOOK_SECRET, "tidecd registry webhook <source>")` in hex
(`source_token`): one secret to keep, a token per source (a leaked Docker Hub URL opens neither Quay nor
Harbor, and reveals nothing of the secret), compared in constant time, never logged or echoed. `?token=`
is accepted too, for senders that keep paths fixed. A URL token is in the sender's configuration and in
the request log of whatever serves the URL: that is the trust boundary Docker Hub and Quay leave.

A redelivery runs the check again: an image the first delivery already wrote is current, so nothing more
is committed, and refreshes coalesce.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import structlog

from tidecd.base.errors import PermanentError, TemporaryError, TidecdError
from tidecd.base.model import Response
from tidecd.config.load import Application, Config
from tidecd.triggers.dispatch import Dispatcher, Refresh

if TYPE_CHECKING:
    from tidecd.clients.registry import Repository
    from tidecd.runtime import Runtime

log = structlog.get_logger("tidecd.usecases.registry_events")

ROUTE = "/registry/"
TOKEN_SOURCES = ("dockerhub", "quay", "harbor")  # authenticated by the source's token
SOURCES = (*TOKEN_SOURCES, "gcr")
GITHUB_EVENTS = ("package", "registry_package")
MAX_ITEMS = 100  # repositories or tags one notification may name
MAX_NAME = 512  # characters of one image reference
RETRY_AFTER = 30
_CONTAINER = {"container", "docker"}


@dataclass(frozen=True)
class RegistryPush:
    """What one notification says was pushed, whichever registry sent it."""

    source: str
    repositories: frozenset[Repository]
    tags: tuple[str, ...]

    def describe(self) -> str:
        repos = ", ".join(sorted(str(r) for r in self.repositories))
        return f"{self.source} push of {repos}" + (f" ({', '.join(self.tags[:5])})" if self.tags else "")


class Refused(PermanentError):
    """A notification answered with `status` and `message` (a bad proof, a malformed payload)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class Ignored(PermanentError):
    """A well-formed notification that names no push (a deletion, a pull, another package type)."""


def is_route(path: str) -> bool:
    return urlsplit(path).path.startswith(ROUTE)


def source_token(secret: str, source: str) -> str:
    """The token a registry of `source` must present, derived from the webhook secret (see the docstring)."""
    return hmac.new(secret.encode(), f"tidecd registry webhook {source}".encode(), hashlib.sha256).hexdigest()


# --- entry points --------------------------------------------------------------------------------------------


def handle(path: str, headers: Mapping[str, str], body: bytes, runtime: Runtime, dispatcher: Dispatcher) -> Response:
    """A notification to `/registry/<source>[/<token>]` (path with its query): authenticate, parse, trigger."""
    lowered = {k.lower(): v for k, v in headers.items()}
    try:
        source, token = _route(path)
        if source == "gcr":
            doc = _gcr_envelope(lowered, body)
        else:
            _check_token(source, token, lowered, runtime.settings.webhook_secret)
            doc = _json(body)
        push = parse(source, doc)
    except Refused as refused:
        log.info("registry event refused", status=refused.status, reason=refused.message)
        return Response(refused.status, {"error": refused.message})
    except Ignored as ignored:
        return Response(200, {"ignored": str(ignored)})
    return trigger(runtime, dispatcher, push)


def on_github(event: str, doc: Mapping[str, Any], runtime: Runtime, dispatcher: Dispatcher) -> Response:
    """A GitHub `package` / `registry_package` delivery whose signature the webhook has verified."""
    try:
        push = github_package(event, doc)
    except Refused as refused:
        return Response(refused.status, {"error": refused.message})
    except Ignored as ignored:
        return Response(200, {"ignored": str(ignored)})
    return trigger(runtime, dispatcher, push)


def _route(path: str) -> tuple[str, str]:
    parts = urlsplit(path)
    segments = [s for s in parts.path[len(ROUTE):].split("/") if s]
    if not segments or segments[0] not in SOURCES or len(segments) > 2:
        raise Refused(404, f"no such registry route; use {ROUTE}<source> with source one of {', '.join(SOURCES)}")
    source = segments[0]
    token = segments[1] if len(segments) == 2 else ""
    if not token:
        token = (parse_qs(parts.query).get("token") or [""])[0]
    return source, token


def _check_token(source: str, token: str, headers: Mapping[str, str], secret: str) -> None:
    if not secret:
        raise Refused(401, "the webhook secret is not configured (TIDECD_WEBHOOK_SECRET): every notification "
                           "is refused")
    if source == "harbor":
        given = headers.get("authorization", "").strip()
        scheme, _, rest = given.partition(" ")
        token = rest.strip() if scheme.lower() == "bearer" else given
        where = "the Authorization header (Harbor's webhook auth header)"
    else:
        where = f"the URL ({ROUTE}{source}/<token>)"
    if not token:
        raise Refused(401, f"missing token: {source} notifications carry the source's token in {where}")
    if not hmac.compare_digest(source_token(secret, source).encode(), token.encode()):
        raise Refused(401, f"the token in {where} is not the {source} token")


def _gcr_envelope(headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
    """The `gcr` message data of an authenticated Pub/Sub push (`{"message": {"data": base64}}`)."""
    from tidecd.clients import pushauth  # lazy: cold start (JWT verification only for pushes)

    try:
        pushauth.verify(headers, pushauth.PushIdentity.from_env())
    except pushauth.PushRefused as exc:
        raise Refused(401, str(exc)) from None
    except TemporaryError as exc:
        raise Refused(503, str(exc)) from None
    try:
        data = pushauth.message_data(body)
    except pushauth.NotAnEnvelope as exc:
        raise Refused(400, str(exc)) from None
    return _json(data)


def _json(body: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise Refused(400, f"body is not valid JSON: {getattr(exc, 'msg', type(exc).__name__)}") from None
    if not isinstance(doc, dict):
        raise Refused(400, "body is not a JSON object")
    return doc


# --- the parsers: pure, bounded ------------------------------------------------------------------------------


def parse(source: str, doc: Mapping[str, Any]) -> RegistryPush:
    """The push a notification of `source` describes; Refused (400) naming the field, or Ignored."""
    parsers = {"dockerhub": dockerhub, "quay": quay, "harbor": harbor, "gcr": gcr}
    return parsers[source](doc)


def dockerhub(doc: Mapping[str, Any]) -> RegistryPush:
    """Docker Hub: `repository.repo_name` (`owner/name`, `name` for official images), `push_data.tag`."""
    name = _text(doc, "repository.repo_name", "dockerhub")
    tag = _text(doc, "push_data.tag", "dockerhub", required=False)
    return _push("dockerhub", [f"docker.io/{name}"], [tag] if tag else [])


def quay(doc: Mapping[str, Any]) -> RegistryPush:
    """Quay's repository push: `docker_url` (`quay.io/ns/name`), `updated_tags` (a list; a map in old payloads)."""
    url = _text(doc, "docker_url", "quay")
    tags = doc.get("updated_tags")
    if isinstance(tags, Mapping):
        tags = list(tags)
    if tags is not None and not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
        raise Refused(400, "quay payload: field `updated_tags` must be a list of tags")
    return _push("quay", [url], tags or [])


def harbor(doc: Mapping[str, Any]) -> RegistryPush:
    """Harbor, default or CloudEvents format: a `PUSH_ARTIFACT` (`harbor.artifact.pushed`) event whose
    `event_data.resources[].resource_url` are `host/project/name:tag` (or `@digest`)."""
    kind = _text(doc, "type", "harbor")
    if "specversion" in doc:  # the CloudEvents format: the event data is `data`
        data = doc.get("data")
        pushed = kind == "harbor.artifact.pushed"
    else:
        data = doc.get("event_data")
        pushed = kind == "PUSH_ARTIFACT"
    if not pushed:
        raise Ignored(f"harbor event {kind[:60]!r} is not a push")
    resources = data.get("resources") if isinstance(data, Mapping) else None
    if not isinstance(resources, list) or not resources:
        raise Refused(400, "harbor payload: field `event_data.resources` must be a non-empty list")
    _bounded(resources, "harbor payload: `event_data.resources`")
    urls, tags = [], []
    for i, item in enumerate(resources):
        url = _text(item, "resource_url", f"harbor (event_data.resources[{i}])")
        urls.append(url)
        tag = item.get("tag") if isinstance(item, Mapping) else None
        if isinstance(tag, str) and tag:
            tags.append(tag)
    return _push("harbor", urls, tags)


def gcr(doc: Mapping[str, Any]) -> RegistryPush:
    """Artifact Registry's `gcr` message: `{action: INSERT|DELETE, digest: host/path@sha256:…, tag: host/path:tag}`;
    a tag's message carries both, an untagged upload only `digest`."""
    action = _text(doc, "action", "gcr")
    if action != "INSERT":
        raise Ignored(f"gcr action {action[:20]!r} is not an upload")
    tag_ref = _text(doc, "tag", "gcr", required=False)
    digest_ref = _text(doc, "digest", "gcr", required=False)
    if not tag_ref and not digest_ref:
        raise Refused(400, "gcr payload: neither field `tag` nor field `digest` is set")
    tag = tag_ref.rsplit("/", 1)[-1].partition(":")[2] if tag_ref else ""
    return _push("gcr", [tag_ref or digest_ref], [tag] if tag else [])


def github_package(event: str, doc: Mapping[str, Any]) -> RegistryPush:
    """GitHub's `package` (`package`) or `registry_package` (`registry_package`) event, action published or
    updated, of a container package: `package_version.package_url` (`ghcr.io/owner/name:tag`), or the
    registry's host with `namespace/name`; the tag from `container_metadata.tag.name`."""
    action = _text(doc, "action", "github")
    if action not in ("published", "updated"):
        raise Ignored(f"github {event} action {action[:40]!r} is not a publication")
    package = doc.get(event)
    if not isinstance(package, Mapping):
        raise Refused(400, f"github payload: field `{event}` must be an object")
    kind = str(package.get("package_type") or package.get("ecosystem") or "").lower()
    if kind not in _CONTAINER:
        raise Ignored(f"github package type {kind[:40]!r} is not a container")
    version = package.get("package_version")
    version = version if isinstance(version, Mapping) else {}
    tag = _text(version, "container_metadata.tag.name", f"github ({event}.package_version)", required=False)
    url = _text(version, "package_url", f"github ({event}.package_version)", required=False)
    if not url:
        name = _text(package, "name", f"github ({event})")
        namespace = _text(package, "namespace", f"github ({event})", required=False) or \
            _text(package, "owner.login", f"github ({event})")
        registry = package.get("registry")
        host = urlsplit(str(registry.get("url", ""))).netloc if isinstance(registry, Mapping) else ""
        url = f"{host or 'ghcr.io'}/{namespace}/{name}".lower()
    return _push("github", [url], [tag] if tag else [])


def _text(doc: Any, path: str, what: str, *, required: bool = True) -> str:
    value: Any = doc
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        problem = "is missing" if value is None else "must be a non-empty string"
        raise Refused(400, f"{what} payload: field `{path}` {problem}")
    if len(value) > MAX_NAME:
        raise Refused(400, f"{what} payload: field `{path}` is longer than {MAX_NAME} characters")
    return value.strip()


def _bounded(items: list[Any], what: str) -> None:
    if len(items) > MAX_ITEMS:
        raise Refused(400, f"{what} names more than {MAX_ITEMS} items")


def _push(source: str, references: list[str], tags: Iterable[str]) -> RegistryPush:
    from tidecd.clients.registry import Repository, parse_image  # lazy: cold start (requests, for registry events only)

    tags = [t for t in tags if t]
    _bounded(references, f"{source} payload: the repositories")
    _bounded(tags, f"{source} payload: the tags")
    repos = set()
    for ref in references:
        if len(ref) > MAX_NAME or any(c.isspace() for c in ref) or "://" in ref:
            raise Refused(400, f"{source} payload: {ref[:80]!r} is not an image reference")
        repo = parse_image(ref)
        repos.add(Repository(repo.registry, repo.name.lower()))  # OCI names are lowercase (GitHub may not say so)
    return RegistryPush(source, frozenset(repos), tuple(dict.fromkeys(t[:128] for t in tags)))


# --- which apps follow the pushed repositories -----------------------------------------------------------------


def image_apps(apps: Iterable[Application], repositories: frozenset[Repository]) -> list[str]:
    """Apps whose image-updater annotations name one of the repositories (invalid annotations: not matched,
    the tick reports them)."""
    from tidecd.usecases.images import follows  # lazy: cold start (the updater only for a registry event)

    return sorted(app.name for app in apps if follows(app, repositories))


def oci_apps(apps: Iterable[Application], repositories: frozenset[Repository]) -> list[str]:
    """Apps with a source in one of the repositories over OCI (`oci://`, or a chart repository with `chart`)."""
    from tidecd.clients.registry import Repository  # lazy: cold start (as in `_push`)
    from tidecd.source import charts  # lazy: cold start (the source stage, for registry events only)

    found = []
    for app in apps:
        for source in app.all_sources:
            if charts.kind_of(source) != charts.OCI:
                continue
            try:
                ref = charts.oci_ref(source)
            except TidecdError:
                continue  # a bad repoURL: the app's own refresh reports it
            if Repository(ref.registry, ref.repository) in repositories:
                found.append(app.name)
                break
    return sorted(found)


def trigger(runtime: Runtime, dispatcher: Dispatcher, push: RegistryPush) -> Response:
    """Run the image updater for the pushed repositories and refresh the OCI apps that follow them."""
    # lazy: cold start (the image updater, render and git only when a notification names a followed image)
    from tidecd.usecases import images

    try:
        config: Config = runtime.config()
    except TemporaryError as exc:
        return Response(503, {"error": f"config source unavailable, redeliver later: {exc}",
                              "retry_after": RETRY_AFTER})
    except PermanentError as exc:
        return Response(500, {"error": f"config source invalid: {exc}"})
    apps = list(config.applications.values())
    with_images, with_sources = image_apps(apps, push.repositories), oci_apps(apps, push.repositories)
    answer: dict[str, Any] = {"push": push.describe(), "images": {}, "refreshed": []}
    log.info("registry event", push=push.describe(), image_apps=with_images, oci_apps=with_sources)
    if not with_images and not with_sources:
        return Response(200, answer | {"ignored": "no app follows " + ", ".join(sorted(map(str, push.repositories)))})
    refreshed: list[str] = []
    if with_images:
        summary = images.check(runtime, dispatcher=dispatcher, repositories=push.repositories)
        answer["images"] = {r.app: {"status": r.status, "message": r.message, "commit": r.commit}
                            for r in summary.apps}
        refreshed += summary.refreshed
    wanted = [name for name in with_sources if name not in refreshed]
    failures = dispatcher.dispatch([Refresh(n, f"registry: {push.describe()}"[:200]) for n in wanted])
    if failures:
        return Response(503, {"error": "some refreshes could not be dispatched; redeliver to retry",
                              "failed": dict(sorted(failures.items())), "retry_after": RETRY_AFTER})
    return Response(202, answer | {"refreshed": sorted({*refreshed, *wanted})})
