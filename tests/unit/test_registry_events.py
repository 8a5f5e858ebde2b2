"""Registry push notifications on sample payloads shaped as each registry documents them: the parsers, each
sender's proof (a source token, Harbor's auth header, GitHub's HMAC, a Pub/Sub push's OIDC token verified
against keys served locally), and which apps a push reaches. The image updater's part runs end to end in
tests/e2e/test_registry_events.py against the real registry."""

from __future__ import annotations

import base64
import datetime
import json
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from google.auth import crypt
from google.auth import jwt as google_jwt

from tests.support.localhttp import serve_get, stop
from tests.unit.test_webhook import Recorder, github, make_runtime
from tidecd.base import limits
from tidecd.clients import pushauth
from tidecd.clients.registry import Repository
from tidecd.runtime import Runtime
from tidecd.usecases import registry_events as events
from tidecd.usecases.webhook import handle

FIXTURES = Path(__file__).parent / "fixtures" / "registry"
SECRET = "It's a Secret to Everybody"
AUDIENCE = "tidecd-webhook-push"
PUSHER = "tidecd-push@acme-prod.iam.gserviceaccount.com"
WEB = Repository("docker.io", "acme/web")


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def doc(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(fixture(name))
    return loaded


def app(name: str, repo_url: str, *, chart: str = "", images: str = "", revision: str = "1.x") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "argocd"}
    if images:
        meta["annotations"] = {"argocd-image-updater.argoproj.io/image-list": images}
    source: dict[str, Any] = {"repoURL": repo_url, "targetRevision": revision}
    source |= {"chart": chart} if chart else {"path": "."}
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": meta,
            "spec": {"project": "default", "source": source,
                     "destination": {"server": "https://kubernetes.default.svc", "namespace": name}}}


OCI_APPS = [
    app("web-chart", "oci://us-east1-docker.pkg.dev/acme-prod/charts/web"),
    app("web-chart-legacy", "us-east1-docker.pkg.dev/acme-prod/charts", chart="web"),
    app("other-chart", "oci://us-east1-docker.pkg.dev/acme-prod/charts/other"),
    app("git-app", "https://github.com/acme/deploy.git", revision="HEAD"),
]


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    return make_runtime(tmp_path, OCI_APPS, secret=SECRET)


def route(source: str, token: str = "") -> str:
    return f"/registry/{source}/{token}" if token else f"/registry/{source}"


# --- the parsers ----------------------------------------------------------------------------------------------


def test_each_registry_payload_names_the_pushed_repository_and_tags() -> None:
    assert events.dockerhub(doc("dockerhub-push.json")) == events.RegistryPush("dockerhub", frozenset({WEB}),
                                                                              ("1.4.2",))
    assert events.quay(doc("quay-push.json")) == events.RegistryPush(
        "quay", frozenset({Repository("quay.io", "acme/web")}), ("1.4.2", "latest"))
    harbor = events.RegistryPush("harbor", frozenset({Repository("harbor.example.com", "acme/web")}), ("1.4.2",))
    assert events.harbor(doc("harbor-push.json")) == harbor
    assert events.harbor(doc("harbor-cloudevents-push.json")) == harbor
    assert events.gcr(doc("gcr-insert.json")) == events.RegistryPush(
        "gcr", frozenset({Repository("us-east1-docker.pkg.dev", "acme-prod/charts/web")}), ("1.4.2",))
    assert events.github_package("package", doc("github-package-published.json")) == events.RegistryPush(
        "github", frozenset({Repository("ghcr.io", "acme/web")}), ("1.4.2",))


def test_an_official_docker_hub_image_and_an_old_quay_tag_map_are_read_too() -> None:
    official = doc("dockerhub-push.json")
    official["repository"]["repo_name"] = "nginx"
    assert events.dockerhub(official).repositories == {Repository("docker.io", "library/nginx")}
    old = doc("quay-push.json") | {"updated_tags": {"latest": "b750fe79269d2ec9a3c593ef05b4332b1d1a02a6"}}
    assert events.quay(old).tags == ("latest",)


def test_a_github_package_of_an_owner_with_capitals_names_the_lowercase_repository() -> None:
    payload = doc("github-package-published.json")
    payload["package"]["package_version"]["package_url"] = "ghcr.io/Acme/Web:1.4.2"
    assert events.github_package("package", payload).repositories == {Repository("ghcr.io", "acme/web")}


def test_a_github_package_without_package_url_uses_the_registry_host_and_namespace() -> None:
    payload = doc("github-package-published.json")
    del payload["package"]["package_version"]["package_url"]
    payload["registry_package"] = payload.pop("package")
    push = events.github_package("registry_package", payload)
    assert push.repositories == {Repository("ghcr.io", "acme/web")} and push.tags == ("1.4.2",)


@pytest.mark.parametrize(("parse", "payload", "why"), [
    (events.harbor, "harbor-pull.json", "'PULL_ARTIFACT' is not a push"),
    (events.gcr, "gcr-delete.json", "'DELETE' is not an upload"),
    (lambda d: events.github_package("registry_package", d), "github-registry-package-npm.json",
     "'npm' is not a container"),
])
def test_what_is_not_a_push_is_ignored(parse: Any, payload: str, why: str) -> None:
    with pytest.raises(events.Ignored, match=why):
        parse(doc(payload))


@pytest.mark.parametrize(("source", "payload", "field"), [
    ("dockerhub", {"push_data": {"tag": "1"}}, "field `repository.repo_name` is missing"),
    ("dockerhub", {"repository": {"repo_name": 7}}, "field `repository.repo_name` must be a non-empty string"),
    ("quay", {"docker_url": "quay.io/a/b", "updated_tags": "latest"}, "field `updated_tags` must be a list"),
    ("harbor", {"type": "PUSH_ARTIFACT", "event_data": {}}, "field `event_data.resources` must be a non-empty"),
    ("harbor", {"type": "PUSH_ARTIFACT", "event_data": {"resources": [{"tag": "1"}]}},
     r"harbor \(event_data.resources\[0\]\) payload: field `resource_url` is missing"),
    ("gcr", {"action": "INSERT"}, "neither field `tag` nor field `digest`"),
    ("gcr", {"action": "INSERT", "tag": "https://evil.example/x:1"}, "is not an image reference"),
    ("quay", {"docker_url": "q" * 600}, "longer than 512 characters"),
])
def test_a_malformed_payload_is_a_400_naming_the_field(source: str, payload: dict[str, Any], field: str) -> None:
    with pytest.raises(events.Refused, match=field) as caught:
        events.parse(source, payload)
    assert caught.value.status == 400


def test_a_payload_naming_too_many_repositories_is_refused() -> None:
    resources = [{"resource_url": f"harbor.example.com/acme/web{i}:1", "tag": "1"} for i in range(101)]
    with pytest.raises(events.Refused, match="more than 100 items"):
        events.harbor({"type": "PUSH_ARTIFACT", "event_data": {"resources": resources}})


# --- proofs -----------------------------------------------------------------------------------------------------


def test_docker_hub_and_quay_need_their_own_token_in_the_url(runtime: Runtime) -> None:
    body = fixture("dockerhub-push.json")
    good = events.source_token(SECRET, "dockerhub")
    quay_token = events.source_token(SECRET, "quay")
    for path in (route("dockerhub"), route("dockerhub", "wrong"), route("dockerhub", quay_token),
                 route("dockerhub") + "?token=" + good[:-1]):
        sent = Recorder()
        answer = handle({"Content-Type": "application/json"}, body, runtime, sent, path=path)
        assert answer.status == 401 and sent.refreshes == [], (path, answer)
        assert good not in json.dumps(answer.body) and SECRET not in json.dumps(answer.body)
    for path in (route("dockerhub", good), route("dockerhub") + "?token=" + good):
        answer = handle({}, body, runtime, Recorder(), path=path)
        assert answer.status == 200 and answer.body["ignored"] == "no app follows docker.io/acme/web", answer


def test_no_webhook_secret_refuses_every_notification(tmp_path: Path) -> None:
    rt = make_runtime(tmp_path, OCI_APPS, secret="")
    answer = handle({}, fixture("quay-push.json"), rt, Recorder(), path=route("quay", events.source_token("", "quay")))
    assert answer.status == 401 and "TIDECD_WEBHOOK_SECRET" in answer.body["error"]


def test_harbor_sends_its_token_as_the_authorization_header(runtime: Runtime) -> None:
    body, token = fixture("harbor-push.json"), events.source_token(SECRET, "harbor")
    for header in ({}, {"Authorization": "Bearer nope"}, {"Authorization": events.source_token(SECRET, "quay")}):
        assert handle(header, body, runtime, Recorder(), path=route("harbor")).status == 401
    for header in ({"Authorization": token}, {"Authorization": f"Bearer {token}"}):
        assert handle(header, body, runtime, Recorder(), path=route("harbor")).status == 200


def test_an_unknown_route_is_a_404_and_an_oversized_body_a_413(runtime: Runtime) -> None:
    assert handle({}, b"{}", runtime, Recorder(), path="/registry/ecr/abc").status == 404
    big = b" " * (limits.current().webhook_bytes + 1)
    assert handle({}, big, runtime, Recorder(), path=route("quay", "x")).status == 413


def test_a_github_package_event_is_verified_like_any_github_delivery(runtime: Runtime) -> None:
    body = fixture("github-package-published.json")
    forged = github(body, event="package") | {"X-Hub-Signature-256": "sha256=" + "0" * 64}
    assert handle(forged, body, runtime, Recorder()).status == 401
    answer = handle(github(body, event="package"), body, runtime, Recorder())
    assert answer.status == 200 and answer.body["ignored"] == "no app follows ghcr.io/acme/web"


# --- Pub/Sub pushes: the OIDC token -------------------------------------------------------------------------------


class Google:
    """Google's side, played locally: a signing key, its certificate served as Google serves its v1 certs."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test.googleapis.invalid")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(self.key.public_key())
                .serial_number(1).not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(hours=1)).sign(self.key, hashes.SHA256()))
        self.certs = {"k1": cert.public_bytes(serialization.Encoding.PEM).decode()}
        pem = self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption())
        self.signer = crypt.RSASigner.from_string(pem, key_id="k1")  # type: ignore[no-untyped-call]
        self.fetched = 0

        def answer(handler: BaseHTTPRequestHandler) -> None:
            self.fetched += 1
            data = json.dumps(self.certs).encode()
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)

        self.server = serve_get(answer)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/oauth2/v1/certs"

    def token(self, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": "https://accounts.google.com", "aud": AUDIENCE, "email": PUSHER, "email_verified": True,
                "sub": "1234", "iat": now, "exp": now + 3600} | claims
        encoded: bytes = google_jwt.encode(self.signer, body)  # type: ignore[no-untyped-call]
        return encoded.decode()


@pytest.fixture
def google(monkeypatch: pytest.MonkeyPatch) -> Iterator[Google]:
    played = Google()
    monkeypatch.setenv("TIDECD_GOOGLE_CERTS_URL", played.url)
    monkeypatch.setenv("TIDECD_PUSH_AUDIENCE", AUDIENCE)
    monkeypatch.setenv("TIDECD_PUSH_SERVICE_ACCOUNT", PUSHER)
    pushauth._cache.clear()
    try:
        yield played
    finally:
        stop(played.server)
        pushauth._cache.clear()


def envelope(data: dict[str, Any]) -> bytes:
    return json.dumps({"message": {"data": base64.b64encode(json.dumps(data).encode()).decode(),
                                   "messageId": "136969346945", "publishTime": "2026-12-02T09:00:00Z",
                                   "attributes": {}},
                       "subscription": "projects/acme-prod/subscriptions/tidecd-registry"}).encode()


def test_an_artifact_registry_push_with_a_valid_oidc_token_refreshes_the_charts_of_that_repository(
        runtime: Runtime, google: Google) -> None:
    sent = Recorder()
    answer = handle({"Authorization": f"Bearer {google.token()}"}, envelope(doc("gcr-insert.json")), runtime, sent,
                    path=route("gcr"))
    assert answer.status == 202, answer.body
    assert answer.body["refreshed"] == ["web-chart", "web-chart-legacy"] and sent.apps == ["web-chart",
                                                                                           "web-chart-legacy"]
    assert sent.refreshes[0].reason.startswith("registry: gcr push of us-east1-docker.pkg.dev/acme-prod/charts/web")
    # a second push uses the cached keys
    handle({"Authorization": f"Bearer {google.token()}"}, envelope(doc("gcr-insert.json")), runtime, Recorder(),
           path=route("gcr"))
    assert google.fetched == 1


@pytest.mark.parametrize(("claims", "why"), [
    ({"aud": "someone-else"}, "does not verify"),
    ({"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200}, "does not verify"),
    ({"email": "mallory@evil.iam.gserviceaccount.com"}, "another service account"),
    ({"email_verified": False}, "another service account"),
    ({"iss": "https://evil.example"}, "not issued by Google"),
])
def test_a_push_whose_token_is_not_ours_is_refused_and_triggers_nothing(
        runtime: Runtime, google: Google, claims: dict[str, Any], why: str) -> None:
    sent, token = Recorder(), google.token(**claims)
    answer = handle({"Authorization": f"Bearer {token}"}, envelope(doc("gcr-insert.json")), runtime, sent,
                    path=route("gcr"))
    assert answer.status == 401 and why in answer.body["error"] and sent.refreshes == []
    assert token not in json.dumps(answer.body)


def test_a_push_signed_by_another_key_or_without_a_token_is_refused(runtime: Runtime, google: Google) -> None:
    other = Google()
    try:
        forged = other.token()
    finally:
        stop(other.server)
    for headers in ({}, {"Authorization": "Basic abc"}, {"Authorization": f"Bearer {forged}"},
                    {"Authorization": "Bearer not.a.jwt"}):
        sent = Recorder()
        answer = handle(headers, envelope(doc("gcr-insert.json")), runtime, sent, path=route("gcr"))
        assert answer.status == 401 and sent.refreshes == [], answer.body


def test_an_unconfigured_push_identity_refuses_every_push(runtime: Runtime, google: Google,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIDECD_PUSH_SERVICE_ACCOUNT")
    answer = handle({"Authorization": f"Bearer {google.token()}"}, envelope(doc("gcr-insert.json")), runtime,
                    Recorder(), path=route("gcr"))
    assert answer.status == 401 and "TIDECD_PUSH_SERVICE_ACCOUNT" in answer.body["error"]


def test_a_push_that_is_not_an_envelope_or_a_deletion(runtime: Runtime, google: Google) -> None:
    headers = {"Authorization": f"Bearer {google.token()}"}
    assert handle(headers, b'{"message": {}}', runtime, Recorder(), path=route("gcr")).status == 400
    deleted = handle(headers, envelope(doc("gcr-delete.json")), runtime, Recorder(), path=route("gcr"))
    assert deleted.status == 200 and "not an upload" in deleted.body["ignored"]


# --- which apps --------------------------------------------------------------------------------------------------


def test_image_apps_are_those_whose_image_list_names_the_repository(tmp_path: Path) -> None:
    rt = make_runtime(tmp_path, [app("a", "https://github.com/acme/deploy.git", images="web=acme/web:~1.4"),
                                 app("b", "https://github.com/acme/deploy.git", images="w=docker.io/acme/web"),
                                 app("c", "https://github.com/acme/deploy.git", images="x=acme/other"),
                                 app("d", "https://github.com/acme/deploy.git")])
    apps = rt.config().applications.values()
    assert events.image_apps(apps, frozenset({WEB})) == ["a", "b"]
    assert events.oci_apps(apps, frozenset({WEB})) == []


def test_google_keys_unreachable_is_a_503_so_pubsub_redelivers(runtime: Runtime, google: Google) -> None:
    token = google.token()
    stop(google.server)
    sent = Recorder()
    answer = handle({"Authorization": f"Bearer {token}"}, envelope(doc("gcr-insert.json")), runtime, sent,
                    path=route("gcr"))
    assert answer.status == 503 and "Google's token keys could not be fetched" in answer.body["error"]
    assert sent.refreshes == []
    google.server = serve_get(lambda h: None)  # the fixture stops a server at the end


def test_a_rotated_key_fetches_google_keys_again(runtime: Runtime, google: Google) -> None:
    assert handle({"Authorization": f"Bearer {google.token()}"}, envelope(doc("gcr-insert.json")), runtime,
                  Recorder(), path=route("gcr")).status == 202
    rotated = Google()
    try:
        google.certs["k2"] = rotated.certs["k1"]  # Google publishes its new key...
        rotated.signer = crypt.RSASigner.from_string(  # type: ignore[no-untyped-call]
            rotated.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()), key_id="k2")
        answer = handle({"Authorization": f"Bearer {rotated.token()}"}, envelope(doc("gcr-insert.json")), runtime,
                        Recorder(), path=route("gcr"))
    finally:
        stop(rotated.server)
    assert answer.status == 202, answer.body  # ...and a token signed with it verifies after one more fetch
    assert google.fetched == 2
