"""What an ApplicationSet generates, through the api's routes (`usecases.appset_views`): generate by name and
from a manifest, the diff against the record under `applicationsSync`, errors naming the file and field,
and every answer matching the OpenAPI document."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from tests.support.fakecluster import FakeCluster, fake_runtime
from tests.unit.test_openapi import check
from tidecd.base.model import Response
from tidecd.clients.store import MemoryStore
from tidecd.config.appset.expand import Expansion, Generated
from tidecd.config.load import load_config
from tidecd.generated import records as generated
from tidecd.runtime import Runtime
from tidecd.usecases import api
from tidecd.usecases.appset_views import compare_records

TOKEN = "appset-views-token"
REPO = "https://git.example/repo.git"


def appset(elements: list[dict[str, str]], *, project: str = "default", policy: str = "sync") -> dict[str, Any]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "metadata": {"name": "sets"},
            "spec": {"goTemplate": True, "generators": [{"list": {"elements": elements}}],
                     "syncPolicy": {"applicationsSync": policy},
                     "template": {"metadata": {"name": "set-{{ .name }}"},
                                  "spec": {"project": project,
                                           "source": {"repoURL": REPO, "targetRevision": "main",
                                                      "path": "{{ .path }}"},
                                           "destination": {"name": "in-cluster", "namespace": "ns"}}}}}


def app_doc(name: str, path: str) -> dict[str, Any]:
    meta = {"name": name, "finalizers": ["resources-finalizer.argocd.argoproj.io"]}  # as expand adds it
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": meta,
            "spec": {"project": "default", "source": {"repoURL": REPO, "targetRevision": "main", "path": path},
                     "destination": {"name": "in-cluster", "namespace": "ns"}}}


def runtime_with(tmp_path: Path, doc: dict[str, Any], recorded: dict[str, dict[str, Any]]) -> Runtime:
    (tmp_path / "sets.yaml").write_text(yaml.safe_dump(doc))
    store = MemoryStore()
    record = {"owner": "ApplicationSet/sets", "errors": [],
              "apps": {n: {"doc": d, "generator": "spec.generators[0]"} for n, d in recorded.items()}}
    generated.update(store, "ApplicationSet/sets", lambda _: record)
    config = generated.merge(load_config(tmp_path, display="config/", strict=False), {"ApplicationSet/sets": record})
    runtime = fake_runtime(FakeCluster(), store, next(iter(config.applications.values())), config=config)
    runtime.settings.api_token = TOKEN
    return runtime


def call(runtime: Runtime, method: str, path: str, body: Any = None) -> Response:
    answer = api.handle(method, path, {"Authorization": f"Bearer {TOKEN}"}, json.dumps(body or {}).encode(), runtime)
    check(method, path, answer)
    return answer


def test_generate_by_name_lists_the_apps_and_what_would_be_added_changed_and_removed(tmp_path: Path) -> None:
    doc = appset([{"name": "a", "path": "apps/a"}, {"name": "b", "path": "apps/b2"}, {"name": "d", "path": "apps/d"}])
    runtime = runtime_with(tmp_path, doc, {"set-a": app_doc("set-a", "apps/a"), "set-b": app_doc("set-b", "apps/b"),
                                           "set-c": app_doc("set-c", "apps/c")})
    answer = call(runtime, "GET", "/api/v1/applicationsets/sets/generate")
    assert answer.status == 200, answer.body
    body = answer.body
    assert [a["name"] for a in body["applications"]] == ["set-a", "set-b", "set-d"]
    assert body["applications"][1]["path"] == "apps/b2" and "path: apps/b2" in body["applications"][1]["manifest"]
    diff = body["diff"]
    assert (diff["added"], sorted(diff["changed"]), diff["removed"], diff["unchanged"]) == (
        ["set-d"], ["set-b"], ["set-c"], ["set-a"])
    assert "-    path: apps/b" in diff["changed"]["set-b"] and "+    path: apps/b2" in diff["changed"]["set-b"]
    assert body["errors"] == [] and body["origin"] == "config/sets.yaml"
    assert generated.load_records(runtime.store)["ApplicationSet/sets"]["apps"].keys() == {"set-a", "set-b", "set-c"}

    listed = call(runtime, "GET", "/api/v1/applicationsets").body["applicationSets"]
    assert [(s["name"], [a["name"] for a in s["apps"]]) for s in listed] == [("sets", ["set-a", "set-b", "set-c"])]
    assert call(runtime, "GET", "/api/v1/applicationsets/sets").body["apps"][0]["sync"] == "Unknown"
    assert call(runtime, "GET", "/api/v1/applicationsets/nope").status == 404
    assert call(runtime, "GET", "/api/v1/applicationsets/nope/generate").status == 404


def test_generate_from_a_manifest_names_the_file_and_field_and_checks_the_projects(tmp_path: Path) -> None:
    runtime = runtime_with(tmp_path, appset([{"name": "a", "path": "apps/a"}]), {"set-a": app_doc("set-a", "apps/a")})
    edited = appset([{"name": "a", "path": "apps/a"}, {"name": "e", "path": "apps/e"}])
    answer = call(runtime, "POST", "/api/v1/applicationsets/generate",
                  {"manifest": yaml.safe_dump(edited), "file": "work/sets.yaml"})
    assert answer.status == 200, answer.body
    assert answer.body["diff"]["added"] == ["set-e"] and answer.body["diff"]["unchanged"] == ["set-a"]
    assert answer.body["origin"] == "work/sets.yaml"

    bad = copy.deepcopy(edited)
    bad["spec"]["generators"][0]["list"]["elementz"] = []
    refused = call(runtime, "POST", "/api/v1/applicationsets/generate",
                   {"manifest": yaml.safe_dump(bad), "file": "work/sets.yaml"})
    assert refused.status == 400 and "work/sets.yaml" in refused.body["message"], refused.body
    assert "elementz" in refused.body["message"]
    none = call(runtime, "POST", "/api/v1/applicationsets/generate", {"manifest": "a: b\n", "file": "x.yaml"})
    assert none.status == 400 and "x.yaml" in none.body["message"] and "ApplicationSet" in none.body["message"]

    elsewhere = appset([{"name": "a", "path": "apps/a"}], project="nope")
    refused = call(runtime, "POST", "/api/v1/applicationsets/generate", {"manifest": yaml.safe_dump(elsewhere)})
    assert refused.status == 400 and "spec.template.spec.project" in refused.body["message"]
    assert "'nope'" in refused.body["message"] and "applicationset.yaml" in refused.body["message"]
    templated = appset([{"name": "a", "path": "apps/a"}], project="{{ .name }}")
    refused = call(runtime, "POST", "/api/v1/applicationsets/generate", {"manifest": yaml.safe_dump(templated)})
    assert refused.status == 400 and "not templated" in refused.body["message"]
    per_app = appset([{"name": "a", "path": "apps/a"}, {"name": "b", "path": "apps/b"}])
    per_app["spec"]["template"]["spec"]["syncPolicy"] = {"automated": "yes"}
    per_app["spec"]["templatePatch"] = '{{ if eq .name "b" }}spec:\n  project: nope\n{{ end }}'
    answer = call(runtime, "POST", "/api/v1/applicationsets/generate", {"manifest": yaml.safe_dump(per_app)})
    patched, invalid = answer.body["errors"]  # expand's refusal, and the record's validation of the other app
    assert "list element 1" in patched and "spec.templatePatch" in patched and "'nope'" in patched
    assert invalid.startswith("applicationset.yaml: ApplicationSet/sets (spec.generators[0] (list element 0))")
    assert "Application/set-a: spec.syncPolicy.automated:" in invalid, invalid


def test_the_policy_decides_what_a_diff_would_do() -> None:
    from tidecd.config.appset.model import ApplicationSet

    def of(policy: str) -> ApplicationSet:
        return ApplicationSet(name="s", origin="f", generators=(), template={}, applications_sync=policy)

    new = Expansion(apps={"x": Generated("x", app_doc("x", "two"), "g"), "y": Generated("y", app_doc("y", "y"), "g")})
    record = {"apps": {"x": {"doc": app_doc("x", "one")}, "z": {"doc": app_doc("z", "z")},
                       "gone": {"doc": app_doc("gone", "g"), "deleting": True}}}
    sync = compare_records(of("sync"), new, record)
    assert (sync["added"], list(sync["changed"]), sync["removed"], sync["kept"]) == (["y"], ["x"], ["z"], [])
    only = compare_records(of("create-only"), new, record)
    assert (only["added"], only["changed"], only["removed"], only["kept"]) == (["y"], {}, [], ["x", "z"])
    update = compare_records(of("create-update"), new, record)
    assert (list(update["changed"]), update["removed"], update["kept"]) == (["x"], [], ["z"])
    failed = compare_records(of("sync"), Expansion(failed=True), record)
    assert (failed["added"], failed["removed"], failed["kept"]) == ([], [], ["x", "z"])


def test_the_dashboard_and_the_list_show_only_what_the_caller_may_see(tmp_path: Path) -> None:
    from tidecd import ui
    from tidecd.base.principal import Principal
    from tidecd.usecases.appset_views import summaries

    rbac = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argocd-rbac-cm", "namespace": "argocd"},
            "data": {"policy.csv": "p, alice, applicationsets, get, default/sets, allow\n"
                                   "p, alice, applications, get, default/set-a, allow\n"}}
    (tmp_path / "rbac.yaml").write_text(yaml.safe_dump(rbac))
    runtime = runtime_with(tmp_path, appset([{"name": "a", "path": "apps/a"}, {"name": "b", "path": "apps/b"}]),
                           {"set-a": app_doc("set-a", "apps/a"), "set-b": app_doc("set-b", "apps/b")})
    [seen] = summaries(runtime, Principal("alice"))
    assert [a["name"] for a in seen["apps"]] == ["set-a"]
    assert summaries(runtime, Principal("bob")) == []

    page = ui.handle(ui.Request("GET", "/ui/appsets", {"Authorization": f"Bearer {TOKEN}", "Host": "h"}), runtime)
    html = page.body.decode()
    assert page.status == 200, html[:500]
    assert 'data-appset="sets"' in html
    assert 'data-generated-app="set-a"' in html and 'data-generated-app="set-b"' in html
    assert 'href="/ui/appsets"' in html and "config/sets.yaml" in html
    assert ui.handle(ui.Request("GET", "/ui/appsets", {"Host": "h"}), runtime).status in (302, 303)
