"""Image updater (issue 13): one tick over 200 apps that share 20 image repositories.

The real registry (distribution) holds the images, pushed with crane; every registry request of the tick
goes through a counting proxy, so the tags-list count in the table is what the registry was asked, not
what tidecd thinks it asked. Each app runs `…/svc-NN:1.0.0` (its rendered manifests are in the store, as
a reconcile leaves them) and 1.0.1 is there: the tick finds every app's update (argocd write-back, the
refreshes counted but not run), and the second tick finds nothing to do. The peer is the add-on's shape
of the work without a per-repository cache: one tags list per app image (200).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from bench.fixtures import Installation, application, write_app
from bench.harness import Bench, Row, median, say, spread, timed

GROUP = "images"
APPS, REPOS = 200, 20
TAGS = ("1.0.0", "1.0.1")


class _Counting:
    def __init__(self) -> None:
        self.refreshes = 0

    def dispatch(self, refreshes: Sequence[Any]) -> dict[str, str]:
        self.refreshes += len(refreshes)
        return {}

    def schedule(self, app: str, delay: float, reason: str) -> None:
        """Continuations are not run in this benchmark (no refresh is)."""


def run(bench: Bench) -> list[Row]:
    from tidecd import render
    from tidecd.clients.registry import HttpRegistry, parse_image
    from tidecd.images.annotations import IMAGE_LIST
    from tidecd.state import app as app_state
    from tidecd.usecases import images as update
    from tidecd_dev.imageregistry import CountingProxy, Registry, crane, push_image
    from tidecd_dev.tools import ensure

    ensure(["registry", "crane"])
    registry = Registry(bench.dir("images/registry")).start()
    proxy = CountingProxy(registry.host).start()
    try:
        say(f"images: pushing {REPOS} repositories × {len(TAGS)} tags with crane")
        for r in range(REPOS):
            ref = f"{registry.host}/bench/svc-{r:02d}"
            push_image(f"{ref}:{TAGS[0]}")
            for tag in TAGS[1:]:
                crane("tag", f"{ref}:{TAGS[0]}", tag)
        inst = Installation(bench.dir("images/install"))
        sha = "b" * 40
        for i in range(APPS):
            name, image = f"img-app-{i:03d}", f"{proxy.host}/bench/svc-{i % REPOS:02d}"
            doc = application(name, "https://git.example.invalid/apps.git", f"apps/{name}", "bench-images")
            doc["spec"]["source"]["kustomize"] = {}
            doc["metadata"]["annotations"] = {IMAGE_LIST: f"svc={image}:~1.0"}
            write_app(inst.config_dir, doc)
        runtime = inst.runtime()
        for name, app in runtime.config().applications.items():
            image = dict(app.annotations)[IMAGE_LIST].split("=", 1)[1].rsplit(":", 1)[0]
            app_state.save(inst.store, app_state.AppState(app=name, revision=sha))
            deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                          "spec": {"template": {"spec": {"containers": [{"name": "c", "image": f"{image}:1.0.0"}]}}}}
            key = render.manifest_key(name, sha, app.source, app.destination.namespace)
            inst.store.write(key, json.dumps({"format": render.CACHE_FORMAT, "manifests": [deployment]}).encode())

        proxy.reset()
        sent = _Counting()
        start = time.perf_counter()
        first = update.check(inst.runtime(), registry=HttpRegistry(), dispatcher=sent)
        first_time = time.perf_counter() - start
        first_calls = proxy.counts["tags"]
        updated = sum(1 for r in first.apps if r.status == "updated")
        if updated != APPS or first_calls != REPOS:
            raise RuntimeError(f"first tick: {updated} apps updated, {first_calls} tags lists "
                               f"({[r for r in first.apps if r.status != 'updated'][:2]})")
        say(f"images: first tick {first_time:.2f}s, {first_calls} tags lists, {updated} apps updated")

        times, calls = [], []
        for _ in range(3):
            proxy.reset()
            start = time.perf_counter()
            summary = update.check(inst.runtime(), registry=HttpRegistry(), dispatcher=_Counting())
            times.append(time.perf_counter() - start)
            calls.append(proxy.counts["tags"])
            if any(r.status != "unchanged" for r in summary.apps):
                raise RuntimeError(f"a tick with nothing new changed something: {summary.apps[:2]}")

        say(f"images: per-app tags lists peer ({APPS} calls)")
        proxy.reset()
        images = [parse_image(f"{proxy.host}/bench/svc-{i % REPOS:02d}") for i in range(APPS)]
        peer_client = HttpRegistry()
        peer = timed(lambda: [peer_client.tags(repo, None) for repo in images])
        peer_calls = proxy.counts["tags"]
        return [
            Row(GROUP, f"image tick, {APPS} apps / {REPOS} repos, every app updated", first_time, None, "",
                f"tags-list calls at the registry (counting proxy): {first_calls}; {updated} apps updated "
                f"(argocd write-back), {sent.refreshes} refreshes handed over"),
            Row(GROUP, f"image tick, {APPS} apps / {REPOS} repos, nothing new", median(times), peer,
                "1 tags list per app",
                f"tags-list calls per tick at the registry: {calls} (peer: {peer_calls}); {spread(times)}"),
        ]
    finally:
        proxy.stop()
        registry.stop()
