"""Argo CD's notification catalog (notifications_catalog/install.yaml of argo-cd v3.6.1) as a team has it in
its argocd-notifications-cm: the catalog's triggers as they are, and its templates' message, email subject,
Slack attachments and Teams title and facts (`catalog_cm`). Built here from what the catalog says, for the
notification tests that must send the catalog's messages."""

from __future__ import annotations

from typing import Any

import yaml

_REPO = ('{{- if .app.spec.source }} ":arrow_heading_up: {{ .app.spec.source.repoURL }}" {{- else if '
         '.app.spec.sources }} "{{- range $index, $source := .app.spec.sources }}{{ if $index }}\\n{{ end }}'
         ':arrow_heading_up: {{ $source.repoURL }}{{- end }}" {{- end }}')
_LINK = "{{.context.argocdUrl}}/applications/{{.app.metadata.name}}"


def _slack(color: str, first: tuple[str, str]) -> str:
    return ('[{"title": "{{ .app.metadata.name}}", "title_link":"' + _LINK + '", "color": "' + color + '", '
            '"fields": [{"title": "' + first[0] + '", "value": "' + first[1] + '", "short": true}, '
            '{"title": {{- if .app.spec.source }} "Repository" {{- else if .app.spec.sources }} "Repositories" '
            '{{- end }}, "value": ' + _REPO + ', "short": true}'
            '{{range $index, $c := .app.status.conditions}}, {"title": "{{$c.type}}", "value": "{{$c.message}}", '
            '"short": true}{{end}}]}]')


def _teams(first: tuple[str, str], title: str) -> dict[str, Any]:
    return {"title": title, "facts": '[{"name": "' + first[0] + '", "value": "' + first[1] + '"}]'}


_SYNC = ("Sync Status", "{{.app.status.sync.status}}")
_OP = "Sync operation details are available at: " + _LINK + "?operation=true .\n"
CATALOG_TEMPLATES: dict[str, dict[str, Any]] = {
    "app-created": {"email": {"subject": "Application {{.app.metadata.name}} has been created."},
                    "message": "Application {{.app.metadata.name}} has been created.",
                    "teams": {"title": "Application {{.app.metadata.name}} has been created."}},
    "app-deployed": {
        "email": {"subject": "New version of an application {{.app.metadata.name}} is up and running."},
        "message": '{{if eq .serviceType "slack"}}:white_check_mark:{{end}} Application {{.app.metadata.name}} is '
                   "now running new version of deployments manifests.\n",
        "slack": {"attachments": _slack("#18be52", _SYNC), "deliveryPolicy": "Post", "groupingKey": "",
                  "notifyBroadcast": False},
        "teams": {**_teams(_SYNC, "New version of an application {{.app.metadata.name}} is up and running."),
                  "themeColor": "#000080"}},
    "app-health-degraded": {
        "email": {"subject": "Application {{.app.metadata.name}} has degraded."},
        "message": '{{if eq .serviceType "slack"}}:exclamation:{{end}} Application {{.app.metadata.name}} has '
                   "degraded.\nApplication details: " + _LINK + ".\n",
        "slack": {"attachments": _slack("#f4c030", ("Health Status", "{{.app.status.health.status}}"))},
        "teams": _teams(("Health Status", "{{.app.status.health.status}}"),
                        "Application {{.app.metadata.name}} has degraded.")},
    "app-sync-failed": {
        "email": {"subject": "Failed to sync application {{.app.metadata.name}}."},
        "message": '{{if eq .serviceType "slack"}}:exclamation:{{end}}  The sync operation of application '
                   "{{.app.metadata.name}} has failed at {{.app.status.operationState.finishedAt}} with the "
                   "following error: {{.app.status.operationState.message}}\n" + _OP,
        "slack": {"attachments": _slack("#E96D76", _SYNC)},
        "teams": _teams(_SYNC, "Failed to sync application {{.app.metadata.name}}.")},
    "app-sync-running": {
        "email": {"subject": "Start syncing application {{.app.metadata.name}}."},
        "message": "The sync operation of application {{.app.metadata.name}} has started at "
                   "{{.app.status.operationState.startedAt}}.\n" + _OP,
        "slack": {"attachments": _slack("#0DADEA", _SYNC)},
        "teams": _teams(_SYNC, "Start syncing application {{.app.metadata.name}}.")},
    "app-sync-status-unknown": {
        "email": {"subject": "Application {{.app.metadata.name}} sync status is 'Unknown'"},
        "message": '{{if eq .serviceType "slack"}}:exclamation:{{end}} Application {{.app.metadata.name}} sync '
                   "is 'Unknown'.\nApplication details: " + _LINK + ".\n",
        "slack": {"attachments": _slack("#E96D76", _SYNC)},
        "teams": _teams(_SYNC, "Application {{.app.metadata.name}} sync status is 'Unknown'")},
    "app-sync-succeeded": {
        "email": {"subject": "Application {{.app.metadata.name}} has been successfully synced."},
        "message": '{{if eq .serviceType "slack"}}:white_check_mark:{{end}} Application {{.app.metadata.name}} '
                   "has been successfully synced at {{.app.status.operationState.finishedAt}}.\n" + _OP,
        "slack": {"attachments": _slack("#18be52", _SYNC)},
        "teams": _teams(_SYNC, "Application {{.app.metadata.name}} has been successfully synced")},
}
ONCE_PER = "app.status.operationState?.syncResult?.revision"
CATALOG_TRIGGERS: dict[str, dict[str, Any]] = {
    "on-created": {"oncePer": "app.metadata.name", "send": ["app-created"], "when": "true"},
    "on-deployed": {"oncePer": ONCE_PER, "send": ["app-deployed"], "when": (
        "app.status.operationState != nil and app.status.operationState.phase in ['Succeeded'] and "
        "app.status.health.status == 'Healthy' and (!time.Parse(app.status.health.lastTransitionTime).Add(1 * "
        "time.Minute).Before(time.Parse(app.status.operationState.finishedAt)) or "
        "time.Parse(app.status.health.lastTransitionTime).Before(time.Parse(app.status.operationState.startedAt)))")},
    "on-health-degraded": {"oncePer": ONCE_PER, "send": ["app-health-degraded"],
                           "when": "app.status.health.status == 'Degraded'"},
    "on-sync-failed": {"oncePer": ONCE_PER, "send": ["app-sync-failed"], "when": (
        "app.status.operationState != nil and app.status.operationState.phase in ['Error', 'Failed']")},
    "on-sync-running": {"oncePer": ONCE_PER, "send": ["app-sync-running"], "when": (
        "app.status.operationState != nil and app.status.operationState.phase in ['Running']")},
    "on-sync-status-unknown": {"oncePer": ONCE_PER, "send": ["app-sync-status-unknown"],
                               "when": "app.status.sync.status == 'Unknown'"},
    "on-sync-succeeded": {"oncePer": ONCE_PER, "send": ["app-sync-succeeded"], "when": (
        "app.status.operationState != nil and app.status.operationState.phase in ['Succeeded']")},
}
ARGOCD_URL = "https://argocd.example.com"


def catalog_cm(services_yaml: dict[str, str]) -> dict[str, Any]:
    data = {f"template.{k}": yaml.safe_dump(v, sort_keys=False) for k, v in CATALOG_TEMPLATES.items()}
    data |= {f"trigger.{k}": yaml.safe_dump([{"description": k, **v}], sort_keys=False)
             for k, v in CATALOG_TRIGGERS.items()}
    data |= {"context": yaml.safe_dump({"argocdUrl": ARGOCD_URL})} | services_yaml
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argocd-notifications-cm"}, "data": data}


