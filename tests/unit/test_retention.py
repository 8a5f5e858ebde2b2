"""Retention: the local backend sweeps expired deliveries, snapshots and manifests; history is capped."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tidecd.base.errors import ConfigError
from tidecd.clients import retention
from tidecd.clients.store import LocalStore, MemoryStore
from tidecd.state import app as app_state


def _age(store: LocalStore, key: str, days: float) -> None:
    path = store.root.joinpath(*key.split("/"))
    old = time.time() - days * retention.DAY
    os.utime(path, (old, old))


def test_sweep_deletes_only_what_is_past_its_retention(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    keys = {"deliveries/old": 8, "deliveries/new": 1, "snapshots/r/a.tar.gz": 31, "snapshots/r/a.tar.gz.sha256": 31,
            "snapshots/r/b.tar.gz": 2, "manifests/app/x.json": 40, "state/apps/app.json": 400, "leases/app": 400,
            "config-cache/v1/old.json.gz": 31, "config-cache/v1/new.json.gz": 2}
    for key, days in keys.items():
        store.write(key, b"x")
        _age(store, key, days)
    result = retention.sweep(store)
    assert store.read("config-cache/v1/new.json.gz") is not None
    assert sorted(result.deleted) == ["config-cache/v1/old.json.gz", "deliveries/old", "manifests/app/x.json",
                                      "snapshots/r/a.tar.gz", "snapshots/r/a.tar.gz.sha256"]
    assert store.read("state/apps/app.json") is not None and store.read("leases/app") is not None
    assert store.read("deliveries/new") is not None and store.read("snapshots/r/b.tar.gz") is not None
    assert not result.more


def test_sweep_is_bounded_and_configurable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStore(tmp_path)
    for i in range(5):
        store.write(f"deliveries/d{i}", b"x")
        _age(store, f"deliveries/d{i}", 3)
    assert retention.sweep(store).deleted == []  # 3 days < the default 7
    monkeypatch.setenv("TIDECD_RETAIN_DELIVERIES_DAYS", "2")
    first = retention.sweep(store, max_deletes=3)
    assert len(first.deleted) == 3 and first.more
    assert len(retention.sweep(store).deleted) == 2


def test_stores_with_lifecycle_rules_are_not_swept() -> None:
    store = MemoryStore()
    store.write("deliveries/x", b"x")
    assert retention.sweep(store, now=time.time() + 1e9).deleted == []


def test_history_keeps_the_configured_number_of_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    state = app_state.AppState(app="a")
    for i in range(15):
        state.add_history(f"{i:040d}", "Succeeded", ".", "main")
    assert len(state.history) == 10
    monkeypatch.setenv("TIDECD_HISTORY_LIMIT", "3")
    state.add_history("f" * 40, "Succeeded", ".", "main")
    assert [h.revision for h in state.history][-1] == "f" * 40 and len(state.history) == 3


def test_bad_retention_setting_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDECD_RETAIN_SNAPSHOTS_DAYS", "-1")
    with pytest.raises(ConfigError, match=r"TIDECD_RETAIN_SNAPSHOTS_DAYS='-1': expected a positive whole number"):
        retention.Retention.from_env()


def test_readme_lists_every_retention_variable() -> None:
    readme = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()  # the limits tables
    for variable in retention._ENV.values():
        assert variable in readme, variable
