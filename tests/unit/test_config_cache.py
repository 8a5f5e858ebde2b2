"""The loaded config cached in the store by the config source's commit (`tidecd.config.cache`, issue 30):
a cold start that reads it behaves exactly as one that loads every file, and a bad object only costs the
full load again.

Everything goes through `Runtime.config()` over a real git server and a real `LocalStore`, as the
functions load; a second `Runtime` on the same store is a cold instance.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import structlog
from structlog.testing import capture_logs

from tests.support.gitserver import GitRepo
from tidecd import runtime
from tidecd.clients.store import LocalStore
from tidecd.config import cache
from tidecd.config.load import Config
from tidecd.runtime import Runtime, Settings
from tidecd_dev.gitserver import GitServer

APPS = 220


def app(name: str, project: str, extra: str = "") -> str:
    return (f"apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: {name}\n"
            f"  labels: {{team: t{len(name) % 3}}}\n  annotations: {{note: '{name}'}}\nspec:\n"
            f"  project: {project}\n"
            f"  source:\n    repoURL: https://git.example.com/{name}.git\n    path: deploy\n"
            f"    helm: {{releaseName: {name}, valueFiles: [a.yaml], parameters: [{{name: x, value: '1'}}]}}\n"
            "  destination: {server: 'https://kubernetes.default.svc', namespace: " + name + "}\n"
            "  syncPolicy: {automated: {prune: true}, syncOptions: [CreateNamespace=true],"
            " retry: {limit: 3, backoff: {duration: 10s}}}\n"
            "  ignoreDifferences: [{group: apps, kind: Deployment, jsonPointers: [/spec/replicas]}]\n" + extra)


PROJECT = """apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata:
  name: {name}
spec:
  sourceRepos: ['*']
  destinations: [{{server: '*', namespace: '*'}}]
  clusterResourceWhitelist: [{{group: '', kind: Namespace}}]
  sourceNamespaces: [payments]
  syncWindows: [{{kind: deny, schedule: '0 22 * * *', duration: 1h, applications: ['*']}}]
  orphanedResources: {{warn: true}}
  roles: [{{name: ci, policies: ['p, proj:{name}:ci, applications, sync, {name}/*, allow']}}]
"""

SETTINGS = """apiVersion: v1
kind: ConfigMap
metadata: {name: argocd-cm}
data:
  resource.customizations.health.apps_Deployment: "return {status = 'Healthy'}"
  resource.customizations.ignoreDifferences.all: |
    jsonPointers: [/metadata/labels/x]
  resource.exclusions: |
    - apiGroups: [cilium.io]
      kinds: ['*']
  timeout.reconciliation: 90s
"""

APPSETS = """apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: envs}
spec:
  generators: [{list: {elements: [{env: dev}, {env: prod}]}}]
  template:
    metadata: {name: 'envs-{{env}}'}
    spec:
      project: default
      source: {repoURL: 'https://git.example.com/envs.git', path: '{{env}}'}
      destination: {server: 'https://kubernetes.default.svc', namespace: '{{env}}'}
---
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: broken}
spec:
  generators: [{list: {elemnts: []}}]
  template: {metadata: {name: x}, spec: {}}
"""

SECRET = """apiVersion: v1
kind: Secret
metadata:
  name: repo-a
  labels: {argocd.argoproj.io/secret-type: repository}
stringData: {url: 'https://git.example.com/a.git', username: u, password: p}
"""


def fill(main: GitRepo, team: GitRepo) -> None:
    for number in range(APPS):
        main.write(f"apps/app-{number:04}.yaml", app(f"app-{number:04}", f"proj-{number % 3}"))
    for number in range(3):
        main.write(f"projects/proj-{number}.yaml", PROJECT.format(name=f"proj-{number}"))
    main.write("settings/argocd-cm.yaml", SETTINGS)
    main.write("appsets.yaml", APPSETS)
    main.write("secrets/repo.yaml", SECRET)
    main.write("bad/no-destination.yaml", app("bad-app", "proj-0").replace("  destination:", "  destinaton:"))
    main.write("bad/unknown.yaml", "apiVersion: v9\nkind: Gizmo\nmetadata: {name: g}\n")
    main.write("bad/broken.yaml", "kind: Application\nmetadata: [unclosed\n")
    main.write("teams.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: tidecd-config-sources}\n"
                             f"data:\n  payments: '{team.url}#main:'\n")
    main.commit("config")
    main.push()
    for number in range(5):
        team.write(f"pay-{number}.yaml", app(f"pay-{number}", "proj-1"))
    team.commit("team")
    team.push()


def filled(git_server: GitServer, tmp_path: Path, name: str) -> GitRepo:
    """A main config source (and its team's) on the git server, filled and pushed; its store is tmp_path/store."""
    main = GitRepo(git_server, f"{name}-main", tmp_path / "main")
    fill(main, GitRepo(git_server, f"{name}-team", tmp_path / "team"))
    return main


def cold(main: GitRepo, store: Path) -> Runtime:
    """A new instance: nothing in memory, the store shared with every earlier one."""
    runtime.forget_config_directories()
    return Runtime(settings=Settings(config=f"{main.url}#main:", store=str(store)), store=LocalStore(store))


def cached_keys(store: Path) -> list[str]:
    return sorted(LocalStore(store).list(cache.PREFIX))


def test_a_cold_start_from_the_cache_equals_the_full_load(git_server: GitServer, tmp_path: Path) -> None:
    main = filled(git_server, tmp_path, "config-cache")
    store = tmp_path / "store"

    loaded = cold(main, store).config()
    assert len(loaded.applications) == APPS + 5  # the team's apps joined
    assert loaded.invalid and loaded.invalid_appsets and loaded.problems and loaded.secrets
    keys = cached_keys(store)
    assert len(keys) == 2  # the main source and the team's, each by its own commit
    commits = {k.rsplit("/", 1)[1].split("-")[0] for k in keys}
    assert main.head() in commits and len(commits) == 2

    from_cache = cold(main, store).config()
    assert from_cache == loaded  # every app, project, setting, appset, Secret, owner and team
    assert from_cache.problems == loaded.problems and from_cache.invalid == loaded.invalid
    assert from_cache.argo_settings.health_script("apps", "Deployment") == "return {status = 'Healthy'}"

    # the cache is what was read: a marked object shows its mark (and a changed commit would not read it)
    key = next(k for k in keys if main.head() in k)
    blob = LocalStore(store).read(key)
    assert blob is not None
    data = json.loads(gzip.decompress(blob.data))
    data["config"]["problems"].append("marked in the cache")
    LocalStore(store).write(key, gzip.compress(json.dumps(data).encode()))
    assert "marked in the cache" in cold(main, store).config().problems


def test_a_warm_instance_keeps_the_config_of_a_commit_in_memory(git_server: GitServer, tmp_path: Path) -> None:
    main = filled(git_server, tmp_path, "config-cache-warm")
    store = tmp_path / "store"
    loaded = cold(main, store).config()
    for key in cached_keys(store):
        LocalStore(store).delete(key)
    warm = Runtime(settings=Settings(config=f"{main.url}#main:", store=str(store)), store=LocalStore(store))
    assert warm.config() == loaded
    assert cached_keys(store) == []  # neither read nor loaded again: held by the process


def test_a_new_commit_is_loaded_in_full(git_server: GitServer, tmp_path: Path) -> None:
    main = filled(git_server, tmp_path, "config-cache-commit")
    store = tmp_path / "store"
    cold(main, store).config()
    main.write("apps/app-0000.yaml", app("app-0000", "proj-2"))
    main.commit("move app-0000")
    main.push()
    assert cold(main, store).config().applications["app-0000"].project == "proj-2"
    assert len(cached_keys(store)) == 3


def test_a_bad_cache_object_falls_back_to_the_full_load(git_server: GitServer, tmp_path: Path) -> None:
    main = filled(git_server, tmp_path, "config-cache-bad")
    store = tmp_path / "store"
    loaded = cold(main, store).config()
    key = next(k for k in cached_keys(store) if main.head() in k)
    whole = LocalStore(store).read(key)
    assert whole is not None
    other_format = gzip.compress(json.dumps({"format": cache.FORMAT + 1, "config": {}}).encode())
    wrong_shape = gzip.compress(json.dumps({"format": cache.FORMAT, "config": {"applications": []}}).encode())
    bomb = gzip.compress(b" " * (cache.MAX_BYTES + 1))
    for bad in (whole.data[: len(whole.data) // 2], b"not gzip", other_format, wrong_shape, bomb):
        LocalStore(store).write(key, bad)
        structlog.reset_defaults()
        with capture_logs() as logged:
            again = cold(main, store).config()
        assert again == loaded
        assert any(e["event"].startswith("config cache unreadable") and e["key"] == key for e in logged)
        rewritten = LocalStore(store).read(key)
        assert rewritten is not None and cache.decode(rewritten.data).problems  # written again, whole


def test_a_value_that_does_not_round_trip_is_not_cached() -> None:
    """A YAML timestamp in a Secret would come back a string: such a config is loaded in full each time."""
    import datetime

    when = datetime.date(2026, 1, 1)
    config = Config(secrets=[{"kind": "Secret", "metadata": {"name": "s"}, "data": {"when": when}}])
    assert cache.encode(config) is None
    plain = Config(secrets=[{"kind": "Secret", "metadata": {"name": "s"}, "stringData": {"a": "b"}}])
    blob = cache.encode(plain)
    assert blob is not None and cache.decode(blob) == plain


def test_a_step_of_the_polls_fan_out_loads_the_config_at_the_polls_commits(git_server: GitServer,
                                                                           tmp_path: Path) -> None:
    """The poll hands each step the config sources' commits it resolved (`Refresh.config`): the step loads
    the config at them with no ls-remote of its own, and one without them resolves as before."""
    main = filled(git_server, tmp_path, "config-cache-heads")
    store = tmp_path / "store"
    polled = cold(main, store)
    loaded = polled.config()
    assert len(polled.config_heads) == 2 and main.head() in polled.config_heads.values()  # the main source, the team's
    main.write("apps/app-0000.yaml", app("app-0000", "proj-2"))
    main.commit("move app-0000")
    main.push()
    git_server.reset_counts()

    step = cold(main, store)
    step.config_heads.update(polled.config_heads)
    assert step.config().applications["app-0000"].project == loaded.applications["app-0000"].project
    assert git_server.counts("config-cache-heads-main") == {} and git_server.counts("config-cache-heads-team") == {}

    assert cold(main, store).config().applications["app-0000"].project == "proj-2"  # no heads: resolved
    assert git_server.counts("config-cache-heads-main")
