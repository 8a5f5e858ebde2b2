"""The object store contract against the real fake-gcs-server, plus what only GCS can show.

The contract clauses are the unit module's `CONTRACTS`, so all backends are held to the same rules.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import requests
from google.api_core import exceptions as api

from tests.support.gcs import PREFIX, FakeGcs
from tests.unit.test_store import BAD_KEYS, CONTRACTS
from tidecd.clients.store import GcsStore, InvalidKey, ObjectStore, PreconditionFailed, StoreUnavailable, open_store

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("contract", CONTRACTS, ids=lambda f: f.__name__.removeprefix("check_"))
def test_gcs_contract(gcs_store: GcsStore, contract: Callable[[ObjectStore], None]) -> None:
    contract(gcs_store)


def _objects(fake_gcs: FakeGcs, bucket: str) -> dict[str, int]:
    resp = requests.get(f"{fake_gcs.url}/storage/v1/b/{bucket}/o", timeout=10)
    assert resp.status_code == 200
    return {item["name"]: int(item["generation"]) for item in resp.json().get("items", [])}


def _multipart_upload(fake_gcs: FakeGcs, bucket: str, name: str, data: bytes, generation: int) -> int:
    """A raw conditional upload as the client sends it (multipart); returns the HTTP status."""
    body = (
        b"--b\r\nContent-Type: application/json\r\n\r\n"
        + json.dumps({"name": name}).encode()
        + b"\r\n--b\r\nContent-Type: application/octet-stream\r\n\r\n"
        + data
        + b"\r\n--b--\r\n"
    )
    resp = requests.post(
        f"{fake_gcs.url}/upload/storage/v1/b/{bucket}/o",
        params={"uploadType": "multipart", "ifGenerationMatch": str(generation)},
        headers={"Content-Type": "multipart/related; boundary=b"},
        data=body,
        timeout=10,
    )
    return resp.status_code


def test_stale_generation_upload_is_http_412(gcs_store: GcsStore, fake_gcs: FakeGcs) -> None:
    g1 = gcs_store.write("state/apps/a.json", b"1")
    g2 = gcs_store.write("state/apps/a.json", b"2", if_generation_match=g1)
    name = f"{PREFIX}/state/apps/a.json"
    assert _objects(fake_gcs, gcs_store.bucket) == {name: g2}  # generations are the server's own
    # (fake-gcs-server v1.55.1 ignores the precondition on simple `uploadType=media` uploads,
    # fsouza/fake-gcs-server#2308; the client sends multipart, which it honours.)
    assert _multipart_upload(fake_gcs, gcs_store.bucket, name, b"stale", g1) == 412
    with pytest.raises(PreconditionFailed, match=f"gs://{gcs_store.bucket}/{name}") as caught:
        gcs_store.write("state/apps/a.json", b"stale", if_generation_match=g1)
    assert isinstance(caught.value.__cause__, api.PreconditionFailed) and caught.value.__cause__.code == 412
    blob = gcs_store.read("state/apps/a.json")
    assert blob is not None and (blob.data, blob.generation) == (b"2", g2)
    assert _multipart_upload(fake_gcs, gcs_store.bucket, name, b"fresh", g2) == 200  # the request itself is fine
    assert gcs_store.read("state/apps/a.json").data == b"fresh"  # type: ignore[union-attr]


def test_objects_live_under_the_prefix(gcs_store: GcsStore, fake_gcs: FakeGcs) -> None:
    other = GcsStore(gcs_store.bucket, "elsewhere")
    mine = gcs_store.write("leases/app", b"x")
    theirs = other.write("leases/app", b"y")
    assert sorted(_objects(fake_gcs, gcs_store.bucket)) == sorted([f"{PREFIX}/leases/app", "elsewhere/leases/app"])
    assert gcs_store.list("") == ["leases/app"]
    assert other.list("leases/") == ["leases/app"]
    # a live page's poll: names and generations from one listing, no body read
    assert gcs_store.generations("leases/") == {"leases/app": mine} and other.generations("") == {"leases/app": theirs}


def test_large_object_roundtrip(gcs_store: GcsStore) -> None:
    data = bytes(range(256)) * (9 * 4096)  # 9 MiB: above the client's multipart limit, so a resumable upload
    gen = gcs_store.write("snapshots/repo/abc.tar.gz", data)
    blob = gcs_store.read("snapshots/repo/abc.tar.gz")
    assert blob is not None and blob.generation == gen and blob.data == data
    with pytest.raises(PreconditionFailed):  # the resumable path honours preconditions too
        gcs_store.write("snapshots/repo/abc.tar.gz", data, if_generation_match=0)


@pytest.mark.parametrize("key", BAD_KEYS)
def test_gcs_refuses_the_same_keys_as_local(gcs_store: GcsStore, key: str) -> None:
    with pytest.raises(InvalidKey):
        gcs_store.write(key, b"x")
    with pytest.raises(InvalidKey):
        gcs_store.read(key)


def test_missing_bucket_is_unavailable(fake_gcs: FakeGcs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    store = open_store("gs://no-such-bucket-tidecd/p")
    with pytest.raises(StoreUnavailable, match="gs://no-such-bucket-tidecd/p/k: GCS answered 404"):
        store.write("k", b"x")
