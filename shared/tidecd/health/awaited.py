"""When to look again at objects that are not Healthy yet: scheduled by what is awaited, not a fixed delay.

Pure: live objects and the time in, seconds out (health's knowledge of when a kind can be done). The step
asks it for the delay of its next continuation when a wave waits for health (`stepping.Step.advance`) and
when an app whose sync ended is still Progressing (`stepping.Step.run`, after `record.health_follow_since`).
The delay is:

- a **backoff**: half as long as the objects have been waited for (since the newest of their creation, a
  Deployment's last progress, a Job's or Pod's start, and the wait's own start), at least `MIN_DELAY`,
  at most `MAX_BACKOFF`: an object that turns Healthy in seconds is seen in seconds, one that takes
  minutes costs a step every `MAX_BACKOFF` seconds, not every few seconds;
- never before the **earliest time** every object can be done: a Deployment with `minReadySeconds` is
  not available before its new pods have been ready that long (from its last progress);
- never after a **deadline** that ends the wait by itself: a Deployment's `progressDeadlineSeconds` (it
  turns Degraded), a Job's `activeDeadlineSeconds` (it fails).

Before any continuation, the step itself looks a few times in its first two seconds (`first_look`): most
objects are Healthy a tenth of a second after their apply, and then no continuation is needed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from tidecd.base.clock import unix
from tidecd.base.model import Manifest
from tidecd.health._fields import condition, integer, text

MIN_DELAY = 1.0
MAX_BACKOFF = 15.0
DEADLINE_SLACK = 1.0  # seconds after a deadline, so the controller has written what it decided

# Within a step: after a sync that ended with its app Progressing, health is read again for at most
# HEALTH_AWAIT (the instance is held meanwhile: `stepping.Observer.await_health`), first HEALTH_LOOK seconds
# after the sync, then each look HEALTH_BACKOFF times later than the one before. In the scale run the
# controllers made a new Deployment and Ingress Healthy 30 ms (p10), 63 ms (p50), 106 ms (p90) and 207 ms
# (p99) after the apply: looks every 0.25 s held each instance a quarter second for a tenth's news.
HEALTH_AWAIT = 2.0
HEALTH_LOOK = 0.025
HEALTH_BACKOFF = 1.6
HEALTH_READS = 32  # GETs at most in that read: an app with many objects not Healthy looks less often


def next_check(objects: Iterable[Manifest], now: float, *, since: float = 0.0) -> float:
    """Seconds until the next look at `objects` (those not Healthy yet), `since` the wait began (unix)."""
    started, earliest, latest = since, 0.0, float("inf")
    for obj in objects:
        started = max(started, _progress(obj))
        earliest = max(earliest, _earliest(obj))
        latest = min(latest, _deadline(obj))
    waited = max(0.0, now - started) if started else 0.0
    delay = max(min(MAX_BACKOFF, waited / 2), earliest - now)
    if latest != float("inf"):
        delay = min(delay, latest - now + DEADLINE_SLACK)
    return round(max(MIN_DELAY, delay), 2)


def _progress(obj: Manifest) -> float:
    """The newest time the object was created or moved on (unix; 0 when it says none)."""
    found = [unix(text(obj, "metadata", "creationTimestamp")), unix(text(obj, "status", "startTime"))]
    progressing = condition(obj, "Progressing")
    if progressing is not None:
        found.append(unix(str(progressing.get("lastUpdateTime") or "")))
    return max(found)


def _earliest(obj: Manifest) -> float:
    """A Deployment whose updated replicas are not all available: not before `minReadySeconds` after its
    last progress."""
    if obj.get("kind") != "Deployment":
        return 0.0
    ready = integer(obj, "spec", "minReadySeconds")
    progressing = condition(obj, "Progressing")
    if ready <= 0 or progressing is None:
        return 0.0
    if integer(obj, "status", "availableReplicas") >= integer(obj, "status", "updatedReplicas"):
        return 0.0
    at = unix(str(progressing.get("lastUpdateTime") or ""))
    return at + ready if at else 0.0


def _deadline(obj: Manifest) -> float:
    """When the object ends the wait by itself: a Deployment's progress deadline, a Job's active deadline."""
    kind = obj.get("kind")
    if kind == "Deployment":
        progressing = condition(obj, "Progressing")
        at = unix(str(progressing.get("lastUpdateTime") or "")) if progressing is not None else 0.0
        seconds = integer(obj, "spec", "progressDeadlineSeconds", default=600)
        return at + seconds if at else float("inf")
    if kind == "Job":
        start, seconds = unix(text(obj, "status", "startTime")), integer(obj, "spec", "activeDeadlineSeconds")
        return start + seconds if start and seconds > 0 else float("inf")
    return float("inf")


def first_look(unhealthy: int) -> float:
    """Seconds before the health await's first look at `unhealthy` objects. Looks grow HEALTH_BACKOFF times
    apart, spread so that HEALTH_READS GETs are never exceeded: 1 to 3 objects are first looked at after
    HEALTH_LOOK (8 looks fit in HEALTH_AWAIT), 16 twice, 17 to 32 once near the end, more not at all (the
    first look would come after the await). The last look is planned HEALTH_LOOK before the await's end,
    so it is not lost to rounding."""
    looks = HEALTH_READS / max(1, unhealthy)
    span = HEALTH_AWAIT - HEALTH_LOOK
    return max(HEALTH_LOOK, span * (HEALTH_BACKOFF - 1) / (math.pow(HEALTH_BACKOFF, looks) - 1))
