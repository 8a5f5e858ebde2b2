"""argocd-image-updater's Application annotations, read exactly as the add-on reads them.

    argocd-image-updater.argoproj.io/image-list        [alias=]image[:constraint], comma separated
    argocd-image-updater.argoproj.io/<alias>.<option>   per image (an alias `a/b` is written `a_b`)
    argocd-image-updater.argoproj.io/<option>           app-wide default of a per-image option
    argocd-image-updater.argoproj.io/write-back-method  argocd (default) | git | git:repocreds | git:secret:NS/NAME
    argocd-image-updater.argoproj.io/git-branch         BRANCH | BASE:TARGET | :TARGET
    argocd-image-updater.argoproj.io/write-back-target  kustomization[:PATH] | helmvalues[:PATH]

Per-image options: update-strategy (semver, newest-build, digest, alphabetical; the old names latest and
name), allow-tags (`regexp:…` or `any`), ignore-tags (globs), platforms (os/arch[/variant]), pull-secret
(`pullsecret:NS/NAME`, `secret:NS/NAME#FIELD`, `env:VAR`), force-update, helm.image-name,
helm.image-tag, helm.image-spec and kustomize.image-name.

Where the add-on silently falls back (an unknown strategy becomes semver, a bad regexp matches nothing),
tidecd reports an error naming the annotation instead: `parse` returns the problems, and the use case
puts them on the app as a condition. Nothing here does I/O.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass

from tidecd.base.globs import compile_glob
from tidecd.base.semver import Constraint, parse_constraint

PREFIX = "argocd-image-updater.argoproj.io/"
IMAGE_LIST = PREFIX + "image-list"
WRITE_BACK_METHOD = PREFIX + "write-back-method"
WRITE_BACK_TARGET = PREFIX + "write-back-target"
GIT_BRANCH = PREFIX + "git-branch"
WRITE_BACK_API = "tidecd.io/image-write-back"  # tidecd's own: `github-api` commits through GitHub's API

MAX_IMAGES = 50
MAX_PATTERN = 512
_ALIAS = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]{0,62}")
_PLATFORM = re.compile(r"[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?")
_IMAGE = re.compile(r"[a-z0-9]+([._-][a-z0-9]+|__|-+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+|__|-+)*)*",
                    re.IGNORECASE)
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REF = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_BRANCH = re.compile(r"[A-Za-z0-9._/{}\[\]$ -]{0,255}")


class Strategy(enum.StrEnum):
    SEMVER = "semver"
    NEWEST_BUILD = "newest-build"
    DIGEST = "digest"
    ALPHABETICAL = "alphabetical"

    @property
    def needs_metadata(self) -> bool:
        """Strategies that read manifests (and so `platforms` applies to them)."""
        return self in (Strategy.NEWEST_BUILD, Strategy.DIGEST)


STRATEGY_NAMES = {"semver": Strategy.SEMVER, "newest-build": Strategy.NEWEST_BUILD, "latest": Strategy.NEWEST_BUILD,
                  "digest": Strategy.DIGEST, "alphabetical": Strategy.ALPHABETICAL, "name": Strategy.ALPHABETICAL}


class Method(enum.StrEnum):
    ARGOCD = "argocd"
    GIT = "git"


class Target(enum.StrEnum):
    SOURCE_FILE = "source-file"  # .argocd-source-<app>.yaml in the app's path
    KUSTOMIZATION = "kustomization"
    HELM_VALUES = "helmvalues"


@dataclass(frozen=True)
class SecretRef:
    """Where credentials come from: a dockerconfigjson Secret, one field of a Secret, or a variable."""

    kind: str  # pullsecret | secret | env
    namespace: str = ""
    name: str = ""
    field: str = ""

    def __str__(self) -> str:
        if self.kind == "env":
            return f"env:{self.name}"
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind}:{where}" + (f"#{self.field}" if self.field else "")


@dataclass(frozen=True)
class ImageSpec:
    """One entry of image-list with its options."""

    alias: str
    image: str  # as written: registry/repository (no tag)
    constraint_text: str = ""
    constraint: Constraint | None = None
    strategy: Strategy = Strategy.SEMVER
    allow_tags: str = ""  # a regexp source; "" allows any tag
    ignore_tags: tuple[str, ...] = ()
    platforms: tuple[str, ...] = ()
    pull_secret: SecretRef | None = None
    force_update: bool = False
    helm_image_name: str = "image.name"
    helm_image_tag: str = "image.tag"
    helm_image_spec: str = ""
    kustomize_image_name: str = ""

    def allows(self, tag: str) -> bool:
        """allow-tags and ignore-tags (the constraint is the strategy's business)."""
        if self.allow_tags and not re.search(self.allow_tags, tag):
            return False
        return not any(compile_glob(p, separator="/").fullmatch(tag) for p in self.ignore_tags)


@dataclass(frozen=True)
class WriteBack:
    method: Method = Method.ARGOCD
    secret: SecretRef | None = None  # git:secret:NS/NAME; None means the repository's own credentials
    base_branch: str = ""  # "" means the app's targetRevision
    target_branch: str = ""  # "" means the base branch
    target: Target = Target.SOURCE_FILE
    target_path: str = ""  # kustomization dir / helm values file; relative to the app path unless absolute
    github_api: bool = False  # commit through GitHub's contents API (PyGithub) instead of a git push


@dataclass(frozen=True)
class UpdaterConfig:
    images: tuple[ImageSpec, ...]
    write_back: WriteBack


def is_managed(annotations: Mapping[str, str]) -> bool:
    return bool(annotations.get(IMAGE_LIST, "").strip())


def parse(annotations: Mapping[str, str]) -> tuple[UpdaterConfig | None, list[str]]:
    """The updater configuration of one Application, and every problem, each naming its annotation.

    None when the app has no image-list (the updater leaves it alone) or when any problem was found.
    """
    text = annotations.get(IMAGE_LIST, "").strip()
    if not text:
        return None, []
    errors: list[str] = []
    entries = [e.strip() for e in text.split(",") if e.strip()]
    if len(entries) > MAX_IMAGES:
        return None, [f"annotation {IMAGE_LIST}: {len(entries)} images; at most {MAX_IMAGES} are allowed"]
    images: list[ImageSpec] = []
    seen: set[str] = set()
    for entry in entries:
        image = _image_entry(entry, annotations, errors)
        if image is None:
            continue
        if image.alias in seen:
            errors.append(f"annotation {IMAGE_LIST}: alias {image.alias!r} is used twice")
        seen.add(image.alias)
        images.append(image)
    write_back = _write_back(annotations, errors)
    if errors:
        return None, errors
    return UpdaterConfig(tuple(images), write_back), []


# --- image-list and per-image options ---------------------------------------------------------------


def split_entry(entry: str) -> tuple[str, str, str]:
    """`[alias=]image[:constraint]` → (alias, image, constraint); a registry port is not a constraint."""
    alias, eq, rest = entry.partition("=")
    if not eq:
        alias, rest = "", entry
    rest = rest.strip()
    last_slash = rest.rfind("/")
    colon = rest.find(":", last_slash + 1)
    image, constraint = (rest[:colon], rest[colon + 1:]) if colon >= 0 else (rest, "")
    image = image.split("@", 1)[0]
    return alias.strip(), image.strip(), constraint.strip()


def _image_entry(entry: str, notes: Mapping[str, str], errors: list[str]) -> ImageSpec | None:
    alias, image, constraint_text = split_entry(entry)
    if alias and not _ALIAS.fullmatch(alias):
        errors.append(f"annotation {IMAGE_LIST}: alias {alias!r} must be alphanumeric (with _ . / -)")
        return None
    if not _IMAGE.fullmatch(image):
        errors.append(f"annotation {IMAGE_LIST}: {image!r} is not an image name")
        return None
    alias = alias or image
    key = alias.replace("/", "_")
    before = len(errors)

    def option(name: str) -> tuple[str, str]:
        """The value and the annotation it came from: the alias's own first, then the app-wide one."""
        own = PREFIX + f"{key}.{name}"
        if own in notes:
            return notes[own].strip(), own
        common = PREFIX + name
        return notes.get(common, "").strip(), common

    strategy_text, where = option("update-strategy")
    strategy = Strategy.SEMVER
    if strategy_text:
        if strategy_text not in STRATEGY_NAMES:
            errors.append(f"annotation {where}: unknown update strategy {strategy_text!r}; expected one of "
                          "semver, newest-build, digest, alphabetical (or the old names latest, name)")
        else:
            strategy = STRATEGY_NAMES[strategy_text]
    constraint = None
    if strategy is Strategy.SEMVER and constraint_text:
        try:
            constraint = parse_constraint(constraint_text)
        except ValueError as exc:
            errors.append(f"annotation {IMAGE_LIST}: {image}: version constraint {constraint_text!r}: {exc}")
    if strategy is Strategy.DIGEST and not constraint_text:
        errors.append(f"annotation {IMAGE_LIST}: {image}: the digest strategy needs the tag to follow "
                      f"({image}:<tag>)")
    allow = _allow_tags(*option("allow-tags"), errors)
    ignore = _ignore_tags(*option("ignore-tags"), errors)
    platforms = _platforms(*option("platforms"), errors)
    secret_text, where = option("pull-secret")
    pull_secret = _secret_ref(secret_text, where, errors, pull=True) if secret_text else None
    force_text, where = option("force-update")
    if force_text not in ("", "true", "false"):
        errors.append(f"annotation {where}: expected true or false, not {force_text!r}")
    helm = {name: notes.get(PREFIX + f"{key}.helm.{name}", "").strip()
            for name in ("image-name", "image-tag", "image-spec")}
    for name, value in helm.items():
        if value and not re.fullmatch(r"[A-Za-z0-9_.\[\]-]+", value):
            errors.append(f"annotation {PREFIX}{key}.helm.{name}: {value!r} is not a helm parameter name")
    kustomize_name = notes.get(PREFIX + f"{key}.kustomize.image-name", "").strip()
    if kustomize_name and not _IMAGE.fullmatch(kustomize_name):
        errors.append(f"annotation {PREFIX}{key}.kustomize.image-name: {kustomize_name!r} is not an image name")
    if len(errors) > before:
        return None
    return ImageSpec(
        alias=alias, image=image, constraint_text=constraint_text, constraint=constraint, strategy=strategy,
        allow_tags=allow, ignore_tags=ignore, platforms=platforms, pull_secret=pull_secret,
        force_update=force_text == "true", helm_image_name=helm["image-name"] or "image.name",
        helm_image_tag=helm["image-tag"] or "image.tag", helm_image_spec=helm["image-spec"],
        kustomize_image_name=kustomize_name,
    )


def _allow_tags(text: str, where: str, errors: list[str]) -> str:
    if not text or text == "any":
        return ""
    if not text.startswith("regexp:"):
        errors.append(f"annotation {where}: {text!r}: expected regexp:<expression> or any")
        return ""
    pattern = text.removeprefix("regexp:")
    if len(pattern) > MAX_PATTERN:
        errors.append(f"annotation {where}: the expression is longer than {MAX_PATTERN} characters")
        return ""
    try:
        re.compile(pattern)
    except re.error as exc:
        errors.append(f"annotation {where}: invalid regular expression: {exc.msg}")
        return ""
    return pattern


def _ignore_tags(text: str, where: str, errors: list[str]) -> tuple[str, ...]:
    patterns = tuple(p.strip() for p in text.split(",") if p.strip())
    for pattern in patterns:
        try:
            compile_glob(pattern, separator="/")
        except ValueError as exc:
            errors.append(f"annotation {where}: {exc}")
    return patterns


def _platforms(text: str, where: str, errors: list[str]) -> tuple[str, ...]:
    platforms = tuple(p.strip() for p in text.split(",") if p.strip())
    for platform in platforms:
        if not _PLATFORM.fullmatch(platform):
            errors.append(f"annotation {where}: {platform!r} is not a platform (os/arch[/variant])")
    return platforms


def _secret_ref(text: str, where: str, errors: list[str], *, pull: bool) -> SecretRef | None:
    kind, _, rest = text.partition(":")
    if pull and kind == "env":
        if not _ENV.fullmatch(rest):
            errors.append(f"annotation {where}: {rest!r} is not an environment variable name")
            return None
        return SecretRef("env", name=rest)
    if pull and kind == "ext":
        errors.append(f"annotation {where}: ext: scripts are not run by tidecd; seal the credentials as a "
                      "kubernetes.io/dockerconfigjson Secret and use pullsecret:<namespace>/<name>")
        return None
    allowed = ("pullsecret", "secret") if pull else ("secret",)
    if kind not in allowed:
        expected = "pullsecret:<namespace>/<name>, secret:<namespace>/<name>#<field> or env:<variable>" if pull \
            else "secret:<namespace>/<name>"
        errors.append(f"annotation {where}: {text!r}: expected {expected}")
        return None
    path, _, field = rest.partition("#")
    namespace, slash, name = path.partition("/")
    if not slash:
        namespace, name = "", path
    if not _REF.fullmatch(name) or (namespace and not _REF.fullmatch(namespace)):
        errors.append(f"annotation {where}: {text!r}: expected {kind}:<namespace>/<name>")
        return None
    if kind == "secret" and pull and not field:
        errors.append(f"annotation {where}: {text!r}: name the field holding <username>:<password> (#field)")
        return None
    return SecretRef(kind, namespace, name, field)


# --- write-back ------------------------------------------------------------------------------------------


def _write_back(notes: Mapping[str, str], errors: list[str]) -> WriteBack:
    method_text = notes.get(WRITE_BACK_METHOD, "").strip() or "argocd"
    method, secret = Method.ARGOCD, None
    if method_text == "argocd":
        pass
    elif method_text == "git" or method_text == "git:repocreds":
        method = Method.GIT
    elif method_text.startswith("git:"):
        method = Method.GIT
        secret = _secret_ref(method_text.removeprefix("git:"), WRITE_BACK_METHOD, errors, pull=False)
    else:
        errors.append(f"annotation {WRITE_BACK_METHOD}: {method_text!r}: expected argocd, git, git:repocreds "
                      "or git:secret:<namespace>/<name>")
    base = target = ""
    branch_text = notes.get(GIT_BRANCH, "").strip()
    if branch_text:
        base, colon, target = branch_text.partition(":")
        if not colon:
            target = ""
        for name in (base, target):
            if not _BRANCH.fullmatch(name) or ".." in name or name.startswith(("-", "/")) or name.endswith("/"):
                errors.append(f"annotation {GIT_BRANCH}: {name!r} is not a branch name")
        if colon and not target:
            errors.append(f"annotation {GIT_BRANCH}: {branch_text!r}: the target branch after ':' is empty")
    target_kind, target_path = Target.SOURCE_FILE, ""
    target_text = notes.get(WRITE_BACK_TARGET, "").strip()
    if target_text:
        kind, _, target_path = target_text.partition(":")
        if kind == "kustomization":
            target_kind = Target.KUSTOMIZATION
        elif kind == "helmvalues":
            target_kind = Target.HELM_VALUES
        else:
            errors.append(f"annotation {WRITE_BACK_TARGET}: {target_text!r}: expected kustomization[:<path>] "
                          "or helmvalues[:<path>]")
        if target_kind is Target.HELM_VALUES and not target_path:
            target_path = "values.yaml"
    if target_text and method is not Method.GIT:
        errors.append(f"annotation {WRITE_BACK_TARGET}: only used with {WRITE_BACK_METHOD}: git")
    api_text = notes.get(WRITE_BACK_API, "").strip()
    if api_text not in ("", "git", "github-api"):
        errors.append(f"annotation {WRITE_BACK_API}: {api_text!r}: expected git (a push, the default) or github-api")
    elif api_text == "github-api" and method is not Method.GIT:
        errors.append(f"annotation {WRITE_BACK_API}: only used with {WRITE_BACK_METHOD}: git")
    return WriteBack(method, secret, base, target, target_kind, target_path, github_api=api_text == "github-api")
