"""Parameter overrides applied to an app's source before rendering, as Argo CD applies them.

Two places give them:
- `.argocd-source.yaml` and `.argocd-source-<app>.yaml` in the app's path (what argocd-image-updater's
  git write-back commits): merged over the Application's source like Argo CD's repo-server merges them,
  a list given in the file replacing the list of the spec (`kustomize.images`, `helm.parameters`);
- the image updater's `argocd` write-back, kept in tidecd's state: entries are merged by name into the
  spec's (an image by its name, a helm parameter by its name), as `argocd app set` would.
Only kustomize and helm apps take overrides; a plain directory of manifests has nowhere to put them.

Their values are data from a registry (a tag, a digest). A helm parameter's value reaches helm escaped
(`render.helm.escape_set_value`). A kustomize image override is one string that `kustomize edit set image`
splits at `=`, `@` and the last `:`, so a tag holding one of them would set another field (`nginx:1=evil/x:2`
renames the image); each is checked to be `[name=]image[:tag][@digest]` in the OCI grammar before use.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tidecd.base.errors import RenderError
from tidecd.config.load import ApplicationSource, HelmParameter, HelmSpec, KustomizeSpec

MAX_FILE = 1024 * 1024

IMAGE_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
"""The OCI distribution spec's tag grammar: nothing in a tag is syntax to helm, kustomize or YAML."""
IMAGE_DIGEST = re.compile(r"[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-fA-F0-9]{32,}")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAME = rf"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*"
_KUSTOMIZE_IMAGE = re.compile(
    rf"(?:{_NAME}=)?{_NAME}(?::{IMAGE_TAG.pattern})?(?:@{IMAGE_DIGEST.pattern})?", re.IGNORECASE)


@dataclass(frozen=True)
class SourceOverride:
    kustomize_images: tuple[str, ...] = ()
    helm_parameters: tuple[HelmParameter, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.kustomize_images or self.helm_parameters)

    def digest(self) -> str:
        text = json.dumps(dataclasses.asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def source_files(app_name: str) -> tuple[str, ...]:
    return (".argocd-source.yaml", f".argocd-source-{app_name}.yaml")


def read_source_files(app_dir: Path, app_name: str, label: str) -> list[tuple[str, SourceOverride]]:
    """The overrides the app path's `.argocd-source*.yaml` files give, in Argo CD's order."""
    found = []
    for name in source_files(app_name):
        path = app_dir / name
        if not path.is_file():
            continue
        where = f"{label}/{name}"
        if path.stat().st_size > MAX_FILE:
            raise RenderError(f"{where}: larger than {MAX_FILE} bytes")
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise RenderError(f"{where}: not valid YAML ({type(exc).__name__})") from None
        found.append((where, _parse_file(data, where)))
    return found


def _parse_file(data: Any, where: str) -> SourceOverride:
    if not isinstance(data, dict):
        raise RenderError(f"{where}: expected a mapping")
    unknown = set(data) - {"kustomize", "helm"}
    if unknown:
        raise RenderError(f"{where}: {sorted(unknown)[0]}: not supported (kustomize.images and helm.parameters are)")
    images: tuple[str, ...] = ()
    params: tuple[HelmParameter, ...] = ()
    kustomize = data.get("kustomize") or {}
    if not isinstance(kustomize, dict) or set(kustomize) - {"images"}:
        raise RenderError(f"{where}: kustomize: only images is supported")
    raw_images = kustomize.get("images") or []
    if not isinstance(raw_images, list) or not all(isinstance(i, str) for i in raw_images):
        raise RenderError(f"{where}: kustomize.images: expected a list of strings")
    images = tuple(raw_images)
    helm = data.get("helm") or {}
    if not isinstance(helm, dict) or set(helm) - {"parameters"}:
        raise RenderError(f"{where}: helm: only parameters is supported")
    raw_params = helm.get("parameters") or []
    if not isinstance(raw_params, list):
        raise RenderError(f"{where}: helm.parameters: expected a list")
    for i, item in enumerate(raw_params):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or "value" not in item:
            raise RenderError(f"{where}: helm.parameters[{i}]: expected name and value")
        params += (HelmParameter(item["name"], str(item["value"]), bool(item.get("forceString")
                                                                          or item.get("forcestring"))),)
    return SourceOverride(images, params)


def kustomize_image_name(spec: str) -> str:
    """The name a kustomize image override is for: `orig=new:tag` → orig; `name:tag`/`name@d` → name."""
    if "=" in spec:
        return spec.split("=", 1)[0]
    name = spec.split("@", 1)[0]
    last = name.rfind("/")
    colon = name.find(":", last + 1)
    return name[:colon] if colon >= 0 else name


def apply(source: ApplicationSource, tool: str, override: SourceOverride | None, *, replace: bool,
          what: str = "image override") -> ApplicationSource:
    """`source` with the override for `tool` ("Kustomize" or "Helm"); `replace` swaps whole lists."""
    if not override:
        return source
    if tool == "Kustomize":
        if not override.kustomize_images:
            return source
        for image in override.kustomize_images:
            check_kustomize_image(image, what)
        spec = source.kustomize or KustomizeSpec()
        images = override.kustomize_images if replace else _merge(spec.images, override.kustomize_images,
                                                                   kustomize_image_name)
        return dataclasses.replace(source, kustomize=dataclasses.replace(spec, images=tuple(images)))
    if tool == "Helm":
        if not override.helm_parameters:
            return source
        helm = source.helm or HelmSpec()
        params = override.helm_parameters if replace else _merge(helm.parameters, override.helm_parameters,
                                                                  lambda p: p.name)
        return dataclasses.replace(source, helm=dataclasses.replace(helm, parameters=tuple(params)))
    raise RenderError(f"{what}: only kustomize and helm apps take image overrides; this app is a plain "
                      "directory of manifests")


def check_kustomize_image(spec: str, what: str) -> None:
    """Refuse an image override that `kustomize edit set image` would read as other fields than it says."""
    if not _KUSTOMIZE_IMAGE.fullmatch(spec):
        shown = repr(spec[:200])
        raise RenderError(f"{what}: kustomize image {shown} is not [name=]image[:tag][@digest] (a tag is "
                          "letters, digits, `_`, `.` and `-`, at most 128): refused, it would set other fields")


def _merge(current: tuple[Any, ...], new: tuple[Any, ...], name: Any) -> tuple[Any, ...]:
    names = {name(item) for item in new}
    return tuple(item for item in current if name(item) not in names) + tuple(new)
