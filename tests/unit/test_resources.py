"""Explain why, through the api: an app's tree with the Pods under its Deployment (ownerReferences), one
object's live and desired manifests and diff, its Events, a failing Pod's reason and logs; Secret values
never in an answer; objects outside the app or its project refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import yaml

from tests.support.fakecluster import FakeCluster, FakeGit, application, fake_runtime
from tests.unit.test_openapi import TOKEN, Session
from tidecd.base.model import ResourceKey
from tidecd.clients.cluster import ApiResource
from tidecd.clients.store import MemoryStore
from tidecd.config import rbac
from tidecd.config.load import Config
from tidecd.config.model import DEFAULT_PROJECT, ProjectDestination

SECRET_VALUE = "aHVudGVyMg=="  # base64 of hunter2


def deployment(image: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "app", "image": image}]}}}}


SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": "ns"},
          "data": {"password": SECRET_VALUE}}


def crashing_pod(owner_uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-abc-1", "namespace": "ns",
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc",
                                              "uid": owner_uid}]},
            "spec": {"containers": [{"name": "app", "image": "web:1"}]},
            "status": {"phase": "Running", "containerStatuses": [{
                "name": "app", "image": "web:1", "ready": False, "restartCount": 4,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting"}},
                "lastState": {"terminated": {"reason": "Error", "exitCode": 3,
                                             "finishedAt": "2026-12-02T10:00:00Z"}}}]}}


@pytest.fixture()
def session() -> Iterator[Session]:
    cluster, store, git = FakeCluster(), MemoryStore(), FakeGit()
    cluster.kinds[("apps", "ReplicaSet")] = ApiResource("apps", "v1", "ReplicaSet", "replicasets", True)
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    git.push([deployment("web:1"), SECRET])
    app = application("web")
    viewer = rbac.ProjectRole("viewer", policies=("p, proj:default:viewer, applications, get, default/*, allow",))
    tail = rbac.ProjectRole("tail", policies=("p, proj:default:tail, applications, get, default/*, allow",
                                              "p, proj:default:tail, logs, get, default/*, allow"))
    project = replace(DEFAULT_PROJECT, destinations=(ProjectDestination(server="*", name="*", namespace="ns"),),
                      roles=(viewer, tail))
    runtime = fake_runtime(cluster, store, app, git, config=Config(applications={"web": app},
                                                                   projects={"default": project}))
    runtime.settings.api_token = TOKEN
    s = Session(runtime)
    started = s.call("POST", "/api/v1/apps/web/sync", {})
    s.run(started.body["operationId"])
    live = cluster.get(ResourceKey("apps", "Deployment", "ns", "web"))
    assert live is not None
    cluster.add({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                 "metadata": {"name": "web-abc", "namespace": "ns", "ownerReferences": [
                     {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                      "uid": live["metadata"]["uid"]}]}, "spec": {"replicas": 1}})
    rs = cluster.get(ResourceKey("apps", "ReplicaSet", "ns", "web-abc"))
    assert rs is not None
    cluster.add(crashing_pod(rs["metadata"]["uid"]))
    cluster.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stranger", "namespace": "ns"}})
    pod = cluster.get(ResourceKey("", "Pod", "ns", "web-abc-1"))
    assert pod is not None
    cluster.event_items.append({"involvedObject": {"kind": "Pod", "name": "web-abc-1", "uid": pod["metadata"]["uid"]},
                                "type": "Warning", "reason": "BackOff", "count": 7,
                                "message": "Back-off restarting failed container app",
                                "lastTimestamp": "2026-12-02T10:00:05Z", "source": {"component": "kubelet"}})
    cluster.pod_logs[("ns", "web-abc-1", "app")] = (
        "2026-12-02T09:59:58Z starting web\n2026-12-02T09:59:59Z error: cannot open /data/db: permission denied\n")
    s.cluster = cluster  # type: ignore[attr-defined]
    s.git = git  # type: ignore[attr-defined]
    yield s


def query(**fields: str) -> str:
    return "&".join(f"{k}={v}" for k, v in fields.items())


POD = query(group="", kind="Pod", namespace="ns", name="web-abc-1")


def test_the_tree_follows_owner_references_to_the_pods(session: Session) -> None:
    rows = session.call("GET", "/api/v1/apps/web/resources").body["resources"]
    by_name = {(r["kind"], r["name"]): r for r in rows}
    assert by_name[("ReplicaSet", "web-abc")]["parent"] == "apps/Deployment ns/web"
    assert by_name[("Pod", "web-abc-1")]["parent"] == "apps/ReplicaSet ns/web-abc"
    assert by_name[("Pod", "web-abc-1")]["message"] == "CrashLoopBackOff"
    assert ("Pod", "stranger") not in by_name  # not under the app's objects
    assert by_name[("Deployment", "web")]["managed"] and not by_name[("Pod", "web-abc-1")]["managed"]


def test_a_failing_pod_says_why_with_its_events_and_logs(session: Session) -> None:
    body = session.call("GET", f"/api/v1/apps/web/resource?{POD}").body
    assert body["reason"] == "CrashLoopBackOff"
    (container,) = body["containers"]
    assert container["image"] == "web:1" and container["restartCount"] == 4
    assert container["lastTermination"]["reason"] == "Error" and container["lastTermination"]["exitCode"] == 3
    assert [e["reason"] for e in body["events"]] == ["BackOff"]
    assert body["managed"] is False and body["desired"] is None  # a child: no desired manifest
    logs = session.call("GET", f"/api/v1/apps/web/logs?{POD}&tail=1").body["logs"]
    assert [line["text"] for line in logs[0]["lines"]] == ["error: cannot open /data/db: permission denied"]
    following = session.call("GET", f"/api/v1/apps/web/logs?{POD}&sinceTime=2026-12-02T09:59:58Z").body["logs"]
    assert len(following[0]["lines"]) == 1  # only newer lines: what a follower prints next
    # the whole app's pods, and the pods under the Deployment
    assert [entry["pod"] for entry in session.call("GET", "/api/v1/apps/web/logs").body["logs"]] == ["web-abc-1"]
    deployment_logs = session.call("GET", "/api/v1/apps/web/logs?" + query(group="apps", kind="Deployment",
                                                                            namespace="ns", name="web"))
    assert [entry["pod"] for entry in deployment_logs.body["logs"]] == ["web-abc-1"]
    assert session.call("GET", f"/api/v1/apps/web/logs?{POD}&container=nope").status == 404
    assert session.call("GET", f"/api/v1/apps/web/logs?{POD}&tail=0").status == 400


def test_live_desired_and_the_diff_of_an_object_of_the_app(session: Session) -> None:
    session.git.push([deployment("web:2"), SECRET])  # type: ignore[attr-defined]
    assert session.call("POST", "/api/v1/apps/web/refresh").status == 200
    body = session.call("GET", "/api/v1/apps/web/resource?" + query(group="apps", kind="Deployment",
                                                                     namespace="ns", name="web")).body
    assert body["managed"] and body["sync"] == "OutOfSync"
    assert body["live"]["spec"]["template"]["spec"]["containers"][0]["image"] == "web:1"
    assert body["desired"]["spec"]["template"]["spec"]["containers"][0]["image"] == "web:2"
    assert "-      - image: web:1" in body["diff"] and "+      - image: web:2" in body["diff"]
    assert "managedFields" not in body["live"]["metadata"]


def test_no_secret_value_in_any_answer(session: Session) -> None:
    secret = query(group="", kind="Secret", namespace="ns", name="creds")
    answers = [session.call("GET", f"/api/v1/apps/web/resource?{secret}").body,
               session.call("GET", "/api/v1/apps/web/manifests?source=live").body,
               session.call("GET", "/api/v1/apps/web/manifests?source=git").body]
    assert answers[0]["live"]["data"] == {"password": "++++++++"}
    assert answers[0]["desired"]["data"] == {"password": "++++++++"}
    for answer in answers:
        assert SECRET_VALUE not in json.dumps(answer) and "hunter2" not in json.dumps(answer)
    assert {m["kind"] for m in answers[1]["manifests"]} == {"Deployment", "Secret"}


def test_objects_outside_the_app_or_its_project_are_refused(session: Session) -> None:
    stranger = query(group="", kind="Pod", namespace="ns", name="stranger")
    assert session.call("GET", f"/api/v1/apps/web/resource?{stranger}").status == 404
    assert session.call("GET", f"/api/v1/apps/web/logs?{stranger}").status == 404
    elsewhere = query(group="", kind="Secret", namespace="kube-system", name="creds")
    assert session.call("GET", f"/api/v1/apps/web/resource?{elsewhere}").status == 403
    missing = session.call("GET", "/api/v1/apps/web/resource?kind=Pod")
    assert missing.status == 400 and "name" in missing.body["message"]
    assert session.call("GET", f"/api/v1/apps/nope/resource?{POD}").status == 404
    assert session.call("GET", "/api/v1/apps/web/manifests?source=cache").status == 400


def local(*objects: dict[str, Any]) -> dict[str, Any]:
    return {"files": {f"{i}.yaml": yaml.safe_dump(obj) for i, obj in enumerate(objects)}}


def test_a_local_diff_is_the_step_comparison_held_to_the_project(session: Session) -> None:
    same = session.call("POST", "/api/v1/apps/web/diff/local", local(deployment("web:1"), SECRET)).body
    assert same["sync"] == "Synced", same
    changed = session.call("POST", "/api/v1/apps/web/diff/local", local(deployment("web:3"))).body
    assert changed["sync"] == "OutOfSync"
    assert [(c["resource"], c["action"]) for c in changed["changes"] if c["action"] != "unchanged"] == [
        ("apps/Deployment ns/web", "configured"), ("Secret ns/creds", "pruned")]  # the directory has no Secret
    assert SECRET_VALUE not in json.dumps(changed)
    assert "+      - image: web:3" in changed["changes"][0]["diff"]
    outside = dict(deployment("web:3"), metadata={"name": "web", "namespace": "kube-system"})
    refused = session.call("POST", "/api/v1/apps/web/diff/local", local(outside))
    assert refused.status == 400 and "kube-system" in refused.body["message"]  # ProjectViolation, as a sync's
    escaping = session.call("POST", "/api/v1/apps/web/diff/local", {"files": {"../x.yaml": "a: 1"}})
    assert escaping.status == 400 and "../x.yaml" in escaping.body["message"]


def page(session: Session, path: str, **query: str) -> tuple[int, str]:
    from tidecd import ui

    answer = ui.handle(ui.Request("GET", path, {"Authorization": f"Bearer {TOKEN}", "Host": "tidecd.test"}, query),
                       session.runtime)
    return answer.status, answer.body.decode()


def test_the_dashboard_opens_each_node_with_the_same_details(session: Session) -> None:
    status, html = page(session, "/ui/apps/web")
    assert status == 200
    assert 'href="/ui/apps/web/resource?group=&amp;kind=Pod&amp;namespace=ns&amp;name=web-abc-1"' in html
    status, html = page(session, "/ui/apps/web/resource", group="", kind="Pod", namespace="ns", name="web-abc-1")
    assert status == 200 and "CrashLoopBackOff" in html and "exit code 3" in html
    assert "Back-off restarting failed container app" in html
    assert "error: cannot open /data/db: permission denied" in html
    status, html = page(session, "/ui/apps/web/resource/logs", group="", kind="Pod", namespace="ns",
                        name="web-abc-1", follow="1", tail="50")
    assert status == 200 and 'hx-trigger="every 3s"' in html and "starting web" in html
    status, html = page(session, "/ui/apps/web/resource", group="", kind="Secret", namespace="ns", name="creds")
    assert status == 200 and "++++++++" in html and SECRET_VALUE not in html
    assert page(session, "/ui/apps/web/resource", kind="Pod", namespace="ns", name="stranger")[0] == 404
    assert page(session, "/ui/apps/web/resource", kind="Pod", namespace="kube-system", name="x")[0] == 403
    assert page(session, "/ui/apps/web/resource", kind="Pod")[0] == 400


def test_logs_need_argo_cds_logs_get(session: Session) -> None:
    viewer = session.call("POST", "/api/v1/projects/default/roles/viewer/token", {}).body["token"]
    tail = session.call("POST", "/api/v1/projects/default/roles/tail/token", {}).body["token"]
    assert session.call("GET", f"/api/v1/apps/web/resource?{POD}", token=viewer).status == 200
    refused = session.call("GET", f"/api/v1/apps/web/logs?{POD}", token=viewer)
    assert refused.status == 403 and "logs, get, default/web" in refused.body["message"]
    assert session.call("GET", "/api/v1/apps/web/logs", token=viewer).status == 403
    assert session.call("GET", f"/api/v1/apps/web/logs?{POD}", token=tail).status == 200


def test_the_graph_draws_parent_to_child_and_each_node_opens_its_details(session: Session) -> None:
    status, html = page(session, "/ui/apps/web/graph")
    assert status == 200
    for node in ("Application/web", "Deployment/web", "ReplicaSet/web-abc", "Pod/web-abc-1", "Secret/creds"):
        assert f'data-node="{node}"' in html
    assert 'href="/ui/apps/web/resource?group=&amp;kind=Pod&amp;namespace=ns&amp;name=web-abc-1"' in html
    assert html.count('class="edge"') == 4  # app → Deployment, app → Secret, Deployment → RS, RS → Pod
    assert "stranger" not in html and SECRET_VALUE not in html


def test_manifests_at_a_revision(session: Session) -> None:
    first = session.git.head  # type: ignore[attr-defined]
    session.git.push([deployment("web:2"), SECRET])  # type: ignore[attr-defined]

    def image(body: dict[str, Any]) -> str:
        found = [m for m in body["manifests"] if m["kind"] == "Deployment"]
        return str(found[0]["spec"]["template"]["spec"]["containers"][0]["image"])

    at_first = session.call("GET", f"/api/v1/apps/web/manifests?source=git&revision={first}").body
    assert at_first["revision"] == first and image(at_first) == "web:1"
    head = session.git.head  # type: ignore[attr-defined]
    assert image(session.call("GET", f"/api/v1/apps/web/manifests?source=git&revision={head}").body) == "web:2"
    assert image(session.call("GET", "/api/v1/apps/web/manifests?source=live").body) == "web:1"
    refused = session.call("GET", f"/api/v1/apps/web/manifests?source=live&revision={head}")
    assert refused.status == 400 and "revision" in refused.body["message"]
