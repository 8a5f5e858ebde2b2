"""RollingSync (Argo CD's progressive syncs), the decision alone: which generated apps sync now.

Pure, so every trigger (a poll tick, a webhook, the end of a generated app's operation) asks the same
question of the same data and none waits: the answer is data (each app's `applicationStatus`) recorded
with the ApplicationSet and continued by the next trigger.

As Argo CD's ApplicationSet controller does it (applicationset_controller.go): an app belongs to the
first step whose `matchExpressions` all select its labels (`In`: its value is one of `values`; `NotIn`:
it is not); an app of no step is never synced by the strategy. Step 0 may always sync; step i only once
every app of the steps before it is Healthy. Within an allowed step, at most `maxUpdate` apps are
Pending or Progressing at once (an int, or a percent of the step's apps rounded down but at least 1 for
more than 0%; unset means all). Statuses: Waiting (changes to apply), Pending (chosen to sync),
Progressing (its sync runs or has not ended Healthy yet), Healthy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

WAITING, PENDING, PROGRESSING, HEALTHY = "Waiting", "Pending", "Progressing", "Healthy"
OPERATORS = ("In", "NotIn")


@dataclass(frozen=True)
class Expression:
    key: str
    operator: str  # one of OPERATORS (checked when the ApplicationSet is read)
    values: tuple[str, ...]

    def selects(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "NotIn":
            return value not in self.values
        return value is not None and value in self.values


@dataclass(frozen=True)
class Step:
    expressions: tuple[Expression, ...]
    max_update: int | str | None = None  # 3, "10%", or None for every app of the step

    def limit(self, size: int) -> int:
        """How many of the step's `size` apps may be Pending or Progressing at once."""
        if self.max_update is None:
            return size
        if isinstance(self.max_update, int):
            return self.max_update
        percent = float(self.max_update.rstrip("%"))
        scaled = math.floor(size * percent / 100)
        return max(scaled, 1) if percent > 0 and size > 0 else scaled


@dataclass(frozen=True)
class AppView:
    """What the decision reads of one generated app's state."""

    labels: Mapping[str, str]
    synced: bool  # no change left to apply
    healthy: bool
    running: bool  # an operation runs now


def step_of(labels: Mapping[str, str], steps: Sequence[Step]) -> int | None:
    """The first step selecting `labels` (Argo CD keeps the first when two steps select an app)."""
    for index, step in enumerate(steps):
        if all(e.selects(labels) for e in step.expressions):
            return index
    return None


def observed(previous: str, app: AppView) -> tuple[str, str]:
    """An app's status from its previous one and its state now, with why (Argo CD's messages' sense)."""
    if app.running:
        return (PROGRESSING, "its sync operation runs") if previous in (PENDING, PROGRESSING) else \
            (previous or WAITING, "an operation runs")
    done = app.synced and app.healthy
    if previous in (PENDING, PROGRESSING):
        return (HEALTHY, "synced and Healthy") if done else \
            (previous, "waiting for it to become Synced and Healthy")
    if not app.synced:
        return WAITING, "it has changes to apply"
    if app.healthy:
        return HEALTHY, "synced and Healthy"
    return WAITING, "not Healthy yet"


def decide(steps: Sequence[Step], apps: Mapping[str, AppView],
           previous: Mapping[str, str]) -> tuple[dict[str, tuple[str, str, int | None]], list[str]]:
    """Every app's (status, message, step) and the apps to sync now (newly Pending, by name)."""
    statuses: dict[str, tuple[str, str, int | None]] = {}
    members: list[list[str]] = [[] for _ in steps]
    for name in sorted(apps):
        found = step_of(apps[name].labels, steps)
        status, message = observed(previous.get(name, ""), apps[name])
        if found is None:
            status, message = WAITING if not apps[name].synced else HEALTHY, "selected by no step: synced by hand only"
        else:
            members[found].append(name)
        statuses[name] = (status, message, found)
    start: list[str] = []
    for index, step in enumerate(steps):
        if any(statuses[n][0] != HEALTHY for earlier in members[:index] for n in earlier):
            break  # a step waits for every app of the steps before it to be Healthy
        busy = sum(1 for n in members[index] if statuses[n][0] in (PENDING, PROGRESSING))
        for name in members[index]:
            if statuses[name][0] == WAITING and not apps[name].synced and busy < step.limit(len(members[index])):
                statuses[name] = (PENDING, f"chosen to sync in step {index + 1}", index)
                start.append(name)
                busy += 1
    return statuses, start
