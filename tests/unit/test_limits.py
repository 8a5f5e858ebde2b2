"""The bounds of tidecd.base.limits: alias bombs, deep nesting, sizes; each refused before the work it guards."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tidecd.base import limits
from tidecd.base.errors import ConfigError, LimitExceeded, RenderError
from tidecd.config.load import load_config
from tidecd.render.documents import Document, check, load_json, load_yaml
from tidecd.render.helm import check_values_file

APP = """\
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {{name: {name}}}
spec:
  project: default
  source: {{repoURL: 'https://git.example.com/a.git', path: app}}
  destination: {{server: 'https://kubernetes.default.svc', namespace: x}}
"""


def alias_bomb() -> str:
    """The classic "billion laughs": 9 levels of 9 aliases, 9**9 strings once expanded (342 bytes)."""
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    previous = "a"
    for name in "bcdefghi":
        text += f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]\n"
        previous = name
    return text


def test_alias_bomb_is_refused_quickly_naming_the_file() -> None:
    started = time.monotonic()
    with pytest.raises(LimitExceeded, match=r"^app/bomb.yaml document 1: YAML aliases expand: over the limit "
                                            r"of 100,000 nodes \(TIDECD_MAX_YAML_ALIAS_NODES\)$"):
        load_yaml(alias_bomb(), "app/bomb.yaml")
    assert time.monotonic() - started < 1.0


def test_a_few_honest_aliases_are_fine() -> None:
    docs = load_yaml("base: &b {a: 1}\nx: *b\ny: *b\n", "ok.yaml")
    assert docs[0].obj == {"base": {"a": 1}, "x": {"a": 1}, "y": {"a": 1}}


def test_alias_budget_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "base: &b [1, 2, 3, 4]\n" + "".join(f"k{i}: *b\n" for i in range(10))
    load_yaml(text, "x.yaml")
    monkeypatch.setenv("TIDECD_MAX_YAML_ALIAS_NODES", "20")
    with pytest.raises(LimitExceeded, match="x.yaml document 1: YAML aliases expand"):
        load_yaml(text, "x.yaml")


@pytest.mark.parametrize("text", [
    "a: " + "[" * 200 + "]" * 200,
    "- " * 300 + "x",
    "a: " + "{b: " * 200 + "1" + "}" * 200,
    "".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "leaf: 1\n",
])
def test_deep_nesting_is_refused_before_composing(text: str) -> None:
    with pytest.raises(LimitExceeded, match=r"deep.yaml document 1: nesting depth: over the limit of 128 "
                                            r"\(TIDECD_MAX_DEPTH\)"):
        load_yaml(text, "deep.yaml")


def test_extreme_nesting_never_crashes_the_process() -> None:
    with pytest.raises(RenderError, match="deep.yaml"):
        load_yaml("a: " + "[" * 200_000 + "]" * 200_000, "deep.yaml")


def test_depth_through_an_alias_counts() -> None:
    inner = "[" * 100 + "]" * 100
    with pytest.raises(LimitExceeded, match="through an alias"):
        load_yaml(f"a: &x {inner}\nb: " + "[" * 60 + "*x" + "]" * 60 + "\n", "al.yaml")


def test_deep_json_is_refused() -> None:
    with pytest.raises(LimitExceeded, match="deep.json: nesting depth"):
        load_json('{"a": ' + "[" * 300 + "]" * 300 + "}", "deep.json")
    with pytest.raises(LimitExceeded, match="deep.json: nesting depth"):
        load_json('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "deep.json")


def test_object_size_limit_names_the_object(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDECD_MAX_OBJECT_BYTES", "1000")
    big = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big", "namespace": "n"},
           "data": {"x": "y" * 2000}}
    with pytest.raises(LimitExceeded, match=r"^ConfigMap n/big \(app/cm.yaml document 1\) is 2,0\d\d bytes as JSON: "
                                            r"over the limit of 1,000 bytes \(TIDECD_MAX_OBJECT_BYTES\)$"):
        check([Document("app/cm.yaml document 1", big)])


def test_bad_limit_setting_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDECD_MAX_DEPTH", "lots")
    with pytest.raises(ConfigError, match="TIDECD_MAX_DEPTH='lots': expected a positive whole number"):
        limits.current()


def test_every_limit_has_a_variable_and_the_readme_lists_it() -> None:
    readme = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()  # the limits tables
    for field in limits.Limits.__dataclass_fields__:
        assert limits.env_name(field) in readme, limits.env_name(field)


def test_config_alias_bomb_sets_aside_only_that_file(tmp_path: Path) -> None:
    (tmp_path / "bomb.yaml").write_text(alias_bomb())
    (tmp_path / "good.yaml").write_text(APP.format(name="good"))
    with pytest.raises(ConfigError, match="bomb.yaml document 1: YAML aliases expand"):
        load_config(tmp_path)


def test_config_deep_json_is_an_error_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="deep.json: nesting depth"):
        load_config(tmp_path)


def test_helm_value_file_bomb_is_refused(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(alias_bomb())
    with pytest.raises(LimitExceeded, match=r"valueFiles\[0\] 'values.yaml' document 1: YAML aliases expand"):
        check_values_file(values, "spec.source.helm.valueFiles[0] 'values.yaml'")


def test_file_size_limit_is_checked_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tidecd.config.load import ApplicationSource
    from tidecd.render import render

    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "big.yaml").write_text(json.dumps({"x": "y" * 5000}))
    monkeypatch.setenv("TIDECD_MAX_FILE_BYTES", "4096")
    with pytest.raises(LimitExceeded, match=r"^app/big.yaml is 5,0\d\d bytes: over the limit of 4,096 bytes"):
        render(tmp_path, ApplicationSource(repo_url="https://g/x", path="app"), app_name="a", namespace="")


# --- snapshots ------------------------------------------------------------------------------------------


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_deep_tree_is_refused_not_a_recursion_error(tmp_path: Path) -> None:
    from tidecd.source import extract

    deep = "/".join(["d"] * 1100) + "/cm.yaml"
    with pytest.raises(LimitExceeded, match=r"snapshot member 'd/d/d.*': 1,?101 path levels: over the limit of 64 "
                                            r"\(TIDECD_MAX_PATH_DEPTH\)"):
        extract(_tar([(deep, b"x")]), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_snapshot_file_count_and_size_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tidecd.source import extract

    monkeypatch.setenv("TIDECD_MAX_FILES", "3")
    with pytest.raises(LimitExceeded, match=r"snapshot: number of files: over the limit of 3 \(TIDECD_MAX_FILES\)"):
        extract(_tar([(f"f{i}", b"x") for i in range(4)]), tmp_path / "a")
    monkeypatch.setenv("TIDECD_MAX_SNAPSHOT_BYTES", "1000")
    with pytest.raises(LimitExceeded, match=r"snapshot: uncompressed size \(at 'big'\): over the limit of 1,000 "
                                            r"bytes \(TIDECD_MAX_SNAPSHOT_BYTES\)"):
        extract(_tar([("small", b"x" * 10), ("big", b"x" * 2000)]), tmp_path / "b")


# --- tools run without network --------------------------------------------------------------------------


def test_a_tool_cannot_reach_a_loopback_server(tmp_path: Path) -> None:
    """Whatever a renderer tries, the loopback HTTP server sees no request (own network namespace, or
    proxies to a closed port where namespaces are not allowed)."""
    import http.server
    import sys
    import threading

    from tidecd.render import tool

    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            seen.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fetched}\n")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/cm.yaml"
        fetch = f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=5).read())"
        with pytest.raises(RenderError, match="fetch failed"):
            tool.run([sys.executable, "-c", fetch], what="fetch", cwd=tmp_path, home=tmp_path)
        connect = f"import socket; socket.create_connection(('127.0.0.1', {server.server_address[1]}), timeout=5)"
        if tool.sandbox_prefix():  # a namespace of its own: not even a raw socket reaches loopback
            with pytest.raises(RenderError, match="connect failed"):
                tool.run([sys.executable, "-c", connect], what="connect", cwd=tmp_path, home=tmp_path)
    finally:
        server.shutdown()
        server.server_close()
    assert seen == []


# --- the manifest cache: checksums and stored refusals --------------------------------------------------


def test_a_corrupt_manifest_cache_entry_is_rendered_again(tmp_path: Path) -> None:
    from tidecd.clients.store import MemoryStore
    from tidecd.config.load import ApplicationSource
    from tidecd.render import manifest_key, render_cached

    store, src = MemoryStore(), ApplicationSource(repo_url="https://g.example/x", path="app")
    calls: list[int] = []
    obj: dict[str, object] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}

    def render_fn() -> list[dict[str, object]]:
        calls.append(1)
        return [obj]

    assert render_cached(store, "app", "a" * 40, src, render_fn, namespace="n") == [obj]
    key = manifest_key("app", "a" * 40, src, "n")
    blob = store.read(key)
    assert blob is not None
    store.write(key, blob.data.replace(b'"a":"1"', b'"a":"2"'))  # valid JSON, wrong content
    assert render_cached(store, "app", "a" * 40, src, render_fn, namespace="n") == [obj]
    assert len(calls) == 2
    assert render_cached(store, "app", "a" * 40, src, render_fn, namespace="n") == [obj]
    assert len(calls) == 2, "the repaired entry is used"


def test_a_refusal_is_stored_and_not_rendered_again_until_a_limit_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    from tidecd.clients.store import MemoryStore
    from tidecd.config.load import ApplicationSource
    from tidecd.render import render_cached

    store, src = MemoryStore(), ApplicationSource(repo_url="https://g.example/x", path="app")
    calls: list[int] = []

    def render_fn() -> list[dict[str, object]]:
        calls.append(1)
        return [d.obj for d in load_yaml(alias_bomb(), "app/bomb.yaml")]

    for _ in range(3):
        with pytest.raises(LimitExceeded, match="app/bomb.yaml document 1: YAML aliases expand"):
            render_cached(store, "app", "b" * 40, src, render_fn, namespace="n")
    assert len(calls) == 1
    monkeypatch.setenv("TIDECD_MAX_YAML_ALIAS_NODES", "200000")
    with pytest.raises(LimitExceeded):
        render_cached(store, "app", "b" * 40, src, render_fn, namespace="n")
    assert len(calls) == 2
