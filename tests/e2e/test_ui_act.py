"""Acting safely from the dashboard, in Debian's chromium against the real api function and control plane:
a dry run lists what it would do per resource, a rollback asks first and says what it turns off, and a
resource action restarts a Deployment (the controller-manager rolls a new ReplicaSet)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from tests.e2e.test_ui import dashboard, log_in, wait_for
from tests.support.apps import GitOps, configmap, deployment, job
from tests.support.browser import screenshot_dir
from tests.support.functions import Functions


def finished(functions: Functions, app: str, operation_id: str) -> dict[str, Any] | None:
    body = functions.api("GET", f"/apps/{app}").json()
    op = body.get("operation") or {}
    return op if op.get("id") == operation_id and op.get("phase") not in ("Running", "Terminating") else None


def test_a_dry_run_lists_what_it_would_do_per_resource(browser: Any, gitops: GitOps, functions: Functions,
                                                       tmp_path: Path) -> None:
    gitops.push({"app/a.yaml": configmap("a"), "app/gone.yaml": configmap("gone")})
    app = gitops.application()
    gitops.sync()
    gitops.push({"app/a.yaml": configmap("a", {"k": "changed"}), "app/b.yaml": configmap("b"), "app/gone.yaml": None,
                 "app/migrate.yaml": job("migrate", annotations={"argocd.argoproj.io/hook": "PreSync"})})
    base = dashboard(functions)
    page = log_in(browser, base, functions.token)
    page.goto(f"{base}apps/{app}")
    page.click("button[name=sync]")
    page.check("input[name=dry_run]")
    page.click("button[name=synchronize]")
    page.wait_for_selector("[data-notice]")
    op_id = str(functions.api("GET", f"/apps/{app}").json()["operation"]["id"])
    op = wait_for(lambda: finished(functions, app, op_id), 120, "the dry run")
    assert op["phase"] == "Succeeded", op
    # the api: one result per object, saying what it would do
    would = {r["key"]["name"]: r["action"] for r in op["results"]}
    assert would == {"a": "configured", "b": "created", "gone": "prune-skipped", "migrate": "created"}, op["results"]
    assert [(r["key"]["name"], r["syncPhase"]) for r in op["results"] if r["hook"]] == [("migrate", "PreSync")]
    assert gitops.live("ConfigMap", "b") is None and gitops.live("Job", "migrate", group="batch") is None  # nothing
    # the page: the same, per resource
    page.goto(f"{base}apps/{app}")
    rows = page.locator("#live [data-task]")
    shown = {rows.nth(i).get_attribute("data-task"): (rows.nth(i).locator("[data-would]").text_content() or "").strip()
             for i in range(rows.count())}
    ns = gitops.namespace
    assert shown == {f"ConfigMap {ns}/a": "would configure", f"ConfigMap {ns}/b": "would create",
                     f"ConfigMap {ns}/gone": "would not prune (pruning off)",
                     f"batch/Job {ns}/migrate": "would create"}, shown  # the hook it would run, too
    page.locator("#live details").evaluate("d => d.open = true")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280  # the results fit the page
    page.screenshot(path=str(screenshot_dir(tmp_path) / "dry-run.png"), full_page=True)
    page.context.close()
    # the CLI against the api: a line per object, saying what it would do
    env = {**os.environ, "TIDECD_SERVER": functions.start("api").url, "TIDECD_API_TOKEN": functions.token}
    cli = subprocess.run([sys.executable, "-m", "tidecd.cli", "app", "sync", app, "--dry-run"], env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert cli.returncode == 0, cli.stderr
    assert f"ConfigMap {ns}/a would configure" in cli.stdout and f"ConfigMap {ns}/b would create" in cli.stdout
    assert gitops.live("ConfigMap", "b") is None


def test_the_sync_panel_syncs_chosen_resources_and_a_rollback_asks_first(browser: Any, gitops: GitOps,
                                                                        functions: Functions, tmp_path: Path) -> None:
    gitops.push({"app/a.yaml": configmap("a", {"v": "1"}), "app/b.yaml": configmap("b", {"v": "1"})})
    app = gitops.application()
    gitops.sync()
    second = gitops.push({"app/a.yaml": configmap("a", {"v": "2"}), "app/b.yaml": configmap("b", {"v": "2"})})
    gitops.push({"app/a.yaml": configmap("a", {"v": "3"})})  # git's target moves on: the panel picks `second`
    base = dashboard(functions)
    page = log_in(browser, base, functions.token)
    page.goto(f"{base}apps/{app}")
    page.click("button[name=refresh]")
    page.click("button[name=sync]")
    ns = gitops.namespace
    page.check(f"[data-resource='ConfigMap {ns}/a']")  # only a
    page.check("input[name=apply_out_of_sync_only]")
    page.fill("[data-revision-input]", second)
    page.screenshot(path=str(screenshot_dir(tmp_path) / "sync-panel.png"), full_page=True)
    page.click("button[name=synchronize]")
    page.wait_for_selector("[data-notice]")
    wait_for(lambda: (gitops.live("ConfigMap", "a") or {}).get("data") == {"v": "2"}, 120, "a synced")
    assert (gitops.live("ConfigMap", "b") or {}).get("data") == {"v": "1"}  # not chosen: untouched
    chosen = gitops.state(app).operation
    assert chosen is not None and chosen.request.sync_options == ["ApplyOutOfSyncOnly=true"], chosen
    assert chosen.revision == second  # the chosen revision, not git's newer target (a is v2, not v3)

    # a rollback asks first, naming the revision and saying automated sync turns off; Cancel changes nothing
    first = gitops.state(app).history[0]
    page.goto(f"{base}apps/{app}")
    page.locator(f"tr[data-history='{first.id}'] button[name=rollback]").click()
    said = page.locator("[data-consequences]").inner_text()
    assert "Automated sync is turned off" in said and first.revision[:7] in said, said
    page.screenshot(path=str(screenshot_dir(tmp_path) / "rollback-confirm.png"), full_page=True)
    before = len(gitops.state(app).history)
    page.click("text=Cancel")
    assert len(gitops.state(app).history) == before and not gitops.state(app).automation.disabled
    page.locator(f"tr[data-history='{first.id}'] button[name=rollback]").click()
    page.click("button[name=confirm-rollback]")
    page.wait_for_selector("[data-notice]")
    wait_for(lambda: (gitops.live("ConfigMap", "a") or {}).get("data") == {"v": "1"}, 120, "the rollback")
    wait_for(lambda: gitops.state(app).automation.disabled, 60, "automated sync off")
    # history: who, what triggered each, which were rollbacks; "current" is what is deployed, one row only
    done = wait_for(lambda: [h for h in gitops.state(app).history if h.rollback], 60, "the rollback's entry")[-1]
    assert done.trigger == "rollback" and done.initiated_by and done.revision == first.revision
    page.goto(f"{base}apps/{app}")
    assert page.locator("[data-history] [data-current]").count() == 1
    assert page.locator(f"tr[data-history='{done.id}'] [data-current]").count() == 1
    assert page.locator(f"tr[data-history='{done.id}'] [data-rollback]").count() == 1
    assert page.locator("[data-deployed]").get_attribute("data-deployed") == first.revision
    history = functions.api("GET", f"/apps/{app}/history").json()["history"]
    assert [h["trigger"] for h in history] == ["manual sync", "manual sync", "rollback"], history
    page.context.close()


def test_the_restart_action_restarts_a_deployment(browser: Any, gitops: GitOps, functions: Functions,
                                                  tmp_path: Path, argocd_catalogue: Path) -> None:
    # argocd_catalogue: Argo CD's Lua actions, unmodified, which the functions find by default
    gitops.push({"app/web.yaml": deployment("web")})
    app = gitops.application()
    gitops.sync()
    ns = gitops.namespace
    kube = gitops.kube

    def replica_sets() -> set[str]:
        return {str(rs["metadata"]["name"]) for rs in kube.list("apps", "ReplicaSet", namespace=ns)}

    first = wait_for(replica_sets, 60, "the first ReplicaSet")
    query = {"group": "apps", "kind": "Deployment", "namespace": ns, "name": "web"}
    listed = functions.api("GET", f"/apps/{app}/resource/actions?{urlencode(query)}")
    assert listed.status_code == 200, listed.text
    names = [a["name"] for a in listed.json()["actions"]]
    assert names[:3] == ["restart", "scale", "delete"] and "pause" in names, names
    base = dashboard(functions)
    page = log_in(browser, base, functions.token)
    page.goto(f"{base}apps/{app}/resource?{urlencode(query)}")
    page.click("[data-actions-link]")
    page.click("button[name=action-restart]")
    said = page.locator("[data-consequences]").inner_text()
    assert "restartedAt" in said and "ReplicaSet" in said, said  # asks first, saying what it does
    assert not ((gitops.live("Deployment", "web", group="apps") or {})["spec"]["template"]["metadata"]
                .get("annotations"))
    page.click("button[name=confirm-action]")
    page.wait_for_selector("[data-notice]")
    live = gitops.live("Deployment", "web", group="apps") or {}
    stamp = live["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"]
    assert stamp.endswith("Z") and stamp in page.locator("[data-notice]").inner_text()
    later = wait_for(lambda: replica_sets() - first, 60, "a new ReplicaSet (the controller-manager's rollout)")
    assert len(later) == 1
    page.screenshot(path=str(screenshot_dir(tmp_path) / "resource-action.png"), full_page=True)
    page.context.close()
    # the CLI lists the same actions, and scale runs through the same route
    env = {**os.environ, "TIDECD_SERVER": functions.start("api").url, "TIDECD_API_TOKEN": functions.token}
    cli = subprocess.run([sys.executable, "-m", "tidecd.cli", "app", "actions", "run", app, "scale", "--kind",
                          "Deployment", "--name", "web", "--param", "replicas=2"], env=env, capture_output=True,
                         text=True, timeout=300, check=False)
    assert cli.returncode == 0 and "scaled to 2 replicas" in cli.stdout, cli.stdout + cli.stderr
    assert (gitops.live("Deployment", "web", group="apps") or {})["spec"]["replicas"] == 2
    # Argo CD's own apps/Deployment/actions/pause/action.lua, run unmodified: the Deployment is paused
    paused = functions.api("POST", f"/apps/{app}/resource/actions/pause?{urlencode(query)}")
    assert paused.status_code == 200 and "pause (Lua): patched" in paused.json()["message"], paused.text
    assert (gitops.live("Deployment", "web", group="apps") or {})["spec"].get("paused") is True
    refused = functions.api("POST", f"/apps/{app}/resource/actions/explode?{urlencode(query)}")
    assert refused.status_code == 400 and "no action 'explode'" in refused.text
