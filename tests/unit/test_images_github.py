"""The image updater's GitHub contents-API write-back (PyGithub) against the OpenAPI-driven stand-in."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.support.github_repos import GitHubReposStandIn
from tests.unit.test_images import FakeRegistry, P, Sent, make_runtime, rendered, results
from tidecd.clients.github import GitHubAuth, Repo
from tidecd.images import annotations as notes
from tidecd.images import github_write
from tidecd.usecases import images as update

REPO = "octo/app"


def github_secret(standin: GitHubReposStandIn) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "github", "namespace": "argocd",
                         "labels": {"argocd.argoproj.io/secret-type": "github"}},
            "stringData": {"token": "ghp-test-token", "url": standin.base_url}}


def github_app(standin: GitHubReposStandIn, name: str, **more: str) -> dict[str, object]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "annotations": {
                notes.IMAGE_LIST: "web=reg.io/team/web:1.x", P + "write-back-method": "git",
                notes.WRITE_BACK_API: "github-api", **more}},
            "spec": {"project": "default",
                     "source": {"repoURL": f"{standin.base_url}/{REPO}.git", "path": "apps/web",
                                "targetRevision": "main"},
                     "destination": {"server": "https://kubernetes.default.svc", "namespace": "web"}}}


def test_a_new_tag_becomes_a_commit_through_the_contents_api(github_repos: GitHubReposStandIn, tmp_path: Path) -> None:
    github_repos.seed(REPO, "main", {"apps/web/kustomization.yaml": "resources: [web.yaml]\n"})
    runtime = make_runtime(tmp_path, [github_app(github_repos, "web")], [github_secret(github_repos)])
    rendered(runtime, "web", "reg.io/team/web:1.0.0")
    registry = FakeRegistry({"reg.io/team/web": ["1.0.0", "1.2.0", "2.0.0"]})
    sent = Sent()

    got = results(update.check(runtime, registry=registry, dispatcher=sent))["web"]

    assert got.status == "updated" and got.commit == github_repos.heads[(REPO, "main")], got
    [commit] = github_repos.commits
    assert commit["path"] == "apps/web/.argocd-source-web.yaml"
    assert yaml.safe_load(commit["text"]) == {"kustomize": {"images": ["reg.io/team/web:1.2.0"]}}
    assert "updates image reg.io/team/web tag '1.0.0' to '1.2.0'" in commit["message"]
    assert commit["committer"] == {"name": "tidecd-image-updater", "email": "noreply@tidecd.invalid"}
    assert [r.app for r in sent.refreshes] == ["web"]
    assert {c.authorization for c in github_repos.calls} == {"token ghp-test-token"}

    again = results(update.check(runtime, registry=registry, dispatcher=Sent()))["web"]  # the file has it
    assert again.status == "unchanged" and len(github_repos.commits) == 1


def test_a_target_branch_is_created_from_the_base_with_one_pull_request(github_repos: GitHubReposStandIn,
                                                                        tmp_path: Path) -> None:
    github_repos.seed(REPO, "main", {"apps/web/Chart.yaml": "name: web\n"})
    runtime = make_runtime(tmp_path, [github_app(github_repos, "web", **{P + "git-branch": "main:image-updates"})],
                           [github_secret(github_repos)])
    rendered(runtime, "web", "reg.io/team/web:1.0.0")
    registry = FakeRegistry({"reg.io/team/web": ["1.0.0", "1.1.0"]})

    got = results(update.check(runtime, registry=registry, dispatcher=Sent()))["web"]

    assert got.status == "updated", got
    assert github_repos.branches[(REPO, "main")] == {"apps/web/Chart.yaml": "name: web\n"}  # base untouched
    values = yaml.safe_load(github_repos.branches[(REPO, "image-updates")]["apps/web/.argocd-source-web.yaml"])
    assert values["helm"]["parameters"][1] == {"name": "image.tag", "value": "1.1.0", "forcestring": True}
    [pull] = github_repos.pulls[REPO]
    assert (pull["base"]["ref"], pull["head"]["ref"]) == ("main", "image-updates")
    assert pull["title"] == "build: automatic update of web"

    registry.repos[next(iter(registry.repos))].append("1.2.0")
    rendered(runtime, "web", "reg.io/team/web:1.1.0")
    results(update.check(runtime, registry=registry, dispatcher=Sent()))
    assert len(github_repos.pulls[REPO]) == 1 and len(github_repos.commits) == 2  # same pull request


def test_a_file_changed_meanwhile_is_read_again_never_overwritten(github_repos: GitHubReposStandIn) -> None:
    github_repos.seed(REPO, "main", {"values.yaml": "tag: '1'\n"})
    auth = GitHubAuth(token="t", api_url=github_repos.base_url)
    seen: list[str | None] = []

    def edit(read):  # type: ignore[no-untyped-def]
        seen.append(read("values.yaml"))
        if len(seen) == 1:  # a colleague commits between our read and our write
            github_repos.branches[(REPO, "main")]["values.yaml"] = "tag: '1'\nreplicas: 3\n"
        return {"values.yaml": (seen[-1] or "").replace("'1'", "'2'")}

    sha, number = github_write.push(auth, Repo("octo", "app"), base="main", target="main", edit=edit,
                                    message="bump\n", author=("bot", "bot@example.invalid"))

    assert seen == ["tag: '1'\n", "tag: '1'\nreplicas: 3\n"] and number == 0 and sha
    assert github_repos.branches[(REPO, "main")]["values.yaml"] == "tag: '2'\nreplicas: 3\n"
    assert len(github_repos.calls_to("repos/create-or-update-file-contents")) == 2
