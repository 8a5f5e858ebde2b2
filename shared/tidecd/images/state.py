"""What the image updater keeps per app at `state/images/<app>.json` (plain data, no secret values).

    override   the `argocd` write-back: images applied at render time (kustomize images, helm parameters)
    log        every override change with its time (last 20), so a rollback can restore the one in effect
               when the rolled-back revision was deployed
    pin        set by a rollback: the updater skips the app until `tidecd image unpin` or a manual sync
    refused    images a merged revert took out of git (`usecases.revert`): the updater never writes them
               back again (a newer tag still moves the app on); `tidecd image unpin` clears them
    check      the last tick's outcome for the app: when, what it found, what it changed, any problem

Kept apart from `state/apps/<app>.json` so the updater and reconcile never contend for one object; every
write is a read-modify-write with a generation precondition (`update_json`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from tidecd.clients.store import ObjectStore, read_json, update_json
from tidecd.config.load import Application, HelmParameter
from tidecd.images.annotations import IMAGE_LIST
from tidecd.render.overrides import SourceOverride
from tidecd.state.app import now_iso

LOG_LIMIT = 20


def key(app: str) -> str:
    return f"state/images/{app}.json"


@dataclass(frozen=True)
class ImageValue:
    """One image as the updater sets it: `tag` or `digest` (or both: digest of a followed tag)."""

    alias: str
    image: str
    tag: str = ""
    digest: str = ""
    kustomize_name: str = ""
    helm_image_name: str = "image.name"
    helm_image_tag: str = "image.tag"
    helm_image_spec: str = ""

    @property
    def reference(self) -> str:
        """`image:tag`, `image@digest` or `image:tag@digest`."""
        return self.image + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")

    @property
    def version(self) -> str:
        """What the updater compares and reports: the digest when it follows one, else the tag."""
        return self.digest or self.tag

    def kustomize_image(self) -> str:
        """`kustomize edit set image` syntax: `[original=]new[:tag][@digest]`."""
        ref = self.image + (f"@{self.digest}" if self.digest else f":{self.tag}")
        original = self.kustomize_name or self.image
        return ref if original == self.image else f"{original}={ref}"

    def helm_parameters(self) -> tuple[HelmParameter, ...]:
        tag = self.tag + (f"@{self.digest}" if self.digest else "") if self.tag else self.digest
        if self.helm_image_spec:
            return (HelmParameter(self.helm_image_spec, self.reference, force_string=True),)
        return (HelmParameter(self.helm_image_name, self.image, force_string=True),
                HelmParameter(self.helm_image_tag, tag, force_string=True))


@dataclass
class ImagesState:
    app: str
    override: list[ImageValue] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)  # {"at": time, "override": [ImageValue as dict]}
    pin: dict[str, str] | None = None  # {"since", "by", "revision"}
    check: dict[str, Any] = field(default_factory=dict)
    deployed: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # operation id → its override
    refused: list[str] = field(default_factory=list)  # image references a merged revert took out of git

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None, app: str) -> ImagesState:
        if not data:
            return cls(app=app)
        return cls(app=app, override=[ImageValue(**v) for v in data.get("override") or []],
                   log=list(data.get("log") or []), pin=data.get("pin"), check=dict(data.get("check") or {}),
                   deployed=dict(data.get("deployed") or {}),
                   refused=[str(r) for r in data.get("refused") or []][-LOG_LIMIT:])

    def source_override(self) -> SourceOverride:
        return source_override(self.override)

    def set_override(self, values: list[ImageValue], at: str | None = None) -> None:
        by_alias = {v.alias: v for v in self.override}
        by_alias.update({v.alias: v for v in values})
        self.override = [by_alias[a] for a in sorted(by_alias)]
        self.log = [*self.log, {"at": at or now_iso(), "override": [asdict(v) for v in self.override]}][-LOG_LIMIT:]

    def override_at(self, when: str) -> list[ImageValue]:
        """The override in effect at `when` (ISO time): the last log entry not after it."""
        chosen: list[ImageValue] = []
        for entry in self.log:
            if str(entry.get("at", "")) <= when:
                chosen = [ImageValue(**v) for v in entry.get("override") or []]
        return chosen

    def pin_message(self) -> str:
        if not self.pin:
            return ""
        return f"pinned since {self.pin.get('since', '?')} by {self.pin.get('by', '?')}"


def source_override(values: list[ImageValue]) -> SourceOverride:
    return SourceOverride(kustomize_images=tuple(v.kustomize_image() for v in values),
                          helm_parameters=tuple(p for v in values for p in v.helm_parameters()))


def load(store: ObjectStore, app: str) -> ImagesState:
    found = read_json(store, key(app))
    return ImagesState.from_json(found[0] if found else None, app)


def update(store: ObjectStore, app: str, fn: Callable[[ImagesState], None]) -> ImagesState:
    """Read-modify-write with a generation precondition; `fn` mutates the state it is given."""
    result: list[ImagesState] = []

    def change(current: Any) -> dict[str, Any]:
        state = ImagesState.from_json(current, app)
        fn(state)
        result[:] = [state]
        return state.to_json()

    update_json(store, key(app), change)
    return result[-1]


def render_override(store: ObjectStore, app: str) -> SourceOverride | None:
    """The `argocd` write-back override reconcile applies when rendering `app` (None: nothing to apply)."""
    found = read_json(store, key(app))
    if not found or not (found[0] or {}).get("override"):
        return None
    return ImagesState.from_json(found[0], app).source_override()


def sync_marker(override: SourceOverride | None, sha: str, spec: str) -> str:
    """What automated sync applies once: (revision, source spec hash), the `argocd` write-back override
    (`render_override`) included, as Argo CD sees the updater's parameters in the Application's source."""
    return f"{sha}:{spec}" + (f":{override.digest()}" if override else "")


def on_deployed(store: ObjectStore, app: str, operation_id: str) -> None:
    """Remember the override an operation deployed (nothing is written for apps the updater never saw)."""
    found = read_json(store, key(app))
    if not found or not found[0]:
        return

    def change(state: ImagesState) -> None:
        state.deployed[operation_id] = [asdict(v) for v in state.override]
        while len(state.deployed) > LOG_LIMIT:
            del state.deployed[next(iter(state.deployed))]

    update(store, app, change)


def pin(store: ObjectStore, app: str, *, by: str, revision: str, deployed_at: str,
        deployed_by: str = "") -> ImagesState:
    """Hold the app's images: the override goes back to the one the rolled-back deployment (operation
    `deployed_by`) used: none for a deployment made before the updater's first override, and the one in
    effect at `deployed_at` when the record of deployments is full."""
    def change(state: ImagesState) -> None:
        state.pin = {"since": now_iso(), "by": by, "revision": revision}
        if deployed_by in state.deployed:
            restored = [ImageValue(**v) for v in state.deployed[deployed_by]]
        elif len(state.deployed) < LOG_LIMIT:
            restored = []  # deployed before the updater ever wrote an override (every later one is recorded)
        else:
            restored = state.override_at(deployed_at)
        if [asdict(v) for v in restored] != [asdict(v) for v in state.override]:
            state.override = restored
            state.log = [*state.log, {"at": now_iso(), "override": [asdict(v) for v in restored]}][-LOG_LIMIT:]

    return update(store, app, change)


def unpin(store: ObjectStore, app: str, *, refuse: list[str] | None = None) -> bool:
    """Lift the pin; False when there was none (then nothing is written). Without `refuse` (a person's
    unpin) the refused images are cleared too; with it (a merged revert) they are added to."""
    found = read_json(store, key(app))
    if not found or not (found[0] or {}).get("pin"):
        if refuse:
            update(store, app, lambda state: _refuse(state, refuse))
        return False
    had: list[bool] = []

    def change(state: ImagesState) -> None:
        had.append(state.pin is not None)
        state.pin = None
        if refuse is None:
            state.refused = []
        else:
            _refuse(state, refuse)

    update(store, app, change)
    return any(had)


def _refuse(state: ImagesState, refs: list[str]) -> None:
    state.refused = [*[r for r in state.refused if r not in refs], *sorted(set(refs))][-LOG_LIMIT:]


def summary(store: ObjectStore, app: str) -> dict[str, Any]:
    """For `app get` and the api: the override, the pin and the last check (empty when never managed)."""
    found = read_json(store, key(app))
    if not found:
        return {}
    state = ImagesState.from_json(found[0], app)
    return {"override": [v.reference for v in state.override], "pinned": state.pin_message(),
            "check": state.check, "refused": list(state.refused)}


def on_operation_started(store: ObjectStore, app: Application, *, rollback: bool, revision: str, dry_run: bool,
                         deployed_at: str, deployed_by: str = "") -> None:
    """Rollback holds: a rollback pins the images of an app the updater manages at the rolled-back
    deployment's; a manual sync of the app's target revision lifts the pin. Called where every operation
    starts."""
    if dry_run or not app.annotation(IMAGE_LIST):
        return
    if rollback:
        pin(store, app.name, by="rollback", revision=revision, deployed_at=deployed_at or now_iso(),
            deployed_by=deployed_by)
    elif not revision:
        unpin(store, app.name)
