"""Kustomize apps: the Application's overrides applied as Argo CD applies them, then `kustomize build`.

Argo CD runs `kustomize edit set nameprefix|namesuffix|image|replicas|namespace`, `kustomize edit add
label|annotation|component` in the app directory, and appends the app's `patches` to the kustomization
file, before building; Argo CD's build environment (`render.buildenv`) is substituted in the images and the
commonLabels values, and in the commonAnnotations values with `commonAnnotationsEnvsubst`, only
(`util/kustomize/kustomize.go`), never in namePrefix, nameSuffix, namespace or patches. We do the same
in a copy of the checkout, because the checkout is a shared cache that other renders read. Without
overrides nothing is copied and the checkout is built in place.
Before kustomize runs, `render.confine` checks every path the kustomizations name against the checkout
(nothing remote, nothing outside: remote git bases were fetched and placed by the step, `step.remotes`);
kustomize itself then runs with no network (`render.tool`). With argocd-cm's `--enable-helm`
(`BuildEnv.kustomize_helm`), `helmCharts` inflate from charts the step fetched (`charts`), copied to where
kustomize looks before it would pull.
"""

from __future__ import annotations

import json
import posixpath
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import yaml

from tidecd.base.errors import RenderError, UnsafePathError
from tidecd.base.paths import copy_writable, inside
from tidecd.clients import tools
from tidecd.config.load import KustomizeSpec
from tidecd.render.buildenv import BuildEnv
from tidecd.render.confine import KUSTOMIZATION_FILES, confine
from tidecd.render.documents import Document, load_yaml
from tidecd.render.helm import parse_kube_version
from tidecd.render.tool import run as run_tool

REMOTE_HINTS = ("://", "git@", "github.com", "git clone", "no such host", "ssh:")


def is_kustomization(app_dir: Path) -> bool:
    return any((app_dir / name).is_file() for name in KUSTOMIZATION_FILES)


def has_overrides(spec: KustomizeSpec | None) -> bool:
    if spec is None:
        return False
    return bool(spec.name_prefix or spec.name_suffix or spec.images or spec.common_labels
                or spec.common_annotations or spec.namespace or spec.replicas or spec.patches or spec.components)


def edit_commands(spec: KustomizeSpec) -> list[list[str]]:
    """The `kustomize edit` calls Argo CD makes for these overrides, in its order."""
    commands: list[list[str]] = []
    if spec.name_prefix:
        commands.append(["edit", "set", "nameprefix", "--", spec.name_prefix])
    if spec.name_suffix:
        commands.append(["edit", "set", "namesuffix", "--", spec.name_suffix])
    if spec.images:
        commands.append(["edit", "set", "image", *spec.images])
    if spec.replicas:
        commands.append(["edit", "set", "replicas", *(f"{name}={count}" for name, count in spec.replicas)])
    if spec.common_labels:
        labels = [f"{key}:{value}" for key, value in sorted(spec.common_labels)]
        commands.append(["edit", "add", "label", "--force", *labels])  # tidecd always overrode labels
    if spec.common_annotations:
        notes = [f"{key}:{value}" for key, value in sorted(spec.common_annotations)]
        force = ["--force"] if spec.force_common_annotations else []
        commands.append(["edit", "add", "annotation", *force, *notes])
    if spec.namespace:
        commands.append(["edit", "set", "namespace", "--", spec.namespace])
    if spec.components:
        commands.append(["edit", "add", "component", *spec.components])
    return commands


def substituted(spec: KustomizeSpec, env: BuildEnv) -> KustomizeSpec:
    """`spec` with Argo CD's build environment where its kustomize wrapper substitutes it: each image,
    each commonLabels value, and each commonAnnotations value with `commonAnnotationsEnvsubst`
    (`applyImages`, `applyCommonLabels`, `applyCommonAnnotations`)."""
    annotations = spec.common_annotations
    if spec.common_annotations_envsubst:
        annotations = tuple((key, env.subst(value)) for key, value in annotations)
    return replace(spec, images=tuple(env.subst(image) for image in spec.images),
                   common_labels=tuple((key, env.subst(value)) for key, value in spec.common_labels),
                   common_annotations=annotations)


def check_paths(checkout: Path, app_dir: Path, spec: KustomizeSpec) -> None:
    """Components and patch files the app names must lie inside the checkout."""
    base = app_dir.resolve().relative_to(checkout.resolve()).as_posix()
    named = [("components", c) for c in spec.components]
    named += [("patches", p["path"]) for p in map(json.loads, spec.patches) if isinstance(p.get("path"), str)]
    for field, path in named:
        if "://" in path or path.startswith("/"):
            raise RenderError(f"spec.source.kustomize.{field} {path!r}: only paths inside the repository")
        try:
            inside(checkout, posixpath.normpath(posixpath.join(base, path)), what=f"spec.source.kustomize.{field}")
        except UnsafePathError as exc:
            raise UnsafePathError(f"spec.source.kustomize.{field} {path!r} leaves the repository checkout") from exc


def add_patches(build_dir: Path, spec: KustomizeSpec) -> None:
    """Append the app's `patches` to the kustomization file, as Argo CD does (it has no `kustomize edit`)."""
    if not spec.patches:
        return
    file = next(build_dir / name for name in KUSTOMIZATION_FILES if (build_dir / name).is_file())
    doc = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    if not isinstance(doc, dict):
        raise RenderError(f"{file.name}: expected a mapping")
    doc["patches"] = [*(doc.get("patches") or []), *(json.loads(p) for p in spec.patches)]
    file.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")


def render_kustomize(
    checkout: Path,
    app_dir: Path,
    spec: KustomizeSpec | None,
    *,
    label: str,
    build_env: BuildEnv | None = None,
    charts: Mapping[str, Path] | None = None,
) -> list[Document]:
    """Objects of `kustomize build` on `app_dir` (inside `checkout`), with the overrides of `spec` and
    `build_env` substituted in them as Argo CD substitutes it. With `build_env.kustomize_helm`, `helmCharts`
    are inflated from `charts` (`KustomizeChart.target` → the fetched chart's directory), put where
    kustomize looks before it would pull, with the destination's version and API versions for helm."""
    env = build_env or BuildEnv()
    if spec is not None:
        spec = substituted(spec, env)
    wanted = confine(checkout, app_dir, helm=env.kustomize_helm)
    with tempfile.TemporaryDirectory(prefix="tidecd-kustomize-") as tmp:
        work = Path(tmp)
        home = work / "home"
        home.mkdir()
        root = checkout.resolve()
        strip = [work / "repo", root, checkout]
        build_dir = app_dir
        if (spec is not None and has_overrides(spec)) or wanted:
            build_dir = _private_copy(root, app_dir, work / "repo")
        for chart in wanted:
            if chart.target not in (charts or {}):
                raise RenderError(f"{chart.where}: chart {chart.name} was not fetched")
            copy_writable((charts or {})[chart.target], work / "repo" / chart.target)
        if spec is not None and has_overrides(spec):
            kustomize = tools.binary("kustomize")  # `kubectl kustomize` cannot edit
            check_paths(root, app_dir, spec)
            add_patches(build_dir, spec)
            for argv in edit_commands(spec):
                what = f"kustomize {' '.join(argv[:3])} in {label}"
                run_tool([kustomize, *argv], what=what, cwd=build_dir, home=home, strip=strip)
        what = f"kustomize build {label}"
        argv = build_argv(build_dir) + (helm_flags(env) if env.kustomize_helm else [])
        try:
            out = run_tool(argv, what=what, cwd=build_dir, home=home, strip=strip)
        except RenderError as exc:
            raise _with_remote_hint(exc) from exc
    return load_yaml(out, f"kustomize build {label} output")


def helm_flags(env: BuildEnv) -> list[str]:
    """`--enable-helm` and what Argo CD adds with it: the helm binary, the destination's version and API
    versions (`--helm-kube-version`, `--helm-api-versions`)."""
    flags = ["--enable-helm", "--helm-command", tools.binary("helm")]
    if env.kube_version:
        flags += ["--helm-kube-version", parse_kube_version(env.kube_version, "the destination's version")]
    for api_version in env.api_versions:
        flags += ["--helm-api-versions", api_version]
    return flags


def build_argv(build_dir: Path) -> list[str]:
    """`kustomize build DIR`, or `kubectl kustomize DIR` where only kubectl is installed."""
    try:
        return [tools.binary("kustomize"), "build", str(build_dir)]
    except tools.MissingTool as missing:
        try:
            return [tools.binary("kubectl"), "kustomize", str(build_dir)]
        except tools.MissingTool:
            raise missing from None


def _private_copy(root: Path, app_dir: Path, dest: Path) -> Path:
    """Copy the checkout (bases may live anywhere in it); return the app directory inside the copy."""
    copy_writable(root, dest, keep_links=True)  # the checkout is a read-only cached tree; its copy is ours
    build_dir = dest / app_dir.relative_to(root)
    for name in KUSTOMIZATION_FILES:
        file = build_dir / name
        if file.is_symlink():  # `kustomize edit` would write through it, into the shared checkout
            target = file.resolve()
            file.unlink()
            shutil.copyfile(target, file)
    return build_dir


def _with_remote_hint(exc: RenderError) -> RenderError:
    message = str(exc)
    if any(hint in message for hint in REMOTE_HINTS):
        message += (" (kustomize fetches nothing itself: remote git bases are fetched by tidecd within the "
                    "project's sourceRepos; vendor anything else into the repository)")
    return RenderError(message)
