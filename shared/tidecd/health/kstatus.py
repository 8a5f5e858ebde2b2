"""The generic fallback for custom resources with no check of their own: kstatus-style conditions.

kstatus (sigs.k8s.io/cli-utils) defines the conventions many controllers follow (Flux, Config Connector,
kro, Crossplane-style providers): a stale `status.observedGeneration` means the latest spec is not yet
observed; `Reconciling: True` means work in progress; `Stalled: True` means the controller gave up. Then
`Ready` gives the verdict (True → Healthy, False → Degraded, Unknown → Progressing). An object that shows
none of these signals has no health (None), as a custom resource without a check has none in Argo CD, so
it never holds an app at Progressing forever.
"""

from __future__ import annotations

from tidecd.base.model import HealthResult, HealthStatus, Manifest
from tidecd.health._fields import condition, get, text


def check(obj: Manifest) -> HealthResult | None:
    generation, observed = get(obj, "metadata", "generation"), get(obj, "status", "observedGeneration")
    if isinstance(generation, int) and isinstance(observed, int) and observed != generation:
        return HealthResult(HealthStatus.PROGRESSING, f"{text(obj, 'kind')} generation is {generation}, "
                                                      f"but latest observed generation is {observed}")
    stalled, reconciling = condition(obj, "Stalled"), condition(obj, "Reconciling")
    if stalled is not None and stalled.get("status") == "True":
        return HealthResult(HealthStatus.DEGRADED, _said(stalled, "Stalled"))
    if reconciling is not None and reconciling.get("status") == "True":
        return HealthResult(HealthStatus.PROGRESSING, _said(reconciling, "Reconciling"))
    ready = condition(obj, "Ready")
    if ready is None:
        return None
    verdict = {"True": HealthStatus.HEALTHY, "False": HealthStatus.DEGRADED}.get(str(ready.get("status")),
                                                                               HealthStatus.PROGRESSING)
    return HealthResult(verdict, _said(ready, "" if verdict is HealthStatus.HEALTHY else "Ready"))


def _said(cond: dict[str, object], name: str) -> str:
    """The condition's message, or its reason; `name: reason` when it says nothing else."""
    message, reason = str(cond.get("message") or ""), str(cond.get("reason") or "")
    if message:
        return message
    return f"{name}: {reason}" if name and reason else reason
