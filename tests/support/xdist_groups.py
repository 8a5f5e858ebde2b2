"""How `make test` shares the suite between two pytest-xdist workers (`-n 2 --dist loadgroup`).

Each worker is a test session of its own: its own control plane, git server and emulators, on free ports
under its own temp dir. The suite is handed out in groups, a group to one worker at a time:
- `long_wait`: the tests that mostly wait (an outage of 30 or 60 s, hooks and waves that take minutes;
  marked `long_wait`), first, one after another: one worker waits through them while the other runs the
  rest of the suite, then joins it;
- `argocd`: every test that runs the real Argo CD (it uses `argocd_built`), next, so only one worker
  starts it;
- every other module as a whole, in the collected order, so a module-scoped setup is made once (the unit
  modules come last: many short groups even out the end).

xdist's own `loadgroup` reads the groups from node ids the worker rewrites, which pytest 9.2 no longer
allows (pytest-xdist issue 1386: the tests are silently handed out one by one). So the groups travel on
their own: the controller names a file in `workerinput`, a worker writes {node id: group} there after its
collection, and the controller's scheduler reads it. A plain run (no `-n`) is left as collected.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

LONG_WAIT_GROUP = "long_wait"
ARGOCD_GROUP = "argocd"
GROUPS_KEY = "tidecd_groups_file"  # workerinput: where a worker writes the groups


def group_of(item: pytest.Item) -> str:
    if item.get_closest_marker("long_wait") is not None:
        return LONG_WAIT_GROUP
    if "argocd_built" in getattr(item, "fixturenames", ()):
        return ARGOCD_GROUP
    return module_of(item.nodeid)


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def rank(group: str) -> int:
    return {LONG_WAIT_GROUP: 0, ARGOCD_GROUP: 1}.get(group, 2)


class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no types for it
    """xdist's scope scheduling, a scope being a group above (a module when a worker wrote none)."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        self.groups_file = groups_file(config)
        self.groups: dict[str, str] = {}

    def schedule(self) -> None:
        if not self.groups and self.groups_file.is_file():
            self.groups = json.loads(self.groups_file.read_text())
        super().schedule()

    def _split_scope(self, nodeid: str) -> str:
        return self.groups.get(nodeid) or module_of(nodeid)


def groups_file(config: pytest.Config) -> Path:
    return Path(config._tmp_path_factory.getbasetemp()) / "xdist-groups.json"  # type: ignore[attr-defined]


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> GroupScheduling | None:
    if config.getvalue("dist") != "loadgroup":
        return None
    config.option.loadscopereorder = False  # the order below, not the largest scope first
    return GroupScheduling(config, log)


def pytest_configure_node(node: Any) -> None:
    node.workerinput[GROUPS_KEY] = str(groups_file(node.config))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    target = getattr(config, "workerinput", {}).get(GROUPS_KEY)
    if not target:
        return
    groups = {item.nodeid: group_of(item) for item in items}
    items.sort(key=lambda item: rank(groups[item.nodeid]))  # stable: each rank keeps the collected order
    written = Path(f"{target}.{os.getpid()}")
    written.write_text(json.dumps(groups))
    written.replace(target)  # the workers' collections are the same: either file will do
