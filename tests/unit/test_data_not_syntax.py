"""A tag is data: image tags (and every helm parameter value) reach helm and kustomize as values, never as
syntax (issue 29, "Data is never syntax"). Rendered by the real helm and kustomize binaries
(`bash scripts/tools.sh helm kustomize`)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_images import FakeRegistry, Sent, app_doc, make_runtime, rendered, results
from tidecd.base.errors import RenderError
from tidecd.config.load import ApplicationSource, HelmParameter, HelmSpec
from tidecd.images import annotations as notes
from tidecd.images import state as images_state
from tidecd.images import writeback
from tidecd.images.state import ImageValue
from tidecd.render import render
from tidecd.render.helm import escape_set_value
from tidecd.render.overrides import SourceOverride
from tidecd.usecases import images as update

REPO = "https://git.example/apps.git"
HOSTILE = [
    "zz\\,evil=injected",          # the tag: a backslash before the comma
    "zz\\\\,evil=injected",        # two backslashes: Argo CD's escaping leaves the comma bare
    "zz\\",                        # a trailing backslash
    "{a},evil=injected}",          # a list that ends early: `}` then more `--set` syntax
    "{evil=injected",              # a brace that opens nothing
    "a,b,evil=injected",
    "x\nevil: injected",
    "",
]


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))


@pytest.fixture
def chart(tmp_path: Path) -> Path:
    """A chart whose one ConfigMap holds every value helm was given, as JSON."""
    write(tmp_path, "chart/Chart.yaml", "apiVersion: v2\nname: c\nversion: 0.1.0\n")
    write(tmp_path, "chart/values.yaml", "image: {repository: reg.io/web, tag: '1.0'}\n")
    write(tmp_path, "chart/templates/cm.yaml", """
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: values
        data:
          values: {{ toJson .Values | quote }}
        """)
    return tmp_path


def values(checkout: Path, spec: HelmSpec | None = None, override: SourceOverride | None = None) -> Any:
    source = ApplicationSource(repo_url=REPO, path="chart", helm=spec or HelmSpec())
    [cm] = render(checkout, source, app_name="web", namespace="team", override=override)
    return json.loads(cm["data"]["values"])


def is_list_form(value: str) -> bool:
    """Argo CD's `{a,b}`: a helm list (no OCI tag can start with `{`)."""
    return value.startswith("{") and value.endswith("}")


@pytest.mark.parametrize("tag", HOSTILE)
def test_an_image_tag_reaches_helm_as_that_literal_tag(chart: Path, tag: str) -> None:
    override = SourceOverride(helm_parameters=(HelmParameter("image.tag", tag, force_string=True),))
    got = values(chart, override=override)
    assert set(got) == {"image"} and set(got["image"]) == {"repository", "tag"}  # no `evil` anywhere
    if is_list_form(tag):
        assert got["image"]["tag"] == ["a}", "evil=injected"]  # a list, and only under image.tag
    else:
        assert got["image"]["tag"] == tag


@pytest.mark.parametrize("value", [v for v in HOSTILE if not is_list_form(v)])
def test_every_parameter_value_is_a_value_with_set_too(chart: Path, value: str) -> None:
    got = values(chart, HelmSpec(parameters=(HelmParameter("note", value),)))
    assert got["note"] == value and set(got) == {"image", "note"}


def test_the_argocd_write_back_of_a_hostile_tag_renders_that_tag(chart: Path) -> None:
    """The whole path: the updater's override as kept in state, applied at render time."""
    state = images_state.ImagesState(app="web")
    state.set_override([ImageValue("web", "reg.io/web", "zz\\,evil=injected",
                                   helm_image_name="image.repository", helm_image_tag="image.tag")])
    got = values(chart, override=state.source_override())
    assert got == {"image": {"repository": "reg.io/web", "tag": "zz\\,evil=injected"}}


def test_typed_values_and_lists_keep_argo_cds_meaning(chart: Path) -> None:
    params = (HelmParameter("n", "12"), HelmParameter("b", "true"), HelmParameter("s", "12", force_string=True),
              HelmParameter("list", "{a,b\\,c,3}"), HelmParameter("strings", "{1,2}", force_string=True),
              HelmParameter("early", "{a},evil=injected}"))
    got = values(chart, HelmSpec(parameters=params))
    assert (got["n"], got["b"], got["s"]) == (12, True, "12")
    assert got["list"] == ["a", "b,c", 3] and got["strings"] == ["1", "2"]
    assert got["early"] == ["a}", "evil=injected"] and "evil" not in got  # one list, under its own name


def test_escaping_is_exact_for_helms_parser() -> None:
    assert escape_set_value("zz\\,evil=injected") == "zz\\\\\\,evil=injected"
    assert escape_set_value("{a,b}") == "{a,b}"
    assert escape_set_value("{x") == "\\{x"


def test_a_file_parameter_path_with_a_comma_is_one_path(chart: Path) -> None:
    write(chart, "chart/files/a,evil=injected.txt", "hello\n")
    got = values(chart, HelmSpec(file_parameters=(("greeting", "files/a,evil=injected.txt"),)))
    assert got["greeting"] == "hello\n" and "evil" not in got


# --- kustomize ---------------------------------------------------------------------------------------------


@pytest.fixture
def kustomization(tmp_path: Path) -> Path:
    write(tmp_path, "app/kustomization.yaml", "resources: [deploy.yaml]\n")
    write(tmp_path, "app/deploy.yaml", """
        apiVersion: apps/v1
        kind: Deployment
        metadata:
          name: web
        spec:
          template:
            spec:
              containers:
              - name: web
                image: reg.io/web:1
        """)
    return tmp_path


def image_of(checkout: Path, override: SourceOverride) -> str:
    source = ApplicationSource(repo_url=REPO, path="app")
    [deploy] = render(checkout, source, app_name="web", namespace="team", override=override)
    return str(deploy["spec"]["template"]["spec"]["containers"][0]["image"])


def test_a_kustomize_image_override_sets_the_tag(kustomization: Path) -> None:
    value = ImageValue("web", "reg.io/web", "2.0")
    assert image_of(kustomization, images_state.source_override([value])) == "reg.io/web:2.0"
    digest = "sha256:" + "a" * 64
    pinned = ImageValue("web", "reg.io/web", "1", digest)
    assert image_of(kustomization, images_state.source_override([pinned])) == f"reg.io/web@{digest}"


@pytest.mark.parametrize("tag", ["1=evil.example/img:2", "1@sha256:" + "e" * 64 + "=evil.example/x", "1:2",
                                 "2\nnewName: evil.example/img", "zz\\,evil"])
def test_a_tag_that_kustomize_would_split_is_refused(kustomization: Path, tag: str) -> None:
    """`reg.io/web:1=evil.example/img:2` is, to `kustomize edit set image`, the image `reg.io/web:1` renamed
    to evil.example/img: the tag would have set another field."""
    override = images_state.source_override([ImageValue("web", "reg.io/web", tag)])
    with pytest.raises(RenderError, match=r"image override: kustomize image .* is not \[name=\]image"):
        image_of(kustomization, override)


def test_a_hostile_image_in_an_argocd_source_file_is_refused(kustomization: Path) -> None:
    write(kustomization, "app/.argocd-source-web.yaml", "kustomize:\n  images: ['reg.io/web:1=evil.example/img:2']\n")
    with pytest.raises(RenderError, match=r"^app/.argocd-source-web.yaml: kustomize image"):
        image_of(kustomization, SourceOverride())


# --- the image updater refuses what the OCI grammar forbids ------------------------------------------------


def test_the_updater_never_picks_a_tag_the_oci_grammar_forbids(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, [app_doc("web", {notes.IMAGE_LIST: "web=reg.io/web",
                                                      notes.PREFIX + "web.update-strategy": "alphabetical"})])
    rendered(runtime, "web", "reg.io/web:a")
    registry = FakeRegistry({"reg.io/web": ["a", "b", "zz\\,evil=injected"]})
    got = results(update.check(runtime, registry=registry, dispatcher=Sent()))["web"]
    assert got.status == "updated" and got.changes[0].new == "b"
    override = images_state.render_override(runtime.store, "web")
    assert override is not None and override.kustomize_images == ("reg.io/web:b",)

    rendered(runtime, "web", "reg.io/web:b")
    again = results(update.check(runtime, registry=registry, dispatcher=Sent()))["web"]
    assert again.status == "unchanged"
    assert "1 tag(s) the registry lists are not OCI tags and were refused (e.g. 'zz\\\\,evil=injected')" \
        in again.message


def test_the_updater_refuses_a_digest_that_is_not_one(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, [app_doc("dig", {notes.IMAGE_LIST: "d=reg.io/dig:stable",
                                                      notes.PREFIX + "d.update-strategy": "digest"})])
    rendered(runtime, "dig", "reg.io/dig:stable")
    registry = FakeRegistry({}, digests={"reg.io/dig": {"stable": "sha256:1,evil=injected"}})
    got = results(update.check(runtime, registry=registry, dispatcher=Sent()))["dig"]
    assert got.status == "error" and "not a digest; refused" in got.message
    assert images_state.render_override(runtime.store, "dig") is None


@pytest.mark.parametrize("tag", ["1\nnewName: evil.example/img", "1@sha256:" + "e" * 64, "a=b:c"])
def test_the_git_write_back_into_a_kustomization_keeps_a_tag_one_field(tag: str) -> None:
    """`images:` is written as YAML data (as `kustomize edit set image` leaves it), so a tag is one value."""
    text = writeback.edit_kustomization("resources: [deploy.yaml]\n", [ImageValue("web", "reg.io/web", tag)], "k")
    assert yaml.safe_load(text)["images"] == [{"name": "reg.io/web", "newTag": tag}]
