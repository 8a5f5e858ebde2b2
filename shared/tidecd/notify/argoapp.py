"""The Application as Argo CD's notification controller sees it: the unstructured object (`metadata`,
`spec`, `status`) that trigger conditions and templates read as `app`, built from tidecd's Application and
its recorded state. Pure.

Fields tidecd records under other names are mapped to Argo CD's (`status.operationState.syncResult.revision`,
`operation.initiatedBy`, `status.health.lastTransitionTime`, ...). `lastTransitionTime` of the health is
when the notifications last saw the health change (tidecd's state keeps no such time), given by the caller.
Argo CD fields tidecd has no value for are absent, as in an object where Argo CD left them unset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tidecd.config.model import Application, ApplicationSource, AppProject
from tidecd.state.app import AppState, OperationPhase

NAMESPACE = "argocd"  # the namespace Argo CD's Applications live in; tidecd's apps have none of their own


def _source(source: ApplicationSource) -> dict[str, Any]:
    out: dict[str, Any] = {"repoURL": source.repo_url, "targetRevision": source.target_revision}
    if source.chart:
        out["chart"] = source.chart
    elif source.path:
        out["path"] = source.path
    if source.ref:
        out["ref"] = source.ref
    if source.name:
        out["name"] = source.name
    return out


def _operation_state(state: AppState) -> dict[str, Any] | None:
    op = state.operation
    if op is None:
        return None
    who = op.request.initiated_by
    initiated = {"automated": True} if op.request.automated or who == "automated" else {"username": who}
    sync: dict[str, Any] = {"revision": op.revision}
    if op.revisions:
        sync["revisions"] = list(op.revisions)
    if op.request.prune:
        sync["prune"] = True
    if op.request.sync_options:
        sync["syncOptions"] = list(op.request.sync_options)
    result: dict[str, Any] = {"revision": op.revision, "resources": [
        {"group": r.key.group, "kind": r.key.kind, "namespace": r.key.namespace, "name": r.key.name,
         "status": "Synced" if r.phase.value == "Succeeded" else r.phase.value, "message": r.message,
         "hookPhase": r.phase.value, "syncPhase": r.sync_phase} for r in op.results]}
    if op.revisions:
        result["revisions"] = list(op.revisions)
    out: dict[str, Any] = {"operation": {"sync": sync, "initiatedBy": initiated, "retry": {}},
                           "phase": op.phase.value, "message": op.message, "syncResult": result,
                           "startedAt": op.started_at}
    if op.retry.count:
        out["retryCount"] = op.retry.count
    if op.finished_at and op.phase is not OperationPhase.RUNNING:
        out["finishedAt"] = op.finished_at
    return out


def application(app: Application, state: AppState, *, health_since: str = "",
                namespace: str = NAMESPACE) -> dict[str, Any]:
    """Argo CD's Application object for `app` in `state` (JSON data: what `app` is in an expr condition
    and `.app` in a template)."""
    metadata: dict[str, Any] = {"name": app.name, "namespace": namespace}
    if app.labels:
        metadata["labels"] = dict(app.labels)
    if app.annotations:
        metadata["annotations"] = dict(app.annotations)
    destination = {k: v for k, v in (("server", app.destination.server), ("name", app.destination.name),
                                     ("namespace", app.destination.namespace)) if v}
    spec: dict[str, Any] = {"project": app.project, "destination": destination}
    if app.sources:
        spec["sources"] = [_source(s) for s in app.sources]
    else:
        spec["source"] = _source(app.source)
    if app.sync_policy.automated:
        spec["syncPolicy"] = {"automated": {"prune": app.sync_policy.prune, "selfHeal": app.sync_policy.self_heal}}
    health: dict[str, Any] = {"status": state.health.value}
    if state.health_message:
        health["message"] = state.health_message
    if health_since:
        health["lastTransitionTime"] = health_since
    sync: dict[str, Any] = {"status": state.sync_status.value, "revision": state.revision}
    if state.revisions:
        sync["revisions"] = list(state.revisions)
    status: dict[str, Any] = {
        "sync": sync, "health": health,
        "resources": [_resource(r) for r in state.resources],
        "history": [{"id": h.id, "revision": h.revision, "deployedAt": h.deployed_at,
                     **({"initiatedBy": {"username": h.initiated_by}} if h.initiated_by else {})}
                    for h in state.history],
    }
    if state.conditions:
        status["conditions"] = [_condition(c) for c in state.conditions]
    if state.memo.reconciled_at:
        status["reconciledAt"] = state.memo.reconciled_at
    if (operation := _operation_state(state)) is not None:
        status["operationState"] = operation
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": metadata, "spec": spec,
            "status": status}


def _resource(r: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"group": r.group, "kind": r.kind, "namespace": r.namespace, "name": r.name,
                           "status": r.status.value}
    if r.health is not None:
        out["health"] = {"status": r.health.value, **({"message": r.health_message} if r.health_message else {})}
    return out


def _condition(condition: Mapping[str, Any]) -> dict[str, Any]:
    out = {"type": str(condition.get("type", "")), "message": str(condition.get("message", ""))}
    if condition.get("at"):
        out["lastTransitionTime"] = str(condition["at"])
    return out


def project(proj: AppProject | None) -> dict[str, Any]:
    """The AppProject as Argo CD's notification controller hands it to templates (`.appProject`): its
    metadata and the spec fields tidecd keeps that users print (description, sourceRepos, destinations);
    empty when the project is unknown, as in Argo CD."""
    if proj is None:
        return {}
    metadata: dict[str, Any] = {"name": proj.name, "namespace": NAMESPACE}
    if proj.annotations:
        metadata["annotations"] = dict(proj.annotations)
    spec: dict[str, Any] = {"sourceRepos": list(proj.source_repos), "destinations": [
        {k: v for k, v in (("server", d.server), ("name", d.name), ("namespace", d.namespace)) if v}
        for d in proj.destinations]}
    if proj.description:
        spec["description"] = proj.description
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": metadata, "spec": spec}
