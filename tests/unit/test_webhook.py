"""The webhook use case on recorded GitHub/GitLab payloads, with a real Runtime over a temp config
directory, an in-memory store and a dispatcher that records what it was handed."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import yaml

from tidecd.clients.store import LocalStore, MemoryStore, ObjectStore
from tidecd.runtime import Runtime, Settings
from tidecd.triggers.dispatch import Refresh
from tidecd.usecases import webhook
from tidecd.usecases.webhook import Push, files_match, handle, revision_matches

FIXTURES = Path(__file__).parent / "fixtures" / "webhook"
SECRET = "It's a Secret to Everybody"
GITHUB = "https://github.com/acme/deploy.git"
PINNED = "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"  # `after` of github-push-branch.json


class Recorder:
    """Our Dispatcher interface, recording every refresh; `fail` names apps whose hand-over fails."""

    def __init__(self, fail: Sequence[str] = ()) -> None:
        self.refreshes: list[Refresh] = []
        self.fail = set(fail)
        self.scheduled: list[tuple[str, float, str]] = []
        self._lock = threading.Lock()

    def dispatch(self, refreshes: Sequence[Refresh]) -> dict[str, str]:
        with self._lock:
            self.refreshes.extend(refreshes)
        return {r.app: "publish failed" for r in refreshes if r.app in self.fail}

    def schedule(self, app: str, delay: float, reason: str) -> None:
        with self._lock:
            self.scheduled.append((app, delay, reason))

    @property
    def apps(self) -> list[str]:
        return sorted(r.app for r in self.refreshes)


def application(name: str, repo: str, path: str, revision: str, paths: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "argocd"}
    if paths is not None:
        meta["annotations"] = {"argocd.argoproj.io/manifest-generate-paths": paths}
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": meta,
            "spec": {"project": "default",
                     "source": {"repoURL": repo, "path": path, "targetRevision": revision},
                     "destination": {"server": "https://kubernetes.default.svc", "namespace": name}}}


APPS = [
    application("guestbook", GITHUB, "apps/guestbook", "HEAD", paths="."),
    application("billing", "git@github.com:acme/deploy.git", "apps/billing", "main",
                paths=".;/shared/*.yaml"),
    application("everything", "https://github.com/acme/deploy", "apps", "refs/heads/main"),
    application("release", "ssh://git@github.com/acme/deploy", "apps/guestbook", "v1.2.0"),
    application("release-ref", GITHUB, "apps/guestbook", "refs/tags/v1.2.0"),
    application("staging", GITHUB, "apps/guestbook", "staging"),
    application("pinned", GITHUB, "apps/guestbook", PINNED[:10]),
    application("pinned-old", GITHUB, "apps/guestbook", "6113728f27ae82c7b1a177c8d03f9e96e0adf246"),
    application("other", "https://github.com/acme/other.git", "apps/guestbook", "HEAD"),
    application("gl-billing", "https://gitlab.example.com/platform/deploy.git", "apps/billing", "HEAD",
                paths="."),
    application("gl-guestbook", "git@gitlab.example.com:platform/deploy.git", "apps/guestbook", "main",
                paths="."),
    application("gl-release", "https://gitlab.example.com/platform/deploy", "apps/billing", "v2.0.0"),
]


def make_runtime(tmp_path: Path, apps: list[dict[str, Any]] = APPS, *, secret: str = SECRET,
                 store: ObjectStore | None = None, config: str = "") -> Runtime:
    folder = tmp_path / "config"
    folder.mkdir(exist_ok=True)
    for app in apps:
        (folder / f"{app['metadata']['name']}.yaml").write_text(yaml.safe_dump(app))
    settings = Settings(config=config or str(folder), webhook_secret=secret)
    return Runtime(settings=settings, store=store or MemoryStore())


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def github(body: bytes, event: str = "push", delivery: str = "72d3162e-cc78-11e3-81ab-4c9367dc0958",
           **extra: str) -> dict[str, str]:
    headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": sign(body),
               "Content-Type": "application/json", "Content-Length": str(len(body)),
               "User-Agent": "GitHub-Hookshot/a4c1d1b"}
    return headers | extra


def gitlab(event: str = "Push Hook", token: str = SECRET,
           uuid: str = "9cebe914-4827-408f-b014-cfa23a47a35f") -> dict[str, str]:
    return {"X-Gitlab-Event": event, "X-Gitlab-Token": token, "X-Gitlab-Event-UUID": uuid,
            "Content-Type": "application/json"}


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    return make_runtime(tmp_path)


# --- recorded deliveries ---------------------------------------------------------------------------------


def test_ping_answers_pong_and_refreshes_nothing(runtime: Runtime) -> None:
    body, sent = fixture("github-ping.json"), Recorder()

    response = handle(github(body, event="ping"), body, runtime, sent)

    assert (response.status, response.body) == (200, {"msg": "pong"})
    assert sent.refreshes == []


def test_push_to_the_default_branch_refreshes_exactly_the_apps_tracking_it(runtime: Runtime) -> None:
    body, sent = fixture("github-push-branch.json"), Recorder()

    response = handle(github(body), body, runtime, sent)

    # billing tracks main but only its own folder and /shared/*.yaml changed nothing there;
    # pinned is the pushed commit; release*/staging/other/pinned-old/gl-* are other refs or repos.
    assert response.status == 202
    assert response.body == {"refreshed": ["everything", "guestbook", "pinned"],
                             "delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958"}
    assert sent.apps == ["everything", "guestbook", "pinned"]
    assert {r.revision for r in sent.refreshes} == {PINNED}
    assert all("refs/heads/main" in r.reason for r in sent.refreshes)


def test_push_of_a_tag_refreshes_apps_tracking_that_tag(runtime: Runtime) -> None:
    body, sent = fixture("github-push-tag.json"), Recorder()

    response = handle(github(body), body, runtime, sent)

    assert response.status == 202
    assert response.body["refreshed"] == ["release", "release-ref"]


def test_branch_deletion_refreshes_nothing(runtime: Runtime) -> None:
    body, sent = fixture("github-delete-branch.json"), Recorder()

    response = handle(github(body), body, runtime, sent)

    assert response.status == 200
    assert response.body["refreshed"] == []
    assert "deleted" in response.body["note"]
    assert sent.refreshes == []


def test_push_touching_only_unrelated_paths_refreshes_only_apps_without_narrowing(runtime: Runtime) -> None:
    body, sent = fixture("github-push-unrelated.json"), Recorder()

    response = handle(github(body), body, runtime, sent)

    assert response.body["refreshed"] == ["everything"]  # the only app on main without the annotation


def test_push_touching_only_unrelated_paths_refreshes_nothing_when_every_app_narrows(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, [a for a in APPS if a["metadata"]["name"] in ("guestbook", "billing")])
    body, sent = fixture("github-push-unrelated.json"), Recorder()

    response = handle(github(body), body, runtime, sent)

    assert (response.status, response.body["refreshed"]) == (200, [])
    assert sent.refreshes == []


def test_gitlab_push_matches_every_url_spelling_and_narrows_by_path(runtime: Runtime) -> None:
    body, sent = fixture("gitlab-push.json"), Recorder()

    response = handle(gitlab(), body, runtime, sent)

    # both commits touch apps/billing only: gl-guestbook (main, narrowed to its folder) is left alone
    assert response.status == 202
    assert response.body == {"refreshed": ["gl-billing"], "delivery": "9cebe914-4827-408f-b014-cfa23a47a35f"}


def test_gitlab_tag_push(runtime: Runtime) -> None:
    body, sent = fixture("gitlab-tag-push.json"), Recorder()

    response = handle(gitlab(event="Tag Push Hook"), body, runtime, sent)

    assert response.body["refreshed"] == ["gl-release"]


def test_gitlab_refuses_a_wrong_or_missing_token(runtime: Runtime) -> None:
    body, sent = fixture("gitlab-push.json"), Recorder()
    missing = {k: v for k, v in gitlab().items() if k != "X-Gitlab-Token"}

    assert handle(gitlab(token="guess"), body, runtime, sent).status == 401
    assert handle(missing, body, runtime, sent).status == 401
    assert sent.refreshes == []


def test_other_events_are_acknowledged_and_ignored(runtime: Runtime) -> None:
    body, sent = b'{"action": "opened", "issue": {"number": 1}}', Recorder()

    response = handle(github(body, event="issues"), body, runtime, sent)

    assert response.status == 200 and "ignored" in response.body
    assert sent.refreshes == []


def test_push_to_the_config_source_is_reported(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path)
    runtime.config()  # loaded (and cached) from the folder; the settings now name a git config source
    runtime.settings.config = "https://github.com/acme/deploy.git#main:apps/guestbook"
    body, sent = fixture("github-push-branch.json"), Recorder()

    response = handle(github(body), body, runtime, sent)

    assert "config_source" in response.body
    unrelated = fixture("github-push-unrelated.json")
    assert "config_source" not in handle(github(unrelated, delivery="other"), unrelated, runtime, sent).body


def test_form_encoded_github_delivery(runtime: Runtime) -> None:
    body = urlencode({"payload": fixture("github-push-tag.json").decode()}).encode()
    headers = github(body) | {"Content-Type": "application/x-www-form-urlencoded"}

    response = handle(headers, body, runtime, Recorder())

    assert response.body["refreshed"] == ["release", "release-ref"]


def test_header_names_are_case_insensitive(runtime: Runtime) -> None:
    body = fixture("github-push-tag.json")
    headers = {k.lower(): v for k, v in github(body).items()}

    assert handle(headers, body, runtime, Recorder()).status == 202


# --- signatures ------------------------------------------------------------------------------------------


def test_wrong_signature_is_refused(runtime: Runtime) -> None:
    body, sent = fixture("github-push-branch.json"), Recorder()
    headers = github(body) | {"X-Hub-Signature-256": sign(body, "another secret")}

    response = handle(headers, body, runtime, sent)

    assert response.status == 401
    assert sent.refreshes == []


def test_missing_signature_is_refused(runtime: Runtime) -> None:
    body, sent = fixture("github-push-branch.json"), Recorder()
    headers = {k: v for k, v in github(body).items() if k != "X-Hub-Signature-256"}

    response = handle(headers, body, runtime, sent)

    assert response.status == 401 and "X-Hub-Signature-256" in response.body["error"]
    assert sent.refreshes == []


def test_signature_covers_the_raw_bytes(runtime: Runtime) -> None:
    body = fixture("github-push-branch.json")
    reformatted = json.dumps(json.loads(body)).encode()  # same JSON, other bytes

    assert handle(github(body), reformatted, runtime, Recorder()).status == 401


def test_without_a_configured_secret_every_delivery_is_refused(tmp_path: Path) -> None:
    runtime, sent = make_runtime(tmp_path, secret=""), Recorder()
    body = fixture("github-push-branch.json")
    unsigned = {k: v for k, v in github(body).items() if k != "X-Hub-Signature-256"}
    empty_key_signature = github(body) | {"X-Hub-Signature-256": sign(body, "")}

    for headers in (unsigned, empty_key_signature, gitlab(token="")):
        response = handle(headers, body, runtime, sent)
        assert response.status == 401
        assert "webhook secret is not configured" in response.body["error"]
    assert sent.refreshes == []


def test_signatures_are_compared_in_constant_time(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr("tidecd.usecases.webhook.hmac.compare_digest", spy)
    body = fixture("github-push-tag.json")

    assert handle(github(body), body, runtime, Recorder()).status == 202
    assert handle(gitlab(token="nope"), fixture("gitlab-push.json"), runtime, Recorder()).status == 401
    assert len(calls) == 2
    assert calls[0][0] == sign(body).encode()
    assert calls[1][0] == SECRET.encode()


def test_neither_secret_nor_signature_is_logged_or_answered(
    runtime: Runtime, capsys: pytest.CaptureFixture[str]
) -> None:
    body = fixture("github-push-branch.json")
    wrong = github(body) | {"X-Hub-Signature-256": sign(body, "attacker")}

    answers = [handle(h, body, runtime, Recorder()) for h in (github(body), wrong)]
    answers.append(handle(gitlab(token="attacker-token"), fixture("gitlab-push.json"), runtime, Recorder()))

    out = capsys.readouterr()
    text = out.out + out.err + json.dumps([a.body for a in answers])
    for secret in (SECRET, sign(body)[7:], sign(body, "attacker")[7:], "attacker-token"):
        assert secret not in text


# --- idempotency -----------------------------------------------------------------------------------------


def test_redelivery_of_the_same_id_refreshes_once(runtime: Runtime) -> None:
    body, sent = fixture("github-push-branch.json"), Recorder()

    first = handle(github(body), body, runtime, sent)
    second = handle(github(body), body, runtime, sent)

    assert first.status == 202
    assert (second.status, second.body["duplicate"]) == (200, True)
    assert sent.apps == ["everything", "guestbook", "pinned"]
    assert runtime.store.read("deliveries/72d3162e-cc78-11e3-81ab-4c9367dc0958") is not None


def test_another_delivery_of_a_commit_an_app_is_synced_at_refreshes_only_the_others(runtime: Runtime) -> None:
    """A second delivery (another webhook, a redelivery under a new id) of a commit an app was already
    compared at, Synced and with nothing running, has nothing to refresh for that app."""
    from tidecd.base.model import SyncStatus
    from tidecd.state import app as app_state

    body, sent = fixture("github-push-branch.json"), Recorder()
    app_state.save(runtime.store, app_state.AppState("pinned", sync_status=SyncStatus.SYNCED, revision=PINNED))
    app_state.save(runtime.store, app_state.AppState("guestbook", sync_status=SyncStatus.OUT_OF_SYNC,
                                                     revision=PINNED))

    response = handle(github(body, delivery="another-id"), body, runtime, sent)

    assert response.status == 202 and response.body["current"] == ["pinned"]
    assert sent.apps == ["everything", "guestbook"]  # guestbook is OutOfSync at it: refreshed


@pytest.mark.parametrize("backend", ["memory", "local"])
def test_twenty_concurrent_deliveries_of_one_id_dispatch_once(tmp_path: Path, backend: str) -> None:
    store = MemoryStore() if backend == "memory" else LocalStore(tmp_path / "store")
    runtime = make_runtime(tmp_path, store=store)
    runtime.config()  # loaded once, as one function instance would have it
    body, sent = fixture("github-push-branch.json"), Recorder()
    barrier, statuses = threading.Barrier(20), []

    def deliver() -> None:
        barrier.wait()
        statuses.append(handle(github(body), body, runtime, sent).status)

    threads = [threading.Thread(target=deliver) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sorted(statuses) == [200] * 19 + [202]
    assert sent.apps == ["everything", "guestbook", "pinned"]  # one dispatch of three refreshes


def test_failed_dispatch_answers_503_and_lets_the_redelivery_through(runtime: Runtime) -> None:
    body = fixture("github-push-branch.json")

    failed = handle(github(body), body, runtime, Recorder(fail=["guestbook"]))
    retried = handle(github(body), body, runtime, sent := Recorder())

    assert failed.status == 503 and failed.body["failed"] == {"guestbook": "publish failed"}
    assert retried.status == 202 and sent.apps == ["everything", "guestbook", "pinned"]


def test_unsafe_delivery_id_is_refused(runtime: Runtime) -> None:
    body = fixture("github-push-branch.json")

    response = handle(github(body, delivery="../leases/guestbook"), body, runtime, Recorder())

    assert response.status == 400 and "X-GitHub-Delivery" in response.body["error"]


# --- malformed or oversized ------------------------------------------------------------------------------


def test_body_over_25_mb_is_refused_by_header_and_by_length(runtime: Runtime) -> None:
    small = b"{}"
    declared = github(small) | {"Content-Length": str(25 * 1024 * 1024 + 1)}
    big = b" " * (25 * 1024 * 1024 + 1)
    lying = github(big) | {"Content-Length": "2"}

    assert handle(declared, small, runtime, Recorder()).status == 413
    assert handle(lying, big, runtime, Recorder()).status == 413


@pytest.mark.parametrize(
    ("body", "names"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"after": "abc", "repository": {"clone_url": "https://github.com/a/b"}}', "`ref` is missing"),
        (b'{"ref": "refs/heads/main", "after": "abc"}', "`repository` is missing"),
        (b'{"ref": "refs/heads/main", "after": "abc", "repository": "acme/deploy"}',
         "`repository` must be an object"),
        (b'{"ref": "refs/heads/main", "after": "abc", "repository": {"name": "deploy"}}', "clone_url"),
        (b'{"ref": 7, "after": "abc", "repository": {}}', "`ref` must be a string"),
    ],
)
def test_malformed_payloads_get_400_naming_the_problem(runtime: Runtime, body: bytes, names: str) -> None:
    response = handle(github(body), body, runtime, Recorder())

    assert response.status == 400
    assert names in response.body["error"]


def test_a_request_from_neither_forge_is_refused(runtime: Runtime) -> None:
    response = handle({"Content-Type": "application/json"}, b"{}", runtime, Recorder())

    assert response.status == 400 and "X-GitHub-Event" in response.body["error"]


def test_a_broken_config_file_is_reported_and_the_push_still_refreshes_the_others(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path)
    (tmp_path / "config" / "broken.yaml").write_text("apiVersion: argoproj.io/v1alpha1\nkind: Application\n")
    (tmp_path / "config" / "bad-app.yaml").write_text(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: bad-app\nspec: [unclosed\n")
    body = fixture("github-push-branch.json")

    response = handle(github(body), body, runtime, sent := Recorder())

    assert response.status == 202 and response.body["refreshed"] == ["everything", "guestbook", "pinned"]
    assert [r.app for r in sent.refreshes] == response.body["refreshed"]
    assert "broken.yaml" in response.body["config_problems"][0]
    assert "bad-app.yaml" in response.body["set_aside"]["bad-app"]
    assert "YAML syntax error" in response.body["set_aside"]["bad-app"]


# --- the matching rules ----------------------------------------------------------------------------------


def push(ref: str = "refs/heads/main", after: str = PINNED, files: tuple[str, ...] | None = None) -> Push:
    return Push(repo_urls=frozenset({"github.com/acme/deploy"}), ref=ref, after=after, default_branch="main",
                deleted=False, changed_files=files)


@pytest.mark.parametrize(
    ("target", "ref", "matches"),
    [
        ("HEAD", "refs/heads/main", True),
        ("", "refs/heads/main", True),
        ("HEAD", "refs/heads/dev", False),
        ("main", "refs/heads/main", True),
        ("heads/main", "refs/heads/main", True),
        ("refs/heads/main", "refs/heads/main", True),
        ("main", "refs/heads/maintenance", False),
        ("main", "refs/tags/v1", False),
        ("v1", "refs/tags/v1", True),
        ("tags/v1", "refs/tags/v1", True),
        ("refs/tags/v1", "refs/tags/v1", True),
        ("v1", "refs/heads/main", False),
        (PINNED, "refs/heads/main", True),
        (PINNED[:7], "refs/heads/dev", True),
        ("6113728f27ae82c7b1a177c8d03f9e96e0adf246", "refs/heads/main", False),
        ("0d1a26", "refs/heads/main", False),  # too short to be a sha
    ],
)
def test_revision_matching(target: str, ref: str, matches: bool) -> None:
    assert revision_matches(target, push(ref=ref)) is matches


@pytest.mark.parametrize(
    ("paths", "files", "matches"),
    [
        (None, ("anything",), True),
        (["apps/guestbook"], None, True),  # the payload lists no files: never narrow
        (["apps/guestbook"], ("apps/guestbook/deploy.yaml",), True),
        (["apps/guestbook"], ("apps/guestbook-v2/deploy.yaml",), False),
        (["apps/guestbook"], ("apps/guestbook",), True),
        (["."], ("README.md",), True),
        (["shared/*.yaml"], ("shared/labels.yaml",), True),
        (["shared/*.yaml"], ("shared/deep/labels.yaml",), False),
        (["shared/**/*.yaml"], ("shared/deep/er/labels.yaml",), True),
        (["shared/**/*.yaml"], ("shared/labels.yaml",), True),
        (["apps/*"], ("apps/billing/deploy.yaml",), True),
        (["apps/gu?stbook"], ("apps/guestbook/x.yaml",), True),
        (["apps/[gb]*"], ("apps/billing/x.yaml",), True),
        (["apps/[!gb]*"], ("apps/billing/x.yaml",), False),
        (["apps/guestbook", "charts"], ("docs/a.md", "charts/x/Chart.yaml"), True),
    ],
)
def test_path_narrowing(paths: list[str] | None, files: tuple[str, ...] | None, matches: bool) -> None:
    assert files_match(paths, files) is matches


def test_annotation_paths_resolve_against_the_app_path() -> None:
    from tidecd.config.load import Application, ApplicationSource, Destination

    app = Application(name="a", project="default",
                      source=ApplicationSource(repo_url=GITHUB, path="apps/guestbook"),
                      destination=Destination(server="https://kubernetes.default.svc"),
                      annotations=(("argocd.argoproj.io/manifest-generate-paths", ". ; ../common;/;/x/*.yaml"),))

    assert webhook.refresh_paths(app) == ["apps/guestbook", "apps/common", ".", "x/*.yaml"]


def test_a_commit_listing_no_files_or_a_forced_push_disables_narrowing() -> None:
    doc = json.loads(fixture("github-push-unrelated.json"))
    assert webhook.github_push(doc).changed_files == ("README.md", "docs/release.md")

    doc["commits"].append({"id": "f" * 40, "message": "merge", "added": [], "modified": [], "removed": []})
    assert webhook.github_push(doc).changed_files is None

    forced = json.loads(fixture("github-push-unrelated.json")) | {"forced": True}
    assert webhook.github_push(forced).changed_files is None


def test_gitlab_truncated_commit_list_disables_narrowing() -> None:
    doc = json.loads(fixture("gitlab-push.json")) | {"total_commits_count": 57}

    assert webhook.gitlab_push(doc).changed_files is None
