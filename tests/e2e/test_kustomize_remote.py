"""Kustomize remote bases fetched by tidecd within the project's sourceRepos, never by kustomize (issue 23).

A second and a third repository on the test's git server play the remote bases: the app's kustomization
names `<lib>//base?ref=v1` (a tag, while main has moved on) and `<lib>.git/overlay?ref=v1`; both reach
`../common` inside the same repository, which names a remote base of its own (`<extra>.git/deploy`, no ref:
the default branch). tidecd fetches
each as a snapshot of its git source, places it in a private copy of the checkout and kustomize builds
with no network: the git server counts one fetch of each repository, and a later render of a new app
commit fetches neither again (the snapshot is cached). A project whose sourceRepos omit the remote gets
an error naming the kustomization, the entry and the repository, and nothing is applied. A chain of five
repositories, each the next one's remote base, stops at the fifth (4 deep), which is never fetched; a remote
plain file stays refused by name. A remote base on a git server that requires basic auth is fetched with
the credentials of that repository's (sealed) Secret, and named in the error without them.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.apps import GitOps, configmap
from tests.support.gitserver import AuthGitServer, GitRepo
from tidecd.base.constants import LABEL_SECRET_TYPE, SECRET_TYPE_REPOSITORY
from tidecd.clients.secrets import KeyPair, seal_secret
from tidecd.usecases.commands import SyncRequest
from tidecd_dev.gitserver import LS_REMOTE, UPLOAD_PACK

pytestmark = pytest.mark.e2e


def synced(gitops: GitOps, name: str) -> None:
    state = gitops.state(name)
    text = " | ".join(f"{c['type']}: {c['message']}" for c in state.conditions)
    assert state.operation is not None and state.operation.phase == "Succeeded", (text, state.operation)
    assert state.sync_status == "Synced", text


def kustomization(**fields: Any) -> str:
    return yaml.safe_dump(fields)


@pytest.fixture
def remotes(git_server: Any, tmp_path: Path) -> tuple[GitRepo, GitRepo]:
    extra = GitRepo(git_server, f"extra-{uuid.uuid4().hex[:8]}", tmp_path / "extra")
    extra.write_files({"deploy/kustomization.yaml": kustomization(resources=["cm.yaml"]),
                       "deploy/cm.yaml": configmap("from-extra", {"branch": "main"})})
    extra.commit("extra")
    extra.push()
    lib = GitRepo(git_server, f"lib-{uuid.uuid4().hex[:8]}", tmp_path / "lib")
    lib.write_files({
        "base/kustomization.yaml": kustomization(resources=["cm.yaml", "../common"]),
        "base/cm.yaml": configmap("from-lib", {"version": "v1"}),
        "overlay/kustomization.yaml": kustomization(namePrefix="ov-", resources=["../common"]),
        "common/kustomization.yaml": kustomization(resources=["cm.yaml", f"{extra.url}/deploy"]),
        "common/cm.yaml": configmap("from-common", {"where": "lib/common"}),
    })
    lib.commit("v1")
    lib.tag("v1")
    lib.push("v1")
    lib.write("base/cm.yaml", yaml.safe_dump(configmap("from-lib", {"version": "main, after v1"})))
    lib.commit("after v1")
    lib.push()
    return lib, extra


def test_a_remote_base_is_fetched_by_tidecd_and_built_with_no_network(
        gitops: GitOps, git_server: Any, remotes: tuple[GitRepo, GitRepo]) -> None:
    lib, extra = remotes
    gitops.push({"app/kustomization.yaml": kustomization(
        resources=[f"git::{lib.url}//base?ref=v1", f"{lib.url}/overlay?ref=v1"], commonLabels={"team": "web"})})
    git_server.reset_counts()
    gitops.application("kz", path="app")
    gitops.sync("kz")
    synced(gitops, "kz")
    for name, data in (("from-lib", {"version": "v1"}), ("from-common", {"where": "lib/common"}),
                       ("from-extra", {"branch": "main"}), ("ov-from-common", {"where": "lib/common"}),
                       ("ov-from-extra", {"branch": "main"})):
        live = gitops.live("ConfigMap", name)
        assert live is not None and live["data"] == data, (name, live)
        assert live["metadata"]["labels"]["team"] == "web"
    fetched = {repo.name: git_server.requests(repo.name, UPLOAD_PACK) for repo in (lib, extra)}
    assert fetched == {lib.name: 1, extra.name: 1}, [git_server.counts(r.name) for r in (lib, extra)]
    # each: the ref resolved once (lib's second entry names v1 too, and asks nothing more), then its fetch
    assert {repo.name: git_server.requests(repo.name, LS_REMOTE) for repo in (lib, extra)} == {lib.name: 2,
                                                                                             extra.name: 2}
    gitops.push({"app/kustomization.yaml": kustomization(
        resources=[f"git::{lib.url}//base?ref=v1", f"{lib.url}/overlay?ref=v1"], commonLabels={"team": "web2"})})
    gitops.sync("kz")
    synced(gitops, "kz")
    live = gitops.live("ConfigMap", "from-extra")
    assert live is not None and live["metadata"]["labels"]["team"] == "web2"
    assert {repo.name: git_server.requests(repo.name, UPLOAD_PACK) for repo in (lib, extra)} == fetched


def test_a_remote_base_outside_the_projects_source_repos_is_refused_by_name(
        gitops: GitOps, git_server: Any, remotes: tuple[GitRepo, GitRepo]) -> None:
    lib, extra = remotes
    gitops.push({"own/kustomization.yaml": kustomization(resources=[f"{lib.url}//base?ref=v1"], namePrefix="own-")})
    git_server.reset_counts()
    gitops.project({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "own"},
                    "spec": {"sourceRepos": [gitops.repo.url],
                             "destinations": [{"namespace": "*", "server": "*"}]}})
    gitops.application("own", path="own", project="own")
    gitops.sync("own")
    messages = " | ".join(c["message"] for c in gitops.state("own").conditions)
    assert (f"kustomization own/kustomization.yaml: resources[0] '{lib.url}//base?ref=v1': repository "
            f"'{lib.url}' is not permitted by the project's sourceRepos; nothing was fetched") in messages, messages
    assert git_server.counts(lib.name) == {}
    # the remote's own remote base is held to the same rules
    gitops.project({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "own"},
                    "spec": {"sourceRepos": [gitops.repo.url, lib.url],
                             "destinations": [{"namespace": "*", "server": "*"}]}})
    gitops.sync("own")
    messages = " | ".join(c["message"] for c in gitops.state("own").conditions)
    assert (f"kustomization common/kustomization.yaml: resources[1] '{extra.url}/deploy': repository "
            f"'{extra.url}' is not permitted by the project's sourceRepos") in messages, messages
    assert git_server.counts(extra.name) == {}
    for name in ("own-from-lib", "own-from-common", "own-from-extra"):
        assert gitops.live("ConfigMap", name) is None


def test_remote_bases_nest_at_most_four_deep_and_a_remote_file_stays_refused(
        gitops: GitOps, git_server: Any, tmp_path: Path) -> None:
    chain = [GitRepo(git_server, f"chain{i}-{uuid.uuid4().hex[:6]}", tmp_path / f"chain{i}") for i in range(5)]
    for index, repo in enumerate(chain):
        nxt = [f"{chain[index + 1].url}//deploy"] if index + 1 < len(chain) else []
        repo.write_files({"deploy/kustomization.yaml": kustomization(resources=["cm.yaml", *nxt]),
                          "deploy/cm.yaml": configmap(f"chain-{index}")})
        repo.commit("chain")
        repo.push()
    gitops.push({"deep/kustomization.yaml": kustomization(resources=[f"{chain[0].url}//deploy"]),
                 "file/kustomization.yaml": kustomization(resources=[f"{chain[0].url.rsplit('/', 1)[0]}/cm.yaml"])})
    git_server.reset_counts()
    gitops.application("deep", path="deep")
    gitops.sync("deep")
    messages = " | ".join(c["message"] for c in gitops.state("deep").conditions)
    assert (f"kustomization deploy/kustomization.yaml: resources[1] '{chain[4].url}//deploy': remote bases nested "
            "more than 4 deep") in messages, messages
    assert [bool(git_server.counts(repo.name)) for repo in chain] == [True, True, True, True, False]
    assert gitops.live("ConfigMap", "chain-0") is None
    gitops.application("file", path="file")
    gitops.sync("file")
    messages = " | ".join(c["message"] for c in gitops.state("file").conditions)
    assert "kustomization file/kustomization.yaml: resources[0]" in messages, messages
    assert "is remote: a remote file is not fetched" in messages, messages


def test_a_private_remote_base_is_fetched_with_its_repositorys_credentials(
        gitops: GitOps, git_server_auth: AuthGitServer, sealing: tuple[KeyPair, Path], tmp_path: Path) -> None:
    name = f"private-lib-{uuid.uuid4().hex[:8]}"
    lib = GitRepo(git_server_auth, name, tmp_path / "private-lib", clone_url=git_server_auth.auth_url(name))
    lib.write_files({"base/kustomization.yaml": kustomization(resources=["cm.yaml"]),
                     "base/cm.yaml": configmap("from-private-lib")})
    lib.commit("private")
    lib.push()
    gitops.push({"private/kustomization.yaml": kustomization(resources=[f"{lib.url}//base"])})
    pair, keys = sealing
    gitops.application("private", path="private")
    gitops.reconcile("private", request=SyncRequest(), runtime=gitops.runtime(sealing_keys=str(keys)))
    messages = " | ".join(c["message"] for c in gitops.state("private").conditions)
    assert f"kustomization private/kustomization.yaml: resources[0] '{lib.url}//base': repository {lib.url} is " \
           "unavailable: authentication failed" in messages, messages
    assert git_server_auth.password not in messages
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "private-lib", "namespace": "argocd",
                           "labels": {LABEL_SECRET_TYPE: SECRET_TYPE_REPOSITORY}},
              "type": "Opaque", "stringData": {"type": "git", "url": lib.url, "username": git_server_auth.username,
                                               "password": git_server_auth.password}}
    (gitops.config_dir / "private-lib.yaml").write_text(yaml.safe_dump(seal_secret(secret, pair.cert_pem)))
    gitops.reconcile("private", request=SyncRequest(), runtime=gitops.runtime(sealing_keys=str(keys)))
    synced(gitops, "private")
    assert gitops.live("ConfigMap", "from-private-lib") is not None
