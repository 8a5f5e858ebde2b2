"""OCI registry fixtures: the real `registry` binary (distribution), images pushed with the real `crane`.

`image_registry` is open, `image_registry_basic` requires htpasswd basic auth and `image_registry_bearer` the
token flow through a small token server (see `tidecd_dev.imageregistry`); one of each per session, started on
first use. Both binaries are built with scripts/tools.sh when missing, never skipped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.cluster import ensure_tools
from tidecd_dev.imageregistry import Registry

TOOLS = ["registry", "crane"]


def _start(tmp_path_factory: pytest.TempPathFactory, auth: str) -> Iterator[Registry]:
    ensure_tools(TOOLS)
    registry = Registry(tmp_path_factory.mktemp(f"registry-{auth or 'open'}"), auth=auth).start()
    try:
        yield registry
    finally:
        registry.stop()


@pytest.fixture(scope="session")
def image_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    yield from _start(tmp_path_factory, "")


@pytest.fixture(scope="session")
def image_registry_basic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    yield from _start(tmp_path_factory, "basic")


@pytest.fixture(scope="session")
def image_registry_bearer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    yield from _start(tmp_path_factory, "bearer")
