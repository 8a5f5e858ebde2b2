"""Small store records that keep refreshes coalesced and continuations findable.

`pending/<app>`: a refresh of the app is on its way (queued, published, or running). The first caller
creates it "only if absent" and hands the refresh over; every later caller only marks it "again" (with
the revision it was told about), so a burst of webhook deliveries for one app costs one reconcile, plus
at most one re-run at the end when one of them named a revision the run did not see:

    {"since": <unix seconds the current run was claimed>, "again": ["<sha>", ...], "by": "<nonce>"}
    ("" = any revision; `by` names the claiming call, so a claim whose write landed but whose answer was
    lost, and that the store client retried into a precondition failure, is still recognised as its own)

The run that consumed the refresh calls `finish`: no mark (or only marks for the revision it reconciled)
deletes the record; a mark for another revision clears the marks and asks the caller for one more run,
keeping the record (so deliveries during that run keep coalescing). Every write carries a generation
precondition and a lost race re-reads. A record older than `STALE_AFTER` (its run died with its process)
is taken over by the next caller.

`continuations/<app>`: the step an operation asked for next (`scheduled_at`, `delay`, `reason`). Written
before the continuation is handed over and deleted by a step that asks for nothing more, so a
continuation that got lost (a process killed, a message dead-lettered) shows up as an old record: the
poll resumes it (`overdue`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from tidecd.base.errors import PermanentError, TidecdError
from tidecd.clients.store import ObjectStore, PreconditionFailed, read_json, write_json

log = structlog.get_logger("tidecd.triggers.pending")

PENDING = "pending/"
CONTINUATIONS = "continuations/"
STALE_AFTER = 180.0  # a refresh claimed this long ago and never finished belonged to a dead process
MAX_MARKS = 32  # distinct revisions remembered in one record (more: "" = any revision)
OVERDUE_GRACE = 60.0  # minimum slack before a continuation counts as lost (Pub/Sub backoff is best effort)
ATTEMPTS = 20

Clock = Callable[[], float]


def _record(store: ObjectStore, key: str) -> tuple[dict[str, Any] | None, int]:
    try:
        found = read_json(store, key)
    except PermanentError:  # unreadable: treat as absent, the next write replaces it
        found = None
        blob = store.read(key)
        return None, blob.generation if blob else 0
    if found is None:
        return None, 0
    doc, generation = found
    return (doc if isinstance(doc, dict) else None), generation


def claim(store: ObjectStore, app: str, revision: str = "", *, now: Clock = time.time) -> bool:
    """True: the caller must hand the refresh over (it now owns `pending/<app>`). False: a refresh of the
    app is already on its way and was marked "again" with `revision`."""
    key, nonce = PENDING + app, uuid.uuid4().hex
    for _ in range(ATTEMPTS):
        doc, generation = _record(store, key)
        if doc is not None and doc.get("by") == nonce:
            return True  # our own claim: the client retried a write that had landed, and lost to itself
        try:
            if doc is None or now() - float(doc.get("since", 0)) > STALE_AFTER:
                if doc is not None:
                    log.info("pending refresh taken over", app=app, since=doc.get("since"))
                write_json(store, key, {"since": now(), "again": [], "by": nonce}, if_generation_match=generation)
                return True
            marks = [str(m) for m in doc.get("again", []) if isinstance(m, str)]
            if revision in marks or "" in marks:
                return False  # already marked: no write at all
            marks = [""] if len(marks) >= MAX_MARKS else [*marks, revision]
            write_json(store, key, {**doc, "again": marks}, if_generation_match=generation)
            return False
        except PreconditionFailed:
            continue
    return False  # constantly contended: many callers are marking it, one of them got through


def finish(store: ObjectStore, app: str, reconciled: str, *, now: Clock = time.time) -> bool:
    """After the run of a claimed refresh: True when it must run once more (a mark for a revision other than
    `reconciled`, or for any revision), and the record is kept for that run; False when it was deleted."""
    key = PENDING + app
    for _ in range(ATTEMPTS):
        doc, generation = _record(store, key)
        if doc is None:
            return False
        marks = [str(m) for m in doc.get("again", []) if isinstance(m, str)]
        again = any(m == "" or not reconciled.startswith(m) for m in marks)
        try:
            if again:
                write_json(store, key, {"since": now(), "again": []}, if_generation_match=generation)
            else:
                store.delete(key, if_generation_match=generation)
            return again
        except PreconditionFailed:
            continue
    return True  # contended: others keep marking it; one more run is the safe answer


def release(store: ObjectStore, app: str) -> None:
    """Give a claim back (the refresh could not be handed over), so the next caller claims it anew."""
    try:
        store.delete(PENDING + app)
    except TidecdError as exc:
        log.warning("pending record kept", app=app, error=type(exc).__name__)


# --- continuations ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Continuation:
    """The next step an app's operation asked for; `token` names the chain of steps it belongs to."""

    app: str
    scheduled_at: float
    delay: float
    reason: str
    token: str = ""

    @property
    def due(self) -> float:
        return self.scheduled_at + self.delay

    def overdue(self, now: float) -> bool:
        """Nothing ran for more than twice the expected delay (and at least the grace period)."""
        return now > self.scheduled_at + max(2 * self.delay, self.delay + OVERDUE_GRACE)


def record_continuation(store: ObjectStore, app: str, delay: float, reason: str, token: str, *,
                        now: Clock = time.time) -> None:
    write_json(store, CONTINUATIONS + app, {"scheduled_at": now(), "delay": delay, "reason": reason,
                                            "token": token})


def continuation(store: ObjectStore, app: str) -> Continuation | None:
    doc, _ = _record(store, CONTINUATIONS + app)
    return _continuation(app, doc) if doc is not None else None


def _continuation(app: str, doc: dict[str, Any]) -> Continuation | None:
    try:
        return Continuation(app, float(doc["scheduled_at"]), float(doc["delay"]), str(doc.get("reason", "")),
                            str(doc.get("token", "")))
    except (KeyError, TypeError, ValueError):
        return None


def clear_continuation(store: ObjectStore, app: str) -> None:
    """The app's operation asks for no further step (absent already is fine)."""
    store.delete(CONTINUATIONS + app)


def continuations(store: ObjectStore) -> list[Continuation]:
    """Every recorded continuation (one list call, one read per record)."""
    found = []
    for key in sorted(store.list(CONTINUATIONS)):
        doc, _ = _record(store, key)
        if doc is not None and (cont := _continuation(key[len(CONTINUATIONS):], doc)) is not None:
            found.append(cont)
    return found
