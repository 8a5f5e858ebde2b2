"""A rollback's revert in git: what was opened, and whether it merged (`state/reverts/<app>.json`).

A rollback by hand leaves git saying the newer version; a revert puts git back in step. While the revert is
`open` the rollback's hold stays: automated sync off (`state.app.Automation.disabled`) and the image
updater pinned (`images.state.pin`). `usecases.revert` lifts both when it merges (`merged`), and leaves
them when the pull request is closed unmerged (`closed`: a person decides). One record per app, the
latest revert; kept apart from the app's state so the reconcile step and the revert never contend.

Plain frozen data (no credential: the repository URL is stored redacted).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tidecd.clients.store import ObjectStore, read_json, write_json

OPEN, MERGED, CLOSED = "open", "merged", "closed"
PR, PUSH = "pr", "push"  # how the revert reaches the branch: a pull request, or a commit pushed to it


def key(app: str) -> str:
    return f"state/reverts/{app}.json"


@dataclass(frozen=True)
class Pull:
    """The revert's pull request on GitHub."""

    repo: str = ""  # owner/name
    number: int = 0
    url: str = ""  # its page


@dataclass(frozen=True)
class Revert:
    app: str
    mode: str  # PR | PUSH
    phase: str  # OPEN | MERGED | CLOSED
    repo: str  # the app's repoURL, redacted
    base: str  # the branch the app follows
    commit: str  # the revert commit
    reverted: str  # the revision rolled back from
    revision: str  # the revision rolled back to (its tree is what the revert restores)
    history_id: int
    expected: tuple[tuple[str, str], ...]  # (path, object id or "" for absent) once the revert is in `base`
    branch: str = ""  # the revert's branch (PR); "" when pushed to `base`
    pull: Pull = Pull()
    opened_at: str = ""
    settled_at: str = ""
    seen_head: str = ""  # the last head of `base` checked for the revert (the poll fetches only a new one)

    @property
    def holding(self) -> bool:
        """Does the rollback's hold stand because of this revert (not merged yet, or closed unmerged)?"""
        return self.phase in (OPEN, CLOSED)

    def message(self) -> str:
        where = self.pull.url or f"{self.commit[:12]} on {self.branch or self.base}"
        if self.phase == OPEN:
            return f"rolled back, waiting for the revert to merge: {where}"
        if self.phase == CLOSED:
            return (f"the revert {where} was closed without merging: automated sync stays off and the images "
                    "stay pinned until a person syncs the app or unpins them")
        return f"the revert {where} merged at {self.settled_at}: automated sync and the image updater resumed"

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["expected"] = [list(pair) for pair in self.expected]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Revert:
        names = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in data.items() if k in names}  # a newer version's field is ignored
        known["expected"] = tuple((str(p), str(o)) for p, o in known.get("expected") or ())
        pull = known.get("pull")
        known["pull"] = Pull(**{k: v for k, v in pull.items() if k in ("repo", "number", "url")}) \
            if isinstance(pull, dict) else Pull()
        return cls(**known)

    def summary(self) -> dict[str, Any]:
        """For the api, `app get` and the dashboard."""
        return {"phase": self.phase, "mode": self.mode, "message": self.message(), "url": self.pull.url,
                "pull": self.pull.number, "branch": self.branch, "base": self.base, "commit": self.commit,
                "reverted": self.reverted, "revision": self.revision, "openedAt": self.opened_at,
                "settledAt": self.settled_at}


def load(store: ObjectStore, app: str) -> tuple[Revert | None, int]:
    """The app's latest revert and its generation (None, 0 when it has none; an unreadable one reads as none)."""
    found = read_json(store, key(app))
    if not found or not isinstance(found[0], dict):
        return None, found[1] if found else 0
    try:
        return Revert.from_json(found[0]), found[1]
    except (TypeError, ValueError):
        return None, found[1]


def save(store: ObjectStore, revert: Revert, *, if_generation_match: int | None) -> int:
    return write_json(store, key(revert.app), revert.to_json(), if_generation_match=if_generation_match)


def holding(store: ObjectStore) -> list[Revert]:
    """Every revert still holding its app (the poll checks them)."""
    found = []
    for name in store.list("state/reverts/"):
        app = name.rsplit("/", 1)[-1].removesuffix(".json")
        revert, _ = load(store, app)
        if revert is not None and revert.phase == OPEN:
            found.append(revert)
    return found
