"""Deleting apps as Argo CD does, on the dev control plane: prune wave by wave, an app removed from the config
source (its finalizer decides), and its PreDelete / PostDelete hooks around the deletion.

Argo CD's cases: `test/e2e/app_deletion_test.go` (TestDeletingAppByLabelWait: a cascading delete leaves
nothing; TestDeletingAppWithImpersonationMissingDeletePermission's `Delete(false)`: the objects stay),
`hook_test.go` (TestPreDeleteHook, TestPostDeleteHook), `sync_waves_test.go`
(TestSyncPruneOrderWithSyncWaves: a wave is pruned once the one above it is gone), read through the search
tool; the deletion flow is `controller/appcontroller.go` `finalizeApplicationDeletion`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.support.apps import GitOps, configmap, job
from tidecd.base.model import ResourceKey
from tidecd.state import auditlog
from tidecd.triggers.dispatch import ManualDispatcher, reconcile_step
from tidecd.usecases import api, deletion, webhook
from tidecd.usecases.commands import SyncRequest

WAVE = "argocd.argoproj.io/sync-wave"
HOOK = "argocd.argoproj.io/hook"
DELETE_POLICY = "argocd.argoproj.io/hook-delete-policy"
FINALIZER = "resources-finalizer.argocd.argoproj.io"
HOLD = "tidecd.test/hold"  # a finalizer only the test removes: the object stays, being deleted


def with_finalizers(gitops: GitOps, name: str, *finalizers: str) -> None:
    path = gitops.config_dir / f"{name}.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["metadata"]["finalizers"] = list(finalizers)
    path.write_text(yaml.safe_dump(doc))


def release(gitops: GitOps, name: str) -> None:
    gitops.kube.request("PATCH", f"/api/v1/namespaces/{gitops.namespace}/configmaps/{name}",
                        body=[{"op": "remove", "path": "/metadata/finalizers"}],
                        content_type="application/json-patch+json")


def step_until_gone(gitops: GitOps, name: str, watch: Callable[[], None] = lambda: None,
                    timeout: float = 120.0, **settings: Any) -> None:
    """Step a deleting app as its continuations would, until it has left the config."""
    deadline = time.monotonic() + timeout
    while True:
        runtime = gitops.runtime(**settings)
        if name not in runtime.config().applications:
            return
        outcome = reconcile_step(runtime, name, budget=5.0)
        watch()
        assert time.monotonic() < deadline, (outcome.state.conditions if outcome.state else None)
        time.sleep(min(outcome.continue_after if outcome.continue_after is not None else 0.5, 1.0))


def test_prune_waits_for_a_waves_objects_to_be_gone_before_the_next_wave(gitops: GitOps) -> None:
    """TestSyncPruneOrderWithSyncWaves: the highest wave is pruned first, the next only once it is gone."""
    high = configmap("high", annotations={WAVE: "2"})
    high["metadata"]["finalizers"] = [HOLD]
    gitops.push({"app/high.yaml": high, "app/low.yaml": configmap("low", annotations={WAVE: "0"}),
                 "app/keep.yaml": configmap("keep")})
    name = gitops.application()
    gitops.sync()
    gitops.push({"app/high.yaml": None, "app/low.yaml": None})
    outcome = gitops.reconcile(request=SyncRequest(prune=True), follow=False, budget=2.0)
    op = outcome.state.operation if outcome.state else None
    assert op is not None and op.running and "waiting for pruned /ConfigMap" in op.step, op
    going = gitops.live("ConfigMap", "high")
    assert going is not None and going["metadata"].get("deletionTimestamp")
    assert gitops.live("ConfigMap", "low") is not None  # the lower wave waits
    release(gitops, "high")
    outcome = gitops.reconcile(name)
    state = gitops.state()
    assert state.operation is not None and state.operation.phase == "Succeeded", state.operation
    assert gitops.live("ConfigMap", "high") is None and gitops.live("ConfigMap", "low") is None
    assert gitops.live("ConfigMap", "keep") is not None


def test_an_app_removed_from_git_runs_its_delete_hooks_around_the_deletion_of_its_objects(
        gitops: GitOps, tmp_path: Path) -> None:
    """TestPreDeleteHook / TestPostDeleteHook: a sync never creates them; removing the app (with the
    resources finalizer) runs PreDelete, deletes the objects highest wave first, runs PostDelete, then
    deletes the hooks by their policy. Beside it, an app without the finalizer leaves its objects running."""
    pre = job("pre-delete", annotations={HOOK: "PreDelete", DELETE_POLICY: "HookSucceeded"})
    post = job("post-delete", annotations={HOOK: "PostDelete"})  # no policy: deleted once all is done
    gitops.push({"app/cm.yaml": configmap("web", annotations={WAVE: "1"}), "app/base.yaml": configmap("base"),
                 "app/pre.yaml": pre, "app/post.yaml": post,
                 "other/cm.yaml": configmap("orphaned")})
    name = gitops.application()
    other = gitops.application("other", path="other")
    with_finalizers(gitops, name, FINALIZER)
    gitops.sync()
    gitops.sync("other")
    assert gitops.live("ConfigMap", "web") is not None
    assert gitops.live("Job", "pre-delete", "batch") is None and gitops.live("Job", "post-delete", "batch") is None
    errors: list[str] = []
    assert deletion.track(gitops.runtime(), errors) == [] and errors == []
    (gitops.config_dir / f"{name}.yaml").unlink()
    (gitops.config_dir / f"{other}.yaml").unlink()
    assert deletion.track(gitops.runtime(), errors) == [name] and errors == []
    seen: list[tuple[bool, bool, bool, bool]] = []

    def watch() -> None:
        seen.append((gitops.live("Job", "pre-delete", "batch") is not None,
                     gitops.live("ConfigMap", "web") is not None, gitops.live("ConfigMap", "base") is not None,
                     gitops.live("Job", "post-delete", "batch") is not None))

    step_until_gone(gitops, name, watch)
    assert (True, True, True, False) in seen, seen  # PreDelete runs while every object is still there
    assert all(not post_live or not (web or base) for _, web, base, post_live in seen), seen  # PostDelete after
    assert any(post_live for *_, post_live in seen), seen
    waves = [(web, base) for _, web, base, _ in seen]
    assert (False, True) in waves or (False, False) in waves, waves  # wave 1 (web) went before wave 0 (base)
    assert (True, False) not in waves, waves
    assert [gitops.live("ConfigMap", n) for n in ("web", "base")] == [None, None]
    assert gitops.live("Job", "pre-delete", "batch") is None and gitops.live("Job", "post-delete", "batch") is None
    assert gitops.live("ConfigMap", "orphaned") is not None  # no finalizer: orphaned, as Argo CD
    assert ResourceKey("", "ConfigMap", gitops.namespace, "orphaned") in dict(gitops.state("other").inventory_keys())


def test_app_delete_commits_the_removal_and_deletes_the_objects_as_the_cascade_says(gitops: GitOps) -> None:
    """`argocd app delete --propagation-policy background` (TestDeletingAppByLabelWait): through the api, RBAC
    `applications, delete` and the audit log; the Application leaves git (so no poll brings it back), and
    the cascade decides, not the finalizer (this app has none)."""
    gitops.push({"app/cm.yaml": configmap("web"), "config/.keep": ""})
    name = gitops.application()
    app_file = f"config/{name}.yaml"
    gitops.push({app_file: yaml.safe_load((gitops.config_dir / f"{name}.yaml").read_text())})
    runtime = gitops.runtime(config=f"{gitops.repo.url}#main:config", api_token="t")
    gitops.reconcile(request=SyncRequest(), runtime=runtime)
    assert gitops.live("ConfigMap", "web") is not None
    gitops.push({"app/cm.yaml": None})  # its path is gone from git: no hooks to render, its objects still go
    answer = api.handle("DELETE", f"/api/v1/apps/{name}", {"Authorization": "Bearer t"}, b"", runtime,
                        query={"cascade": "background"}, dispatcher=ManualDispatcher())
    assert answer.status == 200 and answer.body["cascade"] == "background", answer.body
    gitops.repo.git("fetch", "--quiet", "origin", "+refs/heads/*:refs/remotes/origin/*")
    assert app_file not in gitops.repo.git("ls-tree", "-r", "--name-only", "origin/main")
    entry = auditlog.page(runtime.store)[0][-1]
    assert (entry["action"], entry["object"], entry["allowed"]) == ("delete", f"default/{name}", True)
    deadline = time.monotonic() + 60
    while name in gitops.runtime(config=f"{gitops.repo.url}#main:config").config().applications:
        reconcile_step(gitops.runtime(config=f"{gitops.repo.url}#main:config"), name, budget=5.0)
        assert time.monotonic() < deadline
    assert gitops.live("ConfigMap", "web") is None


def test_a_push_that_removes_an_app_from_the_config_source_deletes_it_at_once(gitops: GitOps) -> None:
    """The push webhook to the config source finds the removal (no waiting for the poll) and refreshes the
    app, now deleting: its finalizer (`.../background`) deletes its objects."""
    gitops.push({"app/cm.yaml": configmap("web"), "config/.keep": ""})
    name = gitops.application()
    with_finalizers(gitops, name, f"{FINALIZER}/background")
    app_file = f"config/{name}.yaml"
    gitops.push({app_file: yaml.safe_load((gitops.config_dir / f"{name}.yaml").read_text())})
    source = f"{gitops.repo.url}#main:config"
    gitops.reconcile(request=SyncRequest(), runtime=gitops.runtime(config=source))
    deletion.track(gitops.runtime(config=source), [])  # the poll has seen it
    sha = gitops.push({app_file: None})
    body = json.dumps({"ref": "refs/heads/main", "after": sha, "repository": {"clone_url": gitops.repo.url},
                       "commits": [{"added": [], "modified": [], "removed": [app_file]}]}).encode()
    signature = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    headers = {"X-GitHub-Event": "push", "X-GitHub-Delivery": f"d-{sha[:8]}", "X-Hub-Signature-256": signature,
               "Content-Type": "application/json"}
    sent: list[str] = []

    class Recorder:
        def dispatch(self, refreshes: Any) -> dict[str, str]:
            sent.extend(r.app for r in refreshes)
            return {}

        def schedule(self, app: str, delay: float, reason: str) -> None:
            sent.append(app)

    answer = webhook.handle(headers, body, gitops.runtime(config=source, webhook_secret="s3cret"), Recorder())
    assert answer.body.get("deleting") == [name] and name in sent, answer.body
    step_until_gone(gitops, name, config=source)
    assert gitops.live("ConfigMap", "web") is None
