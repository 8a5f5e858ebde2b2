"""ApplicationSets in the config source: loading, the refresh recording generated apps, and how those join
the config (origin, applicationsSync, finalizers, bad ApplicationSets set aside alone)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tidecd.clients.store import LocalStore
from tidecd.config.load import load_config
from tidecd.generated import records as generated
from tidecd.runtime import Runtime, Settings
from tidecd.usecases.appsets import refresh

APP = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "written"},
       "spec": {"project": "default", "source": {"repoURL": "https://git.example/a", "path": "a"},
                "destination": {"name": "in-cluster", "namespace": "a"}}}


def list_set(elements: list[str], *, finalizer: str | None = "resources-finalizer.argocd.argoproj.io",
             **spec: Any) -> dict[str, Any]:
    """`finalizer=None`: the template names none, so Argo CD (and tidecd) add the resources finalizer."""
    meta: dict[str, Any] = {"name": "{{name}}"}
    if finalizer:
        meta["finalizers"] = [finalizer]
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "metadata": {"name": "envs"},
            "spec": {"generators": [{"list": {"elements": [{"name": e} for e in elements]}}],
                     "template": {"metadata": meta, "spec": {
                         "project": "default", "source": {"repoURL": "https://git.example/a", "path": "{{name}}"},
                         "destination": {"name": "in-cluster", "namespace": "{{name}}"}}}, **spec}}


def write(config: Path, *docs: dict[str, Any]) -> None:
    config.mkdir(exist_ok=True)
    (config / "all.yaml").write_text(yaml.safe_dump_all(list(docs)))


def runtime(tmp_path: Path) -> Runtime:
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    return Runtime(settings=Settings(config=str(config), store=str(tmp_path / "store")),
                   store=LocalStore(tmp_path / "store"))


def test_an_application_set_no_longer_stops_the_other_apps(tmp_path: Path) -> None:
    write(tmp_path, APP, list_set(["one"]))
    config = load_config(tmp_path, strict=False)
    assert list(config.applications) == ["written"] and list(config.appsets) == ["envs"]
    assert config.problems == [] and config.invalid == {}
    strict = load_config(tmp_path)
    assert list(strict.appsets) == ["envs"]


def test_a_bad_application_set_is_set_aside_alone_naming_file_and_field(tmp_path: Path) -> None:
    bad = list_set(["one"])
    bad["spec"]["generators"][0]["list"]["elemnts"] = []
    write(tmp_path, APP, bad)
    config = load_config(tmp_path, strict=False)
    assert list(config.applications) == ["written"] and config.appsets == {}
    assert "all.yaml: ApplicationSet/envs: spec.generators[0].list.elemnts: unknown field" in \
        config.invalid_appsets["envs"]
    assert any("ApplicationSet/envs set aside" in p and "elemnts" in p for p in config.problems)


def test_refresh_generates_apps_that_join_the_config_with_their_origin(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    write(tmp_path / "config", APP, list_set(["one", "two"]))
    summary = refresh(rt)
    assert summary.changed == ["envs"] and sorted(summary.created) == ["one", "two"]
    config = rt.config()
    assert sorted(config.applications) == ["one", "two", "written"]
    assert config.owners == {"one": "ApplicationSet/envs", "two": "ApplicationSet/envs"}
    assert config.applications["two"].destination.namespace == "two"
    assert "ApplicationSet/envs (spec.generators[0] (list element 1))" in config.applications["two"].origin
    assert rt.app("one").source.path == "one"
    again = refresh(runtime(tmp_path))
    assert again.changed == [] and again.evaluated == []  # nothing it reads changed: not even evaluated


def test_removed_apps_with_the_finalizer_are_deleting_until_forgotten(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    write(tmp_path / "config", list_set(["one", "two"]))
    refresh(rt)
    write(tmp_path / "config", list_set(["one"]))
    summary = refresh(runtime(tmp_path))
    assert summary.deleted == ["two"]
    config = runtime(tmp_path).config()
    assert config.deleting == {"two"}
    two = config.applications["two"]
    assert generated.is_deleting(two) and two.sync_policy.prune and two.sync_policy.allow_empty
    generated.forget(rt.store, "ApplicationSet/envs", "two")
    assert sorted(runtime(tmp_path).config().applications) == ["one"]


def test_without_the_finalizer_or_with_preserve_removed_apps_leave_at_once(tmp_path: Path) -> None:
    for doc in (list_set(["one", "two"], finalizer="example.com/another"),
                list_set(["one", "two"], syncPolicy={"preserveResourcesOnDeletion": True})):
        write(tmp_path / "config", doc)
        refresh(runtime(tmp_path))
        smaller = dict(doc, spec=dict(doc["spec"], generators=[{"list": {"elements": [{"name": "one"}]}}]))
        write(tmp_path / "config", smaller)
        refresh(runtime(tmp_path))
        config = runtime(tmp_path).config()
        assert sorted(config.applications) == ["one"] and config.deleting == set()


def test_create_only_keeps_existing_apps_as_they_were(tmp_path: Path) -> None:
    write(tmp_path / "config", list_set(["one"], syncPolicy={"applicationsSync": "create-only"}))
    refresh(runtime(tmp_path))
    changed = list_set(["two"], syncPolicy={"applicationsSync": "create-only"})
    changed["spec"]["template"]["spec"]["source"]["path"] = "changed-{{name}}"
    write(tmp_path / "config", changed)
    refresh(runtime(tmp_path))
    config = runtime(tmp_path).config()
    assert config.applications["one"].source.path == "one"
    assert config.applications["two"].source.path == "changed-two"


def test_a_generated_app_never_shadows_a_written_one_and_bad_ones_are_set_aside(tmp_path: Path) -> None:
    doc = list_set(["written", "ok"])
    doc["spec"]["generators"][0]["list"]["elements"].append({"name": "bad", "extra": "x"})
    doc["spec"]["template"]["spec"]["project"] = "{{extra}}"
    write(tmp_path / "config", APP, doc)
    refresh(runtime(tmp_path))
    config = runtime(tmp_path).config()
    assert "written" not in config.owners
    assert any("Application/written: metadata.name: an app of that name is already defined" in p
               for p in config.problems)
    assert "project '{{extra}}'" in config.invalid["ok"]  # fasttemplate keeps an unknown tag: no such project
    assert "bad" in config.invalid and "project 'x' is not defined" in config.invalid["bad"]


def test_a_set_aside_application_set_keeps_its_apps_set_aside_not_deleted(tmp_path: Path) -> None:
    write(tmp_path / "config", list_set(["one"]))
    refresh(runtime(tmp_path))
    bad = list_set(["one"])
    bad["spec"]["goTemplate"] = "yes"
    write(tmp_path / "config", bad)
    summary = refresh(runtime(tmp_path))
    assert summary.deleted == []
    config = runtime(tmp_path).config()
    assert "one" not in config.applications and "ApplicationSet/envs is set aside" in config.invalid["one"]
    assert "spec.goTemplate: expected a boolean" in config.invalid_appsets["envs"]


def test_a_removed_application_set_deletes_its_apps(tmp_path: Path) -> None:
    write(tmp_path / "config", APP, list_set(["one"]))
    refresh(runtime(tmp_path))
    write(tmp_path / "config", APP)
    refresh(runtime(tmp_path))
    config = runtime(tmp_path).config()
    assert config.deleting == {"one"} and generated.is_deleting(config.applications["one"])


def test_the_api_shows_owner_and_origin_and_an_app_of_apps_children(tmp_path: Path) -> None:
    import json

    from tidecd.usecases import api

    rt = Runtime(settings=Settings(config=str(tmp_path / "config"), store=str(tmp_path / "store"), api_token="t"),
                 store=LocalStore(tmp_path / "store"))
    write(tmp_path / "config", APP, list_set(["one"]))
    refresh(rt)
    generated.update(rt.store, "Application/written", lambda r: {**r, "apps": {"kid": {"doc": {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "kid"},
        "spec": {"project": "default", "source": {"repoURL": "https://git.example/a", "path": "kid"},
                 "destination": {"name": "in-cluster", "namespace": "kid"}}},
        "generator": "manifests of Application/written"}}})
    headers = {"Authorization": "Bearer t"}

    def get(path: str) -> dict[str, Any]:
        response = api.handle("GET", path, headers, b"", Runtime(settings=rt.settings, store=rt.store))
        assert response.status == 200, response.body
        body: dict[str, Any] = json.loads(response.body) if isinstance(response.body, bytes | str) else response.body
        return body

    listed = {a["name"]: a for a in get("/api/v1/apps")["apps"]}
    assert listed["one"]["owner"] == "ApplicationSet/envs" and "list element 0" in listed["one"]["origin"]
    assert listed["kid"]["owner"] == "Application/written" and listed["written"]["children"] == ["kid"]
    one = get("/api/v1/apps/one")
    assert one["owner"] == "ApplicationSet/envs" and one["app"] == "one"
    assert get("/api/v1/apps/written")["children"] == ["kid"]


def test_generated_apps_get_the_resources_finalizer_so_removal_deletes_their_objects(tmp_path: Path) -> None:
    """Argo CD's RenderTemplateParams adds resources-finalizer.argocd.argoproj.io when the template names no
    finalizer and preserveResourcesOnDeletion is off (its e2e TestSyncPolicyCreateDelete expects it)."""
    def finalizers(name: str) -> object:
        apps = generated.load_records(runtime(tmp_path).store)["ApplicationSet/envs"]["apps"]
        return apps[name]["doc"]["metadata"].get("finalizers")

    write(tmp_path / "config", list_set(["one", "two"], finalizer=None))
    refresh(runtime(tmp_path))
    assert finalizers("one") == ["resources-finalizer.argocd.argoproj.io"]
    write(tmp_path / "config", list_set(["one"], finalizer=None))
    refresh(runtime(tmp_path))
    assert runtime(tmp_path).config().deleting == {"two"}
    write(tmp_path / "config", list_set(["one", "two"], finalizer=None,
                                        syncPolicy={"preserveResourcesOnDeletion": True}))
    refresh(runtime(tmp_path))
    assert finalizers("one") is None and finalizers("two") is None
    write(tmp_path / "config", list_set(["one", "two"], finalizer=None))  # only the policy changes: re-evaluated
    refresh(runtime(tmp_path))
    assert finalizers("one") == ["resources-finalizer.argocd.argoproj.io"]


@pytest.mark.parametrize(("policy", "stays"), [("create-only", True), ("create-update", True),
                                               ("create-delete", False), ("sync", False)])
def test_a_removed_application_set_honours_applications_sync(tmp_path: Path, policy: str, stays: bool) -> None:
    """Argo CD's e2e TestSyncPolicyCreateUpdate: deleting the ApplicationSet under a policy that may not delete
    removes the owner references and the Applications still exist; create-delete and sync delete them."""
    write(tmp_path / "config", APP, list_set(["one"], finalizer=None, syncPolicy={"applicationsSync": policy}))
    refresh(runtime(tmp_path))
    write(tmp_path / "config", APP)
    for _ in range(2):  # the next tick changes nothing more
        refresh(runtime(tmp_path))
        config = runtime(tmp_path).config()
        if stays:
            assert "one" in config.applications and config.deleting == set()
        else:
            assert config.deleting == {"one"}
    if stays:  # the ApplicationSet back: it owns its apps again, and may delete them under its new policy
        write(tmp_path / "config", APP, list_set(["two"], finalizer=None))
        refresh(runtime(tmp_path))
        assert runtime(tmp_path).config().deleting == {"one"}
