"""GitHub in the loop, end to end: real control plane, real git, functions-framework processes, the
OpenAPI-driven GitHub stand-in, a real HMAC-checking HTTP receiver and the Pub/Sub emulator."""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.test_sealed_credentials import repo_secret
from tests.support.apps import GitOps, configmap
from tests.support.functions import Functions, push_payload
from tests.support.github_standin import GitHubStandIn
from tests.support.gitserver import GitRepo
from tests.support.notifications_catalog import CATALOG_TRIGGERS, catalog_cm
from tests.support.receivers import SLACK_TOKEN, Receivers, SignedWebhook
from tidecd.clients.secrets import KeyPair, generate_key, seal_secret, write_key_pair

ZERO = "0" * 40
HMAC_KEY = "e2e-hmac-key"
BAD_SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "bad"},
               "spec": {"ports": [{"port": 99999}]}}
CLUSTERROLE = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": "preview-everything"},
               "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}


def eventually(check: Callable[[], Any], timeout: float = 90.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        time.sleep(0.3)


@pytest.fixture
def receiver() -> Iterator[SignedWebhook]:
    server = SignedWebhook(HMAC_KEY, signed_path="/hook")
    yield server
    server.close()


@pytest.fixture
def sealing(tmp_path: Path) -> tuple[KeyPair, Path]:
    folder = tmp_path / "keys"
    folder.mkdir()
    pair = generate_key()
    write_key_pair(pair, folder / "tls.key", folder / "tls.crt")
    return pair, folder


@pytest.fixture
def hub(git_server: Any, namespace: str, cluster: Any, tmp_path: Path, sealing: tuple[KeyPair, Path],
        github_standin: GitHubStandIn) -> GitOps:
    """An app repo named owner/name (as on GitHub) and a config source holding the sealed github Secret."""
    home = tmp_path / "hub"
    home.mkdir()
    repo = GitRepo(git_server, f"octo/repo-{uuid.uuid4().hex[:10]}", home / "work")
    gitops = GitOps(repo, namespace, cluster, home)
    pair, _ = sealing
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "github", "namespace": "tidecd",
                           "labels": {"argocd.argoproj.io/secret-type": "github"}},
              "stringData": {"token": "e2e-github-token"}}
    (gitops.config_dir / "github-secret.yaml").write_text(yaml.safe_dump(seal_secret(secret, pair.cert_pem)))
    return gitops


@pytest.fixture
def hub_functions(hub: GitOps, tmp_path: Path) -> Iterator[Functions]:
    running = Functions(hub, tmp_path)
    try:
        yield running
    finally:
        running.stop()


def _repo_name(gitops: GitOps) -> str:
    url: str = gitops.repo.url
    return url.rstrip("/").removesuffix(".git").split("/", 3)[-1]


def _env(functions: Functions, standin: GitHubStandIn, keys: Path) -> None:
    functions.extra_env.update({"TIDECD_GITHUB_API_URL": standin.base_url, "TIDECD_SEALING_KEYS": str(keys),
                                "TIDECD_PUBLIC_URL": "https://cd.example"})


def test_push_posts_pending_then_success_and_a_failing_sync_failure(
        hub: GitOps, hub_functions: Functions, github_standin: GitHubStandIn, sealing: tuple[KeyPair, Path]) -> None:
    functions = hub_functions
    _env(functions, github_standin, sealing[1])
    repo = _repo_name(hub)
    sha = hub.push({"app/cm.yaml": configmap("web")})
    app = hub.application(automated={})
    answer = functions.deliver("push", push_payload(hub.repo.url, "refs/heads/main", ZERO, sha, ["app/cm.yaml"]))
    assert answer.status_code in (200, 202), answer.text
    states = eventually(lambda: (s := github_standin.status_states(repo, sha, f"tidecd/{app}")) and
                        s[-1] != "pending" and s, what="a final commit status")
    assert states == ["pending", "success"]
    assert hub.live("ConfigMap", "web") is not None
    first = github_standin.calls_to("repos/create-commit-status")[0]
    assert first.authorization == "token e2e-github-token"  # the sealed Secret, unsealed in memory
    assert first.body["target_url"] == f"https://cd.example/ui/apps/{app}"

    bad = hub.push({"app/bad.yaml": BAD_SERVICE})
    answer = functions.deliver("push", push_payload(hub.repo.url, "refs/heads/main", sha, bad, ["app/bad.yaml"]))
    assert answer.status_code in (200, 202), answer.text
    states = eventually(lambda: (s := github_standin.status_states(repo, bad, f"tidecd/{app}")) and
                        s[-1] != "pending" and s, what="the failing sync's status")
    assert states == ["pending", "failure"]
    [failure] = [s for s in github_standin.statuses[(repo, bad)] if s["state"] == "failure"]
    assert len(failure["description"]) <= 140


def _pr_payload(examples: dict[str, list[dict[str, Any]]], gitops: GitOps, action: str, number: int,
                head: str, branch: str) -> dict[str, Any]:
    doc = copy.deepcopy(next(e for e in examples["pull_request"] if e["action"] == action))
    full = _repo_name(gitops)
    doc["number"] = doc["pull_request"]["number"] = number
    doc["pull_request"]["head"].update(sha=head, ref=branch)
    doc["pull_request"]["base"]["ref"] = "main"
    doc["repository"].update(clone_url=gitops.repo.url, html_url=gitops.repo.url.removesuffix(".git"),
                             full_name=full, name=full.split("/")[1], default_branch="main")
    return doc


def test_pull_request_preview_comment_upserted_and_forbidden_clusterrole_fails(
        hub: GitOps, hub_functions: Functions, github_standin: GitHubStandIn, sealing: tuple[KeyPair, Path],
        webhook_examples: dict[str, list[dict[str, Any]]]) -> None:
    functions = hub_functions
    _env(functions, github_standin, sealing[1])
    repo = _repo_name(hub)
    hub.project({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "team"},
                 "spec": {"sourceRepos": ["*"], "destinations": [{"name": "*", "namespace": "*"}]}})
    hub.push({"app/cm.yaml": configmap("web", {"color": "blue"})})
    app = hub.application(project="team")
    from tidecd.usecases.commands import SyncRequest

    hub.reconcile(request=SyncRequest(), runtime=hub.runtime(sealing_keys=str(sealing[1])))
    live = hub.live("ConfigMap", "web")
    assert live is not None and live["data"] == {"color": "blue"}, hub.state().conditions

    hub.repo.git("checkout", "--quiet", "-b", "feature")
    hub.repo.write("app/cm.yaml", yaml.safe_dump(configmap("web", {"color": "green"})))
    head1 = hub.repo.commit("green")
    hub.repo.push("feature")
    answer = functions.deliver("pull_request", _pr_payload(webhook_examples, hub, "opened", 42, head1, "feature"))
    assert answer.status_code == 202, answer.text
    assert answer.json()["preview"] == [app]
    comment = eventually(lambda: github_standin.comment_bodies(repo, 42), what="the preview comment")
    assert len(comment) == 1
    assert f"ConfigMap {hub.namespace}/web" in comment[0] and "+  color: green" in comment[0]
    assert "<details>" in comment[0]
    assert eventually(lambda: github_standin.status_states(repo, head1, f"tidecd/preview/{app}")) == ["success"]
    assert hub.live("ConfigMap", "web")["data"] == {"color": "blue"}  # type: ignore[index]  # nothing written

    hub.repo.write("app/cm.yaml", yaml.safe_dump(configmap("web", {"color": "red"})))
    head2 = hub.repo.commit("red")
    hub.repo.push("feature")
    answer = functions.deliver("pull_request", _pr_payload(webhook_examples, hub, "synchronize", 42, head2,
                                                           "feature"))
    assert answer.status_code == 202, answer.text
    updated = eventually(lambda: (b := github_standin.comment_bodies(repo, 42)) and head2[:12] in b[0] and b,
                         what="the updated comment")
    assert len(updated) == 1 and "+  color: red" in updated[0]
    assert len(github_standin.calls_to("issues/create-comment")) == 1

    hub.repo.write("app/role.yaml", yaml.safe_dump(CLUSTERROLE))
    head3 = hub.repo.commit("role")
    hub.repo.push("feature")
    functions.deliver("pull_request", _pr_payload(webhook_examples, hub, "synchronize", 42, head3, "feature"))
    states = eventually(lambda: github_standin.status_states(repo, head3, f"tidecd/preview/{app}"),
                        what="the preview status of the ClusterRole head")
    assert states == ["failure"]
    final = eventually(lambda: (b := github_standin.comment_bodies(repo, 42)) and head3[:12] in b[0] and b)
    assert "project rule" in final[0] and "ClusterRole" in final[0]
    assert hub.live("ClusterRole", "preview-everything", group="rbac.authorization.k8s.io", namespace="") is None


def test_each_service_gets_one_message_per_trigger(
        hub: GitOps, github_standin: GitHubStandIn, sealing: tuple[KeyPair, Path], receiver: SignedWebhook,
        pubsub_emulator: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from google.cloud import pubsub_v1

    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub_emulator)
    topic = f"projects/tidecd-e2e/topics/notify-{uuid.uuid4().hex[:8]}"
    subscription = topic.replace("/topics/", "/subscriptions/")
    pubsub_v1.PublisherClient().create_topic(name=topic)
    subscriber = pubsub_v1.SubscriberClient()
    subscriber.create_subscription(name=subscription, topic=topic)
    pair, keys = sealing
    targets = {"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "notifications", "namespace": "tidecd",
                            "labels": {"argocd.argoproj.io/secret-type": "notifications"}},
               "stringData": {"webhook.ops.url": receiver.url + "/hook", "webhook.ops.secret": HMAC_KEY,
                              "slack.default.url": receiver.url + "/slack"}}
    (hub.config_dir / "notifications.yaml").write_text(yaml.safe_dump(seal_secret(targets, pair.cert_pem)))
    subscribe = "notifications.argoproj.io/subscribe."
    annotations = {f"{subscribe}{t}.{s}": r for t in ("on-sync-running", "on-sync-succeeded", "on-sync-failed",
                                                      "on-deployed")
                   for s, r in (("webhook", "ops"), ("slack", ""), ("pubsub", topic), ("github", ""))}
    hub.push({"app/cm.yaml": configmap("web")})
    app = hub.application(automated={}, annotations=annotations)
    runtime = hub.runtime(sealing_keys=str(keys), github_api_url=github_standin.base_url)
    for _ in range(4):  # the sync, then reconciles of an unchanged app: nothing more is sent
        hub.reconcile(runtime=runtime)
    repo = _repo_name(hub)
    sha = hub.repo.head()
    expected = ["on-sync-running", "on-sync-succeeded", "on-deployed"]
    assert receiver.triggers("/hook") == expected
    assert receiver.bad == 0
    slack = [body["text"] for body in receiver.bodies("/slack")]
    assert [t.split(": ", 1)[1] for t in slack] == ["sync running", "sync succeeded", "deployed"]
    pulled = subscriber.pull(subscription=subscription, max_messages=20, timeout=30)
    got = sorted((m.message.attributes["trigger"], json.loads(m.message.data)["app"])
                 for m in pulled.received_messages)
    assert got == sorted((t, app) for t in expected)
    for trigger, state in (("on-sync-running", "pending"), ("on-sync-succeeded", "success"),
                           ("on-deployed", "success")):
        assert github_standin.status_states(repo, sha, f"tidecd/{app}/{trigger}") == [state]

    hub.push({"app/bad.yaml": BAD_SERVICE})
    for _ in range(3):
        hub.reconcile(runtime=runtime)
    assert receiver.triggers("/hook") == [*expected, "on-sync-running", "on-sync-failed"]
    assert len(receiver.bodies("/slack")) == 5
    subscriber.close()


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _samples(text: str) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_parse_and_move(gitops: GitOps, functions: Functions) -> None:
    url = functions.start("api").url + "/metrics"
    auth = {"Authorization": f"Bearer {functions.token}"}
    assert requests.get(url, timeout=30).status_code == 401
    before = _samples(requests.get(url, headers=auth, timeout=30).text)
    gitops.push({"app/cm.yaml": configmap("m")})
    app = gitops.application()
    answer = functions.api("POST", f"/apps/{app}/sync", {})
    assert answer.status_code in (200, 202), answer.text
    eventually(lambda: (op := gitops.state().operation) is not None and not op.running,
               what="the sync to finish")
    after: Samples = eventually(lambda: (s := _samples(requests.get(url, headers=auth, timeout=30).text)) and
                                s.get(("tidecd_syncs_total", (("result", "Succeeded"),)), 0) >
                                before.get(("tidecd_syncs_total", (("result", "Succeeded"),)), 0) and s,
                                what="the syncs counter to move")

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("tidecd_syncs_total", result="Succeeded") == 1
    assert delta("tidecd_reconciles_total", result="done") >= 1
    assert delta("tidecd_stage_duration_seconds_count", stage="apply") >= 1
    assert delta("tidecd_stage_duration_seconds_count", stage="render") >= 1
    assert after[("tidecd_store_syncs_succeeded", ())] >= 1


def test_preview_fans_out_through_pubsub_to_the_reconcile_function(
        hub: GitOps, hub_functions: Functions, github_standin: GitHubStandIn, sealing: tuple[KeyPair, Path],
        webhook_examples: dict[str, list[dict[str, Any]]], pubsub_emulator: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The cloud path: the webhook publishes one kind=preview message per app on the refresh topic, the
    emulator pushes it to the reconcile function (as Eventarc would), which runs the preview job."""
    from google.api_core.client_options import ClientOptions
    from google.cloud import pubsub_v1

    from tests.support.pubsub import anonymous_credentials

    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub_emulator)
    functions = hub_functions
    _env(functions, github_standin, sealing[1])
    repo = _repo_name(hub)
    topic = f"projects/tidecd-test/topics/preview-{hub.namespace}"
    subscription = f"projects/tidecd-test/subscriptions/preview-{hub.namespace}"
    options = ClientOptions(api_endpoint=pubsub_emulator)
    publisher = pubsub_v1.PublisherClient(credentials=anonymous_credentials(), client_options=options)
    subscriber = pubsub_v1.SubscriberClient(credentials=anonymous_credentials(), client_options=options)
    publisher.create_topic(name=topic)
    functions.extra_env.update({"PUBSUB_EMULATOR_HOST": pubsub_emulator, "TIDECD_REFRESH_TOPIC": topic})
    reconcile_fn = functions.start("reconcile", signature="cloudevent")
    subscriber.create_subscription(name=subscription, topic=topic,
                                   push_config={"push_endpoint": reconcile_fn.url + "/"}, ack_deadline_seconds=60)
    try:
        hub.push({"one/cm.yaml": configmap("one"), "two/cm.yaml": configmap("two")})
        apps = [hub.application(name, path=name) for name in ("one", "two")]
        hub.repo.git("checkout", "--quiet", "-b", "feature")
        hub.repo.write("two/cm.yaml", yaml.safe_dump(configmap("two", {"size": "large"})))
        head = hub.repo.commit("two grows")
        hub.repo.push("feature")
        started = time.monotonic()
        answer = functions.deliver("pull_request", _pr_payload(webhook_examples, hub, "opened", 5, head, "feature"))
        assert answer.status_code == 202, answer.text
        assert time.monotonic() - started < 10  # within GitHub's delivery timeout
        assert sorted(answer.json()["preview"]) == sorted(apps)
        for app in apps:
            def preview_states(a: str = app) -> list[str]:
                return github_standin.status_states(repo, head, f"tidecd/preview/{a}")

            assert eventually(preview_states, what=f"the preview status of {app}") == ["success"]
        body = eventually(lambda: (b := github_standin.comment_bodies(repo, 5)) and "pending" not in b[0] and b,
                          what="the complete comment")
        assert len(body) == 1 and all(f"`{a}`" in body[0] for a in apps)
        assert "+  size: large" in body[0]
    finally:
        subscriber.delete_subscription(subscription=subscription)
        publisher.delete_topic(topic=topic)


# --- pull requests from forks ----------------------------------------------------------------------------

PREVIEW_LABEL = "tidecd:preview"


def _fork_payload(examples: dict[str, list[dict[str, Any]]], gitops: GitOps, action: str, number: int,
                  head: str, *, label: str = "") -> dict[str, Any]:
    """A pull_request event whose head repository is a fork (`mallory/<name>`), as GitHub sends it."""
    doc = _pr_payload(examples, gitops, "labeled" if label else "opened", number, head, "patch-1")
    doc["action"] = action
    full = _repo_name(gitops)
    doc["pull_request"]["base"]["repo"] = doc["pull_request"]["base"]["repo"] | {"full_name": full}
    doc["pull_request"]["head"]["repo"] = doc["pull_request"]["head"]["repo"] | {
        "full_name": f"mallory/{full.split('/')[1]}"}
    template = (doc.get("label") or {}) | {"name": label}
    doc["pull_request"]["labels"] = [template] if label else []
    if label:
        doc["label"] = template
    return doc


def _comment_payload(examples: dict[str, list[dict[str, Any]]], gitops: GitOps, number: int, body: str,
                     association: str) -> dict[str, Any]:
    """An issue_comment event on pull request `number` (octokit's example plus `issue.pull_request`, the
    field GitHub adds for a pull request's comments)."""
    doc = copy.deepcopy(next(e for e in examples["issue_comment"] if e["action"] == "created"))
    full = _repo_name(gitops)
    doc["issue"].update(number=number, state="open", pull_request={
        "url": f"https://api.github.com/repos/{full}/pulls/{number}", "html_url": f"https://github.com/{full}/pull/"
        f"{number}", "diff_url": f"https://github.com/{full}/pull/{number}.diff",
        "patch_url": f"https://github.com/{full}/pull/{number}.patch", "merged_at": None})
    doc["comment"].update(body=body, author_association=association)
    doc["repository"].update(clone_url=gitops.repo.url, html_url=gitops.repo.url.removesuffix(".git"),
                             full_name=full, name=full.split("/")[1], default_branch="main")
    return doc


def _fork_head(gitops: GitOps, number: int, files: dict[str, Any]) -> str:
    """A fork's commit, where GitHub keeps every pull request's head: `refs/pull/N/head` of the base."""
    gitops.repo.git("checkout", "--quiet", "-B", f"fork-{number}", "main")
    for path, doc in files.items():
        gitops.repo.write(path, yaml.safe_dump(doc))
    sha = str(gitops.repo.commit("from a fork"))
    gitops.repo.git("push", "--quiet", "--force", "origin", f"HEAD:refs/pull/{number}/head")
    gitops.repo.git("checkout", "--quiet", "main")
    return sha


def test_a_forks_pull_request_gets_no_live_data_and_no_status_until_a_maintainer_asks(
        hub: GitOps, hub_functions: Functions, github_standin: GitHubStandIn, sealing: tuple[KeyPair, Path],
        webhook_examples: dict[str, list[dict[str, Any]]], git_server: Any) -> None:
    from tidecd.usecases.commands import SyncRequest

    functions = hub_functions
    _env(functions, github_standin, sealing[1])
    repo = _repo_name(hub)
    hub.push({"app/cm.yaml": configmap("web", {"color": "blue"})})
    app = hub.application()
    hub.reconcile(request=SyncRequest(), runtime=hub.runtime(sealing_keys=str(sealing[1])))
    assert hub.live("ConfigMap", "web")["data"] == {"color": "blue"}  # type: ignore[index]
    hub.kube.apply({"apiVersion": "v1", "kind": "ConfigMap",  # by hand: no app owns it
                    "metadata": {"name": "shared", "namespace": hub.namespace}, "data": {"token": "live-only-value"}})
    head = _fork_head(hub, 77, {"app/cm.yaml": configmap("web", {"color": "green"}),
                                "app/shared.yaml": configmap("shared", {"token": "from-the-fork"})})
    fetched = git_server.requests(hub.repo.name, "upload-pack")

    answer = functions.deliver("pull_request", _fork_payload(webhook_examples, hub, "opened", 77, head))
    assert answer.status_code == 200 and answer.json()["mode"] == "waiting", answer.text
    note = eventually(lambda: github_standin.comment_bodies(repo, 77), what="the note to the fork")
    assert "waiting for a maintainer" in note[0] and f"`{PREVIEW_LABEL}`" in note[0]
    answer = functions.deliver("issue_comment", _comment_payload(webhook_examples, hub, 77, "/tidecd preview",
                                                                 "CONTRIBUTOR"))
    assert answer.status_code == 200 and "refused" in answer.json()["ignored"], answer.text
    answer = functions.deliver("pull_request", _fork_payload(webhook_examples, hub, "synchronize", 77, head))
    assert answer.status_code == 200 and answer.json()["mode"] == "waiting", answer.text
    time.sleep(2)  # what these deliveries could have started has run by now
    assert github_standin.statuses == {}  # no status without a maintainer
    assert github_standin.calls_to("pulls/get") == []  # a refused command reads nothing
    assert git_server.requests(hub.repo.name, "upload-pack") == fetched  # nothing of the fork was fetched
    assert "live-only-value" not in "".join(github_standin.comment_bodies(repo, 77))

    answer = functions.deliver("pull_request", _fork_payload(webhook_examples, hub, "labeled", 77, head,
                                                             label=PREVIEW_LABEL))
    assert answer.status_code == 202 and answer.json()["mode"] == "fork", answer.text
    assert eventually(lambda: github_standin.status_states(repo, head, f"tidecd/preview/{app}"),
                      what="the approved preview's status") == ["success"]
    [comment] = eventually(lambda: (b := github_standin.comment_bodies(repo, 77)) and "rendered only" in b[0] and b,
                           what="the fork's preview")
    assert "+  color: green" in comment and "-  color: blue" in comment and "--- base/" in comment
    assert f"created: <code>ConfigMap {hub.namespace}/shared</code>" in comment and "from-the-fork" in comment
    assert "live-only-value" not in comment and "The cluster was not read" in comment
    assert hub.live("ConfigMap", "shared")["data"] == {"token": "live-only-value"}  # type: ignore[index]
    assert hub.live("ConfigMap", "web")["data"] == {"color": "blue"}  # type: ignore[index]

    # a branch of the base repository declaring the same object: previewed in full, the object named as one a
    # sync would take over, its live data not shown
    hub.repo.git("checkout", "--quiet", "-b", "feature")
    hub.repo.write("app/shared.yaml", yaml.safe_dump(configmap("shared", {"token": "from-the-branch"})))
    trusted = hub.repo.commit("shared")
    hub.repo.push("feature")
    answer = functions.deliver("pull_request", _pr_payload(webhook_examples, hub, "opened", 78, trusted, "feature"))
    assert answer.status_code == 202 and answer.json()["mode"] == "full", answer.text
    [full] = eventually(lambda: (b := github_standin.comment_bodies(repo, 78)) and "pending" not in b[0] and b,
                        what="the full preview")
    assert f"take over (live, and no app owns it: its live state is not shown): `ConfigMap {hub.namespace}/shared`" \
        in full
    assert "live-only-value" not in full and "from-the-branch" not in full


def test_a_forks_preview_of_a_private_repository_never_sends_its_credentials(
        git_server_auth: Any, namespace: str, cluster: Any, tmp_path: Path, sealing: tuple[KeyPair, Path],
        github_standin: GitHubStandIn, webhook_examples: dict[str, list[dict[str, Any]]]) -> None:
    from tidecd.usecases.commands import SyncRequest

    pair, keys = sealing
    name = f"octo/private-{uuid.uuid4().hex[:10]}"
    (tmp_path / "private").mkdir()
    gitops = GitOps(GitRepo(git_server_auth, name, tmp_path / "work", clone_url=git_server_auth.auth_url(name)),
                    namespace, cluster, tmp_path / "private")
    github = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "github", "namespace": "tidecd", "labels": {
        "argocd.argoproj.io/secret-type": "github"}}, "stringData": {"token": "e2e-github-token"}}
    (gitops.config_dir / "github-secret.yaml").write_text(yaml.safe_dump(seal_secret(github, pair.cert_pem)))
    credentials = repo_secret(gitops.repo.url, git_server_auth.username, git_server_auth.password)
    (gitops.config_dir / "repo-secret.yaml").write_text(yaml.safe_dump(seal_secret(credentials, pair.cert_pem)))
    gitops.push({"app/cm.yaml": configmap("web", {"color": "blue"})})
    app = gitops.application()
    gitops.reconcile(request=SyncRequest(), runtime=gitops.runtime(sealing_keys=str(keys)))
    assert gitops.live("ConfigMap", "web") is not None, gitops.state().conditions  # the credentials work
    head = _fork_head(gitops, 5, {"app/cm.yaml": configmap("web", {"color": "green"})})
    repo = _repo_name(gitops)
    github_standin.pull_heads[(repo, 5)] = {"head_sha": head, "head_repo": f"mallory/{repo.split('/')[1]}",
                                            "base_ref": "main"}
    functions = Functions(gitops, tmp_path)
    try:
        _env(functions, github_standin, keys)
        before = git_server_auth.counts(name)  # every authenticated request is counted, no other
        answer = functions.deliver("issue_comment", _comment_payload(webhook_examples, gitops, 5,
                                                                     "/tidecd preview", "MEMBER"))
        assert answer.status_code == 202 and answer.json()["mode"] == "fork", answer.text
        assert eventually(lambda: github_standin.status_states(repo, head, f"tidecd/preview/{app}"),
                          what="the preview's status") == ["failure"]
        [comment] = eventually(lambda: github_standin.comment_bodies(repo, 5), what="the preview comment")
        assert "render at the head, without credentials" in comment, comment
        assert git_server_auth.password not in comment
        assert git_server_auth.counts(name) == before  # the credentials were never sent
        [read] = github_standin.calls_to("pulls/get")
        assert read.authorization == "token e2e-github-token"
    finally:
        functions.stop()


def test_argocd_notifications_cm_of_the_config_source_sends_the_catalogs_messages(
        hub: GitOps, github_standin: GitHubStandIn, sealing: tuple[KeyPair, Path], receivers: Receivers,
        pubsub_emulator: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Argo CD's notification catalog in the config source (argocd-notifications-cm, a sealed
    argocd-notifications-secret), a real cluster: Slack gets the catalog's text, Pub/Sub (the emulator) the
    on-deployed message, GitHub a commit status from a template, once each however many steps run."""
    from google.cloud import pubsub_v1

    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub_emulator)
    topic = f"projects/tidecd-e2e/topics/argo-notify-{uuid.uuid4().hex[:8]}"
    subscription = topic.replace("/topics/", "/subscriptions/")
    pubsub_v1.PublisherClient().create_topic(name=topic)
    subscriber = pubsub_v1.SubscriberClient()
    subscriber.create_subscription(name=subscription, topic=topic)
    pair, keys = sealing
    status = {"message": "{{.app.metadata.name}} is synced: "
                         "{{ (call .repo.GetCommitMetadata .app.status.sync.revision).Message }}", "github": {
        "status": {"state": "success", "label": "continuous-delivery/{{.app.metadata.name}}"}}}
    synced = [{"when": CATALOG_TRIGGERS["on-sync-succeeded"]["when"], "send": ["commit-status"]}]
    cm = catalog_cm({"service.slack": f"token: $slack-token\napiURL: {receivers.url}/slack/api/\n",
                     "service.gcppubsub": "project: tidecd-e2e\n", "service.github": "{}\n",
                     "template.commit-status": yaml.safe_dump(status),
                     "trigger.on-synced-status": yaml.safe_dump(synced)})
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "argocd-notifications-secret",
                                                                  "namespace": "argocd"},
              "stringData": {"slack-token": SLACK_TOKEN}}
    (hub.config_dir / "argocd-notifications-cm.yaml").write_text(yaml.safe_dump(cm))
    (hub.config_dir / "argocd-notifications-secret.yaml").write_text(yaml.safe_dump(seal_secret(secret, pair.cert_pem)))
    subscribe = "notifications.argoproj.io/subscribe."
    hub.push({"app/cm.yaml": configmap("web")}, message="Add the web ConfigMap")
    app = hub.application(automated={}, annotations={f"{subscribe}on-sync-succeeded.slack": "#deploys",
                                                     f"{subscribe}on-deployed.gcppubsub": topic,
                                                     f"{subscribe}on-synced-status.github": ""})
    runtime = hub.runtime(sealing_keys=str(keys), github_api_url=github_standin.base_url)
    for _ in range(4):  # the sync, then reconciles of an unchanged app: nothing more is sent
        hub.reconcile(runtime=runtime)
    [slack] = [r.form() for r in receivers.to("/slack/api/chat.postMessage")]
    assert slack["channel"] == "#deploys"
    assert slack["text"].startswith(f":white_check_mark: Application {app} has been successfully synced at ")
    assert json.loads(slack["attachments"])[0]["fields"][0] == {"title": "Sync Status", "value": "Synced",
                                                                "short": True}
    pulled = subscriber.pull(subscription=subscription, max_messages=20, timeout=30)
    assert [m.message.data.decode() for m in pulled.received_messages] == [
        f" Application {app} is now running new version of deployments manifests.\n"]  # the Slack emoji branch, empty
    assert github_standin.status_states(_repo_name(hub), hub.repo.head(), f"continuous-delivery/{app}") == ["success"]
    [status] = [s for s in github_standin.statuses[(_repo_name(hub), hub.repo.head())]
                if s["context"] == f"continuous-delivery/{app}"]
    assert status["description"] == f"{app} is synced: Add the web ConfigMap"  # repo.GetCommitMetadata
