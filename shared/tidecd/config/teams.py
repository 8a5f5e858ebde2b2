"""Team config sources: the serverless analogue of Argo CD's "applications in any namespace".

Argo CD lets a team keep Applications in its own namespace; an app there may use an AppProject only when
the project's `spec.sourceNamespaces` lists that namespace (a glob, or `/regex/`), while apps in Argo CD's
own namespace may use any project. tidecd has no namespaces for Applications: its main config source
(`TIDECD_CONFIG`, the platform team's) plays Argo CD's own namespace, and each team's config source, named
in the main source's ConfigMap `tidecd-config-sources`, plays a team namespace whose name is the team's.

So a team's source can never widen what its team may do: it defines Applications only (the loader refuses
anything else, naming the file), each app may use only a project of the main source whose
`spec.sourceNamespaces` admits the team, and an app whose name another source already defines is refused
for the later source only. A team source that cannot be read is a problem of its own; the others load.
"""

from __future__ import annotations

import dataclasses
import re

from tidecd.base.globs import glob_match
from tidecd.config.load import Application, AppProject, Config, TeamSource, parse_config_source


def admits(project: AppProject, team: str) -> bool:
    """Whether the project's `spec.sourceNamespaces` lets `team`'s source use it (Argo CD's
    `glob.MatchStringInList(..., glob.REGEXP)`: a `/regex/` entry is searched, any other one is a glob)."""
    for pattern in project.source_namespaces:
        if len(pattern) > 2 and pattern.startswith("/") and pattern.endswith("/"):
            try:
                if re.search(pattern[1:-1], team):
                    return True
            except re.error:
                continue
        elif glob_match(pattern, team):
            return True
    return False


def refusal(config: Config, team: str, app: Application) -> str:
    """Why `team`'s source may not define `app` (its project is missing or does not admit the team), else ""."""
    where = f"{app.origin}: Application/{app.name}: spec.project"
    project = config.projects.get(app.project)
    if project is None:
        return (f"{where}: project {app.project!r} is not defined in the main config source (a team's apps "
                "use the platform's AppProjects)")
    if admits(project, team):
        return ""
    listed = ", ".join(project.source_namespaces) or "empty"
    return (f"{where}: project {app.project!r} does not admit team config source {team!r}: its "
            f"spec.sourceNamespaces ({listed}) does not list the team ({project.origin or 'built in'}); "
            "nothing of this app is applied")


def join(config: Config, team: TeamSource, loaded: Config) -> Config:
    """`config` with what `team`'s source (`loaded`, read with `load_config(team=...)`) may add: its apps
    that pass `refusal` are apps; the others are set aside with the reason; an app whose name is already
    taken is refused for this source only (a problem), so the first definition keeps working."""
    apps, invalid, owners = dict(config.applications), dict(config.invalid), dict(config.teams)
    problems = [*config.problems, *(f"team config source {team.name!r}: {p}" for p in loaded.problems)]
    for name, message in sorted(loaded.invalid.items()):
        if taken := _owner(config, name):
            problems.append(f"team config source {team.name!r}: Application/{name}: metadata.name: already "
                            f"defined by {taken}; refused here: {message}")
        else:
            invalid[name], owners[name] = message, team.name
    for name, app in sorted(loaded.applications.items()):
        if taken := _owner(config, name):
            problems.append(f"{app.origin}: Application/{name}: metadata.name: already defined by {taken}; app "
                            f"names are one namespace across config sources, so team {team.name!r}'s is refused")
            continue
        owners[name] = team.name
        if reason := refusal(config, team.name, app):
            invalid[name] = reason
        else:
            apps[name] = app
    return dataclasses.replace(config, applications=apps, invalid=invalid, problems=problems, teams=owners)


def unavailable(config: Config, team: TeamSource, reason: str) -> Config:
    """`config` with `team`'s source reported as unreadable (unreachable, not a directory): its apps are
    unknown until it loads again; every other source's apps keep working."""
    problem = (f"{team.origin}: team config source {team.name!r} ({display(team)}) could not be loaded, so its "
               f"apps are unknown until it loads again: {reason}")
    return dataclasses.replace(config, problems=[*config.problems, problem])


def display(team: TeamSource) -> str:
    """The team's source as logs and answers may show it (no credentials in a repository URL)."""
    return str(parse_config_source(team.spec, what=f"team config source {team.name!r}"))


def _owner(config: Config, name: str) -> str:
    if name not in config.applications and name not in config.invalid:
        return ""
    team = config.teams.get(name)
    return f"team config source {team!r}" if team else "the main config source"
